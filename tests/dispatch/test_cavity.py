"""The SQ(d) cavity fixed point (sim.dispatch.meanfield.cavity) against exact limits and against
the general-size engine's ``pod``.

Exact checks (the solver's own tolerance): exponential sizes give the supermarket closed form;
erlang and hyperexponential sizes give the phase-type population's mean field
(sim.dispatch.phase_population), which is exact for them; d = 1 is the M/G/1 queue
(Pollaczek-Khinchine). The solver's error bound is its ``num_error`` (the difference between
the Richardson value and the value at h / 2: a second-order scheme's extrapolated error is far
below it where the scheme is in its asymptotic regime); the fixed-point iteration stops at steps
below 1e-14 in u.

Simulation: the general engine at N = 10^4 (2 10^7 arrivals, about 2200 time units at lam 0.9 and
4000 at lam 0.5), within 4 SE plus a finite-N allowance measured by
benchmarks/measure_cavity_limits.py with exponential sizes at the same N, lam and d, where the
limit is exact (docs/service.md, "SQ(d) with any law: the cavity queue").
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from sim.core.service import mg1_wait, service_law
from sim.dispatch.general import simulate
from sim.dispatch.meanfield.cavity import _top, fixed_point, sqd_exponential_tail
from tests.helpers import assert_within_se

DET = service_law("deterministic")
LOGN4 = service_law("lognormal", service_scv=4.0)
PARETO = service_law("bounded_pareto", service_alpha=1.5, service_upper=100.0)


@pytest.mark.parametrize("lam,d", [(0.5, 2), (0.9, 2), (0.9, 5), (0.7, 3)])
def test_exponential_sizes_give_the_closed_form(lam, d):
    fp = fixed_point(service_law("exponential"), lam, d)
    exact = sqd_exponential_tail(lam, d, fp.tail.size + 20)
    want = float(exact[1:].sum()) / lam
    assert abs(fp.mean_response - want) <= fp.num_error
    assert fp.num_error < 1e-5
    n = fp.tail.size
    assert np.max(np.abs(fp.tail - exact[:n])) < 1e-8
    assert exact[n] < 1e-15  # the tail the solver dropped is below its level tolerance
    assert fp.prob_wait == pytest.approx(lam**d, abs=1e-9)


@pytest.mark.parametrize("law", [service_law("erlang", service_phases=2),
                                 service_law("hyperexponential", service_scv=4.0)],
                         ids=lambda law: law.name)
def test_phase_type_sizes_give_the_population_mean_field(law):
    """The population's mean field (ODE, then a root of the drift to its tolerance) is exact for
    phase-type laws; the cavity queue must agree to the two solvers' tolerances."""
    from sim.dispatch import phase_population as pp

    lam, d = 0.9, 2
    fp = fixed_point(law, lam, d)
    keys = {"service": law.name, **({"service_phases": law.phases} if law.name == "erlang"
                                    else {"service_scv": law.scv})}
    mf = pp.run_meanfield({"policy": "pod", "lam": lam, "d": d, "n_servers": 1000, **keys})
    assert abs(fp.mean_response - mf["mean_response"]) <= fp.num_error + 1e-9
    assert fp.prob_wait == pytest.approx(mf["prob_wait"], abs=1e-9)


@pytest.mark.parametrize("law", [DET, LOGN4, PARETO, service_law("hyperexponential",
                                                                  service_scv=16.0)],
                         ids=lambda law: law.name)
