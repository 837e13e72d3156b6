"""Tests of the occupancy engine (sim.dispatch.occupancy, sim.dispatch._occupancy_kernel).

Statistical assertions use ``|estimate - truth| <= Z * SE (+ an O(1/N) allowance where a
finite-N bias is expected)`` with the standard error estimated by the engine (batch means), or by
the spread over independent replications; ``Z = 4``. Frequency tests use a chi-square p-value
threshold with the same two-sided tail (``ALPHA``). Seeds are fixed, so every test is
deterministic.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from numba import njit
from scipy import stats as sps

from sim.core.jobdelay import GL_W, GL_X, expected_job_delay
from sim.core.results import RESULT_KEYS
from sim.dispatch import _occupancy_kernel as K
from sim.dispatch._occupancy_kernel import _fill_batch_filling, _fill_batch_sampling
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.meanfield.pod import pod_mean_response
from sim.dispatch.occupancy import meanfield_tail, run_task, simulate
from tests.checks import assert_mm1, assert_plain_row, assert_refused_naming_the_key, assert_seed_decides, task_factory
from tests.helpers import ALPHA, Z, assert_engines_agree, assert_within_se

UNB = 2**62  # "no buffer" for the kernel helpers



@njit
def fill_sample(policy, hs, k, bmax, state):
    """Batch-filling / batch-sampling on a given sample histogram ``hs`` (not modified):
    ``(admitted, plev, positions)`` as in :func:`place_job`."""
    cap = hs.size + k + 2
    h = np.zeros(cap, dtype=np.int64)
    h[: hs.size] = hs
    tcnt = np.zeros(cap, dtype=np.int64)
    plev = np.zeros(k, dtype=np.int64)
    if policy == K.BATCH_FILLING:
        ok, placed, _, s0, s1, s2, s3 = _fill_batch_filling(
            h, tcnt, plev, k, bmax, state[0], state[1], state[2], state[3])
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    else:
        ok, placed = _fill_batch_sampling(h, tcnt, plev, k, bmax)
    return ok, plev[:placed].copy(), tcnt



def new_state(seed):
    return np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)


def assert_frequencies(observed: dict, probs: dict):
    """Chi-square goodness of fit of outcome counts to exact probabilities (outcomes with
    probability 0 must not occur)."""
    assert set(observed) <= set(probs), (observed, probs)
    keys = list(probs)
    counts = np.array([observed.get(key, 0) for key in keys])
    p = np.array([probs[key] for key in keys])
    assert p.sum() == pytest.approx(1.0)
    pval = sps.chisquare(counts, counts.sum() * p).pvalue
    assert pval > ALPHA, (dict(zip(keys, counts)), dict(zip(keys, p)), pval)


def multivariate_hypergeometric(x, n) -> dict:
    """Exact law of the level histogram of ``n`` servers drawn without replacement from the
    counts ``x``: ``{histogram tuple: probability}``."""
    total = math.comb(int(x.sum()), n)
    probs = {}
    for h in itertools.product(*(range(c + 1) for c in x)):
        if sum(h) == n:
            probs[h] = math.prod(math.comb(int(c), j) for c, j in zip(x, h)) / total
    return probs


def signature(positions):
    """Job signature as a hashable tuple: (position, count) pairs with count > 0."""
    return tuple((p, int(c)) for p, c in enumerate(positions) if c > 0)


# ------------------------------------------------------------------------------------------
# sampling without replacement from the counts
# ------------------------------------------------------------------------------------------
def test_sampled_levels_are_multivariate_hypergeometric():
    x = np.array([3, 2, 4, 1], dtype=np.int64)  # N = 10 servers on 4 levels
    n = 4
    state = new_state(1)
    observed: dict = {}
    for _ in range(20_000):
        key = tuple(K.sample_levels(x, n, state)[: x.size])
        observed[key] = observed.get(key, 0) + 1
    probs = multivariate_hypergeometric(x, n)
    assert_frequencies(observed, probs)


def test_level_counts_by_hypergeometrics_are_multivariate_hypergeometric():
    # draw_levels_hg (samples of >= HG_MIN_SAMPLE queues) against the exact joint law: 70 of 150
    # servers on 4 levels, the lowest one empty, no early stop
    from sim.core.sampling import sample_levels_hg
    x = np.array([0, 30, 100, 15, 5], dtype=np.int64)
    n = 70
    state = new_state(11)
    observed: dict = {}
    for _ in range(40_000):
        key = tuple(sample_levels_hg(x, n, -1, state)[: x.size])
        observed[key] = observed.get(key, 0) + 1
    probs = multivariate_hypergeometric(x, n)
    # pool the outcomes too rare for the chi-square into one cell
    rare = {h for h, p in probs.items() if p * 40_000 < 5}
    obs = {("rare" if h in rare else h): 0 for h in probs}
    for h, c in observed.items():
        obs["rare" if h in rare else h] += c
    pr = {("rare" if h in rare else h): 0.0 for h in probs}
    for h, p in probs.items():
        pr["rare" if h in rare else h] += p
    assert_frequencies(obs, pr)


@pytest.mark.parametrize("total,good,n", [(150, 30, 64), (10**6, 15_850, 12_224),
                                          (10**9, 10**7, 5_000), (50, 3, 49), (10**6, 10**6 - 10, 12_224)])
def test_hypergeometric_draws_follow_the_pmf(total, good, n):
    from sim.core.sampling import hypergeometric_draws
    v = hypergeometric_draws(total, good, n, 100_000, new_state(12))
    law = sps.hypergeom(total, good, n)
    ks = np.arange(int(law.ppf(1e-6)), int(law.ppf(1 - 1e-6)) + 1)
    assert v.min() >= ks[0] - 3 and v.max() <= ks[-1] + 3
    probs = {int(k): float(law.pmf(k)) for k in ks}
    big = {k for k, p in probs.items() if p * v.size >= 5}
    obs = {k: int((v == k).sum()) for k in big}
    pr = {k: probs[k] for k in big}
    if 1.0 - sum(pr.values()) > 1e-12:
        obs["rest"] = v.size - sum(obs.values())
        pr["rest"] = 1.0 - sum(pr.values())
    assert_frequencies(obs, pr)


def test_log_falling_is_exact_where_lgamma_cancels():
    from sim.core.sampling import log_falling
    for a, b in [(10**9, 12_224), (10**12, 5), (10**6, 191), (40, 20), (25, 25), (19, 3)]:
        ref = math.fsum(math.log(a - i) for i in range(b))
        assert log_falling(a, b) == pytest.approx(ref, rel=1e-14, abs=1e-13)


@pytest.mark.parametrize("policy", ["bf", "bs"])
def test_large_samples_place_jobs_with_the_law_of_single_draws(policy):
    # the placements of a sample of >= HG_MIN_SAMPLE queues drawn as level counts (the engine's
    # path) and server by server (draw_levels) have one law: two-sample chi-square on the job's
    # position signature, at a load where both the early stop (k idle queues sampled) and the
    # full sample occur
    from sim.core.sampling import HG_MIN_SAMPLE, draw_levels
    code = {"bf": BF, "bs": BS}[policy]
    x = np.array([3, 400, 150, 47], dtype=np.int64)
    k, n_samp = 4, HG_MIN_SAMPLE
    reps = 20_000
    fast: dict = {}
    state = new_state(13)
    for _ in range(reps):
        ok, plev, pos, _ = K.place_job(code, x, k, n_samp, UNB, state)
        fast[signature(pos)] = fast.get(signature(pos), 0) + 1
    slow: dict = {}
    state = new_state(14)
    xl = np.zeros(x.size + k + 2, dtype=np.int64)
    xl[: x.size] = x
    for _ in range(reps):
        hs = np.zeros(xl.size, dtype=np.int64)
        _, state[0], state[1], state[2], state[3] = draw_levels(
            xl, int(x.sum()), n_samp, 0, k, hs, state[0], state[1], state[2], state[3])
        ok, plev, pos = fill_sample(code, hs, k, UNB, state)
        slow[signature(pos)] = slow.get(signature(pos), 0) + 1
    keys = sorted(set(fast) | set(slow))
    table = np.array([[fast.get(key, 0) for key in keys], [slow.get(key, 0) for key in keys]])
    keep = table.sum(axis=0) >= 10
    if (~keep).any():
        table = np.column_stack([table[:, keep], table[:, ~keep].sum(axis=1)])
    assert table.shape[1] >= 3  # both outcomes of the early stop, and more
    pval = sps.chi2_contingency(table)[1]
    assert pval > ALPHA, (keys, table, pval)


def test_large_per_task_samples_join_the_sampled_minimum():
    # pod_per_task with n_samp >= HG_MIN_SAMPLE queues per task (drawn server by server, with
    # the early stop at the first idle one): the level joined is the minimum of a sample without
    # replacement, P(min >= l) = C(G_l, n) / C(N, n), G_l the servers at
    # level >= l (one task, so the job's position is that level + 1)
    from sim.core.sampling import HG_MIN_SAMPLE
    x = np.array([2, 300, 150, 48], dtype=np.int64)  # N = 500, few idle: the minimum varies
    n = HG_MIN_SAMPLE
    N = int(x.sum())
    g = np.concatenate([np.cumsum(x[::-1])[::-1], [0]])
    surv = [math.comb(int(gl), n) / math.comb(N, n) for gl in g]
    probs = {lvl: surv[lvl] - surv[lvl + 1] for lvl in range(x.size) if surv[lvl] - surv[lvl + 1] > 0}
    observed: dict = {}
    state = new_state(15)
    for _ in range(20_000):
        ok, plev, pos, _ = K.place_job(PPT, x, 1, n, UNB, state)
        observed[int(plev[0])] = observed.get(int(plev[0]), 0) + 1
    assert len(probs) >= 2
    assert_frequencies(observed, probs)


def test_job_delay_of_deep_positions_is_finite_and_exact():
    # deep positions (random routing at high load): E[Gamma(p, 1)] = p; sim.core.jobdelay used to
    # loop forever on them (cdf underflow at small t)
    assert expected_job_delay([100]) == pytest.approx(100.0, rel=1e-10)
    assert expected_job_delay([300, 2, 1]) == pytest.approx(300.0, rel=1e-10)


def test_below64_is_uniform_and_handles_huge_ranges():
    state = new_state(2)
    hs = [int(np.argmax(K.sample_levels(np.ones(7, dtype=np.int64), 1, state)))
          for _ in range(14_000)]
    counts = np.bincount(hs, minlength=7)
    assert sps.chisquare(counts).pvalue > ALPHA
    # a level holding a third of 3e9 servers is drawn a third of the time (the 32-bit
    # multiply-shift of the agent engine would be visibly biased at this size)
    x = np.array([1_000_000_000, 2_000_000_000], dtype=np.int64)
    state = new_state(3)
    hits = sum(int(K.sample_levels(x, 1, state)[0]) for _ in range(30_000))
    assert abs(hits - 10_000) <= Z * math.sqrt(30_000 * (1 / 3) * (2 / 3))


# ------------------------------------------------------------------------------------------
# policies on hand-built states
# ------------------------------------------------------------------------------------------
BF, BS, PPT, POD, RAND, JSQ = (K.BATCH_FILLING, K.BATCH_SAMPLING, K.POD_PER_TASK, K.POD,
                               K.RANDOM, K.JSQ)


def test_batch_filling_fills_the_lowest_slots_first():
    # sampled: two idle queues and one with 3 tasks; 4 tasks: both idle queues get two each
    ok, plev, pos = fill_sample(BF, np.array([2, 0, 0, 1]), 4, UNB, new_state(4))
    assert ok and list(plev) == [0, 0, 1, 1]
    assert signature(pos) == ((2, 2),)
    assert expected_job_delay([2, 2]) == pytest.approx(2.75)


def test_batch_filling_breaks_ties_between_used_and_fresh_queues_uniformly():
    # sampled: one idle queue A and one queue B with 1 task. Task 1 -> A; then A and B both
    # hold one task: task 2 joins A (job queues {A at 2}) or B ({A at 1, B at 2}) with prob 1/2
    state = new_state(5)
    observed: dict = {}
    for _ in range(4000):
        ok, plev, pos = fill_sample(BF, np.array([1, 1]), 2, UNB, state)
        assert ok and list(plev) == [0, 1]
        observed[signature(pos)] = observed.get(signature(pos), 0) + 1
    assert_frequencies(observed, {((2, 1),): 0.5, ((1, 1), (2, 1)): 0.5})


def test_batch_sampling_sends_one_task_to_each_of_the_k_shortest():
    ok, plev, pos = fill_sample(BS, np.array([2, 0, 0, 1]), 3, UNB, new_state(6))
    assert ok and list(plev) == [0, 0, 3]
    assert signature(pos) == ((1, 2), (4, 1))


@pytest.mark.parametrize("policy, sample, k, worst", [
    (BS, [2, 0, 0, 1], 3, 4),  # a task at position 4
    (BF, [1, 0, 2], 3, 3),  # idle queue takes 2 tasks, the third goes to position 3
])
def test_buffer_drops_a_job_iff_some_task_would_exceed_it(policy, sample, k, worst):
    for b in range(1, worst + 2):
        ok, plev, _ = fill_sample(policy, np.array(sample), k, b, new_state(7))
        assert ok == (worst <= b), (b, ok, plev)


def test_pod_takes_the_minimum_of_a_sample_without_replacement():
    x = np.array([0, 3, 2, 5])  # N = 10, d = 3: P(min >= l) = C(S_l, 3) / C(10, 3)
    c = math.comb(10, 3)
    probs = {((2, 1),): (c - math.comb(7, 3)) / c,
             ((3, 1),): (math.comb(7, 3) - math.comb(5, 3)) / c,
             ((4, 1),): math.comb(5, 3) / c}
    state = new_state(8)
    observed: dict = {}
    for _ in range(20_000):
        ok, plev, pos, x_after = K.place_job(POD, x, 1, 3, UNB, state)
        assert ok and x_after.sum() == 10
        observed[signature(pos)] = observed.get(signature(pos), 0) + 1
    assert_frequencies(observed, probs)


def test_pod_per_task_samples_per_task_and_sees_earlier_tasks():
    # x = one idle server and 9 with one task; k = 2 tasks, each sampling 2 queues (d = 1).
    # task 1 finds the idle server w.p. 1 - C(9,2)/C(10,2) = 0.2. Then (a) all 10 at level 1,
    # task 2 picks the job's own queue w.p. 1/10 -> {2}; else {1, 2}. (b) task 1 went to a
    # busy server (now at 2); task 2 finds the idle one w.p. 0.2 -> {1, 2}, else a level-1
    # server -> {2, 2}.
    probs = {((2, 1),): 0.2 * 0.1, ((1, 1), (2, 1)): 0.2 * 0.9 + 0.8 * 0.2, ((2, 2),): 0.64}
    state = new_state(9)
    observed: dict = {}
    for _ in range(20_000):
        ok, plev, pos, _ = K.place_job(PPT, np.array([1, 9]), 2, 2, UNB, state)
        observed[signature(pos)] = observed.get(signature(pos), 0) + 1
    assert_frequencies(observed, probs)


def test_jsq_per_task_ties_include_the_jobs_own_queues():
    # two idle servers, five with 1 task, three with 2; k = 3: two tasks to the idle servers,
    # the third to one of the 7 servers now at level 1, 2 of which are the job's
    state = new_state(10)
    observed: dict = {}
    for _ in range(14_000):
        ok, plev, pos, x_after = K.place_job(JSQ, np.array([2, 5, 3]), 3, 1, UNB, state)
        assert ok and list(plev) == [0, 0, 1] and list(x_after[:4]) == [0, 6, 4, 0]
        observed[signature(pos)] = observed.get(signature(pos), 0) + 1
    assert_frequencies(observed, {((1, 1), (2, 1)): 2 / 7, ((1, 2), (2, 1)): 5 / 7})


def test_random_tasks_may_share_a_server():
    # two idle servers, two tasks: same server w.p. 1/2 (positions {2}), else {1, 1}
    state = new_state(11)
    observed: dict = {}
    for _ in range(8_000):
        ok, plev, pos, x_after = K.place_job(RAND, np.array([2]), 2, 1, UNB, state)
        same = signature(pos) == ((2, 1),)
        assert list(x_after[:3]) == ([1, 0, 1] if same else [0, 2, 0])
        observed[signature(pos)] = observed.get(signature(pos), 0) + 1
    assert_frequencies(observed, {((2, 1),): 0.5, ((1, 2),): 0.5})


@pytest.mark.parametrize("policy, n_samp", [(JSQ, 1), (RAND, 1), (PPT, 2), (BF, 4), (BS, 4)])
def test_dropped_job_leaves_the_state_unchanged(policy, n_samp):
    # all 4 servers hold 2 tasks, b = 2: every task would be at position 3
    x = np.array([0, 0, 4])
    ok, plev, pos, x_after = K.place_job(policy, x, 2, n_samp, 2, new_state(12))
    assert not ok and np.array_equal(x_after[:3], x) and x_after[3:].sum() == 0
    # b = 3: admitted, two distinct queues go to 3 (random may put both tasks on one server,
    # the second then at position 4: dropped)
    ok, _, _, x_after = K.place_job(policy, x, 2, n_samp, 3, new_state(12))
    if policy != RAND:
        assert ok and list(x_after[:4]) == [0, 0, 2, 2]


def test_jsq_drop_after_a_partial_placement_is_undone():
    # one idle server among 4 with two tasks; k = 2, b = 1: task 1 fits, task 2 would be at
    # position 2 (the job's own queue) -> dropped, task 1 undone
    x = np.array([1, 0, 4])
    ok, plev, pos, x_after = K.place_job(JSQ, x, 2, 1, 1, new_state(13))
    assert not ok and np.array_equal(x_after[:3], x)


# ------------------------------------------------------------------------------------------
# closed forms and limits
# ------------------------------------------------------------------------------------------
def test_random_routing_single_task_is_mm1():
    lam = 0.7
    r = simulate(10, lam, "random", events=20_000_000, seed=21)
    assert_mm1(r, lam)
    assert r.drop_prob == 0.0


def test_random_routing_with_buffer_is_mm1b():
    # one server, b = 4, overload lam = 1.2: M/M/1/4, P(n) proportional to lam**n
    lam, b = 1.2, 4
    p = lam ** np.arange(b + 1)
    p /= p.sum()
    r = simulate(1, lam, "random", b=b, events=4_000_000, seed=22)
    assert_within_se(r.drop_prob, p[b], r.drop_prob_se, what="drop_prob")
    assert_within_se(r.mean_queue, float(np.dot(np.arange(b + 1), p)), r.mean_queue_se, what="L")
    assert r.tail[b] == 0.0  # never more than b tasks
    # busy fraction = admitted task rate
    assert_within_se(r.tail[0], lam * (1 - r.drop_prob), r.tail_se[0] + lam * r.drop_prob_se,
                  what="s_1")


# Run lengths: a within-run batch-means SE is honest only when each of the 20 batches spans
# many relaxation times of the system (power-of-2 at lam = 0.9: slowest mean-field mode 13
# time units; M/M/1 at lam: 1/(1 - sqrt(lam))**2). The simulated time of a run is about
# events / (N * (lam + s_1)), so at N = 10**6 a run of 10**8 events covers only ~50 time
# units: there the SE comes from independent replications instead.
def test_random_routing_parallel_jobs_large_n():
    # N -> infinity: a job's k tasks land in distinct, independent M/M/1 queues whose sojourn
    # is Exp(1 - lam), so E[T] = H_k / (1 - lam): queueing ratio lam / (1 - lam). Finite-N
    # allowance k**2 / N (two tasks share a server w.p. about k**2 / (2N)).
    n, k = 10**4, 4
    for lam, seed in ((0.5, 23), (0.05, 24)):
        r = simulate(n, lam, "random", k=k, events=20_000_000, seed=seed)
        assert_within_se(r.queueing_ratio, lam / (1 - lam), r.queueing_ratio_se,
                      allowance=k * k / n, what=f"ratio lam={lam}")
        assert_within_se(r.mean_queue, lam / (1 - lam), r.mean_queue_se, allowance=k / n,
                      what=f"L lam={lam}")


@pytest.mark.slow  # fast suite under 5 min cold: see README
def test_pod_large_n_matches_mean_field():
    # Finite-N bias is O(1/N) (about 3/N for the agent engine at lam = 0.9, d = 2): allowance 5/N
    n, lam, d = 10**4, 0.9, 2
    r = simulate(n, lam, "pod", d=d, events=100_000_000, seed=25)
    s = pod_fixed_point(lam, d, 6)
    assert_within_se(r.mean_response, pod_mean_response(lam, d), r.mean_response_se,
                  allowance=5 / n, what="pod mean_response")
    for i in range(1, 5):
        assert_within_se(r.tail[i - 1], s[i - 1], r.tail_se[i - 1], allowance=5 / n, what=f"s_{i}")
    assert r.messages_per_job == 2 * d


@pytest.mark.slow
def test_pod_at_a_million_servers_matches_mean_field():
    # N = 10**6: each run covers ~26 time units (2 relaxation times), too short for batch
    # means; 8 independent replications started at the fixed point give the SE.
    n, lam, d = 10**6, 0.9, 2
    reps = [simulate(n, lam, "pod", d=d, events=50_000_000, seed=s) for s in range(50, 58)]
    for key, truth in (("mean_response", pod_mean_response(lam, d)),
                       ("mean_queue", pod_mean_response(lam, d) * lam)):
        v = np.array([getattr(r, key) for r in reps])
        assert_within_se(v.mean(), truth, v.std(ddof=1) / np.sqrt(v.size), allowance=5 / n,
                      what=key)


def test_jsq_large_n_has_no_queueing():
    n, lam = 10**6, 0.9
    r = simulate(n, lam, "jsq", events=20_000_000, seed=26)
    assert r.mean_response >= 1.0
    assert r.mean_response - 1.0 <= Z * r.mean_response_se + 1.0 / n
    assert r.messages_per_job == 2 * n


def test_single_task_batch_policies_are_power_of_d():
    n, lam, d = 1000, 0.9, 2
    ref = simulate(n, lam, "pod", d=d, events=4_000_000, seed=27)
    for seed, policy in enumerate(("batch_filling", "batch_sampling", "pod_per_task"), 28):
        r = simulate(n, lam, policy, k=1, d=d, events=4_000_000, seed=seed)
        assert_engines_agree(r.mean_response, r.mean_response_se, ref.mean_response,
                    ref.mean_response_se, what=policy)
        assert_engines_agree(r.mean_queue, r.mean_queue_se, ref.mean_queue, ref.mean_queue_se,
                    what=policy)
        assert r.messages_per_job == 2 * d


@pytest.mark.parametrize("policy, d", [("batch_filling", 2), ("batch_sampling", 2),
                                       ("pod_per_task", 1), ("jsq", 1)])
def test_queueing_ratio_vanishes_at_light_load(policy, d):
    # at light load these policies do at least as well as random routing, whose ratio is
    # lam / (1 - lam) -> 0; and no job ever does better than its inherent delay H_k
    n, k, lam = 1000, 8, 0.02
    r = simulate(n, lam, policy, k=k, d=d, events=2_000_000, seed=30)
    assert -Z * r.queueing_ratio_se <= r.queueing_ratio <= lam / (1 - lam) + Z * r.queueing_ratio_se
    assert r.queueing_ratio >= 0.0  # E[T | positions] >= H_k for every job


@pytest.mark.parametrize("policy, k, d", [("batch_filling", 4, 2), ("batch_sampling", 4, 2),
                                          ("pod_per_task", 4, 1), ("random", 4, 1),
                                          ("jsq", 4, 1), ("pod", 1, 3)])
def test_littles_law_per_task(policy, k, d):
    # tasks arrive at rate lam per server and stay (position) x Exp(1): L = lam * (W + 1);
    # also the busy fraction s_1 = lam (work conservation, no drops)
    n, lam = 100, 0.8
    r = simulate(n, lam, policy, k=k, d=d, events=4_000_000, seed=31)
    assert_within_se(r.mean_queue, lam * (r.mean_wait + 1), math.hypot(r.mean_queue_se,
                                                                    lam * r.mean_wait_se),
                  what="Little")
    assert_within_se(r.tail[0], lam, r.tail_se[0], what="s_1")
    assert r.queueing_ratio >= 0.0


@pytest.mark.parametrize("policy", ["batch_filling", "batch_sampling"])
def test_batch_policies_large_n_match_their_mean_field_fixed_point(policy):
    # independent check of the placement code against the N -> infinity recursion of
    # meanfield_tail (which the run also starts from); ~2000 time units
    n, lam, k, d = 10**4, 0.8, 4, 2
    r = simulate(n, lam, policy, k=k, d=d, events=20_000_000, seed=32)
    s = meanfield_tail(policy, lam, k, d)
    for i in range(1, 4):
        assert_within_se(r.tail[i - 1], s[i - 1], r.tail_se[i - 1], allowance=5 / n,
                      what=f"{policy} s_{i}")


# ------------------------------------------------------------------------------------------
# cross-engine: occupancy vs agent (k = 1)
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, n, d", [("pod", 500, 2), ("jsq", 300, 1)])
def test_agrees_with_agent_engine(policy, n, d):
    from sim.dispatch.agent import simulate as agent_simulate

    lam = 0.9
    a = agent_simulate(n, lam, policy, d=d, events=20_000_000, seed=41)
    o = simulate(n, lam, policy, d=d, events=20_000_000, seed=42)
    for key in ("mean_response", "mean_wait", "prob_wait", "mean_queue"):
        assert_engines_agree(getattr(o, key), getattr(o, key + "_se"), getattr(a, key),
                    getattr(a, key + "_se"), what=f"{policy} {key}")
    for i in range(1, 3):
        assert_engines_agree(o.tail[i - 1], o.tail_se[i - 1], a.tail[i - 1], a.tail_se[i - 1],
                    what=f"{policy} s_{i}")


# ------------------------------------------------------------------------------------------
# mean-field start
# ------------------------------------------------------------------------------------------
def test_meanfield_tail_reduces_to_known_fixed_points():
    def same(ours, exact):  # ours stops once s_i < 1e-12
        assert ours.size >= 1 and np.allclose(ours, exact[: ours.size], rtol=1e-12, atol=0)
        assert np.all(exact[ours.size:] < 1e-12)

    lam, d = 0.85, 3
    pod = pod_fixed_point(lam, d, 8)
    for policy in ("pod", "batch_filling", "batch_sampling", "pod_per_task"):
        same(meanfield_tail(policy, lam, 1, d), pod)
    same(meanfield_tail("pod_per_task", lam, 4, 2), pod_fixed_point(lam, 8, 8))
    assert np.allclose(meanfield_tail("random", lam, 5)[:10], lam ** np.arange(1, 11))
    assert list(meanfield_tail("jsq", lam, 7)) == [lam]
    for policy in ("batch_filling", "batch_sampling"):
        s = meanfield_tail(policy, lam, 8, 2, b=3)
        assert s[0] == pytest.approx(lam) and s.size <= 3 and np.all(np.diff(s) <= 0)
    # both put (k - #idle sampled)^+ tasks at positions >= 2 (same s_2); above, batch-filling
    # fills the lowest slots first and so has the lighter tail
    bf, bs = meanfield_tail("batch_filling", lam, 8, 2), meanfield_tail("batch_sampling", lam, 8, 2)
    assert bf[1] == pytest.approx(bs[1], rel=1e-12) and bf[2] < bs[2]


# ------------------------------------------------------------------------------------------
# API
# ------------------------------------------------------------------------------------------
task = task_factory(engine="occupancy", policy="batch_filling", n_servers=200, lam=0.8, k=4, d=2,
                   events=200_000, seed=2024, init="meanfield", n_batches=20, max_level=16)


def test_run_task_returns_exactly_the_schema_keys_as_plain_values():
    out = run_task(task(b=6, h=2))
    assert_plain_row(out, RESULT_KEYS, ci_method="overlapping batch means, batch ")
    assert out["events_run"] == 200_000
    assert 0 <= out["warmup_time"] < out["sim_time"]
    assert out["n_jobs"] > 0
    assert out["messages_per_job"] == 16.0
    assert 0.0 <= out["drop_prob"] < 1.0 and out["tail"][6] == 0.0  # b = 6
    assert 0.0 < out["frac_within_h"] <= 1.0


@pytest.mark.parametrize("policy, k, messages", [("random", 3, 0.0), ("jsq", 3, 1200.0),
                                                 ("pod", 1, 4.0), ("batch_sampling", 3, 12.0),
                                                 ("pod_per_task", 3, 36.0)])  # 2 messages per probe
def test_sim_run_dispatch_and_messages(policy, k, messages):
    import sim

    out = sim.run(task(policy=policy, k=k, events=20_000))
    assert set(out) == set(RESULT_KEYS) | {"wall_time", "rel_halfwidth", "runs"}
    assert out["messages_per_job"] == messages


def test_reproducible_for_a_seed_and_different_across_seeds():
    assert_seed_decides(run_task, task)


def test_array_growth_gives_identical_results():
    # random routing from empty at lam = 0.95 on 3 servers climbs far above the initial 16
    # levels (the arrays grow between spans); the same run with room for 4096 levels from the
    # start must match bitwise
    def run(cap):
        x = np.zeros(cap, dtype=np.int64)
        x[0] = 3
        state = new_state(14)
        bounds = (np.arange(51) * 400_000) // 50
        outs = (np.zeros(50), np.zeros(50), np.zeros((50, 64)), np.zeros(50, np.int64),
                np.zeros(50, np.int64), np.zeros(50, np.int64), np.zeros(50),
                np.zeros(50, np.int64), np.zeros(50, np.int64), np.zeros(50, np.int64))
        harm = np.array([0.0, 1.0])
        xf = K.occupancy_kernel(K.RANDOM, 3, 3 * 0.95, 1, 1, UNB, 1, x, bounds, state,
                                harm, K.new_memo(1), GL_X, GL_W, outs)
        return xf, outs, state

    xs, outs_s, st_s = run(16)
    xb, outs_b, st_b = run(4096)
    assert xs.size > 16 and xb.size == 4096
    assert np.array_equal(xs, xb[: xs.size]) and xb[xs.size:].sum() == 0
    for a, b in zip(outs_s, outs_b):
        assert np.array_equal(a, b)
    assert np.array_equal(st_s, st_b)


@pytest.mark.parametrize("key, value", [
    ("n_servers", 0), ("n_servers", 2.5), ("lam", 1.0), ("lam", 0.0), ("lam", float("nan")),
    ("policy", "central"), ("k", 0), ("k", 300), ("d", 0), ("d", 60), ("b", 0), ("events", 10),
    ("seed", -1), ("init", "full"), ("n_batches", 1), ("max_level", 0), ("h", 0),
])
def test_bad_input_raises_value_error_naming_the_key(key, value):
    kw = dict(n_servers=200, lam=0.8, policy="batch_filling", k=4, d=2, events=10_000, seed=1)
    assert_refused_naming_the_key(simulate, kw, key, value)


def test_pod_needs_single_task_jobs():
    with pytest.raises(ValueError, match="k="):
        simulate(100, 0.5, "pod", k=2, d=2, events=10_000)
