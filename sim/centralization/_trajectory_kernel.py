"""Compiled kernel of the partial-centralization trajectory engine (private; the public API is
:mod:`sim.centralization.trajectory`).

State: ``cnt[l]`` = stations with at least ``l`` tasks (``cnt[0] = N``), as in
:func:`sim.centralization._occupancy_kernel.occupancy_span`, and the same transitions, but with
the *real* clock and without wasted ticks: in state ``cnt`` the events are an arrival at a uniform station
(rate ``lam N``), a local service at a uniform *busy* station (rate ``(1 - p) busy``) and a
central service at a longest queue (rate ``N p`` while the system is not empty); the holding
time is an ``Exp(R)`` draw, ``R = lam N + (1 - p) busy + N p [busy > 0]``. (The uniformized chain
of the stationary engines, rate ``N (1 + lam)`` with wasted ticks, is the same process in law;
skipping the wasted ticks only saves events.)

Recording: at each grid time the state held gives ``out[j, i - 1] = cnt[i] / N`` and
``top_out[j]`` = the longest queue (the level the central server is serving). The run ends at
the first event after the last grid time (not applied). Cost: O(log top) per event (the level of
a uniform station by :func:`sim.centralization._occupancy_kernel._level_of`), O(levels) per grid
write.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.centralization._occupancy_kernel import _level_of
from sim.core._trajectory_kernel import clock_step, load_clock, padded, store_clock
from sim.core.declare import INT_LIMIT
from sim.core.rng import next_raw, u01


@njit(cache=True)
def _record(cnt, top, n_servers, out, top_out, j):
    levels = out.shape[1]
    for i in range(1, levels + 1):
        out[j, i - 1] = cnt[i] / n_servers if i < cnt.size else 0.0
    top_out[j] = top


@njit(cache=True)
def central_span(n_servers, lam, p, cnt, t_grid, out, top_out, clock, state, max_events):
    """Events from the state in ``clock`` (time now, next grid index, events so far; updated in
    place) until the grid is done or ``max_events`` events are applied (returns True), or
    return False before an arrival that could write past the end of ``cnt`` (the caller grows
    it)."""
    cap = cnt.size
    nf = float(n_servers)
    arr_rate = lam * nf
    central_rate = p * nf
    t, j, events = load_clock(clock)
    top = 0
    for lvl in range(1, cap):
        if cnt[lvl] > 0:
            top = lvl
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    done = False
    while top + 2 < cap:
        busy = cnt[1]
        local_rate = (1.0 - p) * busy
        rate = arr_rate + local_rate + (central_rate if top > 0 else 0.0)
        t, j_end, done, s0, s1, s2, s3 = clock_step(t, rate, t_grid, j, events, max_events,
                                                    s0, s1, s2, s3)
        for i in range(j, j_end):
            _record(cnt, top, n_servers, out, top_out, i)
        j = j_end
        if done:
            break
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        v = u01(r) * rate
        if v < arr_rate:  # arrival at a uniform station
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            u = min(np.int64(u01(r) * nf), n_servers - 1)
            lvl = _level_of(cnt, top, u)
            cnt[lvl + 1] += 1
            if lvl + 1 > top:
                top = lvl + 1
        else:
            if v < arr_rate + local_rate:  # local service at a uniform busy station
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                u = min(np.int64(u01(r) * busy), busy - 1)
                lvl = _level_of(cnt, top, u)
            else:  # the central server takes a task from a longest queue
                lvl = top
            cnt[lvl] -= 1
            if lvl == top and cnt[lvl] == 0:
                top -= 1
        events += 1
    store_clock(clock, t, j, events, state, s0, s1, s2, s3)
    return done


def central_trajectory(n_servers, lam, p, cnt, t_grid, out, top_out, state, max_events=INT_LIMIT):
    """Fill ``out[len(t_grid), levels]`` (``s_i``) and ``top_out`` (longest queue) with the path
    from the counts ``cnt`` (int64, stations with at least ``l`` tasks, ``cnt[0] = N``; grown as
    needed), stopping after ``max_events`` events at the latest. Returns ``(final counts,
    events, time of the last event, grid rows written)``."""
    cc = padded(cnt, 3)
    clock = np.zeros(3)
    while not central_span(int(n_servers), float(lam), float(p), cc, t_grid, out, top_out, clock,
                           state, int(max_events)):
        cc = np.concatenate((cc, np.zeros(cc.size, dtype=np.int64)))
    return cc, int(clock[2]), float(clock[0]), int(clock[1])
