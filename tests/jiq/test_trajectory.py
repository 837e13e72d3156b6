"""JIQ trajectory engine (sim/jiq/trajectory.py, docs/transients.md): p0(t) and s_i(t) of the
paths against the mean-field ODE from the same start."""
from __future__ import annotations

import math

import numpy as np
import pytest

import sim
from sim.jiq.meanfield import fixed_point
from sim.jiq.trajectory import simulate
from tests.helpers import assert_within_se

#: finite-N gap of the mean path, measured: 400 paths at N = 2000, r = 10, lam = 0.9 from empty
#: (seeds 0..399) gave |mean p0 - ODE| <= 0.0014 with SE <= 0.0017 at t = 1, 2, 5, 10, and
#: |mean s_i - ODE| <= 0.0011 (SE <= 0.00095) for s_1, s_2; the allowances are the largest
#: gap plus 2 of its SEs
P0_ALLOWANCE = 0.0045
TAIL_ALLOWANCE = 0.003


def test_p0_path_matches_the_ode():
    n, reps = 2000, 30
    res = [simulate(n, 0.9, "jiq", 10, time=10.0, grid=21, seed=1000 + s) for s in range(reps)]
    p0 = np.array([r.p0 for r in res])
    tail = np.array([r.tail for r in res])
    ode_p0, ode = res[0].ode_p0, res[0].ode
    assert p0[:, 0].max() == 0.0 and ode_p0[0] == 0.0  # empty start: every I-queue lists r servers
    for j in (2, 4, 10, 20):  # t = 1, 2, 5, 10
        assert_within_se(p0[:, j].mean(), ode_p0[j], p0[:, j].std(ddof=1) / math.sqrt(reps),
                         f"p0(t={res[0].t[j]:g})", allowance=P0_ALLOWANCE)
        for i in range(2):
            x = tail[:, j, i]
            assert_within_se(x.mean(), ode[j, i], x.std(ddof=1) / math.sqrt(reps),
                             f"s_{i + 1}(t={res[0].t[j]:g})", allowance=TAIL_ALLOWANCE)


def test_ode_reaches_the_fixed_point():
    """lam = 0.9: the ODE from empty is within 1% of the root-route p0 by t = 40 (the sweep
    measured t = 38.2 to stay within 1%); here at t = 120 within 1e-4."""
    r = simulate(1000, 0.9, "jiq", 10, time=120.0, grid=3, seed=0)
    fp = fixed_point("jiq", 0.9, 10)
    assert r.ode_p0[-1] == pytest.approx(fp.p0, abs=1e-4)
    assert r.ode[-1, 0] == pytest.approx(0.9, abs=1e-4)


def test_meanfield_start_is_shared_and_consistent():
    r = simulate(1000, 0.9, "jiq_pod", 10, d=2, time=5.0, grid=11, seed=2, init="meanfield")
    np.testing.assert_array_equal(r.tail[0], r.ode[0])
    assert r.p0[0] == pytest.approx(r.ode_p0[0], abs=1e-12)
    assert r.p0[0] == pytest.approx(fixed_point("jiq_pod", 0.9, 10, 2).p0, abs=0.5 / 100 + 1e-12)


def test_sup_distance_shrinks_with_n():
    sups = {}
    for n in (100, 10_000):
        v = np.array([simulate(n, 0.9, "jiq", 10, time=20.0, grid=100, seed=s).sup_dist
                      for s in range(8)])
        sups[n] = (v.mean(), v.std(ddof=1) / math.sqrt(v.size))
    assert sups[100][0] - sups[10_000][0] > 4.0 * math.hypot(sups[100][1], sups[10_000][1]), sups


def test_row_and_refusals():
    task = {"engine": "trajectory", "policy": "jiq", "n_servers": 200, "lam": 0.9, "r": 10,
            "time": 5.0, "seed": 1, "init": "empty", "grid": 20}
    task["events"] = sim.events_for_time(task)
    out = sim.run(task)
    assert len(out["traj_p0"]) == len(out["traj_ode_p0"]) == 20
    assert out["traj_sup_dist_p0"] == pytest.approx(
        np.abs(np.array(out["traj_p0"]) - np.array(out["traj_ode_p0"])).max())
    for bad, word in (({"grid": 1}, "grid"), ({"time": None}, "time")):
        with pytest.raises(ValueError, match=word):
            sim.run({**task, **bad})


def test_init_tail_start_is_exact_and_iqueues_even():
    """A configured start: round(N s_i) servers with >= i tasks; the 450 idle servers of
    s_1 = 0.55 (N = 1000) all listed, spread over the M = 100 I-queues as evenly as possible
    (4 or 5 each, so p0 = 0); the ODE starts from the same state."""
    from sim.jiq.trajectory import _even_iqueues, start_counts

    s = [0.55, 0.2, 0.05]
    r = simulate(1000, 0.9, "jiq", 10, time=3.0, grid=7, seed=4, init_tail=s)
    np.testing.assert_array_equal(r.tail[0][:4], [0.55, 0.2, 0.05, 0.0])
    np.testing.assert_array_equal(r.ode[0], r.tail[0])
    assert r.p0[0] == r.ode_p0[0] == 0.0
    x, y, _, _, _ = start_counts("jiq", 0.9, 10, 1, 1000, "empty", np.array(s))
    assert x[0] == 450 and y.tolist() == [0, 0, 0, 0, 50, 50]
    assert np.dot(np.arange(y.size), y) == x[0]
    assert _even_iqueues(7, 3).tolist() == [0, 0, 2, 1]
    r = simulate(1000, 0.9, "jiq_pod", 10, d=2, time=3.0, grid=7, seed=4, init_tail=[1.0, 0.3])
    assert r.p0[0] == r.ode_p0[0] == 1.0  # no idle server: every I-queue empty
    with pytest.raises(ValueError, match="init_tail"):
        simulate(1000, 0.9, "jiq", 10, time=3.0, init_tail=[0.2, 0.3])
