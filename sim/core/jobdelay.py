"""Expected delay of a parallel job from the queue positions its tasks take.

With FIFO queues and Exp(1) service, a task that joins a queue at position ``p`` (``p = 1``:
it starts service at once) completes after ``Gamma(p, 1)`` time, and the queues are
independent. A job whose last tasks in its distinct queues sit at positions ``p_1..p_m`` is
done after ``max_i Gamma(p_i, 1)``, so given the positions

    E[T | positions] = integral_0^inf (1 - prod_i F_{p_i}(t)) dt,
    F_p(t) = P(Gamma(p, 1) <= t) = 1 - exp(-t) sum_{j<p} t^j / j!.

(Rao-Blackwell: the occupancy engine averages this over arrivals instead of sampling delays.)
Positions enter only through ``counts[p]`` = number of distinct queues whose job-last task is
at position ``p``. When every count is at position 1 the value is the harmonic number
``H_m``. Otherwise the integral is computed by composite Gauss-Legendre quadrature on unit
panels up to where the integrand is below 1e-16 (absolute error below about 1e-12, checked
against the closed forms in tests/core/test_jobdelay.py).

For high positions (jobs left at the end of a run under heavy load)
:func:`expected_max_gamma_wide` gives the same integral on panels of width ~sqrt(t) around
where the integrand varies; its ``log prod_i F_{p_i}(t)`` is :func:`log_cdf_product` (one sweep
of the Poisson pmf over the sorted shapes), which the response-time recording of
:mod:`sim.core.responses` uses too.

Per job in a simulation loop (where signatures rarely repeat, so a memo does not help):
:func:`expected_max_gamma_table` on one grid shared by every job, :func:`delay_table`. The
table holds ``log F_p(t_i)`` at every node ``t_i`` of a fixed composite Gauss-Legendre grid
(panels of width ``max(3, 1.5 sqrt(t))``, 20 nodes each, positions ``p <= 64``), and at the
panel bounds ``a_j`` also ``S_p(a_j) = 1 - F_p(a_j)`` and ``int_{a_j}^inf S_p``. A job with
counts ``c_p`` at its ``D`` distinct positions then costs ``D`` multiply-adds and one ``expm1``
per node of the panels where its integrand is strictly between 0 and 1:

- below: the integrand is ``1 - exp(sum_p c_p log F_p)``, which rounds to 1 where the sum is
  below -40; the first panel where it is not is found by bisection on the bounds, and the
  panels before it contribute their length ``a_j``;
- above: from a bound ``a_j`` on, ``x(t) = sum_p c_p S_p(t)`` bounds the integrand and exceeds
  it by at most ``x**2 / 2`` (Bonferroni: the queues are independent), so the rest of the
  integral is ``sum_p c_p int_{a_j}^inf S_p`` to within ``x(a_j) / 2`` times that (``x``
  decreases): the panels stop once that bound is below 1e-14.

About 100 nodes for a batch-sampling job at N = 10**7 (positions 2-8, D = 7): 1 us against
about 100 us for :func:`expected_max_gamma`. Agreement with mpmath and with
:func:`expected_max_gamma` to about 1e-12 absolute (tests/core/test_jobdelay.py). Jobs with a
position above the table's, or whose integrand outlasts its grid, return -1 (the caller then
uses :func:`expected_max_gamma`).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from numba import njit

_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = 0.5 * (_GL_X + 1.0)  # on [0, 1]
_GL_W = 0.5 * _GL_W


@njit(cache=True)
def harmonic(m):
    """H_m = 1 + 1/2 + ... + 1/m (H_0 = 0): E[max of m i.i.d. Exp(1)]."""
    h = 0.0
    for j in range(1, m + 1):
        h += 1.0 / j
    return h


@njit(cache=True)
def _log_cdf_gamma_int(p, t):
    """log P(Gamma(p, 1) <= t) for integer p >= 1, t > 0, stable for small and large t."""
    # survival = exp(-t) * sum_{j<p} t^j/j!; use log-sum for the terms
    term = 1.0
    s = 1.0
    for j in range(1, p):
        term *= t / j
        s += term
    surv = math.exp(-t) * s
    if surv < 0.5:
        return math.log1p(-surv)
    # small t: the cdf is sum_{j>=p} e^{-t} t^j / j!, compute directly
    term = math.exp(-t)
    for j in range(1, p + 1):
        term *= t / j
    c = term
    if c == 0.0:  # underflow (large p, small t): the cdf is below 1e-308, log is -inf
        return -math.inf
    j = p
    while True:
        j += 1
        term *= t / j
        c += term
        if term < 1e-18 * c or term == 0.0:  # (1e-18 * c underflows when c is subnormal)
            break
    return math.log(c)


@njit(cache=True)
def expected_max_gamma(counts, gl_x, gl_w):
    """E[max] over independent ``Gamma(p, 1)``, ``counts[p]`` of them at each ``p >= 1``.

    ``counts[0]`` is ignored. ``gl_x``, ``gl_w``: Gauss-Legendre nodes and weights on [0, 1]
    (pass :data:`GL_X`, :data:`GL_W`; numba cannot close over module arrays cheaply).
    """
    top = 0
    total = 0
    for p in range(1, counts.size):
        if counts[p] > 0:
            top = p
            total += counts[p]
    if total == 0:
        return 0.0
    if top == 1:
        return harmonic(counts[1])
    # integrand 1 - prod F below 1e-16 beyond t_end: sum_p counts[p] * P(Gamma(p) > t) < 1e-16
    t_end = top + 10.0 + 10.0 * math.sqrt(top) + math.log(total)
    while True:
        tail = 0.0
        for p in range(1, top + 1):
            if counts[p] > 0:
                tail += counts[p] * -math.expm1(_log_cdf_gamma_int(p, t_end))
        if tail < 1e-17:
            break
        t_end += 5.0
    n_panels = int(math.ceil(t_end))
    acc = 0.0
    for k in range(n_panels):
        for i in range(gl_x.size):
            t = k + gl_x[i]
            if t == 0.0:
                continue
            logp = 0.0
            for p in range(1, top + 1):
                if counts[p] > 0:
                    logp += counts[p] * _log_cdf_gamma_int(p, t)
            acc += gl_w[i] * -math.expm1(logp)
    return acc


@njit(cache=True)
def log_cdf_product(ps, cs, nd, x):
    """``(sum_i cs[i] * log P(Gamma(ps[i], 1) <= x), sum_i cs[i] * P(Gamma(ps[i], 1) > x))``
    over the ``nd`` sorted distinct integer shapes ``ps[:nd]``, with one upward sweep of the
    Poisson(x) pmf: ``P(Gamma(p, 1) > x) = P(Poisson(x) < p) = S_p``. The sweep starts 12
    standard deviations (and 20) below the mean, where the left tail is below e**-70:
    O(sqrt(x)) per shape range instead of O(p) per shape. The log is ``-inf`` once some
    ``S_p`` reaches 1 (the sweep goes on for the second sum)."""
    if x <= 0.0:
        return -np.inf, float(cs[:nd].sum())
    j0 = max(0, int(x - 12.0 * math.sqrt(x) - 20.0))
    pmf = math.exp(-x + j0 * math.log(x) - math.lgamma(j0 + 1.0))
    surv = 0.0  # sum of pmf_j, j0 <= j < current j
    j = j0
    logp = 0.0
    tail = 0.0
    for i in range(nd):
        p = ps[i]
        if p <= j0:
            continue  # S_p below e**-70: log F = 0
        while j < p:
            surv += pmf
            pmf *= x / (j + 1)
            j += 1
        tail += cs[i] * surv
        if surv >= 1.0:
            logp = -np.inf
        else:
            logp += cs[i] * math.log1p(-surv)
    return logp, tail


@njit(cache=True)
def _gamma_upper_below(p, x):
    """P(Poisson(x) >= p) = P(Gamma(p, 1) <= x) for x < p, summed directly (no cancellation)."""
    term = math.exp(-x + p * math.log(x) - math.lgamma(p + 1.0)) if x > 0.0 else 0.0
    total = term
    j = p
    while term > 1e-20 * total and term > 0.0:
        j += 1
        term *= x / j
        total += term
    return total


@njit(cache=True)
def expected_max_gamma_wide(ps, cs, gl_x, gl_w):
    """E[max] over independent Gamma(ps[i], 1), ``cs[i]`` of each (``ps`` sorted, distinct,
    >= 1): the integral of ``1 - prod_i F_{p_i}(t)``, as :func:`expected_max_gamma`
    but fast for high positions (jobs at the end of a run under heavy load). The integrand is
    1 up to ``t_lo`` (where ``F_top < 1e-17``) and below 1e-17 beyond ``t_hi``; in between it
    varies on the scale sqrt(t) (and is analytic), so 16-point Gauss-Legendre panels of width
    max(3, 1.5 sqrt(t)) suffice: relative agreement with :func:`expected_max_gamma`
    about 1e-14 (checked in tests), at ~40 us for 16 queues with positions up to 80."""
    top = ps[ps.size - 1]
    step = 2.0 * math.sqrt(top) + 1.0  # bracket the window in steps of ~2 standard deviations
    t_hi = float(top)
    while log_cdf_product(ps, cs, ps.size, t_hi)[1] >= 1e-17:
        t_hi += step
    t_lo = float(top)
    while t_lo > 0.0 and _gamma_upper_below(top, t_lo) >= 1e-17:
        t_lo = max(0.0, t_lo - step)
    acc = t_lo  # integrand 1 on [0, t_lo]
    t = t_lo
    while t < t_hi:
        h = min(max(3.0, 1.5 * math.sqrt(t)), t_hi - t)
        for i in range(gl_x.size):
            logp = log_cdf_product(ps, cs, ps.size, t + h * gl_x[i])[0]
            acc += h * gl_w[i] * -math.expm1(logp)
        t += h
    return acc



GL_X = _GL_X.copy()
GL_W = _GL_W.copy()


def _position_counts(positions) -> np.ndarray | None:
    """``counts[p]`` = how many of ``positions`` (one per distinct queue) are ``p``; None for
    no position (a job of no task, delay 0)."""
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size == 0:
        return None
    if pos.min() < 1:
        raise ValueError(f"positions={positions!r} must be >= 1")
    return np.bincount(pos)


def expected_job_delay(positions) -> float:
    """E[max_i Gamma(p_i, 1)] for a list of positions (one per distinct queue)."""
    counts = _position_counts(positions)
    return 0.0 if counts is None else float(expected_max_gamma(counts, GL_X, GL_W))


# ------------------------------------------------------------------------------------------
# one shared grid for every job (simulation loops)
# ------------------------------------------------------------------------------------------
#: highest position the shared table covers
TABLE_MAX_POS = 64
#: panels of the shared grid: width max(TABLE_H0, TABLE_C * sqrt(t)), TABLE_NODES nodes each
TABLE_H0, TABLE_C, TABLE_NODES = 3.0, 1.5, 20
#: where ``sum_p c_p log F_p(t)`` is below this the integrand is 1 to double precision
TABLE_LOG_ONE = -40.0
#: the neglected second-order term of the upper tail is below this (absolute)
TABLE_TAIL_TOL = 1e-14


class DelayTable(NamedTuple):
    """The shared grid of :func:`expected_max_gamma_table` (see the module docstring).
    ``ps`` and ``cs`` are scratch for a job's distinct positions and counts."""

    bounds: np.ndarray  #: panel bounds a_0 = 0 < a_1 < ... (float64[P + 1])
    weights: np.ndarray  #: quadrature weights of the nodes, panel by panel (float64[P * n])
    log_cdf: np.ndarray  #: log F_p(t_i), node-major (float64[P * n, max_pos + 1])
    log_cdf_b: np.ndarray  #: log F_p(a_j) (float64[P + 1, max_pos + 1])
    surv_b: np.ndarray  #: S_p(a_j) = 1 - F_p(a_j)
    tail_b: np.ndarray  #: int_{a_j}^inf S_p(t) dt = E[(p - Poisson(a_j))^+]
    ps: np.ndarray  #: scratch int64[max_pos + 1]
    cs: np.ndarray  #: scratch float64[max_pos + 1]


