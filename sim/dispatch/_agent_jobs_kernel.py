"""Compiled kernels of the agent engine for k-task jobs (private; the public API is
:mod:`sim.dispatch.agent_jobs`).

Building blocks shared with :mod:`sim.dispatch._agent_kernel` are imported, not copied: the xoshiro256+
step ``next_raw``, the bounded draw ``below``, the JSQ bucket moves and ``build_buckets``, and the
window arithmetic. Everything here is ``@njit(cache=True)`` except the thin Python driver
:func:`agent_jobs_kernel`; policies are integer codes (:mod:`sim.dispatch.policies`) and no jitted
function is ever passed as an argument.

State
-----
One int32 record per server, ``srv[n, :]`` of width ``W`` (a multiple of 16, i.e. 64 bytes):
``srv[n, Q]`` tasks (in service included), ``srv[n, HEAD]`` the head of a FIFO ring
``srv[n, RING0:]`` of capacity ``C = W - RING0`` holding the *job slot* of each task, and
``srv[n, MARK]`` the sampling stamp. Keeping all of a server's state in one cache line matters
at large N, where the loop is bound by memory latency: a service token, a probe and a
placement each touch one line (separate ``q``, ``head``, ring and stamp arrays cost up to four
misses). Two more measures against latency: the event stream is drawn ``LOOKAHEAD`` events
ahead (it does not depend on the state) so the records of upcoming service tokens, and the
job-table lines of their head tasks, are prefetched; and samples are drawn in two passes
(:func:`sample_rej`). Measured effect of the three:
docs/performance.md#parallel-job-agent-kernel-simdispatch_agent_jobs_kernelpy

Job slot ``-1`` marks a task present at time 0 (warm start), whose job is unknown and is not
measured. ``srv[n, Q] <= C`` always; rings wrap by comparison, so ``C`` need not be a power of
two. Per level ``l``:
``cnt[l]`` servers with at least ``l`` tasks (lazy area integration as in the agent kernel).
JSQ keeps the bucket structure ``perm, pos, start`` of :mod:`sim.dispatch._agent_kernel`.

Job table: ``jobtab[2*j]`` = arrival event of the job in slot ``j``, ``jobtab[2*j+1]`` = its tasks
not yet completed (interleaved so that a completion touches one cache line); free slots on the
stack ``free[:nfree]``.

One job arrival, in two phases
------------------------------
1. *Plan* (:func:`_fill_plan`, :func:`_sampling_plan`, :func:`_per_task_plan`, :func:`_jsq_plan`,
   :func:`_random_plan`): draw the sample and write the servers of the ``k`` tasks, in placement
   order, to ``dest[:k]``; or return ``-1`` when the buffer drops the job. Policies that place
   tasks one after another (per-task pod, JSQ, random with a buffer) raise ``q`` tentatively and
   restore it before returning, so a plan never changes the state.
2. *Commit*: take a job slot, append the tasks to their rings, update levels and statistics.
   The commit is resumable: if a ring is full (``q[n] == C``) or no job slot is free, the loop
   saves where it was (task index, slot, flags) in ``st`` and returns *in the middle of the event*;
   the driver grows the arrays and calls the loop again, which finishes that event without
   drawing any random number. Results therefore do not depend on the initial capacities, and the
   loop never reassigns an array (that would add reference counting to every event).

Random numbers: two xoshiro256+ streams. The *event* stream decides each event (job arrival or
service token, and the token's server) and nothing else, so it can be drawn ahead; the
*decision* stream draws samples and routing. Both are seeded by the caller.

Sampling ``m = k*d`` distinct servers: rejection of repeats, detected with the per-server stamp
``srv[n, MARK]`` (a fresh stamp per sample, so no clearing and no O(m**2) scan; the stamps are
reset once every 2**31 samples), when ``2*m <= N``; else a partial Fisher-Yates on a
persistent permutation (O(m)). Both give a uniformly random *ordered* sample, and every
plan breaks ties by sample order (first in order wins), which is therefore uniform among the
tied queues (for batch-filling: the queues receiving the last, partial level of tasks are a
uniform subset of the eligible ones, the same law as drawing a fresh tie-break per task).

Batch-filling in O(m + levels) instead of O(k*m): with ``spaces(l) = sum_i max(l - q_i, 0)``
the free slots at positions <= l in the sample, let ``L`` be the least ``l`` with
``spaces(L) >= k``. Placing the tasks one by one into the currently shortest sampled queue fills
every sampled queue up to length ``L - 1`` and puts the remaining ``k - spaces(L - 1)`` tasks at
position ``L``, one in each of the first such queues in sample order (Weng & Wang, Sec. 2: "fill
the k tasks into these spaces from low positions to high positions"). The job is dropped iff
``L > b``. Batch-sampling: the ``k`` shortest, ties by sample order; dropped iff the ``k``-th
shortest already holds ``b`` tasks.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.buckets import bucket_down, bucket_up, build_buckets
from sim.core.fifo import grow_levels, level_arrays
from sim.core.jobdelay import expected_max_gamma, expected_max_gamma_wide, nonzero_counts
from sim.core.responses import dummy_recorder, grid_add, sig_id
from sim.core.rng import below, next_raw
from sim.core.sampling import first_min, prefetch, sample_fy, sample_rej
from sim.core.windows import flush_window, window_shift
from sim.dispatch.policies import BATCH_FILLING, BATCH_SAMPLING, JSQ, POD_PER_TASK, RANDOM  # noqa: F401

SAMPLING_POLICIES = (BATCH_FILLING, BATCH_SAMPLING, POD_PER_TASK)

#: ``b`` when there is no buffer (never reached)
UNBOUNDED = np.int64(1) << np.int64(62)

# columns of the server record srv[n, :]
Q, HEAD, MARK, RING0 = 0, 1, 2, 4
RECORD = 16  # record widths are multiples of 16 int32 (one 64-byte cache line)
_STAMP_MAX = 2**31 - 1

# indices of the control array ``st`` that carries the loop state between spans
ST_WINDOW, ST_EVENT, ST_TASK, ST_SLOT, ST_WAITED, ST_WITHIN, ST_NFREE, ST_STAMP, ST_AHEAD = range(9)
ST_SIZE = 9
STOP_DONE, STOP_RING, STOP_JOBS = 0, 1, 2  # why run_span returned
LOOKAHEAD = 32  # events drawn ahead of time (power of two)


# --------------------------------------------------------------------------------------------
# plans: where the k tasks of one job go (dest[:k], placement order), or -1 if dropped
# --------------------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _draw_sample(samp, m, use_fy, mark, stamp, s0, s1, s2, s3):
    """``m`` distinct servers into ``samp[:m]`` in uniformly random order: by partial
    Fisher-Yates (``use_fy``) or by rejection of repeats under a fresh ``stamp``. Returns
    ``(stamp, s0..s3)``."""
    if use_fy:
        s0, s1, s2, s3 = sample_fy(samp, m, s0, s1, s2, s3)
    else:
        stamp += 1
        s0, s1, s2, s3 = sample_rej(samp, m, mark, stamp, s0, s1, s2, s3)
    return stamp, s0, s1, s2, s3


@njit(cache=True, inline="always")
def _sample_hist(q, samp, m, hist):
    """Count the sampled queues ``samp[:m]`` by length into ``hist``; returns the shortest length."""
    lo = q[samp[0]]
    for i in range(m):
        v = q[samp[i]]
        hist[v] += 1
        if v < lo:
            lo = v
    return lo


@njit(cache=True, inline="always")
def _clear_hist(q, samp, m, hist):
    """Zero the entries of ``hist`` that :func:`_sample_hist` raised (before ``q`` changes)."""
    for i in range(m):
        hist[q[samp[i]]] = 0


@njit(cache=True)
def _fill_plan(q, samp, m, k, b, hist, dest):
    """Batch-filling of ``k`` tasks into the sampled queues ``samp[:m]`` (sample order breaks
    ties). ``hist``: zeroed scratch of size > max q, left zeroed. Returns k, or -1 if dropped."""
    lo = _sample_hist(q, samp, m, hist)
    top = hist.size
    spaces = 0  # spaces(l): free slots at positions <= l
    cum = 0  # sampled queues with length <= l
    lvl = lo
    while True:
        if lvl < top:
            cum += hist[lvl]
        if spaces + cum >= k:  # spaces(lvl + 1) >= k
            break
        spaces += cum
        lvl += 1
    last = lvl + 1  # highest position taken
    rest = k - spaces  # tasks at position `last`
    _clear_hist(q, samp, m, hist)
    if last > b:
        return -1
    t = 0
    for i in range(m):
        n = samp[i]
        v = q[n]
        if v < last:
            c = last - 1 - v
            if rest > 0:
                c += 1
                rest -= 1
            for _ in range(c):
                dest[t] = n
                t += 1
    return t


@njit(cache=True)
def _sampling_plan(q, samp, m, k, b, hist, dest):
    """Batch-sampling: one task to each of the ``k`` shortest sampled queues (sample order
    breaks ties). Returns k, or -1 if the k-th shortest already holds ``b`` tasks."""
    lo = _sample_hist(q, samp, m, hist)
    cum = 0
    lvl = lo
    while True:
        cum += hist[lvl]
        if cum >= k:
            break
        lvl += 1
    rest = k - (cum - hist[lvl])  # tasks for queues of length exactly lvl
    _clear_hist(q, samp, m, hist)
    if lvl >= b:
        return -1
    t = 0
    for n in samp[:m]:
        v = q[n]
        if v < lvl:
            dest[t] = n
            t += 1
        elif v == lvl and rest > 0:
            dest[t] = n
            t += 1
            rest -= 1
    return t


@njit(cache=True)
def _per_task_plan(q, samp, m, k, b, dest, use_fy, mark, stamp,
                   s0, s1, s2, s3):
    """pod per task: each task samples ``m`` distinct queues and joins the (first) shortest;
    tasks are placed one after another (``q`` raised tentatively, restored before return).
    Returns (k or -1, stamp, rng words)."""
    placed = 0
    dropped = False
    for t in range(k):
        if use_fy:
            s0, s1, s2, s3 = sample_fy(samp, m, s0, s1, s2, s3)
        else:
            stamp += 1
            s0, s1, s2, s3 = sample_rej(samp, m, mark, stamp, s0, s1, s2, s3)
        best = first_min(q, samp, m)
        bq = q[best]
        if bq >= b:
            dropped = True
            break
        q[best] = bq + 1
        dest[t] = best
        placed += 1
    for t in range(placed):
        q[dest[t]] -= 1
    if dropped:
        return -1, stamp, s0, s1, s2, s3
    return k, stamp, s0, s1, s2, s3


@njit(cache=True)
def _jsq_plan(q, perm, pos, start, k, b, dest, s0, s1, s2, s3):
    """JSQ per task, one after another (uniform among the current shortest, O(1) each)."""
    placed = 0
    dropped = False
    for t in range(k):
        n_min = start[q[perm[0]] + 1]
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        n = perm[below(r, n_min)]
        lvl = q[n]
        if lvl >= b:
            dropped = True
            break
        bucket_up(perm, pos, start, n, lvl)
        q[n] = lvl + 1
        dest[t] = n
        placed += 1
    for t in range(placed - 1, -1, -1):
        n = dest[t]
        lvl = q[n]
        bucket_down(perm, pos, start, n, lvl)
        q[n] = lvl - 1
    if dropped:
        return -1, s0, s1, s2, s3
    return k, s0, s1, s2, s3


@njit(cache=True)
def _random_plan(q, k, b, bounded, dest, s0, s1, s2, s3):
    """Each task to a uniform server, independently (tasks may share a server)."""
    n_servers = q.size
    placed = 0
    dropped = False
    for t in range(k):
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        n = below(r, n_servers)
        if bounded:
            if q[n] >= b:
                dropped = True
                break
            q[n] += 1
        dest[t] = n
        placed += 1
    if bounded:
        for t in range(placed):
            q[dest[t]] -= 1
    if dropped:
        return -1, s0, s1, s2, s3
    return k, s0, s1, s2, s3


@njit(cache=True)
def plan_job(q, policy, k, m, b, state):
    """Where the ``k`` tasks of one job go, for ``policy`` on queue lengths ``q`` (test helper
    running the same plan functions as the event loop; ``state`` advanced in place).

    Returns ``(placed, dest)``: ``placed = k`` and the servers in placement order, or
    ``placed = -1`` if the buffer ``b`` drops the job. ``q`` is left unchanged."""
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    n_servers = q.size
    dest = np.zeros(k, dtype=np.int64)
    use_fy = 2 * m > n_servers
    mark = np.zeros(1 if use_fy else n_servers, dtype=np.int64)
    stamp = np.int64(0)
    samp = np.arange(n_servers) if use_fy else np.zeros(max(m, 1), dtype=np.int64)
    hist = np.zeros(q.max() + k + 2, dtype=np.int64)
    placed = 0
    if policy == BATCH_FILLING or policy == BATCH_SAMPLING:
        stamp, s0, s1, s2, s3 = _draw_sample(samp, m, use_fy, mark, stamp, s0, s1, s2, s3)
        if policy == BATCH_FILLING:
            placed = _fill_plan(q, samp, m, k, b, hist, dest)
        else:
            placed = _sampling_plan(q, samp, m, k, b, hist, dest)
    elif policy == POD_PER_TASK:
        placed, stamp, s0, s1, s2, s3 = _per_task_plan(q, samp, m, k, b, dest, use_fy, mark,
                                                       stamp, s0, s1, s2, s3)
    elif policy == JSQ:
        perm, pos, start = build_buckets(q, q.max() + k + 2)
        placed, s0, s1, s2, s3 = _jsq_plan(q, perm, pos, start, k, b, dest, s0, s1, s2, s3)
    else:
        placed, s0, s1, s2, s3 = _random_plan(q, k, b, b < UNBOUNDED, dest, s0, s1, s2, s3)
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3
    return placed, dest


@njit(cache=True)
def batch_plan_given_sample(q_sample, policy, k, b):
    """Batch-filling / batch-sampling of ``k`` tasks into queues of lengths ``q_sample`` listed
    in sample order (deterministic: ties go to the earlier queue). Returns (placed, dest) with
    ``dest`` indices into ``q_sample``."""
    m = q_sample.size
    samp = np.arange(m)
    hist = np.zeros(q_sample.max() + k + 2, dtype=np.int64)
    dest = np.zeros(k, dtype=np.int64)
    if policy == BATCH_FILLING:
        placed = _fill_plan(q_sample, samp, m, k, b, hist, dest)
    else:
        placed = _sampling_plan(q_sample, samp, m, k, b, hist, dest)
    return placed, dest


# --------------------------------------------------------------------------------------------
# the event loop
# --------------------------------------------------------------------------------------------
@functools.cache
def _make_run_span(policy: int, record: bool = False):
    """The event loop compiled for one policy code (a closure constant, so LLVM drops the other
    policies' branches: one tight loop per policy, cached on disk by numba, as
    :func:`sim.dispatch._agent_kernel._make_run_span`). The sampling method and the buffer flag are
    run-time arguments: they are tested once per job arrival, which costs nothing measurable
    next to the O(k*d) work of an arrival, and halves the loops to compile.

    ``record`` (also a closure constant: a separate compiled variant, so a run that does not
    record pays nothing) records each admitted job's signature -- the positions of its last
    task in each of its distinct queues -- for the response-time distribution
    (:mod:`sim.core.responses`): a task is its job's last in its queue iff its position equals
    the queue's length once the job is committed."""
    policy = int(policy)
    record = bool(record)
    sampled_batch = policy == BATCH_FILLING or policy == BATCH_SAMPLING
    sampling = policy in SAMPLING_POLICIES

    @njit(cache=True)
    def run_span(k, m, b, h, p_arrival, use_fy, bounded, srv, cnt, acc, perm, pos, start,
                 samp, hist, dest, jobtab, free, bounds, state, ahead, st,
                 w_arr, w_drop, w_adm, w_waited, w_within, w_jobs, w_resp, w_tasks, w_tresp,
                 w_starts, w_wait, w_qarea, w_tail, task_levels, job_signature, r_sig, r_grid, r_over,
                 r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps, r_cs, r_key):
        """Process events from ``st[ST_EVENT]`` (window ``st[ST_WINDOW]``) to the end of the run,
        or until an arrival cannot be committed (ring full / no free job slot): then save the
        position in ``st`` and return STOP_RING / STOP_JOBS, the event unfinished. Returns
        STOP_DONE at the end. Window sums are added with ``+=`` (a window may be split)."""
        n_servers = srv.shape[0]
        width = srv.shape[1]
        c = width - RING0
        q = srv[:, Q]  # strided views for the plan functions
        mark = srv[:, MARK]
        flat = srv.reshape(srv.size)  # for prefetching rows
        amask = ahead.size - 1
        ahalf = ahead.size >> 1
        n_windows = bounds.size - 1
        shift = window_shift(bounds)
        total = np.int64(0)
        for n in range(n_servers):
            total += srv[n, Q]
        a0, a1, a2, a3 = state[0], state[1], state[2], state[3]  # event stream
        s0, s1, s2, s3 = state[4], state[5], state[6], state[7]  # decision stream
        w, e_next, t_res, j = st[ST_WINDOW], st[ST_EVENT], st[ST_TASK], st[ST_SLOT]
        wflag, hflag, nfree, stamp, ia = (st[ST_WAITED], st[ST_WITHIN], st[ST_NFREE], st[ST_STAMP],
                                          st[ST_AHEAD])
        stop = STOP_DONE
        while w < n_windows and stop == STOP_DONE:
            e0 = bounds[w]
            e1 = bounds[w + 1]
            arrivals = np.int64(0)
            drops = np.int64(0)
            admitted = np.int64(0)
            waited = np.int64(0)
            within = np.int64(0)
            starts = np.int64(0)  # tasks that start service on arrival (wait 0)
            qacc = np.int64(0)
            e = e_next
            while e < e1:
                commit = False
                t0 = np.int64(0)
                if t_res >= 0:  # finish an arrival interrupted by a growth
                    commit = True
                    t0 = t_res
                    t_res = -1
                else:
                    # next event from the lookahead; draw the one ahead.size events later and
                    # prefetch its server's record, and the job-table lines of the first two tasks
                    # of the server due in ahead.size / 2 events (its record is in cache by now)
                    ev = ahead[ia]
                    r, a0, a1, a2, a3 = next_raw(a0, a1, a2, a3)
                    if r < p_arrival:
                        ahead[ia] = -1
                    else:
                        r, a0, a1, a2, a3 = next_raw(a0, a1, a2, a3)
                        nn = below(r, n_servers)
                        ahead[ia] = nn
                        prefetch(flat, nn * width)
                    ia = (ia + 1) & amask
                    n2 = ahead[(ia + ahalf) & amask]
                    if n2 >= 0:  # the job of the task to complete, and of the next to start
                        hd = np.int64(srv[n2, HEAD])
                        jj = np.int64(srv[n2, RING0 + hd])
                        if jj >= 0:
                            prefetch(jobtab, 2 * jj)
                        hd = hd + 1 if hd + 1 < c else 0
                        jj = np.int64(srv[n2, RING0 + hd])
                        if jj >= 0:
                            prefetch(jobtab, 2 * jj)
                    if ev < 0:
                        # ---- job arrival: plan
                        arrivals += 1
                        if sampling and not use_fy and stamp > _STAMP_MAX - k - 1:
                            for n in range(n_servers):  # once per 2**31 samples
                                srv[n, MARK] = 0
                            stamp = 0
                        if sampled_batch:
                            stamp, s0, s1, s2, s3 = _draw_sample(samp, m, use_fy, mark, stamp,
                                                                 s0, s1, s2, s3)
                            if policy == BATCH_FILLING:
                                placed = _fill_plan(q, samp, m, k, b, hist, dest)
                            else:
                                placed = _sampling_plan(q, samp, m, k, b, hist, dest)
                        elif policy == POD_PER_TASK:
                            placed, stamp, s0, s1, s2, s3 = _per_task_plan(
                                q, samp, m, k, b, dest, use_fy, mark, stamp, s0, s1, s2, s3)
                        elif policy == JSQ:
                            placed, s0, s1, s2, s3 = _jsq_plan(q, perm, pos, start, k, b, dest,
                                                               s0, s1, s2, s3)
                        else:
                            placed, s0, s1, s2, s3 = _random_plan(q, k, b, bounded, dest,
                                                                  s0, s1, s2, s3)
                        if placed < 0:
                            drops += 1
                        else:
                            commit = True
                            j = -1
                            wflag = 0
                            hflag = 1
                    else:
                        # ---- service token at a uniform server (wasted if idle)
                        n = ev
                        lvl = np.int64(srv[n, Q])
                        if lvl > 0:
                            hd = np.int64(srv[n, HEAD])
                            jj = np.int64(srv[n, RING0 + hd])
                            if jj >= 0:  # not a task present at time 0
                                a = jobtab[2 * jj]
                                wa = a >> shift
                                w_tasks[wa] += 1
                                w_tresp[wa] += e - a
                                left = jobtab[2 * jj + 1] - 1
                                jobtab[2 * jj + 1] = left
                                if left == 0:  # the job's last task: job done
                                    w_jobs[wa] += 1
                                    w_resp[wa] += e - a
                                    free[nfree] = jj
                                    nfree += 1
                            hd += 1
                            if hd == c:
                                hd = 0
                            srv[n, HEAD] = hd
                            srv[n, Q] = lvl - 1
                            de = e - e0
                            cnt[lvl] -= 1
                            acc[lvl] -= de
                            qacc -= de
                            total -= 1
                            if policy == JSQ:
                                bucket_down(perm, pos, start, n, lvl)
                            if lvl > 1:  # the next task starts service
                                jj = np.int64(srv[n, RING0 + hd])
                                if jj >= 0:
                                    a = jobtab[2 * jj]
                                    wa = a >> shift
                                    w_starts[wa] += 1
                                    w_wait[wa] += e - a
                if commit:
                    # ---- job arrival: commit (resumable)
                    if j < 0:
                        if nfree == 0:
                            stop = STOP_JOBS
                            t_res = 0
                            break
                        nfree -= 1
                        j = free[nfree]
                        jobtab[2 * j] = e
                        jobtab[2 * j + 1] = k
                    de = e - e0
                    t = t0
                    while t < k:
                        n = dest[t]
                        lvl = np.int64(srv[n, Q])
                        if lvl == c:
                            break
                        idx = srv[n, HEAD] + lvl
                        if idx >= c:
                            idx -= c
                        srv[n, RING0 + idx] = j
                        srv[n, Q] = lvl + 1
                        if record:
                            task_levels[t] = lvl
                        cnt[lvl + 1] += 1
                        acc[lvl + 1] += de
                        qacc += de
                        total += 1
                        if policy == JSQ:
                            bucket_up(perm, pos, start, n, lvl)
                        if lvl == 0:
                            starts += 1
                        else:
                            wflag = 1
                        if lvl >= h:
                            hflag = 0
                        t += 1
                    if t < k:
                        stop = STOP_RING
                        t_res = t
                        break
                    admitted += 1
                    waited += wflag
                    within += hflag
                    j = -1
                    if record:  # the job's signature, for the response-time distribution
                        # (inline; the rare jobs whose signature is not numbered go to the
                        # grid by grid_add)
                        if k == 1:
                            pf = task_levels[0] + 1
                            if pf <= r_sig.shape[1]:
                                r_sig[w, pf - 1] += 1
                            else:
                                job_signature[pf] = 1
                                grid_add(job_signature, pf, r_tgrid, r_ps, r_cs, r_grid[w])
                                job_signature[pf] = 0
                                r_over[w] += 1
                        else:
                            lo_pos = task_levels[0] + 1
                            top_pos = lo_pos
                            for t in range(k):
                                pf = task_levels[t] + 1
                                # the job's last task in its queue: batch plans list a queue's
                                # tasks together; else its position is the queue's length
                                if sampled_batch:
                                    if t == k - 1 or dest[t + 1] != dest[t]:
                                        job_signature[pf] += 1
                                elif pf == srv[dest[t], Q]:
                                    job_signature[pf] += 1
                                if pf > top_pos:
                                    top_pos = pf
                                elif pf < lo_pos:
                                    lo_pos = pf
                            sid = sig_id(job_signature, top_pos, r_keys, r_pos, r_ids, r_counts, r_nsig,
                                         r_key)
                            if sid >= 0:
                                r_sig[w, sid] += 1
                            else:
                                grid_add(job_signature, top_pos, r_tgrid, r_ps, r_cs, r_grid[w])
                                r_over[w] += 1
                            for p in range(lo_pos, top_pos + 1):
                                job_signature[p] = 0
                e += 1
            w_arr[w] += arrivals
            w_drop[w] += drops
            w_adm[w] += admitted
            w_waited[w] += waited
            w_within[w] += within
            w_starts[w] += starts
            w_qarea[w] -= qacc
            e_next = e
            if e == e1:
                flush_window(w, e1 - e0, cnt, acc, total, w_tail, w_qarea)
                w += 1
        state[0], state[1], state[2], state[3] = a0, a1, a2, a3
        state[4], state[5], state[6], state[7] = s0, s1, s2, s3
        st[ST_WINDOW], st[ST_EVENT], st[ST_TASK], st[ST_SLOT] = w, e_next, t_res, j
        st[ST_WAITED], st[ST_WITHIN], st[ST_NFREE], st[ST_STAMP], st[ST_AHEAD] = (wflag, hflag, nfree,
                                                                                  stamp, ia)
        return stop

    return run_span


