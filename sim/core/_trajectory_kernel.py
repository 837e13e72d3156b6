"""Compiled helpers the trajectory kernels share (model-free; the kernels are
:mod:`sim.dispatch._trajectory_kernel` and :mod:`sim.jiq._trajectory_kernel`).

State ``x[l]`` = number of servers with exactly ``l`` tasks (the occupancy state).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["top_level", "record_tail"]


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
