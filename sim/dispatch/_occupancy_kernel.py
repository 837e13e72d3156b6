"""Compiled kernels of the occupancy engine (private; the public API is :mod:`sim.dispatch.occupancy`).

State: ``x[l]`` = number of servers with exactly ``l`` tasks (in service included), ``l = 0 ..
cap - 1``. Every policy here is symmetric in the servers, so this is a Markov chain on its own,
and an event costs O(levels + tasks placed + queues sampled), independent of N.

Placement of one job (all policies): the job is a sequence of ``k`` one-step moves, task ``j``
joining a queue at level ``task_levels[j]`` (its queue position is ``task_levels[j] + 1``), which moves that
queue from ``task_levels[j]`` to ``task_levels[j] + 1``. The *distinct* queues the job uses are tracked by
``job_signature[l]`` = number of this job's queues now at level ``l`` ("touched"); after the job,
``job_signature[p]`` is the number of its queues whose job-last task sits at position ``p``, which is all
:func:`sim.core.jobdelay.expected_max_gamma` needs. When a task goes to "a uniform server at level
``l``" of a pool holding ``g[l]`` servers there, ``job_signature[l]`` of them touched, it is a touched one
with probability ``job_signature[l] / g[l]`` (exchangeability): this is what makes ties between a queue the
job already used and a fresh one of the same length uniform, as in the agent engine.

Sampling without replacement from the counts (:func:`draw_levels`): one server at a time, the
``j``-th drawn uniformly among the ``N - j`` not yet drawn, i.e. level ``l`` with probability
``(x[l] - sample_hist[l]) / (N - j)`` (found by a scan from level 0, short because almost all servers sit
at the lowest levels in the regimes of interest). This is the multivariate hypergeometric law
exactly, O(sample size * scan). It stops early once the outcome cannot change any more: when
``stop`` draws have hit the lowest occupied level (1 for "join the shortest sampled queue", ``k``
for batch-filling / batch-sampling: then the ``k`` tasks go to ``k`` distinct queues at that
level whatever the rest of the sample is). Early stopping changes which random numbers are used,
not the law of the placement. A batch policy's sample of at least
:data:`sim.core.sampling.HG_MIN_SAMPLE` queues (``batch_filling``, ``batch_sampling``) is drawn
as level counts instead, one hypergeometric per level (:func:`sim.core.sampling.draw_levels_hg`):
the same law, O(levels * sd) rather than O(sample), which at the headline's N = 10**6 (k d =
12,224 queues per job) is about 14 steps instead of about 12,000 draws (0.41 against 38.75 us
a sample, docs/performance.md).

``pod_per_task`` needs only each task's sampled minimum: ``P(min >= l) = C(N - n_<l, k
d) / C(N, k d)`` (``n_<l`` the servers below level ``l``, counted in ``x`` as it stands after the
job's earlier tasks), inverted with one uniform in O(levels) by
:func:`sim.core.sampling.min_level` (:func:`_place_pod_per_task_min`), with no random number at
all when ``P(min > lowest level) <= exp(-k d x[low] / N)`` is below the uniform's resolution
(the headline path at N = 10**7: k d = 5980, 0.8% idle, a bound of e**-47). The draws it
replaced stopped at the first idle queue, about ``N / x[low]`` draws per task (126 there); a
multivariate hypergeometric per task had measured no faster (docs/performance.md). ``pod`` (k = 1)
keeps the draws, so its results are bitwise those from before.

Random numbers: xoshiro256+ from :mod:`sim.dispatch._agent_kernel` (state words passed and returned as in
that module). Bounded integers use :func:`below64`: Lemire's multiply-shift on the full 64-bit
output with rejection, exactly uniform on ``[0, n)`` for any ``n < 2**63`` (the agent engine's
32-bit version has a bias of order ``n / 2**32``, which is 0.23 at N = 10**9).

Job delay: ``H_m`` when all of a job's queues end at position 1, ``p`` for a single-task job at
position ``p``, else through a memo keyed by the exact signature (counts per position, up to
position :data:`MEMO_MAX_POS`), see :func:`_job_delay`; a signature not in the memo is computed

- under :data:`TABLED_POLICIES` (``batch_sampling``, ``pod_per_task``) on one
  quadrature grid shared by every job (:func:`sim.core.jobdelay.expected_max_gamma_table`:
  ``log F_p`` tabled at the grid's nodes, so a job costs its distinct positions times the ~100
  nodes where its integrand is strictly between 0 and 1; about 1 us for a batch-sampling job
  with d = 2 at N = 10**7, whose positions spread over ~7 levels with counts that rarely
  repeat), falling back to the quadrature above position
  :data:`sim.core.jobdelay.TABLE_MAX_POS`;
- under the other policies by :func:`sim.core.jobdelay.expected_max_gamma` (Gauss-Legendre
  quadrature, 10 us to 1 ms), so that their results stay bitwise those from before the grid
  (the two agree to about 1e-12). Jobs of ``random`` whose positions are deep and varied (k =
  16 at lam = 0.9) still pay a quadrature per job.

Measured: docs/performance.md#dispatch-occupancy-kernel-simdispatch_occupancy_kernelpy

Clock: the embedded jump chain (see :mod:`sim.dispatch.occupancy`): each event is a real transition,
chosen with probabilities proportional to the rates, and the state visited before it is weighted
by its expected holding time ``1 / (total rate)``.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.jobdelay import delay_table, empty_delay_table, expected_max_gamma, expected_max_gamma_table
from sim.core.responses import dummy_recorder, find_key, record_job, sig_id, store_key
from sim.core.rng import below64, next_raw, u01
from sim.core.sampling import (  # noqa: F401
    HG_MIN_SAMPLE,
    draw_levels,
    draw_levels_hg,
    level_totals,
    lowest_occupied,
    min_level,
    sample_levels,  # (test helper)
)
from sim.core.windows import flush_occupancy_window
from sim.dispatch.policies import BATCH_FILLING, BATCH_SAMPLING, JSQ, POD, POD_PER_TASK, RANDOM  # noqa: F401


# --------------------------------------------------------------------------------------------
# placement of one job: fills task_levels[:k] and job_signature; returns (admitted, tasks placed, rng words).
# Direct policies move queues in x as they go (later tasks see earlier ones) and undo the moves
# if the job is dropped; batch policies work on the sample histogram sample_hist and leave x alone.
# A job is dropped iff a task would join a queue already holding bmax tasks (position > bmax).
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _move_up(pool, job_signature, lvl, touched):
    pool[lvl] -= 1
    pool[lvl + 1] += 1
    if touched:
        job_signature[lvl] -= 1
    job_signature[lvl + 1] += 1


@njit(cache=True)
def _undo(x, task_levels, placed):
    for i in range(placed - 1, -1, -1):
        x[task_levels[i] + 1] -= 1
        x[task_levels[i]] += 1


@njit(cache=True)
def _is_touched(pool, job_signature, lvl, s0, s1, s2, s3):
    """Is a uniform server among the ``pool[lvl]`` at level ``lvl`` one of the ``job_signature[lvl]``
    this job already used? (No random number is used when none is.)"""
    if job_signature[lvl] == 0:
        return False, s0, s1, s2, s3
    u, s0, s1, s2, s3 = below64(pool[lvl], s0, s1, s2, s3)
    return u < job_signature[lvl], s0, s1, s2, s3


@njit(cache=True)
def _place_random(x, job_signature, task_levels, k, bmax, n_servers, s0, s1, s2, s3):
    """Each task to a uniform server (with replacement across tasks): one bounded draw per task
    picks the server; its rank within its level says whether the job used it already."""
    for j in range(k):
        u, s0, s1, s2, s3 = below64(n_servers, s0, s1, s2, s3)
        lvl = 0
        while u >= x[lvl]:
            u -= x[lvl]
            lvl += 1
        if lvl >= bmax:
            _undo(x, task_levels, j)
            return False, j, s0, s1, s2, s3
        _move_up(x, job_signature, lvl, u < job_signature[lvl])  # u is uniform in [0, x[lvl])
        task_levels[j] = lvl
    return True, k, s0, s1, s2, s3


@njit(cache=True)
def _place_jsq(x, job_signature, task_levels, k, bmax, s0, s1, s2, s3):
    """Each task, one after another, to a uniform server among the currently shortest."""
    low = 0
    for j in range(k):
        while x[low] == 0:
            low += 1
        if low >= bmax:
            _undo(x, task_levels, j)
            return False, j, s0, s1, s2, s3
        touched, s0, s1, s2, s3 = _is_touched(x, job_signature, low, s0, s1, s2, s3)
        _move_up(x, job_signature, low, touched)
        task_levels[j] = low
    return True, k, s0, s1, s2, s3


@njit(cache=True)
def _place_pod_per_task(x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3):
    """Each task samples ``n_samp`` distinct queues (independently of the other tasks) and joins
    the shortest (ties uniform); ``k = 1``, ``n_samp = d`` is power-of-d. Given the sampled
    minimum level, the chosen queue is a uniform server of that level (exchangeability)."""
    for j in range(k):
        low = lowest_occupied(x)
        top, s0, s1, s2, s3 = draw_levels(x, n_servers, n_samp, low, 1, sample_hist, s0, s1, s2, s3)
        lvl = low
        while sample_hist[lvl] == 0:
            lvl += 1
        for i in range(top + 1):
            sample_hist[i] = 0
        if lvl >= bmax:
            _undo(x, task_levels, j)
            return False, j, s0, s1, s2, s3
        touched, s0, s1, s2, s3 = _is_touched(x, job_signature, lvl, s0, s1, s2, s3)
        _move_up(x, job_signature, lvl, touched)
        task_levels[j] = lvl
    return True, k, s0, s1, s2, s3


@njit(cache=True)
def _place_pod_per_task_min(x, job_signature, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3):
    """``pod_per_task``: each task joins the shortest of ``n_samp`` distinct queues sampled
    independently of the other tasks (later tasks see the earlier ones in ``x``). Only the
    sample's minimum level matters, drawn by inversion (:func:`sim.core.sampling.min_level`:
    one uniform and O(levels), or no random number at all when a higher minimum has
    probability below the uniform's resolution); the chosen queue is then a uniform server at
    that level (exchangeability), one the job used already with probability ``job_signature / x``."""
    for j in range(k):
        low = lowest_occupied(x)
        lvl, s0, s1, s2, s3 = min_level(x, n_servers, n_samp, low, s0, s1, s2, s3)
        if lvl >= bmax:
            _undo(x, task_levels, j)
            return False, j, s0, s1, s2, s3
        touched, s0, s1, s2, s3 = _is_touched(x, job_signature, lvl, s0, s1, s2, s3)
        _move_up(x, job_signature, lvl, touched)
        task_levels[j] = lvl
    return True, k, s0, s1, s2, s3


@njit(cache=True)
def _fill_batch_filling(sample_hist, job_signature, task_levels, k, bmax, s0, s1, s2, s3):
    """Batch-filling on a sample histogram ``sample_hist``: the ``k`` tasks one by one, each into a
    currently shortest sampled queue (ties uniform, touched or not). ``sample_hist`` ends as the sampled
    queues' final histogram. Returns ``(admitted, placed, highest level written, rng)``."""
    m = 0
    lvl = 0
    for j in range(k):
        while sample_hist[m] == 0:
            m += 1
        lvl = m
        if lvl >= bmax:
            return False, j, lvl, s0, s1, s2, s3
        touched, s0, s1, s2, s3 = _is_touched(sample_hist, job_signature, lvl, s0, s1, s2, s3)
        _move_up(sample_hist, job_signature, lvl, touched)
        task_levels[j] = lvl
    return True, k, lvl + 1, s0, s1, s2, s3


