"""LL(d)'s workload fixed point (sim.dispatch.meanfield.least_loaded) against closed forms and
against the general-size engine's ``ll``.

Closed forms: exponential sizes (Hellemans & Van Houdt's ccdf), and d = 1, random routing,
where the cavity queue is M/G/1 (Pollaczek-Khinchine and Takacs). Simulation: the finite-N
gap measured by benchmarks/measure_service_limits.py at lam = 0.9, d = 2 (docs/service.md,
"Limits") is below the runs' resolution at N = 10^3 and 10^4 for both laws tested (within 1.6
SE), so the checks carry no allowance.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from sim.core.service import service_law
from sim.dispatch.general import simulate
from sim.dispatch.meanfield.least_loaded import ll_exponential_ccdf, workload_fixed_point
from tests.helpers import assert_within_se


@pytest.mark.parametrize("lam,d", [(0.9, 2), (0.7, 3)])
def test_exponential_sizes_give_the_closed_form(lam, d):
    fp = workload_fixed_point(service_law("exponential"), lam, d)
    want = integrate.quad(lambda w: ll_exponential_ccdf(w, lam, d) ** d, 0, np.inf,
                          epsabs=1e-14, epsrel=1e-13)[0]
    assert abs(fp.mean_wait - want) < 1e-9
    # the ccdf on the grid (second order in h before extrapolation: h / 2 = 1/256)
    assert np.max(np.abs(fp.ccdf - ll_exponential_ccdf(fp.w, lam, d))) < 1e-5
    assert fp.ccdf[0] == pytest.approx(lam, abs=1e-15)
    assert fp.prob_wait == pytest.approx(lam**d)
    assert fp.mean_response == pytest.approx(1.0 + fp.mean_wait)


@pytest.mark.parametrize("law", [service_law("deterministic"),
                                 service_law("hyperexponential", service_scv=4.0),
                                 service_law("erlang", service_phases=3)],
                         ids=lambda law: law.name)
def test_one_choice_is_mg1(law):
    """d = 1: the cavity queue receives every arrival, M/G/1; its mean workload is E[W]."""
    from sim.core.service import mg1_wait

    lam = 0.5
    fp = workload_fixed_point(law, lam, 1)
    w1, w2 = mg1_wait(law, lam)
    assert fp.mean_wait == pytest.approx(w1, rel=1e-8)
    assert fp.mean_workload == pytest.approx(w1, rel=1e-8)
    assert fp.mean_wait_sq == pytest.approx(w2, rel=1e-7)


def test_more_choices_wait_less():
    law = service_law("hyperexponential", service_scv=4.0)
    waits = [workload_fixed_point(law, 0.9, d).mean_wait for d in (2, 3, 5)]
    assert all(a > b for a, b in zip(waits, waits[1:]))
    assert waits[0] < 0.9 * 5.0 / (2 * 0.1)  # below random routing's (Pollaczek-Khinchine)


def test_refusals():
    law = service_law("deterministic")
    with pytest.raises(ValueError, match="lam=1.0"):
        workload_fixed_point(law, 1.0, 2)
    with pytest.raises(ValueError, match="d=0"):
        workload_fixed_point(law, 0.5, 0)
    with pytest.raises(ValueError, match="1 / h"):
        workload_fixed_point(law, 0.5, 2, h=0.3)
    with pytest.raises(ValueError, match="law="):
        workload_fixed_point("deterministic", 0.5, 2)


def test_deterministic_sizes_against_the_engine_at_n_1000():
    law = service_law("deterministic")
    fp = workload_fixed_point(law, 0.9, 2)
    g = simulate(1000, 0.9, "ll", d=2, jobs=2_000_000, service=law, seed=5)
    assert_within_se(g.mean_response, fp.mean_response, g.mean_response_se, "E[T], N = 1000")
    assert_within_se(g.prob_wait, fp.prob_wait, g.prob_wait_se, "P(wait), N = 1000")


@pytest.mark.slow
@pytest.mark.parametrize("law", [service_law("deterministic"),
                                 service_law("hyperexponential", service_scv=4.0)],
                         ids=lambda law: law.name)
def test_fixed_point_against_the_engine_at_n_10000(law):
    """N = 10^4, lam = 0.9, d = 2, 2 10^7 jobs (about 2200 time units): E[T], P(wait) and
    E[W^2] within 4 SE of the limit (measured: within 1.5 SE, docs/service.md)."""
    fp = workload_fixed_point(law, 0.9, 2)
    g = simulate(10_000, 0.9, "ll", d=2, jobs=20_000_000, service=law, seed=10_201)
    assert_within_se(g.mean_response, fp.mean_response, g.mean_response_se, "E[T]")
    assert_within_se(g.prob_wait, fp.prob_wait, g.prob_wait_se, "P(wait)")
    assert_within_se(g.mean_wait_sq, fp.mean_wait_sq, g.mean_wait_sq_se, "E[W^2]")
