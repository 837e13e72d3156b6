"""The dry run (``plan=true``): validates, describes, estimates, and starts nothing."""
from __future__ import annotations

import pytest

from pipeline.dryrun import RAY_START_SECONDS, wall_seconds
from pipeline.errors import ConfigError
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose


def test_dry_run_starts_nothing_and_estimates(tmp_path, capsys, monkeypatch):
    import pipeline.run as run_mod

    def no_connect(*a, **k):
        raise AssertionError("a dry run must not start Ray")

    monkeypatch.setattr(run_mod, "connect", no_connect)
    out = tmp_path / "out"
    cfg = to_plain(compose(["+sweep=smoke", f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db",
                            "plan=true", "plan_cpus=16", "params.events=100000"]))
    res = run_sweep(cfg)
    text = capsys.readouterr().out
    assert res["dry_run"] and not out.exists() and not (tmp_path / "m.db").exists()
    assert "4 points, 12 tasks (8 simulations)" in text and "8e+05 events in all" in text
    assert "measured CPU time per event here" in text and "on 16 CPUs" in text


def test_dry_run_refuses_a_bad_cluster_size(tmp_path):
    cfg = to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path}", "plan=true", "plan_cpus=0"]))
    with pytest.raises(ConfigError, match="plan_cpus=0"):
        run_sweep(cfg)


def test_wall_time_is_the_longest_first_schedule():
    assert wall_seconds([4, 3, 3, 2], 2) == pytest.approx(6 + RAY_START_SECONDS)  # {4,2} {3,3}
    assert wall_seconds([5, 1, 1, 1], 8) == pytest.approx(5 + RAY_START_SECONDS)
    assert wall_seconds([1.0] * 10, 1) == pytest.approx(10 + RAY_START_SECONDS)
