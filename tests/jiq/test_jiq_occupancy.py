"""Tests of the distributed-JIQ occupancy engine (sim.jiq.occupancy, sim.jiq._occupancy_kernel).

Statistical assertions use ``|estimate - truth| <= Z * SE (+ a measured finite-N allowance)``
with the standard error estimated by the engine (batch means) (tests.helpers); frequency tests
use a chi-square p-value threshold with the same two-sided tail (``ALPHA``). Seeds are fixed.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.results import RESULT_KEYS
from sim.jiq import _occupancy_kernel as K
from sim.jiq.occupancy import EXTRA_KEYS, run_task, simulate
from sim.jiq.policies import POLICIES
from tests.checks import assert_plain_row, assert_seed_decides, new_state, task_factory
from tests.helpers import ALPHA, Z, assert_engines_agree, assert_within_se


def trim(c):
    c = [int(v) for v in c]
    while len(c) > 1 and c[-1] == 0:
        c.pop()
    return tuple(c)


def assert_frequencies(observed: dict, probs: dict):
    """Chi-square goodness of fit of outcome counts to exact probabilities (outcomes of
    probability 0 must not occur)."""
    assert set(observed) <= set(probs), (set(observed) - set(probs), probs)
    keys = list(probs)
    counts = np.array([observed.get(key, 0) for key in keys])
    p = np.array([float(probs[key]) for key in keys])
    assert p.sum() == pytest.approx(1.0)
    pval = sps.chisquare(counts, counts.sum() * p).pvalue
    assert pval > ALPHA, (dict(zip(keys, counts)), dict(zip(keys, p)), pval)


# ------------------------------------------------------------------------------------------
# exact next-state laws, written from the model's rules (independently of the kernel)
# ------------------------------------------------------------------------------------------
def min_of_sample_law(c, d):
    """P(lowest index among d distinct items drawn without replacement from counts c = i)."""
    n = sum(c)
    tot = math.comb(n, d)
    out = {}
    for i in range(len(c)):
        ge = sum(c[i:])
        gt = sum(c[i + 1:])
        p = Fraction(math.comb(ge, d) - math.comb(gt, d), tot)
        if p:
            out[i] = p
    return out


def moved(c, frm, to):
    c = list(c) + [0, 0]
    c[frm] -= 1
    c[to] += 1
    return trim(c)


def arrival_law(policy, x, y, d):
    """Next (x, y) after an arrival: the scheduler's I-queue has size j w.p. y[j]/M; j > 0:
    a listed server takes the task; j = 0: a blind server (uniform, or min of d for jiq_pod);
    if it is idle, a delete goes to an I-queue of size j' w.p. j' y[j'] / x[0]."""
    n, m, x0 = sum(x), sum(y), x[0]
    law: dict = {}

    def add(key, p):
        law[key] = law.get(key, 0) + p

    for j, cnt in enumerate(y):
        pj = Fraction(cnt, m)
        if not pj:
            continue
        if j > 0:
            add((moved(x, 0, 1), moved(y, j, j - 1)), pj)
            continue
        blind = (min_of_sample_law(x, d) if policy == "jiq_pod"
                 else {lvl: Fraction(c, n) for lvl, c in enumerate(x) if c})
        for lvl, pl in blind.items():
            if lvl > 0:
                add((moved(x, lvl, lvl + 1), trim(y)), pj * pl)
                continue
            for jd, cd in enumerate(y):
                if jd > 0 and cd:
                    add((moved(x, 0, 1), moved(y, jd, jd - 1)), pj * pl * Fraction(jd * cd, x0))
    return law


def completion_law(policy, x, y, d):
    """Next (x, y) after a completion at a uniform busy server; a server becoming idle joins
    an I-queue of size j w.p. y[j]/M (jiq, jiq_pod) or the min size of d sampled (jiq_sqd)."""
    busy, m = sum(x) - x[0], sum(y)
    law: dict = {}
    join = (min_of_sample_law(y, d) if policy == "jiq_sqd"
            else {j: Fraction(c, m) for j, c in enumerate(y) if c})
    for lvl in range(1, len(x)):
        pl = Fraction(x[lvl], busy)
        if not pl:
            continue
        if lvl > 1:
            law[(moved(x, lvl, lvl - 1), trim(y))] = pl
            continue
        for j, pj in join.items():
            key = (moved(x, 1, 0), moved(y, j, j + 1))
            law[key] = law.get(key, 0) + pl * pj
    return law


def sample_steps(policy, what, x, y, d, n, seed):
    state = new_state(seed)
    xa, ya = np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)
    observed: dict = {}
    for _ in range(n):
        xx, yy, lvl, size, deleted = K.step(POLICIES[policy].occupancy_code, what, xa, ya, d, state)
        assert int(np.dot(np.arange(yy.size), yy)) == xx[0]  # listed == idle
        assert xx.sum() == xa.sum() and yy.sum() == ya.sum()
        key = (trim(xx), trim(yy))
        observed[key] = observed.get(key, 0) + 1
    return observed


