"""Partial centralization declared by its transitions: the ``population`` and
``population_trajectory`` engines of the centralization model's ``central``.

State: the tail ``s_i``, the fraction of stations with at least ``i`` tasks, ``i = 0 .. L + 1``
(``s_0 = 1`` and ``s_{L+1} = 0`` are never moved). Transitions, ``i = 1 .. L``:

- ``arrive``: ``s_i += 1/N`` at rate ``N lam (s_{i-1} - s_i)`` (a task joins its own station,
  one of length ``i - 1``: position ``i``);
- ``local``: ``s_i -= 1/N`` at rate ``N (1 - p) (s_i - s_{i+1})`` (the local server of a
  station of length ``i``);
- ``central``: ``s_i -= 1/N`` at rate ``N p`` where ``s_i > 0 = s_{i+1}``: the central server
  takes a task from a longest queue (one level ``i``, none when the system is empty).

The central rate jumps where a level empties: the drift is discontinuous (the sliding mode of
:mod:`sim.centralization.meanfield`), so the declaration says ``smooth=False``. Nothing is
derived from its drift: the ``population_meanfield`` and ``population_refined`` engines would
refuse it (they are not listed for ``central``), and its fluid limit is the model's own
(:class:`~sim.core.population.Fluid`): the invariant state of Theorem 2
(:func:`~sim.centralization.meanfield.fixed_point`, the start ``init: meanfield``) and the
fluid model (:func:`~sim.centralization.trajectory.fluid_path`, the path engine's ODE).

Service takes no time (a task leaves at the tick that serves it): ``mean_service = 0``, so
``mean_wait == mean_response`` and ``queueing_ratio`` is None, as the hand-written engines
report (:mod:`sim.centralization._common`); no messages.

The truncation ``L`` is set out of reach: the longest queue of random routing at the same load
(``p = 0``, local rate 1: :func:`sim.core.memory.longest_queue` for ``10^6`` times the run's
independent queue lengths) plus 2 (plus the levels of a configured ``init_tail`` for a path).
Serving a longest queue only shortens the longest queue, so this is generous for ``p > 0``
(the invariant state stops at level ``i*``); the rows' ``drop_prob`` shows any task refused
(the tests check it is 0), and a path that meets it is refused.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core.memory import longest_queue
from sim.core.population import Fluid, Population, Transitions, Vector, tail_vector
from sim.core.results import simulation_row
from sim.core.trajectory import time_grid

__all__ = ["CENTRAL", "central_levels", "run_task", "run_path"]


@njit(cache=True)
def _arrive(i, s, n, p):
    return p[0] * (s[i - 1] - s[i])


@njit(cache=True)
def _local(i, s, n, p):
    return (1.0 - p[1]) * (s[i] - s[i + 1])


@njit(cache=True)
def _central(i, s, n, p):
    return p[1] if s[i] > 0.0 and s[i + 1] == 0.0 else 0.0


def central_levels(task: dict) -> int:
    """The truncation ``L`` of a task (module docstring): a stationary task's run covers
    ``events / (2 N lam)`` time units (its events are the real transitions, arrivals and as
    many services), a path's ``time``."""
    n, lam = float(task["n_servers"]), float(task["lam"])
    if task.get("time") is not None and task["engine"] == "population_trajectory":
        run_time = float(task["time"])
    else:
        run_time = float(task["events"]) / (2.0 * n * lam)
    extra = len(task.get("init_tail") or ())
    return longest_queue(n * 1e6, lam, 1, None, run_time) + 2 + extra


def _params(task: dict) -> tuple:
    """``p = (lam, p, L)``."""
    return (float(task["lam"]), float(task["p"]), float(central_levels(task)))


def _start(p, sizes):
    s = np.zeros(sizes[0])
    s[0] = 1.0
    return [s]


def _fixed_point(p, lay) -> np.ndarray:
    """The invariant state of Theorem 2 as the flat state ``s_0 .. s_{L+1}``."""
    from sim.centralization.meanfield import fixed_point

    size = lay.sizes[0]
    return np.concatenate(([1.0], fixed_point(p[0], p[1], size - 2), [0.0]))


