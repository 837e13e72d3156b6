"""Run windows and lazily integrated areas.

A run of ``E`` events (or slots) is split into windows of ``2**k`` events (:func:`window_bounds`),
each with its own accumulators, so that the warm-up can be cut and batches formed afterwards
(:mod:`sim.core.output`). A power-of-two length lets a kernel find the window of an event index
with a shift (:func:`window_of`) instead of a division.

Areas are integrated lazily: with ``e0`` the window's first event, a change ``delta`` of a level
count at event ``e`` adds ``delta * (e - e0)`` to ``acc[level]``; at the window end the area is
``cnt[level] * (window length) - acc[level]`` (:func:`flush_window`). O(1) per event, O(levels)
per window. The occupancy engines, on the Rao-Blackwellised clock, do the same in time instead
of events with the counts of servers per level (:func:`flush_occupancy_window`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["window_bounds", "window_shift", "window_of", "flush_window", "flush_levels",
           "flush_occupancy_window"]

def window_bounds(events: int, n_windows: int) -> np.ndarray:
    """Window boundaries: windows of ``2**k`` events (the largest power of two giving at least
    ``n_windows`` windows), the last one possibly shorter; so between ``n_windows`` and
    ``2 * n_windows`` windows. A power-of-two length lets the kernel find the window of a
    job's arrival with a shift instead of a division."""
    length = 1
    while 2 * length * n_windows <= events:
        length *= 2
    count = -(-events // length)
    return np.minimum(np.arange(count + 1, dtype=np.int64) * length, events)



@njit(cache=True)
def window_shift(bounds):
    """log2 of the window length (all windows but the last are ``bounds[1]`` events long)."""
    length = bounds[1]
    shift = 0
    while (np.int64(1) << shift) < length:
        shift += 1
    return shift


@njit(cache=True)
def window_of(a, shift):
    """The window of event index ``a`` (an int, or a float holding one): windows are ``2**shift``
    events long (:func:`window_bounds`), so this is one shift, no division."""
    return np.int64(a) >> shift


@njit(cache=True)
def flush_window(w, length, cnt, acc, total, w_tail, w_qarea):
    """Window ``w`` ends after ``length`` events: turn the lazily integrated level areas into
    the window's tail areas (``cnt * length - acc``), reset them, and add the queue area."""
    top = min(w_tail.shape[1], cnt.size - 1)
    for i in range(1, top + 1):
        w_tail[w, i - 1] = cnt[i] * length - acc[i]
    for i in range(acc.size):
        acc[i] = 0
    w_qarea[w] += total * length


@njit(cache=True)
def flush_levels(w, length, cnt, acc, w_tail, w_qarea):
    """:func:`flush_window` for a loop that keeps neither the number of tasks nor its lazy
    area per event: both are the sums over the levels of ``cnt`` and ``acc`` (O(levels) per
    window instead of work on every event)."""
    total = np.int64(0)  # tasks in the system
    qacc = np.int64(0)  # lazy part of the queue area
    for i in range(1, cnt.size):
        total += cnt[i]
        qacc += acc[i]
    w_qarea[w] -= qacc
    flush_window(w, length, cnt, acc, total, w_tail, w_qarea)


@njit(cache=True, inline="always")
def flush_occupancy_window(w, t_w, x, acc, total, qacc, w_time, w_tail, w_qarea):
    """Window ``w`` of an occupancy engine ends after ``t_w`` time units: ``x[l]`` servers hold
    exactly ``l`` tasks, ``acc[l]`` is the lazily integrated change of the count of servers with
    at least ``l`` tasks (``delta * t`` summed) and ``qacc`` that of the ``total`` tasks. Writes
    the window's time, tail areas (``count * t_w - acc``, levels ``1..w_tail.shape[1]``) and
    queue area, and resets ``acc``; the caller resets its own ``t_w`` and ``qacc``."""
    w_time[w] = t_w
    max_level = w_tail.shape[1]
    c = np.int64(0)
    for i in range(x.size - 1, 0, -1):
        c += x[i]
        if i <= max_level:
            w_tail[w, i - 1] = c * t_w - acc[i]
        acc[i] = 0.0
    w_qarea[w] = total * t_w - qacc

