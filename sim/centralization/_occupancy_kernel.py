"""Compiled kernel of the partial-centralization occupancy engine (private; the public API is
:mod:`sim.centralization.occupancy`).

The uniformized chain of total rate ``N (1 + lam)``, as the agent engine's kernel
(:mod:`sim.centralization._agent_kernel`): per event one raw 64-bit draw ``r`` decides the kind --
arrival if ``r < thr_arrival``, local tick if ``r < thr_local`` (cumulative threshold), central
tick otherwise (never when ``central`` is False, i.e. ``p = 0``) -- and a second draw picks the
station of an arrival or local tick, uniformly.

State (:func:`occupancy_span`): only ``cnt[l]``, the stations with at least ``l`` tasks
(``cnt[0] = N``), run by the loop the agent engine runs too
(:func:`sim.centralization._span_kernel._make_span`). The level of a uniformly drawn station is the largest ``l`` with
``cnt[l] > U``, ``U = floor(N * u)`` with a 53-bit uniform ``u`` (ranking the stations by
decreasing queue length), found by binary search over ``0..top`` (branch-free,
:func:`sim.centralization._span_kernel._level_of`, which the trajectory kernel uses too): O(log top) per event, independent of
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

from sim.centralization._span_kernel import _level_of, _make_span  # noqa: F401

_SPAN = _make_span(False)


@njit(cache=True)
def occupancy_span(thr_arrival, thr_local, central, h, n_servers, cnt, acc, top_ref, bounds, state,
                   w_first, e_first, w_arr, w_waited, w_within, w_qarea, w_tail):
    """Occupancy engine from event ``e_first`` (window ``w_first``) on; stops at the end of the
    run or after an arrival that brings ``top`` to ``cnt.size - 2`` (the driver grows ``cnt``).
    Returns ``(window, next event)``. Per window: arrivals, arrivals that found a non-empty
    station, arrivals to a queue shorter than ``h``, queue area and tail areas."""
    none = np.zeros(1, dtype=np.int64)  # the agent engine's arrays, unused here
    return _SPAN(thr_arrival, thr_local, central, h, n_servers, none, np.zeros((1, 1)), none, cnt,
                 acc, none, none, none, top_ref, bounds, state, w_first, e_first, np.zeros(1),
                 np.zeros(1), w_arr, w_waited, w_within, w_qarea, w_tail)
