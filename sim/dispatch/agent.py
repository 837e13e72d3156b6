"""Agent engine: continuous-time simulation of N FIFO servers, one entry per server.

This module is the engine's runner (:func:`run_task`): single-task ``random``, ``jsq`` and
``pod`` without a buffer run on the simulator below, every other task (k-task jobs, a finite
buffer, the batch policies) on :mod:`sim.dispatch.agent_jobs`.

Model
-----
N servers with FIFO queues; Poisson arrivals of total rate ``lam * sum(mu)``; exponential service
at rate ``mu[n]`` at server ``n`` (all 1 by default). Each job is one task, routed on arrival by
the policy: ``random`` (uniform server), ``jsq`` (uniform among the shortest queues, O(1) per job
from a bucket sort of the servers by queue length) or ``pod`` (power-of-d: ``d`` distinct queues
sampled without replacement, join the shortest, ties uniformly at random). With unequal rates
JSQ and pod still compare queue lengths.

Simulation by uniformization (no event heap): a single event stream of total rate
``R = lam * sum(mu) + sum(mu)``; an event is an arrival with probability ``lam / (1 + lam)``,
else a service token at server ``n`` with probability ``mu[n] / sum(mu)`` (uniform, or an alias
table for unequal rates); a token at an idle server is wasted.

Clock: time advances by the deterministic mean step ``1 / R`` per event instead of an
``Exp(R)`` draw. The inter-event times of a uniformized chain are i.i.d. and independent of the
jump chain, so every *mean* is unchanged: a job whose completion comes ``K`` events after its
arrival has ``E[response | jump chain] = K / R`` (Wald's identity), and a time average equals the
average over events of the state. Only the spread of individual response times is not the
model's, so do not read response-time distributions off the measured times. Arrival times are
stored as event indices and converted to time at the end. With ``responses=True`` the *law* of the
response time is recorded instead from the queue position each arrival takes (with FIFO and
Exp(1) service a task at position ``p`` is done after ``Gamma(p, 1)``; the law is the mixture over
the recorded positions, :mod:`sim.core.responses`, docs/responses.md), which needs no clock;
equal unit service rates only.

Measurements (after the warm-up cut): mean response and mean wait (measured directly per job from
per-server FIFO ring buffers of arrival times; a response is recorded when the job completes, a
wait when it reaches the head of its queue, each credited to the window in which the job
*arrived*; the jobs still in the system at the end are credited with their elapsed time plus
their exact expected remaining time given their position, which removes the bias against long
responses that a finite run would otherwise have -- see :func:`sim.core.fifo.close_censored`), probability of waiting (the chosen server was busy
on arrival), time-average queue length per server, tail fractions ``s_i`` (time-average fraction
of servers with at least ``i`` tasks), probe messages per job (random 0, pod d, jsq N). Jobs
present at time 0 (warm start) have unknown arrival times and are not recorded.

Output analysis: the run is split into at least ``n_windows`` windows of ``2**k`` events with
per-window accumulators; the warm-up is cut by MSER-5 on the per-window mean queue length
(:func:`sim.core.output.mser5`), and the remaining windows are grouped into ``n_batches`` contiguous
batches for batch-means standard errors with ratio estimators (:func:`sim.core.output.batch_means`).

Random numbers: xoshiro256+ seeded with ``numpy.random.SeedSequence(seed).generate_state(4,
numpy.uint64)``: results are bitwise reproducible for a given seed and inputs.
"""
from __future__ import annotations

import numpy as np

from sim.core.fifo import close_censored, draw_initial_queues, new_rings
from sim.core.results import simulation_result, simulation_row
from sim.core.rng import threshold
from sim.core.sampling import alias_table
from sim.core.settings import DEFAULTS, N_WINDOWS, RunSettings, task_int
from sim.core.skeleton import Run
from sim.dispatch import MODEL, agent_jobs
from sim.dispatch import _agent_kernel as _k
from sim.dispatch.meanfield.pod import initial_tail
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import policy_of, served_by

__all__ = ["AgentResult", "simulate", "run_task", "AGENT_POLICIES"]

#: single-task policies of this engine (the batch policies run on sim.dispatch.agent_jobs)
AGENT_POLICIES = served_by("agent", lambda p: not p.k_task)

#: the keys :func:`run_task` returns (docs/results-schema.md; ``wall_time`` is added by sim.run)


