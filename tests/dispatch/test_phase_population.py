"""SQ(d) and JIQ with phase-type sizes declared by their transitions
(sim.dispatch.phase_population): the mean field against the supermarket closed form where the
law is exponential (written with one phase and with two), JIQ's exact limit, the rates on
counts against the hypergeometric law, and the population simulation against the general-size
engine at the same N, lam, d and law (two chains of one model: 4 combined SE, no allowance).

Mean field against simulation at N = 10^3 and 10^4 and the refined term against the measured
gap: benchmarks/measure_service_limits.py, figures in docs/service.md ("Limits"); the one
check here at N = 10^3 is marked slow.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.service import service_law
from sim.dispatch import phase_population as pp
from sim.dispatch.general import simulate as general
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.meanfield.pod import pod_mean_response
from tests.helpers import assert_engines_agree, assert_within_se

HYPER4 = {"service": "hyperexponential", "service_scv": 4.0}


@pytest.mark.parametrize("law", [{}, {"service": "hyperexponential", "service_scv": 1.0}],
                         ids=["one phase", "two phases"])
def test_exponential_sizes_give_the_supermarket_fixed_point(law):
    row = pp.run_meanfield({"policy": "pod", "lam": 0.9, "d": 2, "max_level": 8, **law})
    assert abs(row["mean_response"] - pod_mean_response(0.9, 2)) < 1e-12
    assert np.max(np.abs(np.array(row["tail"]) - pod_fixed_point(0.9, 2, 8))) < 1e-12
    assert row["prob_wait"] == pytest.approx(0.81, abs=1e-12)
    assert row["drop_prob"] < 1e-14


def test_heavier_sizes_wait_longer_under_sq2():
    """Hyperexponential SCV 4 waits longer than the exponential, erlang 2 shorter (the mean
    field's E[W] is monotone in the SCV among these three laws); P(wait) = lam^d for all (a
    task waits iff all d probes are busy, and the busy fraction is lam)."""
    rows = [pp.run_meanfield({"policy": "pod", "lam": 0.9, "d": 2, **law})
            for law in ({"service": "erlang", "service_phases": 2}, {}, HYPER4)]
    waits = [r["mean_wait"] for r in rows]
    assert waits[0] < waits[1] < waits[2]
    for r in rows:
        assert r["prob_wait"] == pytest.approx(0.81, abs=1e-10)
        assert r["tail"][0] == pytest.approx(0.9, abs=1e-10)


def test_jiq_limit_has_no_wait():
    """JIQ with one dispatcher: the fixed point is s_1 = lam, s_2 = 0 (E[T] = 1 for every law),
    and the refined term is 0."""
    task = {"policy": "jiq", "lam": 0.9, "n_servers": 1000, **HYPER4}
    row = pp.run_meanfield(task)
    assert row["mean_response"] == pytest.approx(1.0, abs=1e-10)
    assert row["tail"][0] == pytest.approx(0.9, abs=1e-10)
    assert abs(row["tail"][1]) < 1e-12
    assert row["prob_wait"] == pytest.approx(0.0, abs=1e-12)
    ref = pp.run_refined(task)
    assert abs(ref["mean_queue_1n"]) < 1e-6


def test_divided_difference_is_the_hypergeometric_quotient():
    n = 50.0
    for d in (1, 2, 3, 5):
        for ca, cb in ((10, 3), (7, 0), (3, 1), (2, 1), (50, 49)):
            want = (math.comb(ca, d) - math.comb(cb, d)) / math.comb(50, d) / ((ca - cb) / n)
            got = pp._divided_difference(ca / n, cb / n, n, d, False)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300)
            assert got >= 0.0
    assert pp._divided_difference(0.3, 0.2, np.inf, 3, False) == pytest.approx(
        (0.3**3 - 0.2**3) / 0.1, rel=1e-14)
    assert pp._divided_difference(0.3, 0.3, np.inf, 3, False) == pytest.approx(3 * 0.09)


def test_refusals():
    with pytest.raises(ValueError, match="service='lognormal' is not phase-type"):
        pp.run_meanfield({"policy": "pod", "lam": 0.9, "d": 2, "service": "lognormal",
                          "service_scv": 1.0})
    with pytest.raises(ValueError, match="policy='jsq'"):
        pp.run_meanfield({"policy": "jsq", "lam": 0.9, "d": 2})
    with pytest.raises(ValueError, match="lam=1.2"):
        pp.run_meanfield({"policy": "pod", "lam": 1.2, "d": 2})
    with pytest.raises(ValueError, match="d=5 must not exceed"):
        pp.run_task({"policy": "pod", "lam": 0.5, "d": 5, "n_servers": 4, "events": 1000})


@pytest.mark.parametrize("policy,d,law", [("pod", 2, HYPER4),
                                          ("pod", 2, {"service": "erlang", "service_phases": 2}),
                                          ("jiq", 1, HYPER4)],
                         ids=["pod-hyperexponential", "pod-erlang2", "jiq-hyperexponential"])
def test_population_agrees_with_the_general_engine(policy, d, law):
    """N = 50, lam = 0.9: the population chain (counts of (queue, phase)) against the
    general-size engine (sizes drawn at arrival, FIFO rings): E[T] and P(wait) within 4
    combined SE (measured at N = 100 with 8 10^6 events against 4 10^6 jobs: within 1.5 SE,
    docs/service.md)."""
    n, lam = 50, 0.9
    pop = pp.run_task({"policy": policy, "lam": lam, "d": d, "n_servers": n, "events": 1_000_000,
                       "seed": 3, **law})
    keys = {k: v for k, v in law.items() if k != "service"}
    gen = general(n, lam, policy, d=d, jobs=500_000,
                  service=service_law(law.get("service", "exponential"), **keys), seed=4)
    for key in ("mean_response", "prob_wait"):
        assert_engines_agree(pop[key], pop[key + "_se"], getattr(gen, key),
                             getattr(gen, key + "_se"), f"{policy} {key}")
    assert pop["drop_prob"] == 0.0


@pytest.mark.slow
def test_mean_field_and_refined_against_simulation_at_n_1000():
    """pod, hyperexponential SCV 4, lam = 0.9, d = 2, N = 10^3, 2 10^7 events from the mean
    field's start: E[T] within 4 SE of x* + V/N (the refined term is the finite-N allowance:
    derived, and its size checked against the measured gap in docs/service.md)."""
    base = {"policy": "pod", "lam": 0.9, "d": 2, "n_servers": 1000, **HYPER4}
    ref = pp.run_refined(base)
    row = pp.run_task({**base, "events": 20_000_000, "seed": 1100, "init": "meanfield"})
    assert row["drop_prob"] == 0.0
    assert_within_se(row["mean_response"], ref["mean_response"], row["mean_response_se"],
                     "E[T] against x* + V/N at N = 1000")