@njit(cache=True)
def _fill_batch_sampling(sample_hist, job_signature, task_levels, k, bmax):
    """Batch-sampling on a sample histogram ``sample_hist``: one task to each of the ``k`` shortest
    sampled queues (all distinct). ``sample_hist`` loses the chosen queues. Returns (admitted, placed)."""
    m = 0
    for j in range(k):
        while sample_hist[m] == 0:
            m += 1
        if m >= bmax:
            return False, j
        sample_hist[m] -= 1
        job_signature[m + 1] += 1
        task_levels[j] = m
    return True, k


@njit(cache=True)
def _place_batch(policy, x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3):
    """Sample ``n_samp`` distinct queues, then batch-filling or batch-sampling (x untouched)."""
    low = lowest_occupied(x)
    if n_samp >= HG_MIN_SAMPLE:
        top, s0, s1, s2, s3 = draw_levels_hg(x, n_servers, n_samp, low, k, sample_hist, s0, s1, s2, s3)
    else:
        top, s0, s1, s2, s3 = draw_levels(x, n_servers, n_samp, low, k, sample_hist, s0, s1, s2, s3)
    if policy == BATCH_FILLING:
        ok, placed, hi, s0, s1, s2, s3 = _fill_batch_filling(sample_hist, job_signature, task_levels, k, bmax,
                                                             s0, s1, s2, s3)
        if hi > top:
            top = hi
    else:
        ok, placed = _fill_batch_sampling(sample_hist, job_signature, task_levels, k, bmax)
    for i in range(top + 1):
        sample_hist[i] = 0
    return ok, placed, s0, s1, s2, s3


