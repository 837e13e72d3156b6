"""General-size engine for jobs of k tasks: N FIFO servers whose tasks carry their own sizes.

Model
-----
The model of :mod:`sim.dispatch.agent_jobs` with task sizes drawn from a service law of mean 1
(:mod:`sim.core.service`) instead of Exp(1): N FIFO servers; jobs arrive as a Poisson process
of rate ``lam N / k``, each of ``k`` tasks, each task with its own size drawn at arrival
(independent of everything else), so ``lam`` is the load. A job is done when its last task
is. No buffer: queues are unbounded and ``lam < 1``.

Policies (:data:`JOBS_POLICIES`; ``m = k d`` distinct servers sampled, ties uniform):

- ``batch_filling``, ``batch_sampling``, ``pod_per_task``, ``random``, ``jsq``: exactly the
  definitions of the exponential engine (:mod:`sim.dispatch.agent_jobs`, whose plan functions
  this engine calls): one sample of ``m`` per job, each task into the currently shortest
  sampled queue / one task to each of the ``k`` shortest; each task its own sample of ``m``
  and the shortest; a uniform server per task; a shortest queue per task. Queue length
  counts tasks, whatever their sizes.
- ``ll_filling``: the batch form of least-loaded LL(d), water-filling by work: one sample of
  ``m`` per job, the tasks placed in their order, each into the sampled server whose work runs
  out first (the least work; the sizes are known at arrival), that server's work then raised
  by the task's size. With ``k = 1`` it is LL(d) of :mod:`sim.dispatch.general`.

With ``k = 1`` the three batch policies are power-of-d and ``ll_filling`` is LL(d). The
engine's loop and its cost are in :mod:`sim.dispatch._general_jobs_kernel`: O(k) per job for
random and JSQ, O(k d) for the batch policies, O(k^2 d) for ``pod_per_task``, O(k d + k
log(k d)) for ``ll_filling``, whatever N. The system starts empty.

Measurements, per job and per task, fixed at the job's arrival and credited to its window,
after the warm-up cut, with batch-means standard errors (``obm`` by default):
``mean_response`` (job: arrival to the last task's completion) and ``mean_response_sq``;
``queueing_ratio`` = (E[T] - E[T*]) / E[T*] with ``E[T*]`` the mean of the largest of ``k``
sizes (:meth:`sim.core.service.ServiceLaw.expected_max`), its SE that of E[T] over E[T*];
``mean_wait`` (per task: arrival to start of service), ``mean_task_response``, ``prob_wait``
(jobs with a task at position >= 2 on arrival), ``mean_queue`` (Little, from the task
responses), ``tail`` (time-average fraction of servers with at least ``i`` tasks),
``messages_per_job`` (a probe is 2 messages: the batch policies and ``ll_filling`` ``2 k d``,
``pod_per_task`` ``2 k^2 d``, ``jsq`` ``2 N k``, random 0, as :mod:`sim.dispatch.policies`
counts).

Not here: a finite buffer ``b``, response-time distributions (the exponential engine reads
them from positions; with general sizes they would come from the measured responses), a
warm start. k-task jobs of the dispatch model's ``general`` engine run here (its runner:
:func:`sim.dispatch.general_run.run_task`).
"""
from __future__ import annotations

import numpy as np

from sim.core.results import is_int, simulation_result
from sim.core.service import ServiceLaw
from sim.core.settings import DEFAULTS, N_WINDOWS
from sim.dispatch import _general_jobs_kernel as _k
from sim.dispatch import _general_kernel as _g
from sim.dispatch.general import check_run, check_system

__all__ = ["GeneralJobsResult", "JOBS_POLICIES", "simulate"]

#: policy name -> kernel code
JOBS_POLICIES: dict[str, int] = {
    "random": _k.RANDOM, "jsq": _k.JSQ, "batch_filling": _k.BATCH_FILLING,
    "batch_sampling": _k.BATCH_SAMPLING, "pod_per_task": _k.POD_PER_TASK,
    "ll_filling": _k.LL_FILLING}

GeneralJobsResult = simulation_result(
    "GeneralJobsResult", "Estimates of one run of the general-size engine for k-task jobs "
    "(times in mean sizes).", {
        "mean_response": "job response (until its last task completes)",
        "mean_response_sq": "mean square job response E[T^2]", "mean_response_sq_se": "",
        "mean_wait": "per task: arrival to start of service", "mean_wait_se": "",
        "mean_task_response": "per task: arrival to completion", "mean_task_response_se": "",
        "prob_wait": "jobs with a task at position >= 2 on arrival", "prob_wait_se": "",
        "queueing_ratio": "(E[T] - E[max of k sizes]) / E[max of k sizes]",
        "queueing_ratio_se": "", "expected_max": "E[max of k sizes] of the law",
        "messages_per_job": "", "service": "the service law (a sim.core.service record)"})


