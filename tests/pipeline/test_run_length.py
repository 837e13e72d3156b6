"""Run length by simulated time (``params.time``) and by target precision (``run.precision``)."""
from __future__ import annotations

import math

import pytest
from scipy.stats import t as student_t

import sim
from pipeline.errors import ConfigError
from pipeline.plan import make_plan
from pipeline.run import to_plain
from sim.core.output import OBM_DOF
from tests.helpers import compose

# (task, uniformized): a uniformized engine covers exactly events / rate; a jump chain (the
# occupancy engines) covers the sum of expected holding times, whose rate is the steady-state
# one only on average: at N = 100 and T = 300, 10 seeds each gave sim_time / T with SD 0.004
# (pod), 0.005 (jiq) and 0.012 (batch_filling, k = 4), so 0.05 is about 4 SD of the worst.
CASES = [
    (dict(engine="agent", policy="pod", n_servers=100, lam=0.9, d=2), True),
    (dict(engine="agent", policy="batch_filling", n_servers=100, lam=0.9, d=2, k=4), True),
    (dict(engine="agent", policy="pod", n_servers=4, lam=0.5, d=2,
          service_rates=[1.0, 1.0, 2.0, 2.0]), True),
    (dict(engine="agent", policy="central", n_servers=100, lam=0.9, p=0.5), True),
    (dict(engine="occupancy", policy="central", n_servers=100, lam=0.9, p=0.5), True),
    (dict(engine="agent", policy="jiq", n_servers=100, lam=0.9, r=10), True),
    (dict(engine="slotted", policy="jsq", n_servers=10, lam=0.9), True),
    (dict(engine="occupancy", policy="pod", n_servers=100, lam=0.9, d=2), False),
    (dict(engine="occupancy", policy="batch_filling", n_servers=100, lam=0.9, d=2, k=4), False),
    (dict(engine="occupancy", policy="jiq", n_servers=100, lam=0.9, r=10), False),
]
JUMP_CHAIN_ALLOWANCE = 0.05


@pytest.mark.parametrize("case,uniformized", CASES, ids=lambda c: c["engine"] + "-" + c["policy"]
                         if isinstance(c, dict) else "")
def test_time_gives_the_simulated_time(case, uniformized):
    horizon = 3000.0 if case["engine"] == "slotted" else 300.0
    task = {**case, "time": horizon, "seed": 3}
    task["events"] = sim.events_for_time(task)
    out = sim.run(task)
    assert out["events_run"] >= task["events"]  # the centralization agent adds its drain events
    if uniformized:
        assert out["sim_time"] == pytest.approx(horizon, rel=1e-3)
    else:
        assert abs(out["sim_time"] / horizon - 1) < JUMP_CHAIN_ALLOWANCE


def test_too_short_a_time_is_refused_naming_it():
    task = dict(engine="agent", policy="pod", n_servers=10, lam=0.5, d=2, time=1.0, seed=0)
    with pytest.raises(ValueError, match=r"time=1.0 is 15 events at n_servers=10"):
        sim.events_for_time(task)


def test_rel_halfwidth_is_the_t_interval_of_the_main_estimate():
    task = dict(engine="agent", policy="pod", n_servers=100, lam=0.8, d=2, events=200_000,
                seed=1, n_batches=20)
    out = sim.run(task)
    q = student_t.ppf(0.975, OBM_DOF)  # the default se_method, obm
    assert out["runs"] == 1
    assert out["rel_halfwidth"] == pytest.approx(q * out["mean_response_se"] / out["mean_response"])
    # the slotted engine's SE is batch means of its 20 batches whatever se_method says
    led = sim.run(dict(engine="slotted", policy="jsq", n_servers=5, lam=0.8, events=20_000, seed=1))
    assert led["rel_halfwidth"] == pytest.approx(
        student_t.ppf(0.975, 19) * led["mean_total_queue_se"] / led["mean_total_queue"])


def test_precision_reruns_longer_until_the_target_is_met():
    base = dict(engine="occupancy", policy="pod", n_servers=100, lam=0.9, d=2, events=20_000,
                seed=5, n_batches=20)
    first = sim.run(base)
    target = first["rel_halfwidth"] / 3  # needs about 9x the events
    out = sim.run({**base, "precision": target, "precision_cap": 1000})
    assert out["runs"] >= 2
    assert out["events_run"] > 5 * base["events"]
    # met, or the last allowed run ended just above it (an SE estimate is itself noisy)
    assert out["rel_halfwidth"] <= target or out["runs"] == sim.MAX_RUNS