# hand-built states: (x, y) with sum_j j y[j] = x[0]
STATES = [
    ([3, 2, 1], [1, 1, 1]),  # N = 6, M = 3
    ([4, 1, 0, 2], [2, 1, 0, 1]),  # N = 7, M = 4
    ([2, 3, 2, 1], [3, 2]),  # N = 8, M = 5: two I-queues of size 1
]


#: event -> (its exact law, the kernel's event code, the first seed)
EVENTS = {"arrival": (arrival_law, K.ARRIVAL, 100), "completion": (completion_law, K.COMPLETION, 200)}


@pytest.mark.parametrize("event, policy, d", [
    *(("arrival", p, d) for p, d in [("jiq", 1), ("jiq_pod", 2), ("jiq_pod", 3), ("jiq_sqd", 2)]),
    *(("completion", p, d) for p, d in [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2), ("jiq_sqd", 3)]),
])
@pytest.mark.parametrize("si", range(len(STATES)))
def test_transition_probabilities(event, policy, d, si):
    x, y = STATES[si]
    law, code, seed = EVENTS[event]
    observed = sample_steps(policy, code, x, y, d, 12_000, seed=seed + si)
    assert_frequencies(observed, law(policy, x, y, d))


def test_blind_task_to_an_idle_server_deletes_it_from_a_size_biased_iqueue():
    # x: 5 idle, 1 busy; y: an empty I-queue, one of size 1 and one of size 4 (M = 3).
    # An arrival at the empty one (1/3) goes blindly to an idle server w.p. 5/6; that server
    # is in the size-4 queue w.p. 4/5: y -> [1, 1, 0, 1, 0]
    state = new_state(7)
    x, y = np.array([5, 1]), np.array([1, 1, 0, 0, 1])
    hits = {}
    n = 30_000
    for _ in range(n):
        _, yy, lvl, size, deleted = K.step(K.JIQ, K.ARRIVAL, x, y, 1, state)
        if size == 0 and lvl == 0:
            hits[deleted] = hits.get(deleted, 0) + 1
    total = sum(hits.values())
    assert set(hits) == {1, 4}
    # binomial count of size-4 deletes among the deletes
    assert abs(hits[4] - 0.8 * total) <= Z * math.sqrt(total * 0.8 * 0.2)
    assert abs(total - n * 5 / 18) <= Z * math.sqrt(n * (5 / 18) * (13 / 18))


def test_pod_with_one_probe_has_the_law_of_jiq():
    for x, y in STATES:
        assert arrival_law("jiq_pod", x, y, 1) == arrival_law("jiq", x, y, 1)
    x, y = STATES[1]
    observed = sample_steps("jiq_pod", K.ARRIVAL, x, y, 1, 12_000, seed=300)
    assert_frequencies(observed, arrival_law("jiq", x, y, 1))


