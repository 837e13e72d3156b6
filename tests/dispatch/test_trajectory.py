"""Trajectory engine of the dispatch model (sim/dispatch/trajectory.py, docs/transients.md):
paths of s_i(t) against the supermarket ODE from the same start."""
from __future__ import annotations

import math

import numpy as np
import pytest

import sim
from sim.core.trajectory import time_grid
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.trajectory import ode_tail, simulate
from tests.helpers import assert_within_se

#: ODE accuracy, measured: solve_pod_ode at rtol 1e-10 (the engine's) and at rtol 1e-12 differ
#: by at most 3.2e-10 on s_1..s_3 over [0, 10] at lam = 0.9, d = 1
ODE_ALLOWANCE = 1e-9


def _paths(n, lam, d, time, grid, reps, seed0=0):
    res = [simulate(n, lam, d, time, grid=grid, seed=seed0 + s) for s in range(reps)]
    return np.array([r.tail for r in res]), res[0].ode, res


def test_random_routing_mean_path_is_the_ode():
    """d = 1: N independent M/M/1 queues from empty; the supermarket ODE with d = 1 is the
    forward equation of one queue, so E[s_i(t)] equals it at every N (no finite-N allowance)."""
    n, reps = 1000, 40
    tail, ode, _ = _paths(n, 0.9, 1, 10.0, 21, reps)
    t = time_grid(10.0, 21)
    assert tail[:, 0, :].max() == 0.0 and np.all(ode[0] == 0.0)  # both start empty, exactly
    for j in (2, 4, 10, 20):  # t = 1, 2, 5, 10
        for i in range(3):
            x = tail[:, j, i]
            assert_within_se(x.mean(), ode[j, i], x.std(ddof=1) / math.sqrt(reps),
                             f"s_{i + 1}(t={t[j]:g})", allowance=ODE_ALLOWANCE)


def test_ode_settles_to_the_fixed_point():
    """From empty, power-of-2 at lam = 0.9 relaxes on a scale of about 13: by t = 300 the ODE
    is at the closed-form fixed point lam^(2^i - 1) (measured gap 4e-11)."""
    ode = ode_tail(0.9, 2, 300.0, 3)
    np.testing.assert_allclose(ode[-1], pod_fixed_point(0.9, 2, 8), rtol=0, atol=1e-8)


def test_sup_distance_shrinks_with_n():
    """The distance of a path to the ODE on [0, T] shrinks with N (like N^-1/2: the sweep
    `transients` fits the rate); here two N a factor 100 apart, 8 paths each, separated by
    more than 4 combined SEs."""
    sups = {}
    for n in (100, 10_000):
        _, _, res = _paths(n, 0.9, 2, 20.0, 100, 8, seed0=100)
        v = np.array([r.sup_dist for r in res])
        sups[n] = (v.mean(), v.std(ddof=1) / math.sqrt(v.size))
    (m_small, se_small), (m_big, se_big) = sups[100], sups[10_000]
    assert m_small - m_big > 4.0 * math.hypot(se_small, se_big), sups


def test_meanfield_start_is_shared():
    r = simulate(1000, 0.9, 2, 5.0, grid=11, seed=1, init="meanfield")
    np.testing.assert_array_equal(r.tail[0], r.ode[0])  # same rounded start
    np.testing.assert_allclose(r.start[:3], [0.9, 0.729, 0.478], atol=0.5e-3)


def test_run_task_row_shapes():
    task = {"engine": "trajectory", "policy": "pod", "n_servers": 200, "lam": 0.9, "d": 2,
            "time": 5.0, "seed": 3, "init": "empty", "grid": 30, "max_level": 64}
    task["events"] = sim.events_for_time(task)
    out = sim.run(task)
    assert len(out["traj_time"]) == 30 and out["traj_levels"] == 8
    assert len(out["traj_tail"]) == len(out["traj_ode_tail"]) == 8 * 30
    tail = np.array(out["traj_tail"]).reshape(8, 30)  # level-major
    ode = np.array(out["traj_ode_tail"]).reshape(8, 30)
    assert out["traj_sup_dist"] == pytest.approx(np.abs(tail - ode).max())
    assert out["sim_time"] <= 5.0 < out["sim_time"] + 1.0 and out["events_run"] < task["events"]


def test_event_cap_leaves_nan_rows():
    r = simulate(1000, 0.9, 2, 50.0, grid=50, seed=0, events=2000)
    assert math.isnan(r.sup_dist) and np.isnan(r.tail[-1]).all() and r.events_run == 2000


@pytest.mark.parametrize("bad, word", [({"grid": 1}, "grid"), ({"time": None}, "time"),
                                       ({"time": -1.0}, "time"), ({"precision": 0.1}, "precision")])
