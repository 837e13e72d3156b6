"""Partial centralization (Tsitsiklis & Xu, "On the power of (even a little) centralization in
distributed processing"): the model.

- :mod:`~sim.centralization.meanfield`: closed-form invariant state and fluid model (pure
  scipy; the analysis imports it too) and the ``meanfield`` engine.
- :mod:`~sim.centralization.agent`, :mod:`~sim.centralization.occupancy`: the two simulators
  (compiled loops in ``_agent_kernel.py``, ``_occupancy_kernel.py``; shared pieces in
  ``_common.py``).
- :mod:`~sim.centralization.trajectory`: the ``trajectory`` engine, paths of ``s_i(t)`` beside
  the fluid model (+ ``_trajectory_kernel.py``; docs/transients.md).
- :mod:`~sim.centralization.population`: ``central`` declared by its transitions,
  run by the generic ``population`` engine and its paths ``population_trajectory`` (simulation
  only: the drift is discontinuous, its fluid limit is :mod:`~sim.centralization.meanfield`'s).

Model
-----
N stations. Station n receives tasks as a Poisson process of rate ``lam`` (0 <= lam < 1) and has
a *local* server, a Poisson clock of rate ``1 - p``: at a tick, if its queue is non-empty one task
(the head, FIFO) leaves, else the tick is wasted. A *central* server, a Poisson clock of rate
``N * p``, removes at each tick the head task of a station drawn uniformly among those with a
longest queue (wasted when the whole system is empty). ``p`` in [0, 1] is the central fraction of
the processing. A task leaves at the tick that serves it: service takes no time, so a task's
*wait* is its whole sojourn and ``mean_wait == mean_response`` here.

State: ``s_i`` = fraction of stations with at least ``i`` tasks (``s_0 = 1``),
``v_i = sum_{j >= i} s_j`` (``v_1`` = mean queue length per station).

The invariant state and the fluid model are derived in :mod:`~sim.centralization.meanfield`.
"""
from __future__ import annotations

import math

from sim.core.declare import Entry, Model, Param
from sim.core.memory import WINDOW_BYTES, longest_queue, ring_slots
from sim.core.trajectory import INIT_TAIL, events_bound
from sim.engines import AGENT, LOAD_BELOW_ONE, MEANFIELD, OCCUPANCY, POPULATION, POPULATION_TRAJECTORY, TRAJECTORY

__all__ = ["MODEL", "check_task", "events_per_time", "event_cost"]


def events_per_time(task: dict) -> float:
    """Events per unit of simulated time (``time`` -> ``events``): the agent and occupancy
    engines are uniformized at ``N (1 + lam)``. The population engine
    (:mod:`~sim.centralization.population`) counts real transitions: arrivals ``lam N`` and as
    many services in steady state, ``2 lam N``. The trajectory engines (``trajectory``,
    ``population_trajectory``) run to their horizon ``time``, ``events`` being a cap they must
    not reach: their event rate (no wasted ticks) is at most ``N (1 + lam)``, plus 10 SDs
    (:func:`sim.core.trajectory.events_bound`)."""
    if task["engine"] in ("trajectory", "population_trajectory"):
        return events_bound(task["n_servers"] * (1.0 + task["lam"]), task["time"])
    if task["engine"] == "population":
        return 2.0 * task["n_servers"] * task["lam"]
    return task["n_servers"] * (1.0 + task["lam"])


def event_cost(task: dict) -> float:
    """Planning cost of one event in plain agent events: the population engine's event (a
    transition drawn among three families by linear scans, no wasted ticks) cost 80-100 ns
    against the occupancy engine's 32-37 ns at N = 10^6, lam = 0.9, p = 0.2 (one run each,
    machine shared: docs/extending.md); the others one unit."""
    return 2.5 if task.get("engine") == "population" else 1.0


