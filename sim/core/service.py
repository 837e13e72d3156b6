"""Service-time laws of mean 1: their parameters, exact moments, ccdf, phases, a compiled sampler.

Every law has mean 1, so the arrival rate per server ``lam`` stays the load. A law is a frozen
record (:class:`ServiceLaw` and one subclass per law) built and checked by :func:`service_law`;
a bad value is refused in one line naming its key (``service``, ``service_scv``,
``service_phases``, ``service_alpha``, ``service_upper``: the keys a task will carry) and the
value. Each record gives

- ``moment(n)``, ``n = 1, 2, 3``: exact, closed form; ``scv``: ``E[S^2] - 1``;
- ``ccdf(x)``: ``P(S > x)``, numpy-vectorised; ``quantile_upper(p)``: ``x`` with ``P(S > x) = p``;
- ``phase_type()``: ``(alpha, T)``, a phase-type representation (initial law, sub-generator) for
  the laws that are exactly phase-type (exponential, erlang, hyperexponential), else None;
- ``expected_max(k)``: ``E[max of k iid sizes]``, exact where a closed form is stable
  (exponential: the harmonic number ``H_k``; deterministic: 1), else by scipy quadrature of
  ``1 - F(x)^k`` split at the law's upper quantiles (:func:`expected_max`);
- ``code`` and ``params()``: the integer law code and float parameter array that the compiled
  sampler :func:`draw_size` takes (kernels never receive the record itself).

=====================  ====  =================================  ======================  ========================
law (``service``)      code  parameters (keys)                  ``E[S^2]``              ``E[S^3]``
=====================  ====  =================================  ======================  ========================
``exponential``        0     --                                 2                       6
``deterministic``      1     --                                 1                       1
``erlang``             2     ``service_phases`` k in 1..1000    (k + 1) / k             (k + 1)(k + 2) / k^2
``hyperexponential``   3     ``service_scv`` c2 >= 1            1 + c2                  3/4 (1/p1^2 + 1/p2^2)
``lognormal``          4     ``service_scv`` c2 in (0, 100]     1 + c2                  (1 + c2)^3
``bounded_pareto``     5     ``service_alpha`` a in (0, 20],    a L^n phi(n - a) /      (same, n = 3)
                             ``service_upper`` H in (1, 1e12]   (1 - (L/H)^a)
=====================  ====  =================================  ======================  ========================

The hyperexponential has two phases with balanced means (``p1 / mu1 = p2 / mu2 = 1/2``), the
bounded Pareto's lower bound ``L`` is solved so that the mean is 1; the derivations, and why
the ranges stop where they do, are in docs/service.md.

Random numbers come from the kernels' xoshiro256+ (:mod:`sim.core.rng`), four state words in,
four out, as every kernel draws. A draw that needs resolution near 0 of a uniform (``-log U``
and the other inverse transforms of unbounded or heavy tails) takes :func:`open_unit`, a
uniform on ``(0, 1]`` whose values below ``2**-33`` get 53 more bits from a second draw (one
arrival in 2**33), so that ``-log U`` reaches 73 rather than 36.7. Exponential draws (the
exponential law, the phases of the erlang and hyperexponential, and the engines' inter-arrival
gaps) take :func:`exp_draw`, a 256-layer ziggurat with no logarithm on its fast path, whose
tail beyond ``r = 7.697`` is ``r - log U`` with ``U`` from :func:`open_unit`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
from numba import njit
from scipy import integrate, optimize, special, stats

from sim.core.results import is_integral, is_number
from sim.core.rng import next_raw, u01
from sim.core.service_keys import (  # the laws' names, keys and ranges, declared once there
    LAW_KEYS,
    LAW_NAMES,
    MAX_LOGNORMAL_SCV,
    MAX_PARETO_ALPHA,
    MAX_PARETO_UPPER,
    MAX_PHASES,
)

__all__ = ["ServiceLaw", "Exponential", "Deterministic", "Erlang", "Hyperexponential", "Lognormal",
           "BoundedPareto", "LAWS", "LAW_KEYS", "service_law", "expected_max", "open_unit",
           "draw_size", "exp_draw", "sample", "mg1_wait", "EXPONENTIAL", "DETERMINISTIC", "ERLANG", "HYPEREXPONENTIAL",
           "LOGNORMAL", "BOUNDED_PARETO"]

#: law codes of the compiled sampler (:func:`draw_size`)
EXPONENTIAL, DETERMINISTIC, ERLANG, HYPEREXPONENTIAL, LOGNORMAL, BOUNDED_PARETO = 0, 1, 2, 3, 4, 5


def _refuse(field: str, value, must: str):
    raise ValueError(f"{LAW_KEYS[field]}={value!r} must be {must}")


def _real(field: str, value, ok, must: str) -> float:
    if not is_number(value) or not math.isfinite(float(value)) or not ok(float(value)):
        _refuse(field, value, must)
    return float(value)


@dataclass(frozen=True)
class ServiceLaw:
    """A service-time law of mean 1 (the module docstring lists what each law gives)."""

    name: ClassVar[str] = ""
    code: ClassVar[int] = -1

    def moment(self, n: int) -> float:
        """``E[S^n]`` for ``n`` in 1, 2, 3 (exact)."""
        if n not in (1, 2, 3):
            raise ValueError(f"n={n!r} must be 1, 2 or 3")
        return 1.0 if n == 1 else float(self._moment(n))

    def _moment(self, n: int) -> float:
        raise NotImplementedError

    @property
    def scv(self) -> float:
        """Squared coefficient of variation, ``Var(S) / E[S]^2 = E[S^2] - 1``."""
        return self.moment(2) - 1.0

    def ccdf(self, x):
        """``P(S > x)`` (array in, array out)."""
        raise NotImplementedError

    def quantile_upper(self, p: float) -> float:
        """The ``x`` with ``P(S > x) = p``, ``0 < p < 1``."""
        raise NotImplementedError

    def params(self) -> np.ndarray:
        """The float parameters :func:`draw_size` reads for this law's ``code``."""
        return np.zeros(1)

    def phase_type(self):
        """``(alpha, T)``: initial law and sub-generator of a phase-type representation, for
        the laws that are exactly phase-type; None for the others."""
        return None

    def expected_max(self, k: int) -> float:
        """``E[max of k iid sizes]`` (:func:`expected_max`)."""
        return expected_max(self, k)

    def describe(self) -> str:
        """The law in words, with its parameters (for labels and messages)."""
        own = ", ".join(f"{LAW_KEYS[f]}={getattr(self, f)!r}" for f in _law_fields(type(self)))
        return f"{self.name}" + (f" ({own})" if own else "")


