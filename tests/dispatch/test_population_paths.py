"""Power-of-d paths from the declaration (the ``population_trajectory`` engine of ``pod``,
sim.dispatch.population.run_path) against the hand-written ``trajectory`` engine
(sim.dispatch.trajectory): the mean of independent paths at a few grid times within 4 combined
SEs (the same finite-N process), the ODE of the declared drift (LSODA) against the supermarket
ODE (BDF with its exact Jacobian) from the same starts, and the approach to the ODE as N grows.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import sim
from tests.helpers import assert_engines_agree, assert_within_se


def _paths(engine, n, reps, seed0, **extra):
    task = {"engine": engine, "policy": "pod", "n_servers": n, "lam": 0.9, "d": 2, "time": 10.0,
            "grid": 11, "init": "empty", "max_level": 8, **extra}
    rows = [sim.run({**task, "seed": seed0 + r}) for r in range(reps)]
    g, lv = len(rows[0]["traj_time"]), rows[0]["traj_levels"]
    return rows, np.array([np.reshape(r["traj_tail"], (lv, g)).T for r in rows])


def _se(x):
    return x.std(ddof=1) / math.sqrt(x.size)


def test_paths_agree_with_the_trajectory_engine():
    """100 paths of each engine at N = 1000 from empty: s_1..s_4 at t = 2, 5, 10."""
    rows, tail = _paths("population_trajectory", 1000, 100, 100)
    hrows, htail = _paths("trajectory", 1000, 100, 900)
    for j in (2, 5, 10):
        for i in range(4):
            a, b = tail[:, j, i], htail[:, j, i]
            assert_engines_agree(a.mean(), _se(a), b.mean(), _se(b), f"s_{i + 1}(t={j})")
    ode = np.array(rows[0]["traj_ode_tail"])
    assert np.max(np.abs(ode - np.array(hrows[0]["traj_ode_tail"]))) < 1e-8


@pytest.mark.parametrize("start", [{"init": "meanfield"}, {"init_tail": [1.0, 0.8, 0.8, 0.3, 0.05]}])
def test_starts_and_odes_agree(start):
    """The same rounded start in both engines (the declaration's fixed point by root finding
    and the closed form, rounded to counts), and the two ODEs from it within 1e-8 on [0, 10]
    (measured: at most 3e-11 from empty)."""
    task = {"policy": "pod", "n_servers": 1000, "lam": 0.9, "d": 2, "time": 10.0, "grid": 11,
            "seed": 3, "init": "empty", "max_level": 8, **start}
    row = sim.run({**task, "engine": "population_trajectory"})
    hand = sim.run({**task, "engine": "trajectory"})
    lv = row["traj_levels"]
    assert np.reshape(row["traj_tail"], (lv, 11))[:, 0].tolist() == np.reshape(hand["traj_tail"], (lv, 11))[:, 0].tolist()
    assert np.max(np.abs(np.array(row["traj_ode_tail"]) - np.array(hand["traj_ode_tail"]))) < 1e-8


#: the finite-N bias of the mean path of power-of-2 is not resolved: measured with this engine
#: (seeds 70000.., G = 11, s_1..s_8), largest |mean - ODE| 0.0014 (SE 0.0007, 400 paths) at
#: N = 2000 and 0.0008 (SE 0.0004, 200 paths) at N = 10^4, at most 2.8 SE over the grid; the
#: hand-written engine's 0.0006 (SE 0.0003) at N = 2000 (docs/transients.md). The allowance at
#: N = 10^4 bounds the bias there by that gap
PATH_ALLOWANCE = 0.0008


def test_paths_approach_the_ode_as_n_grows():
    """The sup distance of a path to the ODE shrinks from N = 100 to 10^4 (mean of 20 paths;
    expected N^-1/2), and the mean of 40 paths at N = 10^4 is within 4 SE (plus the bias bound)
    of the ODE at every grid time and level it reaches."""
    sups = {}
    for n in (100, 10_000):
        rows, _ = _paths("population_trajectory", n, 20, 3000)
        v = np.array([r["traj_sup_dist"] for r in rows])
        sups[n] = (v.mean(), _se(v))
    assert sups[100][0] - sups[10_000][0] > 4.0 * math.hypot(sups[100][1], sups[10_000][1]), sups
    assert sups[10_000][0] < 0.2 * sups[100][0], sups
    rows, tail = _paths("population_trajectory", 10_000, 40, 5000)
    ode = np.reshape(rows[0]["traj_ode_tail"], (8, 11)).T
    for j in range(1, 11):
        for i in range(8):
            x = tail[:, j, i]
            if x.std() == 0.0:  # a level no path reached: the ODE has it near 0
                assert x[0] == 0.0 and ode[j, i] < 1e-3, (j, i, ode[j, i])
                continue
            assert_within_se(x.mean(), ode[j, i], _se(x), f"s_{i + 1}(t={j})", allowance=PATH_ALLOWANCE)


def test_a_buffer_is_refused():
    with pytest.raises(ValueError, match="b="):
        sim.run({"engine": "population_trajectory", "policy": "pod", "n_servers": 100, "lam": 0.9,
                 "d": 2, "b": 3, "time": 1.0, "seed": 1})