def test_bad_input_is_refused_naming_it(bad, word):
    task = {"engine": "trajectory", "policy": "pod", "n_servers": 200, "lam": 0.9, "d": 2,
            "time": 5.0, "seed": 3, "init": "empty", "grid": 30, "events": 5000, **bad}
    with pytest.raises(ValueError, match=word):
        sim.check_task(task)
    if word in ("grid", "time"):
        with pytest.raises(ValueError, match=word):
            simulate(200, 0.9, 2, bad.get("time", 5.0), grid=bad.get("grid", 30))


def test_plan_passes_the_grid():
    from omegaconf import OmegaConf

    from pipeline.config import RunConfig
    from pipeline.errors import ConfigError
    from pipeline.plan import make_plan
    from tests.helpers import compose

    assert RunConfig().grid == 200
    cfg = OmegaConf.to_container(compose(["+sweep=transients", "run.grid=50"]), resolve=False)
    cfg["output_dir"] = "unused"
    plan = make_plan(cfg)
    traj = [t for t in plan.tasks if t["engine"] == "trajectory"]
    assert traj and all(t["grid"] == 50 and t["time"] > 0 for t in traj)
    # the cap is an upper bound: above the rate bound N (1 + lam / k) T (jobs of k tasks at
    # rate N lam / k, services at most N; k = 1 but for batch-filling)
    assert {t["policy"] for t in traj} == {"pod", "jiq", "batch_filling", "central"}
    assert all(t["events"] > t["n_servers"] * (1 + t["lam"] / t.get("k", 1)) * t["time"]
               for t in traj)
    cfg["run"]["grid"] = 1
    with pytest.raises(ConfigError, match="grid"):
        make_plan(cfg)


# ---- batch-filling (fixed k, d) -------------------------------------------------------------

#: finite-N gap of the batch-filling mean path, measured: 400 paths at N = 2000, lam = 0.9,
#: d = 2, T = 10 from empty (seeds 50000..50399 for k = 2, 60000..60399 for k = 1), s_1..s_3 at
#: t = 1, 2, 5, 10: largest |mean - ODE| 0.0013 (SE 0.0013) for k = 2 and 0.00096 (SE 0.00088)
#: for k = 1, none above 2 SE; the allowances are the largest gap plus 2 of its SEs
BATCH_ALLOWANCE = 0.0039
BATCH_K1_ALLOWANCE = 0.0027


def assert_mean_path_near(res, ode, allowance):
    """The mean over the paths ``res`` of s_1..s_3 at grid points 2, 4, 10 and 20 is ``ode``'s
    within 4 SE (the spread of the paths) plus ``allowance``."""
    tail = np.array([r.tail for r in res])
    for j in (2, 4, 10, 20):
        for i in range(3):
            x = tail[:, j, i]
            assert_within_se(x.mean(), ode[j, i], x.std(ddof=1) / math.sqrt(len(res)),
                             f"s_{i + 1}(t={res[0].t[j]:g})", allowance=allowance)


def test_batch_filling_k1_is_pod():
    """k = 1: batch-filling samples d queues and puts its one task in the shortest, which is
    power-of-d. The kernels share the sampling and, with one task, the placement uses no other
    random number, so a seed gives the very same path; and the batch-filling ODE with k = 1 is
    the supermarket ODE (measured: within 3.6e-11 on [0, 10] at lam = 0.9, d = 2)."""
    a = simulate(1000, 0.9, 2, 10.0, grid=51, seed=7)
    b = simulate(1000, 0.9, 2, 10.0, grid=51, seed=7, policy="batch_filling", k=1)
    np.testing.assert_array_equal(a.tail, b.tail)
    assert a.events_run == b.events_run
    np.testing.assert_allclose(b.ode, a.ode, rtol=0, atol=ODE_ALLOWANCE)
    n, reps = 2000, 30
    res = [simulate(n, 0.9, 2, 10.0, grid=21, seed=3000 + s, policy="batch_filling", k=1)
           for s in range(reps)]
    pod_ode = ode_tail(0.9, 2, 10.0, 21)  # the supermarket ODE on this grid
    assert_mean_path_near(res, pod_ode, BATCH_K1_ALLOWANCE)


def test_batch_filling_mean_path_matches_its_ode():
    """k = d = 2 at lam = 0.9: the mean of 30 paths of N = 2000 against the batch-filling ODE
    of sim.dispatch.meanfield.batch_filling from empty, within 4 SE plus the measured finite-N gap."""
    n, reps = 2000, 30
    res = [simulate(n, 0.9, 2, 10.0, grid=21, seed=4000 + s, policy="batch_filling", k=2)
           for s in range(reps)]
    tail, ode = np.array([r.tail for r in res]), res[0].ode
    assert tail[:, 0, :].max() == 0.0 and np.all(ode[0] == 0.0)
    assert_mean_path_near(res, ode, BATCH_ALLOWANCE)


