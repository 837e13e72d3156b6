"""Compiled kernels of the JIQ agent engine (private; the public API is :mod:`sim.jiq.agent`).

Everything here is ``@njit(cache=True)`` except the Python drivers (:func:`agent_kernel`,
:func:`make_iqueues`, :func:`check_state`); policies are integer codes (the ``code`` of :mod:`sim.jiq.policies`).
The event loop is :func:`_make_run_span`; :func:`apply_arrival` and :func:`apply_completion`
compose its per-event functions in its order on hand-built states, for tests. Servers as in the
dispatch model (:mod:`sim.core.fifo`): ``q[n]`` tasks, a FIFO ring ``buf[n, :]`` of their
arrival event indices (-1: present at time 0) from ``head[n]``; ``cnt[l]``: servers with >= l tasks.

I-queues, O(1) per operation, ``4 M K + 8 (N + M)`` bytes: row ``m`` of ``iq`` (uint32, flat,
``K = 2**kshift`` slots a row) lists I-queue ``m``'s servers in its first ``isize[m]`` slots, in
no order; ``where[n]`` is server ``n``'s flat slot ``m*K + k``, or -1. Adding appends; removing
moves the row's last member into the freed slot; a uniform draw is one bounded integer. ``K``
(a power of two above the longest I-queue seen, at least 8) doubles when a row fills
(:func:`grow_iqueues`), so memory follows the I-queue sizes, not ``M N`` (a linked list has no
O(1) uniform draw; blocks of one permutation of the servers cannot grow in O(1)).

Under jiq, jiq_pod and jiq_sqd the listed servers are exactly the idle ones, and the loop uses
it twice:

- a task taken from its scheduler's I-queue goes to the row's *last* member, not a uniform one.
  The aggregate state (I-queue lengths, queue lengths, each task's position) is a Markov chain
  with the same rates under both rules: whichever member takes the task, one idle server
  becomes busy and the I-queue shortens; a blind task reaches each idle server with the same
  probability, so it deletes from I-queue ``m`` with probability proportional to its length;
  service tokens are uniform. Only server identities differ, which no output reads. Checked by
  tests/jiq/test_jiq_agent.py (jiq against jiq_threshold with z = 0, which draws uniformly);
- an idle server's slot is kept coded as ``-2 - pos`` (:func:`_coded`) in slot 0 of its own
  empty ring, not in ``where``: a join writes it, a task taken from the I-queue overwrites it
  with its arrival stamp (no other member moves), only a delete reads it
  (:func:`_iq_remove_coded`). A span writes the codes from ``where`` when it starts and reads
  them back when it stops. Codes are below -1, so the branch-free start of service, which may
  read a stale slot, never takes one for an arrival.

Random draws: one raw xoshiro256+ draw ``r`` per event decides the kind (an arrival iff
``r < p_arrival``, the whole word) and, by its low half (:func:`below` of ``r << 32``), the
scheduler or the server. Given the kind, that index is uniform up to a bias below
2**-32 / min(p, 1 - p) (``p = lam / (1 + lam)``) plus :func:`below`'s n / 2**32 (the bound,
and the weak low bits of xoshiro256+: docs/performance.md).

Statistics: ``p0`` (the time-average fraction of empty I-queues) is sampled: every event reads,
before it changes anything, the length of I-queue ``below(lo, M)``, an index independent of the
state. In a uniformized chain the state before an event is a time-average sample, so the count
of empty ones is unbiased (its noise raised the SE by at most about 3%). Under jiq, jiq_pod and
jiq_sqd the joins, probes and listed count are derived per window from the queue counts; the
other two count joins and keep the listed count with its lazy area (``ctr``, across stops).

Measured history of this loop's speed work: docs/performance.md#jiq-agent-kernel-simjiq_agent_kernelpy
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.fifo import grow_rings, level_arrays, queue_dtype
from sim.core.responses import dummy_recorder, record_job
from sim.core.rng import below, next_raw
from sim.core.sampling import prefetch, shortest_fy
from sim.core.windows import flush_levels, window_of, window_shift

__all__ = ["JIQ", "JIQ_POD", "JIQ_ORIGINAL", "JIQ_THRESHOLD", "JIQ_SQD",
           "agent_kernel", "make_iqueues", "iqueue_lists", "check_state", "apply_arrival",
           "apply_completion", "initial_joins", "grow_iqueues"]

#: kernel codes of the policies (``code`` of their records, sim.jiq.policies)
JIQ, JIQ_POD, JIQ_ORIGINAL, JIQ_THRESHOLD, JIQ_SQD = 0, 1, 2, 3, 4

#: from this many servers on, the loop draws each event one event ahead and prefetches what
#: the next event reads first (see :func:`_make_run_span`); below, its arrays are cache-resident
#: and the look-ahead only costs
AHEAD_MIN_SERVERS = 2**15

# ctr index: number of listed servers (carried across stops)
LISTED = 0
N_CTR = 1

_U32 = np.uint64(32)


# --------------------------------------------------------------------------------------------
# I-queue operations and the policies' rules (small functions that LLVM inlines into the loop;
# the test helpers below compose them exactly as the loop does)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _iq_add(n, m, iq, isize, where, kshift):
    """List server ``n`` in I-queue ``m``; returns the new length."""
    sz = isize[m]
    pos = (np.int64(m) << kshift) + sz
    iq[pos] = n
    where[n] = pos
    isize[m] = sz + 1
    return sz + 1


@njit(cache=True)
def _iq_remove(n, iq, isize, where, kshift):
    """Unlist server ``n`` (listed): the row's last member takes its slot; returns the new length."""
    pos = where[n]
    return _iq_remove_at(pos, pos >> kshift, iq, isize, where, kshift)


