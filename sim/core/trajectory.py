"""What every trajectory engine shares: the time grid, the run checks, a configured start
``init_tail``, the counts of a tail, the sup distance to the ODE and the one events bound.

A trajectory engine records one sample path of ``s_i(t)`` (servers with at least ``i`` tasks) on
a time grid beside its model's mean-field ODE (or fluid model) from the same start
(docs/transients.md); the model packages hold the paths and the ODEs, this module only the
model-free pieces.
"""
from __future__ import annotations

import math

import numpy as np

from sim.core.declare import INT_LIMIT, POSITIVE_LOAD_BELOW_ONE, SHARED_PARAMS, Param
from sim.core.results import is_int
from sim.core.settings import INIT_CHOICES

__all__ = ["TRAJECTORY_DEFAULTS", "TRAJ_LEVELS", "MAX_INIT_LEVELS", "INIT_TAIL", "CI_METHOD", "events_bound", "time_grid",
           "sup_distance", "check_init_tail", "counts_of_tail", "cap_events", "none_if_nan",
           "check_size_and_load", "check_trajectory_args", "trajectory_row"]

#: the run settings a trajectory engine defaults to unlike the others
#: (:meth:`sim.core.settings.RunSettings.from_task`): it starts empty unless told otherwise
TRAJECTORY_DEFAULTS = {"init": "empty"}
#: most levels recorded (s_1..s_L, L = min(max_level, TRAJ_LEVELS))
TRAJ_LEVELS = 8
#: longest configured start ``init_tail`` (levels; zeros after)
MAX_INIT_LEVELS = 4096
#: the trajectory engine's configured start, a parameter of every model with that engine
INIT_TAIL = Param("floats", "trajectory engine: the start s_1, s_2, ... (non-increasing fractions in "
                  "[0, 1], zeros after; round(N s_i) servers with >= i tasks); with init=empty")
CI_METHOD = ("one sample path (real exponential clock); bands from independent replications "
             "(analysis/transients.py)")


def events_bound(rate_bound: float, time: float) -> float:
    """Events per unit time to give a path of horizon ``time`` whose event rate never exceeds
    ``rate_bound``: ``(B + 10 sqrt(B) + 1000) / time`` with ``B = rate_bound * time`` (the count
    is below Poisson(B) stochastically; 10 of its SDs above the mean is never reached)."""
    b = float(rate_bound) * float(time)
    return (b + 10.0 * math.sqrt(b) + 1000.0) / float(time)


def time_grid(time: float, grid: int) -> np.ndarray:
    """``grid`` equally spaced times from 0 to ``time``, both included."""
    return np.linspace(0.0, float(time), int(grid))