def test_precision_is_capped():
    base = dict(engine="occupancy", policy="pod", n_servers=100, lam=0.9, d=2, events=20_000, seed=5)
    out = sim.run({**base, "precision": 1e-5, "precision_cap": 3})
    assert out["events_run"] == 3 * base["events"]
    assert out["rel_halfwidth"] > 1e-5
    # a loose target is met by the first run once that run is long enough for its SE to be
    # trusted (300 / (1 - lam)^2 time units kept: 1200 at lam = 0.5, about 1800 run here)
    long_enough = {**base, "lam": 0.5, "events": 400_000}
    met = sim.run({**long_enough, "precision": 0.5})
    assert met["runs"] == 1 and met["events_run"] == long_enough["events"]


def test_precision_can_target_another_estimate():
    """run.precision_estimate: the queueing ratio of k-task jobs, whose relative CI is far wider
    than the mean response time's; the reruns go on until *its* half-width is met."""
    base = dict(engine="occupancy", policy="batch_filling", n_servers=200, lam=0.9, d=2, k=4,
                events=20_000, seed=3, n_batches=20)
    q = student_t.ppf(0.975, OBM_DOF)  # the default se_method, obm
    first = sim.run(base)
    ratio_hw = q * first["queueing_ratio_se"] / first["queueing_ratio"]
    assert first["rel_halfwidth"] < ratio_hw / 2  # by default the target is mean_response's
    on_ratio = sim.run({**base, "precision_estimate": "queueing_ratio"})
    assert on_ratio["rel_halfwidth"] == pytest.approx(ratio_hw)
    target = ratio_hw / 2
    out = sim.run({**base, "precision": target, "precision_cap": 1000,
                   "precision_estimate": "queueing_ratio"})
    reached = q * out["queueing_ratio_se"] / out["queueing_ratio"]
    assert out["rel_halfwidth"] == pytest.approx(reached) and out["runs"] >= 2
    assert reached <= target or out["runs"] == sim.MAX_RUNS
    with pytest.raises(ValueError, match="precision_estimate='n_jobs' is not an estimate"):
        sim.check_task({**base, "precision_estimate": "n_jobs"})


def test_plan_passes_the_precision_estimate_and_refuses_an_unknown_one():
    plan = _plan("run.precision=0.05", "run.precision_estimate=queueing_ratio")
    sims = [t for t in plan.tasks if t["engine"] != "meanfield"]
    assert sims and all(t["precision_estimate"] == "queueing_ratio" for t in sims)
    with pytest.raises(ConfigError, match="run.precision_estimate='mean_reponse' is not an estimate "
                                          "with a standard error; valid: "):
        _plan("run.precision=0.05", "run.precision_estimate=mean_reponse")


def _plan(*overrides):
    return make_plan(to_plain(compose(["output_dir=/tmp/unused", *overrides])))


def test_plan_turns_time_into_events_per_engine_and_keeps_both_in_the_row():
    plan = _plan("engines=[agent,occupancy,meanfield]", "+axes.n_servers=[100,1000]",
                 "+params.time='max(50, 1e5 / N)'", "replications=1")
    for t in plan.tasks:
        if t["engine"] == "meanfield":
            assert "time" not in t and t["_meta"]["params"]["time"] is None
            continue
        horizon = max(50, 1e5 / t["n_servers"])
        assert t["time"] == horizon
        lam = t["lam"]
        rate = t["n_servers"] * ((1 + lam) if t["engine"] == "agent" else 2 * lam)
        assert t["events"] == math.ceil(horizon * rate)
        assert t["_meta"]["params"]["events"] == t["events"]


def test_plan_passes_precision_to_simulations_only():
    plan = _plan("run.precision=0.01", "run.precision_cap=8")
    for t in plan.tasks:
        if t["engine"] == "meanfield":
            assert "precision" not in t
        else:
            assert t["precision"] == 0.01 and t["precision_cap"] == 8.0
    assert all("precision" not in t for t in _plan().tasks)