def test_one_choice_is_mg1(law):
    """d = 1: every arrival joins the cavity queue, which is M/G/1: E[T] = 1 + Pollaczek-Khinchine,
    for the law as the solver sees it: an unbounded law's ages end at its ccdf's 1e-16 quantile
    ``t`` (the ccdf taken as 0 beyond), which lowers the mean by ``E[(S - t)^+]`` and ``E[S^2]``
    by ``E[(S^2 - t^2)^+]``: for the lognormal SCV 4 at lam 0.9 that moves E[T] by 2e-9
    relative, far above ``num_error`` (the grid step's error only)."""
    lam = 0.9
    fp = fixed_point(law, lam, 1)
    m1, m2 = 1.0, law.moment(2)
    if law.name == "lognormal":  # E[S^n 1{S > t}] = E[S^n] P(Z > (log t - m - n sigma^2) / sigma)
        s = law.sigma
        t = _top(law)
        tail = [law.moment(n) * norm.sf((math.log(t) + s * s / 2 - n * s * s) / s) for n in (1, 2)]
        m1 -= tail[0] - t * float(law.ccdf(t))
        m2 -= tail[1] - t * t * float(law.ccdf(t))
    want = m1 + lam * m2 / (2.0 * (1.0 - lam * m1))  # mean queue / lam, Pollaczek-Khinchine
    assert abs(fp.mean_response - want) <= fp.num_error + 1e-10 * want
    assert abs(want - 1.0 - mg1_wait(law, lam)[0]) < 1e-8 * want
    assert fp.prob_wait == pytest.approx(lam * m1, abs=1e-10)


def test_more_choices_and_lighter_sizes_wait_less():
    waits = [fixed_point(LOGN4, 0.9, d).mean_wait for d in (1, 2, 5)]
    assert all(a > b for a, b in zip(waits, waits[1:]))
    by_law = [fixed_point(law, 0.9, 2).mean_wait
              for law in (DET, service_law("exponential"), LOGN4)]
    assert all(a < b for a, b in zip(by_law, by_law[1:]))


@pytest.mark.parametrize("args, kwargs, message", [
    ((DET, 1.0, 2), {}, "lam=1.0"), ((DET, 0.5, 0), {}, "d=0"), ((DET, 0.5, 2), {"h": 0.3}, "1 / h"),
    (("deterministic", 0.5, 2), {}, "law="), ((DET, 0.5, 2), {"max_levels": 5}, "max_levels=5")])
def test_refusals(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fixed_point(*args, **kwargs)


#: the finite-N allowance in E[T] at N = 10^4 by (lam, d): |gap| + 2 SE of the exponential law's
#: run at the same N, lam and d against its exact limit (benchmarks/measure_cavity_limits.py,
#: 2 10^7 arrivals, seed 473; docs/service.md): gaps -0.000570 +- 0.000447, -0.000200 +-
#: 0.000179, -0.002802 +- 0.003695, -0.001312 +- 0.001167
ALLOWANCE = {(0.5, 2): 0.00146, (0.5, 5): 0.00056, (0.9, 2): 0.0102, (0.9, 5): 0.0036}


def test_deterministic_sizes_against_the_engine_at_n_10000():
    """The one comparison with simulation in the fast suite (lam 0.9, d 2)."""
    fp = fixed_point(DET, 0.9, 2)
    g = simulate(10_000, 0.9, "pod", d=2, jobs=20_000_000, service=DET, seed=4703)
    assert_within_se(g.mean_response, fp.mean_response, g.mean_response_se, "E[T]",
                     allowance=ALLOWANCE[0.9, 2])
    assert_within_se(g.prob_wait, fp.prob_wait, g.prob_wait_se, "P(wait)")


@pytest.mark.slow
@pytest.mark.parametrize("law", [DET, LOGN4, PARETO], ids=lambda law: law.name)
@pytest.mark.parametrize("lam,d", [(0.5, 2), (0.5, 5), (0.9, 2), (0.9, 5)])
def test_limit_against_the_engine_at_n_10000(law, lam, d):
    fp = fixed_point(law, lam, d)
    g = simulate(10_000, lam, "pod", d=d, jobs=20_000_000, service=law, seed=4704 + 10 * d)
    assert_within_se(g.mean_response, fp.mean_response, g.mean_response_se, "E[T]",
                     allowance=ALLOWANCE[lam, d])
    assert_within_se(g.prob_wait, fp.prob_wait, g.prob_wait_se, "P(wait)")
