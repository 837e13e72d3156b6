"""The event loop of the partial-centralization agent and occupancy engines (private; the
kernels are :mod:`sim.centralization._agent_kernel` and :mod:`sim.centralization._occupancy_kernel`).

Both run the uniformized chain of total rate ``N (1 + lam)``: per event one raw 64-bit draw
``r`` decides the kind -- arrival if ``r < thr_arrival``, local tick if ``r < thr_local``
(cumulative threshold), central tick otherwise (never when ``central`` is False, i.e. ``p = 0``)
-- and a second draw picks the station of an arrival or local tick, uniformly. The agent engine
keeps every station (:func:`_push`, :func:`_serve`); the occupancy engine only the counts
``cnt[l]`` (:func:`_level_of`). One loop (:func:`_make_span`) serves both, the engine a
compile-time constant of the closure, so each engine's loop is compiled without the other's
branches.

Time averages: the lazy area accumulation of :mod:`sim.core.windows` -- a change of ``cnt[l]``
at event ``e`` of a window starting at ``e0`` adds ``delta * (e - e0)`` to ``acc[l]``; at the
window's end the area is ``cnt[l] * length - acc[l]``.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.buckets import bucket_down, bucket_up
from sim.core.rng import below, next_raw, u01
from sim.core.windows import flush_window, window_of, window_shift


@njit(cache=True)
def _level_of(cnt, top, u):
    """Queue length of the station of rank ``u`` (stations ranked by decreasing queue length):
    the largest ``l`` in ``0..top`` with ``cnt[l] > u`` (``cnt`` is non-increasing, cnt[0] = N).
    Branch-free binary search (the comparison feeds an add, not a jump): on invariant-state
    counts the comparisons are unpredictable, so it beats the branching one (figures:
    docs/performance.md#partial-centralization-kernels-simcentralization_agent_kernelpy-_occupancy_kernelpy)."""
    lo = np.int64(0)
    n = top + 1
    while n > 1:
        half = n >> 1
        lo += half * (cnt[lo + half] > u)
        n -= half
    return lo


@njit(cache=True, inline="always")
def count_arrival(cnt, acc, lvl, de, h, top, qacc, total, arrivals, waited, within):
    """Bookkeeping of a task joining a station of ``lvl`` tasks at ``de`` events into the
    window (lazy areas of :mod:`sim.core.windows`): the level counts and their areas, the
    longest queue, the window's arrivals, those that found the station non-empty and those to
    a queue shorter than ``h``. Returns ``(top, qacc, total, arrivals, waited, within)``."""
    cnt[lvl + 1] += 1
    acc[lvl + 1] += de
    qacc += de
    total += 1
    if lvl + 1 > top:
        top = lvl + 1
    arrivals += 1
    if lvl > 0:
        waited += 1
    if lvl < h:
        within += 1
    return top, qacc, total, arrivals, waited, within


@njit(cache=True, inline="always")
def count_departure(cnt, acc, lvl, de, qacc, total):
    """Bookkeeping of a task leaving a station of ``lvl`` tasks; returns ``(qacc, total)``."""
    cnt[lvl] -= 1
    acc[lvl] -= de
    qacc -= de
    total -= 1
    return qacc, total


@njit(cache=True, inline="always")
def end_window(w, e, e0, e1, cnt, acc, total, arrivals, waited, within, qacc,
               w_arr, w_waited, w_within, w_qarea, w_tail):
    """A span leaves window ``w`` (events ``e0..e1 - 1``) at event ``e``: its counts are added,
    and if the window is complete its areas are flushed. Returns the window to go on with."""
    w_arr[w] += arrivals
    w_waited[w] += waited
    w_within[w] += within
    w_qarea[w] -= qacc
    if e == e1:
        flush_window(w, e1 - e0, cnt, acc, total, w_tail, w_qarea)
        w += 1
    return w


@njit(cache=True, inline="always")
def _push(n, a, q, buf, head, mask, perm, pos, start):
    """A task arriving at event ``a`` (NaN: not measured) joins the back of station ``n``'s
    ring; the buckets follow. Returns the station's queue length before."""
    lvl = q[n]
    buf[n, (head[n] + lvl) & mask] = a
    q[n] = lvl + 1
    bucket_up(perm, pos, start, n, lvl)
    return lvl


@njit(cache=True, inline="always")
def _serve(r, thr_local, central, e, q, buf, head, mask, perm, pos, start, top, shift, w_jobs,
           w_resp, s0, s1, s2, s3):
    """A non-arrival event (raw draw ``r``) at event ``e``: a local tick at a uniform station
    (wasted if it is empty), or a central tick at a uniform longest queue (``perm[start[top]:]``;
    none when all are empty). The served station completes the task at the head of its ring;
    a measured one (not NaN) is credited to the window of its arrival. Returns ``(queue length
    before, 0 if none served; 1 if the task was measured, else 0; longest queue, s0..s3)``."""
    n_servers = q.size
    n = np.int64(-1)
    if r < thr_local or not central:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        n = below(r, n_servers)
        if q[n] == 0:
            n = -1  # wasted local tick
    elif top > 0:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        b = start[top]
        n = perm[b + below(r, n_servers - b)]
    if n < 0:
        return np.int64(0), np.int64(0), top, s0, s1, s2, s3
    lvl = q[n]
    hd = head[n]
    a = buf[n, hd]
    tracked = np.int64(0)
    if a == a:  # not NaN: a measured task
        wa = window_of(a, shift)
        w_jobs[wa] += 1
        w_resp[wa] += e - a
        tracked = np.int64(1)
    head[n] = (hd + 1) & mask
    q[n] = lvl - 1
    bucket_down(perm, pos, start, n, lvl)
    if lvl == top and start[top] == n_servers:
        top -= 1
    return np.int64(lvl), tracked, top, s0, s1, s2, s3


@functools.cache
def _make_span(agent: bool):
    """The event loop of the agent engine (``agent``: stations with rings and buckets) or of
    the occupancy engine (counts only), a closure constant."""
    agent = bool(agent)

    @njit(cache=True)
    def span(thr_arrival, thr_local, central, h, n_servers, q, buf, head, cnt, acc, perm, pos,
             start, top_ref, bounds, state, w_first, e_first, w_jobs, w_resp, w_arr, w_waited,
             w_within, w_qarea, w_tail):
        """Run from event ``e_first`` (window ``w_first``) on; stop at the end of the run, or
        after an arrival that fills a ring buffer (agent) or brings ``top`` to ``cnt.size - 2``
        (occupancy): the driver grows the arrays. Returns ``(window, next event)``; window ==
        number of windows when done. ``top_ref[0]`` holds the longest queue across calls."""
        c = buf.shape[1]
        mask = c - 1
        nf = float(n_servers)
        n_windows = bounds.size - 1
        shift = window_shift(bounds)
        total = np.int64(0)
        for lev in range(1, cnt.size):
            total += cnt[lev]
        top = top_ref[0]
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        w, e_next, full = w_first, e_first, False
        while w < n_windows and not full:
            e0, e1 = bounds[w], bounds[w + 1]
            arrivals, waited, within, qacc = np.int64(0), np.int64(0), np.int64(0), np.int64(0)
            e = e_next
            while e < e1:
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                if r < thr_arrival:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    if agent:
                        lvl = _push(below(r, n_servers), e, q, buf, head, mask, perm, pos, start)
                    else:
                        lvl = _level_of(cnt, top, min(np.int64(u01(r) * nf), n_servers - 1))
                    top, qacc, total, arrivals, waited, within = count_arrival(
                        cnt, acc, lvl, e - e0, h, top, qacc, total, arrivals, waited, within)
                    if (lvl + 1 == c) if agent else (top + 2 >= cnt.size):
                        full = True  # stop after this event and grow
                        e += 1
                        break
                else:
                    if agent:
                        lvl, _, top, s0, s1, s2, s3 = _serve(r, thr_local, central, e, q, buf,
                                                             head, mask, perm, pos, start, top,
                                                             shift, w_jobs, w_resp,
                                                             s0, s1, s2, s3)
                    elif r < thr_local or not central:
                        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                        lvl = _level_of(cnt, top, min(np.int64(u01(r) * nf), n_servers - 1))
                    else:
                        lvl = top
                    if lvl > 0:
                        qacc, total = count_departure(cnt, acc, lvl, e - e0, qacc, total)
                        if not agent and lvl == top and cnt[lvl] == 0:
                            top -= 1
                e += 1
            e_next = e
            w = end_window(w, e, e0, e1, cnt, acc, total, arrivals, waited, within, qacc,
                           w_arr, w_waited, w_within, w_qarea, w_tail)
        top_ref[0] = top
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        return w, e_next

    return span