#: estimates of one agent run (times in the model's time unit)
AgentResult = simulation_result("AgentResult", "Estimates of one agent run (times in the model's time unit).", {
    "mean_wait": "", "mean_wait_se": "", "prob_wait": "", "prob_wait_se": "", "messages_per_job": ""})


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(n_servers: int, lam: float, policy: str, d: int = 1, events: int = 10**6,
             seed: int = DEFAULTS.seed, init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level,
             service_rates=None, *, n_windows: int = N_WINDOWS,
             responses: bool = DEFAULTS.responses, se_method: str = DEFAULTS.se_method) -> AgentResult:
    """Simulate the agent engine and return batch-means estimates after an MSER-5 warm-up cut.

    Parameters
    ----------
    n_servers : int
        N >= 1.
    lam : float
        Load, 0 <= lam < 1: the total arrival rate is ``lam * sum(service_rates)``.
    policy : str
        ``"random"``, ``"jsq"`` or ``"pod"``.
    d : int
        Sample size of ``pod`` (1 <= d <= N); ignored by the other policies.
    events : int
        Uniformized events to simulate, warm-up included (>= n_windows).
    seed, n_batches, max_level, n_windows : int
        Run settings (:mod:`sim.core.settings`; ``n_windows``, keyword only, >= ``2 * n_batches``).
    init : str
        ``"meanfield"``: queue lengths i.i.d. from the mean-field fixed point of the policy
        (``P(Q >= i) = s_i``); with unequal service rates there is no such point here and the
        system starts empty. ``"empty"``: all queues empty.
    service_rates : array_like or None
        Per-server service rates (length N, finite, > 0); None means all 1. JSQ and pod still
        compare queue lengths. Stability is not checked (random routing needs
        ``lam * mean(mu) < min(mu)``).

    responses : bool
        Record the response-time distribution (keyword only; docs/responses.md): each arrival's
        queue position, per window, by a separately compiled loop; the quantiles and CCDF are in
        ``responses`` (and every other estimate is bitwise the one of a run without it).
        Requires all service rates equal to 1 (``service_rates`` None or all ones).

    Returns
    -------
    AgentResult

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter; with ``responses`` and a service rate
        other than 1.

    Notes
    -----
    Memory: the arrival-time ring buffers take ``4 * N * C`` bytes (``8 * N * C`` for runs of
    more than 2**31 events), ``C`` the smallest power of two above the longest queue seen: about
    320 KB (C = 8) for N = 10**4 under power-of-2 at lam = 0.9, but gigabytes for random routing
    with N = 10**4 near lam = 1 (queues of thousands).

    Compilation: one event loop per (policy, pod sampling method, equal/unequal rates) is compiled
    on first use and cached on disk (see :mod:`sim.dispatch._agent_kernel`).
    """
    # ---- validation: the model's values, then the run settings (sim.core.skeleton)
    n_servers, lam = MODEL.checked(n_servers=n_servers, lam=lam)
    if n_servers >= 2**31:
        raise ValueError(f"n_servers={n_servers!r} must be < 2**31")
    if lam >= 1.0:
        raise ValueError(f"lam={lam!r} must be < 1 (queues are unbounded)")
    if policy not in AGENT_POLICIES:
        raise ValueError(f"policy={policy!r} is unknown; valid: {', '.join(AGENT_POLICIES)}")
    pol = policy_record(policy)
    if pol.samples:
        (d,) = MODEL.checked(d=d)
        if d > n_servers:
            raise ValueError(f"d={d!r} must not exceed n_servers={n_servers} (sampling without replacement)")
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, responses=responses, se_method=se_method)
    if service_rates is None:
        mu = np.ones(n_servers)
    else:
        MODEL.check_values(service_rates=service_rates)
        mu = np.asarray(service_rates, dtype=np.float64)
        if mu.shape != (n_servers,):
            raise ValueError(
                f"service_rates must have length n_servers={n_servers}, got shape {mu.shape}")
    if run.responses and np.any(mu != 1.0):
        # a task at position p of a queue of rate mu takes Gamma(p, mu): not the Gamma(p, 1)
        # mixture of sim.core.responses
        raise ValueError("responses: the response-time distribution is recorded for unit "
                         "service rates only (service_rates must be null or all 1)")
    code, d = pol.code, pol.probe_d(int(d))

    # ---- set-up: the start from the seed, the windows
    hetero = bool(np.any(mu != mu[0]))
    rate = (1.0 + lam) * float(mu.sum())
    dt = 1.0 / rate
    p_arrival = threshold(lam / (1.0 + lam))
    if hetero:
        alias_thr, alias_idx = alias_table(mu / mu.sum())
    else:
        alias_thr = np.zeros(1, dtype=np.uint64)
        alias_idx = np.zeros(1, dtype=np.int64)
    state = run.xoshiro()
    if run.init == "meanfield" and not hetero:
        q = draw_initial_queues(initial_tail(lam, pol, d), n_servers, state)
    else:
        q = np.zeros(n_servers, dtype=np.int64)
    buf, head = new_rings(q, run.events)
    w_jobs, w_starts, w_arr, w_waited, w_qarea, w_probes = (run.zeros() for _ in range(6))
    w_resp, w_wait = run.zeros(float), run.zeros(float)
    w_tail = run.tail_zeros()
    rec = run.recorder()

    # ---- the kernel
    buf = _k.agent_kernel(code, d, 2 * d > n_servers, p_arrival, hetero, alias_thr, alias_idx,
                    q, buf, head, run.bounds, state,
                    w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail, w_probes,
                    rec)
    close_censored(q, buf, head, mu, rate, run.bounds, w_jobs, w_resp, w_starts, w_wait)

    # ---- epilogue
    est = run.epilogue(n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, jobs=w_jobs, dt=dt,
                       rec=rec, ratios={
                           "mean_response": (w_resp * dt, w_jobs),
                           "mean_wait": (w_wait * dt, w_starts), "prob_wait": (w_waited, w_arr)})
    cut = est["warmup_windows"]
    n_arr = int(w_arr[cut:].sum())
    # one-way messages: a probe is a request and a reply (sim.dispatch.policies)
    messages = (2.0 * float(w_probes[cut:].sum() / n_arr) if n_arr > 0
                else pol.messages(n_servers, 1, d))
    return AgentResult(**est, messages_per_job=messages)