def memory_bytes(task: dict) -> float:
    """Peak bytes of the arrays one centralization task allocates (docs/sweeps.md, memory):
    the agent engine (:mod:`~sim.centralization.agent`) keeps per server a ring of ``C``
    float64 arrival times (1.5 C while it doubles; ``C`` the power of two above the longest
    queue: random routing's, at most the invariant state's last level ``i*(p, lam)`` plus 2
    when p > 0, :func:`~sim.centralization.meanfield.top_level`), the queue
    lengths, heads and the buckets of the longest-queue-first rule (about 48 bytes) and a
    service-rate array at the end (8); the population engine an area per level and window (up
    to 2000 windows) over its truncation ``L`` (:func:`~sim.centralization.population.central_levels`:
    random routing's longest queue over the run); the other engines hold O(levels) arrays."""
    n, lam = float(task["n_servers"]), float(task["lam"])
    if task["engine"] == "population":
        run_time = float(task.get("events") or 10**6) / (2.0 * n * max(lam, 1e-12))
        levels = longest_queue(n * 1e6, lam, 1, None, run_time) + 4
        return 2000 * 8.0 * levels + 8 * 8.0 * levels + WINDOW_BYTES
    if task["engine"] != "agent":
        return WINDOW_BYTES
    events = float(task.get("events") or 10**6)
    p = float(task.get("p") or 0.0)
    top = None  # the invariant state's last level i*(p, lam) (meanfield.top_level), + 2 for finite N
    if 0.0 < p < lam:
        ratio = lam / (1.0 - p)
        top = (math.floor((1.0 - p) / p + 1e-9) if abs(ratio - 1.0) < 1e-12
               else math.floor(math.log(p / (1.0 - lam)) / math.log(ratio) + 1e-9)) + 2
    elif p >= lam:
        top = 2
    slots = ring_slots(n, lam, 1, top, events / (n * (1.0 + lam)))
    return n * (56 + 8 * slots) + WINDOW_BYTES


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a partial-centralization task cannot run
    beyond its parameters' declared domains (lam in [0, 1), p in [0, 1]), which the registry
    checks first: the agent engine's size."""
    if task["engine"] == "agent" and task["n_servers"] > 2**31 - 1:
        raise ValueError(f"n_servers={task['n_servers']!r}: the agent engine needs n_servers < 2**31")


_C = "sim.centralization"
#: the contract check's example (sim.testing): N = 500, lam = 0.7, p = 0.2, 400,000 events. The
#: agent engine's finite-N gap to the mean field there, measured over 10 seeds: +0.0225 +- 0.0024
#: (E[T] 1.3534 against 1.3309), so 0.028 is allowed beyond 4 SE
_EXAMPLE = {"n_servers": 500, "lam": 0.7, "p": 0.2}
MODEL = Model(
    name="centralization",
    title="partial centralization (Tsitsiklis & Xu): local servers and a central one serving the longest queue",
    entries=(
        Entry("agent", "central", f"{_C}.agent:run_task", ("p",), example={**_EXAMPLE, "events": 400_000},
              example_allowance={"meanfield": 0.028}),
        Entry("occupancy", "central", f"{_C}.occupancy:run_task", ("p",),
              example={**_EXAMPLE, "events": 400_000}),
        Entry("meanfield", "central", f"{_C}.meanfield:run_task", ("p",), example=_EXAMPLE),
        Entry("trajectory", "central", f"{_C}.trajectory:run_task", ("p",),
              ("init_tail",), example={"n_servers": 100, "lam": 0.7, "p": 0.2, "time": 5.0, "events": 100_000}),
        # declared by its transitions (sim.centralization.population): the generic
        # population engine, stationary and paths. The example's finite-N gap to the mean field
        # is the model's (the agent entry's allowance, measured again on this engine)
        Entry("population", "central", f"{_C}.population:run_task", ("p",),
              example={**_EXAMPLE, "events": 400_000}, example_allowance={"meanfield": 0.028}),
        Entry("population_trajectory", "central", f"{_C}.population:run_path", ("p",),
              ("init_tail",), example={"n_servers": 100, "lam": 0.7, "p": 0.2, "time": 5.0, "events": 100_000}),
    ),
    params={
        "p": Param("float", "central fraction of the processing (partial centralization)",
                   label="p (central fraction of the processing capacity)", symbol="p",
                   domain=(0.0, 1.0)),
        "lam": LOAD_BELOW_ONE,
        "init_tail": INIT_TAIL,
    },
    results={
        # trajectory engine: the path's longest queue and the fluid model's top level m(t)
        "traj_top": "floats", "traj_ode_top": "floats",
    },
    main_estimate="mean_response",
    events_per_time=events_per_time,
    event_cost=event_cost,
    memory_bytes=memory_bytes,
    check_task=check_task,
    labels={"central": "partial centralization"},
    theory={  # closed forms of the invariant state at points no row has (docs/centralization.md)
        "invariant_tail": f"{_C}.meanfield:fixed_point",
        "invariant_mean_queue": f"{_C}.meanfield:invariant_mean_queue",
        "predicted_slope": f"{_C}.meanfield:predicted_slope",
        "relaxation_time": f"{_C}.meanfield:relaxation_time",
        "top_level": f"{_C}.meanfield:top_level",
    },
    engine_decls=(
        AGENT, OCCUPANCY, TRAJECTORY, MEANFIELD, POPULATION, POPULATION_TRAJECTORY,
    ),
)
