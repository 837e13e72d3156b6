"""Batch-filling mean field at large k and d (sim/dispatch/meanfield/large_batch.py): the same
fixed point and job law as the small-kd program of batch_filling.py, power-of-d at k = 1, and a
point of the sub_halfin_whitt path (k = 191, kd = 9359) that the small-kd program cannot reach."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.jobdelay import harmonic
from sim.dispatch.meanfield import batch_filling as bm
from sim.dispatch.meanfield import large_batch as lb
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.meanfield.pod import pod_mean_response
from tests.checks import assert_refused
from tests.helpers import assert_within_se

SMALL = [(0.5, 2, 1), (0.7, 2, 3), (0.9, 4, 2), (0.95, 3, 3), (0.8, 8, 1), (0.6, 5, 4)]


def _same_tail(a, b):
    m = max(a.size, b.size)
    return np.max(np.abs(np.pad(a, (0, m - a.size)) - np.pad(b, (0, m - b.size))))


@pytest.mark.parametrize("lam,k,d", SMALL)
def test_fixed_point_and_exact_law_match_the_small_program(lam, k, d):
    s_old = bm.fixed_point(lam, k, d)
    s = lb.fixed_point_large(lam, k, d)
    assert _same_tail(s, s_old) < 1e-10
    assert np.max(np.abs(bm.drift(s, lam, k, d))) < 1e-12   # a fixed point of the old ODE
    et, mass = lb.job_delay_exact(s, k, d)
    assert abs(mass - 1.0) < 1e-12
    assert et == pytest.approx(bm.response_law(lam, k, d, s).mean(), abs=1e-8)
    # the signature law itself: P[J][a, r] against job_signature_law's {position: count}
    law = lb.signature_law_large(s, k, d)
    ref = {}
    for w, sig in bm.job_signature_law(s, k, d):
        top = max(sig)
        key = (top - 1, sig.get(top - 1, 0) if top > 1 else 0, sig[top])
        ref[key] = ref.get(key, 0.0) + w
    mine = {(J, a, r): P[a, r] for J, P in enumerate(law) for a, r in zip(*np.nonzero(P))}
    for key in set(ref) | set(mine):
        assert mine.get(key, 0.0) == pytest.approx(ref.get(key, 0.0), abs=1e-12), key


@pytest.mark.parametrize("lam,k,d", [(0.9, 4, 2), (0.95, 3, 3), (0.6, 5, 4)])
def test_exact_delay_within_the_monte_carlo(lam, k, d):
    s = lb.fixed_point_large(lam, k, d)
    et, _ = lb.job_delay_exact(s, k, d)
    mc, se = bm.mean_job_delay(s, k, d, n_jobs=4000, seed=3)
    assert_within_se(mc, et, se, f"Monte Carlo E[T] at lam={lam}, k={k}, d={d}")


@pytest.mark.parametrize("lam,d", [(0.7, 2), (0.9, 2), (0.95, 3), (0.99, 5)])
def test_k1_is_power_of_d(lam, d):
    s = lb.fixed_point_large(lam, 1, d)
    ref = pod_fixed_point(lam, d, s.size + 5)
    assert _same_tail(s, ref) < 1e-15
    out = lb.queueing_ratio(lam, 1, d)
    assert out["mean_response"] == pytest.approx(pod_mean_response(lam, d), rel=1e-12)
    assert out["queueing_ratio"] == pytest.approx(pod_mean_response(lam, d) - 1.0, rel=1e-10)


def test_a_point_of_the_headline_path_runs():
    n_servers = 10**6
    k = math.ceil(math.log(n_servers) ** 2)           # 191
    oml = n_servers ** -0.3
    lam = 1.0 - oml
    d = min(math.ceil(4 / (oml * math.log(k))), n_servers // k)   # the c = 4 rule: 49
    out = lb.queueing_ratio(lam, k, d, one_minus_lam=oml)
    s = out["s"]
    assert s[0] == pytest.approx(lam) and np.all(np.diff(s) < 0) and s[-1] >= 0
    assert abs(out["mass"] - 1.0) < 1e-10
    assert math.isfinite(out["mean_response"]) and out["mean_response"] >= harmonic(k)
    assert out["queueing_ratio"] >= 0.0


def test_bad_input():
    assert_refused((lambda: lb.fixed_point_large(1.0, 2, 2), "lam"),
                   (lambda: lb.fixed_point_large(0.5, 0, 2), "k="),
                   (lambda: lb.job_delay_exact(np.array([0.5, 0.6]), 2, 2), "decreasing"))


@pytest.mark.parametrize("n,q,k", [(5000, 0.3, 40), (200, 0.02, 30), (90, 1.0 - 1e-9, 12)])
def test_K_table_is_the_binomial_sum(n, q, k):
    # K(r, a) = E[C(Z - r, a); Z >= r], Z ~ Binomial(n, q): the sum that replaces C_J ~ 10^7
    from scipy.special import comb
    from scipy.stats import binom

    logK, short = lb._logK_table(n, q, 1.0 - q, k)
    assert not short
    c = np.arange(n + 1)
    pmf = binom.pmf(c, n, q)
    for r in (1, k // 2, k):
        for a in range(0, k - r + 1):
            ref = np.sum(pmf[r:] * comb(c[r:] - r, a))
            assert math.exp(logK[r, a]) == pytest.approx(ref, rel=1e-10), (r, a)