def test_headline_sweep_reaches_ten_million_servers_by_time():
    plan = _plan("+sweep=sub_halfin_whitt")
    sims = [t for t in plan.tasks if t["engine"] == "occupancy"]
    ns = sorted({t["n_servers"] for t in sims})
    assert ns[0] == 100 and ns[-2] == 10**6 and ns[-1] == 10**7 and len(ns) == 10
    # 6 runs below N = 10^6, 8 from there, for the single-task rule 16 at 10^6 and 24 at 10^7
    for n in ns:
        for pol in ("batch_filling", "batch_sampling", "pod_per_task"):
            for var in ("c4", "single_task"):
                reps = {t["_meta"]["replication"] for t in sims if t["n_servers"] == n
                        and t["policy"] == pol and t["_meta"]["params"]["variant"] == var}
                want = 6 if n < 10**6 else 8 if var != "single_task" else 24 if n > 5 * 10**6 else 16
                assert reps == set(range(want)), (n, pol, var)
    for t in sims:
        # the single-task rule's runs are twice as long (its ratio is the noisiest)
        single = t["_meta"]["params"]["variant"] == "single_task"
        assert t["time"] == (max(60, 6e6 / t["n_servers"]) if single else max(30, 3e6 / t["n_servers"]))
    # the mean field along the same path, to N = 10^15 (limit_path)
    assert max(t["n_servers"] for t in plan.tasks if t["engine"] == "meanfield") == 10**15


def test_console_leads_with_the_models_own_verdicts_and_names_each_quantity(tmp_path, capsys):
    import polars as pl

    from analysis.models.centralization import _verdict_lines
    from pipeline.run import print_summary

    lines = _verdict_lines([{"engine": "occupancy", "lam": 0.9, "p": 0.05,
                             "sup_verdict": "falling like N^-0.88 [-1.01, -0.75] over N = 100..10^6; undecided beyond N = 10^6", "v1_verdict": "no significant gap"}],
                           [{"engine": "occupancy", "p": 0.05, "verdict": "not enough loads: 1"}])
    extra = {"verdict_lines": lines}
    assert lines == [
        "central [occupancy] lam=0.9 p=0.05: sup distance of the simulated tails to the invariant "
        "state: falling like N^-0.88 [-1.01, -0.75] over N = 100..10^6; undecided beyond N = 10^6",
        "central [occupancy] lam=0.9 p=0.05: gap of v_1 (mean queue) to the invariant state: no significant gap"]
    summary = tmp_path / "summary.parquet"
    pl.DataFrame({"policy": ["central"], "p": [0.05], "engine": ["occupancy"], "n_rep": [2],
                  "mean_response": [2.0], "mean_response_hw": [0.1]}).write_parquet(summary)
    analysis = {"summary": summary, "params": ["p"], "arm_params": ["p"], "extra": {"centralization": extra},
                "fits": [{"policy": "central", "engine": "occupancy", "p": 0.05, "verdict": "inconclusive",
                          "metric": "mean_response"}]}

    class _Plan:
        varying = ["p"]

    print_summary(analysis, _Plan())
    out = capsys.readouterr().out
    own = out.index("sweep's own analysis")
    generic = out.index("generic gap check (")
    assert "): 1 arm, 1 inconclusive" in out  # every arm counted
    assert own < out.index("falling like N^-0.88 [-1.01, -0.75] over N = 100..10^6") < generic
    assert "p=0.05: inconclusive" not in out  # the sweep's own verdicts answer it: counts only
    # without verdicts of its own, the generic check lists every arm
    print_summary({**analysis, "extra": {}}, _Plan())
    out = capsys.readouterr().out
    assert "verdicts: the gap of mean_response" in out and "central [occupancy] p=0.05: inconclusive" in out


def test_a_long_per_point_table_goes_to_a_file(tmp_path, capsys):
    import polars as pl

    from pipeline.run import CONSOLE_ROWS, print_summary

    summary = tmp_path / "summary.parquet"
    n = CONSOLE_ROWS + 1
    pl.DataFrame({"policy": ["pod"] * n, "n_servers": list(range(1, n + 1)), "engine": ["agent"] * n,
                  "n_rep": [2] * n, "mean_response": [2.0] * n, "mean_response_hw": [0.1] * n}).write_parquet(summary)

    class _Plan:
        varying = ["n_servers"]

    analysis = {"summary": summary, "params": ["n_servers"], "arm_params": [], "extra": {}, "fits": []}
    print_summary(analysis, _Plan(), table_file=tmp_path / "summary.txt")
    out = capsys.readouterr().out
    assert out.startswith(f"per-point table ({n} rows, 6 columns") and str(tmp_path / "summary.txt") in out
    assert len((tmp_path / "summary.txt").read_text().splitlines()) > n  # every row, header included
    print_summary(analysis | {"summary": summary}, _Plan(), table_file=None)  # no file given: printed
    assert len(capsys.readouterr().out.splitlines()) > n