def test_huge_counts_are_drawn_exactly():
    # 3e9 servers, a third of them idle; 1e9 I-queues half of which are empty. An arrival is
    # blind w.p. 1/2 and then hits an idle server w.p. 1/3 (below64: no 32-bit bias)
    x = np.array([1_000_000_000, 2_000_000_000], dtype=np.int64)
    y = np.array([500_000_000, 0, 500_000_000], dtype=np.int64)  # listed: 1e9 = x[0]
    state = new_state(8)
    n = 30_000
    blind_idle = 0
    for _ in range(n):
        _, _, lvl, size, deleted = K.step(K.JIQ, K.ARRIVAL, x, y, 1, state)
        blind_idle += size == 0 and lvl == 0
        assert deleted in (-1, 2)
    p = 1 / 6
    assert abs(blind_idle - n * p) <= Z * math.sqrt(n * p * (1 - p))


# ------------------------------------------------------------------------------------------
# invariants, growth, conservation laws
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, d, n, r, lam, init", [
    ("jiq", 1, 50, 5, 0.95, "empty"),
    ("jiq_pod", 3, 60, 2, 0.9, "meanfield"),
    ("jiq_sqd", 2, 40, 4, 0.95, "meanfield"),
    ("jiq", 1, 8, 1, 0.98, "empty"),  # deep queues: the level arrays grow past 16
    ("jiq_sqd", 2, 60, 30, 0.3, "empty"),  # I-queues of ~20: the size arrays grow past 16
    ("jiq", 1, 10**6, 10**6, 0.9, "meanfield"),  # M = 1: no mean-field start at r > 1e5
])
def test_counts_stay_consistent(policy, d, n, r, lam, init):
    res = simulate(n, lam, policy, r, d, events=400_000, seed=11, init=init)
    assert res.init_used == (init if r <= 10**5 else "empty")
    x, y = res.final_levels, res.final_iqueues
    assert x.sum() == n and y.sum() == n // r == res.n_schedulers
    assert int(np.dot(np.arange(y.size), y)) == x[0]  # listed == idle
    assert np.all(x >= 0) and np.all(y >= 0)


def test_array_growth_gives_identical_results():
    # jiq at lam = 0.97 on 4 servers with r = 1 climbs far above 16 levels; 60 idle servers on
    # 2 schedulers start with I-queues of 30 in an array of 32 sizes, which uniform joins
    # outgrow. The same runs with room for 4096 levels and sizes must match bitwise.
    def run(n, r, lam, xcap, ycap):
        m = n // r
        x = np.zeros(xcap, dtype=np.int64)
        x[0] = n
        y = np.zeros(ycap, dtype=np.int64)
        y[r] = m
        state = new_state(14)
        bounds = (np.arange(51) * 400_000) // 50
        outs = K.new_outputs(50, 64)
        xf, yf = K.occupancy_kernel(K.JIQ, n, m, lam * n, 1, x, y, bounds, state, outs)
        return xf, yf, outs, state

    for n, r, lam, xcap, ycap in ((4, 1, 0.97, 16, 16), (60, 30, 0.3, 16, 32)):
        xs, ys, outs_s, st_s = run(n, r, lam, xcap, ycap)
        xb, yb, outs_b, st_b = run(n, r, lam, 4096, 4096)
        assert (xs.size > xcap) if r == 1 else (ys.size > ycap)
        assert np.array_equal(xs, xb[: xs.size]) and xb[xs.size:].sum() == 0
        assert np.array_equal(ys, yb[: ys.size]) and yb[ys.size:].sum() == 0
        for a, b in zip(outs_s, outs_b):
            assert np.array_equal(a, b)
        assert np.array_equal(st_s, st_b)


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_conservation_laws(policy, d):
    n, r, lam = 500, 10, 0.8
    res = simulate(n, lam, policy, r, d, events=4_000_000, seed=31)
    s1, s1_se = res.tail[0], res.tail_se[0]
    # work conservation: busy fraction = load
    assert_within_se(s1, lam, s1_se, what="s_1")
    # listed servers (from y) = idle servers (from x): mean_iqueue = r (1 - s_1)
    assert_within_se(res.mean_iqueue, r * (1 - s1), res.mean_iqueue_se, what="mean_iqueue")
    # Little: L = lam * E[T]
    assert_within_se(res.mean_queue, lam * res.mean_response,
                     math.hypot(res.mean_queue_se, lam * res.mean_response_se), what="Little")
    # a server becomes idle as often as a task reaches an idle one
    assert_engines_agree(res.join_rate, res.join_rate_se, lam * (1 - res.prob_wait),
                         lam * res.prob_wait_se, what="join rate")
    # ... which is the rate of completions at servers holding one task: s_1 - s_2
    assert_within_se(res.join_rate, s1 - res.tail[1],
                     math.hypot(res.join_rate_se, s1_se, res.tail_se[1]), what="join = s1 - s2")
    assert 0 < res.delete_rate < res.join_rate
    assert res.mean_wait == pytest.approx(res.mean_response - 1, abs=1e-12)
    assert res.queueing_ratio == pytest.approx(res.mean_response - 1, abs=1e-12)
    assert res.drop_prob == 0.0 and res.frac_within_h == pytest.approx(1 - res.prob_wait)
    if policy == "jiq":
        assert res.probe_rate == 0.0
    elif policy == "jiq_sqd":  # d I-queues probed per join
        assert res.probe_rate == pytest.approx(2 * d * res.join_rate, rel=1e-12)
    else:  # d servers probed per blind task; blind tasks at rate lam p0 (PASTA)
        assert_within_se(res.probe_rate, 2 * d * lam * res.p0,
                         math.hypot(res.probe_rate_se, 2 * d * lam * res.p0_se), what="probes")
    total = res.join_rate + res.delete_rate + res.probe_rate
    assert_within_se(res.messages_per_job, total / lam,
                     math.hypot(res.messages_per_job_se,
                                (res.join_rate_se + res.delete_rate_se + res.probe_rate_se) / lam),
                     what="messages per job")