@njit(cache=True)
def new_servers(q, width):
    """Server records of the given width (a multiple of RECORD) holding queues ``q`` of tasks
    of unknown jobs (slot -1)."""
    srv = np.full((q.size, width), -1, dtype=np.int32)
    for n in range(q.size):
        srv[n, Q] = q[n]
        srv[n, HEAD] = 0
        srv[n, MARK] = 0
        srv[n, 3] = 0
    return srv


@njit(cache=True)
def _grow_servers(srv, cnt, acc, start, k):
    """Double the record width (each ring unrolled to start at 0) and extend the level arrays
    to ``C + k + 2`` (a tentative plan may raise a queue by up to k above C)."""
    n_servers, w_old = srv.shape
    c_old = w_old - RING0
    w_new = 2 * w_old
    nsrv = np.full((n_servers, w_new), -1, dtype=np.int32)
    for n in range(n_servers):
        ql = srv[n, Q]
        hd = srv[n, HEAD]
        nsrv[n, Q] = ql
        nsrv[n, HEAD] = 0
        nsrv[n, MARK] = srv[n, MARK]
        nsrv[n, 3] = 0
        for i in range(ql):
            idx = hd + i
            if idx >= c_old:
                idx -= c_old
            nsrv[n, RING0 + i] = srv[n, RING0 + idx]
    size = w_new - RING0 + k + 2
    ncnt, nacc, nstart = grow_levels(cnt, acc, start, size, n_servers)
    nhist = np.zeros(size, dtype=np.int64)
    return nsrv, ncnt, nacc, nstart, nhist


