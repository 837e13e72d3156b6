"""Tests of the agent engine (sim.dispatch.agent, sim.dispatch._agent_kernel) against closed forms.

Statistical assertions use ``|estimate - truth| <= Z * SE`` with the standard error estimated by
the engine (batch means), ``Z = 4``; frequency tests use a p-value threshold with the same
two-sided tail (``ALPHA``). Seeds are fixed, so every test is deterministic.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit
from scipy import stats as sps

from sim.core import buckets
from sim.core.buckets import build_buckets, pick_lowest
from sim.core.results import RESULT_KEYS
from sim.core.rng import below, next_raw
from sim.dispatch import _agent_kernel as K
from sim.dispatch._agent_kernel import _pick_pod
from sim.dispatch.agent import run_task, simulate
from sim.dispatch.meanfield.pod import initial_tail, pod_mean_response
from tests.checks import (
    assert_distribution,
    assert_mm1,
    assert_plain_row,
    assert_refused_naming_the_key,
    assert_seed_decides,
    new_state,
    task_factory,
)
from tests.helpers import Z, assert_within_se


#: the kernel's pick of one arrival on a hand-built state, for tests
@njit
def choose_server(q, policy, d, state):
    """Server chosen by ``policy`` for one arrival given queue lengths ``q``.

    Uses the same pick functions as the kernel; ``state`` (uint64[4]) is advanced in place.
    For JSQ the bucket structure is rebuilt from ``q`` (O(N), fine for tests).
    """
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    n_servers = q.size
    if policy == K.RANDOM:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        n = below(r, n_servers)
    elif policy == K.POD:
        samp = np.arange(n_servers)
        n, s0, s1, s2, s3 = _pick_pod(q, d, samp, 2 * d > n_servers, s0, s1, s2, s3)
    else:
        perm, pos, start = build_buckets(q, q.max() + 2)
        n, s0, s1, s2, s3 = pick_lowest(q, perm, start, s0, s1, s2, s3)
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3
    return n



def draw_counts(q, policy, d, n_draws, seed):
    q = np.asarray(q, dtype=np.int64)
    state = new_state(seed)
    counts = np.zeros(q.size, dtype=np.int64)
    for _ in range(n_draws):
        counts[choose_server(q, policy, d, state)] += 1
    return counts


# ------------------------------------------------------------------------------------------
# policy selection on hand-built states
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, d", [(20, 3), (6, 4)])  # rejection sampling; partial Fisher-Yates
def test_pod_picks_shortest_of_a_sample_without_replacement(n, d):
    # distinct queue lengths q = 0..n-1: server i is chosen iff it is in the sample and the
    # other d-1 sampled servers are longer, so P(i) = C(n-1-i, d-1) / C(n, d) exactly
    # (with replacement this law would differ); the d-1 longest servers are never chosen.
    rng = np.random.default_rng(5)
    order = rng.permutation(n)  # server order must not matter
    q = np.empty(n, dtype=np.int64)
    q[order] = np.arange(n)
    probs = np.array([math.comb(n - 1 - q[i], d - 1) for i in range(n)]) / math.comb(n, d)
    assert_distribution(draw_counts(q, K.POD, d, 20_000, seed=1), probs)


@pytest.mark.parametrize("n, d", [(2, 2), (10, 10), (50, 2)])
def test_pod_breaks_ties_uniformly(n, d):
    # two tied minima (servers 0 and n-1) among longer queues, all of equal length
    q = np.full(n, 3)
    tied = [0, n - 1]
    q[tied] = 1
    probs = np.zeros(n)
    if d == n:
        probs[tied] = 0.5
    else:  # d = 2: a tied server is chosen if sampled with a longer one, or with the other tied
        # server and winning the (uniform) tie; a longer server only from a pair of longer ones
        probs[:] = (n - 3) / (n * (n - 1))
        probs[tied] = 2 / n * ((n - 2) + 0.5) / (n - 1)
    assert probs.sum() == pytest.approx(1.0)
    counts = draw_counts(q, K.POD, d, 20_000, seed=2)
    assert counts[tied].min() > 0
    assert_distribution(counts, probs)


def test_pod_with_d_equal_n_always_picks_the_unique_shortest():
    q = np.array([4, 2, 7, 1, 3, 1 + 1, 9, 5])
    counts = draw_counts(q, K.POD, q.size, 2_000, seed=3)
    assert counts[3] == 2_000


def test_jsq_uniform_among_the_minima():
    q = np.array([2, 0, 5, 0, 1, 3, 0, 4, 1, 2])
    probs = (q == 0) / np.sum(q == 0)
    assert_distribution(draw_counts(q, K.JSQ, 1, 30_000, seed=4), probs)


def test_random_is_uniform():
    q = np.array([0, 9, 3, 3, 1, 0, 2])
    assert_distribution(draw_counts(q, K.RANDOM, 1, 30_000, seed=5), np.full(q.size, 1 / q.size))


def check_buckets(q, perm, pos, start):
    n = q.size
    assert np.array_equal(np.sort(perm), np.arange(n))
    assert np.array_equal(pos[perm], np.arange(n))
    assert np.all(np.diff(q[perm]) >= 0)
    for lvl in range(start.size):
        assert start[lvl] == np.sum(q < lvl), (lvl, start[lvl])


def test_jsq_buckets_stay_consistent_under_random_moves():
    rng = np.random.default_rng(6)
    n, levels = 17, 40
    q = rng.integers(0, 4, size=n).astype(np.int64)
    perm, pos, start = buckets.build_buckets(q, levels)
    check_buckets(q, perm, pos, start)
    for _ in range(3_000):
        s = int(rng.integers(n))
        if rng.random() < 0.5 and q[s] + 2 < levels:
            buckets.bucket_up(perm, pos, start, s, q[s])
            q[s] += 1
        elif q[s] > 0:
            buckets.bucket_down(perm, pos, start, s, q[s])
            q[s] -= 1
        check_buckets(q, perm, pos, start)


# ------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["meanfield", "empty"])
def test_random_routing_is_independent_mm1(init):
    lam = 0.7
    r = simulate(10, lam, "random", events=30_000_000, seed=11, init=init)
    assert_mm1(r, lam)


def test_pod_large_n_matches_mean_field():
    # Finite-N bias: mean-field values are 1/N-accurate (Gast 2017); for d = 2, lam = 0.9 this
    # engine measures T_N - T_inf = c / N with c = 3.3 at N = 20 and c = 3.1 at N = 100, so the
    # allowance 5 / N (= 5e-4 at N = 1e4) bounds the bias; it is a tenth of the 4-SE band here.
    n, lam, d = 10_000, 0.9, 2
    s = initial_tail(lam, "pod", d)
    r = simulate(n, lam, "pod", d=d, events=100_000_000, seed=12)
    assert_within_se(r.mean_response, s.sum() / lam, r.mean_response_se, allowance=5 / n,
                  what="pod mean_response")
    for i in range(1, 5):
        assert_within_se(r.tail[i - 1], s[i - 1], r.tail_se[i - 1], allowance=5 / n, what=f"s_{i}")
    assert r.messages_per_job == 2 * d  # a probe is a request and a reply


@pytest.mark.parametrize("policy, d, rates", [
    ("pod", 2, None),
    ("jsq", 1, None),
    ("pod", 5, None),  # d > N/2: partial Fisher-Yates sampling
    ("random", 1, [0.9, 0.9, 1.0, 1.0, 1.1, 1.5]),  # stable: 0.6 * mean(mu) = 0.64 < min(mu)
    ("jsq", 1, [0.5, 0.5, 1.0, 1.0, 2.0, 3.0]),
    ("pod", 2, [0.5, 0.5, 1.0, 1.0, 2.0, 3.0]),
])
def test_littles_law(policy, d, rates):
    n, lam = 6, 0.6
    r = simulate(n, lam, policy, d=d, events=10_000_000, seed=13, service_rates=rates)
    mean_mu = 1.0 if rates is None else float(np.mean(rates))
    rhs = lam * mean_mu * r.mean_response
    se = math.hypot(r.mean_queue_se, lam * mean_mu * r.mean_response_se)
    assert_within_se(r.mean_queue, rhs, se, what="Little")


def erlang_c_response(n, a):
    """Mean response of M/M/n with offered load a = n * lam (unit service rate)."""
    b = 1.0  # Erlang B by recursion
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    c = n * b / (n - a * (1 - b))
    return 1.0 + c / (n - a)


def test_jsq_moderate_n_close_to_one_from_above():
    # JSQ cannot beat the central queue M/M/N (Erlang C, a lower bound) and, being optimal for
    # identical exponential servers (Winston 1977), not exceed power-of-2 (whose N -> inf value is
    # the mean-field sum s_i / lam, approached from above).
    n, lam = 50, 0.8
    r = simulate(n, lam, "jsq", events=20_000_000, seed=14)
    lower = erlang_c_response(n, n * lam)
    upper = initial_tail(lam, "pod", 2).sum() / lam
    assert 1.0 <= lower < 1.01
    assert r.mean_response >= lower - Z * r.mean_response_se
    assert r.mean_response <= upper - Z * r.mean_response_se
    # response - wait is one Exp(1) service
    assert_within_se(r.mean_response - r.mean_wait, 1.0,
                  math.hypot(r.mean_response_se, r.mean_wait_se), what="service time")
    assert r.messages_per_job == 2 * n


def test_heterogeneous_rates_random_routing_is_mm1_mixture():
    # uniform routing: server n is M/M/1 with arrival a = lam * mean(mu) and rate mu_n
    mu = np.array([1.0, 1.5, 2.0, 3.0])
    lam = 0.3
    a = lam * mu.mean()
    assert a < mu.min()
    r = simulate(mu.size, lam, "random", events=30_000_000, seed=15, service_rates=mu)
    assert_within_se(r.mean_response, np.mean(1 / (mu - a)), r.mean_response_se, what="mixture T")
    assert_within_se(r.mean_queue, np.mean(a / (mu - a)), r.mean_queue_se, what="mixture L")
    assert_within_se(r.prob_wait, np.mean(a / mu), r.prob_wait_se, what="mixture P(wait)")


def test_ring_growth_gives_identical_results():
    # the same run with a small ring (grown several times inside the kernel) and a large one
    def run(capacity):
        n, lam = 8, 0.9
        state = new_state(16)
        q = np.zeros(n, dtype=np.int64)
        buf = np.full((n, capacity), -1, dtype=np.int64)
        head = np.zeros(n, dtype=np.int64)
        w = 50
        bounds = (np.arange(w + 1) * 200_000) // w
        outs = [np.zeros(w, np.int64), np.zeros(w), np.zeros(w, np.int64), np.zeros(w),
                np.zeros(w, np.int64), np.zeros(w, np.int64), np.zeros(w, np.int64),
                np.zeros((w, 64), np.int64), np.zeros(w, np.int64)]
        c = K.agent_kernel(K.RANDOM, 1, False, np.uint64(int(lam / (1 + lam) * 2.0**64)), False,
                           np.zeros(1, np.uint64), np.zeros(1, np.int64), q, buf, head, bounds,
                           state, *outs).shape[1]
        return c, outs, state

    c_small, outs_small, st_small = run(8)
    c_big, outs_big, st_big = run(1024)
    assert c_small > 8 and c_big == 1024
    for a, b in zip(outs_small, outs_big):
        assert np.array_equal(a, b)
    assert np.array_equal(st_small, st_big)


# ------------------------------------------------------------------------------------------
# API
# ------------------------------------------------------------------------------------------
task = task_factory(engine="agent", policy="pod", n_servers=30, lam=0.8, d=2, events=200_000,
                   seed=2024, init="meanfield", n_batches=20, max_level=16, service_rates=None)


def test_run_task_returns_exactly_the_schema_keys_as_plain_values():
    out = run_task(task())
    assert_plain_row(out, RESULT_KEYS)
    assert out["ci_method"].startswith("overlapping batch means, batch ")  # the default se_method, obm
    assert out["events_run"] == 200_000
    assert 0 <= out["warmup_time"] < out["sim_time"]
    assert out["n_jobs"] > 0
    assert out["messages_per_job"] == 4.0


def test_sim_run_dispatch():
    import sim

    out = sim.run(task(policy="jsq"))
    assert set(out) == set(RESULT_KEYS) | {"wall_time", "rel_halfwidth", "runs"}


def test_reproducible_for_a_seed_and_different_across_seeds():
    assert_seed_decides(run_task, task)


@pytest.mark.parametrize("key, value", [
    ("n_servers", 0), ("n_servers", 2.5), ("lam", 1.0), ("lam", -0.1), ("lam", float("nan")),
    ("policy", "jsw"), ("d", 0), ("d", 31), ("events", 10), ("seed", -1), ("init", "full"),
    ("n_batches", 1), ("max_level", 0), ("service_rates", [1.0, 2.0]),
    ("service_rates", [0.0] * 30),
])
def test_bad_input_raises_value_error_naming_the_key(key, value):
    kw = dict(n_servers=30, lam=0.8, policy="pod", d=2, events=10_000, seed=1)
    assert_refused_naming_the_key(simulate, kw, key, value)


# ------------------------------------------------------------------------------------------
# confidence-interval calibration (slow)
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_batch_means_intervals_cover_at_the_nominal_rate():
    # 200 independent M/M/1 runs (N = 1, lam = 0.5, 400k events = 267k time units, about 20k
    # relaxation times 1/(1-sqrt(lam))^2 = 11.7, so each of the 20 batches spans ~500 of them).
    # 95% t-intervals (19 dof) of the mean response must cover 1/(1-lam) at a rate within
    # 3 binomial standard errors of 0.95.
    lam, runs, n_batches = 0.5, 200, 20
    t = sps.t.ppf(0.975, n_batches - 1)
    truth = 1 / (1 - lam)
    covered = 0
    for seed in range(runs):
        r = simulate(1, lam, "random", events=400_000, seed=10_000 + seed, n_batches=n_batches)
        covered += abs(r.mean_response - truth) <= t * r.mean_response_se
    rate = covered / runs
    tol = 3 * math.sqrt(0.95 * 0.05 / runs)
    assert abs(rate - 0.95) <= tol, (rate, tol)


def test_short_runs_at_large_n_are_unbiased():
    # A run only ~50 time units long at N = 20000: jobs still in the system at the end are the
    # long ones; without the end-of-run correction the mean response came out ~1-3% low.
    # Replications start from the mean-field point, so their spread gives an honest SE.
    n, lam, d = 20_000, 0.7, 2
    truth = pod_mean_response(lam, d)
    reps = [simulate(n, lam, "pod", d=d, events=2_000_000, seed=s) for s in range(6)]
    for key, exact in (("mean_response", truth), ("mean_wait", truth - 1.0)):
        v = np.array([getattr(r, key) for r in reps])
        se = v.std(ddof=1) / np.sqrt(v.size)
        assert abs(v.mean() - exact) <= 4 * se + 5.0 / n, (key, v.mean(), exact, se)
