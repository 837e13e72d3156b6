"""Partial centralization (sim.centralization: meanfield, agent, occupancy and their kernels): closed
forms, the fluid model
with its discontinuous drift, and both simulators against exact values.

Statistical assertions are ``|estimate - truth| <= Z * SE`` with the standard error estimated by
the engine (batch means over runs long against the relaxation time of the system, checked by the
absence of the engine's "batches correlated" warning), ``Z = 4``. Seeds are fixed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit
from scipy import sparse
from scipy import stats as sps
from scipy.sparse.linalg import spsolve

from sim.centralization.agent import run_task as run_agent_task
from sim.centralization.agent import simulate as simulate_agent
from sim.centralization.meanfield import (
    asymptotic_mean_queue,
    fixed_point,
    fluid_drift_v,
    fluid_fixed_point,
    invariant_mean_queue,
    invariant_mean_response,
    predicted_slope,
    solve_fluid,
    tail_distance,
    top_level,
)
from sim.centralization.meanfield import run_task as run_meanfield_task
from sim.centralization.occupancy import run_task as run_occupancy_task
from sim.centralization.occupancy import simulate as simulate_occupancy
from sim.core.buckets import build_buckets
from sim.core.results import RESULT_KEYS
from sim.core.rng import below, next_raw
from tests.helpers import ALPHA, assert_within_se

#: (lam, p) covering the four cases of Theorem 2; (0.8, 0.2) is lam = 1 - p with (1-p)/p an
#: integer, i.e. the degenerate case s_{i*} = 0 exactly; (0.7, 0.3) is lam = 1 - p without it
CASES = [(0.6, 0.0), (0.5, 0.6), (0.5, 0.5), (0.9, 0.05), (0.99, 0.05), (0.95, 0.2),
         (0.7, 0.3), (0.8, 0.2), (0.3, 0.1)]



@njit
def central_pick(q, state):
    """Station served by one central tick given queue lengths ``q``: the same
    bucket pick as :func:`agent_span`, the buckets rebuilt from ``q`` (O(N)). -1 if all empty.
    ``state`` (uint64[4]) is advanced in place."""
    n_servers = q.size
    top = q.max()
    if top == 0:
        return -1
    perm, pos, start = build_buckets(q, top + 2)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    b = start[top]
    n = perm[b + below(r, n_servers - b)]
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return n



def assert_uncorrelated(res):
    assert "correlated" not in res.ci_method, res.ci_method


# ------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------
def test_figure_3_1_support_ends_near_40():
    # p = 0.05 at lam = 0.99: s_i reaches 0 after i* = 39 ("at around i = 40" in the paper)
    assert top_level(0.99, 0.05) == 39
    tail = fixed_point(0.99, 0.05, 64)
    assert tail[38] > 0 and np.all(tail[39:] == 0)
    assert np.allclose(fixed_point(0.99, 0.0, 64), 0.99 ** np.arange(1, 65))


@pytest.mark.parametrize("lam, p", [(0.9, 0.05), (0.99, 0.05), (0.95, 0.2), (0.3, 0.1),
                                    (0.999, 0.01), (0.6, 0.3)])
def test_explicit_formula_and_top_level(lam, p):
    # recurrence (used by fixed_point) == explicit formula for lam != 1-p, up to i*
    tail = fixed_point(lam, p)
    i_star = top_level(lam, p)
    i = np.arange(1, tail.size + 1)
    explicit = (1 - lam) / (1 - p - lam) * (lam / (1 - p)) ** i - p / (1 - p - lam)
    assert np.allclose(tail, explicit, rtol=1e-9, atol=1e-12)
    assert tail.size == i_star  # support of the recurrence == floor(log formula) (no degeneracy)
    assert (lam * (lam * tail[-1] - p) / (1 - p)) <= p  # next value non-positive
    assert np.all(np.diff(tail) < 0)


def test_lam_equals_one_minus_p():
    # s_i = 1 - i p / (1 - p): linear, i* = floor((1-p)/p)
    for p in (0.3, 0.2, 0.15):
        lam = 1 - p
        tail = fixed_point(lam, p, 20)
        i = np.arange(1, 21)
        expect = np.clip(1 - i * p / (1 - p), 0, None)
        assert np.allclose(tail, expect, atol=1e-12)
        assert top_level(lam, p) == math.floor((1 - p) / p + 1e-9)


def test_trivial_cases():
    assert np.all(fixed_point(0.5, 0.5, 10) == 0) and np.all(fixed_point(0.3, 1.0, 10) == 0)
    assert top_level(0.5, 0.6) == 0 and top_level(0.5, 0.0) == math.inf
    assert invariant_mean_queue(0.5, 0.0) == pytest.approx(1.0)
    assert invariant_mean_response(0.5, 0.0) == pytest.approx(2.0)
    assert invariant_mean_response(0.4, 0.5) == 0.0
    assert invariant_mean_response(0.0, 0.0) == 1.0 and invariant_mean_response(0.0, 0.2) == 0.0


def test_corollary_3_slope():
    # the growth of v_1 per unit of log(1/(1-lam)) tends to 1/log(1/(1-p)); at lam = 1 - 1e-6
    # the local slope is within 1% of it, while at lam <= 0.995 it is still well below
    for p in (0.05, 0.1, 0.2):
        x = [math.log(1e6), math.log(1e7)]
        v = [invariant_mean_queue(1 - 1e-6, p), invariant_mean_queue(1 - 1e-7, p)]
        local = (v[1] - v[0]) / (x[1] - x[0])
        assert local == pytest.approx(predicted_slope(p), rel=0.01)
        assert invariant_mean_queue(1 - 1e-7, p) < asymptotic_mean_queue(1 - 1e-7, p)
    # exponential phase transition: p = 0.05 keeps v_1 ~ 300 where p = 0 has 1e7
    assert invariant_mean_queue(1 - 1e-7, 0.05) < 400 < invariant_mean_queue(1 - 1e-7, 0.0)


# ------------------------------------------------------------------------------------------
# fluid model
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lam, p", CASES)
def test_fixed_point_of_drift_is_closed_form(lam, p):
    fp = fluid_fixed_point(lam, p)
    n = max(fp.tail.size, 1)
    closed = fixed_point(lam, p, n)
    if p == 0.0:  # truncated at L with lam**(L+1) <= 1e-16: loss boundary error of that size
        assert np.max(np.abs(fp.tail - closed)) < 1e-15
    else:
        assert np.all(np.abs(fp.tail - closed[: fp.tail.size]) < 1e-12)
        assert np.all(closed[fp.tail.size:] < 1e-12)
        assert fp.top == fp.tail.size
    # the paper's drift (eq. 3.6, in v coordinates, exact case analysis of g) vanishes there
    tail = fixed_point(lam, p, max(n, 1) + 2)
    v = np.cumsum(tail[::-1])[::-1]
    assert np.max(np.abs(fluid_drift_v(v, lam, p))) < 1e-12


def test_drift_v_away_from_fixed_point():
    # s = (0.5, 0.2), lam = 0.9, p = 0.1: v = (0.7, 0.2); g_1 = g_2 = p, g_3 = min(lam*0.2, p)
    lam, p = 0.9, 0.1
    f = fluid_drift_v([0.7, 0.2, 0.0], lam, p)
    v = [1.7, 0.7, 0.2, 0.0, 0.0]
    expect = [lam * (v[i - 1] - v[i]) - (1 - p) * (v[i] - v[i + 1]) - g
              for i, g in zip((1, 2, 3), (p, p, min(lam * 0.2, p)))]
    assert np.allclose(f, expect)


STARTS = {
    "empty": None,
    "full30": np.ones(30),
    "steep": [0.9, 0.9, 0.9, 0.1, 0.1, 0.05],
    "random": np.sort(np.random.default_rng(3).uniform(size=12))[::-1],
}


@pytest.mark.parametrize("lam, p, t_end", [(0.6, 0.0, 800.0), (0.5, 0.6, 200.0),
                                           (0.5, 0.5, 200.0), (0.9, 0.05, 2500.0),
                                           (0.95, 0.2, 2000.0), (0.8, 0.2, 400.0),
                                           (0.7, 0.3, 400.0)])
def test_fluid_converges_from_any_start(lam, p, t_end):
    inv = fixed_point(lam, p, 4096)
    for name, s0 in STARTS.items():
        sol = solve_fluid(lam, p, t_end, s0)
        assert sol.success, (name, sol.message)
        end = sol.tail[-1]
        dist = np.max(np.abs(end - inv[: end.size]))
        assert dist < 1e-8, (name, dist)
        assert np.all(np.diff(sol.tail, axis=1) <= 1e-12)  # stays a tail
        if p > 0:
            assert sol.top[-1] <= max(top_level(lam, p), 0) + 0  # final regime = support


def test_fluid_regime_switches():
    # from empty at lam = 0.9, p = 0.05 the levels open one by one up to i* = 12 and never close
    sol = solve_fluid(0.9, 0.05, 100.0)
    kinds = [k for _, k, _ in sol.switches]
    assert kinds == ["grow"] * 12 and [m for *_, m in sol.switches] == list(range(1, 13))
    # from 20 full levels: lam * s_20 > p, so the tail first spreads upwards (to 26 levels),
    # then the central server eats the top levels one at a time down to i* = 12
    sol = solve_fluid(0.9, 0.05, 2500.0, np.ones(20))
    grows = [m for _, k, m in sol.switches if k == "grow"]
    empties = [m for _, k, m in sol.switches if k == "empty"]
    assert grows == list(range(21, 21 + len(grows))) and len(grows) >= 1
    assert empties == list(range(grows[-1] - 1, 11, -1))
    assert sol.switches[len(grows) - 1][0] < sol.switches[len(grows)][0]  # all grows first
    # lam <= p: the empty system stays empty
    sol = solve_fluid(0.5, 0.6, 10.0)
    assert sol.switches == [] and sol.tail.max() == 0


def test_fluid_on_a_grid_coarser_than_its_regimes():
    """From empty at lam = 0.9, p = 0.1 the first regimes last less than a grid step of T = 1000
    on 50 points: the output is still exactly the grid (it once failed with an AttributeError),
    and equals the solution on the solver's own steps, interpolated by the linear regime."""
    t = np.linspace(0.0, 1000.0, 50)
    sol = solve_fluid(0.9, 0.1, 1000.0, t_eval=t)
    assert sol.success and np.array_equal(sol.t, t) and sol.tail.shape[0] == t.size
    free = solve_fluid(0.9, 0.1, 1000.0)
    assert free.t.size > t.size and free.switches == sol.switches
    last = np.searchsorted(free.t, t[-1], side="right") - 1
    np.testing.assert_allclose(sol.tail[-1, : free.tail.shape[1]], free.tail[last], atol=1e-9)


