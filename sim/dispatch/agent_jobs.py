"""Agent engine for jobs of k tasks: N FIFO servers, one entry per server (the ``agent``
engine's runner is :func:`sim.dispatch.agent.run_task`, which sends every task but single-task
``random`` / ``jsq`` / ``pod`` without a buffer here).

Model (Weng & Wang, "Achieving zero asymptotic queueing delay for parallel jobs", 2020)
-------------------------------------------------------------------------------------
N servers, FIFO, Exp(1) task service. Jobs arrive as a Poisson process of rate ``N * lam / k``;
each job is ``k`` tasks that may run on different servers, and is done when its last task is.
Optional buffer ``b`` per server (the task in service included): if any task of a job would
exceed it, the *whole* job is dropped. Without ``b`` queues are unbounded and ``lam < 1``.

Policies (each is power-of-d when ``k = 1``; ``m = k * d`` queues sampled without replacement):

- ``batch_filling``: sample ``m`` queues, place the tasks one by one, each into the currently
  shortest sampled queue (lengths updated after each placement).
- ``batch_sampling``: sample ``m`` queues, one task to each of the ``k`` shortest.
- ``pod_per_task``: each task samples its own ``m = k * d`` queues and joins the shortest; the
  tasks of a job are placed one after another. (This is the project's registry definition, so
  ``messages_per_job = k * k * d``; the "batch-version pod" of Ying et al. samples d per task.)
- ``random``: each task to a uniform server, independently (tasks may share a server).
- ``jsq``: each task, one after another, to a currently shortest queue (O(1) per task).

Ties are broken uniformly at random (see :mod:`sim.dispatch._agent_jobs_kernel`). Probe messages
per job: batch policies ``k*d``, pod_per_task ``k*k*d``, random 0, jsq ``N*k``.

Simulation
----------
Uniformization as in :mod:`sim.dispatch.agent`: one event stream of rate ``R = N*lam/k + N``; an event is
a job arrival with probability ``(lam/k) / (lam/k + 1)``, else a service token at a uniform
server (wasted if idle). The clock advances by the deterministic step ``1/R`` per event, which
leaves every *mean* exact (see the :mod:`sim.dispatch.agent` docstring); do not read response-time
distributions off the measured times. With ``responses=True`` the *law* of the response time is
recorded exactly instead, from the positions arriving jobs take (no clock involved; mixtures
of Gamma laws, :mod:`sim.core.responses`, docs/responses.md).

Measurements, per job and per task, directly (ring buffers hold each task's job slot; the job
table holds the arrival event and the number of tasks left):

- ``mean_response``: job response = completion event of its last task minus its arrival event,
  times ``1/R``; credited to the window of the job's *arrival*.
- ``mean_wait``: mean over tasks of the time from the job's arrival to the task's start of
  service (0 for a task placed at position 1), measured when the task reaches the head.
- ``mean_task_response`` (result tuple only): mean task sojourn, for Little's law.
- End of run: jobs and tasks still present are credited with elapsed time plus the exact
  expected remaining time given their positions (a job: E[max over its queues of
  Gamma(position of its last task there, 1)], :func:`sim.core.jobdelay.expected_max_gamma`; a task at
  position p waits p - 1 more and stays p more), which removes the finite-run bias.
- ``prob_wait``: fraction of admitted jobs with at least one task at position >= 2 on arrival;
  ``frac_within_h``: admitted jobs whose tasks all take positions <= h (task key ``h``,
  default 1); ``drop_prob``: dropped / arrived jobs (0 without a buffer).
- ``queueing_ratio`` = (E[T] - H_k) / H_k with ``H_k = E[max of k Exp(1)]`` the inherent delay;
  its SE is the batch-means SE of E[T] over H_k.
- ``mean_queue`` and tail ``s_i``: time averages per server (tasks, in service included).

Output analysis as in :mod:`sim.dispatch.agent`: windows of ``2**s`` events, MSER-5 cut on the per-window
mean queue, batch means with ratio estimators.

Initial state (``init``): with ``k = 1`` and no buffer, ``"meanfield"`` draws the queues i.i.d.
from the mean-field fixed point of the policy (power-of-d with ``d`` for the batch policies);
tasks present at time 0 have no known arrival and are not measured. For ``k > 1`` or a finite
buffer there is no fixed point available here, so ``"meanfield"`` starts empty (reported as
``init_used`` in :class:`JobsResult`) and the transient is left to the MSER-5 cut: use runs
long compared with the relaxation time.

Random numbers: two xoshiro256+ streams (events; samples and routing) seeded by
``numpy.random.SeedSequence(seed).generate_state(8)``; bitwise reproducible, and independent of
the internal array capacities (growth never changes the random streams).

Speed (batch-filling, d = 2, lam = 0.9, process CPU time on a shared 2-core machine, whole
``simulate`` call): 24-28 million events/s at N = 10**4 (k = 16: 1.3-1.4 million jobs/s) and
11-14 million at N = 10**6 (k = 16: 0.6 million jobs/s; k = 191: 55-67 thousand jobs/s), where
the loop is bound by memory latency (see :mod:`sim.dispatch._agent_jobs_kernel` for the record
layout and prefetching that get it there). A job costs O(k*d) for the batch policies but O(k*k*d) for
pod_per_task. The end-of-run correction costs ~30 us per job left in the system when its tasks
sit deep in queues (random routing near lam = 1: seconds at N = 10**5), and is negligible
otherwise.

A law worth knowing when testing: under ``random`` routing with k > 1 the tasks of a job may
share a server, so each server is an M^X/M/1 queue (batches Binomial(k, 1/N)), with mean length
``lam (1 + (k - 1) / (2 N)) / (1 - lam)``, not the M/M/1 value (tests/dispatch/test_agent_jobs.py).
"""
from __future__ import annotations

