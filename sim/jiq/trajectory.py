"""Trajectory engine of distributed JIQ: one sample path of ``s_i(t)`` and ``p0(t)`` beside the
mean-field ODE of :mod:`sim.jiq.meanfield`.

What it records
---------------
From ``init = "empty"`` (all servers idle and listed, spread as evenly as possible over the
``M = N / r`` I-queues, as :mod:`sim.jiq.occupancy` starts) or ``"meanfield"`` (the fixed point
rounded, see :func:`start_counts`) or a configured ``init_tail`` (``round(N s_i)`` servers with at
least ``i`` tasks; the idle ones all listed, spread as evenly as possible over the I-queues), the
counts ``(x, y)`` evolve with the *real* exponential clock
(:mod:`sim.jiq._trajectory_kernel`). At the grid times ``t_j = j T / (grid - 1)``, ``j = 0..grid-1``,
the state held gives ``s_1..s_L`` (``L = min(max_level, 8)``) and ``p0 = y[0] / M``. The ODE
(:func:`sim.jiq.meanfield.solve_ode`: BDF with its exact sparse Jacobian, ``rtol = 1e-10``,
``atol = 1e-13``, its early stop disabled) starts from the same state -- for ``empty`` the
"balanced" I-queue start, which is the simulation's start exactly; for ``meanfield`` the rounded
counts divided by N and M -- and is evaluated on the same grid.

Row: ``traj_tail`` / ``traj_ode_tail`` (level-major), ``traj_p0`` / ``traj_ode_p0``,
``traj_sup_dist`` = ``max_j max_{i <= L} |s_i - ode_i|`` and ``traj_sup_dist_p0`` =
``max_j |p0 - ode_p0|`` (a fraction of the M = N / r I-queues, so its noise is about ``sqrt(r)``
times that of the ``s_i``).

Run length: ``time`` (T) is required; the engine runs to T; ``events`` is a cap that the plan sets
from :func:`sim.jiq.events_per_time` as an upper bound never reached in practice (rate at most
``N (1 + lam)``, plus 10 SDs: :func:`sim.core.trajectory.events_bound`).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from sim.core import trajectory as paths
from sim.core.settings import DEFAULTS, RunSettings, task_int
from sim.core.skeleton import PathRun
from sim.jiq import MODEL, n_schedulers
from sim.jiq import _trajectory_kernel as _k
from sim.jiq.meanfield import _default_iqueue_levels, fixed_point, solve_ode
from sim.jiq.occupancy import _empty_counts
from sim.jiq.policies import policy as policy_record
from sim.jiq.policies import served_by

__all__ = ["JiqTrajectoryResult", "simulate", "start_counts", "ode_path", "run_task",
           "TRAJECTORY_POLICIES"]

TRAJECTORY_POLICIES = served_by("trajectory")
#: levels of the server tail in the ODE (its fixed-point tail is far below 1e-16 there at lam <= 0.99)
ODE_LEVELS = 64


class JiqTrajectoryResult(NamedTuple):
    t: np.ndarray
    tail: np.ndarray  #: tail[j, i - 1] = s_i(t[j])
    p0: np.ndarray  #: p0[j] = fraction of empty I-queues at t[j]
    ode: np.ndarray
    ode_p0: np.ndarray
    levels: int
    sup_dist: float
    sup_dist_p0: float
    events_run: int
    sim_time: float


def _even_iqueues(idle: int, m: int) -> np.ndarray:
    """``y[j]`` = I-queues listing ``j`` idle servers when ``idle`` servers are spread over ``m``
    I-queues as evenly as possible (sizes ``idle // m`` and ``idle // m + 1``)."""
    base, extra = divmod(int(idle), int(m))
    y = np.zeros(base + 2, dtype=np.int64)
    y[base] = m - extra
    y[base + 1] = extra
    return y[: base + 2] if extra else y[: base + 1]


def start_counts(policy: str, lam: float, r: float, d: int, n_servers: int, init: str,
                 init_tail=None):
    """The initial ``(x, y)`` and the ODE state ``(s_1..s_L, P_1..P_K)`` with ``(L, K)``, equal to
    each other: ``empty`` -- all idle, balanced I-queues; ``meanfield`` -- deterministic rounding of
    the fixed point: ``#{I-queues of size >= j} = round(M P_j)`` gives ``y`` and the idle servers
    ``x[0] = sum_j j y[j]`` (the invariant), the busy ones are ``#{>= i tasks} = round(N s_i)``
    for ``i >= 2`` (capped by ``N - x[0]``); ``init_tail`` (checked by
    :func:`sim.core.trajectory.check_init_tail`) -- ``round(N s_i)`` servers with at least
    ``i`` tasks, every idle server listed (the invariant ``sum_j j y[j] = x[0]``), spread over
    the M I-queues as evenly as possible (:func:`_even_iqueues`)."""
    m = n_schedulers(n_servers, r)
    if init_tail is not None:
        x = paths.counts_of_tail(init_tail, n_servers)
        y = _even_iqueues(x[0], m)
    elif init == "empty":
        x, y = _empty_counts(n_servers, m)
    else:
        fp = fixed_point(policy, lam, r, d, max_level=4096)
        pmf = np.clip(np.asarray(fp.iqueue_pmf, dtype=float), 0.0, None)
        big_p = 1.0 - np.concatenate(([0.0], np.cumsum(pmf)))[:-1]  # P_j, j = 0..
        ge_y = np.minimum(np.round(m * big_p).astype(np.int64), m)
        ge_y[0] = m
        ge_y = np.minimum.accumulate(ge_y)
        ge_y = np.concatenate((ge_y, [0]))
        y = ge_y[:-1] - ge_y[1:]
        idle = int(np.dot(np.arange(y.size), y))
        if idle > n_servers:
            raise ValueError(f"n_servers={n_servers}: the rounded fixed point lists {idle} idle "
                             "servers, more than N; use init=empty")
        s = np.asarray(fp.tail, dtype=float)
        ge_x = np.round(n_servers * s).astype(np.int64)
        ge_x[0] = n_servers - idle
        ge_x = np.minimum.accumulate(np.minimum(ge_x, n_servers - idle))
        ge_x = np.concatenate(([n_servers], ge_x, [0]))
        x = ge_x[:-1] - ge_x[1:]
        keep = np.nonzero(x)[0]
        x = x[: keep[-1] + 1]
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    big_l = max(ODE_LEVELS, x.size + 1)
    big_k = max(_default_iqueue_levels(float(r)), y.size + 1)
    ge_x = np.cumsum(x[::-1])[::-1] / n_servers  # s_0, s_1, ...
    ge_y = np.cumsum(y[::-1])[::-1] / m  # P_0, P_1, ...
    state = np.zeros(big_l + big_k)
    state[: ge_x.size - 1] = ge_x[1:]
    state[big_l: big_l + ge_y.size - 1] = ge_y[1:]
    return x, y, state, big_l, big_k


@functools.lru_cache(maxsize=64)
def _ode_cached(policy, lam, r, d, time, grid, x0: tuple, big_l: int, big_k: int):
    t = paths.time_grid(time, grid)
    sol = solve_ode(policy, lam, r, d, t_end=time, levels=big_l, iqueue_levels=big_k,
                    x0=np.array(x0), tol=1e-300, rtol=1e-10, atol=1e-13, t_eval=t)
    if not sol.success or sol.tail.shape[0] != t.size:
        raise RuntimeError(f"the JIQ ODE failed (policy={policy}, lam={lam}, r={r}, T={time}): "
                           f"{sol.message}")
    return sol.tail, sol.p0


def ode_path(policy, lam, r, d, time, grid, x0, big_l, big_k, levels=paths.TRAJ_LEVELS):
    """The JIQ ODE's ``s_1..s_levels`` (shape ``(grid, levels)``) and ``p0`` on the grid."""
    tail, p0 = _ode_cached(policy, float(lam), float(r), int(d), float(time), int(grid),
                           tuple(float(v) for v in x0), int(big_l), int(big_k))
    return tail[:, :levels].copy(), p0.copy()


def simulate(n_servers: int, lam: float, policy: str, r: float, d: int = 1, time: float = 50.0,
             grid: int = DEFAULTS.grid, seed: int = DEFAULTS.seed, init: str = paths.TRAJECTORY_DEFAULTS["init"],
             max_level: int = paths.TRAJ_LEVELS, events: int | None = None,
             init_tail=None) -> JiqTrajectoryResult:
    """One JIQ path from ``init`` up to ``time`` on ``grid`` points, and the ODE from the same
    start. ``ValueError`` naming the parameter on bad input."""
    if policy not in TRAJECTORY_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by the trajectory engine; valid: "
                         f"{', '.join(TRAJECTORY_POLICIES)}")
    n_servers, lam = paths.check_size_and_load(n_servers, lam)
    m = n_schedulers(n_servers, r)
    pol = policy_record(policy)
    if pol.probes:
        (d,) = MODEL.checked(d=d)
        if d > n_servers:
            raise ValueError(f"d={d!r} must be an integer with 1 <= d <= n_servers={n_servers}")
    else:
        d = 1
    run = PathRun(time=time, grid=grid, seed=seed, init=init, max_level=max_level, events=events,
                  init_tail=init_tail)
    d, r = int(d), float(r)
    x, y, x0, big_l, big_k = start_counts(policy, lam, r, d, n_servers, run.init, run.init_tail)
    out, p0_out = run.record(), run.record(levels=False)
    _, _, n_events, t_last, _ = _k.jiq_trajectory(pol.probes, n_servers, m, lam * n_servers,
                                                  d, x, y, run.t, out, p0_out, run.xoshiro(),
                                                  run.cap)
    ode, ode_p0 = ode_path(policy, lam, r, d, run.time, run.grid, x0, big_l, big_k, run.levels)
    return run.result(JiqTrajectoryResult, tail=out, ode=ode, events_run=n_events, sim_time=t_last,
                      p0=p0_out, ode_p0=ode_p0, sup_dist_p0=paths.sup_distance(p0_out, ode_p0))


def run_task(task: dict) -> dict:
    """Run one JIQ trajectory task (docs/transients.md) and return its row's result columns."""
    settings = RunSettings.from_task(task, **paths.TRAJECTORY_DEFAULTS)
    res = simulate(n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=task["policy"],
                   r=task.get("r"), d=task_int(task, "d", 1), time=task.get("time"),
                   grid=settings.grid, seed=settings.seed,
                   init=settings.init, max_level=settings.max_level,
                   events=task_int(task, "events"), init_tail=task.get("init_tail"))
    row = paths.trajectory_row(res)
    row.update(traj_p0=[float(v) for v in res.p0], traj_ode_p0=[float(v) for v in res.ode_p0],
               traj_sup_dist_p0=paths.none_if_nan(res.sup_dist_p0))
    return row