# ------------------------------------------------------------------------------------------
# limits
# ------------------------------------------------------------------------------------------
def test_pod_with_one_probe_equals_jiq_in_simulation():
    n, r, lam = 300, 10, 0.9
    a = simulate(n, lam, "jiq", r, events=6_000_000, seed=41)
    b = simulate(n, lam, "jiq_pod", r, 1, events=6_000_000, seed=42)
    for key in ("mean_response", "prob_wait", "mean_queue", "p0", "join_rate", "delete_rate"):
        assert_engines_agree(getattr(a, key), getattr(a, key + "_se"), getattr(b, key),
                             getattr(b, key + "_se"), what=key)
    assert a.probe_rate == 0.0 and b.probe_rate > 0.0


def test_single_scheduler_response_falls_to_one_as_n_grows():
    # M = 1 (r = N): one I-queue lists every idle server, a task waits only when all N are
    # busy (centralized JIQ), which at lam = 0.9 becomes rare as N grows
    lam = 0.9
    runs = [simulate(n, lam, "jiq", n, events=3_000_000, seed=50 + i)
            for i, n in enumerate((4, 16, 64))]
    for a, b in zip(runs, runs[1:]):
        assert a.mean_response - b.mean_response > Z * math.hypot(a.mean_response_se,
                                                                  b.mean_response_se)
    assert all(res.p0 > 0 for res in runs)
    big = simulate(1000, lam, "jiq", 1000, events=3_000_000, seed=53)
    assert big.mean_response >= 1.0
    # no task of the run waited at all, or the excess is within its standard error
    assert big.mean_response == 1.0 or big.mean_response - 1 <= Z * big.mean_response_se


