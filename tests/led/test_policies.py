"""Decisions and updates of the slotted engine on hand-built states (sim.led._slotted_kernel).

Each helper applies the kernel's own pick / update function once; frequencies are compared with
the exact law by a chi-square test (p-value above ALPHA), and the bucket structures with the
estimates after every update. Seeds are fixed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.rng import threshold
from sim.led import _slotted_kernel as K
from tests.helpers import ALPHA


def new_state(seed):
    return np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)


def words(s):
    """RNG words as uint64 (numba returns them as Python ints, which it would type int64)."""
    return tuple(np.uint64(x) for x in s)


def counts_of(policy, est, n_draws, seed, mu=None, d=2):
    est = np.asarray(est, dtype=np.int64)
    state = new_state(seed)
    counts = np.zeros(est.size, dtype=np.int64)
    for _ in range(n_draws):
        counts[K.choose_led(policy, est, mu, d, state)] += 1
    return counts


def assert_distribution(counts, probs):
    """Chi-square on the cells of positive probability; zero-probability cells must be empty."""
    probs = np.asarray(probs, dtype=np.float64)
    assert np.all(counts[probs == 0] == 0), (counts, probs)
    pos = probs > 0
    if pos.sum() == 1:
        return
    expected = counts.sum() * probs[pos] / probs[pos].sum()
    p = sps.chisquare(counts[pos], expected).pvalue
    assert p > ALPHA, (counts, expected, p)


def assert_trees(est, tree_min, tree_count, esum):
    """The incrementally maintained L-JSQ trees and estimate sums equal a fresh build; the root
    holds each dispatcher's minimum and its multiplicity."""
    lsize, loff = K.tree_shape(est.shape[1])
    fresh_min, fresh_cnt = K.tree_build(est, lsize, loff)
    assert np.array_equal(tree_min, fresh_min) and np.array_equal(tree_count, fresh_cnt)
    root = loff[-1]
    for m in range(est.shape[0]):
        assert tree_min[m, root] == est[m].min()
        assert tree_count[m, root] == (est[m] == est[m].min()).sum()
    assert np.array_equal(esum, est.sum(axis=1))


# ------------------------------------------------------------------------------------------
# decisions
# ------------------------------------------------------------------------------------------
def test_l_jsq_breaks_ties_uniformly():
    est = [3, 1, 4, 1, 5, 1, 2]
    probs = [0, 1, 0, 1, 0, 1, 0]
    assert_distribution(counts_of(K.L_JSQ, est, 30_000, seed=1), probs)


def test_l_jsq_single_minimum_is_always_chosen():
    counts = counts_of(K.L_JSQ, [4, 2, 9, 0, 3], 500, seed=2)
    assert counts[3] == 500


def test_l_jsq_tree_ties_across_subtrees():
    # N = 300: a tree of three internal levels (300 -> 19 -> 2 -> 1); the tied minima lie in
    # different subtrees, one of them in the last, partial block
    est = np.full(300, 6)
    tied = [3, 17, 40, 161, 255, 299]
    est[tied] = 2
    est[[5, 100]] = 3
    probs = np.zeros(300)
    probs[tied] = 1 / len(tied)
    assert_distribution(counts_of(K.L_JSQ, est, 12_000, seed=12), probs)


def test_l_jsq_tree_follows_arbitrary_jumps():
    # random estimate changes of any size (Pull/Push updates jump to the true length):
    # the incrementally fixed trees equal a fresh build after every change
    rng = np.random.default_rng(13)
    n_disp, n_servers = 2, 300
    est = rng.integers(0, 50, size=(n_disp, n_servers)).astype(np.int32)
    lsize, loff = K.tree_shape(n_servers)
    tree_min, tree_count = K.tree_build(est, lsize, loff)
    esum = est.sum(axis=1).astype(np.int64)
    for i in range(400):
        m, n = int(rng.integers(n_disp)), int(rng.integers(n_servers))
        new = int(rng.choice([0, int(rng.integers(0, 500)), int(est[m].min())]))
        K.set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n, new, True)
        if i % 20 == 0:
            assert_trees(est, tree_min, tree_count, esum)
    assert_trees(est, tree_min, tree_count, esum)


def test_l_jba_exact_when_the_set_is_small():
    # N = 300, the set {est <= mean} = {0, 1}: a try is accepted with probability 4 / 302, so
    # about 43 % of the decisions use the exact O(N) fallback after 64 tries; the law of the
    # combination is still prop. to mu on the set
    est = np.full(300, 5)
    est[[0, 1]] = 0
    mu = np.ones(300)
    mu[1] = 3.0
    probs = np.zeros(300)
    probs[0], probs[1] = 0.25, 0.75
    assert_distribution(counts_of(K.L_JBA, est, 4000, seed=14, mu=mu), probs)


@pytest.mark.parametrize("est", [
    [0, 2, 5, 1, 7, 3],   # mean 3: the set is {est <= 3} (equality included)
    [0, 2, 5, 1, 6, 3],   # mean 17/6 = 2.83: the set is {est <= 2}
    [4, 4, 4, 4],         # all equal: every server
])
def test_l_jba_set_homogeneous(est):
    mean = sum(est) / len(est)
    probs = [1.0 if e <= mean else 0.0 for e in est]
    assert_distribution(counts_of(K.L_JBA, est, 30_000, seed=3), probs)


