"""Trajectory engine of partial centralization: one sample path of ``s_i(t)`` beside the fluid
model of :mod:`sim.centralization.meanfield` from the same start (docs/transients.md).

What it records
---------------
From ``init = "empty"``, ``"meanfield"`` (the invariant state of Theorem 2,
:func:`~sim.centralization.meanfield.fixed_point`, rounded: ``round(N s_i)`` stations with at
least ``i`` tasks) or a configured ``init_tail`` (:func:`sim.core.trajectory.check_init_tail`,
rounded the same way), the counts evolve with the *real* exponential clock
(:mod:`sim.centralization._trajectory_kernel`). At the grid times ``t_j = j T / (grid - 1)`` the
state held gives ``s_1..s_L`` (``L = min(max_level, 8)``) and the longest queue. The fluid model
(:func:`~sim.centralization.meanfield.solve_fluid`: one linear regime at a time, the sliding mode
exact, BDF with ``rtol = 1e-10``, ``atol = 1e-14``) starts from the simulation's rounded counts
divided by N and is evaluated on the same grid.

The central state
-----------------
The central server has no state of its own: it serves a longest queue. What the fluid model has
in its place is its *regime*, the top level ``m(t)`` (highest non-empty level; above it the
sliding mode holds level ``m + 1`` at exactly 0). The row records it as ``traj_ode_top`` beside
the path's longest queue ``traj_top``. They are not expected to agree: in the sliding mode the
stations at level ``m + 1`` form an O(1) queue (arrivals at rate ``lam N s_m`` against the
central rate ``N p``), so at any N the path's longest queue is ``m + 1`` for a fraction of the
time of about ``lam s_m / p`` -- a fraction of stations of order 1/N, invisible in ``s_i`` but
not in the maximum (docs/transients.md has what was measured).

Row: ``traj_tail`` / ``traj_ode_tail`` (level-major), ``traj_top`` / ``traj_ode_top``,
``traj_sup_dist`` = ``max_j max_{i <= L} |s_i - ode_i|``.

Run length: ``time`` (T) is required; ``events`` is a cap set by the plan from
:func:`sim.centralization.events_per_time` (the event rate is at most ``N (1 + lam)``, plus 10
SDs, never reached by a path to T).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from sim.centralization import _trajectory_kernel as _k
from sim.centralization.meanfield import _check_lam, _check_p, fixed_point, solve_fluid
from sim.core import trajectory as paths
from sim.core.settings import DEFAULTS, RunSettings, task_int
from sim.core.skeleton import PathRun

__all__ = ["CentralTrajectoryResult", "simulate", "fluid_path", "run_task", "TRAJECTORY_POLICIES"]

TRAJECTORY_POLICIES = ("central",)


class CentralTrajectoryResult(NamedTuple):
    t: np.ndarray
    tail: np.ndarray  #: tail[j, i - 1] = s_i(t[j]) of the path
    top: np.ndarray  #: the path's longest queue at t[j]
    ode: np.ndarray  #: the fluid model's s_i(t[j]) from the same start
    ode_top: np.ndarray  #: the fluid model's regime m(t[j]) (highest non-empty level)
    levels: int
    sup_dist: float
    events_run: int
    sim_time: float
    start: np.ndarray  #: initial s_1, s_2, ... of both


@functools.lru_cache(maxsize=64)
def _fluid_cached(lam: float, p: float, time: float, grid: int, start: tuple):
    """The fluid model on the grid (:func:`~sim.centralization.meanfield.solve_fluid` with
    ``t_eval`` the grid) and its regime ``m(t)`` (NaN at ``p = 0``: no central server)."""
    t = paths.time_grid(time, grid)
    sol = solve_fluid(lam, p, time, s0=np.array(start) if start else None, t_eval=t)
    if not sol.success:
        raise RuntimeError(f"the fluid model failed (lam={lam}, p={p}, T={time}): {sol.message}")
    if sol.t.size != t.size or not np.allclose(sol.t, t, rtol=0.0, atol=1e-9 * max(1.0, time)):
        raise RuntimeError(f"the fluid model returned {sol.t.size} grid times, not {t.size}")
    top = sol.top.astype(np.float64) if p > 0.0 else np.full(t.size, np.nan)
    return sol.tail, top


def fluid_path(lam: float, p: float, time: float, grid: int, start=None, levels: int = paths.TRAJ_LEVELS):
    """The fluid model's ``s_1..s_levels`` (shape ``(grid, levels)``) and its top level ``m(t)``
    on :func:`~sim.core.trajectory.time_grid` from ``start`` (None: empty)."""
    key = tuple(float(v) for v in (start if start is not None else ()))
    tail, top = _fluid_cached(float(lam), float(p), float(time), int(grid), key)
    out = np.zeros((tail.shape[0], levels))
    m = min(levels, tail.shape[1])
    out[:, :m] = tail[:, :m]
    return out, top.copy()


def _start(lam: float, p: float, n_servers: int, init: str, init_tail):
    """Counts ``cnt[l]`` (stations with at least ``l`` tasks, ``cnt[0] = N``) and the start tail."""
    if init_tail is not None:
        tail0 = init_tail
    elif init == "meanfield":
        tail0 = fixed_point(lam, p) if p > 0 or lam == 0 else fixed_point(
            lam, p, max(1, int(math.ceil(math.log(1e-17) / math.log(lam)))))
    else:
        tail0 = np.zeros(0)
    x = paths.counts_of_tail(tail0, n_servers)  # exactly l tasks
    cnt = np.cumsum(x[::-1])[::-1]  # at least l tasks
    keep = np.nonzero(cnt)[0]
    cnt = cnt[: keep[-1] + 1]
    return cnt.astype(np.int64), cnt[1:] / n_servers


def simulate(n_servers: int, lam: float, p: float, time: float, grid: int = DEFAULTS.grid, seed: int = DEFAULTS.seed,
             init: str = paths.TRAJECTORY_DEFAULTS["init"], max_level: int = paths.TRAJ_LEVELS, events: int | None = None,
             init_tail=None, policy: str = "central") -> CentralTrajectoryResult:
    """One path of partial centralization from ``init`` or ``init_tail`` up to ``time`` on
    ``grid`` points, and the fluid model from the same start. ``ValueError`` naming the
    parameter on bad input."""
    if policy not in TRAJECTORY_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by the trajectory engine; valid: "
                         f"{', '.join(TRAJECTORY_POLICIES)}")
    n_servers, lam = paths.check_size_and_load(n_servers, lam)
    p = _check_p(p)
    lam = _check_lam(lam)
    run = PathRun(time=time, grid=grid, seed=seed, init=init, max_level=max_level, events=events,
                  init_tail=init_tail)
    cnt, start = _start(lam, p, n_servers, run.init, run.init_tail)
    out, top = run.record(), run.record(levels=False)
    _, n_events, t_last, _ = _k.central_trajectory(n_servers, lam, p, cnt, run.t, out, top,
                                                   run.xoshiro(), run.cap)
    ode, ode_top = fluid_path(lam, p, run.time, run.grid, start, run.levels)
    return run.result(CentralTrajectoryResult, tail=out, ode=ode, events_run=n_events,
                      sim_time=t_last, top=top, ode_top=ode_top, start=start)


def run_task(task: dict) -> dict:
    """Run one partial-centralization trajectory task (docs/transients.md); its result columns."""
    settings = RunSettings.from_task(task, **paths.TRAJECTORY_DEFAULTS)
    res = simulate(n_servers=task_int(task, "n_servers"), lam=task["lam"], p=task["p"],
                   time=task.get("time"), grid=settings.grid, seed=settings.seed,
                   init=settings.init, max_level=settings.max_level,
                   events=task_int(task, "events"), init_tail=task.get("init_tail"),
                   policy=task["policy"])
    row = paths.trajectory_row(res)
    row.update(traj_top=[float(v) for v in res.top], traj_ode_top=[float(v) for v in res.ode_top])
    return row
