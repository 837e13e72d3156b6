"""Service laws (sim/core/service.py): exact moments, phases, ccdf, E[max of k], refusals, and
the compiled sampler against all of them (sample moments within 4 SE, a Kolmogorov-Smirnov
test of the law, E[max of k] against Monte Carlo)."""
import math

import numpy as np
import pytest
from scipy import integrate, linalg, stats

from sim.core.service import BoundedPareto, mg1_wait, open_unit, sample, service_law
from tests.helpers import ALPHA, assert_within_se

LAWS = {
    "exponential": service_law(),
    "deterministic": service_law("deterministic"),
    "erlang": service_law("erlang", service_phases=3),
    "hyperexponential": service_law("hyperexponential", service_scv=4),
    "lognormal": service_law("lognormal", service_scv=4),
    "bounded_pareto": service_law("bounded_pareto", service_alpha=1.5, service_upper=100),
}
#: (law, E[S^2], E[S^3]) computed by hand from each law's definition
EXACT = [
    (service_law(), 2.0, 6.0),
    (service_law("deterministic"), 1.0, 1.0),
    (service_law("erlang", service_phases=4), 5 / 4, 5 * 6 / 16),
    (service_law("hyperexponential", service_scv=1), 2.0, 6.0),
    (service_law("hyperexponential", service_scv=16), 17.0, None),
    (service_law("lognormal", service_scv=3), 4.0, 64.0),
]


@pytest.mark.parametrize("law,m2,m3", EXACT, ids=lambda v: getattr(v, "name", ""))
def test_moments_by_hand(law, m2, m3):
    assert law.moment(1) == 1.0
    assert law.moment(2) == pytest.approx(m2, rel=1e-14)
    assert law.scv == pytest.approx(m2 - 1.0, rel=1e-14, abs=1e-15)
    if m3 is not None:
        assert law.moment(3) == pytest.approx(m3, rel=1e-14)


@pytest.mark.parametrize("name", ["exponential", "erlang", "hyperexponential"])
def test_phase_type_gives_the_moments_and_the_ccdf(name):
    law = LAWS[name]
    alpha, t = law.phase_type()
    inv = np.linalg.inv(-t)
    ones = np.ones(alpha.size)
    for n in (1, 2, 3):
        ph = math.factorial(n) * alpha @ np.linalg.matrix_power(inv, n) @ ones
        assert ph == pytest.approx(law.moment(n), rel=1e-12)
    for x in (0.1, 1.0, 3.0, 10.0):
        assert alpha @ linalg.expm(t * x) @ ones == pytest.approx(float(law.ccdf(x)), rel=1e-10)
    assert LAWS["lognormal"].phase_type() is None and LAWS["deterministic"].phase_type() is None


@pytest.mark.parametrize("alpha,upper", [(1.5, 100.0), (1.0, 1e6), (2.0, 1e12), (0.5, 1e4), (3.0, 2.0)])
def test_bounded_pareto_moments_by_quadrature(alpha, upper):
    """The lower bound makes the mean 1, and the closed-form moments equal the integrals of
    x^n against the density, done by scipy in log x."""
    law = service_law("bounded_pareto", service_alpha=alpha, service_upper=upper)
    lo = law.lower
    assert 0.0 < lo < 1.0

    def density_moment(n):
        c = alpha * lo**alpha / -math.expm1(-alpha * math.log(upper / lo))
        f = lambda u: c * math.exp((n - alpha) * u)  # noqa: E731  x^n f(x) dx, x = e^u
        return integrate.quad(f, math.log(lo), math.log(upper), epsrel=1e-12, limit=200)[0]

    for n in (1, 2, 3):
        assert law.moment(n) == pytest.approx(density_moment(n), rel=1e-9)
    assert float(law.ccdf(lo)) == pytest.approx(1.0) and float(law.ccdf(upper)) == 0.0


def test_ccdf_against_scipy():
    x = np.array([0.05, 0.5, 1.0, 2.0, 7.0])
    assert np.allclose(LAWS["erlang"].ccdf(x), stats.gamma.sf(x, 3, scale=1 / 3), rtol=1e-12)
    s = math.sqrt(math.log(5.0))
    assert np.allclose(LAWS["lognormal"].ccdf(x), stats.lognorm.sf(x, s, scale=math.exp(-s * s / 2)))
    assert np.array_equal(LAWS["deterministic"].ccdf(np.array([0.5, 1.0, 1.5])), [1.0, 0.0, 0.0])
    for law in LAWS.values():
        if law.name != "deterministic":
            for p in (0.3, 1e-3, 1e-9):
                assert float(law.ccdf(law.quantile_upper(p))) == pytest.approx(p, rel=1e-8)


@pytest.mark.parametrize("name", list(LAWS))
def test_sampler_moments_and_law(name):
    """2e5 draws of the compiled sampler: mean and E[S^2] within 4 SE of the exact values,
    and a Kolmogorov-Smirnov test of the whole law (p above the suite's ALPHA)."""
    law = LAWS[name]
    x = sample(law, 200_000, seed=11)
    if name == "deterministic":
        assert np.all(x == 1.0)
        return
    n = x.size
    assert_within_se(x.mean(), 1.0, x.std(ddof=1) / math.sqrt(n), f"{name} mean")
    assert_within_se((x * x).mean(), law.moment(2), (x * x).std(ddof=1) / math.sqrt(n),
                     f"{name} E[S^2]")
    assert stats.kstest(x, lambda y: 1.0 - law.ccdf(y)).pvalue > ALPHA