# ------------------------------------------------------------------------------------------
# against the mean field (N -> infinity at fixed r)
# ------------------------------------------------------------------------------------------
# Finite-N allowances, MEASURED (not guessed): the gap g(N) = estimate - mean field was
# measured at N = 100, 300, 1000, 3000, 10000 (one run each from the mean-field start, seed
# 12345 + N, 2 lam N T events with T = 1e4, 2e4, 5e4 time units at lam = 0.5, 0.9, 0.98) and
# fitted by g = c / N (weighted least squares, SE inflated by the Birge ratio when
# chi2/dof > 1). The fits are consistent with 1/N (chi2/dof <= 2.3 except jiq r=1 lam=0.98
# mean response, 4.7, where the batch-means SEs are short: slowest mean-field mode 2515 time
# units). Examples, c (+- SE): jiq r=10 lam=0.9: mean_response +5.58 (0.68), p0 +0.42 (0.19),
# delete_rate -0.472 (0.018) (g N = -0.46, -0.44, -0.53, -0.51, -0.52 at the five N);
# jiq_pod r=10 lam=0.9: mean_response +5.18 (0.39), p0 +1.16 (0.20), s_3 +2.21 (0.13);
# jiq r=10 lam=0.5: p0 -1.01 (0.07); jiq_pod r=10 lam=0.98: mean_response +29.9 (3.1).
# The table holds |c| + 2 SE(c), rounded up; the allowance at N is that over N.
#: the columns of FINITE_N_C's rows (probe_rate for jiq_pod only)
_C_COLUMNS = ("mean_response", "mean_queue", "p0", "s1", "s2", "s3", "mean_iqueue", "join_rate", "delete_rate",
              "probe_rate")
FINITE_N_C = {key: dict(zip(_C_COLUMNS, row)) for key, row in {
    ("jiq", 1, 0.5): (0.83, 0.66, 0.21, 0.18, 0.22, 0.14, 0.18, 0.13, 0.16),
    ("jiq", 1, 0.9): (13.7, 13.0, 0.19, 0.21, 0.57, 0.75, 0.21, 0.39, 0.24),
    ("jiq", 1, 0.98): (218.0, 218.0, 0.063, 0.064, 0.19, 0.34, 0.064, 0.13, 0.067),
    ("jiq", 10, 0.5): (0.36, 0.37, 1.16, 0.23, 0.2, 0.016, 2.3, 0.23, 0.38),
    ("jiq", 10, 0.9): (7.0, 6.4, 0.8, 0.17, 1.3, 1.6, 1.7, 1.2, 0.51),
    ("jiq", 10, 0.98): (72.0, 71.0, 1.2, 0.14, 1.5, 2.6, 1.4, 1.5, 0.28),
    ("jiq_pod", 1, 0.5): (0.45, 0.38, 0.21, 0.25, 0.27, 0.042, 0.25, 0.2, 0.23, 0.59),
    ("jiq_pod", 1, 0.9): (5.1, 4.7, 0.16, 0.22, 0.52, 1.4, 0.22, 0.46, 0.37, 0.89),
    ("jiq_pod", 1, 0.98): (34.0, 34.0, 0.15, 0.15, 0.62, 1.6, 0.15, 0.47, 0.34, 0.86),
    ("jiq_pod", 10, 0.5): (0.092, 0.21, 1.0, 0.21, 0.039, 0.0016, 2.1, 0.14, 0.48, 2.0),
    ("jiq_pod", 10, 0.9): (6.0, 5.6, 1.6, 0.2, 2.6, 2.5, 2.0, 2.6, 1.07, 6.0),
    ("jiq_pod", 10, 0.98): (37.0, 36.0, 1.8, 0.11, 2.5, 7.3, 1.2, 2.4, 0.67, 7.0),
}.items()}

#: slowest mode of the linearised mean-field ODE (time units; sim.jiq.meanfield
#: drift_jacobian at fixed_point_ode), which sets the run lengths below: each run covers at
#: least 80 of them (2000 time units at least), so each of the 20 batches spans >= 4
RELAXATION = {("jiq", 1, 0.5): 5.2, ("jiq", 1, 0.9): 105.5, ("jiq", 1, 0.98): 2515.4,
              ("jiq", 10, 0.5): 15.1, ("jiq", 10, 0.9): 12.9, ("jiq", 10, 0.98): 259.7,
              ("jiq_pod", 1, 0.5): 2.1, ("jiq_pod", 1, 0.9): 11.7, ("jiq_pod", 1, 0.98): 66.8,
              ("jiq_pod", 10, 0.5): 10.8, ("jiq_pod", 10, 0.9): 6.2,
              ("jiq_pod", 10, 0.98): 49.3}


