"""Mean-field (N -> infinity) limits of single-task dispatching without a buffer: ``random``,
``jsq`` and power-of-d (``pod``), the supermarket ODE and its closed forms (the other laws of
the dispatch model: :mod:`sim.dispatch.meanfield`).

Model: N servers, Exp(1) service, Poisson arrivals of rate ``lam * N``, ``0 <= lam < 1``.
The state is the tail ``s_i`` = fraction of servers with at least ``i`` tasks (``s_0 = 1``).

Power-of-d (the supermarket model; ``d = 1`` is random routing, i.e. independent M/M/1 queues)::

    ds_i/dt = lam * (s_{i-1}**d - s_i**d) - (s_i - s_{i+1}),   i >= 1,

whose unique fixed point in the space of tails with finite mean is
``s_i = lam**((d**i - 1) / (d - 1))`` (``lam**i`` for ``d = 1``), Mitzenmacher (2001),
Vvedenskaya, Dobrushin & Karpelevich (1996).

Join-the-shortest-queue: the limit drift is discontinuous (a job goes to an idle server whenever
one exists), so it is not written as an ODE here; its fixed point is the closed form
``s_1 = lam``, ``s_i = 0`` for ``i >= 2`` (zero queueing delay), which is all the pipeline needs.

Truncation of the ODE
---------------------
The infinite system is cut at a level ``L`` by setting ``s_{L+1} = 0``: tasks that would make a
queue longer than ``L`` are lost.  ``L`` is the smallest level at which the *fixed-point* tail
has ``s_{L+1} <= 1e-16`` (:func:`truncation_level`).  The truncated fixed point then differs from
the infinite one by less than about ``1e-16`` per level (the telescoped balance equation of
level ``i`` is ``lam * s_{i-1}**d - s_i = lam * s_L**d``, against ``0`` without truncation).
A transient that pushes mass above ``L`` (a very full initial state) is distorted by the loss;
pass a larger ``levels`` for such initial states.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.integrate import solve_ivp
from scipy.linalg import solve_banded

from sim.core.responses import Mixture, exact_response_columns
from sim.core.results import exact_row
from sim.core.settings import RunSettings
from sim.dispatch.meanfield._common import CI_METHOD, _check_d, _check_lam, _check_level
from sim.dispatch.policies import policy as policy_record

__all__ = [
    "PodOdeSolution",
    "PodFixedPoint",
    "truncation_level",
    "pod_ode_rhs",
    "pod_ode_jacobian",
    "solve_pod_ode",
    "pod_fixed_point_numeric",
    "fixed_point",
    "initial_tail",
    "pod_mean_response",
    "pod_mean_queue",
    "jsq_fixed_point_tail",
    "jsq_mean_response",
    "run_task",
    "response_law",
]

#: default size of a level that may be neglected
TAIL_EPS = 1e-16


class PodOdeSolution(NamedTuple):
    """Result of :func:`solve_pod_ode`.

    ``tail[k, i - 1]`` is ``s_i`` at time ``t[k]``, for ``i = 1..levels``.
    """

    t: np.ndarray
    tail: np.ndarray
    lam: float
    d: int
    levels: int
    success: bool
    message: str


class PodFixedPoint(NamedTuple):
    """Result of :func:`pod_fixed_point_numeric`: ``tail[i - 1] = s_i``, ``i = 1..levels``."""

    tail: np.ndarray
    max_residual: float  # max_i |drift_i(tail)|
    newton_iterations: int
    levels: int


# ---------------------------------------------------------------------------------------------
# closed forms


def _log_tail_exponents(d: int, max_level: int, log_lam: float) -> np.ndarray:
    """``log s_i = e_i * log(lam)`` with ``e_i = (d**i - 1)/(d - 1)``, as floats, i = 1..max_level.

    ``e_i = d * e_{i-1} + 1`` is built up in floats and stops growing once ``e_i * log(lam)``
    is far below the smallest double (there the tail is 0.0): ``d**i`` itself is never formed,
    so nothing overflows however large ``max_level`` is.
    """
    out = np.full(max_level, -np.inf)
    e = 0.0
    for i in range(max_level):
        e = d * e + 1.0
        x = e * log_lam
        if x < -800.0:  # exp(-800) == 0.0 in double precision; all later levels too
            break
        out[i] = x
    return out


def fixed_point(lam: float, d: int, max_level: int) -> np.ndarray:
    """Closed-form fixed point of power-of-d: ``s_i = lam**((d**i - 1)/(d - 1))``, i = 1..max_level.

    ``d = 1`` gives ``lam**i`` (M/M/1).  Safe for any ``max_level``: once the exponent is huge
    the value is exactly 0.0.  Returns a float array of length ``max_level``.
    """
    lam = _check_lam(lam)
    d = _check_d(d)
    max_level = _check_level("max_level", max_level)
    if lam == 0.0:
        return np.zeros(max_level)
    log_lam = math.log(lam)
    if d == 1:
        return np.exp(log_lam * np.arange(1, max_level + 1, dtype=float))
    return np.exp(_log_tail_exponents(d, max_level, log_lam))


def truncation_level(lam: float, d: int, eps: float = TAIL_EPS) -> int:
    """Smallest ``L >= 1`` such that the fixed-point tail has ``s_{L+1} <= eps``.

    This is the level at which :func:`solve_pod_ode` and :func:`pod_fixed_point_numeric` cut the
    infinite system (``s_{L+1} := 0``).  ``d = 1``: ``L = ceil(log(eps)/log(lam)) - 1``;
    ``d >= 2``: the doubly exponential decay makes ``L`` small (about ``log_d`` of that).
    """
    lam = _check_lam(lam)
    d = _check_d(d)
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps={eps!r} must satisfy 0 < eps < 1")
    if lam == 0.0:
        return 1
    target = math.log(eps) / math.log(lam)  # need exponent of s_{L+1} >= target
    if d == 1:
        return max(1, math.ceil(target - 1e-12) - 1)
    e, level = 0.0, 0
    while True:
        level += 1
        e = d * e + 1.0  # exponent of s_level
        if e >= target:
            return max(1, level - 1)


def pod_mean_response(lam: float, d: int) -> float:
    """Mean response time in the mean-field limit, ``(1/lam) * sum_{i>=1} s_i`` (Little's law).

    ``d = 1`` gives the M/M/1 value ``1/(1 - lam)``; ``lam = 0`` gives 1.0 (service only).
    """
    lam = _check_lam(lam)
    d = _check_d(d)
    if lam == 0.0:
        return 1.0
    if d == 1:
        return 1.0 / (1.0 - lam)
    return pod_mean_queue(lam, d) / lam


def pod_mean_queue(lam: float, d: int) -> float:
    """``sum_{i>=1} s_i`` of the fixed point (the mean queue length per server)."""
    lam = _check_lam(lam)
    d = _check_d(d)
    if lam == 0.0:
        return 0.0
    if d == 1:
        return lam / (1.0 - lam)
    levels = truncation_level(lam, d, eps=1e-300) + 2
    tail = fixed_point(lam, d, levels)
    return float(math.fsum(tail))


def jsq_fixed_point_tail(lam: float, max_level: int) -> np.ndarray:
    """Mean-field fixed point of JSQ: ``s_1 = lam``, ``s_i = 0`` for ``i >= 2``."""
    lam = _check_lam(lam)
    max_level = _check_level("max_level", max_level)
    out = np.zeros(max_level)
    out[0] = lam
    return out


def jsq_mean_response(lam: float) -> float:
    """Mean-field mean response of JSQ: 1 (no job ever waits in the limit)."""
    _check_lam(lam)
    return 1.0


def initial_tail(lam: float, policy: str, d: int, eps: float = 1e-17,
                 max_levels: int = 1 << 20) -> np.ndarray:
    """Mean-field fixed point s_1, s_2, ... (until s_i < eps) of ``random``, ``jsq`` or ``pod``,
    the initial state the agent engines draw their queues from (:func:`sim.core.fifo.draw_initial_queues`).

    pod: s_i = lam**((d**i - 1)/(d - 1)) (d = 1, i.e. random: lam**i); jsq: s_1 = lam, rest 0.
    The values are those of :func:`fixed_point` up to rounding (one ``math.exp`` per level here),
    and the length is where the tail falls below ``eps``, not a given level.
    """
    if lam <= 0.0:
        return np.zeros(0)
    pol = policy_record(policy)
    if pol.probes_all:
        return np.array([lam])
    d = pol.probe_d(d)
    log_lam = math.log(lam)
    out = []
    expo = 1.0  # (d**i - 1) / (d - 1), via expo_{i+1} = d * expo_i + 1
    while len(out) < max_levels:
        x = expo * log_lam
        if x < math.log(eps):
            break
        out.append(math.exp(x))
        expo = d * expo + 1.0
    return np.array(out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the ODE


def pod_ode_rhs(t: float, s: np.ndarray, lam: float, d: int) -> np.ndarray:
    """Drift of the truncated power-of-d system; ``s[i-1] = s_i``, ``s_0 = 1``, ``s_{L+1} = 0``."""
    s = np.asarray(s, dtype=float)
    sd = s**d
    prev = np.empty_like(s)  # s_{i-1}**d
    prev[0] = 1.0
    prev[1:] = sd[:-1]
    nxt = np.zeros_like(s)  # s_{i+1}
    nxt[:-1] = s[1:]
    return lam * (prev - sd) - (s - nxt)


def _jacobian_bands(s: np.ndarray, lam: float, d: int):
    """Sub-, main and super-diagonal of the (tridiagonal) Jacobian of :func:`pod_ode_rhs`."""
    dsd = d * s ** (d - 1)  # d/ds of s**d (s**0 == 1, also at s == 0)
    lower = lam * dsd[:-1]  # df_i/ds_{i-1}, i = 2..L
    main = -lam * dsd - 1.0  # df_i/ds_i
    upper = np.ones(len(s) - 1)  # df_i/ds_{i+1}
    return lower, main, upper


def pod_ode_jacobian(t: float, s: np.ndarray, lam: float, d: int) -> sparse.csc_matrix:
    """Jacobian of :func:`pod_ode_rhs` as a sparse (tridiagonal) matrix."""
    s = np.asarray(s, dtype=float)
    lower, main, upper = _jacobian_bands(s, lam, d)
    if len(s) == 1:
        return sparse.csc_matrix(main.reshape(1, 1))
    return sparse.diags([lower, main, upper], [-1, 0, 1], format="csc")


def _initial_state(s0, levels: int) -> np.ndarray:
    y0 = np.zeros(levels)
    if s0 is None:
        return y0
    s0 = np.asarray(s0, dtype=float).ravel()
    if s0.size and (not np.all(np.isfinite(s0)) or s0.min() < 0.0 or s0.max() > 1.0):
        raise ValueError("s0 must hold fractions in [0, 1]")
    if s0.size > 1 and np.any(np.diff(s0) > 1e-12):
        raise ValueError("s0 must be non-increasing (s0[i-1] = fraction with at least i tasks)")
    y0[: s0.size] = s0
    return y0


def solve_pod_ode(
    lam: float,
    d: int,
    t_end: float,
    s0=None,
    levels: int | None = None,
    rtol: float = 1e-10,
    atol: float = 1e-14,
    t_eval=None,
    method: str = "BDF",
) -> PodOdeSolution:
    """Integrate the power-of-d mean-field ODE from ``s0`` (default: empty system) up to ``t_end``.

    ``levels`` defaults to ``max(truncation_level(lam, d), len(s0))``.  The system is stiff over
    long horizons (the slowest mode relaxes on a scale ``1/(1 - sqrt(lam))**2`` for ``d = 1``),
    so the default is BDF with the exact sparse tridiagonal Jacobian.  ``t_eval`` as in
    ``solve_ivp``; by default only the solver's own steps are returned.
    """
    lam = _check_lam(lam)
    d = _check_d(d)
    if not (math.isfinite(t_end) and t_end > 0.0):
        raise ValueError(f"t_end={t_end!r} must be a positive finite number")
    n0 = 0 if s0 is None else np.asarray(s0).size
    if levels is None:
        levels = max(truncation_level(lam, d), n0)
    levels = _check_level("levels", levels)
    if n0 > levels:
        raise ValueError(f"s0 has {n0} levels, more than levels={levels}")
    y0 = _initial_state(s0, levels)
    kwargs = {}
    if method in ("BDF", "Radau"):
        kwargs["jac"] = pod_ode_jacobian
    elif method == "LSODA":
        kwargs["jac"] = lambda t, s, lam, d: pod_ode_jacobian(t, s, lam, d).toarray()
    sol = solve_ivp(
        pod_ode_rhs,
        (0.0, float(t_end)),
        y0,
        method=method,
        args=(lam, d),
        rtol=rtol,
        atol=atol,
        t_eval=t_eval,
        **kwargs,
    )
    return PodOdeSolution(
        t=sol.t, tail=sol.y.T.copy(), lam=lam, d=d, levels=levels,
        success=bool(sol.success), message=str(sol.message),
    )


def pod_fixed_point_numeric(
    lam: float,
    d: int,
    levels: int | None = None,
    tol: float = 1e-15,
    max_iter: int = 100,
) -> PodFixedPoint:
    """Fixed point of the truncated power-of-d drift, found numerically (no closed form used).

    A short, loose ODE integration from the empty state (to ``t = 20/(1 - lam)``) gives a start
    inside the basin; damped Newton iterations with the exact tridiagonal Jacobian (banded
    solve, O(levels) per step) then polish it until ``max|drift| <= tol``.  Raises
    ``RuntimeError`` if Newton does not converge.
    """
    lam = _check_lam(lam)
    d = _check_d(d)
    if levels is None:
        levels = truncation_level(lam, d)
    levels = _check_level("levels", levels)
    if lam == 0.0:
        return PodFixedPoint(np.zeros(levels), 0.0, 0, levels)
    start = solve_pod_ode(lam, d, 20.0 / (1.0 - lam), levels=levels, rtol=1e-6, atol=1e-10)
    s = start.tail[-1].copy()
    f = pod_ode_rhs(0.0, s, lam, d)
    res = float(np.max(np.abs(f)))
    it = 0
    while res > tol and it < max_iter:
        it += 1
        lower, main, upper = _jacobian_bands(s, lam, d)
        ab = np.zeros((3, levels))
        ab[0, 1:] = upper
        ab[1, :] = main
        ab[2, :-1] = lower
        step = solve_banded((1, 1), ab, -f)
        # backtrack on the residual so that a poor start cannot throw the iterate out of [0, 1]
        alpha = 1.0
        while True:
            trial = np.clip(s + alpha * step, 0.0, 1.0)
            f_trial = pod_ode_rhs(0.0, trial, lam, d)
            res_trial = float(np.max(np.abs(f_trial)))
            if res_trial < res or alpha < 1e-4:
                break
            alpha *= 0.5
        if res_trial >= res and alpha < 1e-4:
            break  # no further progress possible at machine precision
        s, f, res = trial, f_trial, res_trial
    if not res <= max(tol, 1e3 * np.finfo(float).eps):
        raise RuntimeError(
            f"Newton did not converge for lam={lam}, d={d}, levels={levels}: max|drift|={res:.3g}"
        )
    return PodFixedPoint(s, res, it, levels)


# ---------------------------------------------------------------------------------------------
# response-time distributions (docs/responses.md)


def _pod_mixture(lam: float, d: int, eps: float = 1e-17):
    """The mean-field law of the response time under power-of-d (``d = 1``: random routing),
    as a :class:`sim.core.responses.Mixture` of ``Gamma(i, 1)``: an arrival samples ``d``
    i.i.d. queues with ``P(length >= i) = s_i`` and joins the shortest, at position ``i`` with
    probability ``s_{i-1}**d - s_i**d`` (``s_0 = 1``). Positions are kept until the remaining
    mass ``s_L**d`` is below ``eps`` (it is dropped). ``d = 1`` gives Exp(1 - lam) (M/M/1)."""
    lam = _check_lam(lam)
    d = _check_d(d)
    levels = 1 if lam == 0.0 else truncation_level(lam, d, eps=eps ** (1.0 / d)) + 2
    s = np.concatenate(([1.0], fixed_point(lam, d, levels)))
    sd = s**d
    return Mixture.of_positions(sd[:-1] - sd[1:])


def response_law(policy: str, lam: float, d: int = 1):
    """Mean-field response-time law of ``random``, ``jsq`` (position 1: Exp(1), zero queueing)
    or ``pod`` (:func:`_pod_mixture`)."""
    pol = policy_record(policy)
    if pol.probes_all:
        _check_lam(lam)
        return Mixture.of_positions([1.0])
    return _pod_mixture(lam, pol.probe_d(d))


# ---------------------------------------------------------------------------------------------
# the engine entry point


def run_task(task: dict) -> dict:
    """Mean-field values of one task, with exactly the result keys of ``docs/results-schema.md``.

    Closed forms only (no ODE): power-of-d fixed point for ``pod`` (``d`` from the task) and
    ``random`` (``d = 1`` whatever the task says), ``s_1 = lam`` for ``jsq``.  Standard errors
    are ``None`` (nothing is estimated).  ``sim.run`` adds ``wall_time``.
    """
    pol = policy_record(task["policy"])
    lam = _check_lam(task["lam"])
    settings = RunSettings.from_task(task)
    max_level, h = settings.max_level, settings.h
    n_servers = int(task["n_servers"])
    d_eff = 1
    if pol.k_task:
        raise ValueError(f"policy={pol.name!r} has no mean-field limit here")
    if not pol.probes_all:
        d = _check_d(task["d"]) if pol.samples else 1
        d_eff = d
        mean_response = pod_mean_response(lam, d)
        mean_queue = pod_mean_queue(lam, d)
        prob_wait = lam**d  # all d sampled servers busy: s_1**d
        tail = fixed_point(lam, d, max_level)
        messages = pol.messages(n_servers, 1, d)
    else:
        mean_response = jsq_mean_response(lam)
        mean_queue = lam
        prob_wait = 0.0
        tail = jsq_fixed_point_tail(lam, max_level)
        messages = pol.messages(n_servers, 1, 1)

    def tail_at(i: int) -> float:
        return float(fixed_point(lam, d_eff, i)[i - 1])

    out = exact_row(
        mean_response=mean_response,
        mean_wait=float(mean_response) - 1.0,  # unit mean service
        prob_wait=prob_wait, mean_queue=mean_queue, tail=tail,
        # single-task jobs: H_1 = 1, no buffer; a job lands at position <= h unless the
        # server it joins has >= h tasks: all d sampled (pod), the one drawn (random), never (jsq)
        queueing_ratio=float(mean_response) - 1.0, drop_prob=0.0,
        frac_within_h=1.0 - (0.0 if pol.probes_all else tail_at(h) ** d_eff),
        messages_per_job=messages, ci_method=CI_METHOD,
    )
    if task.get("responses"):  # docs/responses.md: the exact law at N = infinity
        out.update(exact_response_columns(response_law(pol, lam, d_eff)))
        out["ci_method"] += "; response law exact (mean field)"
    return out
