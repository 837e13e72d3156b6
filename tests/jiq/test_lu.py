"""Lu et al.'s JIQ approximation (sim/jiq/lu.py; reconstructed, docs/jiq.md): the closed form
of JIQ-Random, the root of JIQ-SQ(d), the limits lam -> 0 and r -> infinity, the input checks,
and the columns the meanfield rows carry. Pure numerics: tolerances are rounding only."""
from __future__ import annotations

import math

import pytest

from sim.jiq import lu
from sim.jiq.lu import lu_approximation, lu_mean_response, lu_mean_wait, lu_occupancy_sum, lu_occupied_fraction
from sim.jiq.meanfield import run_task

POINTS = [(0.1, 1.0), (0.5, 10.0), (0.9, 10.0), (0.98, 10.0), (0.999, 0.5), (0.3, 1000.0)]


@pytest.mark.parametrize("lam, r", POINTS)
def test_jiq_random_closed_form(lam, r):
    t = r * (1 - lam)
    rho = t / (1 + t)
    res = lu_approximation(lam, r)
    assert res.rho == pytest.approx(rho, rel=1e-14)
    assert res.one_minus_rho == pytest.approx(1 - rho, rel=1e-12)
    assert res.reduced_load == pytest.approx(lam * (1 - rho), rel=1e-12)
    assert lu_mean_response(lam, r) == pytest.approx(1 / (1 - lam * (1 - rho)), rel=1e-12)
    assert lu_occupied_fraction(lam, r) == res.rho


@pytest.mark.parametrize("lam, r", POINTS)
def test_root_search_at_d1_reproduces_the_closed_form(lam, r):
    # the generic root (used for d >= 2) run on the d = 1 sum rho / (1 - rho)
    u = lu._solve_u(r * (1 - lam), 1)
    assert math.exp(-u) == pytest.approx(r * (1 - lam) / (1 + r * (1 - lam)), rel=1e-11)


@pytest.mark.parametrize("lam, r, d", [(0.5, 10, 2), (0.9, 10, 2), (0.98, 10, 2), (0.9, 10, 3),
                                       (0.99, 0.3, 2), (0.9, 3, 5)])
def test_sqd_root_solves_its_equation(lam, r, d):
    # points where rho is not 1 to double precision (the direct sum needs rho itself)
    res = lu_approximation(lam, r, d)
    u = -math.log(res.rho)
    direct = sum(res.rho ** ((d**i - 1) // (d - 1)) for i in range(1, 200))
    assert direct == pytest.approx(r * (1 - lam), rel=1e-10)
    assert lu_occupancy_sum(u, d) == pytest.approx(direct, rel=1e-12)
    assert res.mean_response == pytest.approx(1 / (1 - lam * (1 - res.rho)), rel=1e-12)
    # joining the shortest of d I-queues keeps more of them non-empty than a uniform join
    assert res.rho > lu_occupied_fraction(lam, r, 1)
    assert res.mean_response < lu_mean_response(lam, r, 1)


def test_values_of_the_research_note():
    # /tmp/research/findings.md's table (r = 10): Random 0.5 / 1.818 and 0.167 / 5.455,
    # SQ(2) 0.659 / 1.444 and 0.193 / 4.786
    assert lu_approximation(0.9, 10, 2).rho == pytest.approx(0.659, abs=5e-4)
    assert lu_mean_response(0.9, 10, 2) == pytest.approx(1.444, abs=1e-3)
    assert lu_approximation(0.98, 10, 2).rho == pytest.approx(0.193, abs=5e-4)
    assert lu_mean_response(0.98, 10, 2) == pytest.approx(4.786, abs=1e-3)
    assert lu_mean_response(0.9, 10) == pytest.approx(20 / 11, rel=1e-12)
    assert lu_mean_response(0.98, 10) == pytest.approx(1 / (1 - 0.98 / 1.2), rel=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_light_load_limit(d):
    assert lu_mean_response(0.0, 10, d) == 1.0
    for lam in (1e-3, 1e-6, 1e-9):
        # T - 1 = a / (1 - a) with a = lam (1 - rho) <= lam
        assert 0.0 < lu_mean_response(lam, 10, d) - 1.0 <= lam / (1 - lam)
    assert lu_mean_response(1e-9, 10, d) - 1.0 < 1e-9


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("lam", [0.5, 0.9, 0.99])
def test_many_servers_per_dispatcher_limit(d, lam):
    prev = math.inf
    for r in (1e1, 1e3, 1e6, 1e12):
        t = lu_mean_response(lam, r, d)
        assert 1.0 <= t <= prev
        prev = t
    # d = 1: T - 1 = lam / (1 + r (1 - lam) - lam) ~ lam / (r (1 - lam)); d >= 2: 1 - rho underflows
    assert prev - 1.0 <= 2 * lam / (1e12 * (1 - lam))
    assert lu_mean_response(lam, 1e6, 2) == 1.0


def test_monotone_in_load():
    for d in (1, 2):
        ts = [lu_mean_response(lam, 10, d) for lam in (0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99)]
        assert all(a < b for a, b in zip(ts, ts[1:]))


def test_mean_wait_is_mg1_at_the_reduced_load():
    a = lu_approximation(0.9, 10).reduced_load
    assert lu_mean_wait(0.9, 10) == pytest.approx(lu_mean_response(0.9, 10) - 1.0, rel=1e-12)
    assert lu_mean_wait(0.9, 10, second_moment=1.0) == pytest.approx(a / (2 * (1 - a)), rel=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: lu_approximation(1.0, 10), r"lam=1.0 must be a number in \[0, 1\)"),
    (lambda: lu_approximation(-0.1, 10), r"lam=-0.1 must be"),
    (lambda: lu_approximation("0.5", 10), r"lam='0.5' must be"),
    (lambda: lu_approximation(0.5, 0), r"r=0 must be a number > 0"),
    (lambda: lu_approximation(0.5, float("inf")), r"r=inf must be a finite number"),
    (lambda: lu_approximation(0.5, None), r"r=None must be"),
    (lambda: lu_approximation(0.5, 10, 0), r"d=0 must be an integer >= 1"),
    (lambda: lu_approximation(0.5, 10, 2.5), r"d=2.5 must be an integer$"),
    (lambda: lu_mean_wait(0.5, 10, second_moment=0.5), r"second_moment=0.5 must be"),
    (lambda: lu_occupancy_sum(0.0, 2), r"u=0.0 must be a finite number > 0"),
])
def test_bad_input_names_the_key(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_meanfield_rows_carry_the_approximation():
    base = {"engine": "meanfield", "n_servers": 1000, "lam": 0.9, "r": 10, "max_level": 5}
    jiq = run_task({**base, "policy": "jiq"})
    assert jiq["lu_mean_response"] == lu_mean_response(0.9, 10, 1)
    assert jiq["lu_rho"] == lu_occupied_fraction(0.9, 10, 1)
    sqd = run_task({**base, "policy": "jiq_sqd", "d": 2})
    assert sqd["lu_mean_response"] == lu_mean_response(0.9, 10, 2)
    pod = run_task({**base, "policy": "jiq_pod", "d": 2})
    assert pod["lu_mean_response"] is None and pod["lu_rho"] is None
