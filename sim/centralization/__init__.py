"""Partial centralization (Tsitsiklis & Xu, "On the power of (even a little) centralization in
distributed processing"): the model.

- :mod:`~sim.centralization.theory`: closed-form invariant state and fluid model (pure scipy;
  the analysis imports it too).
- :mod:`~sim.centralization.simulate`: agent and occupancy simulators and the three engine
  runners (``agent``, ``occupancy``, ``meanfield``).
- :mod:`~sim.centralization._kernel`: their compiled event loops.
- :mod:`~sim.centralization.trajectory`: the ``trajectory`` engine, paths of ``s_i(t)`` beside
  the fluid model (+ ``_trajectory_kernel.py``; docs/transients.md).

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

The invariant state and the fluid model are derived in :mod:`~sim.centralization.theory`.
"""
from __future__ import annotations

__all__ = ["check_task", "events_per_time"]


def events_per_time(task: dict) -> float:
    """Events per unit of simulated time (``time`` -> ``events``): both engines are uniformized
    at ``N (1 + lam)``. The trajectory engine (:mod:`~sim.centralization.trajectory`) runs to
    its horizon ``time``, ``events`` being a cap it must not reach: its event rate (no wasted
    ticks) is at most ``N (1 + lam)``, plus 10 SDs (:func:`sim.dispatch.trajectory.events_bound`)."""
    if task["engine"] == "trajectory":
        bound = task["n_servers"] * (1.0 + task["lam"]) * task["time"]
        return (bound + 10.0 * bound**0.5 + 1000.0) / task["time"]
    return task["n_servers"] * (1.0 + task["lam"])


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a partial-centralization task cannot run."""
    lam, p = task["lam"], task["p"]
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p={p!r} must be a number in [0, 1]")
    if task["engine"] == "agent" and task["n_servers"] > 2**31 - 1:
        raise ValueError(f"n_servers={task['n_servers']!r}: the agent engine needs n_servers < 2**31")