def _capacity(k: int) -> int:
    """The first ring capacity: a power of two >= 16 with room for two jobs of k tasks."""
    c = 16
    while c < 2 * (k + 1):
        c *= 2
    return c


def simulate(n_servers: int, lam: float, policy: str, k: int = 1, d: int = 1,
             jobs: int = 10**6, service: ServiceLaw | None = None, seed: int = DEFAULTS.seed,
             n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level, *,
             n_windows: int = N_WINDOWS, se_method: str = DEFAULTS.se_method) -> GeneralJobsResult:
    """Simulate ``jobs`` job arrivals from an empty system; estimates after the warm-up cut.

    Parameters
    ----------
    n_servers : int     N >= 1 (< 2**31).
    lam : float         load, ``0 < lam < 1`` (tasks per server per unit time; sizes have mean 1).
    policy : str        a name of :data:`JOBS_POLICIES`.
    k : int             tasks per job, ``1 <= k <= N``.
    d : int             probes per task of the sampling policies, ``k d <= N``; else unused.
    jobs : int          job arrivals simulated, warm-up included (>= ``n_windows``).
    service : ServiceLaw or None
                        the size law (:func:`sim.core.service.service_law`); None: exponential.
    seed, n_batches, max_level, n_windows, se_method : run settings (:mod:`sim.core.settings`).

    Memory: rings of ``8 N C`` bytes, ``C`` the power of two above the longest queue seen plus
    ``k`` (at least 16), a permutation of N int64 where ``2 k d > N``, else N int64 sampling
    stamps; for jsq the buckets (3 N int64) and a calendar of about ``32 lam N`` bytes.
    """
    n_servers, lam = check_system(n_servers, lam, policy, JOBS_POLICIES)
    code = JOBS_POLICIES[policy]
    if not is_int(k) or not 1 <= k <= n_servers:
        raise ValueError(f"k={k!r} must be an integer with 1 <= k <= n_servers={n_servers}")
    samples = code in _k.SAMPLING
    if samples and (not is_int(d) or d < 1 or k * d > n_servers):
        raise ValueError(f"d={d!r} must be an integer >= 1 with k*d <= n_servers={n_servers} (k={k})")
    d = int(d) if samples else 1
    service, run = check_run(service, jobs, seed, n_batches, max_level, n_windows, se_method)
    k = int(k)

    m = k * d if samples else 1
    use_fy = samples and 2 * m > n_servers
    rate = lam * n_servers / k  # job arrivals per unit time
    calendar = code == _k.JSQ
    (ring, head, q, clast, samp, perm, pos, start, cal_head, nxt, prv, calb,
     inv_delta) = _g.new_state(n_servers, _capacity(k), calendar, lam * n_servers)
    if not use_fy:
        samp = np.zeros(m, dtype=np.int64)
    mark = np.zeros(n_servers if samples and not use_fy else 1, dtype=np.int64)
    dest = np.zeros(k, dtype=np.int64)
    hkey = np.zeros(m)
    hidx = np.zeros(m, dtype=np.int64)
    ((w_time, w_resp, w_resp2, w_wait, w_tresp), (w_jobs, w_waited, w_tasks), w_tail,
     state, istate, fstate) = _g.new_run(run, 5, 3, 3)
    loop = _k.make_jobs_loop(code)
    law_params = service.params()
    while True:
        hist = np.zeros(ring.shape[1] + 1, dtype=np.int64)
        if loop(k, m, use_fy, rate, service.code, law_params, ring, head, q, clast, samp, mark,
                hist, dest, hkey, hidx, perm, pos, start, cal_head, nxt, prv, calb, inv_delta,
                istate, fstate, run.bounds, state, w_time, w_jobs, w_waited, w_resp, w_resp2,
                w_tasks, w_wait, w_tresp, w_tail):
            break
        ring, start = _g.grow(ring, head, q, start)

    # the windows weigh their time; the queue area is the sum of task responses (Little's law)
    est = run.epilogue(n_servers=n_servers, w_qarea=w_tresp, w_tail=w_tail, jobs=w_jobs,
                       w_time=w_time, ratios={
                           "mean_response": (w_resp, w_jobs), "mean_response_sq": (w_resp2, w_jobs),
                           "mean_wait": (w_wait, w_tasks), "mean_task_response": (w_tresp, w_tasks),
                           "prob_wait": (w_waited, w_jobs)})
    emax = service.expected_max(k)
    probes = {_k.RANDOM: 0, _k.JSQ: n_servers * k, _k.POD_PER_TASK: k * k * d}.get(code, k * d)
    return GeneralJobsResult(
        **est, queueing_ratio=(est["mean_response"] - emax) / emax,
        queueing_ratio_se=est["mean_response_se"] / emax, expected_max=emax,
        messages_per_job=2.0 * probes, service=service)
