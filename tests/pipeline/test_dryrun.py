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


def test_estimate_separates_a_tasks_fixed_cost_from_its_cost_per_event(tmp_path, monkeypatch):
    """A simulation that costs 0.4 s to set up plus 20 ns an event (a fake, on a fake clock):
    the estimate recovers both and scales only the second with each task's events. One short
    run alone would read the set-up as a per-event cost (2 us an event at 200,000 events)."""
    import sim
    from pipeline import dryrun
    from pipeline.plan import make_plan

    clock = [0.0]

    def fake_run(task):
        clock[0] += 0.4 + 20e-9 * task["events"]
        return {}

    monkeypatch.setattr(sim, "run", fake_run)
    monkeypatch.setattr(dryrun.time, "process_time", lambda: clock[0])
    plan = make_plan(to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path}", "params.events=10000000",
                                       "engines=[occupancy]"])))
    costs = dryrun.measure_costs(plan)
    assert costs and all(fixed == pytest.approx(0.4) and per == pytest.approx(20e-9) for fixed, per in costs.values())
    seconds = dryrun.task_seconds(plan, costs)
    assert seconds == pytest.approx([0.4 + 20e-9 * 10_000_000] * len(plan.tasks))
    # a task no longer than the probe is timed whole
    short = make_plan(to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path}", "params.events=5000",
                                        "engines=[occupancy]"])))
    assert all(fixed == 0.0 and per == pytest.approx(0.4 / 5000 + 20e-9) for fixed, per in dryrun.measure_costs(short).values())


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own timing cache (the fakes below must not reach the user's)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_timings_are_cached_by_code_cpu_and_task(tmp_path, monkeypatch):
    """A second dry run times nothing it timed before; another CPU (numba's target), other code
    (the digest of sim/) or another task is timed anew; a damaged cache file is ignored."""
    import sim
    from pipeline import dryrun
    from pipeline.plan import make_plan

    calls = []
    clock = [0.0]

    def fake_run(task):
        calls.append(task["n_servers"])
        clock[0] += 0.4 + 20e-9 * task["events"]
        return {}

    monkeypatch.setattr(sim, "run", fake_run)
    monkeypatch.setattr(dryrun.time, "process_time", lambda: clock[0])

    def plan(*extra):
        return make_plan(to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path}", "params.events=10000000",
                                           "engines=[occupancy]", *extra])))

    first = dryrun.measure_costs(plan())
    timed = len(calls)
    assert timed == 3 * len(first) and dryrun.cache_path().is_file()  # warm-up and two lengths each
    assert dryrun.measure_costs(plan()) == first and len(calls) == timed  # all from the cache
    dryrun.measure_costs(plan("axes.n_servers=[20,300]"))  # another largest task: timed
    assert len(calls) == 2 * timed
    machine = dryrun._machine_code()
    for changed in ({**machine, "cpu": ["another", "znver9", "", {}]}, {**machine, "sim": "0" * 16}):
        monkeypatch.setattr(dryrun, "_machine_code", lambda changed=changed: changed)
        n = len(calls)
        dryrun.measure_costs(plan())
        assert len(calls) == n + timed
    monkeypatch.setattr(dryrun, "_machine_code", lambda: machine)
    dryrun.cache_path().write_text("{not json")
    n = len(calls)
    again = dryrun.measure_costs(plan())  # timed anew (the fake clock's sums round differently)
    assert len(calls) == n + timed and again.keys() == first.keys()
    assert all(again[k] == pytest.approx(first[k]) for k in first)
    dryrun.measure_costs(plan(), cache=False)
    assert len(calls) == n + 2 * timed
