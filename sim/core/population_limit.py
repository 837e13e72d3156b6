"""The mean field of a declared population process (:mod:`sim.core.population`).

The drift is the N -> infinity limit of ``sum_l l beta_l(x, N)``: every rate function evaluated
at ``n = inf`` (:func:`drift`). Its fixed point (:func:`fixed_point`) is found in two steps that
check each other: the ODE ``dx/dt = f(x)`` is integrated from the declared empty state with
``scipy.integrate.solve_ivp`` (LSODA) until the drift is below :data:`ODE_TOL` (or a horizon of
:data:`T_MAX` time units), then ``scipy.optimize.root`` (hybr) polishes the end state to a zero
of ``f``; the two must agree to :data:`AGREE` in every coordinate, else ``ValueError`` (a drift
with several zeros, or an ODE that does not settle, is not silently given one of them).
Coordinates no transition moves keep their start values (``s_0 = 1``). A linear quantity every
jump keeps (:func:`conserved`; JIQ's listed = idle servers) is kept at its start value by the
root finding (and the refined expansion is solved along its plane).

The row of the ``population_meanfield`` engine (:func:`limit_row`): the queue, Little's law over
the admitted arrival rate, the tail, the drop probability at the truncation and, where the
arrival transitions give the queue position, ``prob_wait`` and ``frac_within_h``.

The ODE path from a given state (:func:`ode_path`, the path engine's companion,
:mod:`sim.core.population_paths`): LSODA on the drift, or the declaration's own
:class:`~sim.core.population.Fluid` path where it gives one.

A declaration with ``smooth=False`` (a discontinuous drift: partial centralization's server of
the longest queue) is refused by :func:`limit_row`, :func:`expansion` and :func:`refined_row` in
one line; its fixed point and path are its ``fluid``'s, or refused likewise.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import root

from sim.core.population import Population, coordinate
from sim.core.population_engine import fill_rates
from sim.core.refined import refined_expansion
from sim.core.results import exact_row

__all__ = ["drift", "conserved", "fixed_point", "FixedPoint", "limit_row", "expansion", "Expansion",
           "refined_row", "ode_path", "ODE_TOL", "T_MAX", "AGREE", "F1_N", "PATH_RTOL", "PATH_ATOL"]

#: the ODE is run until max |f(x)| is below this
ODE_TOL = 1e-9
#: the longest ODE horizon (time units)
T_MAX = 1e5
#: the ODE's end state and the root must agree to this in every coordinate
AGREE = 1e-6
CI_METHOD = "mean field from the declared transitions: ODE from empty, fixed point by root finding"


#: tolerances of the ODE path (:func:`ode_path`)
PATH_RTOL, PATH_ATOL = 1e-10, 1e-13


def _require_smooth(decl: Population, what: str) -> None:
    if not decl.smooth:
        raise ValueError(f"population {decl.name!r}: declared smooth=False (a discontinuous "
                         f"drift): no {what} is derived from its transitions; simulate it "
                         "(population, population_trajectory) or use the model's own limit")


class FixedPoint(NamedTuple):
    x: np.ndarray  #: the fixed point, flat (all vectors end to end)
    ode_x: np.ndarray  #: where the ODE stopped
    ode_time: float  #: the time it ran
    residual: float  #: max |f(x)| at the root


def _jump_table(decl: Population, lay):
    """Per family: the flat target coordinates (as offsets to add to the index) and deltas."""
    out = []
    for t, (lo, hi) in zip(decl.transitions, lay.ranges):
        idx = np.arange(lo, hi)
        comps = [(int(lay.offsets[lay.index[v]]) + coordinate(o, idx), float(dl))
                 for v, o, dl in t.jump]
        out.append(comps)
    return out


def drift(decl: Population, x: np.ndarray, p: np.ndarray, lay=None, n: float = np.inf) -> np.ndarray:
    """``f(x) = sum_l l beta_l(x, n)`` (``n = inf``: the mean-field drift), flat."""
    lay = lay or decl.layout(p)
    rates = fill_rates(decl, x, n, p, lay, strict=False)
    out = np.zeros(x.size)
    k = 0
    for comps, (lo, hi) in zip(_jump_table(decl, lay), lay.ranges):
        r = rates[k: k + hi - lo]
        for idx, dl in comps:
            np.add.at(out, idx, dl * r)
        k += hi - lo
    return out


def _free(decl: Population, lay) -> np.ndarray:
    mask = np.zeros(int(lay.offsets[-1]), dtype=bool)
    for comps in _jump_table(decl, lay):
        for idx, _ in comps:
            mask[idx] = True
    return mask


def _jump_matrix(decl: Population, lay) -> np.ndarray:
    """Every transition's jump as a row (families in order, as :func:`fill_rates` lays out
    the rates), over the flat state."""
    rows = []
    for comps, (lo, hi) in zip(_jump_table(decl, lay), lay.ranges):
        block = np.zeros((hi - lo, int(lay.offsets[-1])))
        for idx, dl in comps:
            np.add.at(block, (np.arange(hi - lo), idx), dl)
        rows.append(block)
    return np.vstack(rows)


def conserved(decl: Population, lay) -> np.ndarray:
    """The linear quantities every jump keeps, on the moved coordinates: orthonormal rows
    ``C`` with ``C l = 0`` for every jump ``l`` (the null space of the jumps, by SVD; none for
    power-of-d; JIQ's ``s_1 + sum_j P_j``, listed = idle). The drift keeps them too, so its
    Jacobian is singular along them: the fixed point is sought on the plane of the start's
    values and the refined expansion is solved in the coordinates along the plane."""
    jumps = _jump_matrix(decl, lay)[:, _free(decl, lay)]
    _, sv, vt = np.linalg.svd(jumps, full_matrices=True)
    rank = int(np.sum(sv > 1e-10 * max(sv.max(initial=0.0), 1.0)))
    return vt[rank:]


def fixed_point(decl: Population, p: np.ndarray) -> FixedPoint:
    """The fixed point of the drift for parameters ``p`` (module docstring), cached per ``p``."""
    p = np.asarray(p, dtype=np.float64)
    key = ("fixed_point", p.tobytes())
    if key in decl._cache:
        return decl._cache[key]
    lay = decl.layout(p)
    if not decl.smooth:  # the declaration's own fluid limit, or nothing
        if decl.fluid is None:
            _require_smooth(decl, "fixed point (init: meanfield)")
        x = np.asarray(decl.fluid.fixed_point(p, lay), dtype=np.float64)
        if x.shape != (int(lay.offsets[-1]),):
            raise ValueError(f"population {decl.name!r}: fluid.fixed_point returned shape "
                             f"{x.shape}; the flat state has {int(lay.offsets[-1])} coordinates")
        out = FixedPoint(x, x, 0.0, 0.0)
        decl._cache[key] = out
        return out
    x0 = decl.start_state(p, lay)
    free = _free(decl, lay)

    def full(y):
        x = x0.copy()
        x[free] = y
        return x

    def rhs(t, y):
        return drift(decl, full(y), p, lay)[free]

    def settled(t, y):
        return np.max(np.abs(rhs(t, y))) - ODE_TOL

    settled.terminal = True
    y = x0[free]
    t_run = 0.0
    sol = solve_ivp(rhs, (0.0, T_MAX), y, method="LSODA", rtol=1e-10, atol=1e-13, events=settled)
    if sol.status < 0:
        raise ValueError(f"population {decl.name!r}: the mean-field ODE failed: {sol.message}")
    y_ode, t_run = sol.y[:, -1], float(sol.t[-1])
    cons = conserved(decl, lay)  # kept at the start's values: F = f + C^T C (y - y_start)
    y_start = x0[free]

    def func(y):
        return rhs(0.0, y) + cons.T @ (cons @ (y - y_start))

    res = root(func, y_ode, method="hybr", options={"xtol": 1e-14})
    y_root = res.x
    resid = float(np.max(np.abs(rhs(0.0, y_root)))) if y_root.size else 0.0
    if not res.success and resid > 1e-12:  # hybr stalls on badly scaled states: Newton
        y_root = _newton(func, y_ode)
        resid = float(np.max(np.abs(rhs(0.0, y_root))))
    if resid > 1e-12:
        raise ValueError(f"population {decl.name!r}: no fixed point found from the ODE's end "
                         f"state ({res.message}; max |f| = {resid:.3g})")
    gap = float(np.max(np.abs(y_root - y_ode))) if y_root.size else 0.0
    if gap > AGREE:
        raise ValueError(f"population {decl.name!r}: the fixed point by root finding is {gap:.3g} "
                         f"from where the ODE settled (t = {t_run:.3g}): the drift may have several "
                         "zeros or the ODE did not converge")
    out = FixedPoint(full(y_root), full(y_ode), t_run, resid)
    decl._cache[key] = out
    return out


def _newton(func, y: np.ndarray, steps: int = 20) -> np.ndarray:
    """Newton's method on ``func`` from ``y``, the Jacobian by central differences (relative
    step :data:`JAC_STEP`, absolute below 1e-12), until ``max |func|`` stops decreasing."""
    best, fbest = y, float(np.max(np.abs(func(y))))
    for _ in range(steps):
        m = y.size
        jac = np.empty((m, m))
        for k in range(m):
            h = JAC_STEP * max(abs(y[k]), 1e-12)
            e = np.zeros(m)
            e[k] = h
            jac[:, k] = (func(y + e) - func(y - e)) / (2.0 * h)
        y = y - np.linalg.solve(jac, func(y))
        fy = float(np.max(np.abs(func(y))))
        if not fy < fbest:
            break
        best, fbest = y, fy
    return best


def limit_row(decl: Population, task: dict) -> dict:
    """The :data:`sim.core.results.RESULT_KEYS` row of the mean field of ``decl`` for ``task``."""
    _require_smooth(decl, "mean field (population_meanfield)")
    p = np.asarray(decl.params(task), dtype=np.float64)
    lay = decl.layout(p)
    fp = fixed_point(decl, p)
    x = fp.x
    rates = fill_rates(decl, x, np.inf, p, lay, strict=False)  # rounding-level negatives deep in the tail
    queue = float(np.dot(decl.queue_weights(lay), x))
    admitted = 0.0
    waited = within = 0.0
    h = int(task.get("h", 1))
    has_pos = False
    k = 0
    for t, (lo, hi) in zip(decl.transitions, lay.ranges):
        r = rates[k: k + hi - lo]
        if t.arrival:
            admitted += float(r.sum())
            if t.position is not None:
                has_pos = True
                pos = coordinate(t.position, np.arange(lo, hi))
                waited += float(r[pos >= 2].sum())
                within += float(r[pos <= h].sum())
        k += hi - lo
    arr = float(decl.arrival_rate(p))
    resp = queue / admitted
    tv, tlo = decl.tail
    j = lay.index[tv]
    max_level = int(task.get("max_level", 64))
    tail = x[int(lay.offsets[j]) + tlo: int(lay.offsets[j]) + lay.sizes[j]][:max_level]
    tail = np.concatenate((tail, np.zeros(max_level - tail.size)))
    ms = decl.mean_service
    return exact_row(
        mean_response=resp, mean_wait=resp - ms if ms is not None else None,
        prob_wait=waited / admitted if has_pos else None, mean_queue=queue,
        tail=tail, queueing_ratio=(resp - ms) / ms if ms else None,
        drop_prob=max(arr - admitted, 0.0) / arr,
        frac_within_h=within / admitted if has_pos else None,
        messages_per_job=decl.messages(p) if decl.messages is not None else None,
        ci_method=CI_METHOD,
    )


# ---------------------------------------------------------------------------------------------
# the refined 1/N term (Gast & Van Houdt; sim.core.refined)
# ---------------------------------------------------------------------------------------------
#: the 1/N part of the drift, f1 = lim n (f(x, n) - f(x, inf)), by Richardson extrapolation of
#: g(n) = n (f(x, n) - f(x, inf)) at n = F1_N and 2 F1_N: f1 = 2 g(2n) - g(n) + O(1/n^2).
#: Rounding costs about 1e-16 * 2 F1_N = 2e-8 absolute; a rate written for counts that cuts to
#: 0 below a count of d (pod without replacement) differs from its polynomial only where
#: x < d / F1_N, by about x / F1_N there
F1_N = 1e8
#: relative step of the Jacobian's central differences (absolute below |x| = 1e-12)
JAC_STEP = 1e-7
#: step of the second differences along the eigenvectors of W (B : W)
HESS_STEP = 1e-4


class Expansion(NamedTuple):
    x: np.ndarray  #: the fixed point (flat)
    v: np.ndarray  #: E[X^N] = x + v / N + O(1/N^2) (flat; 0 on coordinates no jump moves)
    free: np.ndarray  #: the coordinates some jump moves


def expansion(decl: Population, p: np.ndarray) -> Expansion:
    """``x*`` and ``V`` of ``E[X^N] = x* + V/N`` from the declaration alone, through
    :func:`sim.core.refined.refined_expansion`: ``A = Df(x*)`` by central differences (relative
    step :data:`JAC_STEP`), ``B : W`` by second differences along the eigenvectors of ``W``
    (step :data:`HESS_STEP`: error about 1e-8), ``Q(x*) = sum_l l l^T beta_l(x*)`` from the
    rates, and ``f1`` by Richardson extrapolation in 1/N (:data:`F1_N`). Accuracy about 1e-7
    on ``V`` (measured on pod against the hand-written expansion, tests/dispatch)."""
    _require_smooth(decl, "refined term (population_refined)")
    p = np.asarray(p, dtype=np.float64)
    key = ("expansion", p.tobytes())
    if key in decl._cache:
        return decl._cache[key]
    lay = decl.layout(p)
    fp = fixed_point(decl, p)
    free = _free(decl, lay)
    y = fp.x[free]
    m = y.size

    def f(yy, n=np.inf):
        x = fp.x.copy()
        x[free] = yy
        return drift(decl, x, p, lay, n)[free]

    cons = conserved(decl, lay)
    a = np.empty((m, m))
    if cons.shape[0]:
        # with kept quantities A = sum_l l D(beta_l): the rates differenced one by one, then
        # summed by the jumps, so that A's image lies in their plane to rounding (differencing
        # the summed drift loses a tiny coordinate's change in the rounding of an O(1) sum)
        jumps = _jump_matrix(decl, lay)[:, free].T

        def rates_at(yy):
            x = fp.x.copy()
            x[free] = yy
            return fill_rates(decl, x, np.inf, p, lay, strict=False)
    for k in range(m):
        h = JAC_STEP * max(abs(y[k]), 1e-12)
        e = np.zeros(m)
        e[k] = h
        if cons.shape[0]:
            a[:, k] = jumps @ ((rates_at(y + e) - rates_at(y - e)) / (2.0 * h))
        else:
            a[:, k] = (f(y + e) - f(y - e)) / (2.0 * h)
    f0 = f(y)

    def hess_w(w):
        lam, vec = np.linalg.eigh(0.5 * (w + w.T))
        out = np.zeros(m)
        for j in range(m):
            if lam[j] == 0.0:
                continue
            u = HESS_STEP * vec[:, j]
            out += lam[j] * (f(y + u) - 2.0 * f0 + f(y - u)) / HESS_STEP**2
        return out

    rates = fill_rates(decl, fp.x, np.inf, p, lay, strict=False)
    q = np.zeros((int(lay.offsets[-1]),) * 2)
    k = 0
    for comps, (lo, hi) in zip(_jump_table(decl, lay), lay.ranges):
        r = rates[k: k + hi - lo]
        for ia, da in comps:
            for ib, db in comps:
                np.add.at(q, (ia, ib), da * db * r)
        k += hi - lo
    q = q[np.ix_(free, free)]
    g1 = F1_N * (f(y, F1_N) - f0)
    g2 = 2.0 * F1_N * (f(y, 2.0 * F1_N) - f0)
    f1 = 2.0 * g2 - g1
    if cons.shape[0]:  # along the plane of the kept quantities (where f, Q, f1 and V lie)
        u = _complement(cons)
        v_red, _ = refined_expansion(u.T @ y, u.T @ a @ u,
                                     lambda w: u.T @ hess_w(u @ w @ u.T), u.T @ q @ u, u.T @ f1)
        v_free = u @ v_red
    else:
        v_free, _ = refined_expansion(y, a, hess_w, q, f1)
    v = np.zeros(fp.x.size)
    v[free] = v_free
    out = Expansion(fp.x, v, free)
    decl._cache[key] = out
    return out


def _complement(cons: np.ndarray) -> np.ndarray:
    """An orthonormal basis (columns) of the vectors orthogonal to the rows of ``cons``."""
    _, _, vt = np.linalg.svd(cons, full_matrices=True)
    return vt[cons.shape[0]:].T


def refined_row(decl: Population, task: dict) -> dict:
    """The row of ``x* + V/N`` at the task's N: the queue and Little's law (admitted rate at
    the fixed point: exact to first order where the arrivals are not truncated), the tail,
    ``mean_queue_1n`` (the 1/N coefficient of the queue)."""
    _require_smooth(decl, "refined term (population_refined)")
    p = np.asarray(decl.params(task), dtype=np.float64)
    lay = decl.layout(p)
    e = expansion(decl, p)
    n = float(task["n_servers"])
    row = limit_row(decl, task)
    qw = decl.queue_weights(lay)
    queue_1n = float(np.dot(qw, e.v))
    queue = row["mean_queue"] + queue_1n / n
    arr = float(decl.arrival_rate(p))
    admitted = arr * (1.0 - row["drop_prob"])
    tv, tlo = decl.tail
    j = lay.index[tv]
    max_level = len(row["tail"])
    tail_v = e.v[int(lay.offsets[j]) + tlo: int(lay.offsets[j]) + lay.sizes[j]][:max_level]
    tail = np.array(row["tail"])
    tail[: tail_v.size] += tail_v / n
    resp = queue / admitted
    ms = decl.mean_service
    row.update(mean_queue=queue, mean_response=resp, tail=[float(t) for t in tail],
               mean_wait=resp - ms if ms is not None else None,
               queueing_ratio=(resp - ms) / ms if ms else None, prob_wait=None,
               frac_within_h=None,
               ci_method="refined mean field of the declared transitions: x* + V/N (Jacobian, "
               "Hessian and 1/N part of the drift by finite differences)")
    row["mean_queue_1n"] = queue_1n
    return row


def ode_path(decl: Population, p: np.ndarray, x0: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The mean-field path from the flat state ``x0`` at the times ``t`` (increasing, from 0),
    shape ``(t.size, dim)``: the declaration's ``fluid.path`` where it gives one, else
    ``dx/dt = f(x)`` integrated by LSODA (``rtol`` :data:`PATH_RTOL`, ``atol``
    :data:`PATH_ATOL`) on the coordinates some jump moves (the others keep ``x0``'s values).
    A declaration with ``smooth=False`` and no ``fluid`` is refused."""
    p = np.asarray(p, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    lay = decl.layout(p)
    x0 = np.asarray(x0, dtype=np.float64)
    if decl.fluid is not None:
        out = np.asarray(decl.fluid.path(p, lay, x0, t), dtype=np.float64)
        if out.shape != (t.size, x0.size):
            raise ValueError(f"population {decl.name!r}: fluid.path returned shape {out.shape}; "
                             f"expected {(t.size, x0.size)}")
        return out
    _require_smooth(decl, "ODE path")
    free = _free(decl, lay)

    def rhs(_t, y):
        x = x0.copy()
        x[free] = y
        return drift(decl, x, p, lay)[free]

    sol = solve_ivp(rhs, (0.0, float(t[-1])), x0[free], method="LSODA", rtol=PATH_RTOL,
                    atol=PATH_ATOL, t_eval=t)
    if not sol.success or sol.y.shape[1] != t.size:
        raise ValueError(f"population {decl.name!r}: the mean-field ODE failed on [0, "
                         f"{float(t[-1]):g}]: {sol.message}")
    out = np.repeat(x0[None, :], t.size, axis=0)
    out[:, free] = sol.y.T
    return out