def _grow_jobs(jobtab, free, st):
    """Double the job table; the new slots go on the free stack."""
    n_old = jobtab.size // 2
    njob = np.zeros(4 * n_old, dtype=np.int64)
    njob[: jobtab.size] = jobtab
    nfree = int(st[ST_NFREE])
    nfr = np.empty(2 * n_old, dtype=np.int64)
    nfr[:nfree] = free[:nfree]
    nfr[nfree: nfree + n_old] = np.arange(2 * n_old - 1, n_old - 1, -1, dtype=np.int64)
    st[ST_NFREE] = nfree + n_old
    return njob, nfr


@njit(cache=True)
def _fill_ahead(ahead, p_arrival, n_servers, state):
    """Draw the first ``ahead.size`` events from the event stream ``state[:4]``: -1 for a job
    arrival, else the server of a service token."""
    a0, a1, a2, a3 = state[0], state[1], state[2], state[3]
    for i in range(ahead.size):
        r, a0, a1, a2, a3 = next_raw(a0, a1, a2, a3)
        if r < p_arrival:
            ahead[i] = -1
        else:
            r, a0, a1, a2, a3 = next_raw(a0, a1, a2, a3)
            ahead[i] = below(r, n_servers)
    state[0] = a0
    state[1] = a1
    state[2] = a2
    state[3] = a3


