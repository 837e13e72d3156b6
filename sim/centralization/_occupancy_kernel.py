"""Compiled kernel of the partial-centralization occupancy engine (private; the public API is
:mod:`sim.centralization.occupancy`).

The uniformized chain of total rate ``N (1 + lam)``, as the agent engine's kernel
(:mod:`sim.centralization._agent_kernel`): per event one raw 64-bit draw ``r`` decides the kind --
arrival if ``r < thr_arrival``, local tick if ``r < thr_local`` (cumulative threshold), central
tick otherwise (never when ``central`` is False, i.e. ``p = 0``) -- and a second draw picks the
station of an arrival or local tick, uniformly.

State (:func:`occupancy_span`): only ``cnt[l]``, the stations with at least ``l`` tasks
(``cnt[0] = N``). The level of a uniformly drawn station is the largest ``l`` with
``cnt[l] > U``, ``U = floor(N * u)`` with a 53-bit uniform ``u`` (ranking the stations by
decreasing queue length), found by binary search over ``0..top`` (branch-free,
:func:`_level_of`, which the trajectory kernel uses too): O(log top) per event, independent of
N. A central tick removes one task at level ``top``. When the level arrays fill, the loop stops
after that event and the Python driver grows them and resumes (arrays are never reassigned
inside a loop).

Time averages: the lazy area accumulation of :mod:`sim.core.windows` -- a change of ``cnt[l]``
at event ``e`` of a window starting at ``e0`` adds ``delta * (e - e0)`` to ``acc[l]``; at the
window's end the area is ``cnt[l] * length - acc[l]``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core.rng import next_raw, u01
from sim.core.windows import flush_window


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


@njit(cache=True)
def occupancy_span(thr_arrival, thr_local, central, h, n_servers, cnt, acc, top_ref, bounds, state,
                   w_first, e_first, w_arr, w_waited, w_within, w_qarea, w_tail):
    """Occupancy engine from event ``e_first`` (window ``w_first``) on; stops at the end of the
    run or after an arrival that brings ``top`` to ``cnt.size - 2`` (the driver grows ``cnt``).
    Returns ``(window, next event)``. Per window: arrivals, arrivals that found a non-empty
    station, arrivals to a queue shorter than ``h``, queue area and tail areas."""
    n_windows = bounds.size - 1
    nf = float(n_servers)
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
                u = min(np.int64(u01(r) * nf), n_servers - 1)
                lvl = _level_of(cnt, top, u)
                de = e - e0
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
                if top + 2 >= cnt.size:
                    full = True
                    e += 1
                    break
            else:
                lvl = np.int64(0)
                if r < thr_local or not central:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    u = min(np.int64(u01(r) * nf), n_servers - 1)
                    lvl = _level_of(cnt, top, u)
                else:
                    lvl = top
                if lvl > 0:
                    de = e - e0
                    cnt[lvl] -= 1
                    acc[lvl] -= de
                    qacc -= de
                    total -= 1
                    if lvl == top and cnt[lvl] == 0:
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
