"""Paths of a declared population process (sim.core.population_paths) and the ODE path
(sim.core.population_limit.ode_path), on the toy of tests/core/test_population.py: N servers
with random routing, each an M/M/1 queue. Its drift is linear, so the mean over paths equals
the ODE at every N (no finite-N bias): the mean of independent paths is checked against the
ODE within 4 estimated SEs, with no allowance.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.population import Vector
from sim.core.population_limit import ode_path
from sim.core.population_paths import path_row, simulate_path
from tests.core.test_population import toy
from tests.helpers import assert_within_se

#: the toy with its truncation L a parameter (``levels`` of the task, default 40): one
#: declaration, compiled once (its kernels are kept on it)
_TOY = toy(vectors=(Vector("s", lambda p: int(p[1]) + 2),),
           params=lambda task: (float(task["lam"]), float(task.get("levels", 40))))


def _task(**kw):
    return {"n_servers": 100, "lam": 0.7, "time": 8.0, "grid": 9, "seed": 1, "init": "empty",
            "max_level": 4, **kw}


def test_mean_path_is_the_ode_at_every_n():
    decl = _TOY
    reps = 200
    res = [simulate_path(decl, _task(seed=s)) for s in range(reps)]
    tail = np.array([r.tail for r in res])
    ode = res[0].ode
    assert np.all(tail[:, 0, :] == 0.0) and np.all(ode[0] == 0.0)
    for j in (1, 4, 8):
        for i in range(3):
            x = tail[:, j, i]
            assert_within_se(x.mean(), ode[j, i], x.std(ddof=1) / math.sqrt(reps), f"s_{i + 1}(t={j})")
    # the ODE of M/M/1 queues from empty: s_1(t) = P(Q(t) >= 1), toward lam
    assert 0.6 < ode[-1, 0] < 0.7 and np.all(np.diff(ode[:, 0]) > 0)


def test_ode_path_reaches_the_fixed_point_and_matches_the_drift():
    """From empty, the ODE at t = 2000 is the geometric tail lam**i (truncated far away; the
    relaxation time of an M/M/1 queue at load 0.7 is 1 / (1 - sqrt(0.7))**2 = 37.5)."""
    decl = _TOY
    p = np.array([0.7, 60.0])
    lay = decl.layout(p)
    x = ode_path(decl, p, decl.start_state(p, lay), np.array([0.0, 1000.0, 2000.0]))
    np.testing.assert_allclose(x[-1, 1:20], 0.7 ** np.arange(1, 20), rtol=0, atol=1e-8)
    assert x[0, 0] == x[-1, 0] == 1.0  # s_0: no jump moves it


def test_a_configured_start_and_the_rounding():
    decl = _TOY
    r = simulate_path(decl, _task(n_servers=7, init_tail=[0.9, 0.5, 0.1]))
    want = np.round(7 * np.array([0.9, 0.5, 0.1, 0.0])) / 7
    np.testing.assert_array_equal(r.tail[0], want)
    np.testing.assert_allclose(r.ode[0], want, rtol=0, atol=1e-15)
    assert r.top[0] == 3 or want[2] == 0.0  # 0.1 * 7 rounds to 1 server with 3 tasks
    with pytest.raises(ValueError, match="init_tail has 50 levels"):
        simulate_path(decl, _task(init_tail=[0.5] * 50))
    with pytest.raises(ValueError, match="init_tail"):
        simulate_path(decl, _task(init_tail=[0.5, 0.9]))  # not non-increasing


def test_a_path_that_meets_the_truncation_is_refused():
    decl = _TOY
    res = simulate_path(decl, _task(lam=0.9, time=50.0, levels=2))
    assert res.lost > 0.0
    with pytest.raises(ValueError, match="met the truncation"):
        path_row(res, decl)


def test_the_event_cap_leaves_nan_rows():
    decl = _TOY
    res = simulate_path(decl, _task(events=50))
    assert res.events_run == 50 and res.sim_time < 8.0
    assert np.isnan(res.tail[-1]).all() and not np.isnan(res.tail[0]).any()
    row = path_row(res, decl)
    assert row["traj_sup_dist"] is None and row["events_run"] == 50


def test_same_seed_same_path():
    decl = _TOY
    a, b = simulate_path(decl, _task(seed=4)), simulate_path(decl, _task(seed=4))
    c = simulate_path(decl, _task(seed=5))
    assert np.array_equal(a.tail, b.tail) and a.events_run == b.events_run
    assert not np.array_equal(a.tail, c.tail)


def test_time_is_required():
    with pytest.raises(ValueError, match="time"):
        simulate_path(_TOY, _task(time=None))