@dataclass(frozen=True)
class Exponential(ServiceLaw):
    name: ClassVar[str] = "exponential"
    code: ClassVar[int] = EXPONENTIAL

    def _moment(self, n):
        return math.factorial(n)

    def ccdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return np.where(x < 0, 1.0, np.exp(-np.maximum(x, 0.0)))

    def quantile_upper(self, p):
        return -math.log(p)

    def phase_type(self):
        return np.ones(1), -np.ones((1, 1))


@dataclass(frozen=True)
class Deterministic(ServiceLaw):
    name: ClassVar[str] = "deterministic"
    code: ClassVar[int] = DETERMINISTIC

    def _moment(self, n):
        return 1.0

    def ccdf(self, x):
        return np.where(np.asarray(x, dtype=np.float64) < 1.0, 1.0, 0.0)

    def quantile_upper(self, p):
        return 1.0


@dataclass(frozen=True)
class Erlang(ServiceLaw):
    """``phases`` exponential phases of rate ``phases`` each (SCV ``1 / phases``)."""

    name: ClassVar[str] = "erlang"
    code: ClassVar[int] = ERLANG
    phases: int = 1

    def __post_init__(self):
        v = self.phases
        if not is_integral(v) or not 1 <= v <= MAX_PHASES:
            _refuse("phases", v, f"an integer in [1, {MAX_PHASES}]")
        object.__setattr__(self, "phases", int(v))

    def _moment(self, n):
        k = self.phases
        return math.prod(k + j for j in range(n)) / k**n

    def ccdf(self, x):
        x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
        return special.gammaincc(self.phases, self.phases * x)

    def quantile_upper(self, p):
        return float(special.gammainccinv(self.phases, p)) / self.phases

    def params(self):
        return np.array([float(self.phases)])

    def phase_type(self):
        k = self.phases
        t = np.diag(np.full(k, -float(k))) + np.diag(np.full(k - 1, float(k)), 1)
        alpha = np.zeros(k)
        alpha[0] = 1.0
        return alpha, t


