"""Compiled loop of the general-size engine (private; the public API is :mod:`sim.dispatch.general`).

State, per server ``n``: a FIFO ring ``ring[n, :]`` of the completion times of its queued
tasks, oldest first from ``head[n]``, ``q[n]`` entries, and ``clast[n]``, the completion time
of the last task it was given. Under FIFO a task's completion is known when it is assigned
(``max(t, clast[n]) + size``), so an arrival is the only event the loop draws: a departure is
the passing of a time already stored.

Two ways to read the state (``docs/service.md``, "The engine"):

- **lazy** (random, SQ(d), LL(d)): nothing happens at a departure. A ring keeps entries whose
  time has passed until the server is next looked at; then the entries ``<= t`` are dropped
  from its head (each entry once: O(1) amortised per task) and ``q[n]`` is its queue length
  at ``t``. LL(d) compares ``max(clast, t)`` (the time the server's work runs out) and reads
  no ring.
- **calendar** (JSQ, JIQ): these need the whole system's queue lengths, so departures are
  applied in time as the clock passes them: each busy server sits in a calendar queue
  (Brown 1988) keyed by the completion of the task in its service, ``B`` buckets of width
  ``delta`` (a power of two, a year ``B delta`` of a few mean service times), doubly linked
  through ``nxt``/``prv``. An arrival at ``t`` scans the buckets from the last arrival's to
  ``t``'s and applies every due departure; the servers are bucket-sorted by exact queue
  length (:mod:`sim.core.buckets`), so JSQ is O(1) and JIQ (one dispatcher, whose I-queue
  lists every idle server) joins an idle server while there is one, else a random one.
  With ``delta`` the mean inter-arrival time a scan passes about one bucket per arrival and
  meets about ``1 / year`` servers of later years per arrival: O(1) whatever N.

Everything measured is a property of the arriving task, fixed at its arrival (its wait
``max(clast - t, 0)``, its response, whether it waits, and the time it will spend at each
position ``p`` of its queue), so it is credited to the window of its arrival with no
censoring at the end of the run: the time at position ``p`` is ``D[j + 1] - D[j]`` with
``j = l + 1 - p``, ``D[0] = t``, ``D[1..l]`` the completions of the ``l`` tasks ahead and
``D[l + 1]`` its own. Summed over arrivals and divided by ``N`` times the window's time,
these give the time-average fraction of servers with at least ``p`` tasks (``H = lam G``:
a server has ``>= p`` tasks exactly while some task is at its position ``p``), and the sum
of responses the mean queue (Little).

Windows are ``2**k`` arrivals (:func:`sim.core.windows.window_bounds` over arrivals); a
window's time is the sum of its arrivals' inter-arrival gaps. The loop stops after an arrival
that fills a ring (``q[n] == C``) so that the driver can double the rings; arrays are never
reassigned inside the loop.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from sim.core.buckets import bucket_down, bucket_up, build_buckets, pick_lowest
from sim.core.rng import below, next_raw
from sim.core.sampling import first_min, sample_fy
from sim.core.service import draw_size, exp_draw
from sim.core.windows import window_shift

#: policy codes of this engine
RANDOM, SQD, LLD, JSQ, JIQ = 0, 1, 2, 3, 4
#: the policies that need the calendar of departures
CALENDAR = (JSQ, JIQ)


@njit(cache=True, inline="always")
def _cal_insert(n, time, inv_delta, bmask, cal_head, nxt, prv, calb):
    b = np.int64(time * inv_delta) & bmask
    first = cal_head[b]
    nxt[n] = first
    prv[n] = -1
    if first >= 0:
        prv[first] = n
    cal_head[b] = n
    calb[n] = b


@njit(cache=True, inline="always")
def _cal_remove(n, cal_head, nxt, prv, calb):
    p = prv[n]
    x = nxt[n]
    if p >= 0:
        nxt[p] = x
    else:
        cal_head[calb[n]] = x
    if x >= 0:
        prv[x] = p


@njit(cache=True, inline="always")
def apply_departures(t, jcur, mask, bmask, ring, head, q, perm, pos, start, cal_head, nxt, prv,
                     calb, inv_delta):
    """Apply every departure due by ``t`` from the calendar buckets ``jcur..jt`` (``jt`` the
    bucket of ``t``; at most one year of them): each server met whose head completion is
    ``<= t`` drops its completions ``<= t`` (moving down the JSQ buckets one level per task)
    and is filed again under its new head completion if it still has tasks; servers of later
    years stay where they are. Returns ``jt``, where the next scan starts."""
    jt = np.int64(t * inv_delta)
    nb = min(jt - jcur + 1, cal_head.size)
    for jj in range(nb):
        m = cal_head[(jcur + jj) & bmask]
        while m >= 0:
            after = nxt[m]
            if ring[m, head[m]] <= t:
                h = head[m]
                lvl = q[m]
                while lvl > 0 and ring[m, h] <= t:
                    h = (h + 1) & mask
                    bucket_down(perm, pos, start, m, lvl)
                    lvl -= 1
                head[m] = h
                q[m] = lvl
                _cal_remove(m, cal_head, nxt, prv, calb)
                if lvl > 0:
                    _cal_insert(m, ring[m, h], inv_delta, bmask, cal_head, nxt, prv, calb)
            m = after
    return jt


@njit(cache=True, inline="always")
def loop_sizes(ring, cal_head, bounds):
    """What an arrival loop over the state of :func:`new_state` reads once: the ring capacity
    ``C`` and its index mask ``C - 1``, the calendar's bucket mask, the window shift and the
    arrival at which the run ends."""
    c = ring.shape[1]
    return c, c - 1, cal_head.size - 1, window_shift(bounds), bounds[bounds.size - 1]


@njit(cache=True, inline="always")
def pop_done(n, t, ring, head, q, mask):
    """Drop from server ``n``'s ring the completions ``<= t`` (lazy read); its queue at ``t``."""
    h = head[n]
    lvl = q[n]
    while lvl > 0 and ring[n, h] <= t:
        h = (h + 1) & mask
        lvl -= 1
    head[n] = h
    q[n] = lvl
    return lvl


