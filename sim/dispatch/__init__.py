"""The dispatch model: N FIFO servers, Poisson jobs of k tasks, one dispatching policy.

Model
-----
N servers with FIFO queues and exponential service (rate 1, or per-server rates for single-task
jobs on the agent engine). Jobs arrive as a Poisson process of rate ``lam * N / k``; each job has
``k`` tasks (``k = 1``: single-task jobs), placed on arrival by the policy:

- ``random``: each task to a uniformly chosen server; ``jsq``: each task to a shortest queue
  (ties uniform); ``pod``: power-of-d, ``d`` distinct queues sampled without replacement, join the
  shortest (``k = 1`` only);
- ``batch_filling`` (Weng & Wang; Ying, Srikant & Kang): ``k * d`` distinct queues sampled, the
  ``k`` tasks water-filled into them one by one, each to the currently shortest;
  ``batch_sampling``: the ``k`` tasks to the ``k`` shortest of the ``k * d`` sampled queues;
  ``pod_per_task``: each task samples its own ``k * d`` queues and joins the shortest.

A finite buffer ``b`` (tasks per server, in service included) drops a whole job any of whose
tasks would exceed it. A job's response is the time until its last task completes.

Engines
-------
- ``agent`` (:mod:`~sim.dispatch.agent`, :mod:`~sim.dispatch.parallel`): one entry per server,
  uniformized continuous time, responses measured per job.
- ``occupancy`` (:mod:`~sim.dispatch.occupancy`): counts of servers per queue length; cost per
  event independent of N; job delays by Rao-Blackwell from the queue positions.
- ``meanfield`` (:mod:`~sim.dispatch.meanfield`, :mod:`~sim.dispatch.batch_meanfield`,
  :mod:`~sim.dispatch.task_meanfield`): the supermarket ODE and its closed forms; the
  batch-filling limit for fixed ``k`` and ``d``; the pod_per_task and batch_sampling limits.

:func:`check_task` holds this model's value checks (the registry checks kinds first).
"""
from __future__ import annotations

__all__ = ["check_task", "events_per_time"]


def events_per_time(task: dict) -> float:
    """Events per unit of simulated time of a stochastic dispatch task (``time`` -> ``events``).

    The agent engines are uniformized: exactly ``N (lam/k + 1)`` (``(1 + lam) sum(service_rates)``
    for single-task jobs on :mod:`~sim.dispatch.agent`). The occupancy engine counts real
    transitions, job arrivals ``lam N / k`` and completions ``busy``; in steady state without a
    buffer ``busy = lam N``, so ``N lam (1/k + 1)`` (with a buffer fewer servers are busy and
    the run covers a little more time). The trajectory engine runs to its horizon ``time``,
    ``events`` being a cap it must not reach: an upper bound, from the rate bound ``N (1 +
    lam)`` plus 10 SDs (:func:`sim.dispatch.trajectory.events_bound`).
    """
    n, lam = task["n_servers"], task["lam"]
    k = task.get("k") or 1
    if task["engine"] == "trajectory":
        bound = n * (1.0 + lam / k) * task["time"]  # as sim.dispatch.trajectory.events_bound
        return (bound + 10.0 * bound**0.5 + 1000.0) / task["time"]
    if task["engine"] == "occupancy":
        return n * lam * (1.0 / k + 1.0)
    rates = task.get("service_rates")
    if (task["policy"] in ("random", "jsq", "pod") and k == 1 and task.get("b") is None
            and rates is not None):
        return (1.0 + lam) * float(sum(rates))
    return n * (lam / k + 1.0)


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a dispatch task's values cannot run."""
    engine, policy = task["engine"], task["policy"]
    n = task["n_servers"]
    k = task.get("k", 1) if task.get("k") is not None else 1
    if k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1")
    if k > n:
        raise ValueError(f"k={k!r} must not exceed n_servers={n!r}")
    b = task.get("b")
    if b is not None and b < 1:
        raise ValueError(f"b={b!r} must be an integer >= 1 (or absent: unbounded)")
    lam = task["lam"]
    if b is None and not 0.0 <= lam < 1.0:
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1 (queues are unbounded)")
    if lam < 0:
        raise ValueError(f"lam={lam!r} must be >= 0")
    if policy in ("pod", "batch_filling", "batch_sampling", "pod_per_task"):
        d = task["d"]
        if d < 1:
            raise ValueError(f"d={d!r} must be an integer >= 1")
        if k * d > n:
            what = f"d={d!r}" if k == 1 else f"k*d={k * d} (k={k!r}, d={d!r})"
            raise ValueError(f"{what} must not exceed n_servers={n!r} (sampling without replacement)")
    rates = task.get("service_rates")
    if rates is not None:
        if len(rates) != n:
            raise ValueError(f"service_rates has {len(rates)} entries; it needs one per server "
                             f"(n_servers={n!r})")
        if min(rates) <= 0:
            raise ValueError(f"service_rates: {min(rates)!r} is not > 0 (every rate must be positive)")
        if k > 1 or b is not None:
            raise ValueError("service_rates: unequal service rates are supported for single-task "
                             "jobs without a buffer only (k=1, b absent)")
    if engine == "meanfield" and b is not None and k > 1:
        raise ValueError(f"b={b!r} with k={k!r}: the buffered mean field has single-task jobs "
                         "only (docs/responses.md); leave meanfield out or the buffer off")
    if engine == "refined" and policy == "batch_filling" and k * task["d"] > 8:
        raise ValueError(f"k*d={k * task['d']} (k={k!r}, d={task['d']!r}): the refined batch-filling "
                         "enumerates the histograms of the k*d samples, at most 8 (docs/refined.md)")
    if engine == "agent" and n > 2**31 - 1:
        raise ValueError(f"n_servers={n!r}: the agent engine needs n_servers < 2**31 "
                         "(use the occupancy engine)")
