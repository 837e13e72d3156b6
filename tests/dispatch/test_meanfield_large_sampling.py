"""Batch-sampling mean field at large k and d (sim/dispatch/meanfield/large_sampling.py): the same
E[T] as the summed program BatchSamplingLaw and the enumerated signatures of tasks.py at small
k, d, the closed forms at d = 1 and k = 1, a Monte Carlo of the order-statistics definition,
and a point of the sub_halfin_whitt path (k = 191, kd = 9359); plus the pod_per_task excess."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma, harmonic
from sim.dispatch.meanfield import large_sampling as ls
from sim.dispatch.meanfield import tasks as tm
from sim.dispatch.meanfield.pod import pod_mean_response
from tests.helpers import assert_within_se

# (lam, k, d): every lam, k = 2..8, d = 1..4 (d = 1 only at the lower loads, where the
# number of levels, and so the cost of BatchSamplingLaw, stays small)
SMALL = [(0.5, 2, 1), (0.5, 8, 1), (0.7, 3, 1), (0.7, 5, 1), (0.5, 4, 3), (0.7, 2, 2), (0.7, 7, 4),
         (0.9, 2, 3), (0.9, 4, 2), (0.9, 6, 4), (0.9, 8, 2), (0.95, 3, 3), (0.95, 5, 2),
         (0.95, 8, 4), (0.6, 5, 4), (0.8, 8, 3)]


@pytest.mark.parametrize("lam,k,d", SMALL)
def test_exact_delay_matches_the_summed_program(lam, k, d):
    s = tm.bs_fixed_point(lam, k, d)
    et, mass = ls.job_delay_exact(s, k, d)
    assert abs(mass - 1.0) < 1e-12
    assert et == pytest.approx(tm.BatchSamplingLaw(s, k, d).mean(), rel=1e-12)


@pytest.mark.parametrize("lam,k,d", [(lam, k, d) for lam, k, d in SMALL if d >= 2])
def test_exact_delay_matches_the_enumerated_signatures(lam, k, d):
    s = tm.bs_fixed_point(lam, k, d)
    et, _ = ls.job_delay_exact(s, k, d)
    assert et == pytest.approx(tm.bs_signature_mixture(lam, k, d, s).mean(), rel=1e-12)
    excess, _ = ls.job_excess_exact(s, k, d)
    assert excess > 0 and et == harmonic(k) + excess


def test_closed_forms():
    # d = 1: the k tasks go to k distinct uniform queues, k independent M/M/1 responses
    lam, k = 0.7, 3
    et, _ = ls.job_delay_exact(tm.bs_fixed_point(lam, k, 1), k, 1)
    assert et == pytest.approx(harmonic(k) / (1 - lam), rel=1e-11)
    # k = 1: power-of-d
    for lam, d in ((0.9, 2), (0.99, 5)):
        et, _ = ls.job_delay_exact(tm.bs_fixed_point(lam, 1, d), 1, d)
        assert et == pytest.approx(pod_mean_response(lam, d), rel=1e-11)
    # lam = 0: every task at position 1
    out = ls.queueing_ratio(0.0, 5, 2)
    assert out["mean_response"] == harmonic(5) and out["queueing_ratio"] == 0.0


def test_exact_delay_within_the_monte_carlo_of_the_order_statistics():
    """kd i.i.d. lengths from the fixed point, the k lowest each get a task at length + 1;
    the exact E[max Gamma] of each job's positions, averaged: within 4 SE."""
    lam, k, d = 0.95, 30, 4
    s = tm.bs_fixed_point(lam, k, d)
    rng = np.random.default_rng(7)
    n_jobs = 20_000
    lengths = np.searchsorted(-s, -rng.random((n_jobs, k * d)), side="left")  # P(Q >= i) = s_i
    pos = np.sort(np.partition(lengths, k - 1, axis=1)[:, :k], axis=1) + 1
    vals = np.empty(n_jobs)
    for i in range(n_jobs):
        vals[i] = expected_max_gamma(np.bincount(pos[i], minlength=pos[i, -1] + 1).astype(np.int64),
                                     GL_X, GL_W)
    et, _ = ls.job_delay_exact(s, k, d)
    assert_within_se(vals.mean(), et, vals.std(ddof=1) / math.sqrt(n_jobs), "E[T]")


def test_a_point_of_the_headline_path_and_the_row():
    n_servers = 10**6
    k = math.ceil(math.log(n_servers) ** 2)           # 191
    lam = 1.0 - n_servers ** -0.3
    d = min(math.ceil(4 / ((1 - lam) * math.log(k))), n_servers // k)   # the c = 4 rule: 49
    out = ls.queueing_ratio(lam, k, d)
    assert abs(out["mass"] - 1.0) < 1e-12
    # the summed program's value (its gammaln pmfs lose ~1e-11 relative at kd ~ 10^4)
    assert out["mean_response"] == pytest.approx(6.732543851750748, rel=1e-10)
    row = tm.run_task({"policy": "batch_sampling", "lam": lam, "k": k, "d": d, "n_servers": n_servers})
    assert row["mean_response"] == out["mean_response"]
    assert row["queueing_ratio"] == pytest.approx(out["queueing_ratio"], rel=1e-15)


def test_pod_per_task_excess_keeps_its_relative_precision():
    """E[T] - H_k of pod_per_task is ~1e-11 here: law.mean() - H_k would be rounding noise;
    the excess is checked against mpmath at 30 digits."""
    lam, k, d = 1 - 100 ** -0.3, 22, 4
    row = tm.run_task({"policy": "pod_per_task", "lam": lam, "k": k, "d": d, "n_servers": 100})
    D = k * d
    with mpmath.workdps(30):
        L = mpmath.mpf(lam)
        w = [1 - L**D, L**D - L**(D * (D + 1)), L**(D * (D + 1))]   # positions 1, 2, 3 (and up)

        def excess(t):
            f = [mpmath.gammainc(p, 0, t, regularized=True) for p in (1, 2, 3)]
            return f[0] ** k - sum(wi * fi for wi, fi in zip(w, f)) ** k

        ref = float(mpmath.quad(excess, list(range(0, 41))) / harmonic(k))
    assert 0 < row["queueing_ratio"] == pytest.approx(ref, rel=1e-12)
    assert row["mean_response"] == pytest.approx(tm.ppt_response_law(lam, k, d).mean(), rel=1e-15)


def test_bad_input():
    s = tm.bs_fixed_point(0.9, 4, 2)
    for k, d in ((0, 2), (4, 0), (2.5, 2), (4, True), ("4", 2)):
        with pytest.raises(ValueError):
            ls.job_delay_exact(s, k, d)
    for bad in ([], [[0.9, 0.5]], [0.5, 0.9], [1.5, 0.2], [0.9, -0.1], [0.9, float("nan")]):
        with pytest.raises(ValueError):
            ls.job_delay_exact(bad, 4, 2)