@njit(cache=True)
def _iq_remove_at(pos, m, iq, isize, where, kshift):
    """Unlist the server at flat slot ``pos`` of I-queue ``m`` (as :func:`_iq_remove`, without
    reading ``where`` of the server: a cache miss saved at large N). Returns the new length."""
    sz = isize[m] - 1
    last = iq[(np.int64(m) << kshift) + sz]
    n = iq[pos]
    iq[pos] = last
    where[last] = pos
    where[n] = -1
    isize[m] = sz
    return sz


@njit(cache=True)
def _take_last(m, sz, iq, isize, ks):
    """Unlist and return the last member of I-queue ``m`` (length ``sz > 0``, ``ks`` the row
    shift as uint64): the member that takes a task under jiq, jiq_pod and jiq_sqd (module
    docstring). Its ``where`` is not touched: the loop keeps it coded in the ring."""
    left = sz - 1
    isize[m] = left
    return np.int64(iq[(np.uint64(m) << ks) + np.uint64(left)])


@njit(cache=True)
def _draw_listed(m, sz, iq, kshift, s0, s1, s2, s3):
    """A server drawn uniformly from I-queue ``m`` (length ``sz > 0``): ``(server, slot, s0..s3)``."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    pos = (np.int64(m) << kshift) + below(r, sz)
    return np.int64(iq[pos]), pos, s0, s1, s2, s3


@njit(cache=True)
def _pick_shortest(vals, d, samp, use_fy, s0, s1, s2, s3):
    """Index of the smallest of ``d`` distinct uniformly sampled entries of ``vals`` (queue or
    I-queue lengths), ties uniform: the sample is in uniformly random order and the *first*
    minimum is kept. ``use_fy``: partial Fisher-Yates on ``samp``
    (:func:`sim.core.sampling.shortest_fy`), else rejection of repeats (:func:`_shortest_rej`):
    two functions, as one holding both bodies is too large for LLVM to inline."""
    if use_fy:
        return shortest_fy(vals, d, samp, s0, s1, s2, s3)
    return _shortest_rej(vals, d, samp, s0, s1, s2, s3)


@njit(cache=True)
def _shortest_rej(vals, d, samp, s0, s1, s2, s3):
    """:func:`_pick_shortest` by i.i.d. draws with rejection of repeats (``samp[:d]``
    scratch): O(d**2), for 2d <= size. One flat loop, so that LLVM inlines it."""
    size = vals.size
    best = np.int64(0)
    bv = vals[0]
    j = 0
    while j < d:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        c = below(r, size)
        k = 0
        while k < j and samp[k] != c:
            k += 1
        if k < j:  # a repeat: draw again
            continue
        samp[j] = c
        if j == 0 or vals[c] < bv:
            best = c
            bv = vals[c]
        j += 1
    return best, s0, s1, s2, s3


@njit(cache=True)
def _coded(x):
    """An I-queue slot ``pos >= 0`` as kept in an idle server's empty ring, and back (an
    involution): ``-2 - pos``, below the ``-1`` of unknown arrival stamps (module docstring)."""
    return np.int64(-2) - np.int64(x)


@njit(cache=True)
def _iq_remove_coded(enc, iq, isize, rows, cs, kshift):
    """Unlist the idle server whose slot is coded as ``enc`` (jiq, jiq_pod, jiq_sqd in the
    loop): the last member of its row takes the slot, and that member's coded slot moves."""
    pos = _coded(enc)
    m = pos >> kshift
    left = isize[m] - 1
    last = iq[(m << kshift) + left]
    iq[pos] = last
    rows[np.uint64(last) << cs] = enc
    isize[m] = left


@njit(cache=True)
def _blind(policy, d, use_fy, q, samp, s0, s1, s2, s3):
    """The server of a task whose scheduler's I-queue is empty: the shortest of ``d`` probed
    (jiq_pod), else a uniform one."""
    if policy == JIQ_POD and use_fy:
        return shortest_fy(q, d, samp, s0, s1, s2, s3)
    if policy == JIQ_POD:
        return _shortest_rej(q, d, samp, s0, s1, s2, s3)
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    return below(r, q.size), s0, s1, s2, s3