def test_open_unit_refines_values_near_zero():
    """xoshiro256+ outputs ``s0 + s3``: a state with ``s0 = 2**64 - 1, s3 = 0`` gives the
    largest raw word, ``j = 1``, so the draw is refined by a second word into (0, 2**-53] and
    ``-log U`` passes 36.7, the most a 53-bit uniform gives; ``j = 2**20 + 1`` is not refined
    (one word, the value ``j 2**-53``)."""
    top = np.uint64(2**64 - 1)
    u, *_ = open_unit(top, np.uint64(1), np.uint64(2), np.uint64(0))
    assert 0.0 < u <= 2.0**-53 and -math.log(u) > 36.7
    s0 = np.uint64(2**64 - (2**20 + 1) * 2**11)  # r >> 11 = 2**53 - 2**20 - 1
    u, *_ = open_unit(s0, np.uint64(1), np.uint64(2), np.uint64(0))
    assert u == (2**20 + 1) * 2.0**-53


def test_sampler_is_the_seeds():
    law = LAWS["hyperexponential"]
    assert np.array_equal(sample(law, 100, seed=5), sample(law, 100, seed=5))
    assert not np.array_equal(sample(law, 100, seed=5), sample(law, 100, seed=6))


@pytest.mark.parametrize("name", list(LAWS))
@pytest.mark.parametrize("k", [2, 10, 100])
def test_expected_max_against_monte_carlo(name, k):
    law = LAWS[name]
    m = sample(law, 20_000 * k, seed=17 + k).reshape(20_000, k).max(axis=1)
    truth = law.expected_max(k)
    if name == "deterministic":
        assert truth == 1.0 and np.all(m == 1.0)
        return
    assert_within_se(m.mean(), truth, m.std(ddof=1) / math.sqrt(m.size), f"E[max of {k}] {name}")


def test_expected_max_quadrature_is_exact_where_a_closed_form_is_known():
    """The quadrature path (erlang with one phase, hyperexponential with SCV 1: both the
    exponential) gives the harmonic numbers, to k = 10^6."""
    for k in (2, 10, 1000, 10**6):
        h_k = float(np.sum(1.0 / np.arange(1, k + 1)))
        assert service_law().expected_max(k) == pytest.approx(h_k, rel=1e-13)
        assert service_law("erlang", service_phases=1).expected_max(k) == pytest.approx(h_k, rel=1e-10)
        assert service_law("hyperexponential", service_scv=1).expected_max(k) == pytest.approx(h_k, rel=1e-10)
    # two bounded Pareto sizes: E[max] = int x 2 F(x) f(x) dx, done directly
    law = LAWS["bounded_pareto"]
    lo, hi, a = law.lower, law.upper, law.alpha
    c = a * lo**a / (1 - (lo / hi) ** a)
    direct = integrate.quad(lambda x: x * 2 * (1 - float(law.ccdf(x))) * c * x ** (-a - 1), lo, hi,
                            points=[1, 10], limit=200, epsrel=1e-12)[0]
    assert law.expected_max(2) == pytest.approx(direct, rel=1e-9)


def test_mg1_wait_closed_forms():
    """Pollaczek-Khinchine and Takacs at known points: M/M/1 (W = lam / (1 - lam) times the
    Exp(1 - lam) law's moments given a wait: E[W^2] = 2 lam / (1 - lam)^2) and M/D/1."""
    w1, w2 = mg1_wait(service_law(), 0.5)
    assert (w1, w2) == pytest.approx((1.0, 4.0))
    w1, w2 = mg1_wait(service_law("deterministic"), 0.5)
    assert w1 == pytest.approx(0.5) and w2 == pytest.approx(2 * 0.25 + 0.5 / 1.5)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(service="weibull"), r"^service='weibull' is unknown; valid: exponential, "),
    (dict(service="erlang"), r"^service='erlang' needs service_phases$"),
    (dict(service="erlang", service_phases=2.5), r"^service_phases=2.5 must be an integer in \[1, 1000\]$"),
    (dict(service="erlang", service_phases=True), r"^service_phases=True must be"),
    (dict(service="hyperexponential", service_scv=0.5), r"^service_scv=0.5 must be a finite number >= 1"),
    (dict(service="hyperexponential", service_scv=float("inf")), r"^service_scv=inf must be"),
    (dict(service="lognormal", service_scv=0), r"^service_scv=0 must be a number in \(0, 100\]"),
    (dict(service="lognormal", service_scv="4"), r"^service_scv='4' must be"),
    (dict(service="bounded_pareto", service_alpha=1.5), r"^service='bounded_pareto' needs service_upper$"),
    (dict(service="bounded_pareto", service_alpha=1.5, service_upper=1.0), r"^service_upper=1.0 must be"),
    (dict(service="bounded_pareto", service_alpha=0, service_upper=10), r"^service_alpha=0 must be"),
    (dict(service="bounded_pareto", service_alpha=0.01, service_upper=1e12),
     r"^service_alpha=0.01 with service_upper=1e\+12: no lower bound"),
    (dict(service="exponential", service_scv=2), r"^service_scv=2 is not a parameter of service='exponential'"),
    (dict(service="lognormal", service_phases=2, service_scv=2), r"^service_phases=2 is not a parameter"),
])
def test_bad_laws_are_refused_in_one_line(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        service_law(**kwargs)
    assert "\n" not in str(info.value)


def test_laws_take_fields_or_task_keys_and_describe_themselves():
    a = service_law("hyperexponential", scv=4)
    assert a == service_law("hyperexponential", service_scv=4)
    assert a.describe() == "hyperexponential (service_scv=4.0)"
    assert isinstance(LAWS["bounded_pareto"], BoundedPareto)
    assert service_law().describe() == "exponential"