def test_fluid_mass_balance():
    # d v_1 / dt = lam - (1-p) s_1 - p (while non-empty): integrate and compare
    lam, p = 0.9, 0.1
    t = np.linspace(0, 30, 3001)
    sol = solve_fluid(lam, p, 30.0, [0.8, 0.6, 0.3], t_eval=t)
    v1 = sol.tail.sum(axis=1)
    rate = lam - (1 - p) * sol.tail[:, 0] - p
    pred = v1[0] + np.concatenate([[0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(sol.t))])
    assert np.max(np.abs(pred - v1)) < 1e-4


# ------------------------------------------------------------------------------------------
# simulators
# ------------------------------------------------------------------------------------------
def test_central_pick_uniform_among_longest():
    q = np.array([3, 5, 1, 5, 0, 5, 2], dtype=np.int64)
    state = np.random.SeedSequence(7).generate_state(4, dtype=np.uint64)
    counts = np.zeros(q.size, dtype=np.int64)
    for _ in range(30000):
        counts[central_pick(q, state)] += 1
    assert np.all(counts[q < 5] == 0)
    assert sps.chisquare(counts[q == 5]).pvalue > ALPHA
    assert central_pick(np.zeros(4, dtype=np.int64), state) == -1


def exact_two_stations(lam, p, levels=80):
    """Stationary law of the N = 2 chain (truncated at ``levels`` tasks per station)."""
    n = levels + 1
    idx = lambda a, b: a * n + b  # noqa: E731
    rows, cols, vals = [], [], []

    def add(i, j, r):
        rows.append(i), cols.append(j), vals.append(r)

    for a in range(n):
        for b in range(n):
            i = idx(a, b)
            if a < levels:
                add(i, idx(a + 1, b), lam)
            if b < levels:
                add(i, idx(a, b + 1), lam)
            if a > 0:
                add(i, idx(a - 1, b), 1 - p)
            if b > 0:
                add(i, idx(a, b - 1), 1 - p)
            c = 2 * p  # central rate N p, to a longest queue (split on ties)
            if a > b:
                add(i, idx(a - 1, b), c)
            elif b > a:
                add(i, idx(a, b - 1), c)
            elif a > 0:
                add(i, idx(a - 1, b), c / 2)
                add(i, idx(a, b - 1), c / 2)
    Q = sparse.csr_matrix((vals, (rows, cols)), shape=(n * n, n * n))
    Q = Q - sparse.diags(np.asarray(Q.sum(axis=1)).ravel())
    A = Q.T.tolil()
    A[0, :] = 1.0
    rhs = np.zeros(n * n)
    rhs[0] = 1.0
    pi = spsolve(A.tocsr(), rhs).reshape(n, n)
    q1 = np.arange(n)
    marg = pi.sum(axis=1)  # law of station 1
    tail = np.array([marg[i:].sum() for i in range(1, 11)])
    v1 = float((marg * q1).sum())
    return {"v1": v1, "resp": v1 / lam, "pwait": tail[0], "tail": tail}


