r"""Lu et al.'s large-system approximation of Join-Idle-Queue (Y. Lu, Q. Xie, G. Kliot, A. Geller,
J. R. Larus, A. Greenberg, "Join-Idle-Queue: a novel load balancing algorithm for dynamically
scalable web services", Performance Evaluation 68(11):1056-1071, 2011).

RECONSTRUCTED, NOT VERIFIED against the paper: its Section 4 could not be reached (the searches
of this project find only its first page). The formulas are those of the project's research note
(recalled, then checked for internal consistency); docs/jiq.md says so too. Wang, Feng & Cheng
confirm assumption (a) below and call [6]'s analysis a "reduced load" one.

Setting: ``N`` servers, ``N / r`` dispatchers (I-queues), Poisson arrivals of rate ``lam N``
spread evenly, Exp(1) service (mean 1; :func:`lu_mean_wait` takes any second moment). Assumptions:

(a) every server listed in an I-queue is idle;
(b) each I-queue is a queue of its own: idle servers arrive at it as a Poisson stream and each
    task at its dispatcher (rate ``lam r``) takes one; JIQ-Random (an idle server joins a uniform
    I-queue): an M/M/1 queue; JIQ-SQ(d) (it joins the shortest of ``d`` sampled I-queues): the
    supermarket model's occupancy ``P(size >= i) = rho^((d^i - 1)/(d - 1))``;
(c) the ``N (1 - lam)`` idle servers make the mean I-queue length ``r (1 - lam)``;
(d) a server receives the "random" tasks (those of dispatchers with an empty I-queue, a
    fraction ``1 - rho``) as a Poisson stream of rate ``lam (1 - rho)``; a task from an I-queue
    only reaches an idle server and starts a busy period. So a server is an M/G/1 queue at the
    reduced load ``a = lam (1 - rho)``.

So ``rho`` (the fraction of non-empty I-queues) solves

    sum_{i >= 1} rho^((d^i - 1)/(d - 1)) = r (1 - lam)      (d = 1: rho / (1 - rho) = r (1 - lam))

(the left side is increasing in ``rho`` on (0, 1): one root), and

    E[W] = a E[S^2] / (2 (1 - a)),   E[T] = 1 + E[W] = 1 / (1 - lam (1 - rho))  (Exp(1) service).

For ``d = 1``, ``rho = r (1 - lam) / (1 + r (1 - lam))`` in closed form. Limits: ``lam -> 0`` gives
``a -> 0`` and ``T -> 1``; ``r -> infinity`` at fixed ``lam < 1`` gives ``rho -> 1`` and ``T -> 1``.

In the project's policies Lu's JIQ-Random approximates ``jiq_original`` (no deletes; Lu's own
model) and ``jiq`` (with deletes, where assumption (a) holds exactly), JIQ-SQ(d) ``jiq_sqd``.
For the mean field of the same system (``sim.jiq.meanfield``) ``1 - rho`` plays the part of
``p0``: both give ``T = 1 / (1 - lam p0)`` for ``jiq``, with ``p0`` from the I-queue law of the
server chain instead of assumption (d).

Pure numerics (numpy, scipy); ``ValueError`` naming the parameter and its value on bad input.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from scipy.optimize import brentq

from sim.core.results import is_number
from sim.jiq import MODEL

__all__ = ["LuApproximation", "lu_approximation", "lu_occupied_fraction", "lu_mean_response",
           "lu_mean_wait", "lu_occupancy_sum"]

#: the smallest u = -log(rho) the root search tries (about the smallest positive double): below
#: it, 1 - rho is not representable and is returned as 0 (rho = 1, T = 1 to double precision)
_LOG_U_MIN = -744.0


class LuApproximation(NamedTuple):
    """Lu et al.'s approximation at one point (Exp(1) service for ``mean_response``)."""

    rho: float  #: fraction of non-empty I-queues
    one_minus_rho: float  #: ``1 - rho``, computed without cancellation (rho may round to 1)
    reduced_load: float  #: ``a = lam (1 - rho)``, the rate of random tasks per server
    mean_response: float  #: ``1 / (1 - a)``


def _check_lam(lam) -> float:
    return MODEL.param("lam").check("lam", lam)


def _check_r(r) -> float:
    return MODEL.param("r").check("r", r)