@njit(cache=True)
def _fill_table(bounds, nodes, log_cdf, log_cdf_b, surv_b, tail_b):
    max_pos = log_cdf.shape[1] - 1
    for i in range(nodes.size):
        for p in range(1, max_pos + 1):
            log_cdf[i, p] = _log_cdf_gamma_int(p, nodes[i])
    for j in range(bounds.size):
        t = bounds[j]
        for p in range(1, max_pos + 1):
            if t == 0.0:
                log_cdf_b[j, p] = -np.inf
                surv_b[j, p] = 1.0
                tail_b[j, p] = p
                continue
            log_cdf_b[j, p] = _log_cdf_gamma_int(p, t)
            # S_p = sum_{i<p} pois_i(t), int_t^inf S_p = sum_{i<p} (p - i) pois_i(t)
            pm = math.exp(-t)
            sv = 0.0
            tl = 0.0
            for i in range(p):
                sv += pm
                tl += (p - i) * pm
                pm *= t / (i + 1)
            surv_b[j, p] = sv
            tail_b[j, p] = tl


@functools.lru_cache(maxsize=4)
def delay_table(max_pos: int = TABLE_MAX_POS) -> DelayTable:
    """The shared grid for positions up to ``max_pos`` (built once per process, ~5 ms; about
    230 kB at ``max_pos`` = 64). Callers must not modify it (apart from the scratch)."""
    if max_pos < 1:
        raise ValueError(f"max_pos={max_pos!r} must be >= 1")
    # far enough for any job with positions <= max_pos and up to ~10**6 queues to pass the
    # tail test (the grid of expected_max_gamma stops at top + 10 + 10 sqrt(top) + log(total))
    t_max = max_pos + 20.0 * math.sqrt(max_pos) + 60.0
    a = [0.0]
    while a[-1] < t_max:
        a.append(a[-1] + max(TABLE_H0, TABLE_C * math.sqrt(a[-1])))
    bounds = np.array(a)
    x, w = np.polynomial.legendre.leggauss(TABLE_NODES)
    x, w = 0.5 * (x + 1.0), 0.5 * w
    h = np.diff(bounds)
    nodes = (bounds[:-1, None] + h[:, None] * x[None, :]).ravel()
    weights = (h[:, None] * w[None, :]).ravel()
    log_cdf = np.zeros((nodes.size, max_pos + 1))
    shape_b = (bounds.size, max_pos + 1)
    log_cdf_b, surv_b, tail_b = np.zeros(shape_b), np.zeros(shape_b), np.zeros(shape_b)
    _fill_table(bounds, nodes, log_cdf, log_cdf_b, surv_b, tail_b)
    return DelayTable(bounds, weights, log_cdf, log_cdf_b, surv_b, tail_b,
                      np.zeros(max_pos + 1, dtype=np.int64), np.zeros(max_pos + 1))


