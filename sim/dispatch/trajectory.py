"""Trajectory engine of the dispatch model: one sample path of ``s_i(t)`` beside the mean-field ODE.

What it records
---------------
From a given initial state (``init = "empty"``: all servers idle; ``"meanfield"``: the counts of
the policy's fixed point, ``round(N s_i)`` servers with at least ``i`` tasks; or a configured
``init_tail = [s_1, s_2, ...]``, see :func:`sim.core.trajectory.check_init_tail`: ``round(N s_i)`` servers with at
least ``i`` tasks, with ``init = "empty"``), the occupancy
state ``x`` (servers per queue length) evolves with the *real* exponential clock
(:mod:`sim.dispatch._trajectory_kernel`); at each grid time ``t_j = j T / (grid - 1)``,
``j = 0..grid-1`` (both ends included), the fractions ``s_1(t_j) .. s_L(t_j)`` of servers with at
least ``i`` tasks are written, ``L = min(max_level, 8)`` (:data:`sim.core.trajectory.TRAJ_LEVELS`). Beside them, the
supermarket ODE (:func:`sim.dispatch.meanfield.pod.solve_pod_ode`, BDF with its exact Jacobian,
``rtol = 1e-10``, ``atol = 1e-14``) from the *same* start -- exact for ``empty``; for
``meanfield`` the ODE starts from the simulation's rounded counts divided by N -- evaluated on
the same grid. ``traj_sup_dist`` is ``max_j max_{i <= L} |s_i(t_j) - ode_i(t_j)|`` of this path.
Every start that is not empty reaches the ODE as the simulation's rounded counts divided by N,
so both start from the same point exactly.

Policies: ``pod`` (``d`` distinct queues sampled without replacement, join the shortest;
single-task jobs). ``d = 1`` is random routing: N independent M/M/1 queues, for which the ODE
is the forward equation of one queue, so the mean over paths equals the ODE at every N.
``batch_filling`` (fixed ``k``, ``d``): jobs of ``k`` tasks at rate ``N lam / k``, ``k d``
distinct queues sampled, the tasks water-filled one by one into a currently shortest sampled
queue (the occupancy engine's placement); its ODE is the limit of
:mod:`sim.dispatch.meanfield.batch_filling` (``drift``, integrated here by BDF on the grid with
``rtol = 1e-10``, ``atol = 1e-14``, truncated at a level doubled until the top level stays below
1e-12 on [0, T]); ``init = "meanfield"`` rounds its :func:`~sim.dispatch.meanfield.batch_filling.fixed_point`.
With ``k = 1`` it is power-of-d (the ODE too).

Run length: the horizon ``time`` (T) is required; the engine runs until the first event after
T. ``events`` is a cap only: the plan sets it from :func:`sim.dispatch.events_per_time`, an
upper bound -- the event rate is at most ``N (1 + lam)``, so the count is stochastically below
a Poisson law of mean ``B = N (1 + lam) T``, and the plan gives ``B + 10 sqrt(B) + 1000`` -- that a
path to T never reaches in practice (the true count is about ``2 lam N T``); the cost estimates
of the dry run and of the grouping use it (a few % high at lam = 0.9). A path stopped by the cap
before T (a hand-made task with few events, the dry run's timing probe) has NaN in the grid rows
it did not reach and ``traj_sup_dist`` NaN; ``sim_time`` says how far it got.

Speed: one event costs O(levels + d) (batch-filling O(levels + k d)) whatever N (the occupancy
state), a grid write O(levels held); the ODE is solved once per (policy, lam, k, d, T, grid,
start) per process and cached.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy.integrate import solve_ivp

from sim.core import trajectory as paths
from sim.core.settings import DEFAULTS, RunSettings, task_int
from sim.core.skeleton import PathRun
from sim.dispatch import MODEL
from sim.dispatch import _trajectory_kernel as _k
from sim.dispatch.meanfield import batch_filling
from sim.dispatch.meanfield.pod import solve_pod_ode
from sim.dispatch.occupancy import meanfield_tail
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import served_by

__all__ = ["TrajectoryResult", "simulate", "ode_tail", "run_task", "TRAJECTORY_POLICIES",
           "batch_ode_tail"]

#: policies of the dispatch model this engine serves
TRAJECTORY_POLICIES = served_by("trajectory")


class TrajectoryResult(NamedTuple):
    """One path: ``tail[j, i - 1] = s_i(t[j])`` and the ODE's ``ode[j, i - 1]`` from the same start."""

    t: np.ndarray
    tail: np.ndarray
    ode: np.ndarray
    levels: int
    sup_dist: float  #: max over grid times and recorded levels of |tail - ode|
    events_run: int
    sim_time: float  #: time of the last event applied (<= T)
    start: np.ndarray  #: initial s_1, s_2, ... of both (fractions of N)