@dataclass(frozen=True)
class Hyperexponential(ServiceLaw):
    """Two exponential phases with balanced means: phase ``i`` with probability ``p_i`` and
    rate ``mu_i = 2 p_i`` (so ``p_i / mu_i = 1/2``), ``p_1 = (1 + r) / 2``,
    ``r = sqrt((c2 - 1) / (c2 + 1))``."""

    name: ClassVar[str] = "hyperexponential"
    code: ClassVar[int] = HYPEREXPONENTIAL
    scv: float = 4.0  # type: ignore[assignment]

    def __post_init__(self):
        object.__setattr__(self, "scv", _real("scv", self.scv, lambda v: v >= 1.0,
                                              "a finite number >= 1 for service='hyperexponential'"))

    def probabilities(self) -> tuple[float, float]:
        """``(p1, p2)``; ``p2 = (1 - r) / 2`` written as ``1 / ((c2 + 1)(1 + r))``, free of the
        cancellation of ``1 - r`` at large ``c2``."""
        c2 = self.scv
        r = math.sqrt((c2 - 1.0) / (c2 + 1.0))
        p2 = 1.0 / ((c2 + 1.0) * (1.0 + r))
        return 1.0 - p2, p2

    def _moment(self, n):
        p1, p2 = self.probabilities()
        return math.factorial(n) * (p1 / (2 * p1) ** n + p2 / (2 * p2) ** n)

    def ccdf(self, x):
        p1, p2 = self.probabilities()
        x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
        return p1 * np.exp(-2 * p1 * x) + p2 * np.exp(-2 * p2 * x)

    def quantile_upper(self, p):
        p1, p2 = self.probabilities()
        # ccdf(x) <= exp(-2 p2 x) (both rates are >= 2 p2): the root is below -log(p) / (2 p2)
        hi = 1.0 - math.log(p) / p2
        return optimize.brentq(lambda x: float(self.ccdf(x)) - p, 0.0, hi, xtol=1e-14, rtol=1e-14)

    def params(self):
        p1, p2 = self.probabilities()
        return np.array([p1, 2 * p1, 2 * p2])

    def phase_type(self):
        p1, p2 = self.probabilities()
        return np.array([p1, p2]), np.diag([-2 * p1, -2 * p2])


@dataclass(frozen=True)
class Lognormal(ServiceLaw):
    """``exp(m + sigma Z)``, ``sigma^2 = log(1 + c2)``, ``m = -sigma^2 / 2`` (mean 1)."""

    name: ClassVar[str] = "lognormal"
    code: ClassVar[int] = LOGNORMAL
    scv: float = 1.0  # type: ignore[assignment]

    def __post_init__(self):
        object.__setattr__(self, "scv", _real(
            "scv", self.scv, lambda v: 0.0 < v <= MAX_LOGNORMAL_SCV,
            f"a number in (0, {MAX_LOGNORMAL_SCV:g}] for service='lognormal'"))

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log1p(self.scv))

    def _moment(self, n):
        return math.exp(n * (n - 1) / 2 * self.sigma**2)  # exp(n m + n^2 sigma^2 / 2)

    def ccdf(self, x):
        s = self.sigma
        return stats.lognorm.sf(np.asarray(x, dtype=np.float64), s, scale=math.exp(-s * s / 2))

    def quantile_upper(self, p):
        s = self.sigma
        return float(stats.lognorm.isf(p, s, scale=math.exp(-s * s / 2)))

    def params(self):
        s = self.sigma
        return np.array([-s * s / 2, s])


def _exp_phi(y: float, t: float, ell: float) -> float:
    """``exp(y) (exp(t ell) - 1) / t`` (``exp(y) ell`` at ``t = 0``), i.e.
    ``exp(y) int_0^ell exp(t u) du``, without overflow where ``exp(t ell)`` alone would
    overflow and ``exp(y)`` underflow (a tiny lower bound ``L = exp(y)`` of a bounded Pareto
    with a large upper bound): ``expm1`` where ``|t ell| < 1``, else the difference of two
    exponentials of moderate arguments."""
    if t == 0.0:
        return math.exp(y) * ell
    if abs(t * ell) < 1.0:
        return math.exp(y) * math.expm1(t * ell) / t
    return (math.exp(y + t * ell) - math.exp(y)) / t