@pytest.mark.parametrize("engine", [simulate_agent, simulate_occupancy])
@pytest.mark.parametrize("lam, p", [(0.7, 0.3), (0.9, 0.5)])
def test_two_stations_exact(engine, lam, p):
    ex = exact_two_stations(lam, p)
    res = engine(2, lam, p, events=4_000_000, seed=11, n_batches=20)
    assert_uncorrelated(res)
    assert_within_se(res.mean_queue, ex["v1"], res.mean_queue_se, "v_1")
    assert_within_se(res.mean_response, ex["resp"], res.mean_response_se, "mean response")
    assert_within_se(res.prob_wait, ex["pwait"], res.prob_wait_se, "prob_wait")
    for i in range(4):
        assert_within_se(res.tail[i], ex["tail"][i], res.tail_se[i], f"s_{i + 1}")


@pytest.mark.parametrize("engine", [simulate_agent, simulate_occupancy])
def test_p0_is_mm1(engine):
    lam = 0.5
    res = engine(100, lam, 0.0, events=20_000_000, seed=3)
    assert_uncorrelated(res)
    assert_within_se(res.mean_response, 1 / (1 - lam), res.mean_response_se, "M/M/1 response")
    assert_within_se(res.mean_queue, lam / (1 - lam), res.mean_queue_se, "M/M/1 queue")
    for i in range(5):
        assert_within_se(res.tail[i], lam ** (i + 1), res.tail_se[i], f"s_{i + 1}")