@njit(cache=True)
def _place(policy, x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3):
    """One job under ``policy`` (dispatch for the test helpers; the event loop calls the policy
    function directly, its code being a compile-time constant there)."""
    if policy == RANDOM:
        return _place_random(x, job_signature, task_levels, k, bmax, n_servers, s0, s1, s2, s3)
    if policy == JSQ:
        return _place_jsq(x, job_signature, task_levels, k, bmax, s0, s1, s2, s3)
    if policy == POD:
        return _place_pod_per_task(x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers,
                                   s0, s1, s2, s3)
    if policy == POD_PER_TASK:
        return _place_pod_per_task_min(x, job_signature, task_levels, k, n_samp, bmax, n_servers,
                                       s0, s1, s2, s3)
    return _place_batch(policy, x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3)


# --------------------------------------------------------------------------------------------
# test helpers (python-callable, same code paths as the event loop)
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def place_job(policy, x, k, n_samp, bmax, state):
    """Place one job on counts ``x`` (not modified): returns ``(admitted, task_levels, positions,
    x_after)`` with ``task_levels`` the levels the placed tasks joined (in order), ``positions[p]`` the
    number of distinct queues whose job-last task is at position ``p`` and ``x_after`` the
    counts after the job (equal to ``x`` if dropped). ``n_samp``: queues sampled per job
    (batch policies, ``k*d``) or per task (``pod``: d; ``pod_per_task``: ``k*d``)."""
    cap = x.size + k + 2
    xx = np.zeros(cap, dtype=np.int64)
    xx[: x.size] = x
    job_signature = np.zeros(cap, dtype=np.int64)
    sample_hist = np.zeros(cap, dtype=np.int64)
    task_levels = np.zeros(k, dtype=np.int64)
    ok, placed, s0, s1, s2, s3 = _place(policy, xx, job_signature, sample_hist, task_levels, k, n_samp, bmax, xx.sum(),
                                        state[0], state[1], state[2], state[3])
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    if ok and (policy == BATCH_FILLING or policy == BATCH_SAMPLING):
        for j in range(k):
            xx[task_levels[j]] -= 1
            xx[task_levels[j] + 1] += 1
    return ok, task_levels[:placed].copy(), job_signature, xx


