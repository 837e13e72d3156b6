"""LL(d), least-loaded of ``d`` sampled servers, with any size law: the workload fixed point.

In the limit N -> infinity (Hellemans & Van Houdt, "On the power-of-d-choices with least
loaded server selection", Proc. ACM Meas. Anal. Comput. Syst. 2(2), 2018) the workloads of any
finite set of servers become independent, and the workload ``U`` of one server is that of a
single queue (the cavity) whose work falls at rate 1 and which receives a job of size ``S``
(the law, mean 1) whenever it is the least loaded of the ``d`` servers an arrival samples.
docs/service.md ("Limits") derives by level crossing that the ccdf ``F(w) = P(U > w)`` solves

    F(w) = lam * ( int_w^inf G(v) dv + int_0^w F(u)^d G(w - u) du ),        w >= 0,

``G`` the size law's ccdf: a nonlinear Volterra equation of the second kind, equivalent to
Hellemans & Van Houdt's integro-differential equation ``F'(w) = -lam (G(w) - F(w)^d +
int_0^w F(u)^d g(w - u) du)`` with ``F(0) = lam``. An arriving job waits ``W = min`` of ``d``
independent workloads, ``P(W > w) = F(w)^d``, so ``E[W] = int_0^inf F^d``, ``E[W^2] = 2 int_0^inf
w F^d`` and ``P(W > 0) = lam^d``; its response is ``W + S`` with ``S`` independent of ``W``.

Numerics (:func:`workload_fixed_point`): a uniform grid ``w_n = n h`` (``1 / h`` an integer, so
that a deterministic size's jump at 1 falls on the grid), the convolution by product
integration (``F(w_n - v)^d`` linear on each cell ``[k h, (k + 1) h]`` of ``v``, integrated
against ``G`` exactly up to Gauss-Legendre quadrature of ``G`` on the cell, split at the law's
breakpoints), ``int_w^inf G`` from the same cell integrals, and each ``F(w_n)`` the root of a
scalar equation (Newton; the new point's weight is ``lam h / 2``). The march stops where ``F``
and ``lam int_w^inf G`` are both below ``tol``. The scheme is second order in ``h``; the result
is Richardson-extrapolated from ``h`` and ``h / 2`` and the difference of the two is reported as
``num_error``. Cost ``O(n^2)`` in the grid points (numba).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from scipy import integrate

from sim.core.service import BoundedPareto, Deterministic, ServiceLaw

__all__ = ["LLFixedPoint", "workload_fixed_point", "ll_exponential_ccdf", "check_reach"]

#: default grid step (``1 / h`` must be an integer)
H_DEFAULT = 1.0 / 128
#: the march stops where the workload ccdf and lam times the size's integrated tail are below this
TOL = 1e-13
#: the most grid points of one solve (at step h / 2)
MAX_POINTS = 400_000
#: Gauss-Legendre nodes per cell for the integrals of the size ccdf
_NODES = 8


class LLFixedPoint(NamedTuple):
    """The LL(d) limit for one law, ``lam`` and ``d`` (times in mean sizes)."""

    mean_wait: float  #: E[W] = int F^d
    mean_wait_sq: float  #: E[W^2] = 2 int w F^d
    prob_wait: float  #: lam^d
    mean_response: float  #: 1 + E[W]
    mean_response_sq: float  #: E[W^2] + 2 E[W] + E[S^2]
    mean_workload: float  #: E[U] = int F
    num_error: float  #: |Richardson value - value at h / 2| of mean_wait
    w: np.ndarray  #: the grid at step h / 2
    ccdf: np.ndarray  #: F on that grid


def ll_exponential_ccdf(w, lam: float, d: int):
    """The closed form for exponential sizes (Hellemans & Van Houdt): with ``G(w) = e^-w`` the
    equation reduces to ``F' = -F + lam F^d``, ``F(0) = lam``, whose solution is ``F(w) = (lam +
    (lam^(1 - d) - lam) e^((d - 1) w))^(1 / (1 - d))`` (``lam e^(-(1 - lam) w)`` at ``d = 1``)."""
    w = np.asarray(w, dtype=np.float64)
    if d == 1:
        return lam * np.exp(-(1.0 - lam) * w)
    # the same as e^-w (lam e^(-(d - 1) w) + lam^(1 - d) - lam)^(1 / (1 - d)), which does not
    # overflow at large w
    return np.exp(-w) * (lam * np.exp(-(d - 1) * w) + lam ** (1 - d) - lam) ** (1.0 / (1 - d))


def _breakpoints(law: ServiceLaw) -> list[float]:
    """Where the law's ccdf has a jump or a kink (the cell integrals are split there)."""
    if isinstance(law, Deterministic):
        return [1.0]
    if isinstance(law, BoundedPareto):
        return [law.lower, law.upper]
    return []