def agent_jobs_kernel(policy, k, m, b, h, p_arrival, srv, jobtab, bounds, state,
                      w_arr, w_drop, w_adm, w_waited, w_within, w_jobs, w_resp, w_tasks, w_tresp,
                      w_starts, w_wait, w_qarea, w_tail, rec=None):
    """Run ``bounds[-1]`` uniformized events and fill the per-window accumulators.

    Parameters (prepared and validated by :func:`sim.dispatch.agent_jobs.simulate`)
    ----------
    policy : int          RANDOM, JSQ, BATCH_FILLING, BATCH_SAMPLING or POD_PER_TASK.
    k, m, b, h : int      tasks per job, sample size (k*d; per task for POD_PER_TASK), buffer
                          (UNBOUNDED if none), position threshold of ``w_within``.
    p_arrival : uint64    an event is a job arrival iff the raw 64-bit draw is below it.
    srv : int32[N, W]     server records (:func:`new_servers`), updated in place or regrown.
    jobtab : int64[2J]    job table (J >= 1 slots, all free).
    bounds : int64[W+1]   window starts (windows of 2**s events, :func:`sim.core.windows.window_bounds`).
    state : uint64[8]     two xoshiro256+ states, advanced in place: ``state[:4]`` draws the
                          events (arrival or service token, and the token's server), so the
                          loop can look ``LOOKAHEAD`` events ahead and prefetch;
                          ``state[4:]`` draws everything else (samples, routing).
    w_* : outputs (zeroed), one entry per window: job arrivals, drops, admissions, admitted jobs
          with a task at position >= 2, admitted jobs with every task at position <= h (these
          five in the window of the event), then -- credited to the window of the job's
          *arrival* -- jobs completed and the sum of their responses (events), tasks completed
          and their sojourns, tasks started and their waits; queue area and tail areas.
    rec : :class:`sim.core.responses.Recorder` or None
                          if given, each admitted job's signature is recorded there (window of
                          its arrival) by the compiled variant that records; None: the plain loop.

    Returns ``(srv, jobtab)``, the final (possibly regrown) arrays.
    """
    n_servers = srv.shape[0]
    policy, k, m = int(policy), int(k), int(m)
    b = np.int64(b)
    bounded = bool(b < UNBOUNDED)
    use_fy = policy in SAMPLING_POLICIES and 2 * m > n_servers
    q = srv[:, Q].astype(np.int64)
    size = srv.shape[1] - RING0 + k + 2
    cnt, acc, perm, pos, start = level_arrays(q, size, policy == JSQ)
    samp = np.arange(n_servers, dtype=np.int64) if use_fy else np.zeros(max(m, 1), np.int64)
    hist = np.zeros(size, dtype=np.int64)
    dest = np.zeros(k, dtype=np.int64)
    n_slots = jobtab.size // 2
    free = np.arange(n_slots - 1, -1, -1, dtype=np.int64)  # slot 0 popped first
    st = np.zeros(ST_SIZE, dtype=np.int64)
    st[ST_EVENT] = bounds[0]
    st[ST_TASK] = -1
    st[ST_SLOT] = -1
    st[ST_NFREE] = n_slots
    ahead = np.zeros(LOOKAHEAD, dtype=np.int64)
    _fill_ahead(ahead, p_arrival, n_servers, state)
    record = rec is not None
    if not record:
        rec = dummy_recorder()
    task_levels = np.zeros(k, dtype=np.int64)
    job_signature = np.zeros(size if record else 1, dtype=np.int64)  # positions <= ring capacity
    run_span = _make_run_span(policy, record)
    while True:
        stop = run_span(k, m, b, h, p_arrival, use_fy, bounded, srv, cnt, acc, perm, pos,
                        start, samp, hist, dest, jobtab, free, bounds, state, ahead, st,
                        w_arr, w_drop, w_adm, w_waited, w_within, w_jobs, w_resp, w_tasks,
                        w_tresp, w_starts, w_wait, w_qarea, w_tail, task_levels, job_signature, *rec)
        if stop == STOP_DONE:
            break
        if stop == STOP_RING:
            srv, cnt, acc, start, hist = _grow_servers(srv, cnt, acc, start, k)
            if record:  # a growth may interrupt a commit: keep the job's counts so far
                grown = np.zeros(hist.size, dtype=np.int64)
                grown[: job_signature.size] = job_signature
                job_signature = grown
        else:
            jobtab, free = _grow_jobs(jobtab, free, st)
    return srv, jobtab


