"""Issue 36's fast paths of the occupancy engine, against exact laws and the slow paths.

- per-task power-of-(kd) (``pod_per_task``) by its minimum: the level a task joins is drawn by
  inversion of ``P(min >= l) = C(N - n_<l, kd) / C(N, kd)``
  (:func:`sim.core.sampling.min_level`, :func:`sim.core.sampling.log_none_marked`), tested
  against exact enumeration, mpmath, and the server-by-server sampling it replaced (which
  ``pod`` still uses, so ``place_job`` with the ``pod`` code and ``k > 1`` is that sampler);
- job delays of ``batch_sampling`` and ``pod_per_task`` on the shared grid
  (:func:`sim.core.jobdelay.expected_max_gamma_table`): the engine's per-window sums of
  E[T | positions] against the same run with the quadrature per signature.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.jobdelay import GL_W, GL_X, empty_delay_table
from sim.core.sampling import log_none_marked, sample_min_levels
from sim.dispatch import _occupancy_kernel as K
from sim.dispatch.occupancy import _initial_counts, meanfield_tail
from sim.dispatch.policies import POLICIES
from tests.helpers import ALPHA

UNB = 2**62


def new_state(seed):
    return np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)


def exact_min_law(x, n) -> dict:
    """P(min level = l) of n servers drawn without replacement from counts x, exactly."""
    N = int(sum(int(c) for c in x))
    above = [sum(int(c) for c in x[lvl:]) for lvl in range(len(x))] + [0]  # servers at >= l
    surv = [math.comb(a, n) / math.comb(N, n) for a in above]
    return {lvl: surv[lvl] - surv[lvl + 1] for lvl in range(len(x)) if surv[lvl] > surv[lvl + 1]}


def chisquare_pvalue(values, probs: dict) -> float:
    keys = list(probs)
    p = np.array([probs[k] for k in keys])
    obs = np.array([(values == k).sum() for k in keys])
    assert obs.sum() == values.size, "an outcome of probability 0 occurred"
    big = p * values.size >= 5
    if (~big).any():  # pool the rare outcomes into one cell
        obs = np.append(obs[big], obs[~big].sum())
        p = np.append(p[big], p[~big].sum())
    return sps.chisquare(obs, values.size * p / p.sum()).pvalue


@pytest.mark.parametrize("total,marked,n", [
    (10**9, 1, 10**5), (10**9, 3, 200_000), (10**9, 10**7, 5980), (10**7, 79_000, 5980),
    (10**7, 1, 5980), (10**12, 12_345, 10**6), (10**9, 5 * 10**8, 10**5), (10**5, 3160, 931),
    (500, 2, 256), (100, 3, 10), (30, 10, 20), (10**9, 10**9 - 10**5, 10**5)])
def test_log_none_marked_against_mpmath(total, marked, n):
    # log C(total - marked, n) / C(total, n): log_falling's difference loses up to 5e-7 of it
    # at N = 10**9 (its terms are 2e6 large); the Stirling difference keeps a few ulps
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    ref = mp.log(mp.binomial(total - marked, n)) - mp.log(mp.binomial(total, n))
    got = log_none_marked(total, marked, n)
    assert abs(got - ref) <= 1e-14 * abs(ref) + 1e-300, (got, float(ref))


def test_log_none_marked_edges():
    assert log_none_marked(10, 0, 5) == 0.0
    assert log_none_marked(10, 3, 0) == 0.0
    assert log_none_marked(10, 6, 5) == -math.inf  # 4 unmarked < 5 drawn
    assert log_none_marked(10, 5, 5) == pytest.approx(math.log(1 / math.comb(10, 5)), rel=1e-14)


@pytest.mark.parametrize("x,n", [
    ([0, 3, 2, 5], 3),            # lowest level empty: starts at level 1
    ([1, 9], 2),
    ([50, 30, 15, 5], 4),         # beta = 2: the 2**-m shortcut and the scan both occur
    ([2, 300, 150, 48], 256),     # few idle among many: the minimum varies
    ([3, 0, 0, 7, 1], 5),         # empty levels in between
    ([10**7, 99 * 10**7], 300),   # N = 10**9: P(min >= 1) = 0.049
])
def test_min_level_is_the_minimum_of_a_sample_without_replacement(x, n):
    x = np.array(x, dtype=np.int64)
    v = sample_min_levels(x, n, 100_000, new_state(31))
    pval = chisquare_pvalue(v, exact_min_law(x, n))
    assert pval > ALPHA, pval


def test_min_level_uses_no_random_number_when_a_higher_minimum_is_below_resolution():
    # beta = n x[0] / N = 40 > 38: P(min >= 1) <= e**-40, below any 53-bit uniform (2**-54)
    x = np.array([40_000, 960_000], dtype=np.int64)
    state = new_state(32)
    before = state.copy()
    v = sample_min_levels(x, 1000, 50, state)
    assert (v == 0).all() and np.array_equal(state, before)
    # beta = 36: a random number each time
    v = sample_min_levels(np.array([36_000, 964_000], dtype=np.int64), 1000, 5, state)
    assert not np.array_equal(state, before) and (v == 0).all()


@pytest.mark.parametrize("x,k,n", [([1, 9], 2, 2), ([3, 40, 20, 7], 4, 8), ([5, 300, 150, 45], 6, 64)])
def test_pod_per_task_by_minimum_places_jobs_with_the_law_of_server_draws(x, k, n):
    # the job's position signature under pod_per_task (minimum by inversion) and under the
    # server-by-server sampler it replaced (kept for pod: the same placement code with its
    # draws), two-sample chi-square; each task samples anew and sees the earlier tasks
    x = np.array(x, dtype=np.int64)
    reps = 20_000

    def signatures(code, seed):
        state = new_state(seed)
        out: dict = {}
        for _ in range(reps):
            ok, plev, pos, _ = K.place_job(code, x, k, n, UNB, state)
            key = tuple((p, int(c)) for p, c in enumerate(pos) if c > 0)
            out[key] = out.get(key, 0) + 1
        return out

    fast, slow = signatures(K.POD_PER_TASK, 33), signatures(K.POD, 34)
    keys = sorted(set(fast) | set(slow))
    table = np.array([[fast.get(key, 0) for key in keys], [slow.get(key, 0) for key in keys]])
    keep = table.sum(axis=0) >= 10
    if (~keep).any():
        table = np.column_stack([table[:, keep], table[:, ~keep].sum(axis=1)])
    assert table.shape[1] >= 2
    pval = sps.chi2_contingency(table)[1]
    assert pval > ALPHA, (keys, table, pval)


def test_pod_per_task_drop_undoes_the_placed_tasks():
    # one idle server among servers at level 2, b = 1: the first task takes the idle server
    # (n = N: the sample holds it), the second would join at position 2 -> dropped, undone
    x = np.array([1, 0, 4], dtype=np.int64)
    ok, plev, pos, x_after = K.place_job(K.POD_PER_TASK, x, 2, 5, 1, new_state(35))
    assert not ok and np.array_equal(x_after[:3], x) and x_after[3:].sum() == 0


def _run_kernel(policy, n, lam, k, d, events, seed, table):
    tail0 = meanfield_tail(policy, lam, k, d)
    x0 = _initial_counts(tail0, n)
    x = np.zeros(64, dtype=np.int64)
    x[: x0.size] = x0
    n_win = 50
    bounds = (np.arange(n_win + 1) * events) // n_win
    outs = (np.zeros(n_win), np.zeros(n_win), np.zeros((n_win, 16)), np.zeros(n_win, np.int64),
            np.zeros(n_win, np.int64), np.zeros(n_win, np.int64), np.zeros(n_win),
            np.zeros(n_win, np.int64), np.zeros(n_win, np.int64), np.zeros(n_win, np.int64))
    harm = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, k + 1))))
    code = POLICIES[policy].code
    K.occupancy_kernel(code, n, n * lam / k, k, k * d, UNB, 1, x, bounds, new_state(seed), harm,
                       K.new_memo(k), GL_X, GL_W, outs, table=table)
    return outs


@pytest.mark.parametrize("policy,n,lam,k,d", [
    ("batch_sampling", 3000, 0.95, 20, 2),   # positions spread over several levels
    ("batch_sampling", 10**5, 0.968377, 133, 2),  # the headline path at N = 10**5
    ("pod_per_task", 300, 0.9, 8, 1),
])
def test_job_delays_on_the_shared_grid_equal_the_quadrature_in_the_engine(policy, n, lam, k, d):
    # the same run (same random numbers, same jobs) with E[T | positions] from the shared grid
    # and, with a table that covers no position, from expected_max_gamma's quadrature per
    # signature (the method before the grid): every window's sum of E[T] agrees to 1e-11
    # relative, and everything else bitwise
    events = 300_000
    grid = _run_kernel(policy, n, lam, k, d, events, 36, None)
    quad = _run_kernel(policy, n, lam, k, d, events, 36, empty_delay_table())
    w_resp_grid, w_resp_quad, w_adm = grid[6], quad[6], grid[5]
    for i, (a, b) in enumerate(zip(grid, quad)):
        if i != 6:
            assert np.array_equal(a, b), i
    assert w_adm.sum() > 100
    assert np.max(np.abs(w_resp_grid - w_resp_quad) / w_resp_quad) < 1e-11
    # not every job was at position 1 (where both use H_m): the grid was used
    assert np.any(w_resp_grid != w_resp_quad)