def _cell_weights(law: ServiceLaw, h: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``W0_k = int G(v) (1 - t) dv`` and ``W1_k = int G(v) t dv`` over the cells ``[k h, (k +
    1) h]``, ``t = v / h - k``, by Gauss-Legendre with :data:`_NODES` nodes, a cell that holds a
    breakpoint of the law split there."""
    z, wq = np.polynomial.legendre.leggauss(_NODES)
    tq = 0.5 * (z + 1.0)
    wq = 0.5 * wq
    k = np.arange(n)[:, None]
    vals = law.ccdf((k + tq[None, :]) * h)
    w0 = h * (vals * (1.0 - tq) * wq).sum(axis=1)
    w1 = h * (vals * tq * wq).sum(axis=1)
    for b in _breakpoints(law):
        kb = int(math.floor(b / h))
        tb = b / h - kb
        if not 0 <= kb < n or tb <= 1e-12 or tb >= 1 - 1e-12:
            continue  # outside the grid, or on a cell boundary already
        a0 = a1 = 0.0
        for lo, hi in ((0.0, tb), (tb, 1.0)):
            t = lo + (hi - lo) * tq
            g = law.ccdf((kb + t) * h)
            a0 += h * (hi - lo) * float((g * (1.0 - t) * wq).sum())
            a1 += h * (hi - lo) * float((g * t * wq).sum())
        w0[kb], w1[kb] = a0, a1
    return w0, w1


def _tail_integrals(law: ServiceLaw, w0: np.ndarray, w1: np.ndarray, h: float) -> np.ndarray:
    """``T_n = int_{n h}^inf G`` for ``n = 0 .. len``: ``int_{top}^inf G`` by quadrature plus the
    cell integrals summed from the top down (no cancellation where ``T`` is small)."""
    top = w0.size * h
    far = 0.0 if isinstance(law, Deterministic) and top >= 1.0 else float(
        integrate.quad(lambda v: float(law.ccdf(v)), top, np.inf, limit=400, epsabs=1e-17,
                       epsrel=1e-12)[0])
    if isinstance(law, BoundedPareto) and top >= law.upper:
        far = 0.0
    cells = (w0 + w1)[::-1]
    return np.concatenate((np.cumsum(cells)[::-1] + far, [far]))


@njit(cache=True)
def _march(lam, d, w0, w1, tail, tol, f):
    """Fill ``f[n] = F(n h)`` until ``f`` and ``lam * tail`` are below ``tol``; returns the
    number of points filled."""
    n_max = f.size
    fd = np.empty(n_max)
    f[0] = lam * tail[0]
    fd[0] = f[0] ** d
    a = lam * w0[0]
    for n in range(1, n_max):
        conv = w1[0] * fd[n - 1]
        for k in range(1, n):
            conv += w0[k] * fd[n - k] + w1[k] * fd[n - k - 1]
        c = lam * (tail[n] + conv)
        x = c
        for _ in range(30):  # Newton on x = c + a x^d; a d x^(d-1) <= lam h d / 2 << 1
            g = x - c - a * x ** d
            x_new = x - g / (1.0 - a * d * x ** (d - 1))
            if abs(x_new - x) <= 1e-16 * abs(x_new):
                x = x_new
                break
            x = x_new
        f[n] = x
        fd[n] = x ** d
        if x < tol and lam * tail[n] < tol:
            return n + 1
    return n_max


def _trapezoid(y: np.ndarray, h: float) -> float:
    return float(h * (y.sum() - 0.5 * (y[0] + y[-1])))


def _solve(law: ServiceLaw, lam: float, d: int, h: float, w_top: float, tol: float):
    n = int(round(w_top / h)) + 1
    if n > MAX_POINTS:
        raise ValueError(f"the LL(d) workload fixed point needs {n} grid points at h={h:g} "
                         f"(more than {MAX_POINTS}): the law's tail is too long for this solver")
    w0, w1 = _cell_weights(law, h, n)
    tail = _tail_integrals(law, w0, w1, h)
    f = np.zeros(n)
    used = _march(lam, d, w0, w1, tail, tol, f)
    if used == n and (f[-1] >= tol or lam * tail[n - 1] >= tol):
        return None
    w = h * np.arange(used)
    f = f[:used]
    fd = f**d
    return (_trapezoid(fd, h), 2.0 * _trapezoid(w * fd, h), _trapezoid(f, h), w, f)


def _first_top(law: ServiceLaw) -> float:
    return law.quantile_upper(1e-6) + 16.0


def check_reach(law: ServiceLaw, lam: float, h: float = H_DEFAULT, tol: float = TOL) -> None:
    """``ValueError`` in one line if :func:`workload_fixed_point` must run past
    :data:`MAX_POINTS` for ``law`` at ``lam``: its march cannot stop before ``lam int_w^inf G``
    is below ``tol``, so the grid it reaches (the first ``1 - 1e-6`` quantile plus 16, doubled)
    is at least the first such length where that holds, at step ``h / 2`` (a law of bounded
    support has no tail past it). A necessary condition only (the ccdf ``F`` must fall below
    ``tol`` too), cheap enough for the plan."""
    w_top = _first_top(law)
    while True:
        n = int(round(w_top / (h / 2))) + 1
        if n > MAX_POINTS:
            raise ValueError(f"service={law.describe()} at lam={lam!r}: the LL(d) "
                             f"workload fixed point would need more than {MAX_POINTS} grid points "
                             "(the law's tail is too long for this solver; docs/service.md)")
        tail = integrate.quad(lambda v: float(law.ccdf(v)), w_top, np.inf, limit=400,
                              epsabs=1e-17, epsrel=1e-10)[0]
        if lam * tail < tol:
            return
        w_top *= 2.0


def workload_fixed_point(law: ServiceLaw, lam: float, d: int, *, h: float = H_DEFAULT,
                         tol: float = TOL) -> LLFixedPoint:
    """The LL(d) workload fixed point and its waiting and response moments (module docstring).

    ``law``: a :mod:`sim.core.service` law (mean 1); ``0 < lam < 1``; ``d >= 1`` (``d = 1`` is
    random routing: M/G/1, Pollaczek-Khinchine); ``h``: the grid step, ``1 / h`` an integer.
    The grid's length starts at the size law's ``1 - 1e-6`` quantile plus 16 and doubles until
    the march ends inside it."""
    if not isinstance(law, ServiceLaw):
        raise ValueError(f"law={law!r} must be a law of sim.core.service.service_law")
    if not isinstance(lam, (int, float)) or not 0.0 < float(lam) < 1.0:
        raise ValueError(f"lam={lam!r} must be a number with 0 < lam < 1")
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise ValueError(f"d={d!r} must be an integer >= 1")
    inv = 1.0 / h
    if not h > 0 or abs(inv - round(inv)) > 1e-9:
        raise ValueError(f"h={h!r}: 1 / h must be a positive integer")
    lam = float(lam)
    w_top = _first_top(law)
    while True:
        coarse = _solve(law, lam, d, h, w_top, tol)
        fine = _solve(law, lam, d, h / 2, w_top, tol) if coarse is not None else None
        if fine is not None:
            break
        w_top *= 2.0
    rich = [(4.0 * b - a) / 3.0 for a, b in zip(coarse[:3], fine[:3])]
    ew, ew2, eu = rich
    return LLFixedPoint(mean_wait=ew, mean_wait_sq=ew2, prob_wait=lam**d, mean_response=1.0 + ew,
                        mean_response_sq=ew2 + 2.0 * ew + law.moment(2), mean_workload=eu,
                        num_error=abs(ew - fine[0]), w=fine[3], ccdf=fine[4])
