"""The ``meanfield`` engine of the dispatch model: N -> infinity limits, one module per law.

- :mod:`~sim.dispatch.meanfield.pod`: single-task ``random``, ``jsq`` and power-of-d without a
  buffer: the supermarket ODE, its closed-form fixed point and response law.
- :mod:`~sim.dispatch.meanfield.buffer`: single-task ``random``, ``pod`` and ``jsq`` with a
  finite buffer ``b`` (the fixed point as the root of a flow balance).
- :mod:`~sim.dispatch.meanfield.tasks`: k-task jobs whose tasks are independent in the limit:
  ``pod_per_task``, ``batch_sampling``, and ``random`` / ``jsq`` with ``k > 1``.
- :mod:`~sim.dispatch.meanfield.batch_filling`: batch-filling (Ying, Srikant & Kang): the ODE
  by an exact program over the layers; its rows from :mod:`~sim.dispatch.meanfield.large_batch`
  (exact fixed point and E[T], k ~ 10^3, kd ~ 10^7).
- :mod:`~sim.dispatch.meanfield.heavy_traffic`: batch-filling and batch-sampling as
  ``1 - lam -> 0`` with ``k d (1 - lam)`` given (jobs end on layers 0-1), to N = 10^300 on the
  sub_halfin_whitt path: the model's `heavy_traffic` engine (its own runner, `run_task` there: it takes
  `log10_n`, `one_minus_lam` and `d_real`, not the `n_servers`, `lam` and `d` of this runner).
- :mod:`~sim.dispatch.meanfield.laws`: single-task ``random`` (M/G/1) and ``pod`` (the cavity
  queue, :mod:`~sim.dispatch.meanfield.cavity`) under a service law other than the exponential,
  and ``ll`` under any law (the workload fixed point, :mod:`~sim.dispatch.meanfield.least_loaded`).

Each has the law's ``fixed_point``, ``response_law`` and a ``run_task`` for its tasks;
:func:`run_task` here is the engine's runner (every ``meanfield`` entry of
:data:`sim.dispatch.MODEL`), choosing the law of a task. The checks the modules share are in
``_common``.
"""
from __future__ import annotations

from sim.core.service_keys import is_exponential
from sim.dispatch.meanfield import batch_filling, buffer, heavy_traffic, large_batch, pod, tasks
from sim.dispatch.policies import policy_of

__all__ = ["run_task", "pod", "buffer", "tasks", "batch_filling", "large_batch", "heavy_traffic"]


def run_task(task: dict) -> dict:
    """Mean-field values of one dispatch task (the result keys of ``docs/results-schema.md``;
    ``sim.run`` adds ``wall_time``), by the module of its law: ``ll``, and single-task jobs
    under a service law other than the exponential (``laws``); batch-filling; pod_per_task and
    batch_sampling; a finite buffer (single-task jobs); ``random`` / ``jsq`` with k-task jobs;
    else single-task ``random``, ``jsq`` or ``pod``."""
    pol = policy_of(task)
    if pol.by_work or not is_exponential(task):  # ll, and random / pod under another law
        from sim.dispatch.meanfield import laws

        return laws.run_task(task)
    if pol.fills:
        return batch_filling.run_task(task)
    if pol.k_task:
        return tasks.run_task(task)
    if task.get("b") is not None:  # a finite buffer (single-task jobs)
        return buffer.run_task(task)
    if (task.get("k") or 1) > 1:  # k-task jobs of random / jsq: k independent task responses
        return tasks.run_task(task)
    return pod.run_task(task)