def check_against_meanfield(policy, r, lam, n, seed, time_units=None):
    from sim.jiq.meanfield import fixed_point

    d = 2 if policy == "jiq_pod" else 1
    fp = fixed_point(policy, lam, r, d)
    case = (policy, r, lam)
    t = time_units or max(2000.0, 80 * RELAXATION[case])
    res = simulate(n, lam, policy, r, d, events=int(2 * lam * n * t), seed=seed)
    c = FINITE_N_C[case]
    truth = dict(mean_response=fp.mean_response, mean_queue=fp.mean_queue, p0=fp.p0,
                 s1=fp.tail[0], s2=fp.tail[1], s3=fp.tail[2], mean_iqueue=fp.mean_iqueue,
                 join_rate=fp.join_rate, delete_rate=fp.delete_rate, probe_rate=fp.probe_rate)
    for key, value in truth.items():
        if key == "probe_rate" and policy == "jiq":
            assert res.probe_rate == 0.0 == value
            continue
        if key[0] == "s" and key[1:].isdigit():
            i = int(key[1:]) - 1
            est, se = res.tail[i], res.tail_se[i]
        else:
            est, se = getattr(res, key), getattr(res, key + "_se")
        assert_within_se(est, value, se, what=f"{case} N={n} {key}", allowance=c[key] / n)
    return res


@pytest.mark.parametrize("policy", ["jiq", "jiq_pod"])
def test_matches_mean_field_at_ten_thousand_servers(policy):
    check_against_meanfield(policy, 10, 0.9, 10**4, seed=61)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["jiq", "jiq_pod"])
@pytest.mark.parametrize("r", [1, 10])
@pytest.mark.parametrize("lam", [0.5, 0.9, 0.98])
def test_matches_mean_field_grid(policy, r, lam):
    check_against_meanfield(policy, r, lam, 10**4, seed=62)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["jiq", "jiq_pod"])
def test_matches_mean_field_at_a_hundred_thousand_servers(policy):
    check_against_meanfield(policy, 10, 0.9, 10**5, seed=63, time_units=1000.0)


@pytest.mark.parametrize("r", [1, 10])
def test_light_load_response_tends_to_one(r):
    # mean field: E[T] = 1 / (1 - lam p0) -> 1 as lam -> 0 (1.00435 at r = 1, 1.00062 at
    # r = 10 for lam = 0.01). Finite-N gap measured at N = 100 (3 runs of 1e7 events):
    # -1.4e-5 +- 1.4e-5 (r = 1), -1.9e-5 +- 0.65e-5 (r = 10), i.e. |c| + 2 SE(c) = 4.2e-3 and
    # 3.2e-3 for a gap c / N; at N = 1000 and 10000 the gaps were within their SEs.
    from sim.jiq.meanfield import fixed_point

    n, lam = 1000, 0.01
    allowance = {1: 4.2e-3, 10: 3.2e-3}[r] / n
    res = simulate(n, lam, "jiq", r, events=10_000_000, seed=70 + r)
    fp = fixed_point("jiq", lam, r)
    assert_within_se(res.mean_response, fp.mean_response, res.mean_response_se,
                     what="light-load response", allowance=allowance)
    assert 1.0 <= res.mean_response < 1.0 + lam
    assert res.tail[0] == pytest.approx(lam, abs=Z * res.tail_se[0])