@functools.lru_cache(maxsize=64)
def _ode_cached(lam: float, d: int, time: float, grid: int, start: tuple) -> np.ndarray:
    t = paths.time_grid(time, grid)
    sol = solve_pod_ode(lam, d, time, s0=np.array(start) if start else None, t_eval=t)
    if not sol.success or sol.tail.shape[0] != t.size:
        raise RuntimeError(f"the power-of-d ODE failed (lam={lam}, d={d}, T={time}): {sol.message}")
    return sol.tail


def ode_tail(lam: float, d: int, time: float, grid: int, start=None, levels: int = paths.TRAJ_LEVELS) -> np.ndarray:
    """The supermarket ODE's ``s_1..s_levels`` on :func:`sim.core.trajectory.time_grid` from ``start`` (``s_1, s_2,
    ...``; None or empty: the empty system), shape ``(grid, levels)``."""
    key = tuple(float(v) for v in (start if start is not None else ()))
    tail = _ode_cached(float(lam), int(d), float(time), int(grid), key)
    out = np.zeros((tail.shape[0], levels))
    m = min(levels, tail.shape[1])
    out[:, :m] = tail[:, :m]
    return out


@functools.lru_cache(maxsize=64)
def _batch_ode_cached(lam: float, k: int, d: int, time: float, grid: int, start: tuple) -> np.ndarray:
    t = paths.time_grid(time, grid)
    levels = max(batch_filling.fixed_point(lam, k, d).size, len(start)) + 8
    while True:
        y0 = np.zeros(levels)
        y0[: len(start)] = start
        sol = solve_ivp(lambda _t, y: batch_filling.drift(y, lam, k, d), (0.0, time), y0,
                        method="BDF", rtol=1e-10, atol=1e-14, t_eval=t)
        if not sol.success or sol.y.shape[1] != t.size:
            raise RuntimeError(f"the batch-filling ODE failed (lam={lam}, k={k}, d={d}, T={time}): "
                               f"{sol.message}")
        if np.max(sol.y[-1]) < 1e-12 or levels >= 4 * paths.MAX_INIT_LEVELS:
            return np.clip(sol.y.T, 0.0, 1.0)
        levels *= 2  # the truncation level was reached: more levels


def batch_ode_tail(lam: float, k: int, d: int, time: float, grid: int, start=None,
                   levels: int = paths.TRAJ_LEVELS) -> np.ndarray:
    """The batch-filling ODE's ``s_1..s_levels`` on :func:`sim.core.trajectory.time_grid` from ``start`` (None or
    empty: the empty system), shape ``(grid, levels)``."""
    key = tuple(float(v) for v in (start if start is not None else ()))
    tail = _batch_ode_cached(float(lam), int(k), int(d), float(time), int(grid), key)
    out = np.zeros((tail.shape[0], levels))
    m = min(levels, tail.shape[1])
    out[:, :m] = tail[:, :m]
    return out