@njit(cache=True, inline="always")
def shortest_lazy(samp, m, t, ring, head, q, mask):
    """Read the queues of the sampled servers ``samp[:m]`` at ``t`` (:func:`pop_done`); the
    first shortest of them (ties uniform when the sample is in uniformly random order)."""
    for j in range(m):
        pop_done(samp[j], t, ring, head, q, mask)
    return first_min(q, samp, m)


@njit(cache=True, inline="always")
def join(n, lvl, t, w, size, ring, head, q, clast, mask, w_tail, calendar, perm, pos, start,
         cal_head, nxt, prv, calb, inv_delta, bmask):
    """A task of ``size`` arriving at ``t`` (window ``w``) joins server ``n``, which holds
    ``lvl`` tasks: its completion ``max(t, clast[n]) + size`` is written to the ring, and the
    time it will spend at positions ``1..min(lvl + 1, max_level)`` of the queue credited to
    ``w_tail[w]`` (``D[j + 1] - D[j]``, ``j = lvl + 1 - p``: the module's docstring); with the
    ``calendar`` the server moves up its JSQ bucket and, if it was idle, enters the calendar
    under the task's completion. Returns ``(wait, completion)``.

    The caller draws the size: an RNG draw inlined into a function that is itself inlined
    (``inline='always'`` two levels deep) measured 37% slower per arrival (SQ(2),
    N = 10**4), the RNG state then passing through memory."""
    wait = max(clast[n] - t, 0.0)
    own = t + wait + size
    h = head[n]
    nxt_time = own
    for p in range(1, min(lvl + 1, w_tail.shape[1]) + 1):
        j = lvl + 1 - p
        prev_time = t if j == 0 else ring[n, (h + j - 1) & mask]
        w_tail[w, p - 1] += nxt_time - prev_time
        nxt_time = prev_time
    ring[n, (h + lvl) & mask] = own
    q[n] = lvl + 1
    clast[n] = own
    if calendar:
        bucket_up(perm, pos, start, n, lvl)
        if lvl == 0:
            _cal_insert(n, own, inv_delta, bmask, cal_head, nxt, prv, calb)
    return wait, own


