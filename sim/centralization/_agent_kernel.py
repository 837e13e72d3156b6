"""Compiled kernels of the partial-centralization agent engine (private; the public API is
:mod:`sim.centralization.agent`).

The engine runs the uniformized chain of total rate ``N (1 + lam)``: per event one raw 64-bit
draw ``r`` decides the kind -- arrival if ``r < thr_arrival``, local tick if ``r < thr_local``
(cumulative threshold), central tick otherwise (never when ``central`` is False, i.e. ``p = 0``) --
and a second draw picks the station of an arrival or local tick, uniformly (as the occupancy
engine's kernel, :mod:`sim.centralization._occupancy_kernel`).

From :mod:`sim.core` (imported, not copied): xoshiro256+ (``next_raw``, ``below``), the bucket
structure (``build_buckets``, ``bucket_up``, ``bucket_down``), the window helpers; the Python
driver uses the ring-buffer growth ``grow_rings`` and ``close_censored``. Arrays are never
reassigned inside a loop: when a ring buffer fills, the loop stops after that event and the
Python driver grows it and resumes.

Agent engine (:func:`agent_span`, :func:`drain_span`): ``q[n]`` tasks at station ``n``, a FIFO ring
buffer ``buf[n, :]`` of their arrival event indices (NaN: present at time 0 or arrived during the
drain, i.e. not measured), ``cnt[l]`` = stations with at least ``l`` tasks. The stations are kept
bucket-sorted by queue length (``perm``/``pos``/``start`` of :mod:`sim.core.buckets`, so
``perm[start[l]:]`` are the stations with ``q >= l``) and ``top`` is the longest queue: a central
tick serves ``perm[start[top] + U]``, ``U`` uniform on ``[0, N - start[top])`` -- uniform among
the longest queues in O(1). Every departure is the head of its queue (FIFO), credited to the
window in which the task *arrived*.

Time averages: the lazy area accumulation of :mod:`sim.core.windows` -- a change of ``cnt[l]``
at event ``e`` of a window starting at ``e0`` adds ``delta * (e - e0)`` to ``acc[l]``; at the
window's end the area is ``cnt[l] * length - acc[l]``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core.buckets import bucket_down, bucket_up
from sim.core.fifo import append_task
from sim.core.rng import below, next_raw
from sim.core.windows import flush_window, window_of, window_shift


@njit(cache=True)
def agent_span(thr_arrival, thr_local, central, h,
               q, buf, head, cnt, acc, perm, pos, start, top_ref, bounds, state, w_first, e_first,
               w_jobs, w_resp, w_arr, w_waited, w_within, w_qarea, w_tail):
    """Main run of the agent engine from event ``e_first`` (window ``w_first``) on.

    Stops at the end of the run, or after an arrival that fills a ring buffer (``q[n] == C``).
    Returns ``(window, next event)``; window == number of windows when done. ``top_ref[0]`` holds
    the longest queue across calls. Per window: tasks completed and the sum of their responses
    (in events, credited to the arrival window), arrivals, arrivals that found a non-empty
    station, arrivals to a queue shorter than ``h``, queue area and tail areas.
    """
    n_servers = q.size
    c = buf.shape[1]
    mask = c - 1
    n_windows = bounds.size - 1
    shift = window_shift(bounds)
    total = np.int64(0)
    for n in range(n_servers):
        total += q[n]
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
                n = below(r, n_servers)
                lvl = append_task(n, e, e0, q, buf, head, mask, cnt, acc)
                qacc += e - e0
                total += 1
                bucket_up(perm, pos, start, n, lvl)
                if lvl + 1 > top:
                    top = lvl + 1
                arrivals += 1
                if lvl > 0:
                    waited += 1
                if lvl < h:
                    within += 1
                if lvl + 1 == c:  # ring full: stop after this event and grow
                    full = True
                    e += 1
                    break
            else:
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
                if n >= 0:
                    lvl = q[n]
                    hd = head[n]
                    a = buf[n, hd]
                    if a == a:  # not NaN: a measured task
                        wa = window_of(a, shift)
                        w_jobs[wa] += 1
                        w_resp[wa] += e - a
                    head[n] = (hd + 1) & mask
                    q[n] = lvl - 1
                    de = e - e0
                    cnt[lvl] -= 1
                    acc[lvl] -= de
                    qacc -= de
                    total -= 1
                    bucket_down(perm, pos, start, n, lvl)
                    if lvl == top and start[top] == n_servers:
                        top -= 1
            e += 1
        w_arr[w] += arrivals
        w_waited[w] += waited
        w_within[w] += within
        w_qarea[w] -= qacc
        e_next = e
        if e == e1:
            flush_window(w, e1 - e0, cnt, acc, total, w_tail, w_qarea)
            w += 1
    top_ref[0] = top
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return w, e_next


@njit(cache=True)
def count_tracked(q, buf, head):
    """Tasks in the system with a known arrival index (not NaN)."""
    mask = buf.shape[1] - 1
    k = np.int64(0)
    for n in range(q.size):
        h = head[n]
        for j in range(q[n]):
            a = buf[n, (h + j) & mask]
            if a == a:
                k += 1
    return k


@njit(cache=True)
def drain_span(thr_arrival, thr_local, central, q, buf, head, cnt, perm, pos, start, top_ref,
               shift, state, e_first, remaining, max_events, w_jobs, w_resp):
    """Continue the same dynamics after the run until the ``remaining`` tracked tasks have left.

    Arrivals go on (stored as NaN: not measured), so the central server keeps chasing the true
    longest queues; each tracked departure is credited to its arrival window with its exact
    response. Stops when none remain, after ``max_events`` events, or after an arrival that fills
    a ring buffer. Returns ``(remaining, next event, full)``.
    """
    n_servers = q.size
    c = buf.shape[1]
    mask = c - 1
    top = top_ref[0]
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    e = e_first
    full = False
    while remaining > 0 and e < max_events:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        if r < thr_arrival:
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            n = below(r, n_servers)
            lvl = q[n]
            buf[n, (head[n] + lvl) & mask] = np.nan
            q[n] = lvl + 1
            cnt[lvl + 1] += 1
            bucket_up(perm, pos, start, n, lvl)
            if lvl + 1 > top:
                top = lvl + 1
            if lvl + 1 == c:
                full = True
                e += 1
                break
        else:
            n = np.int64(-1)
            if r < thr_local or not central:
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                n = below(r, n_servers)
                if q[n] == 0:
                    n = -1
            elif top > 0:
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                b = start[top]
                n = perm[b + below(r, n_servers - b)]
            if n >= 0:
                lvl = q[n]
                hd = head[n]
                a = buf[n, hd]
                if a == a:  # not NaN: a tracked task
                    wa = window_of(a, shift)
                    w_jobs[wa] += 1
                    w_resp[wa] += e - a
                    remaining -= 1
                head[n] = (hd + 1) & mask
                q[n] = lvl - 1
                cnt[lvl] -= 1
                bucket_down(perm, pos, start, n, lvl)
                if lvl == top and start[top] == n_servers:
                    top -= 1
        e += 1
    top_ref[0] = top
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return remaining, e, full