# --------------------------------------------------------------------------------------------
# E[response | positions], memoised by signature
# --------------------------------------------------------------------------------------------
#: signatures (counts at positions 1..P) are packed 16 bits per position into MEMO_WORDS words
MEMO_WORDS = 8
MEMO_MAX_POS = 4 * MEMO_WORDS  # longest memoised signature
MEMO_MAX_COUNT = 1 << 16  # counts must fit in 16 bits (k < 2**16)


@njit(cache=True)
def _delay_value(job_signature, top_pos, gl_x, gl_w, tabled, tab):
    """``E[max_i Gamma(p_i, 1)]`` of one signature: on the shared grid (``tabled``:
    :func:`sim.core.jobdelay.expected_max_gamma_table`, ``tab`` its arrays) where it reaches,
    else by :func:`sim.core.jobdelay.expected_max_gamma`'s quadrature."""
    if tabled:
        v = expected_max_gamma_table(job_signature, top_pos, tab[0], tab[1], tab[2], tab[3], tab[4],
                                     tab[5], tab[6], tab[7])
        if v >= 0.0:
            return v
    return expected_max_gamma(job_signature[: top_pos + 1], gl_x, gl_w)


@njit(cache=True)
def _job_delay(job_signature, top_pos, memo_keys, memo_pos, memo_val, memo_fill, key, gl_x, gl_w,
               tabled, tab):
    """``E[max_i Gamma(p_i, 1)]`` for the job whose queues' job-last positions are counted in
    ``job_signature[1..top_pos]``, through a memo (open addressing, linear probing) keyed by the exact
    signature: the quadrature of :func:`sim.core.jobdelay.expected_max_gamma` costs 10-500 us, and
    under batch-filling a job's queues all end at two adjacent positions (the water level and
    the one above), so few signatures recur. ``memo_pos[i] == 0`` marks a free slot; nothing is
    inserted beyond half the table (``memo_fill[0]`` counts entries); signatures longer than
    :data:`MEMO_MAX_POS` (or a 1-slot table: memo off) go to the quadrature directly. ``key``
    is scratch (int64[MEMO_WORDS]). A value not in the memo comes from :func:`_delay_value`
    (the shared grid when ``tabled``, a closure constant of the event loop)."""
    size = memo_pos.size
    if top_pos > MEMO_MAX_POS or size == 1:
        return _delay_value(job_signature, top_pos, gl_x, gl_w, tabled, tab)
    n_words = (top_pos + 3) >> 2
    for q in range(MEMO_WORDS):
        key[q] = 0
    for p in range(1, top_pos + 1):
        key[(p - 1) >> 2] |= job_signature[p] << (16 * ((p - 1) & 3))
    i, found = find_key(key, top_pos, n_words, memo_keys, memo_pos)
    if found:
        return memo_val[i]
    v = _delay_value(job_signature, top_pos, gl_x, gl_w, tabled, tab)
    if 2 * memo_fill[0] < size:
        store_key(i, key, top_pos, n_words, memo_keys, memo_pos)
        memo_val[i] = v
        memo_fill[0] += 1
    return v