@njit(cache=True)
def _shorter_of_two(q, r):
    """:func:`_pick_shortest` for ``d = 2`` (``N >= 2``) from one raw draw ``r``: the first server
    by its high half, the second uniform among the other ``N - 1`` by its low half; the pair is
    in uniformly random order, so keeping the first on a tie breaks ties uniformly."""
    n_servers = q.size
    c1 = below(r, n_servers)
    c2 = below(r << _U32, n_servers - 1)
    c2 += np.int64(c2 >= c1)
    return c2 if q[c2] < q[c1] else c1


@njit(cache=True)
def _on_task(policy, z, lvl, own):
    """A task is sent to a server holding ``lvl`` tasks, drawn from the scheduler's own I-queue
    (``own``) or blindly. Returns ``(unlist it, delete messages)``; called only when the server
    is listed or ``own``."""
    if policy == JIQ_THRESHOLD:
        if lvl != z:  # still at most z tasks: stays listed
            return False, 0
        # rises above z: the scheduler knows it only for z = 0 (the listed were then idle)
        return True, (0 if own and z == 0 else 1)
    if own:  # it leaves the I-queue (idle, or under jiq_original possibly busy); no message
        return True, 0
    if policy == JIQ_ORIGINAL:  # no deletes: a busy server stays listed
        return False, 0
    return True, 1  # idle and listed in another I-queue: a delete message


@njit(cache=True)
def _is_listed(policy, z, n, lvl, where):
    """Whether server ``n`` (holding ``lvl`` tasks) is listed: read off its queue length where
    the policy's invariant fixes it (no load of ``where``), from ``where`` under jiq_original."""
    if policy == JIQ_ORIGINAL:
        return where[n] >= 0
    if policy == JIQ_THRESHOLD:
        return lvl <= z
    return lvl == 0


@njit(cache=True)
def _joins(policy, z, lvl, listed):
    """Whether a server that has just fallen to ``lvl`` tasks joins an I-queue."""
    if policy == JIQ_THRESHOLD:
        return lvl == z
    if policy == JIQ_ORIGINAL:  # listed at most once
        return lvl == 0 and not listed
    return lvl == 0


@njit(cache=True)
def _join_target(policy, d, use_fy, isize, ssamp, rj, s0, s1, s2, s3):
    """The I-queue a server joins: the shortest of ``d`` sampled by fresh draws (jiq_sqd),
    else a uniform one by the service's join draw ``rj`` (:func:`_join_draw`)."""
    if policy == JIQ_SQD and use_fy:
        return shortest_fy(isize, d, ssamp, s0, s1, s2, s3)
    if policy == JIQ_SQD:
        return _shortest_rej(isize, d, ssamp, s0, s1, s2, s3)
    return below(rj, isize.size), s0, s1, s2, s3


@njit(cache=True)
def _join_draw(policy, s0, s1, s2, s3):
    """The raw draw of the I-queue a server would join, made at every service of a busy server
    whether it joins or not (so the join can be branch-free); none under jiq_sqd, which samples
    ``d`` I-queues only when a server joins."""
    if policy == JIQ_SQD:
        return np.uint64(0), s0, s1, s2, s3
    return next_raw(s0, s1, s2, s3)


@njit(cache=True)
def _lists_idle_only(policy):
    """Whether the policy's I-queues list exactly the idle servers (jiq, jiq_pod, jiq_sqd): the
    loop then takes a row's last member and keeps the slots coded in the rings (module docstring)."""
    return policy == JIQ or policy == JIQ_POD or policy == JIQ_SQD