@pytest.mark.parametrize("engine", [simulate_agent, simulate_occupancy])
def test_p1_queues_vanish(engine):
    # p = 1: all service is central, so the total is an M/M/1 queue of load lam:
    # v_1 = lam / ((1 - lam) N) exactly, and s_1 <= v_1 -> 0 as N grows
    lam = 0.5
    s1 = []
    for n in (10, 100, 1000):
        res = engine(n, lam, 1.0, events=4_000_000, seed=n)
        assert_within_se(res.mean_queue, lam / ((1 - lam) * n), res.mean_queue_se, f"v_1 at N={n}")
        assert_within_se(res.mean_response, 1 / ((1 - lam) * n), res.mean_response_se, f"T at N={n}")
        assert res.tail[0] <= res.mean_queue + 1e-12
        s1.append(res.tail[0])
    assert s1[0] > s1[1] > s1[2]


def test_large_n_matches_invariant_state():
    # occupancy engine at N = 10^5 (cost per event independent of N): the time averages match the
    # invariant state within the estimated SEs (the finite-N bias, ~ 0.07 (N/100)**-0.8 at this
    # load, is far below them)
    lam, p = 0.8, 0.1
    res = simulate_occupancy(100_000, lam, p, events=100_000_000, seed=5)
    assert_uncorrelated(res)
    inv = fixed_point(lam, p, 8)
    assert_within_se(res.mean_queue, invariant_mean_queue(lam, p), res.mean_queue_se, "v_1")
    assert_within_se(res.mean_response, invariant_mean_response(lam, p), res.mean_response_se, "T")
    assert_within_se(res.prob_wait, inv[0], res.prob_wait_se, "prob_wait")
    for i in range(top_level(lam, p)):
        assert_within_se(res.tail[i], inv[i], res.tail_se[i], f"s_{i + 1}")
    assert np.all(res.tail[top_level(lam, p):] < 1e-3)


