"""Mean field of partial centralization (Tsitsiklis & Xu): the closed-form invariant state, the
fluid model, and the ``meanfield`` engine's runner (the model itself: :mod:`sim.centralization`).

Pure numerics (numpy, scipy): :mod:`analysis.models.centralization` imports these closed forms
too, so the analysis and the ``meanfield`` rows use one implementation.

Invariant state (Theorem 2 of the paper)
----------------------------------------
* ``p = 0``: ``s_i = lam**i`` (independent M/M/1 queues);
* ``lam <= p``: ``s_i = 0`` for ``i >= 1``;
* ``0 < p < lam``: ``s_i = (lam * s_{i-1} - p) / (1 - p)`` from ``s_0 = 1`` while positive, 0 after;
  for ``lam != 1 - p`` this is ``s_i = (1-lam)/(1-p-lam) * (lam/(1-p))**i - p/(1-p-lam)`` up to
  ``i*(p, lam) = floor(log_{lam/(1-p)} (p / (1-lam)))`` (``floor((1-p)/p)`` at ``lam = 1 - p``).
* Corollary 3: for ``p > 0``, ``v_1 ~ log_{1/(1-p)} (1/(1-lam))`` as ``lam -> 1`` (against
  ``lam/(1-lam)`` at ``p = 0``).

Fluid model and its discontinuity
---------------------------------
In ``v`` coordinates (paper, eq. 3.3-3.6)::

    dv_i/dt = lam (v_{i-1} - v_i) - (1-p)(v_i - v_{i+1}) - g_i(v),   v_0 = v_1 + 1,
    g_i = p                     if v_i > 0,
          min(lam v_{i-1}, p)   if v_i = 0 < v_{i-1},
          0                     if v_i = v_{i-1} = 0,

implemented literally in :func:`fluid_drift_v`. The drift jumps where a level empties, so it is not
integrated as one smooth ODE. In tail coordinates, with ``m`` the highest non-empty level
(``s_m > 0 = s_{m+1}``), the central term of level ``i`` is ``g_i - g_{i+1}``: 0 below ``m``,
``p - min(lam s_m, p)`` at ``m``, and level ``m + 1`` stays at 0 as long as ``lam s_m <= p``
(the central server removes the tasks that would start level ``m + 1`` as fast as they arrive:
the *sliding mode*, ``g_{m+1} = lam v_m``). Between switches the system is therefore *linear* of
dimension ``m`` (a "regime")::

    ds_i/dt = lam (s_{i-1} - s_i) - (1-p)(s_i - s_{i+1}),          i < m,
    ds_m/dt = lam s_{m-1} - (1-p) s_m - p                         (sliding: lam s_m <= p),

and :func:`solve_fluid` integrates one regime at a time with ``scipy.integrate.solve_ivp``
(BDF, exact tridiagonal Jacobian), locating the two switching surfaces with terminal events:

* ``s_m`` reaches 0 from above: the top level empties, ``m -> m - 1``;
* ``lam s_m - p`` crosses 0 upwards: arrivals to the top queues outrun the central server,
  level ``m + 1`` starts to fill from 0, ``m -> m + 1``.

The sliding mode is thus implemented exactly (level ``m + 1`` is identically 0, not a stiff
approximation), and the paper's case ``g_i = min(lam v_{i-1}, p)`` is what holds it there. Two
small tolerances (a level opens when ``lam s_m - p > 1e-12``, the top level is dropped at
``s_m = 1e-14``) stop the infinitely many switches (Zeno) of the degenerate case ``s_{i*} = 0``
(e.g. ``lam = 1 - p`` with ``(1-p)/p`` an integer); see :func:`solve_fluid`. With
``p = 0`` the drift is continuous (no central term): one linear regime, cut at a level ``L`` with
``s_{L+1} = 0`` where the invariant tail is below 1e-16 (as the dispatch model's supermarket ODE is). From any
finite start the solution converges to the invariant state (Theorem 5); the tests check that
from several starts, and :func:`fluid_fixed_point` finds the drift's zero without the closed form
(solving each regime's linear equations for its equilibrium and keeping the first consistent one).

"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.integrate import solve_ivp
from scipy.linalg import solve_banded

from sim.centralization import MODEL
from sim.core.results import RESULT_KEYS, is_integral
from sim.core.settings import RunSettings

__all__ = [
    "FluidSolution",
    "FluidFixedPoint",
    "top_level",
    "fixed_point",
    "initial_tail",
    "invariant_mean_queue",
    "invariant_mean_response",
    "asymptotic_mean_queue",
    "predicted_slope",
    "fluid_drift_v",
    "fluid_drift",
    "fluid_fixed_point",
    "solve_fluid",
    "relaxation_time",
    "tail_distance",
    "run_task",
]

#: levels below which the p = 0 tail (lam**i) is neglected by the fluid solver
TAIL_EPS = 1e-16


# ---------------------------------------------------------------------------------------------
# checks (ValueError naming the key)


def _check_lam(lam) -> float:
    return float(MODEL.param("lam").check("lam", lam))


def _check_p(p) -> float:
    return float(MODEL.param("p").check("p", p))


#: ``p`` where a form divides by ``log(1 / (1 - p))``: the asymptotic mean queue and the
#: predicted slope need 0 < p < 1
P_OPEN = replace(MODEL.param("p"), doc="central fraction of the processing, in (0, 1)",
                 inclusive=(False, False))


def _check_int(name: str, v, lo: int) -> int:
    """A truncation or run argument (``max_level``, ``levels``, ``h``): not a model parameter,
    so no declaration of its own."""
    if not is_integral(v) or int(v) < lo:
        raise ValueError(f"{name}={v!r} must be an integer >= {lo}")
    return int(v)


# ---------------------------------------------------------------------------------------------
# closed forms (Theorem 2, Corollary 3)


def top_level(lam: float, p: float) -> float:
    """``i*(p, lam)``: the last level of the invariant recurrence with ``s_i >= 0``.

    ``floor(log_{lam/(1-p)} (p / (1-lam)))`` for ``0 < p < lam``, ``lam != 1 - p``;
    ``floor((1-p)/p)`` for ``lam = 1 - p``; 0 for ``lam <= p``; ``inf`` for ``p = 0 < lam``
    (geometric tail, unbounded support). At an exact integer the level ``i*`` itself has
    ``s_{i*} = 0`` (degenerate case).
    """
    lam, p = _check_lam(lam), _check_p(p)
    if lam <= p:
        return 0
    if p == 0.0:
        return math.inf
    r = lam / (1.0 - p)
    if abs(r - 1.0) < 1e-12:
        return math.floor((1.0 - p) / p + 1e-9)
    x = math.log(p / (1.0 - lam)) / math.log(r)
    return math.floor(x + 1e-9 * max(1.0, abs(x)))


def fixed_point(lam: float, p: float, max_level: int | None = None) -> np.ndarray:
    """The fixed point of the fluid model: its invariant tail ``s_1..s_max_level`` (Theorem 2).

    Computed by the theorem's recurrence ``s_i = (lam s_{i-1} - p)/(1-p)`` (``lam**i`` at
    ``p = 0``), set to 0 from the first non-positive value on. ``max_level=None``: up to the
    support (``p > 0``), or until ``s_i < 1e-300`` (``p = 0``).
    """
    lam, p = _check_lam(lam), _check_p(p)
    if max_level is not None:
        max_level = _check_int("max_level", max_level, 1)
    if lam <= p:
        return np.zeros(max_level if max_level is not None else 0)
    if p == 0.0:
        if max_level is None:
            max_level = max(1, int(math.ceil(math.log(1e-300) / math.log(lam))))
        return np.exp(math.log(lam) * np.arange(1, max_level + 1, dtype=np.float64))
    out = []
    s = 1.0
    limit = max_level if max_level is not None else 1 << 30
    while len(out) < limit:
        s = (lam * s - p) / (1.0 - p)
        if s <= 0.0:
            break
        out.append(s)
    tail = np.array(out, dtype=np.float64)
    if max_level is not None and tail.size < max_level:
        tail = np.concatenate([tail, np.zeros(max_level - tail.size)])
    return tail


def initial_tail(lam: float, p: float) -> np.ndarray:
    """The invariant tail cut where it drops below 1e-17, the initial state the simulators
    draw from (``init="meanfield"``)."""
    if lam <= p:
        return np.zeros(0)
    if p == 0.0:
        levels = max(1, int(math.ceil(math.log(1e-17) / math.log(lam))))
        return fixed_point(lam, p, levels)
    return fixed_point(lam, p)


def invariant_mean_queue(lam: float, p: float) -> float:
    """``v_1 = sum_i s_i`` of the invariant state: ``lam/(1-lam)`` at ``p = 0``, 0 if ``lam <= p``."""
    lam, p = _check_lam(lam), _check_p(p)
    if lam <= p:
        return 0.0
    if p == 0.0:
        return lam / (1.0 - lam)
    return float(math.fsum(fixed_point(lam, p)))


def invariant_mean_response(lam: float, p: float) -> float:
    """Mean time a task spends in the system in the limit: ``v_1 / lam`` (Little's law).

    ``lam = 0``: the limit ``lam -> 0``: 1 at ``p = 0`` (M/M/1 with rate 1), 0 for ``p > 0``
    (the central server, of rate ``N p``, empties any queue at once).
    """
    lam, p = _check_lam(lam), _check_p(p)
    if lam == 0.0:
        return 1.0 if p == 0.0 else 0.0
    if p == 0.0:
        return 1.0 / (1.0 - lam)
    return invariant_mean_queue(lam, p) / lam


def asymptotic_mean_queue(lam: float, p: float) -> float:
    """Leading term of Corollary 3: ``log(1/(1-lam)) / log(1/(1-p))`` (``p`` in (0, 1))."""
    lam, p = _check_lam(lam), P_OPEN.check("p", p)
    return math.log(1.0 / (1.0 - lam)) / math.log(1.0 / (1.0 - p))


def predicted_slope(p: float) -> float:
    """Predicted growth of ``v_1`` per unit of ``log(1/(1-lam))`` as ``lam -> 1``: ``1/log(1/(1-p))``."""
    p = P_OPEN.check("p", p)
    return 1.0 / math.log(1.0 / (1.0 - p))


def relaxation_time(lam: float, p: float) -> float:
    """Time constant of the slowest mode of the fluid model near its invariant state.

    ``0 < p < lam``: ``-1/max Re(eig)`` of the linear system of the invariant regime (``i*``
    levels, top level sliding); ``p = 0``: ``1/(1 - sqrt(lam))**2``, the relaxation time of an
    M/M/1 queue; ``lam <= p``: the time scale ``1/(1-p)`` on which regime 1 empties (``1/(1-lam)``
    at ``p = 1``). A simulation should run many of these to reach its own steady state; e.g.
    53 at (lam, p) = (0.9, 0.05), 1341 at (0.99, 0.05), 17427 at (0.999, 0.05).
    """
    lam, p = _check_lam(lam), _check_p(p)
    if p == 0.0:
        return 1.0 / (1.0 - math.sqrt(lam)) ** 2 if lam > 0 else 1.0
    if lam <= p:
        return 1.0 / (1.0 - p) if p < 1.0 else 1.0 / (1.0 - lam)
    m = fixed_point(lam, p).size
    if m == 1:
        return 1.0 / (1.0 - p)
    ab = np.diag(np.full(m, -(lam + 1.0 - p))) + np.diag(np.full(m - 1, lam), -1) \
        + np.diag(np.full(m - 1, 1.0 - p), 1)
    ab[-1, -1] = -(1.0 - p)
    return float(-1.0 / np.max(np.linalg.eigvals(ab).real))


def tail_distance(tail, lam: float, p: float, norm: str = "l1") -> float:
    """Distance of a tail ``s_1..s_K`` to the invariant tail over the same levels (``l1`` or ``sup``)."""
    tail = np.asarray(tail, dtype=np.float64)
    diff = tail - fixed_point(lam, p, max(1, tail.size))[: tail.size]
    if norm == "l1":
        return float(np.abs(diff).sum())
    if norm == "sup":
        return float(np.abs(diff).max()) if diff.size else 0.0
    raise ValueError(f"norm={norm!r} must be 'l1' or 'sup'")


# ---------------------------------------------------------------------------------------------
# the fluid model


def fluid_drift_v(v, lam: float, p: float) -> np.ndarray:
    """The paper's drift ``F(v)`` (eq. 3.6), literally, for ``v = (v_1, ..., v_L)`` with
    ``v_{L+1} = 0`` and ``v_0 = v_1 + 1``. Exact zeros decide the cases of ``g``; use it to
    check states (e.g. ``F(v^I) = 0``), not to integrate (it is discontinuous)."""
    lam, p = _check_lam(lam), _check_p(p)
    v = np.asarray(v, dtype=np.float64)
    L = v.size
    vp = np.concatenate([[v[0] + 1.0 if L else 1.0], v, [0.0]])  # vp[i] = v_i, i = 0..L+1
    out = np.empty(L)
    for i in range(1, L + 1):
        if vp[i] > 0:
            g = p
        elif vp[i - 1] > 0:
            g = min(lam * vp[i - 1], p)
        else:
            g = 0.0
        out[i - 1] = lam * (vp[i - 1] - vp[i]) - (1.0 - p) * (vp[i] - vp[i + 1]) - g
    return out


def fluid_drift(s, lam: float, p: float) -> np.ndarray:
    """Drift of the tail ``s = (s_1..s_m)`` in the regime whose top level is ``m = len(s)``.

    ``ds_i = lam (s_{i-1} - s_i) - (1-p)(s_i - s_{i+1}) - (g_i - g_{i+1})`` with the central term
    ``p - min(lam s_m, p)`` at ``i = m`` only (``g_i = p`` for ``i <= m``, ``g_{m+1} =
    min(lam s_m, p)``). Inside a regime ``lam s_m <= p`` holds (the solver switches otherwise),
    so this is linear there; at the truncation level of ``p = 0`` it is the loss boundary.
    """
    s = np.asarray(s, dtype=np.float64)
    prev = np.empty_like(s)
    prev[0] = 1.0
    prev[1:] = s[:-1]
    nxt = np.zeros_like(s)
    nxt[:-1] = s[1:]
    out = lam * (prev - s) - (1.0 - p) * (s - nxt)
    if s.size:
        out[-1] -= p - min(lam * s[-1], p)
    return out


def _drift_jacobian(s, lam: float, p: float) -> sparse.csc_matrix:
    """Tridiagonal Jacobian of :func:`fluid_drift` (constant within a regime)."""
    m = s.size
    main = np.full(m, -(lam + 1.0 - p))
    if p > 0.0 and lam * s[-1] < p:  # + d/ds_m of min(lam s_m, p) at the top level
        main[-1] += lam
    if m == 1:
        return sparse.csc_matrix(main.reshape(1, 1))
    return sparse.diags([np.full(m - 1, lam), main, np.full(m - 1, 1.0 - p)], [-1, 0, 1], format="csc")


def _p0_levels(lam: float, eps: float = TAIL_EPS) -> int:
    """``p = 0`` truncation: smallest ``L`` with ``lam**(L+1) <= eps``."""
    if lam == 0.0:
        return 1
    return max(1, math.ceil(math.log(eps) / math.log(lam) - 1e-12) - 1)


class FluidFixedPoint(NamedTuple):
    """Zero of the fluid drift found by :func:`fluid_fixed_point`; ``tail[i-1] = s_i``."""

    tail: np.ndarray
    top: int  #: highest non-empty level (the regime)
    max_residual: float  #: max |drift| at ``tail`` (paper's formula in v coordinates)


def fluid_fixed_point(lam: float, p: float, levels: int | None = None) -> FluidFixedPoint:
    """The zero of the fluid drift, found without the closed form.

    For each regime ``m = 0, 1, 2, ...`` the equilibrium of its linear system (``ds/dt = 0``,
    tridiagonal, banded solve) is computed; the first one that is consistent -- a tail in [0, 1],
    non-increasing, ``s_m >= 0`` and ``lam s_m <= p`` (level ``m + 1`` held at 0) -- is returned.
    ``p = 0``: the single regime of the truncated system (``levels``, default where
    ``lam**(L+1) <= 1e-16``), whose equilibrium is ``lam**i`` up to the truncation.
    """
    lam, p = _check_lam(lam), _check_p(p)
    if p == 0.0:
        m_values = [levels if levels is not None else _p0_levels(lam)]
    else:
        if lam <= p:
            return FluidFixedPoint(np.zeros(0), 0, 0.0)
        m_values = range(1, (levels or 100000) + 1)
    tol = 1e-12
    for m in m_values:
        ab = np.zeros((3, m))
        ab[0, 1:] = 1.0 - p  # super-diagonal
        ab[1, :] = -(lam + 1.0 - p)
        ab[2, :-1] = lam  # sub-diagonal
        rhs = np.zeros(m)
        rhs[0] = -lam  # the s_0 = 1 term
        if p > 0.0:
            ab[1, -1] = -(1.0 - p)  # sliding: lam s_m leaves with the central server
            rhs[-1] += p
        s = solve_banded((1, 1), ab, rhs)
        if p == 0.0:
            break
        if (s[-1] >= -tol and lam * s[-1] <= p + tol and np.all(s <= 1.0 + tol)
                and np.all(np.diff(s) <= tol)):
            break
    else:
        raise RuntimeError(f"no consistent regime up to {m} levels for lam={lam}, p={p}")
    s = np.clip(s, 0.0, 1.0)
    v = np.cumsum(s[::-1])[::-1]
    res = float(np.max(np.abs(fluid_drift_v(v, lam, p)))) if s.size else 0.0
    return FluidFixedPoint(s, int(m), res)


class FluidSolution(NamedTuple):
    """Result of :func:`solve_fluid`. ``tail[k, i-1] = s_i(t[k])`` (zero-padded to the highest
    level reached); ``top[k]`` the regime (highest non-empty level) at ``t[k]``."""

    t: np.ndarray
    tail: np.ndarray
    top: np.ndarray
    switches: list  #: (time, "empty" | "grow", new top level)
    lam: float
    p: float
    levels: int  #: level cap (p = 0: truncation level)
    success: bool
    message: str


def _initial_tail(s0) -> np.ndarray:
    if s0 is None:
        return np.zeros(0)
    s0 = np.asarray(s0, dtype=np.float64).ravel()
    if s0.size and (not np.all(np.isfinite(s0)) or s0.min() < 0.0 or s0.max() > 1.0):
        raise ValueError("s0 must hold fractions in [0, 1]")
    if s0.size > 1 and np.any(np.diff(s0) > 1e-12):
        raise ValueError("s0 must be non-increasing (s0[i-1] = fraction with at least i tasks)")
    k = s0.size
    while k > 0 and s0[k - 1] == 0.0:
        k -= 1
    return s0[:k].copy()


def solve_fluid(lam: float, p: float, t_end: float, s0=None, levels: int | None = None,
                rtol: float = 1e-10, atol: float = 1e-14, t_eval=None,
                switch_tol: float = 1e-12, empty_tol: float = 1e-14,
                max_switches: int = 100000) -> FluidSolution:
    """Integrate the fluid model from the tail ``s0`` (default: empty system) to ``t_end``.

    Event-driven, one linear regime at a time (module docstring): the top level ``m`` changes
    only at the two switching events, located by ``solve_ivp``; the new regime starts from the
    event state (a new top level at 0, or the emptied level dropped). ``s0`` must be a finite
    tail (non-increasing fractions); ``levels`` caps the regime (``p = 0``: the truncation level,
    default where ``lam**(L+1) <= 1e-16``; ``p > 0``: default ``len(s0) + 4096``, and reaching it
    is reported in ``message`` with ``success = False``). ``t_eval``: output times (default:
    the solver's steps and the switching times).

    ``switch_tol``: a level opens when ``lam s_m - p`` exceeds ``switch_tol`` (not 0). Where the
    invariant state is degenerate (``s_{i*} = 0`` exactly, e.g. ``lam = 1 - p`` with ``(1-p)/p``
    an integer) the solution slides along ``lam s_m = p`` and would otherwise switch between
    ``m`` and ``m + 1`` infinitely often (Zeno) as the oscillation shrinks; with the tolerance it
    stops switching once the overshoot is below ``switch_tol``, at the price of losing at most
    ``switch_tol`` of mass per unit time (arrivals to level ``m + 1`` beyond the central
    capacity ``p``). Likewise the top level is dropped when it falls to ``empty_tol`` (not 0):
    there the top level approaches 0 only asymptotically and, at round-off distance from 0,
    the stiff solver crawls; dropping at most ``empty_tol`` of mass ends that.
    """
    lam, p = _check_lam(lam), _check_p(p)
    if not (isinstance(t_end, (int, float)) and math.isfinite(t_end) and t_end > 0):
        raise ValueError(f"t_end={t_end!r} must be a positive finite number")
    s = _initial_tail(s0)
    if p == 0.0:
        cap = max(levels or _p0_levels(lam), s.size)
    else:
        cap = levels if levels is not None else s.size + 4096
    cap = _check_int("levels", cap, 1)
    if s.size > cap:
        raise ValueError(f"s0 has {s.size} non-empty levels, more than levels={cap}")
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=np.float64)

    def settle(s):
        """Top level consistent with the state: open levels while lam s_m > p (s_0 = 1)."""
        if p == 0.0:
            return np.concatenate([s, np.zeros(cap - s.size)]), []
        opened = []
        while s.size < cap and lam * (s[-1] if s.size else 1.0) > p + switch_tol:
            s = np.concatenate([s, [0.0]])
            opened.append(s.size)
        return s, opened

    ts, ys, tops, switches = [], [], [], []
    t0 = 0.0
    s, opened = settle(s)
    switches += [(0.0, "grow", m) for m in opened]
    success, message = True, "reached t_end"
    while True:
        m = s.size
        if m == 0:  # empty and lam <= p: stays empty
            grid = t_eval[(t_eval >= t0) & (t_eval <= t_end)] if t_eval is not None else np.array([t0, t_end])
            ts.append(grid)
            ys.append([np.zeros(0)] * grid.size)
            tops.append(np.zeros(grid.size, dtype=np.int64))
            break
        events = []
        if p > 0.0:
            def ev_empty(t, y):
                return y[-1] - empty_tol
            ev_empty.terminal, ev_empty.direction = True, -1.0

            def ev_below(t, y):  # a level opened but fell back before reaching empty_tol
                return y[-1] + empty_tol
            ev_below.terminal, ev_below.direction = True, -1.0
            events += [ev_empty, ev_below]
            if m < cap:
                def ev_grow(t, y):
                    return lam * y[-1] - p - switch_tol
                ev_grow.terminal, ev_grow.direction = True, 1.0
                events.append(ev_grow)
        seg_eval = None
        if t_eval is not None:
            seg_eval = t_eval[(t_eval >= t0) & (t_eval <= t_end)]
        sol = solve_ivp(lambda t, y: fluid_drift(y, lam, p), (t0, float(t_end)), s, method="BDF",
                        jac=lambda t, y: _drift_jacobian(y, lam, p), rtol=rtol, atol=atol,
                        events=events or None, t_eval=seg_eval)
        if not sol.success:
            success, message = False, str(sol.message)
        # a regime that ends (at an event) before its first output time: solve_ivp gives
        # empty lists, not arrays
        sol_t = np.asarray(sol.t, dtype=np.float64).ravel()
        sol_y = np.asarray(sol.y, dtype=np.float64).reshape(s.size, sol_t.size)
        ts.append(sol_t)
        ys.append([sol_y[:, k] for k in range(sol_t.size)])
        tops.append(np.full(sol_t.size, m, dtype=np.int64))
        if sol.status != 1:  # t_end reached (or failure)
            break
        # which event fired
        fired = [(k, te[0], ye[0]) for k, (te, ye) in enumerate(zip(sol.t_events, sol.y_events)) if te.size]
        k, te, ye = min(fired, key=lambda f: f[1])
        ye = np.clip(ye, 0.0, 1.0)
        if k in (0, 1):  # the top level emptied
            s = ye[:-1]
            switches.append((float(te), "empty", s.size))
        else:  # lam s_m reached p: a new level opens at 0
            s = np.concatenate([ye, [0.0]])
            switches.append((float(te), "grow", s.size))
        s, opened = settle(s)  # (never opens a level after a consistent switch; a safeguard)
        switches += [(float(te), "grow", m_new) for m_new in opened]
        if t_eval is None:
            ts.append(np.array([te]))
            ys.append([s])
            tops.append(np.array([s.size], dtype=np.int64))
        t0 = float(te)
        if len(switches) > max_switches:
            success, message = False, f"more than max_switches={max_switches} regime switches"
            break
        if p > 0.0 and s.size == cap and lam * s[-1] > p:
            success, message = False, f"level cap levels={cap} reached"
    t = np.concatenate(ts) if ts else np.zeros(0)
    rows = [y for seg in ys for y in seg]
    width = max([r.size for r in rows] + [1])
    tail = np.zeros((len(rows), width))
    for k, r in enumerate(rows):
        tail[k, : r.size] = np.clip(r, 0.0, 1.0)
    return FluidSolution(t=t, tail=tail, top=np.concatenate(tops) if tops else np.zeros(0, np.int64),
                         switches=switches, lam=lam, p=p, levels=cap, success=success,
                         message=message)


# ---------------------------------------------------------------------------------------------
# the engine entry point

CI_METHOD = "closed form (fluid invariant state, Tsitsiklis-Xu Theorem 2)"


def run_task(task: dict) -> dict:
    """Fluid invariant state (closed form, Theorem 2) for one task; returns :data:`RESULT_KEYS`.

    ``mean_response = mean_wait = v_1 / lam`` (Little; the ``lam -> 0`` limit at ``lam = 0``),
    ``prob_wait = s_1`` (PASTA: an arrival finds its station non-empty w.p. ``s_1``),
    ``frac_within_h = 1 - s_h``. Standard errors are None (nothing is estimated).
    """
    lam, p = _check_lam(task.get("lam")), _check_p(task.get("p"))
    settings = RunSettings.from_task(task)
    max_level, h = settings.max_level, settings.h
    tail = fixed_point(lam, p, max(max_level, h))
    resp = invariant_mean_response(lam, p)
    out = {
        "mean_response": float(resp), "mean_response_se": None,
        "mean_wait": float(resp), "mean_wait_se": None,
        "prob_wait": float(tail[0]), "prob_wait_se": None,
        "mean_queue": float(invariant_mean_queue(lam, p)), "mean_queue_se": None,
        "tail": [float(x) for x in tail[:max_level]], "tail_se": None,
        "queueing_ratio": None, "queueing_ratio_se": None,
        "drop_prob": 0.0, "drop_prob_se": None,
        "frac_within_h": float(1.0 - tail[h - 1]),
        "messages_per_job": 0.0,
        "n_jobs": 0, "events_run": 0, "sim_time": 0.0, "warmup_time": 0.0,
        "ci_method": CI_METHOD,
    }
    assert tuple(out) == RESULT_KEYS
    return out