import numpy as np

from sim.core.fifo import draw_initial_queues
from sim.core.jobdelay import GL_W, GL_X, harmonic
from sim.core.results import simulation_result, simulation_row
from sim.core.rng import threshold
from sim.core.settings import DEFAULTS, N_WINDOWS, RunSettings, task_int
from sim.core.skeleton import Run
from sim.dispatch import MODEL
from sim.dispatch import _agent_jobs_kernel as _k
from sim.dispatch.meanfield.pod import initial_tail
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import policy_of, served_by

__all__ = ["JobsResult", "simulate", "run_jobs", "place_job", "assign_tasks",
           "JOBS_POLICIES"]

#: policies this engine serves under their own code (power-of-d runs as batch-filling, k = 1)
JOBS_POLICIES: tuple[str, ...] = served_by("agent", lambda p: not p.jobs_as)


#: estimates of one k-task-job agent run (times in the model's time unit)
JobsResult = simulation_result("JobsResult", "Estimates of one k-task-job agent run (times in the model's time unit).", {
    "mean_response": "job response (until its last task completes)",
    "mean_wait": "per task: arrival to start of service", "mean_wait_se": "",
    "mean_task_response": "per task: arrival to completion", "mean_task_response_se": "",
    "prob_wait": "admitted jobs with a task at position >= 2", "prob_wait_se": "",
    "frac_within_h": "admitted jobs with every task at position <= h", "frac_within_h_se": "",
    "drop_prob": "dropped / arrived jobs", "drop_prob_se": "", "queueing_ratio": "", "queueing_ratio_se": "", "messages_per_job": "",
    "n_arrivals": "jobs arrived after the cut (admitted or dropped)",
    "init_used": '"meanfield" or "empty"'})


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _check_policy(policy):
    if policy not in JOBS_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by sim.dispatch.agent_jobs; valid: "
                         f"{', '.join(JOBS_POLICIES)} (pod: sim.dispatch.agent)")
    return policy_record(policy)


def _check_b(b) -> int:
    if b is None:
        return int(_k.UNBOUNDED)
    return MODEL.checked(b=b)[0]


def place_job(q, policy: str, k: int, d: int = 1, b: int | None = None, seed=DEFAULTS.seed, state=None):
    """Where one job's ``k`` tasks go under ``policy`` given queue lengths ``q`` (the engine's
    own plan code, random sample and ties included; for tests on hand-built states).

    Returns the number of tasks each server receives (int array of length N), or ``None`` if
    the buffer ``b`` drops the job. ``state`` (uint64[4], advanced in place) overrides ``seed``.
    """
    pol = _check_policy(policy)
    q = np.ascontiguousarray(q, dtype=np.int64)
    if q.ndim != 1 or q.size < 1 or q.min() < 0:
        raise ValueError("q must be a non-empty 1-D array of non-negative lengths")
    (k,) = MODEL.checked(k=k)
    if pol.samples:
        (d,) = MODEL.checked(d=d)
    m = int(pol.sample_size(k, d))
    if pol.samples and m > q.size:
        raise ValueError(f"d={d!r} must be an integer >= 1 with k*d <= N={q.size}")
    bb = _check_b(b)
    if state is None:
        state = np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)
    placed, dest = _k.plan_job(q, pol.code, int(k), m, np.int64(bb), state)
    if placed < 0:
        return None
    return np.bincount(dest, minlength=q.size)


