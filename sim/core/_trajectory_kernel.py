"""Compiled helpers the trajectory kernels share (model-free; the kernels are
:mod:`sim.dispatch._trajectory_kernel`, :mod:`sim.jiq._trajectory_kernel` and
:mod:`sim.centralization._trajectory_kernel`).

State ``x[l]`` = number of servers with exactly ``l`` tasks (the occupancy state).

The real clock: ``clock`` (float64[3]) carries the time now, the next grid index and the events
so far between the calls of a kernel's span (:func:`load_clock`, :func:`store_clock`); per event
:func:`clock_step` draws the ``Exp(rate)`` holding time and says which grid rows the state held
covers. The helpers are inlined at numba-IR level, so a span compiles as if they were written
out in it.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.core.rng import next_raw, u01

__all__ = ["top_level", "record_tail", "padded", "load_clock", "store_clock", "clock_step"]


@njit(cache=True, inline="always")
def top_level(x):
    """Highest level ``l`` with ``x[l] > 0`` (0 for an empty system)."""
    top = 0
    for lvl in range(x.size):
        if x[lvl] > 0:
            top = lvl
    return top


@njit(cache=True)
def record_tail(x, n_servers, out, j):
    """``out[j, i - 1] = s_i`` for the recorded levels ``i = 1..out.shape[1]``: the servers
    with at least ``i`` tasks over ``n_servers``."""
    levels = out.shape[1]
    c = np.int64(0)
    for i in range(x.size - 1, 0, -1):
        c += x[i]
        if i <= levels:
            out[j, i - 1] = c / n_servers


def padded(c: np.ndarray, room: int) -> np.ndarray:
    """The counts ``c`` (int64) followed by zeros, in a power-of-two size of at least 16 and
    at least ``c.size + room``."""
    c = np.ascontiguousarray(c, dtype=np.int64)
    cap = 16
    while cap < c.size + room:
        cap *= 2
    out = np.zeros(cap, dtype=np.int64)
    out[: c.size] = c
    return out


@njit(cache=True, inline="always")
def load_clock(clock):
    """``(time now, next grid index, events so far)`` from ``clock``."""
    return clock[0], np.int64(clock[1]), np.int64(clock[2])


@njit(cache=True, inline="always")
def store_clock(clock, t, j, events, state, s0, s1, s2, s3):
    """Write the clock and the xoshiro256+ words back at the end of a span."""
    clock[0] = t
    clock[1] = j
    clock[2] = events
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3


@njit(cache=True, inline="always")
def clock_step(t, rate, t_grid, j, events, max_events, s0, s1, s2, s3):
    """One event's clock from time ``t`` in a state of total rate ``rate``: the next event time
    ``t_next = t + Exp(rate)`` (one raw draw), the end ``j_end`` of the grid rows ``j..j_end - 1``
    whose times fall before ``t_next`` (they see the state held, which the caller records), and
    whether the run is done there (the grid is recorded, or ``max_events`` events were applied:
    the event at ``t_next`` is then not applied and the time stays ``t``). Returns ``(t_next or
    t if done, j_end, done, s0..s3)``."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    t_next = t - math.log(1.0 - u01(r)) / rate
    n_grid = t_grid.size
    while j < n_grid and t_grid[j] < t_next:
        j += 1
    done = j >= n_grid or events >= max_events
    return (t if done else t_next), j, done, s0, s1, s2, s3
