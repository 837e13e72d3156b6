"""One run, one folder (pipeline/runfolder.py): the pipeline makes the run folder itself,
exclusively, after validation; a name taken in the same second gets a suffix; an existing
``output_dir`` is refused (exit 2, one line); refused inputs and dry runs make no folder."""
from __future__ import annotations

import logging
import threading

import polars as pl
import pytest

import pipeline.run
import pipeline.runfolder
from pipeline.__main__ import run_cli
from pipeline.errors import ConfigError
from pipeline.run import EXIT_CONFIG, run_sweep, to_plain
from pipeline.runfolder import LOG_NAME, create_exclusive, new_run_folder
from tests.helpers import compose

#: two tasks of a few thousand events: the serial backend, no Ray, no MLflow
TINY = ["+sweep=smoke", "axes.n_servers=[20]", "axes.d=[2]", "replications=1", "params.events=20000",
        "engines=[agent]", "execution.backend=serial", "execution.progress=false", "mlflow.enabled=false"]


def test_a_taken_name_gets_the_next_suffix(tmp_path):
    first = new_run_folder(tmp_path / "smoke", "2026-12-04_21-00-00")
    second = new_run_folder(tmp_path / "smoke", "2026-12-04_21-00-00")
    (tmp_path / "smoke" / "2026-12-04_21-00-00-3").mkdir()  # taken by someone else
    fourth = new_run_folder(tmp_path / "smoke", "2026-12-04_21-00-00")
    assert [first.name, second.name, fourth.name] == [
        "2026-12-04_21-00-00", "2026-12-04_21-00-00-2", "2026-12-04_21-00-00-4"]


def test_concurrent_claims_of_one_name_get_distinct_folders(tmp_path):
    start, got = threading.Barrier(8), []

    def claim():
        start.wait()
        got.append(new_run_folder(tmp_path / "smoke", "same-second"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 8
    assert sorted(p.name for p in (tmp_path / "smoke").iterdir()) == sorted(p.name for p in got)


def test_an_existing_folder_is_refused_with_the_resume_hint_for_a_run_folder(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError, match="exists: give a new folder"):
        create_exclusive(plain)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"python -m pipeline.resume {run}"):
        create_exclusive(run)
    made = create_exclusive(tmp_path / "new" / "deeper")
    assert made.is_dir() and not any(made.iterdir())


def _no_ray(monkeypatch):
    def connect(*a, **k):
        raise AssertionError("Ray's connect was called")

    monkeypatch.setattr(pipeline.run, "connect", connect)


def test_two_runs_in_one_second_get_two_folders_each_with_its_own_rows(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipeline.runfolder, "stamp", lambda: "2026-12-04_21-00-00")
    monkeypatch.setattr(pipeline.run, "stamp", lambda: "2026-12-04_21-00-00")
    with caplog.at_level(logging.INFO, logger="pipeline"):
        a = run_sweep(to_plain(compose([*TINY, "params.lam=0.5"])), quiet=True)
        b = run_sweep(to_plain(compose([*TINY, "params.lam=0.7"])), quiet=True)
    pipeline.runfolder.close_log()
    root = tmp_path / "outputs" / "smoke"
    assert a["output_dir"] == root / "2026-12-04_21-00-00"
    assert b["output_dir"] == root / "2026-12-04_21-00-00-2"
    assert sorted(p.name for p in root.iterdir()) == ["2026-12-04_21-00-00", "2026-12-04_21-00-00-2"]
    for out, lam in ((a, 0.5), (b, 0.7)):
        frame = pl.read_parquet(out["output_dir"] / "results.parquet")
        assert frame.height == len(out["plan"].tasks) == 1
        assert frame["lam"].to_list() == [lam] and frame["run_id"].to_list() == [out["run_id"]]
        # config.yaml names the folder (resume and reproduce read it); the log is in the folder
        assert f"output_dir: {out['output_dir']}" in (out["output_dir"] / "config.yaml").read_text()
        assert f"output {out['output_dir']}" in (out["output_dir"] / LOG_NAME).read_text()


def test_an_existing_output_dir_is_refused_before_ray_in_one_line(tmp_path, monkeypatch, caplog):
    _no_ray(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with caplog.at_level(logging.INFO, logger="pipeline"):
        code = run_cli(lambda: run_sweep(to_plain(compose([*TINY, f"output_dir={out}"])), quiet=True))
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert code == EXIT_CONFIG and len(shown) == 1 and "exists: give a new folder" in shown[0], shown
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_refused_input_and_dry_run_make_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _no_ray(monkeypatch)
    code = run_cli(lambda: run_sweep(to_plain(compose([*TINY, "params.lam=1.5"])), quiet=True))
    assert code == EXIT_CONFIG
    out = run_sweep(to_plain(compose([*TINY, "plan=true"])), quiet=True)
    assert out["dry_run"] and "tasks" in capsys.readouterr().out
    assert not (tmp_path / "outputs").exists()


def test_reproduce_twice_keeps_two_folders(tmp_path, monkeypatch):
    """Reruns go to temporary folders (issue 43 (6)): two kept reruns never share one, nothing
    is written next to the archive, and an explicit folder that exists is refused."""
    import tempfile

    from pipeline.reproduce import reproduce

    run = run_sweep(to_plain(compose([*TINY, f"output_dir={tmp_path / 'run'}"])), quiet=True)
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmpd"))
    (tmp_path / "tmpd").mkdir()
    first = reproduce(run["archive"], backend="serial", progress=False, keep=True)
    second = reproduce(run["archive"], backend="serial", progress=False, keep=True)
    assert first["ok"] and second["ok"] and first["kept"] and second["kept"]
    assert first["output_dir"] != second["output_dir"]
    assert all((r["output_dir"] / "run.json").is_file() for r in (first, second))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    third = reproduce(run["archive"], backend="serial", progress=False)
    assert third["ok"] and not third["kept"] and not third["output_dir"].exists()
    with pytest.raises(ConfigError, match="is a run folder"):  # an explicit --out that exists
        reproduce(run["archive"], first["output_dir"], backend="serial", progress=False)


def test_a_resume_makes_the_analysis_anew(tmp_path):
    """A run whose analysis failed and was resumed (pipeline.resume) archives only what the new
    analysis writes: files of the earlier attempt are gone (issue 35's first default run failed in
    its analysis, and its resume kept the stale figures)."""
    import tarfile

    from pipeline.resume import main as resume

    out = tmp_path / "run"
    run_sweep(to_plain(compose(TINY + [f"output_dir={out}"])), quiet=True)
    stale = out / "analysis" / "stale_figure_part9.png"
    stale.write_bytes(b"not from this analysis")
    assert resume([str(out), "--no-progress", "--no-mlflow"]) == 0
    assert not stale.exists() and (out / "analysis" / "report.md").exists()
    with tarfile.open(out / "archive.tar.gz") as tar:
        assert not [m for m in tar.getnames() if m.endswith("stale_figure_part9.png")]
