"""Compiled kernels of the distributed-JIQ occupancy engine (private; the public API is
:mod:`sim.jiq.occupancy`).

State
-----
``x[l]`` = number of servers with exactly ``l`` tasks (in service included), ``l = 0 .. cap-1``,
and ``y[j]`` = number of I-queues holding exactly ``j`` idle servers, ``j = 0 .. ycap-1``.
With delete messages an I-queue lists idle servers only and every idle server is listed exactly
once, so ``sum_j j y[j] = x[0]`` at all times; servers are exchangeable given their levels and
I-queues given their sizes, so ``(x, y)`` is a Markov chain on its own. Every event costs
O(levels + sizes scanned + d), independent of N and M.

Transitions (the jump chain; ``N`` servers, ``M`` I-queues)
---------------------------------------------------------
Arrival (probability ``lam N / R``): the task's scheduler is uniform among the ``M``, so its
I-queue has size ``j`` with probability ``y[j] / M`` (:func:`_pick`).

- ``j > 0``: a listed (idle) server takes the task, leaving the I-queue: ``y[j] -= 1``,
  ``y[j-1] += 1``, ``x[0] -= 1``, ``x[1] += 1``. No message.
- ``j = 0`` (blind): ``jiq``/``jiq_sqd`` pick a uniform server, level ``l`` with probability
  ``x[l] / N`` (:func:`_pick`); ``jiq_pod`` draws ``d`` distinct servers (multivariate
  hypergeometric, :func:`sim.core.sampling.draw_levels`, stopped at the first hit of the lowest
  occupied level) and takes the lowest level drawn (ties uniform: any server of that level is
  as good in counts). If ``l = 0`` the server was idle, hence listed in some I-queue other
  than the (empty) one of this scheduler: a uniform idle server sits in an I-queue of size
  ``j'`` with probability ``j' y[j'] / x[0]`` (size-biased, :func:`_size_biased`), and the
  delete message shrinks that I-queue to ``j' - 1``. Then ``x[l] -= 1``, ``x[l+1] += 1``.

Completion (probability ``busy / R``): at a uniform busy server, level ``l >= 1`` with
probability ``x[l] / busy``; ``x[l] -= 1``, ``x[l-1] += 1``. If ``l = 1`` the server is now idle
and joins an I-queue: ``jiq``/``jiq_pod`` a uniform one (size ``j`` w.p. ``y[j] / M``),
``jiq_sqd`` the shortest of ``d`` distinct I-queues sampled uniformly without replacement
(``draw_levels`` on the counts ``y``; the minimum size of the sample): ``y[j] -= 1``,
``y[j+1] += 1``.

Scans: every draw from ``y`` starts at the smallest occupied size ``ylow`` (tracked), so a
run with few, long I-queues (``M = 1``: one I-queue listing about ``N (1 - lam)`` servers) costs
no more per event than one with many short ones; draws from ``x`` start at level 0 (the idle
servers), where almost all mass is.

Messages: a join or a delete is 1, a probe (of a server or of an I-queue) 2 (request, reply);
``jiq_pod`` probes ``d`` servers per blind task, ``jiq_sqd`` ``d`` I-queues per join (counted as
the policy sends them, even when the early stop of the draw did not need all of them).

Policies ``jiq_original`` (no delete messages: I-queues may list busy servers) and
``jiq_threshold`` (servers with up to ``z`` tasks listed) break the symmetry that makes
``(x, y)`` Markov and are served by the agent engine only.

Clock, areas, growth: as in :mod:`sim.dispatch._occupancy_kernel` -- the embedded jump chain
with expected holding times ``1 / R``, ``R = lam N + busy``; areas integrated lazily
(a change ``delta`` of a count at elapsed window time ``t`` adds ``delta * t`` to its
accumulator; at the window end the area is ``count * T - acc``); the event loop returns
before an event that could write past the end of ``x`` or ``y`` and the driver doubles them.

Random numbers: xoshiro256+ (:mod:`sim.core.rng`); every bounded draw is :func:`below64`,
exactly uniform on ``[0, n)`` for ``n < 2**63`` (N, M up to about 9.2e18).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.responses import dummy_recorder, record_job
from sim.core.rng import below64, next_raw, u01
from sim.core.sampling import level_totals, lowest_occupied, min_of_sample
from sim.core.windows import flush_occupancy_window

#: kernel codes of the policies this engine serves (``occupancy_code`` of sim.jiq.policies)
JIQ, JIQ_POD, JIQ_SQD = 0, 1, 2

#: outcome codes of :func:`step` (``what``)
ARRIVAL, COMPLETION = 0, 1


# --------------------------------------------------------------------------------------------
# one draw from counts
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _pick(c, n, first, s0, s1, s2, s3):
    """Index of a uniform item among ``n = sum(c[first:])`` items counted by ``c``: index ``i``
    with probability ``c[i] / n`` (scan from ``first``)."""
    u, s0, s1, s2, s3 = below64(n, s0, s1, s2, s3)
    i = first
    while u >= c[i]:
        u -= c[i]
        i += 1
    return i, s0, s1, s2, s3


@njit(cache=True)
def _size_biased(y, listed, first, s0, s1, s2, s3):
    """Size of the I-queue listing a uniform idle server: ``j`` w.p. ``j y[j] / listed``
    (``y[j] = 0`` below ``first``)."""
    u, s0, s1, s2, s3 = below64(listed, s0, s1, s2, s3)
    j = max(first, 1)
    while u >= j * y[j]:
        u -= j * y[j]
        j += 1
    return j, s0, s1, s2, s3


@njit(cache=True, inline="always")
def iq_scan(y):
    """``(listed servers, largest occupied size, smallest occupied size)`` of the I-queue
    counts ``y`` (``y[j]`` I-queues of size ``j``)."""
    listed = np.int64(0)
    ytop = 0
    ylow = -1
    for j in range(y.size):
        listed += j * y[j]
        if y[j] > 0:
            ytop = j
            if ylow < 0:
                ylow = j
    return listed, ytop, ylow


# --------------------------------------------------------------------------------------------
# the policy-specific choices, dispatched at run time (for :func:`step`; the event loop calls
# the same _pick / min_of_sample directly, its policy being a compile-time constant there)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _blind_level(policy, x, sample_hist, n_servers, d, s0, s1, s2, s3):
    """Level of the server a blind task (empty I-queue) goes to."""
    if policy == JIQ_POD:
        return min_of_sample(x, n_servers, d, sample_hist, lowest_occupied(x), s0, s1, s2, s3)
    return _pick(x, n_servers, 0, s0, s1, s2, s3)


@njit(cache=True)
def _join_size(policy, y, hsy, n_iq, d, first, s0, s1, s2, s3):
    """Size of the I-queue a server becoming idle joins (before it joins); ``first``: the
    smallest occupied size."""
    if policy == JIQ_SQD:
        return min_of_sample(y, n_iq, d, hsy, first, s0, s1, s2, s3)
    return _pick(y, n_iq, first, s0, s1, s2, s3)


# --------------------------------------------------------------------------------------------
# test helper (python-callable, same code paths as the event loop)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def step(policy, what, x, y, d, state):
    """Apply one arrival (``what = ARRIVAL``) or one completion (``COMPLETION``) to copies of
    the counts ``(x, y)`` (padded by 2 entries; the inputs are not modified).

    Returns ``(x_after, y_after, level, size, deleted_from)``: for an arrival ``level`` is the
    level the task joined (position ``level + 1``), ``size`` the size of the scheduler's
    I-queue, ``deleted_from`` the size of the I-queue that received a delete (-1: none); for a
    completion ``level`` is the level of the server that completed and ``size`` the size of the
    I-queue it joined (-1: it stayed busy); ``deleted_from`` is -1."""
    xx = np.zeros(x.size + 2, dtype=np.int64)
    xx[: x.size] = x
    yy = np.zeros(y.size + 2, dtype=np.int64)
    yy[: y.size] = y
    sample_hist = np.zeros(xx.size, dtype=np.int64)
    hsy = np.zeros(yy.size, dtype=np.int64)
    n_servers = xx.sum()
    n_iq = yy.sum()
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    size = -1
    deleted = -1
    if what == ARRIVAL:
        size, s0, s1, s2, s3 = _pick(yy, n_iq, lowest_occupied(yy), s0, s1, s2, s3)
        if size > 0:
            lvl = 0
            yy[size] -= 1
            yy[size - 1] += 1
        else:
            lvl, s0, s1, s2, s3 = _blind_level(policy, xx, sample_hist, n_servers, d, s0, s1, s2, s3)
            if lvl == 0:
                deleted, s0, s1, s2, s3 = _size_biased(yy, xx[0], lowest_occupied(yy), s0, s1, s2, s3)
                yy[deleted] -= 1
                yy[deleted - 1] += 1
        xx[lvl] -= 1
        xx[lvl + 1] += 1
    else:
        lvl, s0, s1, s2, s3 = _pick(xx, n_servers - xx[0], 1, s0, s1, s2, s3)
        xx[lvl] -= 1
        xx[lvl - 1] += 1
        if lvl == 1:
            size, s0, s1, s2, s3 = _join_size(policy, yy, hsy, n_iq, d, lowest_occupied(yy),
                                              s0, s1, s2, s3)
            yy[size] -= 1
            yy[size + 1] += 1
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return xx, yy, lvl, size, deleted


# --------------------------------------------------------------------------------------------
# the event loop
# --------------------------------------------------------------------------------------------
@functools.cache
def _make_run_span(policy: int, record: bool = False):
    """The event loop compiled for one policy code: ``pod`` and ``sqd`` are compile-time
    constants of the closure, so numba removes the other policies' branches and the policy is
    chosen once, outside the hot loop (cached on disk per code, as in
    :mod:`sim.dispatch._occupancy_kernel`). ``record`` (a closure constant too: a separate
    variant) records each task's position for the response-time distribution
    (:mod:`sim.core.responses`, docs/responses.md)."""
    policy = int(policy)
    record = bool(record)
    pod = policy == JIQ_POD
    sqd = policy == JIQ_SQD

    @njit(cache=True)
    def run_span(n_servers, n_iq, arr_rate, d, x, acc, sample_hist, y, hsy, bounds, state,
                 w_first, e_first, lazy, outputs, rec):
        """Process events from ``e_first`` (inside window ``w_first``; ``lazy`` holds that
        window's elapsed time and lazy accumulators ``t_w, qacc, y0acc, lacc``) until the run
        ends, or return before an event that could outgrow ``x`` or ``y``. Returns
        ``(window, next event)``. ``outputs`` and ``rec``: the tuples the kernel takes,
        unpacked here."""
        (w_time, w_qarea, w_tail, w_y0area, w_listarea, w_arr, w_resp, w_waited, w_join, w_del,
         w_probe) = outputs
        (r_sig, r_grid, r_over, r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps, r_cs,
         r_key) = rec
        cap = x.size
        ycap = y.size
        n_windows = bounds.size - 1
        busy = n_servers - x[0]
        total, top = level_totals(x)
        listed = np.int64(0)
        ytop = 0
        ylow = -1
        for j in range(ycap):
            listed += j * y[j]
            if y[j] > 0:
                ytop = j
                if ylow < 0:
                    ylow = j
        probe_msgs = 2 * d
        t_w, qacc, y0acc, lacc = lazy[0], lazy[1], lazy[2], lazy[3]
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        w = w_first
        e = e_first
        grow = False
        while w < n_windows:
            e1 = bounds[w + 1]
            while e < e1:
                if top + 2 > cap or ytop + 2 > ycap:
                    grow = True
                    break
                rate = arr_rate + busy
                t_w += 1.0 / rate  # expected holding time of the current state
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                if u01(r) * rate < arr_rate:
                    # ---- arrival at a uniform scheduler (PASTA: it sees the state just held)
                    j, s0, s1, s2, s3 = _pick(y, n_iq, ylow, s0, s1, s2, s3)
                    if j > 0:
                        lvl = 0
                        y[j] -= 1
                        y[j - 1] += 1
                        if j == ytop and y[j] == 0:
                            ytop = j - 1
                        if j == ylow:
                            ylow = j - 1
                        if j == 1:
                            y0acc += t_w
                    else:
                        if pod:
                            lvl, s0, s1, s2, s3 = min_of_sample(x, n_servers, d, sample_hist,
                                                                lowest_occupied(x), s0, s1, s2, s3)
                            w_probe[w] += probe_msgs
                        else:
                            lvl, s0, s1, s2, s3 = _pick(x, n_servers, 0, s0, s1, s2, s3)
                        if lvl == 0:
                            jd, s0, s1, s2, s3 = _size_biased(y, listed, ylow, s0, s1, s2, s3)
                            y[jd] -= 1
                            y[jd - 1] += 1
                            if jd == ytop and y[jd] == 0:
                                ytop = jd - 1
                            if jd == ylow:
                                ylow = jd - 1
                            if jd == 1:
                                y0acc += t_w
                            w_del[w] += 1
                    if lvl == 0:
                        busy += 1
                        listed -= 1
                        lacc -= t_w
                    x[lvl] -= 1
                    x[lvl + 1] += 1
                    acc[lvl + 1] += t_w  # one more server with >= lvl + 1 tasks
                    total += 1
                    qacc += t_w
                    if lvl + 1 > top:
                        top = lvl + 1
                    w_arr[w] += 1
                    w_resp[w] += lvl + 1  # E[response | position p] = p (FIFO, Exp(1))
                    if record:  # the position histogram (rare deep positions: the grid)
                        if lvl < r_sig.shape[1]:
                            r_sig[w, lvl] += 1
                        else:
                            record_job(w, 1, r_ps, lvl + 1, r_sig, r_grid, r_over, r_keys,
                                       r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps, r_cs,
                                       r_key)
                    if lvl > 0:
                        w_waited[w] += 1
                else:
                    # ---- service completion at a uniform busy server
                    lvl, s0, s1, s2, s3 = _pick(x, busy, 1, s0, s1, s2, s3)
                    x[lvl] -= 1
                    x[lvl - 1] += 1
                    acc[lvl] -= t_w
                    qacc -= t_w
                    total -= 1
                    if lvl == top and x[lvl] == 0:
                        top = lvl - 1
                    if lvl == 1:
                        # ---- the server is idle: it joins an I-queue
                        busy -= 1
                        if sqd:
                            j, s0, s1, s2, s3 = min_of_sample(y, n_iq, d, hsy, ylow,
                                                               s0, s1, s2, s3)
                            w_probe[w] += probe_msgs
                        else:
                            j, s0, s1, s2, s3 = _pick(y, n_iq, ylow, s0, s1, s2, s3)
                        y[j] -= 1
                        y[j + 1] += 1
                        if j == ylow and y[j] == 0:
                            ylow = j + 1
                        if j + 1 > ytop:
                            ytop = j + 1
                        if j == 0:
                            y0acc -= t_w
                        listed += 1
                        lacc += t_w
                        w_join[w] += 1
                e += 1
            if grow:
                break
            # ---- window end: flush the lazy areas (area = count_end * T - sum delta * t)
            flush_occupancy_window(w, t_w, x, acc, total, qacc, w_time, w_tail, w_qarea)
            w_y0area[w] = y[0] * t_w - y0acc
            w_listarea[w] = listed * t_w - lacc
            t_w = 0.0
            qacc = 0.0
            y0acc = 0.0
            lacc = 0.0
            w += 1
        lazy[0], lazy[1], lazy[2], lazy[3] = t_w, qacc, y0acc, lacc
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        return w, e

    return run_span


def new_outputs(n_windows: int, max_level: int) -> tuple:
    """Zeroed per-window outputs: ``w_time, w_qarea, w_tail[W, max_level], w_y0area,
    w_listarea, w_arr, w_resp, w_waited, w_join, w_del, w_probe``."""
    f = lambda: np.zeros(n_windows)  # noqa: E731
    i = lambda: np.zeros(n_windows, dtype=np.int64)  # noqa: E731
    return (f(), f(), np.zeros((n_windows, max_level)), f(), f(), i(), i(), i(), i(), i(), i())


def occupancy_kernel(policy, n_servers, n_iq, arr_rate, d, x, y, bounds, state, outputs,
                     rec=None):
    """Run ``bounds[-1]`` jump-chain events from counts ``(x, y)`` and fill the window outputs.

    Parameters (prepared and validated by :func:`sim.jiq.occupancy.simulate`)
    ----------
    policy : int        a policy record's ``occupancy_code``.
    n_servers, n_iq     N and M.
    arr_rate : float    task arrival rate ``lam * N``.
    d : int             servers probed per blind task (``jiq_pod``) or I-queues sampled per
                        join (``jiq_sqd``); unused by ``jiq``.
    x : int64[cap]      servers per level (sum N); y : int64[ycap] I-queues per size (sum M),
                        ``sum_j j y[j] == x[0]``; both grow between spans as needed.
    bounds : int64[W+1] first event of each window; ``bounds[-1]`` = events.
    state : uint64[4]   xoshiro256+ state, advanced in place.
    outputs : tuple     :func:`new_outputs` (zeros), filled per window.
    rec :               :class:`sim.core.responses.Recorder` (k = 1) to record each task's
                        position, or None (the loop that does not).

    Returns the final ``(x, y)`` (new arrays if they grew). Results do not depend on the
    initial array sizes (bitwise).
    """
    policy = int(policy)
    record = rec is not None
    if not record:
        rec = dummy_recorder()
    run_span = _make_run_span(policy, record)
    n_windows = bounds.size - 1
    x = np.ascontiguousarray(x, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    acc = np.zeros(x.size)
    sample_hist = np.zeros(x.size, dtype=np.int64)
    hsy = np.zeros(y.size, dtype=np.int64)
    lazy = np.zeros(4)
    w, e = 0, int(bounds[0])
    while True:
        w, e = run_span(int(n_servers), int(n_iq), float(arr_rate), int(d), x, acc, sample_hist, y, hsy,
                        bounds, state, w, e, lazy, tuple(outputs), tuple(rec))
        if w >= n_windows:
            return x, y
        # something is near the top of x or y: double the one(s) that need it
        top = int(np.max(np.nonzero(x)[0]))
        if top + 2 > x.size:
            x = np.concatenate((x, np.zeros(x.size, dtype=np.int64)))
            acc = np.concatenate((acc, np.zeros(acc.size)))
            sample_hist = np.zeros(x.size, dtype=np.int64)
        ytop = int(np.max(np.nonzero(y)[0]))
        if ytop + 2 > y.size:
            y = np.concatenate((y, np.zeros(y.size, dtype=np.int64)))
            hsy = np.zeros(y.size, dtype=np.int64)
