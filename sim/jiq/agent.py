"""Agent engine of distributed Join-the-Idle-Queue: one entry per server and per I-queue.

Model: see :mod:`sim.jiq` (N FIFO servers with Exp(1) service, M = N / r schedulers each with
an I-queue of idle servers; policies ``jiq``, ``jiq_pod``, ``jiq_original``, ``jiq_threshold``,
``jiq_sqd``).

Simulation (as the dispatch model's agent engine, :mod:`sim.dispatch.agent`): uniformization,
one event stream of total rate ``R = (1 + lam) N``; an event is an arrival (at a uniform
scheduler) with probability ``lam / (1 + lam)``, else a service token at a uniform server,
wasted when the server is idle. Time advances by the deterministic step ``1 / R`` per event: the
inter-event times of a uniformized chain are i.i.d. and independent of the jump chain, so every
*mean* is unchanged (Wald), but response-time *distributions* are not the model's.

Per event O(1) (O(d) for the probes), whatever N and M: servers have FIFO ring buffers of
arrival times (:mod:`sim.core.fifo`); I-queues are rows of a flat array with a position index
``where[n]``, so a join, a delete and a uniform draw are each O(1)
(:mod:`sim.jiq._agent_kernel`). Under jiq, jiq_pod and jiq_sqd, whose listed servers are all
idle, a scheduler sends a task to the last member of its I-queue rather than a uniformly drawn
one: the law of everything measured is the same (the kernel's docstring gives the argument;
tests compare it with jiq_threshold at z = 0, which draws uniformly). Memory: ``4 N C`` bytes
of ring buffers (int32 arrival stamps, int64 for runs of more than 2**31 events, or when the
I-queue slots coded in the idle servers' rings would not fit int32; ``C`` a power of two
above the longest queue seen:
C = 32 for jiq at lam = 0.9, N = 10**6, whose queues reach 16, C = 8 for jiq_pod) and ``4 M K``
bytes of I-queue rows (``K`` a power of two above the longest I-queue ever seen, at least 8),
plus a few arrays of N and M entries: about 180 MB for jiq at N = 10**6, r = 10.

Any number of schedulers ``M >= 1`` is simulated literally; nothing assumes ``M`` large. ``M =
1`` (``r = N``) is Stolyar's centralized JIQ (the one I-queue lists every idle server; a task
waits only when all servers are busy); ``M > N`` (``r < 1``) is allowed. The mean-field limit
(:mod:`sim.jiq.meanfield`) is for ``M -> infinity`` with ``r`` fixed, so for small ``M`` it
is only a warm start, and a poor one (e.g. ``p0`` is then the chance that one of few I-queues
is empty): the warm-up cut handles the rest.

Measurements, after the warm-up cut (``batch_means``: the larger of the MSER-5 cuts on the
per-window mean queue length and on the per-window fraction of empty I-queues, the two slow
modes of this model; ``obm``: the first tenth of the run, sim.core.output),
batch means with standard errors. Near lam = 1 the I-queue sizes relax slowly: from empty at
lam = 0.98, r = 10 the mean field itself needs t > 800 to settle, and MSER-5 may cut at most
half the run, so a run of 1000 time units from empty read T = 4.96 +- 0.03 against 5.39 (N =
1000; 5.39-5.56 from the warm start or with 3000+ time units): start from the mean field
(the default) or run many relaxation times, and heed a "batches correlated" warning in
``ci_method``.

- ``mean_response``, ``mean_wait``: measured per task from the ring buffers, credited to the
  window of the task's arrival; tasks still present at the end are closed without bias by
  :func:`sim.core.fifo.close_censored`; tasks present at time 0 are not recorded;
- ``prob_wait``: fraction of tasks sent to a busy server;
- ``mean_queue`` (tasks per server), ``tail`` ``s_i`` with ``tail_se``: time averages;
- ``p0``: time-average fraction of empty I-queues, estimated by sampling one I-queue per
  event, drawn independently of the state (unbiased; its sampling noise adds at most about 3%
  to the SE: :mod:`sim.jiq._agent_kernel`); ``mean_iqueue``: time-average mean I-queue
  length (listed servers / M; equal to ``r (1 - s_1)`` under jiq, jiq_pod, jiq_sqd, where the
  listed servers are exactly the idle ones);
- ``join_rate``, ``delete_rate``, ``probe_rate``: one-way messages per server per unit time
  (a probe is 2: request and reply; a join or a delete 1); ``messages_per_job``: all messages
  per task.

Warm start (``init="meanfield"``): server queue lengths i.i.d. from the mean-field tail of the
policy (:func:`sim.jiq.meanfield.fixed_point`; ``jiq_original`` and ``jiq_threshold`` use
jiq's), I-queue lengths i.i.d. from its I-queue size law, made consistent with the servers: the
listed servers are exactly the idle ones (the sizes are trimmed by removing uniformly random
listed slots, or topped up by joins by the policy's own rule, until they add up to the number
of idle servers; the idle servers are then placed in the slots in random order). Under
``jiq_threshold`` with ``z > 0`` the servers with ``1..z`` tasks then join uniform I-queues.
``lam = 0`` has no mean-field point here and starts empty (which is then the fixed point).
For ``r > 10**4`` (e.g. ``M = 1`` with large N) computing the mean-field point costs too much
memory, and the start is its ``r -> infinity`` limit: ``s_1 = lam``, ``s_2 = 0`` (``p0 -> 0``),
the idle servers joining by the policy's rule (``init_used = "large_r_limit"``).
``init="empty"``: all servers idle and listed, each having joined an I-queue by the policy's
join rule (uniform; jiq_sqd: shortest of ``d``). Reproducible: xoshiro256+ seeded from
``SeedSequence(seed)``, set-up shuffles from a spawned child of it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core.fifo import close_censored, draw_initial_queues, new_rings
from sim.core.output import LEGACY_SE_METHOD, warmup_cut
from sim.core.results import simulation_result, simulation_row
from sim.core.rng import threshold
from sim.core.settings import DEFAULTS, N_WINDOWS, RunSettings, task_int
from sim.core.skeleton import Run
from sim.jiq import SIM_COLUMNS, check_task, n_schedulers
from sim.jiq import _agent_kernel as _k
from sim.jiq.policies import POLICIES
from sim.jiq.policies import policy as policy_record

__all__ = ["JiqAgentResult", "simulate", "run_task", "EXTRA_KEYS"]

#: keys :func:`run_task` returns beyond :data:`sim.core.results.RESULT_KEYS`
EXTRA_KEYS = tuple(SIM_COLUMNS)

#: mean-field tail levels below this are treated as empty in the warm start
_TAIL_EPS = 1e-17

#: above this r the warm start uses the r -> infinity limit instead of the mean-field point
#: (measured: fixed_point takes 0.1 s at r = 10**4 and ran out of memory at r = 10**6, with an
#: I-queue size law of ~ r + 10 sqrt(r / p0) entries)
_MF_MAX_R = 1e4


#: estimates of one JIQ agent run (times in the model's unit, rates per server per unit)
JiqAgentResult = simulation_result("JiqAgentResult", "Estimates of one JIQ agent run (times in the model's unit, rates per server per unit).", {
    "mean_wait": "", "mean_wait_se": "", "prob_wait": "fraction of tasks sent to a busy server", "prob_wait_se": "",
    **SIM_COLUMNS,
    "messages_per_job": "all messages per task", "messages_per_job_se": "",
    "n_jobs": "tasks whose response was measured after the warm-up cut",
    "n_schedulers": "M = N / r",
    "init_used": 'what the run started from: "meanfield", "large_r_limit" or "empty"'})


class _State(NamedTuple):
    """Final state of a run (for invariant checks in tests)."""

    q: np.ndarray
    iq: np.ndarray
    isize: np.ndarray
    where: np.ndarray
    kshift: int
    ctr: np.ndarray


# --------------------------------------------------------------------------------------------
# initial state
# --------------------------------------------------------------------------------------------
def _meanfield_point(policy: str, lam: float, r: float, d: int):
    """The mean-field fixed point used for the warm start (jiq's for jiq_original and
    jiq_threshold), with enough levels that the tail is below ``_TAIL_EPS``; None if the mean
    field is unavailable (module missing) or undefined (lam = 0)."""
    try:
        from sim.jiq import meanfield as mf
    except ImportError:
        return None
    if lam <= 0.0:
        return None
    pol = policy_record(policy)
    mf_policy = POLICIES[pol.warm_start] if pol.warm_start else pol
    mf_d = mf_policy.probe_d(d)
    levels = 256
    while True:
        fp = mf.fixed_point(mf_policy.name, lam, r, mf_d, max_level=levels)
        if fp.tail[-1] < _TAIL_EPS or levels >= 1 << 22:
            return fp
        levels *= 8


def _initial_state(policy: str, code: int, lam: float, n_servers: int, n_sched: int, r: float,
                   d: int, z: int, init: str, state: np.ndarray, rng: np.random.Generator):
    """Queues and I-queues to start from: ``(q, iq, isize, where, kshift, init_used)``."""
    sqd = code == _k.JIQ_SQD
    large_r = init == "meanfield" and lam > 0.0 and r > _MF_MAX_R
    fp = (_meanfield_point(policy, lam, r, d) if init == "meanfield" and not large_r
          else None)
    if large_r:
        # r -> infinity: p0 -> 0, so s_1 = lam and s_2 = lam p0 -> 0: a fraction lam of the
        # servers hold one task, the idle ones join by the policy's rule
        init_used = "large_r_limit"
        q = draw_initial_queues(np.array([lam]), n_servers, state)
        isize = np.zeros(n_sched, dtype=np.int64)
        _k.initial_joins(isize, int(np.sum(q == 0)), d, sqd, state)
    elif fp is None:
        init_used = "empty"
        q = np.zeros(n_servers, dtype=np.int64)
        isize = np.zeros(n_sched, dtype=np.int64)
        _k.initial_joins(isize, n_servers, d, sqd, state)
    else:
        init_used = "meanfield"
        tail = np.asarray(fp.tail, dtype=np.float64)
        q = draw_initial_queues(np.ascontiguousarray(tail[tail >= _TAIL_EPS]), n_servers, state)
        pmf = np.clip(np.asarray(fp.iqueue_pmf, dtype=np.float64), 0.0, None)
        ptail = np.minimum(np.cumsum(pmf[::-1])[::-1][1:] / pmf.sum(), 1.0)  # P_j, j >= 1
        isize = draw_initial_queues(np.ascontiguousarray(ptail), n_sched, state)
        n_idle = int(np.sum(q == 0))
        excess = int(isize.sum()) - n_idle
        if excess > 0:  # remove uniformly random listed slots
            owners = np.repeat(np.arange(n_sched), isize)
            drop = rng.choice(owners.size, excess, replace=False)
            isize -= np.bincount(owners[drop], minlength=n_sched)
        elif excess < 0:  # the missing idle servers join by the policy's rule
            _k.initial_joins(isize, -excess, d, sqd, state)
    listed = np.flatnonzero(q == 0)
    if code == _k.JIQ_THRESHOLD and z > 0:
        extra = np.flatnonzero((q >= 1) & (q <= z))
        _k.initial_joins(isize, extra.size, 1, False, state)
        listed = np.concatenate((listed, extra))
    assert int(isize.sum()) == listed.size
    kshift = _k.capacity_shift(int(isize.max()))
    owners = np.repeat(np.arange(n_sched, dtype=np.int64), isize)
    offsets = np.concatenate(([0], np.cumsum(isize)[:-1]))
    slots = (owners << kshift) + (np.arange(owners.size) - offsets[owners])
    servers = rng.permutation(listed)
    iq = np.zeros(n_sched << kshift, dtype=np.uint32)
    iq[slots] = servers
    where = np.full(n_servers, -1, dtype=np.int64)
    where[servers] = slots
    return q, iq, isize, where, kshift, init_used


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(n_servers: int, lam: float, policy: str, r: float, d: int = 1, z: int = 0,
             events: int = 10**6, seed: int = DEFAULTS.seed, init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches,
             max_level: int = DEFAULTS.max_level, *, n_windows: int = N_WINDOWS,
             responses: bool = DEFAULTS.responses, se_method: str = DEFAULTS.se_method) -> JiqAgentResult:
    """Simulate the JIQ agent engine; batch-means estimates after the warm-up cut.

    The state is every server's queue and every scheduler's I-queue of idle servers, in
    uniformized time (see the module docstring; any number M = N / r of schedulers).

    Parameters
    ----------
    n_servers : int
        N >= 1.
    lam : float
        Load per server, 0 <= lam < 1 (total arrival rate ``lam * N``).
    policy : str
        ``"jiq"``, ``"jiq_pod"``, ``"jiq_original"``, ``"jiq_threshold"`` or ``"jiq_sqd"``.
    r : float
        Servers per scheduler, > 0 with ``N / r`` a positive integer (the number M of
        schedulers; ``r = N`` is one central I-queue).
    d : int
        jiq_pod: servers probed when the I-queue is empty (1 <= d <= N); jiq_sqd: I-queues
        sampled by a server becoming idle (1 <= d <= M); ignored by the other policies.
    z : int
        jiq_threshold: servers with at most ``z`` tasks are listed (z >= 0); ignored otherwise.
    events : int
        Uniformized events to simulate, warm-up included (>= n_windows).
    seed, n_batches, max_level, n_windows : int
        Run settings (:mod:`sim.core.settings`; ``n_windows``, keyword only, >= ``2 * n_batches``).
    init : str
        ``"meanfield"`` (warm start at the mean-field fixed point, see the module docstring) or
        ``"empty"``.
    responses : bool
        Record the response-time distribution (keyword only; docs/responses.md): each task's
        queue position, per window, by a separately compiled loop; the quantiles and CCDF are in
        ``responses`` (every other estimate is bitwise the one of a run without it).

    Returns
    -------
    JiqAgentResult

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter and its value.
    """
    res, _ = _simulate(n_servers, lam, policy, r, d, z, events, seed, init, n_batches,
                       max_level, n_windows=n_windows, responses=responses, se_method=se_method)
    return res


def _simulate(n_servers, lam, policy, r, d=1, z=0, events=10**6, seed=DEFAULTS.seed, init=DEFAULTS.init,
              n_batches=DEFAULTS.n_batches, max_level=DEFAULTS.max_level, *, n_windows=N_WINDOWS, check=False, responses=DEFAULTS.responses,
              se_method=DEFAULTS.se_method):
    """:func:`simulate`, also returning the final state (:class:`_State`); ``check`` verifies
    the I-queue invariants after every window (slow: O(N + M K) per window; for tests)."""
    # ---- validation (the model's parameters by the model's own check)
    task = {"policy": policy, "n_servers": n_servers, "lam": lam, "r": r}
    pol = policy_record(policy) if policy in POLICIES else None
    if pol is not None and pol.samples:
        task["d"] = d
    if pol is not None and pol.threshold:
        task["z"] = z
    check_task(task)
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, responses=responses, se_method=se_method)
    n_servers, lam, r = int(n_servers), float(lam), float(r)
    n_sched = n_schedulers(n_servers, r)
    d = pol.probe_d(d)
    z = int(z) if pol.threshold else 0
    code = pol.code

    # ---- set-up: the start from the seed (the kernel's stream, then a numpy one), the windows
    rate = (1.0 + lam) * n_servers
    dt = 1.0 / rate
    p_arrival = threshold(lam / (1.0 + lam))
    state = run.xoshiro()
    q, iq, isize, where, kshift, init_used = _initial_state(
        policy, code, lam, n_servers, n_sched, r, d, z, run.init, state, run.generator())
    buf, head = new_rings(q, run.events)
    w_jobs, w_starts, w_arr, w_waited, w_qarea = (run.zeros() for _ in range(5))
    w_resp, w_wait = run.zeros(float), run.zeros(float)
    w_tail = run.tail_zeros()
    w_empty, w_listed, w_join, w_delete, w_probe = (run.zeros() for _ in range(5))
    rec = run.recorder()

    # ---- the kernel
    buf, iq, kshift, ctr = _k.agent_kernel(
        code, d, z, p_arrival, q, buf, head, iq, isize, where, kshift, run.bounds, state,
        w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail,
        w_empty, w_listed, w_join, w_delete, w_probe, check=check, rec=rec)
    close_censored(q, buf, head, np.ones(n_servers), rate, run.bounds, w_jobs, w_resp, w_starts,
                   w_wait)

    # ---- epilogue: batch_means cuts the larger of the MSER-5 cuts on queue length and on
    # empty I-queues; obm its fixed fraction (sim.core.output.epilogue)
    lengths = np.diff(run.bounds).astype(np.float64)
    cut = (max(warmup_cut(w_qarea, lengths, n_servers, run.n_batches),
               warmup_cut(w_empty, lengths, 1, run.n_batches))
           if run.se_method == LEGACY_SE_METHOD else None)
    server_time = lengths * dt * n_servers
    est = run.epilogue(n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, jobs=w_jobs, dt=dt,
                       cut=cut, rec=rec, ratios={
                           "mean_response": (w_resp * dt, w_jobs),
                           "mean_wait": (w_wait * dt, w_starts), "prob_wait": (w_waited, w_arr),
                           "p0": (w_empty, lengths),  # one I-queue sampled per event (sim.jiq._agent_kernel)
                           "mean_iqueue": (w_listed, lengths * n_sched),
                           "join_rate": (w_join, server_time), "delete_rate": (w_delete, server_time),
                           "probe_rate": (w_probe, server_time),
                           "messages_per_job": ((w_join + w_delete + w_probe).astype(np.float64), w_arr)})
    res = JiqAgentResult(**est, n_schedulers=n_sched, init_used=init_used)
    return res, _State(q, iq, isize, where, int(kshift), ctr)


def run_task(task: dict) -> dict:
    """Run one JIQ agent task and return :data:`sim.core.results.RESULT_KEYS` plus
    :data:`EXTRA_KEYS` as plain Python values (``wall_time`` is added by :func:`sim.run`).

    Task keys: ``n_servers``, ``lam``, ``policy``, ``r``, ``d`` (jiq_pod, jiq_sqd), ``z``
    (jiq_threshold), ``events``, ``seed``, and optionally ``init``, ``n_batches``,
    ``max_level``, ``h``, ``responses`` (integer-valued floats are accepted for the integers;
    with ``responses: true`` the columns :data:`sim.core.responses.RESPONSE_COLUMNS` are added).
    """
    check_task(task)
    pol = policy_record(task["policy"])
    settings = RunSettings.from_task(task)
    res = simulate(
        n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=pol.name, r=task["r"],
        d=pol.probe_d(task_int(task, "d", 1)),
        z=task_int(task, "z", 0) if pol.threshold else 0,
        events=task_int(task, "events"), **settings.arguments(simulate))
    # single-task jobs: inherent delay 1; no buffer; within h = 1 iff no wait
    return simulation_row(
        res, EXTRA_KEYS,
        queueing_ratio=float(res.mean_response) - 1.0,
        queueing_ratio_se=float(res.mean_response_se),
        drop_prob=0.0, drop_prob_se=0.0,
        frac_within_h=float(1.0 - res.prob_wait) if settings.h == 1 else None,
    )