def test_batch_ode_settles_to_its_fixed_point():
    """From empty the batch-filling ODE (k = d = 2, lam = 0.9) reaches meanfield.batch_filling's
    fixed point: measured gap 1.6e-12 at t = 300."""
    from sim.dispatch.meanfield.batch_filling import fixed_point
    from sim.dispatch.trajectory import batch_ode_tail

    fp = fixed_point(0.9, 2, 2)
    ode = batch_ode_tail(0.9, 2, 2, 300.0, 3)
    np.testing.assert_allclose(ode[-1], fp[:8], rtol=0, atol=1e-9)


def test_batch_filling_sup_distance_shrinks_with_n():
    sups = {}
    for n in (100, 10_000):
        v = np.array([simulate(n, 0.9, 2, 20.0, grid=100, seed=200 + s, policy="batch_filling",
                               k=2).sup_dist for s in range(8)])
        sups[n] = (v.mean(), v.std(ddof=1) / math.sqrt(v.size))
    assert sups[100][0] - sups[10_000][0] > 4.0 * math.hypot(sups[100][1], sups[10_000][1]), sups


def test_batch_filling_meanfield_start_is_its_fixed_point_rounded():
    from sim.dispatch.meanfield.batch_filling import fixed_point

    r = simulate(1000, 0.9, 2, 2.0, grid=5, seed=1, init="meanfield", policy="batch_filling", k=2)
    np.testing.assert_array_equal(r.tail[0], r.ode[0])
    np.testing.assert_allclose(r.start[:4], fixed_point(0.9, 2, 2)[:4], rtol=0, atol=0.5e-3)


# ---- a configured start (init_tail) ----------------------------------------------------------


@pytest.mark.parametrize("policy, k", [("pod", 1), ("batch_filling", 2)])
def test_init_tail_start_is_exact(policy, k):
    """The path starts from round(N s_i) servers with >= i tasks and the ODE from the same
    counts / N: equal at t = 0, and equal to the rounded configured tail (zeros after it)."""
    s = [0.95, 0.6004, 0.3, 0.1, 0.0126]
    r = simulate(1000, 0.9, 2, 3.0, grid=7, seed=5, policy=policy, k=k, init_tail=s)
    want = np.round(1000 * np.array(s + [0.0] * 3)) / 1000
    np.testing.assert_array_equal(r.tail[0], want)
    np.testing.assert_array_equal(r.ode[0], want)
    assert np.abs(r.tail[-1] - r.tail[0]).max() > 0  # the path moved


@pytest.mark.parametrize("init_tail, init, word", [
    ([0.5, 0.6], "empty", "non-increasing"), ([1.2, 0.5], "empty", r"\[0, 1\]"),
    ([0.5, -0.1], "empty", r"\[0, 1\]"), ([0.5, 0.2], "meanfield", "init='meanfield'"),
    ([], "empty", "non-empty"), ([0.5, float("nan")], "empty", "finite")])
def test_bad_init_tail_is_refused_naming_it(init_tail, init, word):
    task = {"engine": "trajectory", "policy": "batch_filling", "n_servers": 200, "lam": 0.9,
            "d": 2, "k": 2, "time": 5.0, "seed": 3, "init": init, "grid": 30, "events": 5000,
            "init_tail": init_tail}
    with pytest.raises(ValueError, match="init_tail") as exc:
        sim.check_task(task)
    assert exc.match(word) or "finite" in str(exc.value)
    with pytest.raises(ValueError, match="init_tail"):
        simulate(200, 0.9, 2, 5.0, grid=30, init=init, init_tail=init_tail, policy="batch_filling", k=2)


def test_batch_filling_row_and_refusals():
    task = {"engine": "trajectory", "policy": "batch_filling", "n_servers": 200, "lam": 0.9,
            "d": 2, "k": 2, "time": 5.0, "seed": 3, "init": "empty", "grid": 30, "max_level": 64}
    task["events"] = sim.events_for_time(task)
    out = sim.run(task)
    assert len(out["traj_tail"]) == len(out["traj_ode_tail"]) == 8 * 30
    assert out["sim_time"] <= 5.0 and out["events_run"] < task["events"]
    with pytest.raises(ValueError, match="k"):
        sim.check_task({**task, "k": None})
    with pytest.raises(ValueError, match="d"):
        sim.check_task({**task, "d": 101})