def _tail_key(x0: np.ndarray) -> np.ndarray:
    """``s_1, s_2, ...`` of a flat state, up to its last non-zero level (the hand-written
    trajectory engine's start, so that both share the cached fluid path)."""
    s = np.asarray(x0[1:], dtype=np.float64)
    nz = np.nonzero(s)[0]
    return s[: nz[-1] + 1] if nz.size else s[:0]


def _fluid_path(p, lay, x0, t) -> np.ndarray:
    """The fluid model from the flat state ``x0`` at the times ``t`` (a
    :func:`~sim.core.trajectory.time_grid`): :func:`sim.centralization.trajectory.fluid_path`,
    one linear regime at a time with the sliding mode exact."""
    from sim.centralization.meanfield import solve_fluid
    from sim.centralization.trajectory import fluid_path

    size = lay.sizes[0]
    out = np.zeros((t.size, size))
    out[:, 0] = 1.0
    if np.array_equal(t, time_grid(float(t[-1]), t.size)):
        tail, _ = fluid_path(p[0], p[1], float(t[-1]), t.size, _tail_key(x0), size - 1)
    else:
        sol = solve_fluid(p[0], p[1], float(t[-1]), s0=_tail_key(x0), t_eval=t)
        if not sol.success:
            raise RuntimeError(f"the fluid model failed (lam={p[0]}, p={p[1]}): {sol.message}")
        tail = np.zeros((t.size, size - 1))
        m = min(size - 1, sol.tail.shape[1])
        tail[:, :m] = sol.tail[:, :m]
    out[:, 1:] = tail
    return out


#: partial centralization as transitions
CENTRAL = Population(
    name="central",
    vectors=(Vector("s", lambda p: int(p[2]) + 2),),
    transitions=(
        Transitions("arrive", _arrive, (("s", 0, 1),), 1, -1, reads=(("s", -1), ("s", 0)),
                    arrival=True, position=0),
        Transitions("local", _local, (("s", 0, -1),), 1, -1, reads=(("s", 0), ("s", 1))),
        Transitions("central", _central, (("s", 0, -1),), 1, -1, reads=(("s", 0), ("s", 1))),
    ),
    params=_params,
    start=_start,
    **tail_vector("s"),
    arrival_rate=lambda p: float(p[0]),
    mean_service=0.0,
    messages=lambda p: 0.0,
    smooth=False,
    fluid=Fluid(fixed_point=_fixed_point, path=_fluid_path),
)


def _task(task: dict) -> dict:
    def as_int(v):
        return int(v) if isinstance(v, float) and v.is_integer() else v

    out = dict(task)
    for key in ("n_servers", "events", "seed", "n_batches", "max_level", "h", "grid"):
        if out.get(key) is not None:
            out[key] = as_int(out[key])
    return out


def _check(task: dict) -> None:
    from sim.centralization.meanfield import _check_lam, _check_p

    if task["policy"] != "central":
        raise ValueError(f"policy={task['policy']!r} is not declared by transitions")
    _check_lam(task["lam"])
    _check_p(task["p"])


def run_task(task: dict) -> dict:
    """One ``population`` task of ``central`` (keys as docs/results-schema.md)."""
    from sim.core.population_engine import simulate

    task = _task(task)
    _check(task)
    return simulation_row(simulate(CENTRAL, task))


def run_path(task: dict) -> dict:
    """One ``population_trajectory`` task of ``central``: the path's columns of the trajectory
    engine (:mod:`sim.centralization.trajectory`), its longest queue ``traj_top`` and the fluid
    model's regime ``traj_ode_top`` from the same start."""
    from sim.centralization.trajectory import fluid_path
    from sim.core.population_paths import path_row, simulate_path

    task = _task(task)
    _check(task)
    res = simulate_path(CENTRAL, task)
    row = path_row(res, CENTRAL)
    _, ode_top = fluid_path(float(task["lam"]), float(task["p"]), float(res.t[-1]), res.t.size,
                            _tail_key(res.start), res.levels)
    row.update(traj_top=[float(v) for v in res.top], traj_ode_top=[float(v) for v in ode_top])
    return row