def sup_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a - b|`` over every entry (grid times x levels); NaN if a path has a NaN (stopped
    by its event cap before T)."""
    diff = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    return float("nan") if np.isnan(diff).any() else float(np.max(diff))


def check_init_tail(init_tail, init: str = "empty"):
    """The configured start ``init_tail = [s_1, s_2, ...]`` (None: none) as a float array, or
    ``ValueError`` naming ``init_tail`` and its value: a non-empty list of at most
    :data:`MAX_INIT_LEVELS` finite fractions in [0, 1], non-increasing (``s_i`` = fraction with
    at least ``i`` tasks; levels after the list are 0), given with ``init = "empty"`` (the
    default of the trajectory engine: a configured start replaces it; with ``"meanfield"`` the
    two would contradict each other)."""
    if init_tail is None:
        return None
    if isinstance(init_tail, np.ndarray):
        init_tail = init_tail.tolist()
    if (not isinstance(init_tail, (list, tuple)) or not init_tail
            or not all(isinstance(v, (int, float, np.integer, np.floating))
                       and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)
                       for v in init_tail)):
        raise ValueError(f"init_tail={init_tail!r} must be a non-empty list of finite numbers "
                         "s_1, s_2, ... (fractions of servers with at least i tasks)")
    if len(init_tail) > MAX_INIT_LEVELS:
        raise ValueError(f"init_tail has {len(init_tail)} levels, more than {MAX_INIT_LEVELS}")
    s = np.asarray(init_tail, dtype=float)
    if s.min() < 0.0 or s.max() > 1.0:
        raise ValueError(f"init_tail={list(init_tail)!r} must hold fractions in [0, 1] "
                         f"(s_i = fraction of servers with at least i tasks)")
    if np.any(np.diff(s) > 0.0):
        i = int(np.nonzero(np.diff(s) > 0.0)[0][0])
        raise ValueError(f"init_tail={list(init_tail)!r} must be non-increasing "
                         f"(s_{i + 2} = {float(s[i + 1])!r} > s_{i + 1} = {float(s[i])!r})")
    if init != "empty":
        raise ValueError(f"init_tail={list(init_tail)!r} is given with init={init!r}: a configured "
                         "start replaces init, give init=empty with it (or drop init_tail)")
    return s


def counts_of_tail(tail, n_servers: int) -> np.ndarray:
    """Counts ``x[l]`` of servers with exactly ``l`` tasks such that ``round(N s_i)`` servers
    have at least ``i`` tasks (deterministic; the ``meanfield`` start of the occupancy engines)."""
    ge = np.round(n_servers * np.asarray(tail, dtype=np.float64)).astype(np.int64)
    ge = np.minimum.accumulate(np.minimum(ge, n_servers)) if ge.size else ge
    ge = np.concatenate(([n_servers], ge, [0]))
    return ge[:-1] - ge[1:]


def cap_events(events) -> int:
    """The event cap of a path: ``events``, or :data:`~sim.core.declare.INT_LIMIT` (no cap)
    when it is None."""
    return INT_LIMIT if events is None else int(events)


def none_if_nan(v: float):
    """``v`` as a float, None where it is NaN (a path stopped by its cap before T)."""
    return None if math.isnan(v) else float(v)


def check_size_and_load(n_servers, lam) -> tuple[int, float]:
    """``n_servers`` and ``lam`` of a trajectory (every model's), checked against their
    declarations (the shared N, the load in (0, 1)): ``(n_servers, lam)`` as an int and a
    float, else ``ValueError`` naming the key."""
    return (SHARED_PARAMS["n_servers"].check("n_servers", n_servers),
            POSITIVE_LOAD_BELOW_ONE.check("lam", lam))


def check_trajectory_args(*, time, grid, seed, init, max_level, events=None) -> None:
    """The run settings of a trajectory; ``ValueError`` naming the key."""
    if events is not None and (not is_int(events) or events < 1):
        raise ValueError(f"events={events!r} must be None (no cap) or an integer >= 1 (a cap)")
    if time is None:
        raise ValueError("time=None: the trajectory engine needs time (the horizon T, in mean "
                         "service times), a finite number > 0")
    if (isinstance(time, bool) or not isinstance(time, (int, float, np.integer, np.floating))
            or not math.isfinite(time) or not time > 0):
        raise ValueError(f"time={time!r} must be a finite number > 0 (the horizon T)")
    if not is_int(grid) or grid < 2:
        raise ValueError(f"grid={grid!r} must be an integer >= 2 (grid points from 0 to T, "
                         "both ends included)")
    if grid > 100_000:
        raise ValueError(f"grid={grid!r} must be at most 100000 (each row stores grid x levels "
                         "floats)")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    if init not in INIT_CHOICES:
        raise ValueError(f"init={init!r} is unknown; valid: {', '.join(INIT_CHOICES)}")
    if not is_int(max_level) or max_level < 1:
        raise ValueError(f"max_level={max_level!r} must be an integer >= 1")


def trajectory_row(res) -> dict:
    """The result columns every trajectory row has, from a trajectory engine's result ``res``
    (fields ``t``, ``tail`` with ``tail[j, i - 1] = s_i(t_j)``, ``ode`` alike, ``levels``,
    ``sup_dist``, ``events_run``, ``sim_time``): the grid, the path and the ODE flattened
    level-major, their sup distance, the run length. The end of every trajectory ``run_task``."""
    t, tail, ode, levels, sup_dist = res.t, res.tail, res.ode, res.levels, res.sup_dist
    events_run, sim_time = res.events_run, res.sim_time
    return {
        "traj_time": [float(v) for v in t],  # NaN rows (a path cut by its cap) stay NaN
        "traj_levels": int(levels),
        "traj_tail": [float(v) for v in np.asarray(tail).T.ravel()],  # level-major
        "traj_ode_tail": [float(v) for v in np.asarray(ode).T.ravel()],
        "traj_sup_dist": none_if_nan(sup_dist),
        "events_run": int(events_run),
        "sim_time": float(sim_time),
        "ci_method": CI_METHOD,
    }
