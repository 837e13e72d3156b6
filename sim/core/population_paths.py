"""Paths of a declared population process from a given start: the ``population_trajectory``
engine (the ``trajectory`` engines' outputs, docs/transients.md, for any
:class:`~sim.core.population.Population`).

The state is the counts ``c = N x`` of the declaration, as in the stationary engine
(:mod:`sim.core.population_engine`), but with the *real* clock: in state ``x`` the holding time
is an ``Exp(N sum beta)`` draw, then transition ``(g, i)`` is chosen with probability
``beta_{g,i} / sum beta`` (the stationary engine credits each state with its expected holding
time instead, exact for time averages only). At the grid times ``t_j = j T / (G - 1)`` the
state held at that instant gives ``s_1 .. s_L`` of the declared tail (``L = min(max_level,
8)``) and the highest level of the tail vector with a positive count (the longest queue of a
tail ``s_i``). The run ends at the first event after ``T`` (not applied), or after ``events``
events (a cap: NaN rows after).

The kernel is generated per declaration from the same pieces as the stationary one (the jump
and rate-update lines of :func:`sim.core.population_engine._jump_lines` and
``_update_lines``, the transition pick ``_pick``, the rate filler) and compiled on first use
in a process (kept on the declaration). An event costs what a stationary event costs, plus
O(levels recorded) per grid time.

Starts: ``init: empty`` (the declaration's ``start``), ``meanfield`` (the fixed point,
:func:`sim.core.population_limit.fixed_point`: the declaration's own for ``smooth=False``) or a
configured ``init_tail = [s_1, s_2, ...]`` written into the tail vector from its first
reported level (the other coordinates from ``start``); the fractions are rounded to counts
``round(N x)``. Beside the path, the mean-field path from the same rounded state divided by N
(:func:`sim.core.population_limit.ode_path`) on the same grid, and the sup distance of the two.

Arrivals the truncation refuses are counted (expected jobs, as the stationary engine's
``drop_prob``); a path that met the truncation is refused by :func:`simulate_path`'s caller
through ``PathResult.lost`` (the runners set the truncation out of reach).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from sim.core import trajectory as paths
from sim.core.population import Population
from sim.core.population_engine import (
    _jump_lines,
    _pick,
    _raise,
    _select_lines,
    _tables,
    _unpack_lines,
    _update_lines,
    compiled_once,
    kernels,
    loop_rate,
)
from sim.core.results import is_int
from sim.core.rng import next_raw, u01
from sim.core.skeleton import PathRun

__all__ = ["PathResult", "simulate_path", "path_kernel", "path_row"]


class PathResult(NamedTuple):
    """One path: ``tail[j, i - 1] = s_i(t[j])``, the mean field's ``ode[j, i - 1]`` from the
    same start; the fields of the trajectory engines' results (:func:`sim.core.trajectory.trajectory_row`)."""

    t: np.ndarray
    tail: np.ndarray
    ode: np.ndarray
    levels: int
    sup_dist: float  #: max over grid times and recorded levels of |tail - ode|
    events_run: int
    sim_time: float  #: time of the last event applied (<= T)
    start: np.ndarray  #: the flat start state of both (rounded counts / N)
    top: np.ndarray  #: highest level of the tail vector with a positive count at t[j] (NaN: not reached)
    ode_x: np.ndarray  #: the mean field's whole flat state at t[j]
    lost: float  #: expected arrivals the truncation refused along the path


@njit(cache=True)
def _record(c, nf, out, rec0, nrec, top0, top1, top_out, j):
    """Row ``j`` of the path: ``out[j, m] = c[rec0 + m] / N`` (0 past ``nrec``) and the highest
    coordinate of ``[top0, top1)`` with a positive count, as a level (``top0`` is level 1; 0 if
    none)."""
    for m in range(out.shape[1]):
        out[j, m] = c[rec0 + m] / nf if m < nrec else 0.0
    top = 0
    for k in range(top1 - 1, top0 - 1, -1):
        if c[k] > 0:
            top = k - top0 + 1
            break
    top_out[j] = top


