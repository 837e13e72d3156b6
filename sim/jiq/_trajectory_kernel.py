"""Compiled kernel of the JIQ trajectory engine (private; the public API is :mod:`sim.jiq.trajectory`).

State ``(x, y)`` as in :mod:`sim.jiq._occupancy_kernel` (servers per queue length, I-queues per
size; ``sum_j j y[j] = x[0]``) and the same transitions, drawn with that module's helpers
(:func:`~sim.jiq._occupancy_kernel.arrival_level`, ``_pick``, ``iq_grow``), but with the
*real* clock: the holding time in a state is an ``Exp(R)`` draw, ``R = lam N + busy``. At each
grid time the state held is written: ``out[j, i - 1] = s_i`` and ``p0_out[j] = y[0] / M`` (the
fraction of empty I-queues). The run ends at the first event after the last grid time (not
applied). Policies: ``jiq`` (blind task to a uniform server) and ``jiq_pod`` (blind task to the
shortest of ``d`` distinct servers); an idle server joins a uniform I-queue.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core._trajectory_kernel import clock_step, load_clock, padded, record_tail, store_clock, top_level
from sim.core.declare import INT_LIMIT
from sim.core.rng import next_raw, u01
from sim.core.sampling import lowest_occupied, min_of_sample
from sim.jiq._occupancy_kernel import _pick, _size_biased, iq_scan


@njit(cache=True)
def jiq_span(pod, n_servers, n_iq, arr_rate, d, x, sample_hist, y, t_grid, out, p0_out, clock, state,
             max_events):
    """Events from the state in ``clock`` (time now, next grid index, events so far; updated in
    place) until the grid is done or ``max_events`` events are applied (returns True), or
    return False before an event that could write past the end of ``x`` or ``y`` (the caller
    doubles them)."""
    cap = x.size
    ycap = y.size
    t, j, events = load_clock(clock)
    busy = n_servers - x[0]
    top = top_level(x)
    listed, ytop, ylow = iq_scan(y)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    done = False
    while top + 2 <= cap and ytop + 2 <= ycap:
        rate = arr_rate + busy
        t, j_end, done, s0, s1, s2, s3 = clock_step(t, rate, t_grid, j, events, max_events,
                                                    s0, s1, s2, s3)
        for i in range(j, j_end):  # the tail s_i and p0 = y[0] / M
            record_tail(x, n_servers, out, i)
            p0_out[i] = y[0] / n_iq
        j = j_end
        if done:
            break
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        if u01(r) * rate < arr_rate:
            # arrival at a uniform scheduler: its I-queue has size jj w.p. y[jj] / M
            # (written out, as in the occupancy loop: inlined helpers measured slower here)
            jj, s0, s1, s2, s3 = _pick(y, n_iq, ylow, s0, s1, s2, s3)
            if jj > 0:
                lvl = 0
                y[jj] -= 1
                y[jj - 1] += 1
                if jj == ytop and y[jj] == 0:
                    ytop = jj - 1
                if jj == ylow:
                    ylow = jj - 1
            else:
                if pod:
                    lvl, s0, s1, s2, s3 = min_of_sample(x, n_servers, d, sample_hist, lowest_occupied(x),
                                                        s0, s1, s2, s3)
                else:
                    lvl, s0, s1, s2, s3 = _pick(x, n_servers, 0, s0, s1, s2, s3)
                if lvl == 0:  # the idle server is listed elsewhere: a delete shrinks that I-queue
                    jd, s0, s1, s2, s3 = _size_biased(y, listed, ylow, s0, s1, s2, s3)
                    y[jd] -= 1
                    y[jd - 1] += 1
                    if jd == ytop and y[jd] == 0:
                        ytop = jd - 1
                    if jd == ylow:
                        ylow = jd - 1
            if lvl == 0:
                busy += 1
                listed -= 1
            x[lvl] -= 1
            x[lvl + 1] += 1
            if lvl + 1 > top:
                top = lvl + 1
        else:
            lvl, s0, s1, s2, s3 = _pick(x, busy, 1, s0, s1, s2, s3)
            x[lvl] -= 1
            x[lvl - 1] += 1
            if lvl == top and x[lvl] == 0:
                top = lvl - 1
            if lvl == 1:  # idle now: joins a uniform I-queue
                busy -= 1
                jj, s0, s1, s2, s3 = _pick(y, n_iq, ylow, s0, s1, s2, s3)
                y[jj] -= 1
                y[jj + 1] += 1
                if jj == ylow and y[jj] == 0:
                    ylow = jj + 1
                if jj + 1 > ytop:
                    ytop = jj + 1
                listed += 1
        events += 1
    store_clock(clock, t, j, events, state, s0, s1, s2, s3)
    return done


def jiq_trajectory(pod, n_servers, n_iq, arr_rate, d, x, y, t_grid, out, p0_out, state,
                   max_events=INT_LIMIT):
    """Fill ``out[grid, levels]`` (s_i) and ``p0_out[grid]`` along one path from ``(x, y)``.
    Stops after ``max_events`` events at the latest. Returns ``(x, y, events, time of the last
    event, grid rows written)``."""
    x = padded(x, 2)
    y = padded(y, 2)
    sample_hist = np.zeros(x.size, dtype=np.int64)
    clock = np.zeros(3)
    while not jiq_span(bool(pod), int(n_servers), int(n_iq), float(arr_rate), int(d), x, sample_hist, y,
                       t_grid, out, p0_out, clock, state, int(max_events)):
        if int(np.max(np.nonzero(x)[0])) + 2 > x.size:
            x = np.concatenate((x, np.zeros(x.size, dtype=np.int64)))
            sample_hist = np.zeros(x.size, dtype=np.int64)
        if int(np.max(np.nonzero(y)[0])) + 2 > y.size:
            y = np.concatenate((y, np.zeros(y.size, dtype=np.int64)))
    return x, y, int(clock[2]), float(clock[0]), int(clock[1])
