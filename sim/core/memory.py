"""Model-free helpers of the memory estimates (:attr:`sim.core.declare.Model.memory_bytes`).

An estimate is the peak bytes of the arrays one task allocates, computed from its parameters
in closed form: nothing is allocated or compiled. The per-server engines keep a FIFO ring (or
record) per server whose capacity is a power of two above the longest queue the run meets;
:func:`longest_queue` bounds that from the mean-field tail of the supermarket model, and
:func:`ring_capacity` gives the capacity the engines reach. The models' estimates
(``sim/<model>/__init__.py``) add their own arrays; docs/sweeps.md gives the figures measured
against the real peak (benchmarks/bench_memory.py).
"""
from __future__ import annotations

import math

__all__ = ["longest_queue", "ring_capacity", "ring_slots", "WINDOW_BYTES", "RESPONSE_BYTES", "GiB"]

GiB = 2**30
#: the window accumulators, warm-up cut and batch means of a stochastic task (up to 2000 windows
#: x 64 tail levels x 8 bytes, and copies): a fixed part of every estimate
WINDOW_BYTES = 4 * 2**20
#: the response-time recorder of ``run.responses`` (signature tables, CCDF per window)
RESPONSE_BYTES = 32 * 2**20


def longest_queue(n_servers: float, lam: float, d: float = 1.0, cap: float | None = None,
                  run_time: float = 0.0) -> int:
    """About the longest of ``n_servers`` queues a run meets: the level ``L`` below which the
    mean-field tail of power-of-``d`` (random routing at ``d = 1``: ``lam**i``;
    ``lam**((d**i - 1) / (d - 1))`` else) holds one queue or more, ``samples * s_L >= 1``,
    where ``samples = N (1 + run_time (1 - lam))`` counts the independent queue lengths of a
    run of ``run_time`` time units (a queue forgets its length in about ``1 / (1 - lam)``);
    at least 1, at most ``cap`` (a buffer)."""
    lam = min(max(float(lam), 1e-12), 1.0 - 1e-12)
    samples = max(float(n_servers) * (1.0 + max(float(run_time), 0.0) * (1.0 - lam)), 2.0)
    target = math.log(samples)  # s_L >= 1/samples  <=>  -log s_L <= log samples
    if d <= 1:
        level = target / -math.log(lam)
    else:  # -log s_i = (d**i - 1) / (d - 1) * (-log lam)
        level = math.log(1.0 + (d - 1.0) * target / -math.log(lam)) / math.log(d)
    out = max(1, math.floor(level))
    return int(out if cap is None else min(out, max(int(cap), 1)))


def ring_capacity(longest: int, start: int = 8) -> int:
    """The ring capacity an engine reaches: its start doubled until it exceeds ``longest``."""
    cap = start
    while cap <= longest:
        cap *= 2
    return cap


def ring_slots(n_servers: float, lam: float, d: float = 1.0, cap: float | None = None,
               run_time: float = 0.0, start: int = 8, reserve: int = 0) -> float:
    """Slots per server of a doubling ring (or record) at its peak: the capacity above the
    longest queue plus ``reserve`` that the run reaches (:func:`longest_queue`), times 1.5
    if it doubles during the run (the old rings are alive while the new ones fill)."""
    first = ring_capacity(longest_queue(n_servers, lam, d, cap) + reserve, start)
    last = ring_capacity(longest_queue(n_servers, lam, d, cap, run_time) + reserve, start)
    return 1.5 * last if last > first else float(last)