def _path_source(decl: Population) -> str:
    """The Python source of ``path_kernel`` for ``decl``: the stationary kernel's locals
    (:func:`sim.core.population_engine._source`: index tables and running totals in scalars),
    the real clock and the grid instead of the windows."""
    nfam = len(decl.transitions)
    lines = []
    add = lines.append
    add("def path_kernel(c, x, n, nf, p, lo, hi, offs, sizes, base, rates, t_grid, out, rec0, nrec,")
    add("                top0, top1, top_out, state, max_events, arr_rate, clock, err):")
    _unpack_lines(decl, add)
    add(f"    rtop = base[{nfam}]")
    add("    code = fill_rates(x, nf, p, lo, hi, offs, sizes, base, rates, err, True)")
    add("    if code != 0:")
    add("        return code")
    for g in range(nfam):
        nxt = f"base{g + 1}" if g + 1 < nfam else "rtop"
        add(f"    for k in range(base{g}, {nxt}):")
        add(f"        ftot{g} += rates[k]")
    add("    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]")
    add("    n_grid = t_grid.size")
    add("    t = 0.0")
    add("    jg = 0")
    add("    events = 0")
    add("    lost = 0.0")
    add("    while True:")
    add("        tot = " + " + ".join(f"ftot{g}" for g in range(nfam)))
    add("        if not tot > 0.0:  # an absorbing state: held for the rest of the grid")
    add("            while jg < n_grid:")
    add("                _record(c, nf, out, rec0, nrec, top0, top1, top_out, jg)")
    add("                jg += 1")
    add("            break")
    add("        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)")
    add("        t_next = t - np.log(1.0 - u01(r)) / (nf * tot)  # Exp(N tot) holding time")
    add("        while jg < n_grid and t_grid[jg] < t_next:")
    add("            _record(c, nf, out, rec0, nrec, top0, top1, top_out, jg)")
    add("            jg += 1")
    add("        if jg >= n_grid or events >= max_events:")
    add("            break")
    arrivals = [g for g, t in enumerate(decl.transitions) if t.arrival]
    add("        arr_now = " + " + ".join(f"ftot{g}" for g in arrivals))
    add("        if arr_rate - arr_now > 1e-10 * arr_rate:  # below: rounding of the totals")
    add("            lost += (arr_rate - arr_now) * nf * (t_next - t)")
    add("        t = t_next")
    add("        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)")
    add("        u = u01(r) * tot")
    for g, t in enumerate(decl.transitions):
        ind = _select_lines(decl, g, "        ", "rtop", add)
        _jump_lines(decl, g, ind, add, areas=False)
        _update_lines(decl, g, ind, add)
    add("        events += 1")
    add("    clock[0] = t")
    add("    clock[1] = events")
    add("    clock[2] = lost")
    add("    state[0], state[1], state[2], state[3] = s0, s1, s2, s3")
    add("    return 0")
    return "\n".join(lines) + "\n"


def path_kernel(decl: Population):
    """The compiled path kernel of ``decl``, generated on first use (kept on the declaration).

    Like the stationary kernels (:func:`sim.core.population_engine.cached_module`) it is
    compiled from a generated module in a cache folder, so that numba keeps its machine code on
    disk: compiled in memory instead, every new worker process compiled it again (46-65 s on a
    loaded 2-core machine, benchmarks/bench_worker_start.py). The module holds the stationary
    module's text (its ``fill_rates``, which the path kernel calls; its ``kernel`` is compiled
    only if called) and the path kernel, all from the same generated source as in memory. Where
    the rate functions cannot be imported by name (a declaration made at run time) or the cache
    cannot be written, the kernel is compiled in memory as before."""
    return compiled_once(decl, "path_kernel", "path_source", _path_source, _cached_path_kernel, _exec_path_kernel)


def _cached_path_kernel(decl: Population, src: str):
    """The path kernel from a generated module on disk (:func:`path_kernel`); None where the
    rate functions cannot be imported by name."""
    from sim.core.population_engine import _module_text, _source, cached_module

    text = _module_text(decl, decl._cache.get("source") or _source(decl))
    if text is None:
        return None
    text = ("from sim.core.population_paths import _record\n" + text + "\n\n"
            + src.replace("def path_kernel(", "@njit(cache=True)\ndef path_kernel(", 1))
    m = cached_module(decl, text)
    return None if m is None else m.path_kernel


def _exec_path_kernel(decl: Population, src: str):
    """The path kernel compiled from ``src`` in memory (no disk cache)."""
    _, filler = kernels(decl)
    namespace = {"np": np, "next_raw": next_raw, "u01": u01, "_pick": _pick, "_record": _record,
                 "fill_rates": filler}
    for g, t in enumerate(decl.transitions):
        namespace[f"beta{g}"] = loop_rate(t)
    exec(compile(src, f"<population path kernel of {decl.name}>", "exec"), namespace)  # noqa: S102
    return njit(namespace["path_kernel"])