@dataclass(frozen=True)
class BoundedPareto(ServiceLaw):
    """Density ``a L^a x^(-a-1) / (1 - (L/H)^a)`` on ``[L, H]``, ``L`` solved for mean 1."""

    name: ClassVar[str] = "bounded_pareto"
    code: ClassVar[int] = BOUNDED_PARETO
    alpha: float = 1.5
    upper: float = 100.0

    def __post_init__(self):
        a = _real("alpha", self.alpha, lambda v: 0.0 < v <= MAX_PARETO_ALPHA,
                  f"a number in (0, {MAX_PARETO_ALPHA:g}] for service='bounded_pareto'")
        h = _real("upper", self.upper, lambda v: 1.0 < v <= MAX_PARETO_UPPER,
                  f"a number in (1, {MAX_PARETO_UPPER:g}] for service='bounded_pareto' "
                  "(the upper bound must exceed the mean 1)")
        object.__setattr__(self, "alpha", a)
        object.__setattr__(self, "upper", h)
        object.__setattr__(self, "_lower", _pareto_lower(a, h))

    @property
    def lower(self) -> float:
        """The lower bound ``L`` that makes the mean 1."""
        return self._lower  # type: ignore[attr-defined]

    def _moment(self, n):
        return _pareto_moment(n, self.alpha, self.upper, math.log(self.lower))

    def ccdf(self, x):
        a, lo, hi = self.alpha, self.lower, self.upper
        x = np.clip(np.asarray(x, dtype=np.float64), lo, hi)
        eps = (lo / hi) ** a
        return np.clip(((lo / x) ** a - eps) / (1.0 - eps), 0.0, 1.0)

    def quantile_upper(self, p):
        a, lo, hi = self.alpha, self.lower, self.upper
        eps = (lo / hi) ** a
        return min(lo * (eps + (1.0 - eps) * p) ** (-1.0 / a), hi)

    def params(self):
        a, lo, hi = self.alpha, self.lower, self.upper
        return np.array([lo, (lo / hi) ** a, -1.0 / a, hi])


def _pareto_moment(n: int, alpha: float, upper: float, y: float) -> float:
    """``E[S^n]`` of the bounded Pareto on ``[exp(y), upper]`` with shape ``alpha``:
    ``a L^n int_0^ell exp((n - a) u) du / (1 - exp(-a ell))``, ``ell = log(upper / L)``
    (substitute ``x = L exp(u)`` in ``int x^n a L^a x^(-a-1) dx``)."""
    ell = math.log(upper) - y
    return alpha * _exp_phi(n * y, n - alpha, ell) / -math.expm1(-alpha * ell)


def _pareto_lower(alpha: float, upper: float) -> float:
    """The ``L`` in ``(0, 1)`` at which the bounded Pareto on ``[L, upper]`` has mean 1.

    The law is stochastically increasing in ``L`` (its ccdf ``u (x^-a - H^-a) / (1 - u H^-a)``
    grows with ``u = L^a``), so the mean crosses 1 once; the root is found in ``log L``."""
    def mean_minus_one(y):
        return _pareto_moment(1, alpha, upper, y) - 1.0

    y_lo = -700.0
    if mean_minus_one(y_lo) >= 0.0:  # a small shape with a large upper bound
        raise ValueError(f"service_alpha={alpha:g} with service_upper={upper:g}: no lower bound "
                         "above 1e-304 gives mean 1")
    y = optimize.brentq(mean_minus_one, y_lo, 0.0, xtol=1e-15, rtol=4 * np.finfo(float).eps)
    return math.exp(y)


def _law_fields(cls) -> list[str]:
    """The parameters of a law class (its dataclass fields set by the constructor)."""
    return [f.name for f in fields(cls) if f.init]


#: the laws by name (``exponential`` first: the default)
LAWS: dict[str, type[ServiceLaw]] = {cls.name: cls for cls in (
    Exponential, Deterministic, Erlang, Hyperexponential, Lognormal, BoundedPareto)}
