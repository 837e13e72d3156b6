"""The refined mean field of batch-filling at fixed k, d (sim/dispatch/refined_batch.py).

Checks: k = 1 is pod (sim/dispatch/refined.py, analytic derivatives: an independent code path);
the enumerated drift is sim.dispatch.meanfield.batch_filling's dynamic program; f1 against a difference
in eps = 1/N of the exact hypergeometric drift; the finite-difference derivatives against other
steps; the N = infinity limits of the per-job quantities against the mean-field row; long
occupancy simulations.
"""
from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.core.refined import refined_expansion
from sim.dispatch import refined as rf
from sim.dispatch import refined_batch as rb
from sim.dispatch.meanfield import batch_filling as bmf
from tests.helpers import assert_within_se


@pytest.mark.parametrize("lam,d", [(0.9, 2), (0.9, 3), (0.6, 2)])
def test_k1_is_pod(lam, d):
    # measured: V agrees with the analytic pod coefficient within 1.6e-9 relative (the
    # difference steps); without f1 it would be pod's with-replacement V, 44% off at (0.9, 2)
    e = rb.batch_refined(lam, 1, d)
    p = rf.pod_refined(lam, d, replacement=False, levels=e.levels)
    assert np.max(np.abs(e.x - p.x)) < 1e-12
    assert abs(e.v.sum() - p.v.sum()) <= 1e-7 * abs(p.v.sum())
    assert np.max(np.abs(e.v - p.v)) <= 1e-7 * np.max(np.abs(p.v))


@pytest.mark.parametrize("lam,k,d", [(0.9, 2, 2), (0.8, 3, 2), (0.9, 2, 3)])
def test_drift_derivatives_and_f1(lam, k, d):
    e = rb.batch_refined(lam, k, d, check_truncation=False)
    x, L = e.x, e.levels
    hist = rb.histograms(k, d, L)
    # the enumeration is the dynamic program of meanfield.batch_filling (another code), at x* and off it
    rng = np.random.default_rng(5)
    for y in (x, np.clip(x * (1 + 0.05 * rng.normal(size=L)), 0, 1)):
        y = np.minimum.accumulate(y)
        assert np.max(np.abs(rb.drift(y, lam, k, d, hist) - bmf.drift(y, lam, k, d))) < 1e-13
    # f1: central difference in eps of the exact drift (rational in eps)
    eps = 1e-5
    f1 = (rb.drift_exact(x, lam, k, d, 1 / eps, hist) - rb.drift_exact(x, lam, k, d, -1 / eps, hist)) / (2 * eps)
    assert np.max(np.abs(f1 - e.f1)) < 1e-7
    # the FD derivatives with other steps (Jacobian 1e-5, Hessian 5e-4 without Richardson);
    # batch_filling.drift clips s to [0, 1], so its differences are used only where x* > 1e-3
    def f(y):
        return rb.drift(y, lam, k, d, hist)

    a = rb._fd_jacobian(f, x, h=1e-5)
    assert np.max(np.abs(a - e.a)) < 1e-7
    inner = np.nonzero(x > 1e-3)[0]
    a_dp = rb._fd_jacobian(lambda y: bmf.drift(y, lam, k, d), x, h=1e-5)
    assert np.max(np.abs((a_dp - e.a)[np.ix_(inner, inner)])) < 1e-7

    def hess(w):
        mu, u = np.linalg.eigh(w)
        return sum(mu[i] * (f(x + 5e-4 * u[:, i]) - 2 * f(x) + f(x - 5e-4 * u[:, i])) / 5e-4**2
                   for i in range(mu.size))

    v2, _ = refined_expansion(x, a, hess, rb.noise(x, lam, k, d, hist), f1)
    # measured: within 5e-8 relative of the primary V at these points; dropping f1 moves sum V
    # by 17% or more (4.687 -> 5.505 at (0.9, 2, 2))
    assert np.max(np.abs(v2 - e.v)) <= 1e-6 * np.max(np.abs(e.v))


def test_limits_of_the_row():
    lam, k, d = 0.9, 2, 2
    e = rb.batch_refined(lam, k, d)
    hist = rb.histograms(k, d, e.levels)
    p = rb._probs(hist, e.x)
    mfrow = sim.run({"engine": "meanfield", "policy": "batch_filling", "n_servers": 100, "lam": lam,
                     "k": k, "d": d})
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p @ hist.waits == pytest.approx(mfrow["prob_wait"], abs=1e-10)
    assert p @ hist.task_wait == pytest.approx(mfrow["mean_wait"], abs=1e-10)
    # two exact routes to the mean field's job response: the signature law and the histograms
    assert mfrow["mean_response_se"] is None
    assert p @ hist.delay == pytest.approx(mfrow["mean_response"], rel=1e-9)
    row = sim.run({"engine": "refined", "policy": "batch_filling", "n_servers": 40, "lam": lam,
                   "k": k, "d": d})
    assert row["mean_queue"] == pytest.approx(e.x.sum() + e.v.sum() / 40, rel=1e-12)
    assert row["mean_queue_1n"] == pytest.approx(e.v.sum(), rel=1e-12)
    assert row["mean_response_se"] is None


# Measured second-order coefficients at lam = 0.9, k = 2, d = 2: sim - (x* + V/N) = c / N^2 by
# weighted least squares over N = 10, 20, 50, 100, three occupancy runs of 1e8 events per point
# (seeds 2101-2304; SE max(replication, batch means); docs/refined.md): E[Q] c = 15.83 +- 0.30
# (chi2 0.02 on 3 dof), E[T] 18.78 +- 0.32 (0.24), prob_wait 1.424 +- 0.014 (chi2 12.8: SE
# scaled by sqrt(12.8/3) to 0.029), mean_wait 17.58 +- 0.29. Allowance C2_HI / N^2, C2_HI >=
# c + 4 SE(c).
C2_HI = {"mean_queue": 17.0, "mean_response": 20.1, "prob_wait": 1.6, "mean_wait": 18.8}


def _check_against_simulation(n, events, seed):
    task = {"policy": "batch_filling", "n_servers": n, "lam": 0.9, "k": 2, "d": 2}
    ref = sim.run({**task, "engine": "refined"})
    out = sim.run({**task, "engine": "occupancy", "events": events, "seed": seed})
    for key, c2 in C2_HI.items():
        assert_within_se(out[key], ref[key], out[key + "_se"], f"{key}, N={n}", allowance=c2 / n**2)
    return out


def test_occupancy_at_n50_matches_refined():
    # 2e7 events: SE about 0.005 on E[Q]; the refined term V/N = 0.094, so the plain mean field
    # (2.0337) fails
    out = _check_against_simulation(50, 20_000_000, 31337)
    assert out["mean_queue"] - 2.0337 > 4 * out["mean_queue_se"]


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 20, 100])
def test_long_simulations_match_refined(n):
    _check_against_simulation(n, 100_000_000, 8000 + n)