def _check_d(d) -> int:
    return MODEL.param("d").check("d", d)


def _log_exponent(i: int, d: int) -> float:
    """``log e_i`` with ``e_i = (d^i - 1)/(d - 1)`` (``= i`` for d = 1), in logs so that no
    ``d**i`` overflows: ``log e_i = i log d - log(d - 1) + log1p(-d^-i)``."""
    if d == 1:
        return math.log(i)
    return i * math.log(d) - math.log(d - 1) + math.log1p(-math.exp(-i * math.log(d)))


def lu_occupancy_sum(u: float, d: int) -> float:
    """``sum_{i >= 1} exp(-u e_i)`` = the mean I-queue length of the approximation at
    ``rho = exp(-u)`` (``u > 0``); the terms are summed until ``u e_i > 750`` (each further term is
    below the smallest double)."""
    if not (is_number(u) and math.isfinite(float(u)) and float(u) > 0.0):
        raise ValueError(f"u={u!r} must be a finite number > 0 (u = -log rho)")
    d = _check_d(d)
    if d == 1:  # geometric: rho / (1 - rho), computed as 1 / expm1(u)
        return 1.0 / math.expm1(float(u))
    log_u, total, i = math.log(float(u)), 0.0, 1
    while True:
        x = math.exp(log_u + _log_exponent(i, d))  # u e_i
        if x > 750.0:
            return total
        total += math.exp(-x)
        i += 1


def _solve_u(target: float, d: int) -> float:
    """``u = -log rho`` with ``lu_occupancy_sum(u, d) = target``; 0 when ``u`` would be below
    ``exp(_LOG_U_MIN)`` (then 1 - rho < 1e-323)."""
    if lu_occupancy_sum(math.exp(_LOG_U_MIN), d) <= target:
        return 0.0
    # upper end: the sum is at most sum_i exp(-u i) = 1 / expm1(u) (e_i >= i), which is below
    # the target at u = log1p(1 / target) + 1
    hi = math.log(math.log1p(1.0 / target) + 1.0)
    return math.exp(brentq(lambda x: lu_occupancy_sum(math.exp(x), d) - target, _LOG_U_MIN, hi,
                           xtol=1e-14, rtol=4 * 2.220446049250313e-16, maxiter=500))


def lu_approximation(lam, r, d=1) -> LuApproximation:
    """Lu et al.'s approximation (module docstring) at load ``lam`` (``0 <= lam < 1``), ``r``
    servers per dispatcher (``> 0``) and ``d`` I-queues sampled per join (``d = 1``: JIQ-Random,
    in closed form; ``d >= 2``: JIQ-SQ(d), by ``brentq`` on ``log(-log rho)``)."""
    lam, r, d = _check_lam(lam), _check_r(r), _check_d(d)
    target = r * (1.0 - lam)  # mean I-queue length, assumption (c)
    if d == 1:
        one_minus_rho = 1.0 / (1.0 + target)
        rho = target / (1.0 + target)
    else:
        u = _solve_u(target, d)
        one_minus_rho = -math.expm1(-u)
        rho = math.exp(-u)
    a = lam * one_minus_rho
    return LuApproximation(rho, one_minus_rho, a, 1.0 / (1.0 - a))


def lu_occupied_fraction(lam, r, d=1) -> float:
    """``rho``, the fraction of non-empty I-queues of Lu et al.'s approximation."""
    return lu_approximation(lam, r, d).rho


def lu_mean_response(lam, r, d=1) -> float:
    """Mean response time ``1 / (1 - lam (1 - rho))`` (Exp(1) service)."""
    return lu_approximation(lam, r, d).mean_response


def lu_mean_wait(lam, r, d=1, second_moment=2.0) -> float:
    """Mean wait ``a E[S^2] / (2 (1 - a))`` of the M/G/1 queue at the reduced load ``a``, for a
    service time of mean 1 and second moment ``second_moment`` (>= 1; 2 is Exp(1))."""
    if not is_number(second_moment) or not math.isfinite(float(second_moment)) or float(second_moment) < 1.0:
        raise ValueError(f"second_moment={second_moment!r} must be a finite number >= 1 "
                         "(E[S^2] of a service time of mean 1)")
    a = lu_approximation(lam, r, d).reduced_load
    return a * float(second_moment) / (2.0 * (1.0 - a))
