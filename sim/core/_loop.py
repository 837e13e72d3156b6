"""Compiled pieces of the event loops that several models' kernels share (model-free).

Counts state (occupancy and trajectory kernels): ``x[l]`` servers with exactly ``l`` tasks,
``busy = N - x[0]`` and ``top`` the highest occupied level. Everything here is
``@njit(cache=True, inline="always")``: inlined at numba-IR level, so a loop compiles as if the
lines were written out in it (LLVM does not always inline a small call taking arrays).
"""
from __future__ import annotations

from numba import njit

__all__ = ["join_level", "leave_level"]


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

