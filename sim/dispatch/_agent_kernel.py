"""Compiled kernels of the agent engine (private; the public API is :mod:`sim.dispatch.agent`).

Everything here works on plain arrays and is ``@njit(cache=True)``, except the thin Python
driver :func:`agent_kernel`. Policies are integer codes (:mod:`sim.dispatch.policies`); jitted
functions are never passed as arguments.

Hot loop (:func:`_make_run_span`): one compiled loop per (policy code, pod sampling method,
equal/unequal rates, recording of response-time distributions or not), the codes being
compile-time constants of a cached closure, so no policy test is left in the loop. Arrays are
never reassigned inside the loop (that would add reference counting to every event); when a
ring buffer fills, the loop returns and :func:`agent_kernel` grows the arrays and resumes.

Random numbers: xoshiro256+ (Blackman & Vigna), as in ``shared/limits/pod_limit.c``. Inside the
hot loop the 256-bit state lives in four local ``uint64`` scalars (so LLVM keeps it in registers);
helpers take the four words and return ``(value, s0, s1, s2, s3)``. A bounded integer in
``[0, n)`` is ``((x >> 32) * n) >> 32`` (Lemire's multiply-shift on the high 32 bits, bias
< n / 2**32), a uniform double is ``(x >> 11) * 2**-53``.

Queue bookkeeping, per server ``n``: ``q[n]`` tasks (in service included), a FIFO ring buffer
``buf[n, :]`` of their arrival times (stored as event indices, see :mod:`sim.dispatch.agent`; -1 for
jobs present at time 0) starting at ``head[n]``; the ring capacity ``C`` is a power of two and is
doubled when a queue would exceed it. Per level ``l``: ``cnt[l]`` = number of servers with at
least ``l`` tasks. For JSQ the servers are also kept bucket-sorted by queue length: ``perm`` is a
permutation of the servers sorted by ``q``, ``pos`` its inverse and ``start[l]`` the first index
in ``perm`` of a server with ``q >= l`` (so ``start[l] = N - cnt[l]``); moving a server one level
up or down is one swap with the boundary of its block, O(1). Arrival times are int32 when the
run has at most 2**31 events, else int64 (:func:`sim.dispatch.agent.simulate`).

Measured history of this loop's speed work:
docs/performance.md#dispatch-agent-kernel-simdispatch_agent_kernelpy
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.buckets import bucket_down, bucket_up, pick_lowest
from sim.core.fifo import append_task, grow_rings, level_arrays, queue_dtype
from sim.core.responses import dummy_recorder, record_job
from sim.core.rng import below, next_raw
from sim.core.sampling import alias_server, shortest_fy
from sim.core.windows import flush_levels, window_of, window_shift
from sim.dispatch.policies import JSQ, POD, RANDOM


# --------------------------------------------------------------------------------------------
# policies (same calling convention: queue state + RNG words -> server, RNG words)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _pick_pod(q, d, samp, use_fy, s0, s1, s2, s3):
    """Power-of-d: sample ``d`` distinct servers, return the one with the shortest queue.

    The sample comes out in uniformly random order, so keeping the *first* minimum (strict ``<``)
    breaks ties uniformly at random among the sampled shortest queues without extra draws.
    ``use_fy``: partial Fisher-Yates (:func:`sim.core.sampling.shortest_fy`), else rejection of
    repeats (:func:`_pick_pod_rej`).
    """
    if use_fy:
        return shortest_fy(q, d, samp, s0, s1, s2, s3)
    return _pick_pod_rej(q, d, samp, s0, s1, s2, s3)


# The two pod samplers (shortest_fy, _pick_pod_rej) are inlined into the event loop at numba-IR
# level (inline='always'): left to LLVM, _pick_pod_rej stays an out-of-line call on every arrival (its loops exceed the
# inlining threshold) -- 16 arguments pushed on the stack, the result tuple returned through
# memory and the RNG state spilled (figures: docs/performance.md).
@njit(cache=True, inline='always')
def _pick_pod_rej(q, d, samp, s0, s1, s2, s3):
    """Power-of-d by rejection of repeats (``samp[:d]`` is scratch): O(d**2), for d << N."""
    n_servers = q.size
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    best = below(r, n_servers)
    bq = q[best]
    samp[0] = best
    for j in range(1, d):
        while True:
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            c = below(r, n_servers)
            dup = False
            for k in range(j):
                if samp[k] == c:
                    dup = True
                    break
            if not dup:
                break
        samp[j] = c
        if q[c] < bq:
            best = c
            bq = q[c]
    return best, s0, s1, s2, s3


# --------------------------------------------------------------------------------------------
# the event loop
# --------------------------------------------------------------------------------------------


@functools.cache
def _make_run_span(policy: int, use_fy: bool, hetero: bool, record: bool = False):
    """The event loop compiled for one policy code, pod sampling method and rate layout.

    ``policy``, ``use_fy`` and ``hetero`` are free variables of the returned ``@njit`` function,
    so numba compiles them as constants and LLVM removes the untaken branches: one tight loop per
    combination, compiled on first use and cached on disk (numba keys the cache on the closure's
    values), faster than one loop testing the (perfectly predicted) flags at run time. The
    policy branch is thus taken once, outside the hot loop.

    ``record`` (also a closure constant: a separate compiled variant, so that the loop of a run
    that does not record is the one it was) records each arrival's queue position for the
    response-time distribution (:mod:`sim.core.responses`, docs/responses.md) in the recorder
    arrays ``r_*`` (a :class:`sim.core.responses.Recorder` for ``k = 1``, unpacked; ignored when
    ``record`` is false): ``r_sig[w, p - 1] += 1`` inline for positions ``p`` up to
    ``r_sig.shape[1]``, deeper ones on the grid through :func:`sim.core.responses.record_job`.
    It draws no random number and changes nothing else.
    """
    policy, use_fy, hetero, record = int(policy), bool(use_fy), bool(hetero), bool(record)

    @njit(cache=True)
    def run_span(d, p_arrival, alias_thr, alias_idx, probes_per_job,
                 q, buf, head, cnt, acc, perm, pos, start, samp, bounds, state, w_first, e_first,
                 w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail, w_probes,
                 r_sig, r_grid, r_over, r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps,
                 r_cs, r_key):
        """Process events from ``e_first`` (inside window ``w_first``) on, until the end of the
        run or until a queue fills its ring buffer (``q[n] == C``) -- then stop after that event
        so that the caller can grow the arrays (reassigning arrays inside this loop would cost
        reference counting on every event). Returns ``(window, next event)``; window == number
        of windows when done.

        Window accumulators are added to the outputs with ``+=`` (a window may be split by a
        stop; ``cnt`` and ``acc`` carry over a stop, so the level areas of a split window are
        complete when it is flushed).

        The total queue length and its area are not updated per event: the queue area is the
        sum of the level areas, so both are summed from ``cnt`` and ``acc`` when a window is
        flushed (O(levels) per window instead of two adds and two live registers per event,
        which the loop would spill to the stack: read-modify-writes of memory on every event).
        Likewise arrivals that start service at once are ``arrivals - waited``.
        """
        n_servers = q.size
        c = buf.shape[1]
        mask = c - 1
        n_windows = bounds.size - 1
        shift = window_shift(bounds)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        w = w_first
        e_next = e_first
        full = False
        while w < n_windows and not full:
            e0 = bounds[w]
            e1 = bounds[w + 1]
            arrivals = np.int64(0)
            waited = np.int64(0)  # arrivals that found their server busy
            e = e_next
            while e < e1:
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                if r < p_arrival:
                    # ---- arrival: route, append to the server's FIFO
                    if policy == POD and use_fy:
                        n, s0, s1, s2, s3 = shortest_fy(q, d, samp, s0, s1, s2, s3)
                    elif policy == POD:
                        n, s0, s1, s2, s3 = _pick_pod_rej(q, d, samp, s0, s1, s2, s3)
                    elif policy == JSQ:
                        n, s0, s1, s2, s3 = pick_lowest(q, perm, start, s0, s1, s2, s3)
                    else:
                        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                        n = below(r, n_servers)
                    lvl = append_task(n, e, e0, q, buf, head, mask, cnt, acc)
                    if policy == JSQ:
                        bucket_up(perm, pos, start, n, lvl)
                    arrivals += 1
                    if lvl > 0:
                        waited += 1
                    if record:  # FIFO, Exp(1): this task's response is Gamma(lvl + 1, 1)
                        if lvl < r_sig.shape[1]:
                            r_sig[w, lvl] += 1
                        else:  # deep position (rare): on the grid (k = 1: job_signature is not read)
                            record_job(w, 1, r_ps, lvl + 1, r_sig, r_grid, r_over, r_keys,
                                       r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps, r_cs,
                                       r_key)
                    if lvl + 1 == c:  # ring full: stop after this event and grow
                        full = True
                        e += 1
                        break
                else:
                    # ---- service token: wasted at an idle server
                    n, s0, s1, s2, s3 = alias_server(n_servers, hetero, alias_thr, alias_idx, s0, s1, s2, s3)
                    lvl = q[n]
                    if lvl > 0:
                        h = head[n]
                        a = buf[n, h]
                        if a >= 0:  # not a job present at time 0 (-1)
                            wa = window_of(a, shift)
                            w_jobs[wa] += 1
                            w_resp[wa] += e - a
                        h = (h + 1) & mask
                        head[n] = h
                        q[n] = lvl - 1
                        de = e - e0
                        cnt[lvl] -= 1
                        acc[lvl] -= de
                        if policy == JSQ:
                            bucket_down(perm, pos, start, n, lvl)
                        # The next task, if any (lvl > 1), reaches the head and starts
                        # service. Branch-free, as lvl > 1 is hard to predict (P = s_2 / s_1,
                        # about 0.8): the slot is read in any case -- if lvl == 1 it is stale,
                        # but every slot holds -1 or a past arrival (rings start filled with
                        # -1, grow_rings fills with -1), so max(a, 0) is a valid window -- and
                        # +0 / +0.0 (bitwise no-ops) are added when there is no such task or
                        # its arrival is unknown.
                        a = buf[n, h]
                        ok = (lvl > 1) & (a >= 0)
                        wa = window_of(max(a, 0), shift)
                        w_starts[wa] += np.int64(ok)
                        w_wait[wa] += (e - a) if ok else 0.0
                e += 1
            w_starts[w] += arrivals - waited  # service starts at once, wait 0
            w_arr[w] += arrivals
            w_waited[w] += waited
            w_probes[w] += arrivals * probes_per_job
            e_next = e
            if e == e1:
                flush_levels(w, e1 - e0, cnt, acc, w_tail, w_qarea)
                w += 1
        state[0] = s0
        state[1] = s1
        state[2] = s2
        state[3] = s3
        return w, e_next

    return run_span


def agent_kernel(policy, d, use_fy, p_arrival, hetero, alias_thr, alias_idx,
                 q, buf, head, bounds, state,
                 w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail, w_probes,
                 rec=None):
    """Run ``bounds[-1]`` uniformized events and fill the per-window accumulators.

    Parameters (all prepared and validated by :func:`sim.dispatch.agent.simulate`)
    ----------
    policy : int            RANDOM, JSQ or POD.
    d : int                 pod sample size.
    use_fy : bool           pod sampling by partial Fisher-Yates (else rejection of repeats).
    p_arrival : uint64      an event is an arrival iff the raw 64-bit draw is below it
                            (``floor(2**64 * lam / (1 + lam))``).
    hetero : bool           service tokens by alias table (else uniform server).
    alias_thr, alias_idx :  alias table: server ``i = below(N)`` keeps the token iff the next raw
                            draw is below ``alias_thr[i]``, else passes it to ``alias_idx[i]``.
    q, buf, head :          initial queues (int64[N]), ring buffers (int32 or int64 [N, C], C a
                            power of two > max q, filled with -1: every slot must hold -1 or a
                            past arrival), heads (int64[N], zeros). ``q`` and ``head`` are
                            updated in place; ``buf`` is reallocated internally when a queue
                            fills it.
    bounds : int64[W+1]     event index where each window starts; ``bounds[-1]`` = events.
    state : uint64[4]       xoshiro256+ state, advanced in place.
    w_* : outputs (zero-initialised), one entry (row) per window: jobs completed, sum of their
          responses and of waits (in events), service starts, arrivals, arrivals that waited,
          queue area and tail areas ``w_tail[w, i-1]`` = sum over the window's events of
          #servers with >= i tasks (state after each event), probe messages.
    rec : :class:`sim.core.responses.Recorder` (``k = 1``) or None
                            if given, each arrival's queue position is recorded there (window of
                            its arrival) by the compiled variant that records; None: the plain
                            loop. Positions are the same with unequal rates, but the response law
                            of :mod:`sim.core.responses` is then wrong: the caller refuses that.

    Areas are integrated lazily: with ``e0`` the window's first event, a change ``delta`` of a
    level count at event ``e`` adds ``delta * (e - e0)`` to ``acc[level]``; at the window end the
    area is ``cnt[level] * (window length) - acc[level]``. O(1) per event, O(levels) per window.

    This driver is plain Python: it picks the compiled loop for the policy
    (:func:`_make_run_span`, branching once, outside the hot loop), runs it, and calls
    :func:`grow_rings` between spans when a ring buffer fills.

    Returns the final ring buffer (a new array if it grew; ``buf.shape[1]`` is its capacity).
    """
    n_servers = q.size
    policy, d = int(policy), int(d)
    use_fy = bool(use_fy) and policy == POD
    hetero = bool(hetero)
    cnt, acc, perm, pos, start = level_arrays(q, buf.shape[1] + 2, policy == JSQ)
    samp = np.arange(n_servers, dtype=np.int64)
    probes_per_job = {RANDOM: 0, JSQ: n_servers, POD: d}[policy]
    n_windows = bounds.size - 1
    record = rec is not None
    if not record:
        rec = dummy_recorder()
    run_span = _make_run_span(policy, use_fy, hetero, record)
    # The loop works on unsigned copies of q and head (written back at the end): a zero-extended
    # unsigned value is known to LLVM to be non-negative, so numba's negative-index wraparound
    # of buf[n, (head[n] + lvl) & mask], cnt[lvl + 1], ... is compiled away, which int64 and
    # int32 (signed) do not allow (at N = 10**4 the wraparound mattered, not the footprint).
    # They are as narrow as the ring capacity allows (queue_dtype: uint8 up to C = 128): at
    # N = 10**6 q and head take 1 MB each instead of 4, so they stay in cache while the rings
    # do not; results bitwise unchanged (docs/performance.md, "the memory floor").
    qw = q.astype(queue_dtype(buf.shape[1]))
    hw = head.astype(qw.dtype)
    w, e = 0, int(bounds[0])
    while True:
        w, e = run_span(d, p_arrival, alias_thr, alias_idx, probes_per_job,
                        qw, buf, hw, cnt, acc, perm, pos, start, samp, bounds,
                        state, w, e, w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited,
                        w_qarea, w_tail, w_probes, *rec)
        if w >= n_windows:
            break
        buf, cnt, acc, start = grow_rings(qw, buf, hw, cnt, acc, start)
        if queue_dtype(buf.shape[1]) != qw.dtype:  # queues may now reach the new capacity
            qw = qw.astype(queue_dtype(buf.shape[1]))
            hw = hw.astype(qw.dtype)
    q[:] = qw
    head[:] = hw
    return buf