def empty_delay_table() -> DelayTable:
    """A table of the right types covering no position (for loops that never use one)."""
    z1, z2 = np.zeros(2), np.zeros((2, 1))
    return DelayTable(z1, np.zeros(0), np.zeros((0, 1)), z2, z2, z2,
                      np.zeros(1, dtype=np.int64), np.zeros(1))


@njit(cache=True, inline="always")
def nonzero_counts(counts, top, ps, cs):
    """The positions ``1 <= p <= top`` with ``counts[p] > 0`` into ``ps[:nd]`` and their counts
    into ``cs[:nd]``, in increasing order; returns ``nd``."""
    nd = 0
    for p in range(1, top + 1):
        if counts[p] > 0:
            ps[nd] = p
            cs[nd] = counts[p]
            nd += 1
    return nd


@njit(cache=True)
def expected_max_gamma_table(counts, top, bounds, weights, log_cdf, log_cdf_b, surv_b, tail_b,
                             ps, cs):
    """E[max] over independent ``Gamma(p, 1)``, ``counts[p]`` of them at each ``1 <= p <=
    top`` (``counts[top] > 0``), on the shared grid of :func:`delay_table` (its arrays in
    order): see the module docstring. Returns -1.0 if ``top`` exceeds the table or the
    integrand outlasts the grid (the caller then uses :func:`expected_max_gamma`)."""
    if top >= log_cdf.shape[1]:
        return -1.0
    nd = nonzero_counts(counts, top, ps, cs)
    n_pan = bounds.size - 1
    n_gl = weights.size // n_pan
    # first panel whose upper bound has sum c_p log F_p > TABLE_LOG_ONE (increasing in t)
    lo = 0
    hi = n_pan
    while lo < hi:
        mid = (lo + hi) >> 1
        s = 0.0
        for q in range(nd):
            s += cs[q] * log_cdf_b[mid + 1, ps[q]]
        if s > TABLE_LOG_ONE:
            hi = mid
        else:
            lo = mid + 1
    acc = bounds[lo]  # the integrand is 1 on [0, a_lo]
    for j in range(lo, n_pan):
        x = 0.0
        tail = 0.0
        for q in range(nd):
            x += cs[q] * surv_b[j, ps[q]]
            tail += cs[q] * tail_b[j, ps[q]]
        if 0.5 * x * tail < TABLE_TAIL_TOL:
            return acc + tail
        for i in range(j * n_gl, (j + 1) * n_gl):
            s = 0.0
            for q in range(nd):
                s += cs[q] * log_cdf[i, ps[q]]
            acc += weights[i] * -math.expm1(s)
    return -1.0


def expected_job_delay_table(positions) -> float:
    """:func:`expected_job_delay` on the shared grid (:func:`expected_max_gamma_table`; falls
    back to :func:`expected_max_gamma` where the table does not reach)."""
    counts = _position_counts(positions)
    if counts is None:
        return 0.0
    v = expected_max_gamma_table(counts, counts.size - 1, *delay_table())
    return float(v) if v >= 0.0 else float(expected_max_gamma(counts, GL_X, GL_W))
