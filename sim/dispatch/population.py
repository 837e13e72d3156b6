"""Power-of-d declared by its transitions: the ``population``,
``population_meanfield``, ``population_refined`` and ``population_trajectory`` engines of the
dispatch model's ``pod``.

State: the tail ``s_i``, the fraction of servers with at least ``i`` tasks, ``i = 0 .. L + 1``
(``s_0 = 1`` and ``s_{L+1} = 0`` are never moved). Transitions, ``i = 1 .. L``:

- ``arrive``: ``s_i += 1/N`` at rate ``N lam (P(d probes in s_{i-1}) - P(d probes in s_i))``,
  the job joining a queue of length ``i - 1`` (position ``i``): the shortest of ``d`` sampled
  queues has length ``i - 1`` exactly. The ``d`` probes are distinct servers by default
  (``P = C(N s, d) / C(N, d) = prod_{j<d} (s - j/N) / (1 - j/N)``, as the occupancy and agent
  engines sample), or independent with ``replacement: true`` (``P = s**d``, the convention of
  rmf_tool and most papers); both are ``s**d`` in the mean field.
- ``depart``: ``s_i -= 1/N`` at rate ``N (s_i - s_{i+1})``.

The truncation ``L`` is a buffer: a job that would be the ``(L+1)``-th in its queue is lost
(``drop_prob``). With ``b`` given, ``L = b``: the occupancy engine's pod with buffer ``b``,
exactly. Without, ``L`` is set out of reach: the level that ``10^6`` times the run's
independent queue lengths would reach under the mean-field tail
(:func:`sim.core.memory.longest_queue`), plus 2; the row's ``drop_prob`` shows any job lost
(tests check it is 0). The limit engines without ``b`` cut where the fixed point is below
1e-300 (1e-30 for d = 1). A path (``population_trajectory``, :mod:`sim.core.population_paths`)
cuts where a run of its ``events`` cap would (the cap the plan sets for ``time``), plus the
levels of a configured ``init_tail``; its ODE is the declared drift's, integrated from the
path's rounded start.

A task that names a phase-type law other than the exponential (erlang, hyperexponential) runs
on the declaration of :mod:`sim.dispatch.phase_population` (queue length and phase of the task
in service) through the same three engines, ``population``, ``population_meanfield`` and
``population_refined``; the model's check has refused the other laws, a buffer and the path
engine with a law, in one line. The exponential, named or not, stays on ``POD`` here.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.memory import longest_queue
from sim.core.population import Population, Transitions, Vector, tail_vector
from sim.core.population_engine import simulate
from sim.core.population_limit import limit_row, refined_row
from sim.core.results import simulation_row
from sim.core.sampling import probes_in
from sim.core.service_keys import is_exponential
from sim.dispatch import MODEL
from sim.dispatch.policies import only

__all__ = ["POD", "pod_levels", "run_task", "run_meanfield", "run_refined", "run_path"]


@njit(cache=True)
def _arrive(i, s, n, p):
    d = np.int64(p[1])
    rep = p[2] != 0.0
    r = p[0] * (probes_in(s[i - 1], n, d, rep, p[4], p[5])
                - probes_in(s[i], n, d, rep, p[4], p[5]))
    return r if r > 0.0 else 0.0


@njit(cache=True)
def _depart(i, s, n, p):
    return s[i] - s[i + 1]


def pod_levels(task: dict) -> int:
    """The truncation ``L`` of a task (module docstring)."""
    if task.get("b") is not None:
        return int(task["b"])
    lam, d = float(task["lam"]), int(task["d"])
    if task.get("events") is None:  # the limits: where the fixed point is below 1e-300
        from sim.dispatch.meanfield.pod import truncation_level  # (1e-30 for d = 1: hundreds

        return truncation_level(lam, d, 1e-300 if d > 1 else 1e-30) + 1  # of levels already)
    n = float(task["n_servers"])
    run_time = float(task["events"]) / (2.0 * n * lam)
    return longest_queue(n * 1e6, lam, d, None, run_time) + 2


def _params(task: dict) -> tuple:
    """``p = (lam, d, replacement, L, 1 / prod_{j<d} (N - j) or 0, N or 0)``."""
    d, n = int(task["d"]), task.get("n_servers")
    inv_den = 0.0
    if n is not None and d <= 16:
        den = math.prod(float(n) - j for j in range(d))
        inv_den = 1.0 / den if 0.0 < den < 1e300 else 0.0
    return (float(task["lam"]), float(d), 1.0 if task.get("replacement") else 0.0,
            float(pod_levels(task)), inv_den, float(n) if inv_den else 0.0)


def _start(p, sizes):
    s = np.zeros(sizes[0])
    s[0] = 1.0
    return [s]


#: power-of-d as transitions
#: the policy declared here: power-of-d, the sampling policy of single-task jobs
_POLICY = only(samples=True, single_task=True, by_work=False)

POD = Population(
    name="pod",
    vectors=(Vector("s", lambda p: int(p[3]) + 2),),
    transitions=(
        Transitions("arrive", _arrive, (("s", 0, 1),), 1, -1, reads=(("s", -1), ("s", 0)),
                    arrival=True, position=0),
        Transitions("depart", _depart, (("s", 0, -1),), 1, -1, reads=(("s", 0), ("s", 1))),
    ),
    params=_params,
    start=_start,
    **tail_vector("s"),
    arrival_rate=lambda p: float(p[0]),
    mean_service=1.0,
    messages=lambda p: _POLICY.messages(0, 1, int(p[1])),
)


def _task(task: dict) -> dict:
    def as_int(v):
        return int(v) if isinstance(v, float) and v.is_integer() else v

    out = dict(task)
    for key in ("n_servers", "d", "b", "events", "seed", "n_batches", "max_level", "h", "grid"):
        if out.get(key) is not None:
            out[key] = as_int(out[key])
    return out


def _check_sim(task: dict) -> None:
    if task["policy"] != _POLICY.name:
        raise ValueError(f"policy={task['policy']!r} is not declared by transitions")
    if not task.get("replacement") and task["d"] > task["n_servers"]:
        raise ValueError(f"d={task['d']!r} must not exceed n_servers={task['n_servers']!r} "
                         "(sampling without replacement)")


def _phase_law(task: dict) -> bool:
    """The task names a law other than the exponential: it runs on the phase-type population
    (:mod:`sim.dispatch.phase_population`), whose declaration carries the law's phases."""
    return not is_exponential(task)