def assign_tasks(policy: str, lengths, k: int, b: int | None = None):
    """Batch-filling / batch-sampling of ``k`` tasks into sampled queues of the given
    ``lengths``, listed in sample order (deterministic: a tie goes to the queue listed first;
    the engine draws samples in uniformly random order, so its ties are uniform).

    Returns the number of tasks each sampled queue receives, or ``None`` if dropped by ``b``.
    """
    pol = policy_record(policy)
    if not pol.batch:
        raise ValueError(f"policy={policy!r} must be batch_filling or batch_sampling")
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or lengths.size < 1 or lengths.min() < 0:
        raise ValueError("lengths must be a non-empty 1-D array of non-negative lengths")
    (k,) = MODEL.checked(k=k)
    if not pol.fills and k > lengths.size:
        raise ValueError(f"k={k!r} must be <= len(lengths) for batch_sampling")
    bb = _check_b(b)
    placed, dest = _k.batch_plan_given_sample(lengths, pol.code, int(k), np.int64(bb))
    if placed < 0:
        return None
    return np.bincount(dest, minlength=lengths.size)


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(n_servers: int, lam: float, policy: str, k: int = 1, d: int = 1,
             b: int | None = None, h: int = DEFAULTS.h, events: int = 10**6, seed: int = DEFAULTS.seed,
             init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level, *,
             n_windows: int = N_WINDOWS, responses: bool = DEFAULTS.responses,
             se_method: str = DEFAULTS.se_method) -> JobsResult:
    """Simulate parallel jobs and return batch-means estimates after an MSER-5 warm-up cut.

    Parameters
    ----------
    n_servers : int
        N >= 1 (< 2**31).
    lam : float
        Load per server, > 0: job arrival rate ``N * lam / k``. Without a buffer ``lam < 1``.
    policy : str
        ``batch_filling``, ``batch_sampling``, ``pod_per_task``, ``random`` or ``jsq``.
    k : int
        Tasks per job, 1 <= k <= N.
    d : int
        Probes per task of the sampling policies (k*d <= N); ignored by random and jsq.
    b : int or None
        Buffer per server (task in service included), >= 1; None: unbounded.
    h : int
        Position threshold of ``frac_within_h`` (>= 1).
    events : int
        Uniformized events, warm-up included (>= n_windows).
    seed, n_batches, max_level, n_windows : int
        Run settings (:mod:`sim.core.settings`; ``n_windows``, keyword only, >= ``2 * n_batches``).
    init : str
        ``"meanfield"`` (only with k = 1 and no buffer; otherwise the system starts empty) or
        ``"empty"``.
    responses : bool
        Record the response-time distribution (keyword only; docs/responses.md): each admitted
        job's signature (the positions of its last task in each of its distinct queues) per
        window, by a separately compiled loop; the quantiles and CCDF are in ``responses``
        of the result. Uses no random number: every other estimate is bitwise the same.

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter.

    Notes
    -----
    Memory: one record of ``W`` int32 per server (``W`` = 16 while every queue stays <= 12
    tasks, doubled whenever a queue outgrows its ring: 64 MB at N = 10**6 for short queues,
    but about 1 GB for random routing at lam = 0.9 where the longest of 10**6 queues passes
    100), the job table (16 bytes per job slot), a permutation of N int64 when ``2*k*d > N``
    (partial Fisher-Yates) and the JSQ buckets (3 N int64).
    """
    # ---- validation: the model's values, then the run settings (sim.core.skeleton)
    pol = _check_policy(policy)
    n_servers, k, lam = MODEL.checked(n_servers=n_servers, k=k, lam=lam)
    if pol.samples:
        (d,) = MODEL.checked(d=d)
    if n_servers >= 2**31:
        raise ValueError(f"n_servers={n_servers!r} must be < 2**31")
    if k > n_servers:
        raise ValueError(f"k={k!r} must not exceed n_servers={n_servers}")
    if pol.samples and (d is None or k * d > n_servers):
        raise ValueError(f"d={d!r} must be an integer >= 1 with k*d <= n_servers="
                         f"{n_servers} (k={k})")
    d = pol.probe_d(d)
    bb = _check_b(b)
    if lam == 0.0:
        raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
    if b is None and lam >= 1.0:
        raise ValueError(f"lam={lam!r} must be < 1 without a buffer b")
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, h=h, responses=responses, se_method=se_method)
    d = int(d)
    code, m = pol.code, pol.sample_size(k, d)

    # ---- set-up: the start from the seed, the job table, the windows
    job_rate = lam / k  # per server
    rate = n_servers * (job_rate + 1.0)
    dt = 1.0 / rate
    p_arrival = threshold(job_rate / (job_rate + 1.0))
    # two xoshiro256+ streams: events (state[:4]) and decisions (state[4:])
    state = run.xoshiro(8)
    init_used = "meanfield" if (run.init == "meanfield" and k == 1 and b is None) else "empty"
    if init_used == "meanfield":
        # k = 1: a sampling policy's fixed point is power-of-d's
        q = draw_initial_queues(initial_tail(lam, pol, d), n_servers, state[4:])
    else:
        q = np.zeros(n_servers, dtype=np.int64)
    width = _k.RECORD  # server record width: ring capacity width - RING0, grown as needed
    while width - _k.RING0 < int(q.max()):
        width *= 2
    srv = _k.new_servers(q, width)
    # job slots: about (jobs in system) = N * lam / k * E[T]; grown as needed
    slots = 1024
    while slots < 1.25 * n_servers * job_rate * (harmonic(k) + 1.0):
        slots *= 2
    jobtab = np.zeros(2 * slots, dtype=np.int64)
    w_arr, w_drop, w_adm, w_waited, w_within = (run.zeros() for _ in range(5))
    w_jobs, w_tasks, w_starts, w_qarea = (run.zeros() for _ in range(4))
    w_resp, w_tresp, w_wait = (run.zeros(float) for _ in range(3))
    w_tail = run.tail_zeros()
    rec = run.recorder(k)

    # ---- the kernel
    srv, jobtab = _k.agent_jobs_kernel(
        code, k, m, bb, run.h, p_arrival, srv, jobtab, run.bounds, state,
        w_arr, w_drop, w_adm, w_waited, w_within, w_jobs, w_resp, w_tasks, w_tresp,
        w_starts, w_wait, w_qarea, w_tail, rec)
    _k.close_censored(srv, jobtab, rate, run.bounds, w_jobs, w_resp, w_tasks, w_tresp,
                      w_starts, w_wait, GL_X, GL_W)

    # ---- epilogue
    est = run.epilogue(n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, jobs=w_jobs, dt=dt,
                       rec=rec, k=k, ratios={
                           "mean_response": (w_resp * dt, w_jobs),
                           "mean_wait": (w_wait * dt, w_starts),
                           "mean_task_response": (w_tresp * dt, w_tasks),
                           "prob_wait": (w_waited, w_adm), "frac_within_h": (w_within, w_adm),
                           "drop_prob": (w_drop, w_arr)})
    hk = harmonic(k)
    return JobsResult(
        **est, queueing_ratio=(est["mean_response"] - hk) / hk,
        queueing_ratio_se=est["mean_response_se"] / hk,
        messages_per_job=pol.messages(n_servers, k, d),
        n_arrivals=int(w_arr[est["warmup_windows"]:].sum()), init_used=init_used,
    )


def run_jobs(task: dict) -> dict:
    """Run one agent task of k-task jobs, a finite buffer or a batch policy (keys as in
    docs/results-schema.md; reached through :func:`sim.dispatch.agent.run_task`, which checks
    the ``responses`` setting first) and return :data:`RESULT_KEYS` as plain Python values, with
    the response columns (:data:`sim.core.responses.RESPONSE_COLUMNS`) if ``responses`` is set.
    ``pod`` with a finite buffer runs as batch-filling with ``k = 1`` (the same model)."""
    pol = policy_of(task)
    settings = RunSettings.from_task(task)
    if pol.jobs_as:  # power-of-d with a finite buffer: batch-filling with k = 1, the same model
        pol = policy_record(pol.jobs_as)
    if task.get("service_rates") is not None:
        raise ValueError("service_rates: unequal service rates are not supported for k-task "
                         "jobs or a finite buffer b (sim.dispatch.agent_jobs); use null")
    res = simulate(
        n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=pol.name,
        k=task_int(task, "k", 1), d=pol.probe_d(task_int(task, "d", 1)),
        b=task_int(task, "b"), events=task_int(task, "events"), **settings.arguments(simulate))
    return simulation_row(res)