def test_l_jba_weights_are_the_service_means():
    est = [0, 2, 5, 1, 7, 3, 0, 9]  # mean 27/8 = 3.375: the set is {0, 1, 3, 5, 6}
    mu = [1.0, 3.0, 2.0, 0.5, 1.0, 2.5, 4.0, 1.0]
    mean = sum(est) / len(est)
    probs = np.array([m if e <= mean else 0.0 for e, m in zip(est, mu)])
    assert_distribution(counts_of(K.L_JBA, est, 60_000, seed=4, mu=mu), probs / probs.sum())


@pytest.mark.parametrize("n, d", [(9, 2), (9, 4), (5, 5)])
def test_l_pod_picks_smallest_of_d_distinct(n, d):
    # distinct estimates 0..n-1 in a shuffled order: P(rank r) = C(n-1-r, d-1) / C(n, d)
    rng = np.random.default_rng(7)
    est = np.empty(n, dtype=np.int64)
    est[rng.permutation(n)] = np.arange(n)
    probs = np.array([math.comb(n - 1 - int(e), d - 1) for e in est]) / math.comb(n, d)
    assert_distribution(counts_of(K.L_POD, est, 40_000, seed=5, d=d), probs)


def test_l_pod_breaks_ties_uniformly():
    # servers 0 and 3 tied lowest among 6; d = 2: a tied server wins if sampled with a longer
    # one, or with the other tied server and the uniform tie-break
    est = [1, 4, 4, 1, 4, 4]
    n = len(est)
    p_tied = 2 / n * ((n - 2) + 0.5) / (n - 1)
    p_long = (1 - 2 * p_tied) / 4
    probs = [p_tied, p_long, p_long, p_tied, p_long, p_long]
    assert_distribution(counts_of(K.L_POD, est, 40_000, seed=6, d=2), probs)


def test_jiq_draws_a_listed_server_and_drops_it_else_uniform():
    n_servers, rng_state = 6, new_state(8)
    s = tuple(rng_state)
    jlist = np.zeros((2, n_servers), dtype=np.int32)
    jlen = np.zeros(2, dtype=np.int64)
    listed = np.zeros(n_servers, dtype=np.int8)
    for srv in (1, 4, 5):
        jlist[0, jlen[0]] = srv
        jlen[0] += 1
        listed[srv] = 1
    chosen = set()
    for _ in range(3):
        n, *s = K.pick_jiq(jlist, jlen, listed, 0, n_servers, *words(s))
        chosen.add(int(n))
        assert listed[n] == 0
    assert chosen == {1, 4, 5} and jlen[0] == 0
    # an empty list: a uniform server
    counts = np.zeros(n_servers, dtype=np.int64)
    for _ in range(12_000):
        n, *s = K.pick_jiq(jlist, jlen, listed, 1, n_servers, *words(s))
        counts[n] += 1
    assert_distribution(counts, np.full(n_servers, 1 / n_servers))


# ------------------------------------------------------------------------------------------
# updates
# ------------------------------------------------------------------------------------------
def test_push_sets_d_u_distinct_estimates_to_true_lengths():
    n_disp, n_servers, d_u, m = 3, 8, 3, 1
    q = np.array([0, 5, 2, 9, 1, 1, 4, 12], dtype=np.int64)
    state = new_state(9)
    counts = np.zeros(n_servers, dtype=np.int64)
    for rep in range(3000):
        est = (q[None, :] + 1 + np.arange(n_disp)[:, None]).astype(np.int32)  # all differ from q
        if rep % 2:
            est[m] = np.array([7, 0, 0, 3, 8, 2, 0, 1], dtype=np.int32)  # jumps up and down
        before = est.copy()
        tree_min, tree_count, esum = K.push_once(est, q, m, d_u, state)
        changed = np.nonzero(est[m] != before[m])[0]
        assert changed.size == d_u or rep % 2  # a sampled server may already be exact
        assert np.all(est[m, changed] == q[changed])
        others = [k for k in range(n_disp) if k != m]
        assert np.array_equal(est[others], before[others])
        assert_trees(est, tree_min, tree_count, esum)
        if rep % 2 == 0:
            counts[changed] += 1
    # each server is in the sample with probability d_u / N
    assert counts.sum() == d_u * 1500
    assert_distribution(counts, np.full(n_servers, 1 / n_servers))


def test_pull_reports_of_one_slot():
    n_disp, n_servers, p_hat = 4, 6, 0.3
    q_new = np.array([0, 3, 0, 5, 2, 7], dtype=np.int64)
    served = np.array([1, 2, 0, 0, 1, 4], dtype=np.int64)  # servers 2 and 3 completed nothing
    state = new_state(10)
    reports = np.zeros(n_servers, dtype=np.int64)
    to_count = np.zeros(n_disp, dtype=np.int64)
    reps = 4000
    for rep in range(reps):
        est = np.full((n_disp, n_servers), 9, dtype=np.int32)
        to, tree_min, tree_count, esum = K.pull_once(est, q_new, served, threshold(p_hat), state)
        for n in range(n_servers):
            if to[n] < 0:
                assert np.all(est[:, n] == 9)
            else:
                assert est[to[n], n] == q_new[n]
                assert np.all(np.delete(est[:, n], to[n]) == 9)
                reports[n] += 1
                to_count[to[n]] += 1
        if rep < 200:
            assert_trees(est, tree_min, tree_count, esum)
    # no completion, no report; an empty server always reports (n, 0)
    assert reports[2] == 0 and reports[3] == 0
    assert reports[0] == reps
    # a non-empty server that completed tasks reports with probability p_hat
    for n in (1, 4, 5):
        p = sps.binomtest(int(reports[n]), reps, p_hat).pvalue
        assert p > ALPHA, (n, reports[n], p)
    # to a uniformly chosen dispatcher
    assert_distribution(to_count, np.full(n_disp, 1 / n_disp))
