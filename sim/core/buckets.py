"""Servers bucket-sorted by queue length: O(1) "uniform among the shortest queues".

``perm`` is a permutation of the servers sorted by ``q``, ``pos`` its inverse and ``start[l]``
the first index in ``perm`` of a server with ``q >= l`` (so ``start[l] = N - cnt[l]``, with
``cnt[l]`` the number of servers with at least ``l`` tasks); moving a server one level up or
down is one swap with the boundary of its block, O(1). Used by JSQ dispatching and by the
central server of partial centralization (the longest queue: the last block).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sim.core.rng import below, next_raw

__all__ = ["pick_lowest", "bucket_up", "bucket_down", "build_buckets"]

@njit(cache=True)
def pick_lowest(q, perm, start, s0, s1, s2, s3):
    """JSQ: uniform among the shortest queues, O(1) from the bucket structure."""
    n_min = start[q[perm[0]] + 1]  # servers with q <= min q
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    return perm[below(r, n_min)], s0, s1, s2, s3


@njit(cache=True, inline="always")
def _swap_to(perm, pos, n, b):
    """Server ``n`` to index ``b`` of ``perm``; the server there takes ``n``'s old index."""
    pn = pos[n]
    m = perm[b]
    perm[b] = n
    pos[n] = b
    perm[pn] = m
    pos[m] = pn


@njit(cache=True)
def bucket_up(perm, pos, start, n, level):
    """Server ``n`` goes from ``level`` to ``level + 1``: swap it to the end of its block."""
    b = start[level + 1] - 1
    _swap_to(perm, pos, n, b)
    start[level + 1] = b


@njit(cache=True)
def bucket_down(perm, pos, start, n, level):
    """Server ``n`` goes from ``level`` to ``level - 1``: swap it to the front of its block."""
    b = start[level]
    _swap_to(perm, pos, n, b)
    start[level] = b + 1


@njit(cache=True)
def build_buckets(q, n_levels):
    """Counting sort of the servers by queue length: ``(perm, pos, start)`` with
    ``len(start) == n_levels`` (must exceed ``max(q) + 1``)."""
    n_servers = q.size
    start = np.zeros(n_levels, dtype=np.int64)
    for n in range(n_servers):
        start[q[n] + 1] += 1  # servers at level q[n] push start[q[n]+1..] right
    for lvl in range(1, n_levels):
        start[lvl] += start[lvl - 1]
    perm = np.empty(n_servers, dtype=np.int64)
    pos = np.empty(n_servers, dtype=np.int64)
    fill = start.copy()
    for n in range(n_servers):
        k = fill[q[n]]
        perm[k] = n
        pos[n] = k
        fill[q[n]] += 1
    return perm, pos, start