if tuple(LAWS) != LAW_NAMES or [c.code for c in LAWS.values()] != list(range(len(LAWS))):
    raise ImportError("sim.core.service_keys.LAW_NAMES must list the laws in the order of their codes")


def service_law(service: str = "exponential", **params) -> ServiceLaw:
    """The law named ``service`` with its parameters given by task key (``service_scv=4``) or
    by field (``scv=4``); a key the law does not take, a missing one, or a value out of range
    is refused in one line (``ValueError``) naming the key and the value."""
    cls = LAWS.get(service) if isinstance(service, str) else None
    if cls is None:
        raise ValueError(f"service={service!r} is unknown; valid: {', '.join(LAWS)}")
    keys = {f: LAW_KEYS[f] for f in _law_fields(cls)}
    by_key = {v: k for k, v in keys.items()}
    given = {}
    for key, value in params.items():
        name = by_key.get(key, key if key in keys else None)
        if name is None:
            takes = ", ".join(keys.values()) or "no parameter"
            raise ValueError(f"{key}={value!r} is not a parameter of service={service!r} "
                             f"(it takes {takes})")
        given[name] = value
    missing = [keys[f] for f in keys if f not in given]
    if missing:
        raise ValueError(f"service={service!r} needs {', '.join(missing)}")
    return cls(**given)


# ----------------------------------------------------------------------------------------------
# E[max of k iid sizes]
# ----------------------------------------------------------------------------------------------
def expected_max(law: ServiceLaw, k: int) -> float:
    """``E[max(S_1..S_k)]`` for iid sizes of ``law``, ``k >= 1``.

    Exact for the exponential (``H_k = digamma(k + 1) + euler_gamma``) and the deterministic
    law (1). Otherwise ``int_0^inf 1 - F(x)^k dx``, written ``-expm1(k log1p(-ccdf(x)))`` so
    that it keeps its digits where ``F^k`` is near 1, by ``scipy.integrate.quad`` over pieces
    split at the upper quantiles ``P(S > x) = 1/2, 1/k, 10^-3/k, ..., 10^-12/k``: the
    integrand falls from 1 to 0 around the ``1 - 1/k`` quantile, which a single adaptive
    interval over ``[0, inf)`` would not find for large ``k``. The last piece runs to the
    law's upper bound (or infinity); every piece but the first is integrated in ``log x``."""
    if not is_integral(k) or k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1")
    k = int(k)
    if isinstance(law, Exponential):
        return float(special.digamma(k + 1) + np.euler_gamma)
    if isinstance(law, Deterministic):
        return 1.0
    if k == 1:
        return 1.0

    def g(x):
        c = float(law.ccdf(x))
        return -math.expm1(k * math.log1p(-c)) if c < 1.0 else 1.0

    def g_log(u):  # g(x) dx with x = exp(u); beyond 1e300 every law's ccdf is 0
        return g(math.exp(u)) * math.exp(u) if u < 690.0 else 0.0

    levels = [0.5, 1.0 / k] + [10.0**-j / k for j in range(3, 13, 3)]
    cuts = sorted({0.0, *(law.quantile_upper(p) for p in levels if p < 1.0)})
    top = math.inf
    if isinstance(law, BoundedPareto):  # 1 - F^k = 1 below L (a kink there), 0 above H
        cuts = sorted({*cuts, law.lower})
        top = law.upper
    cuts = [c for c in cuts if c < top] + [top]
    total = 0.0
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a == 0.0:
            val, _ = integrate.quad(g, a, b, epsabs=1e-13, epsrel=1e-10, limit=200)
        else:  # in u = log x: a heavy tail spans decades, which a linear variable crowds
            val, _ = integrate.quad(g_log, math.log(a), math.log(b), epsabs=1e-13, epsrel=1e-10,
                                    limit=200)
        total += val
    return total