@njit(cache=True, inline="always")
def _add_window(w, w_time, w_n, w_waited, w_wait, w_wait2, w_resp, w_resp2, x_time, x_n,
                x_waited, x_wait, x_wait2, x_resp, x_resp2):
    """Add the sums of window ``w``, which the loop keeps in locals (registers), to its
    entries of the window arrays."""
    w_time[w] += x_time
    w_n[w] += x_n
    w_waited[w] += x_waited
    w_wait[w] += x_wait
    w_wait2[w] += x_wait2
    w_resp[w] += x_resp
    w_resp2[w] += x_resp2


@functools.cache
def make_loop(policy: int, use_fy: bool):
    """The arrival loop compiled for one policy code (and, for SQ(d) and LL(d), the sampling
    of ``d`` distinct servers: partial Fisher-Yates when ``use_fy``, else rejection of
    repeats): closure constants, so untaken branches compile away."""
    policy, use_fy = int(policy), bool(use_fy)
    calendar = policy in CALENDAR

    @njit(cache=True)
    def loop(d, rate, law, law_params, ring, head, q, clast, samp, perm, pos, start,
             cal_head, nxt, prv, calb, inv_delta, istate, fstate, bounds, state,
             w_time, w_n, w_waited, w_wait, w_wait2, w_resp, w_resp2, w_tail):
        """Arrivals from ``istate[0]`` to ``bounds[-1]``, or to the first that fills a ring.
        ``istate``: next arrival, calendar bucket of the last scan; ``fstate``: the clock.
        Returns True when the run is done."""
        n_servers = q.size
        c, mask, bmask, shift, end = loop_sizes(ring, cal_head, bounds)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        a, jcur, t = istate[0], istate[1], fstate[0]
        done = True
        # the window's sums are kept in locals (registers) and added to the arrays when the
        # window changes or the loop stops
        w = a >> shift
        x_time = x_wait = x_wait2 = x_resp = x_resp2 = 0.0
        x_n = x_waited = np.int64(0)
        while a < end:
            wa = a >> shift
            if wa != w:
                _add_window(w, w_time, w_n, w_waited, w_wait, w_wait2, w_resp, w_resp2, x_time,
                            x_n, x_waited, x_wait, x_wait2, x_resp, x_resp2)
                x_time = x_wait = x_wait2 = x_resp = x_resp2 = 0.0
                x_n = x_waited = np.int64(0)
                w = wa
            e, s0, s1, s2, s3 = exp_draw(s0, s1, s2, s3)
            gap = e / rate
            t += gap
            x_time += gap
            if calendar:  # apply the departures due by t, bucket by bucket
                jcur = apply_departures(t, jcur, mask, bmask, ring, head, q, perm, pos, start,
                                        cal_head, nxt, prv, calb, inv_delta)
            # ---- the server
            if policy == RANDOM:
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                n = below(r, n_servers)
            elif policy == JSQ:
                n, s0, s1, s2, s3 = pick_lowest(q, perm, start, s0, s1, s2, s3)
            elif policy == JIQ:
                if start[1] > 0:  # an idle server: uniform among them
                    n, s0, s1, s2, s3 = pick_lowest(q, perm, start, s0, s1, s2, s3)
                else:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    n = below(r, n_servers)
            else:  # SQ(d), LL(d): d distinct servers, the first best (ties uniform)
                if use_fy:
                    s0, s1, s2, s3 = sample_fy(samp, d, s0, s1, s2, s3)
                else:
                    for j in range(d):
                        while True:
                            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                            cand = below(r, n_servers)
                            dup = False
                            for i in range(j):
                                if samp[i] == cand:
                                    dup = True
                                    break
                            if not dup:
                                break
                        samp[j] = cand
                if policy == SQD:
                    n = shortest_lazy(samp, d, t, ring, head, q, mask)
                else:
                    n = samp[0]
                    bw = max(clast[n], t)
                    for j in range(1, d):
                        m = samp[j]
                        wm = max(clast[m], t)
                        if wm < bw:
                            n = m
                            bw = wm
            # ---- the task joins server n (SQ(d) read the queues of its sample)
            if calendar or policy == SQD:
                lvl = q[n]
            else:
                lvl = pop_done(n, t, ring, head, q, mask)
            size, s0, s1, s2, s3 = draw_size(law, law_params, s0, s1, s2, s3)
            wait, _ = join(n, lvl, t, w, size, ring, head, q, clast, mask, w_tail, calendar, perm,
                           pos, start, cal_head, nxt, prv, calb, inv_delta, bmask)
            resp = wait + size
            x_n += 1
            x_wait += wait
            x_wait2 += wait * wait
            x_resp += resp
            x_resp2 += resp * resp
            if lvl > 0:
                x_waited += 1
            a += 1
            if lvl + 1 == c:  # ring full: stop so that the driver can grow it
                done = a >= end
                if not done:
                    break
        if x_n > 0:
            _add_window(w, w_time, w_n, w_waited, w_wait, w_wait2, w_resp, w_resp2, x_time, x_n,
                        x_waited, x_wait, x_wait2, x_resp, x_resp2)
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        istate[0], istate[1], fstate[0] = a, jcur, t
        return done

    return loop