@pytest.mark.slow
def test_million_stations_match_invariant_state():
    lam, p = 0.9, 0.2
    res = simulate_occupancy(1_000_000, lam, p, events=1_000_000_000, seed=6)
    inv = fixed_point(lam, p, 8)
    assert_within_se(res.mean_queue, invariant_mean_queue(lam, p), res.mean_queue_se, "v_1")
    for i in range(top_level(lam, p)):
        assert_within_se(res.tail[i], inv[i], res.tail_se[i], f"s_{i + 1}")
    assert tail_distance(res.tail, lam, p, "sup") < 5e-3


def test_agent_matches_occupancy_and_little():
    lam, p, n = 0.9, 0.2, 1000
    a = simulate_agent(n, lam, p, events=20_000_000, seed=21)
    o = simulate_occupancy(n, lam, p, events=20_000_000, seed=22)
    assert_uncorrelated(a), assert_uncorrelated(o)
    for name in ("mean_queue", "mean_response", "prob_wait"):
        x, y = getattr(a, name), getattr(o, name)
        se = math.hypot(getattr(a, name + "_se"), getattr(o, name + "_se"))
        assert_within_se(x, y, se, f"agent vs occupancy {name}")
    for i in range(6):
        assert_within_se(a.tail[i], o.tail[i], math.hypot(a.tail_se[i], o.tail_se[i]), f"s_{i + 1}")
    # Little's law inside the agent engine: direct response times vs v_1 / lam
    assert_within_se(lam * a.mean_response, a.mean_queue,
                  math.hypot(lam * a.mean_response_se, a.mean_queue_se), "Little")
    assert a.drain_events > 0 and "drain stopped" not in a.ci_method
    assert a.events_run == 20_000_000 + a.drain_events


def test_empty_start_and_reproducible():
    r1 = simulate_occupancy(500, 0.9, 0.1, events=2_000_000, seed=9, init="empty")
    r2 = simulate_occupancy(500, 0.9, 0.1, events=2_000_000, seed=9, init="empty")
    assert r1.mean_queue == r2.mean_queue and np.array_equal(r1.tail, r2.tail)
    a1 = simulate_agent(500, 0.9, 0.1, events=2_000_000, seed=9)
    a2 = simulate_agent(500, 0.9, 0.1, events=2_000_000, seed=9)
    assert a1.mean_response == a2.mean_response
    assert r1.warmup_time > 0  # the warm-up cut (a fixed tenth under obm, the default) drops the fill-up from empty


@pytest.mark.parametrize("engine", [simulate_agent, simulate_occupancy])
def test_frac_within_h_two_stations(engine):
    # arrivals to a queue of fewer than h tasks: by PASTA the limit is P(Q_1 < h) = 1 - s_h
    lam, p = 0.9, 0.5
    ex = exact_two_stations(lam, p)
    for h in (1, 3):
        res = engine(2, lam, p, events=4_000_000, seed=12 + h, h=h)
        assert_within_se(res.frac_within_h, 1 - ex["tail"][h - 1], res.frac_within_h_se, f"h={h}")


def test_frac_within_h_meanfield():
    base = dict(n_servers=200, lam=0.9, p=0.05, policy="central", engine="meanfield")
    for h in (1, 3):
        mf = run_meanfield_task({**base, "h": h})
        assert mf["frac_within_h"] == pytest.approx(1 - fixed_point(0.9, 0.05, 3)[h - 1])
    assert run_meanfield_task({**base, "h": 1})["prob_wait"] == pytest.approx((0.9 - 0.05) / 0.95)