# ----------------------------------------------------------------------------------------------
# M/G/1: the exact control of random dispatch
# ----------------------------------------------------------------------------------------------
def mg1_wait(law: ServiceLaw, lam: float) -> tuple[float, float]:
    """Waiting time of the M/G/1 FIFO queue with arrival rate ``lam < 1`` and sizes of ``law``
    (mean 1): ``(E[W], E[W^2])`` by Pollaczek-Khinchine, ``E[W] = lam E[S^2] / (2 (1 - lam))``,
    and Takacs, ``E[W^2] = 2 E[W]^2 + lam E[S^3] / (3 (1 - lam))``. Random dispatch to N
    servers is N independent such queues, at every N."""
    if not is_number(lam) or not 0.0 <= float(lam) < 1.0:
        raise ValueError(f"lam={lam!r} must be a number with 0 <= lam < 1")
    lam = float(lam)
    w1 = lam * law.moment(2) / (2.0 * (1.0 - lam))
    w2 = 2.0 * w1 * w1 + lam * law.moment(3) / (3.0 * (1.0 - lam))
    return w1, w2


# ----------------------------------------------------------------------------------------------
# the compiled sampler
# ----------------------------------------------------------------------------------------------
#: layers of the exponential ziggurat
ZIG_LAYERS = 256


def _ziggurat_exp_tables(layers: int = ZIG_LAYERS):
    """Marsaglia and Tsang's (2000) ziggurat for the Exp(1) density ``f(x) = exp(-x)``: the
    layer bounds ``x[0..layers]`` and ``f(x[i])``.

    Layer 0 is the base: the rectangle ``[0, r] x [0, f(r)]`` and the tail beyond ``r``, of
    area ``v = f(r) (r + 1)``; it is given the width ``x[0] = v / f(r)`` so that a uniform
    ``x`` on ``[0, x[0])`` falls below ``r`` with the rectangle's share of ``v``. Layer
    ``i >= 1`` is the rectangle ``[0, x[i]] x [f(x[i]), f(x[i + 1])]``, of area ``v``:
    ``x[i + 1] = -log(f(x[i]) + v / x[i])``, and ``x[layers] = 0`` closes the top layer at
    ``f = 1``. ``r`` is the root of that closure, solved by ``brentq`` (7.697117470131... for
    256 layers), so that all layers have the same area to rounding."""
    def top(r):  # f(x[layers - 1]) + v / x[layers - 1] - 1: zero when the top layer closes
        v = math.exp(-r) * (r + 1.0)
        x = r
        for _ in range(layers - 2):
            y = math.exp(-x) + v / x
            if y >= 1.0:  # a layer reached f = 1 too early: v too large, r too small
                return 1.0
            x = -math.log(y)
        return math.exp(-x) + v / x - 1.0

    r = optimize.brentq(top, 6.0, 9.0, xtol=1e-15, rtol=4 * np.finfo(float).eps)
    v = math.exp(-r) * (r + 1.0)
    x = np.zeros(layers + 1)
    x[0] = v / math.exp(-r)
    x[1] = r
    for i in range(1, layers - 1):
        x[i + 1] = -math.log(math.exp(-x[i]) + v / x[i])
    x[layers] = 0.0
    return x, np.exp(-x)


_ZIG_X, _ZIG_F = _ziggurat_exp_tables()
#: ``x[i] 2**-53``: a 53-bit integer times it is uniform on ``[0, x[i])``
_ZIG_XS = _ZIG_X * 2.0**-53
_ZIG_R = float(_ZIG_X[1])
_U56 = np.uint64(56)
_U3 = np.uint64(3)
_MASK53 = np.uint64(2**53 - 1)
_TWO53 = np.int64(2**53)
_REFINE = np.int64(2**20)
_TWO_M53 = 2.0**-53
_TWO_PI = 2.0 * math.pi
_U11 = np.uint64(11)