def _start_counts(policy: str, lam: float, k: int, d: int, n_servers: int, init: str,
                  init_tail=None) -> np.ndarray:
    if init_tail is not None:
        tail0 = init_tail
    elif init == "meanfield":
        pol = policy_record(policy)
        tail0 = (meanfield_tail(pol, lam, 1, d) if pol.single_task
                 else batch_filling.fixed_point(lam, k, d))
    else:
        tail0 = np.zeros(0)
    return paths.counts_of_tail(tail0, n_servers)


def _tail_of_counts(x: np.ndarray, n_servers: int) -> np.ndarray:
    """``s_1, s_2, ...`` (up to the highest occupied level) of counts ``x``."""
    ge = np.cumsum(x[::-1])[::-1]  # servers with >= l tasks, l = 0..
    top = int(np.max(np.nonzero(x)[0])) if np.any(x) else 0
    return ge[1: top + 1] / n_servers


def simulate(n_servers: int, lam: float, d: int, time: float, grid: int = DEFAULTS.grid, seed: int = DEFAULTS.seed,
             init: str = paths.TRAJECTORY_DEFAULTS["init"], max_level: int = paths.TRAJ_LEVELS, policy: str = "pod",
             events: int | None = None, k: int = 1, init_tail=None) -> TrajectoryResult:
    """One path of power-of-d (``policy="pod"``) or batch-filling (``"batch_filling"``, ``k``
    tasks per job) from ``init`` or ``init_tail`` up to ``time``, recorded on ``grid`` points,
    and the ODE from the same start; ``events`` (None: no cap) stops the path early (NaN rows
    after). ``ValueError`` naming the parameter on bad input."""
    if policy not in TRAJECTORY_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by the trajectory engine; valid: "
                         f"{', '.join(TRAJECTORY_POLICIES)}")
    n_servers, lam = paths.check_size_and_load(n_servers, lam)
    pol = policy_record(policy)
    if k is None:
        k = 1
    k, d = MODEL.checked(k=k, d=d)
    if pol.single_task and k != 1:
        raise ValueError(f"k={k!r}: policy {policy!r} serves single-task jobs (k = 1)")
    if k * d > n_servers:
        raise ValueError(f"d={d!r} must be an integer >= 1 with k*d <= n_servers={n_servers} "
                         f"(k={k})")
    run = PathRun(time=time, grid=grid, seed=seed, init=init, max_level=max_level, events=events,
                  init_tail=init_tail)
    d, k = int(d), int(k)
    x0 = _start_counts(policy, lam, k, d, n_servers, run.init, run.init_tail)
    start = _tail_of_counts(x0, n_servers)
    out = run.record()
    if pol.single_task:  # power-of-d
        _, n_events, t_last, _ = _k.pod_trajectory(n_servers, n_servers * lam, d, x0, run.t, out,
                                                   run.xoshiro(), run.cap)
        ode = ode_tail(lam, d, run.time, run.grid, start, run.levels)
    else:
        _, n_events, t_last, _ = _k.batch_trajectory(n_servers, n_servers * lam / k, k, d, x0,
                                                     run.t, out, run.xoshiro(), run.cap)
        ode = batch_ode_tail(lam, k, d, run.time, run.grid, start, run.levels)
    return run.result(TrajectoryResult, tail=out, ode=ode, events_run=n_events, sim_time=t_last,
                      start=start)


def run_task(task: dict) -> dict:
    """Run one trajectory task (docs/transients.md) and return its row's result columns."""
    settings = RunSettings.from_task(task, **paths.TRAJECTORY_DEFAULTS)
    res = simulate(n_servers=task_int(task, "n_servers"), lam=task["lam"], d=task_int(task, "d"),
                   time=task.get("time"), grid=settings.grid, seed=settings.seed,
                   init=settings.init, max_level=settings.max_level,
                   policy=task["policy"], events=task_int(task, "events"), k=task_int(task, "k", 1),
                   init_tail=task.get("init_tail"))
    return paths.trajectory_row(res)