# ------------------------------------------------------------------------------------------
# task entry points and input checks
# ------------------------------------------------------------------------------------------
TASK = {"policy": "central", "n_servers": 300, "lam": 0.9, "p": 0.05, "events": 200_000,
        "seed": 1, "init": "meanfield", "n_batches": 20, "max_level": 16, "h": 1}


@pytest.mark.parametrize("runner, engine", [(run_agent_task, "agent"),
                                            (run_occupancy_task, "occupancy"),
                                            (run_meanfield_task, "meanfield")])
def test_task_outputs(runner, engine):
    out = runner({**TASK, "engine": engine})
    assert tuple(out) == RESULT_KEYS
    assert len(out["tail"]) == 16 and all(isinstance(x, float) for x in out["tail"])
    assert out["queueing_ratio"] is None and out["drop_prob"] == 0.0
    assert out["messages_per_job"] == 0.0
    assert out["mean_wait"] == out["mean_response"]
    for k, v in out.items():
        assert v is None or isinstance(v, (int, float, str, list)), (k, type(v))
        assert not isinstance(v, (np.generic, np.ndarray)), k
    if engine == "meanfield":
        assert out["mean_queue"] == pytest.approx(invariant_mean_queue(0.9, 0.05))
        assert out["mean_response_se"] is None and out["n_jobs"] == 0
    else:
        assert out["n_jobs"] > 0 and out["events_run"] >= 200_000


def test_task_through_sim_run():
    import sim

    out = sim.run({**TASK, "engine": "occupancy"})
    assert "wall_time" in out
    with pytest.raises(ValueError, match="p=1.5"):
        sim.run({**TASK, "engine": "occupancy", "p": 1.5})


BAD = [
    (lambda: fixed_point(0.9, 1.2), "p=1.2"),
    (lambda: fixed_point(0.9, -0.1), "p=-0.1"),
    (lambda: fixed_point(1.0, 0.1), "lam=1.0"),
    (lambda: fixed_point(-0.2, 0.1), "lam=-0.2"),
    (lambda: top_level(0.5, float("nan")), "p=nan"),
    (lambda: solve_fluid(0.9, 1.5, 10.0), "p=1.5"),
    (lambda: solve_fluid(1.2, 0.1, 10.0), "lam=1.2"),
    (lambda: fluid_fixed_point(0.9, -1.0), "p=-1.0"),
    (lambda: simulate_occupancy(100, 0.9, 2.0, events=10_000), "p=2.0"),
    (lambda: simulate_agent(100, 1.0, 0.1, events=10_000), "lam=1.0"),
    (lambda: simulate_agent(100, 0.5, True, events=10_000), "p=True"),
    (lambda: simulate_occupancy(0, 0.5, 0.1, events=10_000), "n_servers=0"),
    (lambda: simulate_occupancy(10, 0.5, 0.1, events=10), "events=10"),
    (lambda: simulate_occupancy(10, 0.5, 0.1, events=10_000, init="warm"), "init='warm'"),
    (lambda: run_meanfield_task({**TASK, "engine": "meanfield", "p": 1.01}), "p=1.01"),
    (lambda: run_occupancy_task({**TASK, "engine": "occupancy", "lam": 1.5}), "lam=1.5"),
    (lambda: run_agent_task({**TASK, "engine": "agent", "p": None}), "p=None"),
]


@pytest.mark.parametrize("call, key", BAD)
def test_bad_input_names_the_key(call, key):
    with pytest.raises(ValueError, match=key.replace("(", r"\(").replace(".", r"\.")):
        call()


def test_solve_fluid_rejects_bad_start():
    with pytest.raises(ValueError, match="s0"):
        solve_fluid(0.9, 0.1, 10.0, [0.2, 0.5])
    with pytest.raises(ValueError, match="s0"):
        solve_fluid(0.9, 0.1, 10.0, [1.5])


def test_drain_fallback_is_reported():
    # a drain cut short (1 event) falls back to the local-service bound and says so
    res = simulate_agent(300, 0.9, 0.2, events=200_000, seed=1, max_drain_events=1)
    assert "drain stopped" in res.ci_method and math.isfinite(res.mean_response)
    full = simulate_agent(300, 0.9, 0.2, events=200_000, seed=1)
    assert "drain stopped" not in full.ci_method and full.drain_events > 1