# --------------------------------------------------------------------------------------------
# the event loop
# --------------------------------------------------------------------------------------------
@functools.cache
def _make_run_span(policy: int, record: bool = False, single: bool = False):
    """The event loop compiled for one policy code (a compile-time constant of the closure, so
    numba removes the other policies' branches; cached on disk per code, as in
    :mod:`sim.dispatch._agent_kernel`). The policy branch is thus taken once, outside the hot loop.

    ``record`` (a closure constant too: a separate compiled variant) records each admitted
    job's signature ``job_signature[1..max position]`` for the response-time distribution
    (:mod:`sim.core.responses`); the variant that does not record compiles without it.

    ``single`` (a closure constant: ``k = 1`` under ``pod``, ``random`` or ``jsq``) places a
    job by code written into the loop instead of the ``_place_*`` functions, which LLVM keeps
    as out-of-line calls with every array argument's struct pushed on the stack, and skips the
    per-job ``job_signature`` / ``task_levels`` bookkeeping (one task: its position is the job's signature).
    It uses the same random numbers in the same order and finds the same levels, so the
    results are bitwise those of the general path. Under ``random`` (``tails``) it also keeps
    ``g[l]``, the number of servers with at least ``l`` tasks (one update per event), and finds
    the level of a server's rank by blocks of :data:`TAIL_BLOCK` levels of ``g`` instead of a
    scan of ``x`` one level at a time: queues are long under random routing (mean 49 at
    lam = 0.98). Costs measured: docs/performance.md, "Occupancy engine against its C loop"."""
    policy = int(policy)
    record = bool(record)
    single = bool(single)
    tails = single and policy == RANDOM
    tabled = policy in TABLED_POLICIES

    @njit(cache=True)
    def run_span(n_servers, arr_rate, k, n_samp, bmax, h_thr,
                 x, g, acc, job_signature, sample_hist, task_levels, harm, memo, gl_x, gl_w, tab, bounds, state,
                 w_first, e_first, t_w, qacc, outputs, rec):
        """Process events from ``e_first`` (inside window ``w_first``, ``t_w`` of its time and
        ``qacc`` of its lazy queue area already elapsed) until the end of the run, or until a
        job could reach the top level of the arrays (then return before that event so that the
        caller can grow them). Returns ``(window, next event, t_w, qacc)``. ``memo``,
        ``outputs`` and ``rec`` are the tuples :func:`occupancy_kernel` takes, unpacked here."""
        memo_keys, memo_pos, memo_val, memo_fill, memo_key = memo
        (w_time, w_qarea, w_tail, w_arr, w_drop, w_adm, w_resp, w_wait, w_waited,
         w_within) = outputs
        (r_sig, r_grid, r_over, r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps, r_cs,
         r_key) = rec
        cap = x.size
        n_windows = bounds.size - 1
        busy = n_servers - x[0]
        total, top = level_totals(x)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        w = w_first
        e = e_first
        while w < n_windows:
            e1 = bounds[w + 1]
            grow = False
            while e < e1:
                if min(top + k, bmax) + 2 > cap:
                    grow = True
                    break
                rate = arr_rate + busy
                t_w += 1.0 / rate  # expected holding time of the current state
                r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                if single and u01(r) * rate < arr_rate:
                    # ---- single-task job arrival: its level, then the same bookkeeping as
                    # below with k = 1 (E[T] = position, harm[1] = 1.0 at position 1)
                    # (written out here, not called: LLVM left even a small helper taking
                    # x and sample_hist as an out-of-line call with its array structs pushed)
                    if policy == RANDOM:
                        # a uniform server, its rank u counted from level 0 up (_place_random):
                        # the level is the number of l >= 1 with g[l] > N - 1 - u (g is
                        # non-increasing and 0 above top): whole blocks of TAIL_BLOCK levels
                        # skipped on their last entry, then the last block counted
                        u, s0, s1, s2, s3 = below64(n_servers, s0, s1, s2, s3)
                        thr = n_servers - 1 - u
                        m = 1
                        while g[m + TAIL_BLOCK - 1] > thr:
                            m += TAIL_BLOCK
                        lvl = m - 1
                        for i in range(TAIL_BLOCK - 1):
                            lvl += g[m + i] > thr
                    elif policy == JSQ:
                        lvl = 0
                        while x[lvl] == 0:
                            lvl += 1
                    else:
                        # power-of-n_samp: the lowest level among n_samp distinct servers, with
                        # the draws, scan order and early stop of draw_levels (stop = 1: a
                        # draw at the lowest occupied level ends the sample), so the same
                        # random numbers give the same level; a drawn server is taken out of
                        # x itself (x[l] - sample_hist[l] there, one load per level scanned here),
                        # counted in sample_hist, and both are restored after the sample
                        low = 0
                        while x[low] == 0:
                            low += 1
                        lvl = cap
                        hi = 0
                        for j in range(n_samp):
                            u, s0, s1, s2, s3 = below64(n_servers - j, s0, s1, s2, s3)
                            m = 0
                            while u >= x[m]:
                                u -= x[m]
                                m += 1
                            if m < lvl:
                                lvl = m
                            if m == low:
                                break
                            x[m] -= 1
                            sample_hist[m] += 1
                            if m > hi:
                                hi = m
                        for i in range(lvl, hi + 1):
                            x[i] += sample_hist[i]
                            sample_hist[i] = 0
                    w_arr[w] += 1
                    if lvl < bmax:
                        x[lvl] -= 1
                        x[lvl + 1] += 1
                        if tails:
                            g[lvl + 1] += 1
                        if lvl == 0:
                            busy += 1
                        acc[lvl + 1] += t_w
                        total += 1
                        qacc += t_w
                        if lvl + 1 > top:
                            top = lvl + 1
                        w_adm[w] += 1
                        w_resp[w] += lvl + 1.0
                        w_wait[w] += lvl
                        if lvl > 0:
                            w_waited[w] += 1
                        if lvl < h_thr:
                            w_within[w] += 1
                        if record:
                            if lvl < r_sig.shape[1]:
                                r_sig[w, lvl] += 1
                            else:
                                record_job(w, 1, job_signature, lvl + 1, r_sig, r_grid, r_over,
                                           r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid,
                                           r_ps, r_cs, r_key)
                    else:
                        w_drop[w] += 1
                elif not single and u01(r) * rate < arr_rate:
                    # ---- job arrival (PASTA: it sees the state just held)
                    if policy == RANDOM:
                        ok, placed, s0, s1, s2, s3 = _place_random(
                            x, job_signature, task_levels, k, bmax, n_servers, s0, s1, s2, s3)
                    elif policy == JSQ:
                        ok, placed, s0, s1, s2, s3 = _place_jsq(
                            x, job_signature, task_levels, k, bmax, s0, s1, s2, s3)
                    elif policy == POD:
                        ok, placed, s0, s1, s2, s3 = _place_pod_per_task(
                            x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3)
                    elif policy == POD_PER_TASK:
                        ok, placed, s0, s1, s2, s3 = _place_pod_per_task_min(
                            x, job_signature, task_levels, k, n_samp, bmax, n_servers, s0, s1, s2, s3)
                    else:
                        ok, placed, s0, s1, s2, s3 = _place_batch(
                            policy, x, job_signature, sample_hist, task_levels, k, n_samp, bmax, n_servers,
                            s0, s1, s2, s3)
                    w_arr[w] += 1
                    if ok:
                        max_lvl = 0
                        sum_lvl = 0
                        for j in range(k):
                            lvl = task_levels[j]
                            if policy == BATCH_FILLING or policy == BATCH_SAMPLING:
                                x[lvl] -= 1
                                x[lvl + 1] += 1
                            if lvl == 0:
                                busy += 1
                            acc[lvl + 1] += t_w  # one more server with >= lvl + 1 tasks
                            sum_lvl += lvl
                            if lvl > max_lvl:
                                max_lvl = lvl
                        total += k
                        qacc += k * t_w
                        if max_lvl + 1 > top:
                            top = max_lvl + 1
                        # ---- E[response | positions] (Rao-Blackwell)
                        if max_lvl == 0:
                            et = harm[job_signature[1]]
                        elif k == 1:
                            et = max_lvl + 1.0  # E[Gamma(p, 1)] = p
                        else:
                            et = _job_delay(job_signature, max_lvl + 1, memo_keys, memo_pos, memo_val,
                                            memo_fill, memo_key, gl_x, gl_w, tabled, tab)
                        w_adm[w] += 1
                        w_resp[w] += et
                        w_wait[w] += sum_lvl
                        if max_lvl > 0:
                            w_waited[w] += 1
                        if max_lvl < h_thr:
                            w_within[w] += 1
                        if record:  # job_signature[p]: the job's queues whose last task is at p
                            # (common cases inline; record_job takes the rare ones)
                            sid = np.int64(-1)
                            if k == 1:
                                if max_lvl < r_sig.shape[1]:
                                    sid = max_lvl
                            else:
                                sid = sig_id(job_signature, max_lvl + 1, r_keys, r_pos, r_ids, r_counts,
                                             r_nsig, r_key)
                            if sid >= 0:
                                r_sig[w, sid] += 1
                            else:
                                record_job(w, k, job_signature, max_lvl + 1, r_sig, r_grid, r_over,
                                           r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid,
                                           r_ps, r_cs, r_key)
                    else:
                        w_drop[w] += 1
                    for j in range(placed):
                        job_signature[task_levels[j]] = 0
                        job_signature[task_levels[j] + 1] = 0
                else:
                    # ---- service completion at a uniform busy server
                    u, s0, s1, s2, s3 = below64(busy, s0, s1, s2, s3)
                    if tails:  # as for the arrival: rank u among the busy, from level 1 up
                        thr = busy - 1 - u
                        m = 1
                        while g[m + TAIL_BLOCK - 1] > thr:
                            m += TAIL_BLOCK
                        lvl = m - 1
                        for i in range(TAIL_BLOCK - 1):
                            lvl += g[m + i] > thr
                        g[lvl] -= 1
                    else:
                        lvl = 1
                        while u >= x[lvl]:
                            u -= x[lvl]
                            lvl += 1
                    x[lvl] -= 1
                    x[lvl - 1] += 1
                    acc[lvl] -= t_w
                    qacc -= t_w
                    total -= 1
                    if lvl == 1:
                        busy -= 1
                    if lvl == top and x[lvl] == 0:
                        top = lvl - 1
                e += 1
            if grow:
                break
            # ---- window end: flush the lazy areas (area = count_end * T - sum delta * t)
            flush_occupancy_window(w, t_w, x, acc, total, qacc, w_time, w_tail, w_qarea)
            t_w = 0.0
            qacc = 0.0
            w += 1
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        return w, e, t_w, qacc

    return run_span