# --------------------------------------------------------------------------------------------
# test helpers: one event on a hand-built state, composed as in the loop
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def apply_arrival(policy, d, z, m, q, iq, isize, where, kshift, state):
    """One task arriving at scheduler ``m``, routed by the loop's functions in its order (test
    helper). ``q``, the I-queue arrays (:func:`make_iqueues`) and ``state`` (uint64[4]) are
    updated in place; returns ``(server, joins, deletes, probes)`` (the event's messages)."""
    use_fy = 2 * d > q.size
    samp = np.arange(q.size) if use_fy else np.zeros(max(d, 1), dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    deletes = 0
    probes = 0
    sz = isize[m]
    own = sz > 0
    listed_idle = _lists_idle_only(policy)
    if own and listed_idle:
        n = _take_last(m, sz, iq, isize, np.uint64(kshift))
        where[n] = -1
        q[n] = 1
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        return n, 0, 0, 0
    pos = np.int64(-1)
    if own:
        n, pos, s0, s1, s2, s3 = _draw_listed(m, sz, iq, kshift, s0, s1, s2, s3)
    elif policy == JIQ_POD and d == 2 and not use_fy:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        n = _shorter_of_two(q, r)
    else:
        n, s0, s1, s2, s3 = _blind(policy, d, use_fy, q, samp, s0, s1, s2, s3)
    if not own and policy == JIQ_POD:
        probes += 2 * d
    lvl = q[n]
    if own or _is_listed(policy, z, n, lvl, where):
        leave, msg = _on_task(policy, z, lvl, own)
        if leave and own:
            _iq_remove_at(pos, m, iq, isize, where, kshift)
        elif leave:
            _iq_remove(n, iq, isize, where, kshift)
        deletes += msg
    q[n] = lvl + 1
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return n, 0, deletes, probes


@njit(cache=True)
def apply_completion(policy, d, z, n, q, iq, isize, where, kshift, state):
    """One service completion at server ``n`` (``q[n] > 0``), by the kernel's own functions
    in the loop's order (test helper; the I-queue row must have room). Returns ``(joins,
    deletes, probes)``."""
    n_sched = isize.size
    use_fy = 2 * d > n_sched
    ssamp = np.arange(n_sched) if use_fy else np.zeros(max(d, 1), dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    joins = 0
    probes = 0
    lvl = q[n] - 1
    q[n] = lvl
    rj, s0, s1, s2, s3 = _join_draw(policy, s0, s1, s2, s3)
    if _joins(policy, z, lvl, policy == JIQ_ORIGINAL and where[n] >= 0):
        m, s0, s1, s2, s3 = _join_target(policy, d, use_fy, isize, ssamp, rj, s0, s1, s2, s3)
        if policy == JIQ_SQD:
            probes += 2 * d
        _iq_add(n, m, iq, isize, where, kshift)
        joins += 1
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return joins, 0, probes


# --------------------------------------------------------------------------------------------
# building, growing and checking I-queues
# --------------------------------------------------------------------------------------------
def capacity_shift(longest: int) -> int:
    """``kshift`` of the smallest power of two ``K > longest``, ``K >= 8``."""
    kshift = 3
    while (1 << kshift) <= longest:
        kshift += 1
    return kshift


def make_iqueues(lists, n_servers: int, kshift: int | None = None):
    """I-queue arrays ``(iq, isize, where, kshift)`` from a list of member lists (one per
    I-queue, servers in slot order); a server may appear at most once."""
    n_sched = len(lists)
    isize = np.array([len(x) for x in lists], dtype=np.int64)
    if kshift is None:
        kshift = capacity_shift(int(isize.max(initial=0)))
    iq = np.zeros(n_sched << kshift, dtype=np.uint32)
    where = np.full(n_servers, -1, dtype=np.int64)
    for m, members in enumerate(lists):
        for k, n in enumerate(members):
            if where[n] >= 0:
                raise ValueError(f"server {n} is listed twice")
            iq[(m << kshift) + k] = n
            where[n] = (m << kshift) + k
    return iq, isize, where, kshift


def iqueue_lists(iq, isize, kshift) -> list[list[int]]:
    """The members of each I-queue, in slot order."""
    return [[int(x) for x in iq[(m << kshift):(m << kshift) + isize[m]]] for m in range(isize.size)]


@njit(cache=True)
def grow_iqueues(iq, isize, where, kshift):
    """Double the row capacity; returns ``(new iq, new kshift)`` (``where`` rewritten)."""
    n_sched = isize.size
    ks = kshift + 1
    niq = np.zeros(n_sched << ks, dtype=np.uint32)
    for m in range(n_sched):
        for k in range(isize[m]):
            n = iq[(m << kshift) + k]
            pos = (m << ks) + k
            niq[pos] = n
            where[n] = pos
    return niq, ks


@njit(cache=True)
def initial_joins(isize, n_joins, d, sqd, state):
    """Add ``n_joins`` joins to the I-queue lengths ``isize`` (in place), each to a uniform
    I-queue, or (``sqd``) to the shortest of ``d`` distinct uniformly sampled ones."""
    n_sched = isize.size
    use_fy = 2 * d > n_sched
    ssamp = np.arange(n_sched) if use_fy else np.zeros(max(d, 1), dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for _ in range(n_joins):
        if sqd:
            m, s0, s1, s2, s3 = _pick_shortest(isize, d, ssamp, use_fy, s0, s1, s2, s3)
        else:
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            m = below(r, n_sched)
        isize[m] += 1
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3


def check_state(policy: int, z: int, q, iq, isize, where, kshift, ctr=None) -> list[str]:
    """Violated invariants of a state (empty list if none), O(N + M K): each listed server in
    exactly one slot, ``where`` pointing to it, ``ctr`` (if given) the listed count; jiq, jiq_pod,
    jiq_sqd list exactly the idle servers, jiq_original every idle one (maybe busy ones too),
    jiq_threshold exactly those with at most ``z`` tasks."""
    bad = []
    q = np.asarray(q)
    n_sched = isize.size
    kc = 1 << kshift
    if np.any(isize < 0) or np.any(isize > kc):
        bad.append("an I-queue length is out of [0, K]")
        return bad
    slots = np.arange(n_sched * kc).reshape(n_sched, kc)
    used = slots[np.arange(kc)[None, :] < isize[:, None]]
    members = iq[used].astype(np.int64)
    if members.size and (members.min() < 0 or members.max() >= q.size):
        bad.append("an I-queue slot holds no valid server")
        return bad
    if np.unique(members).size != members.size:
        bad.append("a server is listed twice")
    if not np.array_equal(where[members], used):
        bad.append("where[] does not point at the server's slot")
    listed = where >= 0
    if int(listed.sum()) != members.size:
        bad.append(f"{int(listed.sum())} servers have where >= 0 but {members.size} are listed")
    if ctr is not None:
        if ctr[LISTED] != members.size:
            bad.append(f"listed count {ctr[LISTED]} != {members.size}")
    idle = q == 0
    if policy == JIQ_THRESHOLD:
        if not np.array_equal(listed, q <= z):
            bad.append(f"listed servers != servers with at most z={z} tasks")
    elif policy == JIQ_ORIGINAL:
        if np.any(idle & ~listed):
            bad.append("an idle server is not listed")
    else:
        if np.any(listed & ~idle):
            bad.append("a busy server is listed")
        if np.any(idle & ~listed):
            bad.append("an idle server is not listed")
    return bad


# --------------------------------------------------------------------------------------------
# the event loop
# --------------------------------------------------------------------------------------------
@functools.cache
def _make_run_span(policy: int, pod_fy: bool, sqd_fy: bool, record: bool = False,
                   ahead: bool = True):
    """The event loop compiled for one policy code and sampling methods (closure constants, so
    LLVM removes the untaken branches; cached on disk, keyed on their values). Its steps are the
    small ``@njit`` functions above, in the order of :func:`apply_arrival` and
    :func:`apply_completion`, small enough for LLVM to inline them and prune their arrays'
    reference counts (numba's ``inline="always"`` leaves those counts in the loop; larger
    functions stay calls). An arrival's own / blind choice stays a branch (reading both
    candidates costs more than its mispredictions); the join of jiq and jiq_pod is branch-free
    (a server is idle after about half the services, a branch hard to predict).

    Look-ahead (``ahead``, from :data:`AHEAD_MIN_SERVERS` servers on): each event's draw is made
    one event ahead and both possible first reads of the next event (its scheduler's I-queue
    length and row; its server's queue, head and first ring line) are prefetched, without a
    branch on its kind; ``look`` keeps the draw across stops, so stops do not change the random
    stream. Below that size the arrays are cache-resident and the look-ahead only costs; the
    two variants consume the stream in different orders (one seed, equally distributed runs).

    Data layout: a ring restarts at slot 0 when its queue empties, so a short busy period touches
    one cache line of it, the one prefetched; ``q``, ``head`` and ``iq`` are unsigned (numba's
    negative-index wraparound code compiles away) and as narrow as they fit (:func:`sim.core.fifo.queue_dtype`,
    :func:`_where_dtype`); the rings are one flat array addressed by a shift, ``rows[(n << cs) + k]``.

    ``record`` (a separately compiled variant) records each arrival's queue position in the
    unpacked :class:`sim.core.responses.Recorder` arrays ``r_*`` (``k = 1``): position 1 as
    ``arrivals - waited`` once per window, so the idle-member path gets nothing; a task sent to
    a busy server inline (deep ones: :func:`sim.core.responses.record_job`). No random number.

    Measured history of this loop (timings, what was tried without gain):
    docs/performance.md#jiq-agent-kernel-simjiq_agent_kernelpy
    """
    policy, pod_fy, sqd_fy, record = int(policy), bool(pod_fy), bool(sqd_fy), bool(record)
    ahead = bool(ahead)
    # under jiq, jiq_pod and jiq_sqd the listed servers are the idle ones, so their count and
    # area follow from cnt[1] and acc[1]; jiq_original and jiq_threshold keep a counter
    listed_idle = bool(_lists_idle_only(policy))  # jiq, jiq_pod, jiq_sqd: listed <=> idle
    track_listed = not listed_idle
    uniform_join = policy == JIQ or policy == JIQ_POD  # a uniform I-queue, branch-free

    @njit(cache=True)
    def run_span(d, z, p_arrival, q, buf, head, cnt, acc, iq, isize, where, kshift, samp, ssamp,
                 ctr, bounds, state, look, w_first, e_first, w_stop,
                 w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail,
                 w_empty, w_listed, w_join, w_delete, w_probe,
                 r_sig, r_grid, r_over, r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid, r_ps,
                 r_cs, r_key):
        """Process events from ``e_first`` (inside window ``w_first``) until window ``w_stop``
        starts, or until a ring buffer or an I-queue row fills (then stop after that event, for
        the caller to grow the arrays). Returns ``(window, next event)``; ``ctr`` holds the
        number of listed servers on entry and on return. Window outputs are added with ``+=``
        (a stop may split a window; ``cnt`` and ``acc`` carry over it)."""
        n_servers = q.size
        n_sched = isize.size
        pod2 = d == 2 and not pod_fy
        c = buf.shape[1]
        mask = c - 1
        kc = np.int64(1) << kshift
        ks = np.uint64(kshift)  # unsigned I-queue indices: no wraparound code
        # the ring buffers as one flat array, server n's ring at n << cs (C = 2**cs): a shift,
        # where buf[n, k] multiplies by the row stride; unsigned, so no wraparound code
        rows = buf.reshape(-1)
        cs = np.uint64(0)
        while (np.int64(1) << np.int64(cs)) < c:
            cs += np.uint64(1)
        shift = window_shift(bounds)
        if listed_idle:  # the listed (idle) servers' slots, coded into their rings' slot 0
            for n in range(n_servers):
                if where[n] >= 0:
                    rows[np.uint64(n) << cs] = _coded(where[n])
        listed = ctr[LISTED]
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        ra = np.uint64(0)
        if ahead and look[1] != np.uint64(0):  # the draw made ahead by the previous span
            ra = look[0]
        elif ahead:
            ra, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        w = w_first
        e_next = e_first
        full = False
        while w < w_stop and not full:
            e0 = bounds[w]
            e1 = bounds[w + 1]
            arrivals = np.int64(0)
            waited = np.int64(0)  # arrivals sent to a busy server
            empties = np.int64(0)  # events whose I-queue sample was empty (the p0 estimate)
            deletes = np.int64(0)
            joins = np.int64(0)  # counted only where listed != idle (else from cnt[1])
            lacc = np.int64(0)  # lazily integrated area of the listed count (same)
            busy_first = cnt[1]
            e = e_next
            while e < e1:
                de = e - e0
                # this event's draw (kind: the whole word; scheduler or server: its low half)
                # was made one event ahead; draw the next event's and prefetch what it will
                # read first, for either kind (no branch), so that the misses overlap this
                # event's work
                if ahead:
                    r = ra
                    ra, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    m_next = below(ra << _U32, n_sched)
                    n_next = below(ra << _U32, n_servers)
                    prefetch(isize, m_next)
                    prefetch(iq, m_next << kshift)
                    prefetch(q, n_next)
                    prefetch(head, n_next)
                    prefetch(rows, np.uint64(n_next) << cs)  # its ring's first line
                else:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                r2 = r << _U32
                # the I-queue of the event's scheduler index, drawn independently of the
                # state: its emptiness before the event is a sample of p0 (docstring), whatever
                # the event's kind
                m = below(r2, n_sched)
                sz = isize[m]
                empties += np.int64(sz == 0)
                if r < p_arrival:
                    # ---- arrival at scheduler m
                    own = sz > 0
                    if own and listed_idle:
                        # the row's last member: all members are idle, so which one takes the
                        # task does not change the law (docstring); its ring restarted at slot
                        # 0 when it emptied, so neither q[n] nor head[n] is read, and the
                        # arrival stamp overwrites the I-queue slot coded there
                        n = _take_last(m, sz, iq, isize, ks)
                        rows[np.uint64(n) << cs] = e
                        q[n] = 1
                        cnt[1] += 1
                        acc[1] += de
                        arrivals += 1
                    else:
                        pos = np.int64(-1)
                        if own:
                            n, pos, s0, s1, s2, s3 = _draw_listed(m, sz, iq, kshift,
                                                                  s0, s1, s2, s3)
                        elif policy == JIQ_POD and pod2:
                            rb, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                            n = _shorter_of_two(q, rb)
                        else:
                            n, s0, s1, s2, s3 = _blind(policy, d, pod_fy, q, samp,
                                                       s0, s1, s2, s3)
                        lvl = q[n]
                        base = np.uint64(n) << cs
                        if listed_idle:
                            if lvl == 0:  # blind to an idle server: delete it (docstring)
                                enc = rows[base]
                                _iq_remove_coded(enc, iq, isize, rows, cs, kshift)
                                deletes += 1
                        elif own or _is_listed(policy, z, n, lvl, where):
                            leave, msg = _on_task(policy, z, lvl, own)
                            if leave:
                                if own:
                                    _iq_remove_at(pos, m, iq, isize, where, kshift)
                                else:
                                    _iq_remove(n, iq, isize, where, kshift)
                                if track_listed:
                                    listed -= 1
                                    lacc -= de
                            deletes += msg
                        rows[base + np.uint64((head[n] + lvl) & mask)] = e
                        q[n] = lvl + 1
                        cnt[lvl + 1] += 1
                        acc[lvl + 1] += de
                        arrivals += 1
                        if lvl > 0:
                            waited += 1
                            if record:  # position lvl + 1 (position 1: per window, below)
                                if lvl < r_sig.shape[1]:
                                    r_sig[w, lvl] += 1
                                else:  # deep (rare): on the grid (k = 1: job_signature is not read)
                                    record_job(w, 1, r_ps, lvl + 1, r_sig, r_grid, r_over,
                                               r_keys, r_pos, r_ids, r_counts, r_nsig, r_tgrid,
                                               r_ps, r_cs, r_key)
                        if lvl + 1 == c:  # ring full: stop after this event and grow
                            full = True
                            e += 1
                            break
                else:
                    # ---- service token at a uniform server: wasted if idle
                    n = below(r2, n_servers)
                    lvl = q[n]
                    if lvl > 0:
                        h = head[n]
                        base = np.uint64(n) << cs
                        a = rows[base + np.uint64(h)]
                        if a >= 0:  # not a task present at time 0 (-1)
                            wa = window_of(a, shift)
                            w_jobs[wa] += 1
                            w_resp[wa] += e - a
                        # a ring that empties restarts at slot 0, so short busy periods
                        # stay in its first cache line
                        h = ((h + 1) & mask) if lvl > 1 else 0
                        head[n] = h
                        q[n] = lvl - 1
                        cnt[lvl] -= 1
                        acc[lvl] -= de
                        # the next task, if any (lvl > 1), reaches the head and starts service;
                        # branch-free as in the dispatch kernel: a stale slot holds -1 or a past
                        # arrival, so max(a, 0) is a valid window, and +0 is added if no task
                        a = rows[base + np.uint64(h)]
                        ok = (lvl > 1) & (a >= 0)
                        wa = window_of(max(a, 0), shift)
                        w_starts[wa] += np.int64(ok)
                        w_wait[wa] += (e - a) if ok else 0.0
                        rj, s0, s1, s2, s3 = _join_draw(policy, s0, s1, s2, s3)
                        if uniform_join:
                            # branch-free (whether it is now idle, lvl == 1, is about as
                            # likely as not): the slot past the end of the drawn row is written
                            # in any case, unused if the server stays busy (a row is never full
                            # inside the loop), and a busy server stays unlisted (-1)
                            j = np.int64(lvl == 1)
                            mj = below(rj, n_sched)
                            szj = isize[mj]
                            pos = (np.uint64(mj) << ks) + np.uint64(szj)
                            iq[pos] = n
                            rows[base + np.uint64(h)] = _coded(pos) if j else a
                            isize[mj] = szj + j
                            if szj + j == kc:  # I-queue row full: stop after this event, grow
                                full = True
                                e += 1
                                break
                        elif _joins(policy, z, lvl - 1,
                                    policy == JIQ_ORIGINAL and where[n] >= 0):
                            mj, s0, s1, s2, s3 = _join_target(policy, d, sqd_fy, isize, ssamp,
                                                              rj, s0, s1, s2, s3)
                            if listed_idle:  # jiq_sqd: the slot coded in ring slot 0
                                szj = isize[mj]
                                pos = (np.uint64(mj) << ks) + np.uint64(szj)
                                iq[pos] = n
                                rows[base] = _coded(pos)
                                szj += 1
                                isize[mj] = szj
                            else:
                                szj = _iq_add(n, mj, iq, isize, where, kshift)
                            if track_listed:
                                listed += 1
                                lacc += de
                                joins += 1
                            if szj == kc:  # I-queue row full: stop after this event and grow
                                full = True
                                e += 1
                                break
                e += 1
            w_starts[w] += arrivals - waited  # service starts at once, wait 0
            w_arr[w] += arrivals
            w_waited[w] += waited
            if record:  # the arrivals at position 1
                r_sig[w, 0] += arrivals - waited
            w_empty[w] += empties
            w_delete[w] += deletes
            if listed_idle:
                # a join is a server becoming idle, and the idle servers change by the joins
                # minus the arrivals at idle servers: joins = change of the idle count +
                # arrivals - waited. The blind arrivals are those sent to a busy server (a
                # member of the own I-queue is idle) plus those that deleted an idle one
                joins = busy_first - cnt[1] + arrivals - waited
                if policy == JIQ_POD:
                    w_probe[w] += 2 * d * (waited + deletes)
                elif policy == JIQ_SQD:
                    w_probe[w] += 2 * d * joins
            w_join[w] += joins
            w_listed[w] -= lacc
            e_next = e
            if e == e1:
                if not track_listed:  # area of N - cnt[1] (before the flush resets acc)
                    w_listed[w] += (n_servers - cnt[1]) * (e1 - e0) + acc[1]
                flush_levels(w, e1 - e0, cnt, acc, w_tail, w_qarea)
                if track_listed:
                    w_listed[w] += listed * (e1 - e0)
                w += 1
        if not track_listed:
            listed = n_servers - cnt[1]
        if listed_idle:  # back from the rings into where[]
            for n in range(n_servers):
                where[n] = _coded(rows[np.uint64(n) << cs]) if q[n] == 0 else -1
        ctr[LISTED] = listed
        if ahead:  # kept for the next span, so that a stop does not change the stream
            look[0] = ra
            look[1] = np.uint64(1)
        state[0] = s0
        state[1] = s1
        state[2] = s2
        state[3] = s3
        return w, e_next

    return run_span


def _where_dtype(n_sched: int, kshift: int):
    """dtype of the loop's working copy of ``where``: int32 while every flat I-queue position,
    after one more doubling of the rows too, fits (checked again after each doubling)."""
    return np.int32 if (n_sched << (kshift + 1)) < 2**31 else np.int64


def _codes_fit(stamp_dtype, n_sched: int, kshift: int) -> bool:
    """Whether the ring buffers' stamp type holds every coded I-queue slot
    (:func:`_coded`, down to ``-1 - M K``), after one more doubling of the rows too."""
    return stamp_dtype == np.int64 or (n_sched << (kshift + 1)) < 2**31 - 2


def agent_kernel(policy, d, z, p_arrival, q, buf, head, iq, isize, where, kshift, bounds, state,
                 w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail,
                 w_empty, w_listed, w_join, w_delete, w_probe, check=False, rec=None):
    """Run ``bounds[-1]`` uniformized events and fill the per-window accumulators.

    Parameters (prepared and validated by :func:`sim.jiq.agent.simulate`)
    ----------
    policy : int             a policy record's ``code`` (:mod:`sim.jiq.policies`).
    d, z : int               probes (jiq_pod: servers; jiq_sqd: I-queues), threshold.
    p_arrival : uint64       an event is an arrival iff the raw draw is below it.
    q, buf, head :           initial queues (int64[N]), ring buffers (int32 or int64 [N, C], C
                             a power of two > max q, every slot -1 or a past arrival), heads
                             (int64[N], zeros); ``buf`` is reallocated when a queue fills it.
    iq, isize, where, kshift: the I-queues (module docstring), consistent with ``q``; ``iq`` is
                             reallocated when a row fills.
    bounds : int64[W+1]      event index where each window starts.
    state : uint64[4]        xoshiro256+ state, advanced in place.
    w_* : outputs (zeros), per window: jobs completed, sum of their responses and waits
          (events), service starts, arrivals, arrivals that waited, queue area, tail areas,
          empty I-queues seen by the events' samples (p0), area of listed servers, join,
          delete and probe messages (one-way: a probe counts 2).
    check : bool             stop after every window, verify :func:`check_state` (RuntimeError).
    rec : :class:`sim.core.responses.Recorder` (``k = 1``) or None: record each arrival's
                             queue position (window of its arrival) in the variant that records.

    Updates ``q``, ``head``, ``isize``, ``where``; returns ``(buf, iq, kshift, ctr)`` (final).
    """
    n_servers = q.size
    n_sched = isize.size
    policy, d, z, kshift = int(policy), int(d), int(z), int(kshift)
    pod_fy = policy == JIQ_POD and 2 * d > n_servers
    sqd_fy = policy == JIQ_SQD and 2 * d > n_sched
    cnt, acc, _, _, start = level_arrays(q, buf.shape[1] + 2)  # start: unused, grow_rings keeps it
    samp = np.arange(n_servers, dtype=np.int64) if pod_fy else np.zeros(max(d, 1), np.int64)
    ssamp = np.arange(n_sched, dtype=np.int64) if sqd_fy else np.zeros(max(d, 1), np.int64)
    ctr = np.zeros(N_CTR, dtype=np.int64)
    ctr[LISTED] = int(isize.sum())
    n_windows = bounds.size - 1
    record = rec is not None
    if not record:
        rec = dummy_recorder()
    run_span = _make_run_span(policy, pod_fy, sqd_fy, record, n_servers >= AHEAD_MIN_SERVERS)
    listed_idle = bool(_lists_idle_only(policy))
    look = np.zeros(2, dtype=np.uint64)  # the raw draw made ahead, and whether it is set
    # working copies in the smallest unsigned type that holds the ring capacity (see
    # _make_run_span), and ``where`` in int32 when the positions fit
    if listed_idle and not _codes_fit(buf.dtype, n_sched, kshift):
        buf = buf.astype(np.int64)
    qw = q.astype(queue_dtype(buf.shape[1]))
    hw = head.astype(qw.dtype)
    wh = where.astype(_where_dtype(n_sched, kshift))
    if check:
        bad = check_state(policy, z, qw, iq, isize, where, kshift, ctr)
        if bad:
            raise RuntimeError(f"invariant violated in the initial state: {'; '.join(bad)}")
    w, e = 0, int(bounds[0])
    while w < n_windows:
        w_stop = w + 1 if check else n_windows
        w, e = run_span(d, z, p_arrival, qw, buf, hw, cnt, acc, iq, isize, wh, kshift, samp,
                        ssamp, ctr, bounds, state, look, w, e, w_stop,
                        w_jobs, w_resp, w_starts, w_wait, w_arr, w_waited, w_qarea, w_tail,
                        w_empty, w_listed, w_join, w_delete, w_probe, *rec)
        if check:
            where[:] = wh
            bad = check_state(policy, z, qw, iq, isize, where, kshift, ctr)
            if bad:
                raise RuntimeError(f"invariant violated before event {e}: {'; '.join(bad)}")
        if w >= n_windows:
            break
        if int(qw.max()) >= buf.shape[1]:
            buf, cnt, acc, start = grow_rings(qw, buf, hw, cnt, acc, start)
            if queue_dtype(buf.shape[1]) != qw.dtype:  # queues may now reach the new capacity
                qw = qw.astype(queue_dtype(buf.shape[1]))
                hw = hw.astype(qw.dtype)
        if int(isize.max()) >= (1 << kshift):
            iq, kshift = grow_iqueues(iq, isize, wh, kshift)
            wh = wh.astype(_where_dtype(n_sched, kshift))
            if listed_idle and not _codes_fit(buf.dtype, n_sched, kshift):
                buf = buf.astype(np.int64)
    where[:] = wh
    q[:] = qw
    head[:] = hw
    return buf, iq, kshift, ctr