def _start(decl: Population, p: np.ndarray, lay, init: str, init_tail) -> np.ndarray:
    """The flat start in fractions: ``init_tail`` written into the tail vector from its first
    reported level, else the fixed point (``meanfield``) or the declared ``start``."""
    if init_tail is not None:
        x = decl.start_state(p, lay)
        tv, tlo = decl.tail
        j = lay.index[tv]
        room = lay.sizes[j] - tlo
        if init_tail.size > room:
            raise ValueError(f"init_tail has {init_tail.size} levels; the truncation of "
                             f"{decl.name!r} holds {room} here")
        first = int(lay.offsets[j]) + tlo
        x[first: first + init_tail.size] = init_tail
        return x
    if init == "empty":
        return decl.start_state(p, lay)
    from sim.core.population_limit import fixed_point  # init: the fixed point

    return fixed_point(decl, p).x.copy()


def simulate_path(decl: Population, task: dict, params=None) -> PathResult:
    """One path of ``decl`` for ``task`` (``n_servers``, ``time``, the run settings ``grid``,
    ``seed``, ``init``, ``max_level``, an optional ``events`` cap and ``init_tail``, and the
    declaration's parameters; ``params``: the parameter tuple, else ``decl.params(task)``),
    and the mean-field path from the same start. ``ValueError`` naming the key on bad input."""
    from sim.core.population_limit import ode_path
    from sim.core.settings import RunSettings

    n = task.get("n_servers")
    if not is_int(n) or not 1 <= n < 2**53:
        raise ValueError(f"n_servers={n!r} must be an integer with 1 <= n_servers < 2**53")
    settings = RunSettings.from_task(task, **paths.TRAJECTORY_DEFAULTS)
    run = PathRun(time=task.get("time"), grid=settings.grid, seed=settings.seed,
                  init=settings.init, max_level=settings.max_level, events=task.get("events"),
                  init_tail=task.get("init_tail"))
    p = np.asarray(decl.params(task) if params is None else params, dtype=np.float64)
    lay = decl.layout(p)
    n, nf = int(n), float(n)
    x0 = _start(decl, p, lay, run.init, run.init_tail)
    c = np.clip(np.rint(x0 * nf), 0, n).astype(np.int64)
    x = c / nf
    start = x.copy()
    tv, tlo = decl.tail
    jt = lay.index[tv]
    rec0 = int(lay.offsets[jt]) + tlo
    top1 = int(lay.offsets[jt]) + lay.sizes[jt]
    nrec = min(run.levels, top1 - rec0)
    out, top = run.record(), run.record(levels=False)
    kernel = path_kernel(decl)
    lo, hi, base, offs, sizes = _tables(decl, lay)
    rates = np.zeros(int(base[-1]))
    clock = np.zeros(3)
    err = np.zeros(3, dtype=np.int64)
    code = kernel(c, x, n, nf, tuple(p), lo, hi, offs, sizes, base, rates, run.t, out, rec0, nrec,
                  rec0, top1, top, run.xoshiro(), run.cap, float(decl.arrival_rate(p)), clock, err)
    if code:
        _raise(decl, code, err)
    ode_x = ode_path(decl, p, start, run.t)
    ode = np.zeros((run.grid, run.levels))
    ode[:, :nrec] = ode_x[:, rec0: rec0 + nrec]
    return run.result(PathResult, tail=out, ode=ode, events_run=int(clock[1]),
                      sim_time=float(clock[0]), start=start, top=top, ode_x=ode_x,
                      lost=float(clock[2]))


def path_row(res: PathResult, decl: Population) -> dict:
    """The trajectory columns of a path (:func:`sim.core.trajectory.trajectory_row`); a path
    whose arrivals met the truncation is refused (its ``s_i`` would be of another model)."""
    if res.lost > 0.0:
        raise ValueError(f"population {decl.name!r}: the path met the truncation (about "
                         f"{res.lost:.3g} arrivals refused); the runner's truncation is too low")
    row = paths.trajectory_row(res)
    row["ci_method"] = paths.CI_METHOD.replace("one sample path", "one sample path of the "
                                               "declared transitions", 1)
    return row