def test_meanfield_start_is_consistent():
    from sim.jiq.occupancy import initial_counts

    for policy, d in (("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 3)):
        x, y, how = initial_counts(policy, 0.9, 10, d, 10**6, 10**5, "meanfield", 5)
        assert how == "meanfield"
        assert x.sum() == 10**6 and y.sum() == 10**5
        assert int(np.dot(np.arange(y.size), y)) == x[0]
        # idle fraction 1 - lam up to multinomial noise (sd ~ 3e-3 / 1e3)
        assert abs(x[0] / 10**6 - 0.1) < 0.01
    x, y, how = initial_counts("jiq", 0.9, 2.5, 1, 10, 4, "empty", 0)
    assert how == "empty" and list(x) == [10] and list(y[:4]) == [0, 0, 2, 2]


# ------------------------------------------------------------------------------------------
# cross-engine: occupancy vs agent
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_agrees_with_agent_engine(policy, d):
    from sim.jiq.agent import simulate as agent_simulate

    n, r, lam = 1000, 10, 0.9
    a = agent_simulate(n, lam, policy, r, d, events=20_000_000, seed=81)
    o = simulate(n, lam, policy, r, d, events=20_000_000, seed=82)
    for key in ("mean_response", "mean_wait", "prob_wait", "mean_queue", "p0", "mean_iqueue",
                "join_rate", "delete_rate", "probe_rate", "messages_per_job"):
        if key == "probe_rate" and policy == "jiq":
            assert a.probe_rate == o.probe_rate == 0.0
            continue
        assert_engines_agree(getattr(o, key), getattr(o, key + "_se"), getattr(a, key),
                             getattr(a, key + "_se"), what=f"{policy} {key}")
    for i in range(3):
        assert_engines_agree(o.tail[i], o.tail_se[i], a.tail[i], a.tail_se[i],
                             what=f"{policy} s_{i + 1}")


# ------------------------------------------------------------------------------------------
# API
# ------------------------------------------------------------------------------------------
task = task_factory(engine="occupancy", policy="jiq_pod", n_servers=200, lam=0.8, r=10, d=2,
                   events=200_000, seed=2024, init="meanfield", n_batches=20, max_level=16)


def test_run_task_returns_the_schema_keys_as_plain_values():
    out = run_task(task())
    assert_plain_row(out, RESULT_KEYS + tuple(k for k in EXTRA_KEYS if k not in RESULT_KEYS),
                     ci_method="overlapping batch means, batch ")
    assert out["events_run"] == 200_000 and out["n_jobs"] > 0
    assert 0 <= out["warmup_time"] < out["sim_time"]
    assert out["drop_prob"] == 0.0
    assert out["queueing_ratio"] == pytest.approx(out["mean_response"] - 1)
    assert out["frac_within_h"] == pytest.approx(1 - out["prob_wait"])
    assert run_task(task(h=2))["frac_within_h"] is None
    assert run_task(task(policy="jiq", d=None))["probe_rate"] == 0.0


def test_reproducible_for_a_seed_and_different_across_seeds():
    for policy in ("jiq", "jiq_pod", "jiq_sqd"):
        assert_seed_decides(run_task, functools.partial(task, policy=policy))


@pytest.mark.parametrize("key, value", [
    ("n_servers", 0), ("n_servers", 2.5), ("n_servers", 2**62), ("lam", 1.0), ("lam", 0.0),
    ("lam", float("nan")), ("lam", "0.5"), ("r", 2**25), ("policy", "pod"), ("policy", "jiq_original"),
    ("policy", "jiq_threshold"), ("r", 0), ("r", 3), ("r", -10), ("r", float("inf")),
    ("d", 0), ("d", 201), ("d", 1.5), ("events", 10), ("seed", -1), ("init", "full"),
    ("n_batches", 1), ("max_level", 0),
])
def test_bad_input_raises_value_error_naming_the_key(key, value):
    kw = dict(n_servers=200, lam=0.8, policy="jiq_pod", r=10, d=2, events=10_000, seed=1)
    kw[key] = value
    if key == "r" and value == 2**25:
        kw["n_servers"] = 2**25
    with pytest.raises(ValueError, match=key):
        simulate(**kw)


def test_sqd_needs_d_at_most_the_number_of_iqueues():
    simulate(200, 0.8, "jiq_sqd", 10, 20, events=10_000)  # d = M is allowed
    with pytest.raises(ValueError, match="d=21"):
        simulate(200, 0.8, "jiq_sqd", 10, 21, events=10_000)
    simulate(200, 0.8, "jiq", 10, 10**6, events=10_000)  # d is ignored by jiq