def run_task(task: dict) -> dict:
    """One ``population`` task of ``pod`` (keys as docs/results-schema.md)."""
    task = _task(task)
    _check_sim(task)
    if _phase_law(task):
        from sim.dispatch import phase_population

        return phase_population.run_task(task)
    return simulation_row(simulate(POD, task))


def run_path(task: dict) -> dict:
    """One ``population_trajectory`` task of ``pod``: the columns of the trajectory engine
    (:mod:`sim.dispatch.trajectory`), the path of the declaration beside its ODE."""
    from sim.core.population_paths import path_row, simulate_path
    from sim.core.trajectory import events_bound

    task = _task(task)
    _check_sim(task)
    if task.get("b") is not None:
        raise ValueError(f"b={task['b']!r}: the path engine runs pod without a buffer")
    params = None
    t = task.get("time")
    if t is not None and t > 0:  # (a bad time is refused, naming it, by simulate_path)
        cut = dict(task)
        if cut.get("events") is None:  # the cap the plan would set
            cut["events"] = events_bound(task["n_servers"] * (1.0 + task["lam"]), t) * t
        p = list(_params(cut))
        p[3] = float(pod_levels(cut) + len(task.get("init_tail") or ()))
        params = tuple(p)
    return path_row(simulate_path(POD, task, params), POD)


def run_meanfield(task: dict) -> dict:
    """One ``population_meanfield`` task of ``pod``: the fixed point of the declared drift."""
    task = _task(task)
    task.pop("events", None)
    # without a buffer lam is in (0, 1); with one, in its declared domain
    (MODEL.param("lam") if task.get("b") is not None else POSITIVE_LOAD_BELOW_ONE).check("lam", task["lam"])
    if _phase_law(task):
        from sim.dispatch import phase_population

        return phase_population.run_meanfield(task)
    return limit_row(POD, task)


def run_refined(task: dict) -> dict:
    """One ``population_refined`` task of ``pod``: ``x* + V/N`` of the declared drift at the
    task's N (:func:`sim.core.population_limit.refined_row`)."""
    task = _task(task)
    task.pop("events", None)
    POSITIVE_LOAD_BELOW_ONE.check("lam", task["lam"])
    if _phase_law(task):
        from sim.dispatch import phase_population

        return phase_population.run_refined(task)
    return refined_row(POD, task)