def run_task(task: dict) -> dict:
    """Run one agent task of the dispatch model (keys as in docs/results-schema.md) and return
    :data:`RESULT_KEYS` as plain Python values (``wall_time`` is added by :func:`sim.run`): the
    runner of every ``agent`` entry.

    ``random``, ``jsq`` and ``pod`` with ``k = 1`` and no buffer run on the single-task engine
    of this module (:func:`simulate`: faster, and it supports ``service_rates``; it reports
    ``frac_within_h`` only for ``h = 1``); every other task (k-task jobs, a finite buffer
    ``b``, the batch policies) on :func:`sim.dispatch.agent_jobs.simulate`.

    With the run setting ``responses: true`` (task key ``responses``) the response-time
    distribution is recorded and its columns (:data:`sim.core.responses.RESPONSE_COLUMNS`) are
    added to the row, by either engine (equal service rates only).
    """
    k = task_int(task, "k", 1)
    b = task_int(task, "b")
    settings = RunSettings.from_task(task)
    if settings.responses and task.get("service_rates") is not None:
        raise ValueError("responses: the response-time distribution is recorded for equal "
                         "service rates only (service_rates must be null)")
    if policy_of(task).single_task_agent(k, b):
        return _single_task_row(task, settings)
    return agent_jobs.run_jobs(task)


def _single_task_row(task: dict, settings: RunSettings | None = None) -> dict:
    """The row of a single-task ``random`` / ``jsq`` / ``pod`` task without a buffer."""
    settings = settings or RunSettings.from_task(task)
    pol = policy_of(task)
    res = simulate(
        n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=pol.name,
        d=pol.probe_d(task_int(task, "d", 1)), events=task_int(task, "events"),
        service_rates=task.get("service_rates"), **settings.arguments(simulate))
    # single-task jobs: inherent delay H_1 = 1; no buffer; position <= 1 iff no wait
    return simulation_row(
        res,
        queueing_ratio=float(res.mean_response) - 1.0,
        queueing_ratio_se=float(res.mean_response_se),
        drop_prob=0.0, drop_prob_se=0.0,
        frac_within_h=float(1.0 - res.prob_wait) if settings.h == 1 else None,
    )