# --------------------------------------------------------------------------------------------
# end of run
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _counts_key(counts, hi):
    """An int64 key of a position-count vector with hi <= 4 and counts < 2**15 (else -1)."""
    if hi > 4:
        return np.int64(-1)
    key = np.int64(0)
    for p in range(1, hi + 1):
        if counts[p] >= 1 << 15:
            return np.int64(-1)
        key |= np.int64(counts[p]) << np.int64(15 * (p - 1))
    return key


@njit(cache=True)
def close_censored(srv, jobtab, rate, bounds, w_jobs, w_resp, w_tasks, w_tresp,
                   w_starts, w_wait, gl_x, gl_w):
    """Credit the jobs and tasks still in the system at the end with their elapsed time plus
    their exact expected remaining time (conditional expectation given the positions; removes
    the bias against long responses that a finite run has, as in
    :func:`sim.core.fifo.close_censored`).

    A task at position ``p`` (1 = in service) completes after Gamma(p, 1) time and, if
    ``p >= 2``, starts after Gamma(p - 1, 1). A job completes when the last of its tasks in each
    of its queues does: after ``max`` over those queues of independent Gamma(p_last, 1), whose
    mean is :func:`sim.core.jobdelay.expected_max_gamma` of the counts of those last positions
    (memoized on the count vector: with positions <= 4 the same few vectors recur across jobs),
    or for higher positions the equal but much faster
    :func:`sim.core.jobdelay.expected_max_gamma_wide` (the former costs O(sum of positions) per
    quadrature node: minutes for thousands of jobs with queues of ~100 tasks, e.g. random
    routing at lam = 0.9).
    Units are events: one time unit is ``rate`` events; the last event is ``bounds[-1] - 1``.
    """
    n_slots = jobtab.size // 2
    n_servers = srv.shape[0]
    c = srv.shape[1] - RING0
    last = bounds[-1] - 1
    shift = window_shift(bounds)
    seen = np.full(n_slots, -1, dtype=np.int64)
    n_q = np.zeros(n_slots, dtype=np.int64)  # distinct queues holding the job
    top = 1
    for n in range(n_servers):
        hd = srv[n, HEAD]
        for p in range(srv[n, Q], 0, -1):  # from the back: the first seen is the job's last task
            idx = hd + p - 1
            if idx >= c:
                idx -= c
            jj = np.int64(srv[n, RING0 + idx])
            if jj < 0:
                continue
            a = jobtab[2 * jj]
            wa = a >> shift
            el = last - a
            w_tasks[wa] += 1
            w_tresp[wa] += el + p * rate
            if p >= 2:
                w_starts[wa] += 1
                w_wait[wa] += el + (p - 1) * rate
            if seen[jj] != n:
                seen[jj] = n
                n_q[jj] += 1
                if p > top:
                    top = p
    off = np.zeros(n_slots + 1, dtype=np.int64)
    for jj in range(n_slots):
        off[jj + 1] = off[jj] + n_q[jj]
    fill = off[:-1].copy()
    positions = np.empty(off[n_slots], dtype=np.int64)
    seen[:] = -1
    for n in range(n_servers):
        hd = srv[n, HEAD]
        for p in range(srv[n, Q], 0, -1):
            idx = hd + p - 1
            if idx >= c:
                idx -= c
            jj = np.int64(srv[n, RING0 + idx])
            if jj >= 0 and seen[jj] != n:
                seen[jj] = n
                positions[fill[jj]] = p
                fill[jj] += 1
    counts = np.zeros(top + 1, dtype=np.int64)
    ps = np.zeros(top + 1, dtype=np.int64)
    cs = np.zeros(top + 1, dtype=np.int64)
    memo = {np.int64(-2): 0.0}  # typed dict int64 -> float64
    for jj in range(n_slots):
        if n_q[jj] == 0:
            continue
        if n_q[jj] == 1:
            ex = float(positions[off[jj]])  # E[Gamma(p, 1)] = p
        else:
            hi = 1
            for i in range(off[jj], off[jj + 1]):
                p = positions[i]
                counts[p] += 1
                if p > hi:
                    hi = p
            key = _counts_key(counts, hi)
            if key >= 0 and key in memo:
                ex = memo[key]
            elif key >= 0:  # low positions: the project's function, memoized
                ex = expected_max_gamma(counts[: hi + 1], gl_x, gl_w)
                memo[key] = ex
            else:  # high positions: the windowed quadrature
                nd = nonzero_counts(counts, hi, ps, cs)
                ex = expected_max_gamma_wide(ps[:nd], cs[:nd], gl_x, gl_w)
            for i in range(off[jj], off[jj + 1]):
                counts[positions[i]] = 0
        a = jobtab[2 * jj]
        wa = a >> shift
        w_jobs[wa] += 1
        w_resp[wa] += (last - a) + ex * rate