@njit(cache=True, inline="always")
def open_unit(s0, s1, s2, s3):
    """A uniform on ``(0, 1]``: ``j 2**-53`` for ``j`` uniform on ``1..2**53``, and where
    ``j <= 2**20`` (probability ``2**-33``) ``(j - u) 2**-53`` with ``u`` a second 53-bit
    uniform, so that the values near 0, which ``-log U`` and the inverse transforms of heavy
    tails turn into the largest sizes, are resolved to ``2**-106``. Returns
    ``(u, s0, s1, s2, s3)``."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    j = _TWO53 - np.int64(r >> _U11)
    if j <= _REFINE:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        return (j - u01(r)) * _TWO_M53, s0, s1, s2, s3
    return j * _TWO_M53, s0, s1, s2, s3


@njit(cache=True, inline="always")
def exp_draw(s0, s1, s2, s3):
    """An Exp(1) draw by the ziggurat (:func:`_ziggurat_exp_tables`): one raw draw picks the
    layer (its top 8 bits) and a 53-bit uniform ``j`` (bits 3..55; the weak lowest bits of
    xoshiro256+ are not used), ``x = j x[i] 2**-53``. Below ``x[i + 1]`` (98.9% of draws) ``x``
    is returned; else layer 0 returns ``r - log U`` (the tail, memoryless; ``U`` by
    :func:`open_unit`, so it reaches ``r + 73``), and a layer ``i >= 1`` keeps ``x`` when a
    uniform height in ``[f(x[i]), f(x[i + 1])]`` falls below ``exp(-x)``, else starts over.
    Exact in law up to the 53-bit grid of ``x`` in each layer; no logarithm on the fast path.
    Returns ``(x, s0, s1, s2, s3)``."""
    while True:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        i = np.int64(r >> _U56)
        x = np.int64((r >> _U3) & _MASK53) * _ZIG_XS[i]
        if x < _ZIG_X[i + 1]:
            return x, s0, s1, s2, s3
        if i == 0:
            u, s0, s1, s2, s3 = open_unit(s0, s1, s2, s3)
            return _ZIG_R - math.log(u), s0, s1, s2, s3
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        if _ZIG_F[i] + u01(r) * (_ZIG_F[i + 1] - _ZIG_F[i]) < math.exp(-x):
            return x, s0, s1, s2, s3


@njit(cache=True, inline="always")
def draw_size(code, params, s0, s1, s2, s3):
    """One size of the law ``code`` with parameters ``params`` (:meth:`ServiceLaw.params`):
    returns ``(size, s0, s1, s2, s3)``. With ``code`` a compile-time constant (a kernel's
    closure variable) the untaken branches compile away."""
    if code == EXPONENTIAL:
        return exp_draw(s0, s1, s2, s3)
    if code == DETERMINISTIC:
        return 1.0, s0, s1, s2, s3
    if code == ERLANG:
        k = np.int64(params[0])
        acc = 0.0
        for _ in range(k):
            e, s0, s1, s2, s3 = exp_draw(s0, s1, s2, s3)
            acc += e
        return acc / k, s0, s1, s2, s3
    if code == HYPEREXPONENTIAL:  # params: p1, mu1, mu2
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        rate = params[1] if u01(r) < params[0] else params[2]
        e, s0, s1, s2, s3 = exp_draw(s0, s1, s2, s3)
        return e / rate, s0, s1, s2, s3
    if code == LOGNORMAL:  # params: m, sigma; Box-Muller, one normal of the pair
        u, s0, s1, s2, s3 = open_unit(s0, s1, s2, s3)
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        z = math.sqrt(-2.0 * math.log(u)) * math.cos(_TWO_PI * u01(r))
        return math.exp(params[0] + params[1] * z), s0, s1, s2, s3
    # BOUNDED_PARETO, params: L, eps = (L/H)^a, -1/a, H; inverse transform of the ccdf
    u, s0, s1, s2, s3 = open_unit(s0, s1, s2, s3)
    x = params[0] * math.exp(params[2] * math.log(params[1] + (1.0 - params[1]) * u))
    return min(max(x, params[0]), params[3]), s0, s1, s2, s3


@njit(cache=True)
def _fill_sizes(code, params, out, state):
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for i in range(out.size):
        out[i], s0, s1, s2, s3 = draw_size(code, params, s0, s1, s2, s3)
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3


def sample(law: ServiceLaw, size: int, seed: int = 0) -> np.ndarray:
    """``size`` iid sizes of ``law`` drawn by the compiled sampler :func:`draw_size` from the
    xoshiro256+ stream of ``seed`` (:func:`sim.core.rng.seed_state`): what a kernel draws."""
    from sim.core.rng import seed_state

    if not is_integral(size) or size < 0:
        raise ValueError(f"size={size!r} must be an integer >= 0")
    out = np.empty(int(size))
    _fill_sizes(law.code, law.params(), out, seed_state(seed))
    return out
