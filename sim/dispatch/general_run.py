"""The ``general`` engine's runner: a dispatch task whose sizes come from its service law.

A task names its law by the keys of :mod:`sim.core.service_keys` (``service``, exponential
where absent, and the law's parameters). Single-task jobs (``k = 1`` and not a batch policy:
random, jsq, pod, ll, jiq) run on :func:`sim.dispatch.general.simulate`, k-task jobs and the
batch policies (batch_filling, batch_sampling, pod_per_task, ll_filling; random and jsq with
``k > 1``) on :func:`sim.dispatch.general_jobs.simulate`, as the agent engine routes between
its two simulators. The task's ``events`` are job arrivals, the engine's one event
(:func:`sim.dispatch.events_per_time`). The engine starts empty whatever the run setting
``init`` says (it has no warm start; the warm-up cut removes the transient) and records no
response-time distribution.

The row is the dispatch model's (:data:`sim.core.results.RESULT_KEYS`): ``queueing_ratio`` is
``(E[T] - E[T*]) / E[T*]`` with ``E[T*]`` the mean of the largest of ``k`` sizes of the law
(1 for single-task jobs, whose inherent delay is one size of mean 1); ``frac_within_h`` (for
``h = 1`` only) the fraction of jobs none of whose tasks waits; ``drop_prob`` 0 (no buffer).
"""
from __future__ import annotations

from sim.core.results import simulation_row
from sim.core.service_keys import law_of
from sim.core.settings import RunSettings, task_int
from sim.dispatch import general, general_jobs
from sim.dispatch.policies import policy_of

__all__ = ["run_task"]


def run_task(task: dict) -> dict:
    """Run one ``general`` task (keys as in docs/results-schema.md) and return its row."""
    settings = RunSettings.from_task(task)
    if settings.responses:
        raise ValueError("responses: engine=general records no response-time distribution "
                         "(docs/service.md)")
    pol = policy_of(task)
    k = task_int(task, "k", 1)
    law = law_of(task)
    common = dict(n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=pol.name,
                  jobs=task_int(task, "events"), service=law)
    if k == 1 and not pol.k_task:
        res = general.simulate(d=pol.probe_d(task_int(task, "d", 1)), **common,
                               **settings.arguments(general.simulate))
        ratio, ratio_se = float(res.mean_response) - 1.0, float(res.mean_response_se)
    else:
        res = general_jobs.simulate(k=k, d=pol.probe_d(task_int(task, "d", 1)), **common,
                                    **settings.arguments(general_jobs.simulate))
        ratio, ratio_se = float(res.queueing_ratio), float(res.queueing_ratio_se)
    return simulation_row(
        res, queueing_ratio=ratio, queueing_ratio_se=ratio_se, drop_prob=0.0, drop_prob_se=0.0,
        frac_within_h=float(1.0 - res.prob_wait) if settings.h == 1 else None)
