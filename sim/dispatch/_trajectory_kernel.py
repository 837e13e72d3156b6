"""Compiled kernel of the trajectory engine (private; the public API is :mod:`sim.dispatch.trajectory`).

State: ``x[l]`` = number of servers with exactly ``l`` tasks, as in
:mod:`sim.dispatch._occupancy_kernel`, but the clock is the *real* one: in state ``x`` the
holding time is an ``Exp(R(x))`` draw, ``R(x) = arr_rate + busy``, not its expectation. A
trajectory is a statement about one sample path (the fluid limit: the path itself converges to
the ODE), so the Rao-Blackwellised clock of the stationary engines -- which averages the holding
times and is exact only for time averages -- would be wrong here.

Recording: ``t_grid`` (increasing, ``t_grid[0] = 0``); ``out[j, i - 1]`` is ``s_i(t_grid[j])`` =
(servers with at least ``i`` tasks) / N in the state held at that instant (the path is right-
continuous: a grid time that is exactly an event time, a null event, sees the state after it).
The run ends at the first event after ``t_grid[-1]``, which is not applied. Cost: O(levels +
d) per event (the level scans of the sampling) plus O(levels held) per grid write.

Policies, in one loop (:func:`_span`): power-of-d (``d`` distinct queues sampled without
replacement, join the shortest; ties uniform -- in counts any server of the lowest sampled
level), with the sampling of :func:`sim.core.sampling.min_of_sample` (multivariate
hypergeometric, exact). ``d = 1`` is random routing: N independent M/M/1 queues. Batch-filling:
jobs of ``k`` tasks at rate ``N lam / k``, ``k d`` distinct queues sampled, the tasks water-filled one by one into a
currently shortest sampled queue -- the placement of the occupancy engine, imported from
:mod:`sim.dispatch._occupancy_kernel` (``_place_batch``), not copied; here only the clock differs.

Random numbers: xoshiro256+ (:mod:`sim.core.rng`), state advanced in place.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core._trajectory_kernel import clock_step, load_clock, padded, record_tail, store_clock, top_level
from sim.core.declare import INT_LIMIT
from sim.core.rng import below64, next_raw, u01
from sim.core.sampling import draw_levels, lowest_occupied
from sim.dispatch._occupancy_kernel import _place_batch
from sim.dispatch.policies import BATCH_FILLING


# counts state: ``x[l]`` servers with exactly ``l`` tasks, ``busy = N - x[0]`` and ``top`` the
# highest occupied level; inlined at numba-IR level, so the loop compiles as if the lines were
# written out in it (LLVM does not always inline a small call taking arrays)
@njit(cache=True, inline="always")
def join_level(x, lvl, busy, top):
    """A server of level ``lvl`` receives a task: the counts ``x``, the busy servers and the top
    level follow. Returns ``(busy, top)``."""
    x[lvl] -= 1
    x[lvl + 1] += 1
    if lvl == 0:
        busy += 1
    if lvl + 1 > top:
        top = lvl + 1
    return busy, top


@njit(cache=True, inline="always")
def leave_level(x, lvl, busy, top):
    """A server of level ``lvl >= 1`` completes a task; returns ``(busy, top)`` as
    :func:`join_level`."""
    x[lvl] -= 1
    x[lvl - 1] += 1
    if lvl == 1:
        busy -= 1
    if lvl == top and x[lvl] == 0:
        top = lvl - 1
    return busy, top


@njit(cache=True, inline="always")
def _departure(x, busy, top, s0, s1, s2, s3):
    """A service completion at a uniform busy server. Returns ``(busy, top, s0..s3)``."""
    u, s0, s1, s2, s3 = below64(busy, s0, s1, s2, s3)
    lvl = 1
    while u >= x[lvl]:
        u -= x[lvl]
        lvl += 1
    busy, top = leave_level(x, lvl, busy, top)
    return busy, top, s0, s1, s2, s3


@njit(cache=True)
def _span(batch, n_servers, arr_rate, k, n_samp, x, sample_hist, job_signature, task_levels, t_grid, out, clock, state,
          max_events):
    """Run events from the state in ``clock`` (``clock[0]`` = time now, ``clock[1]`` = next
    grid index, ``clock[2]`` = events so far; updated in place) until the grid is recorded to
    its end, or return early before an arrival that could write past the end of ``x`` (the
    caller doubles ``x`` and the scratch arrays and calls again). Returns True when the grid is
    done or ``max_events`` events have been applied (then the rows after ``clock[1]`` are not
    written).

    An arrival joins the shortest of ``n_samp = d`` distinct queues (power-of-d, ``batch``
    False), or is a job of ``k`` tasks placed by the occupancy engine's ``_place_batch``
    (batch-filling, ``batch`` True: ``n_samp = k d`` distinct queues sampled, water-filling on
    the sample's histogram), then applied to ``x``."""
    cap = x.size
    room = k if batch else 0  # levels an arrival may add above the top
    t, j, events = load_clock(clock)
    busy = n_servers - x[0]
    top = top_level(x)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    done = False
    while top + room + 2 <= cap:
        rate = arr_rate + busy
        t, j_end, done, s0, s1, s2, s3 = clock_step(t, rate, t_grid, j, events, max_events,
                                                    s0, s1, s2, s3)
        for i in range(j, j_end):
            record_tail(x, n_servers, out, i)
        j = j_end
        if done:
            break
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        if u01(r) * rate < arr_rate:
            if batch:
                _, placed, s0, s1, s2, s3 = _place_batch(BATCH_FILLING, x, job_signature, sample_hist, task_levels, k,
                                                         n_samp, INT_LIMIT, n_servers,
                                                         s0, s1, s2, s3)
            else:
                placed = 1
                low = lowest_occupied(x)
                hi, s0, s1, s2, s3 = draw_levels(x, n_servers, n_samp, low, 1, sample_hist, s0, s1, s2, s3)
                lvl = low
                while sample_hist[lvl] == 0:
                    lvl += 1
                for i in range(hi + 1):
                    sample_hist[i] = 0
                task_levels[0] = lvl
            for i in range(placed):
                busy, top = join_level(x, task_levels[i], busy, top)
            if batch:
                for i in range(placed):
                    job_signature[task_levels[i]] = 0
                    job_signature[task_levels[i] + 1] = 0
        else:
            busy, top, s0, s1, s2, s3 = _departure(x, busy, top, s0, s1, s2, s3)
        events += 1
    store_clock(clock, t, j, events, state, s0, s1, s2, s3)
    return done


def _trajectory(batch, n_servers, arr_rate, k, n_samp, x, t_grid, out, state, max_events):
    """Drive :func:`_span` to the end of the grid, doubling the arrays when it asks. Returns
    ``(final counts, events, time of the last event, grid rows written)``."""
    xx = padded(x, k + 2 if batch else 2)
    sample_hist = np.zeros(xx.size, dtype=np.int64)
    job_signature = np.zeros(xx.size, dtype=np.int64)
    task_levels = np.zeros(k, dtype=np.int64)
    clock = np.zeros(3)
    while not _span(batch, int(n_servers), float(arr_rate), k, n_samp, xx, sample_hist, job_signature, task_levels,
                    t_grid, out, clock, state, int(max_events)):
        xx = np.concatenate((xx, np.zeros(xx.size, dtype=np.int64)))
        sample_hist = np.zeros(xx.size, dtype=np.int64)
        job_signature = np.zeros(xx.size, dtype=np.int64)
    return xx, int(clock[2]), float(clock[0]), int(clock[1])


def pod_trajectory(n_servers, arr_rate, d, x, t_grid, out, state, max_events=INT_LIMIT):
    """Fill ``out[len(t_grid), levels]`` with the path of ``s_1..s_levels`` from counts ``x``
    (int64, sum N; grown as needed), stopping after ``max_events`` events at the latest.
    Returns ``(final counts, events, time of the last event, grid rows written)``."""
    return _trajectory(False, n_servers, arr_rate, 1, int(d), x, t_grid, out, state, max_events)


def batch_trajectory(n_servers, arr_rate, k, d, x, t_grid, out, state, max_events=INT_LIMIT):
    """Batch-filling (``k`` tasks per job, ``k d`` queues sampled; ``arr_rate`` = job rate
    ``N lam / k``) as :func:`pod_trajectory`: same arguments and returns."""
    return _trajectory(True, n_servers, arr_rate, int(k), int(k) * int(d), x, t_grid, out, state,
                       max_events)