#: levels compared at a time in the tail-count searches of the single-task random loop
TAIL_BLOCK = 8

#: policies whose job delays not in the memo come from the shared grid
#: (:func:`sim.core.jobdelay.expected_max_gamma_table`) rather than a quadrature per signature:
#: their signatures spread over several positions with varying counts, so the memo rarely hits
#: (batch-sampling with small d). The other policies keep the quadrature, so their results are
#: bitwise those from before the grid.
TABLED_POLICIES = (BATCH_SAMPLING, POD_PER_TASK)
_EMPTY_TABLE = empty_delay_table()


def _tail_counts(x):
    """``g[l]`` = servers with at least ``l`` tasks (``l = 0 .. x.size - 1``), then
    :data:`TAIL_BLOCK` zeros so that a blocked search never reads past the end."""
    g = np.zeros(x.size + TAIL_BLOCK, dtype=np.int64)
    g[: x.size] = np.cumsum(x[::-1])[::-1]
    return g


def new_memo(k, bits=16):
    """Empty signature memo for :func:`_job_delay`: ``2**bits`` slots of 80 bytes (5 MB), or a
    1-slot dummy (memo off) when counts do not fit in 16 bits or ``k = 1`` (not needed)."""
    size = 1 if k >= MEMO_MAX_COUNT or k == 1 else 1 << bits
    return (np.zeros((size, MEMO_WORDS), dtype=np.int64), np.zeros(size, dtype=np.int64),
            np.zeros(size), np.zeros(1, dtype=np.int64), np.zeros(MEMO_WORDS, dtype=np.int64))