def grow(ring, head, q, start):
    """Double the rings' capacity (each unrolled to start at slot 0) and extend the bucket
    boundaries (a level no server has starts at N)."""
    n_servers, c_old = ring.shape
    new = np.zeros((n_servers, 2 * c_old))
    idx = (head[:, None] + np.arange(c_old)[None, :]) & (c_old - 1)
    new[:, :c_old] = np.take_along_axis(ring, idx, axis=1)
    head[:] = 0
    start = np.concatenate((start, np.full(c_old, start[-1], dtype=start.dtype)))
    return new, start


def new_state(n_servers: int, capacity: int, calendar: bool, rate: float):
    """Empty servers: rings, heads, queues, last completions, the sampling permutation, JSQ
    buckets (placeholders unless ``calendar``) and the calendar (bucket heads, links, bucket
    of each server, ``1 / delta``): ``B`` the power of two at or above ``4 rate`` and
    ``delta = 4 / B`` (the mean inter-arrival time ``1 / rate`` or a little less; a year of
    4 time units, four mean sizes)."""
    ring = np.zeros((n_servers, capacity))
    head = np.zeros(n_servers, dtype=np.int64)
    q = np.zeros(n_servers, dtype=np.int64)
    clast = np.zeros(n_servers)
    samp = np.arange(n_servers, dtype=np.int64)
    if calendar:
        perm, pos, start = build_buckets(q, capacity + 2)
        n_buckets = 1 << max(int(math.ceil(math.log2(4.0 * rate))), 4)
        cal_head = np.full(n_buckets, -1, dtype=np.int64)
        links = n_servers
        inv_delta = n_buckets / 4.0
    else:
        perm = pos = np.zeros(1, dtype=np.int64)
        start = np.zeros(capacity + 2, dtype=np.int64)
        cal_head = np.full(1, -1, dtype=np.int64)
        links = 1
        inv_delta = 1.0
    nxt = np.full(links, -1, dtype=np.int64)
    prv = np.full(links, -1, dtype=np.int64)
    calb = np.zeros(links, dtype=np.int64)
    return ring, head, q, clast, samp, perm, pos, start, cal_head, nxt, prv, calb, inv_delta


def new_run(run, n_float: int, n_int: int, n_istate: int):
    """What a loop of this engine fills besides the servers, on the windows of ``run`` (a
    :class:`sim.core.skeleton.Run` over arrivals): ``n_float`` float and ``n_int`` int64 sums per
    window, the time at each position per window (``w_tail``), the RNG state, and the loop's
    resume state (``n_istate`` integers: next arrival, calendar bucket, ...; the clock)."""
    floats = tuple(run.zeros(float) for _ in range(n_float))
    ints = tuple(run.zeros() for _ in range(n_int))
    return (floats, ints, run.tail_zeros(float), run.xoshiro(),
            np.zeros(n_istate, dtype=np.int64), np.zeros(1))