def occupancy_kernel(policy, n_servers, arr_rate, k, n_samp, bmax, h_thr, x, bounds, state,
                     harm, memo, gl_x, gl_w, outputs, rec=None, table=None):
    """Run ``bounds[-1]`` jump-chain events from counts ``x`` and fill the window accumulators.

    Parameters (prepared and validated by :func:`sim.dispatch.occupancy.simulate`)
    ----------
    policy : int        code of :data:`sim.dispatch.policies.POLICY_CODES`.
    n_servers : int     N.
    arr_rate : float    job arrival rate ``N * lam / k``.
    k, n_samp : int     tasks per job; queues sampled per job (batch) or per task (pod kinds).
    bmax : int          buffer b (a large sentinel when unbounded).
    h_thr : int         threshold h of ``frac_within_h``.
    x : int64[cap]      initial counts (sum N); the arrays grow between spans as needed.
    bounds : int64[W+1] first event of each window; ``bounds[-1]`` = events.
    state : uint64[4]   xoshiro256+ state, advanced in place.
    harm : float64[k+1] harmonic numbers H_0..H_k.
    memo :              :func:`new_memo` (E[T] by position signature).
    outputs : tuple     per-window arrays ``w_time, w_qarea, w_tail[W, max_level], w_arr,
                        w_drop, w_adm, w_resp, w_wait, w_waited, w_within`` (zeros).
    rec :               :class:`sim.core.responses.Recorder` to record each admitted job's
                        signature (window of its arrival), or None (the loop that does not).
    table :             :class:`sim.core.jobdelay.DelayTable` for the policies of
                        :data:`TABLED_POLICIES` (None: :func:`sim.core.jobdelay.delay_table`);
                        ignored by the others.

    Areas are integrated lazily: with ``t`` the time elapsed in the window, a change ``delta``
    of the number of servers with at least ``i`` tasks adds ``delta * t`` to ``acc[i]``; at the
    window end the area is ``count * T - acc[i]``. O(1) per change, O(levels) per window.

    Returns the final counts (a new array if they grew).
    """
    policy = int(policy)
    record = rec is not None
    if not record:
        rec = dummy_recorder()
    single = k == 1 and policy in (POD, RANDOM, JSQ)
    run_span = _make_run_span(policy, record, single)
    if policy in TABLED_POLICIES:
        tab = tuple(delay_table() if table is None else table)
    else:
        tab = tuple(_EMPTY_TABLE)
    n_windows = bounds.size - 1
    cap = x.size
    acc = np.zeros(cap)
    job_signature = np.zeros(cap, dtype=np.int64)
    sample_hist = np.zeros(cap, dtype=np.int64)
    task_levels = np.zeros(k, dtype=np.int64)
    g = _tail_counts(x)
    w, e, t_w, qacc = 0, int(bounds[0]), 0.0, 0.0
    while True:
        w, e, t_w, qacc = run_span(n_servers, arr_rate, k, n_samp, bmax, h_thr,
                                   x, g, acc, job_signature, sample_hist, task_levels, harm, tuple(memo), gl_x, gl_w, tab,
                                   bounds, state, w, e, t_w, qacc, tuple(outputs), tuple(rec))
        if w >= n_windows:
            return x
        cap = 2 * x.size
        x = np.concatenate((x, np.zeros(cap - x.size, dtype=np.int64)))
        acc = np.concatenate((acc, np.zeros(cap - acc.size)))
        g = _tail_counts(x)
        job_signature = np.zeros(cap, dtype=np.int64)  # all zero between jobs
        sample_hist = np.zeros(cap, dtype=np.int64)
