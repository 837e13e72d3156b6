"""Compiled kernels of the slotted engine (private; the public API is :mod:`sim.led.slotted`).

Everything is ``@njit(cache=True)`` except the thin Python drivers (:func:`slotted_kernel` and
the test helpers). Policies are integer codes; jitted functions are never passed as arguments.
The slot loop (:func:`_make_run`) is compiled once per (policy code, update code): both are free
variables of a ``functools.cache``-d closure, so numba compiles them as constants and the
policy branch is taken once, outside the hot loop. ``hetero``, ``count_own`` and ``debug`` are
run-time flags (tested once per decision or update, never per server).

State, per server ``n``: ``q[n]`` tasks (in service included) and a FIFO of arrival batches as
``(slot, count)`` pairs in a shared pool of linked entries (``pslot``, ``pcnt``, ``pnext``;
``head[n]``, ``tail[n]``; a free list), at most one entry per (server, slot). A pool rather than
one ring per server bounds memory by the entries in use, not by N times the longest queue (an
unstable policy makes a few queues very long). Per dispatcher ``m`` (LED policies): estimates
``est[m, n]`` (int32) and their sum ``esum[m]``; for ``l_jsq`` a B-ary tree (B = 16) over the
estimates whose nodes hold (minimum, multiplicity of the minimum) of their subtree
(``tree_min``/``tree_count``, one row per dispatcher, about N / 15 nodes).

Why not the bucket sort of :mod:`sim.core.buckets` for L-JSQ: it moves a server one level per
O(1) swap, which suits queues that change by one task, but estimates jump (an update sets an
estimate to the true length, a Pull report of an empty server to 0): a jump across ``k`` levels
costs ``k`` swaps, and with batches of ``A_m`` tasks per decision the jumps are of order
``A_m``. The tree costs at most O(B log_B N) per change whatever the jump (measured comparison:
docs/performance.md#led-slotted-kernel-simled_slotted_kernelpy).

Costs: the service step is O(N) per slot (every server draws its service). Decisions: ``l_jsq``
O(B log_B N) (a uniform rank among the root's minima, descended by the counts: ties uniform,
each dispatcher drawing its own); ``l_jba`` O(mu_Sigma / mu(set)) expected: a server drawn with
probability ``mu_n / mu_Sigma`` (alias table) is kept if its estimate is at most ``esum[m] //
N`` (estimates are integers, so this is "at most the running mean"), so the kept one has
probability ``mu_n / mu(set)``; after 64 rejections one exact O(N) pass draws it (the law is
unchanged; the fraction of such decisions is reported, ``jba_fallbacks``). ``l_pod`` and ``pod``
O(d) (partial Fisher-Yates); ``jsq`` O(1) from the list of the shortest queues of ``Q(t)``,
built during the previous slot's service step (tie rule ``ties``: each dispatcher draws its own
index into that list, or with ``shared`` one draw per slot picks the same server for all;
``pod`` with ``shared`` breaks its ties by a random order of the servers that the slot's draw
defines, :func:`shared_rank`, O(1) per compared server); ``jiq``, ``random``, ``weighted_random`` (alias
table) O(1). Updates: O(1) per estimate change, plus for ``l_jsq`` an incremental fix-up of the
tree (:func:`tree_fix`: O(1) unless the change involves a subtree's minimum, O(B log_B N) at
most). Pull sends up to one report per server and slot, so its per-slot cost is linear in N like
the service step.

Growth: the FIFO pool is checked at the start of a slot, after its arrivals are drawn; if it has
fewer than M free entries the loop returns before touching the state and :func:`slotted_kernel`
doubles it and resumes with the drawn arrivals (arrays are never reassigned inside the loop,
which would cost reference counting in it).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from sim.core.rng import below, next_raw, u01
from sim.core.sampling import alias_server, alias_table, sample_fy
from sim.core.windows import window_shift

__all__ = ["UPDATE_CODES", "TIE_CODES", "sample_law", "sample_many",
           "choose_led", "choose_true", "push_once", "pull_once", "slotted_kernel"]

#: kernel codes of the policies (``code`` of their records, sim.led.policies)
L_JSQ, L_JBA, L_POD, JSQ, POD, JIQ, RANDOM, WEIGHTED_RANDOM = range(8)
PUSH, PULL = 0, 1
UPDATE_CODES: dict[str, int] = {"push": PUSH, "pull": PULL}
#: tie rules of the true-state policies (``jsq``, ``pod``): each dispatcher draws its own
#: tie-break (``independent``), or one draw per slot is shared by all of them (``shared``)
INDEPENDENT, SHARED = 0, 1
TIE_CODES: dict[str, int] = {"independent": INDEPENDENT, "shared": SHARED}

#: kernel return codes
DONE, GROW, CAPPED = 0, 1, 2

#: slots of the scalar state array ``sc``
SUM_Q, SUM_Q2, Q_MAX, N_MIN, FREE_HEAD, N_FREE, MISMATCH, PENDING, FALLBACKS, SPLITS = range(10)
N_SCALARS = 10

_UMAX = np.uint64(2**64 - 1)


# --------------------------------------------------------------------------------------------
# sampling the laws (sim.led.distributions builds the tables)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def sample_law(thr, off, guide, goff, gshift, pieces, law, s0, s1, s2, s3):
    """One draw of law ``law`` by table inversion with a guide table (exact to 2**-64)."""
    lo = off[law]
    kk = off[law + 1] - lo
    g0 = goff[law]
    sh = gshift[law]
    total = np.int64(0)
    for _ in range(pieces[law]):
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        k = guide[g0 + np.int64(r >> sh)]
        while k < kk and r >= thr[lo + k]:
            k += 1
        total += k
    return total, s0, s1, s2, s3


@njit(cache=True)
def sample_many(thr, off, guide, goff, gshift, pieces, law, size, state):
    """``size`` draws of law ``law`` (test helper); ``state`` (uint64[4]) advanced in place."""
    out = np.empty(size, dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for i in range(size):
        out[i], s0, s1, s2, s3 = sample_law(thr, off, guide, goff, gshift, pieces, law,
                                            s0, s1, s2, s3)
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return out


@njit(cache=True)
def _coin(p_thr, s0, s1, s2, s3):
    """Bernoulli(p) with ``p_thr = threshold(p)``; p = 1 is exact (no draw)."""
    if p_thr == _UMAX:
        return True, s0, s1, s2, s3
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    return r < p_thr, s0, s1, s2, s3


# --------------------------------------------------------------------------------------------
# estimates and, for L-JSQ, a B-ary tree of (min, count) over each dispatcher's estimates
# --------------------------------------------------------------------------------------------
#: branching factor of the L-JSQ tree
B = 16


def tree_shape(n_servers: int):
    """Level sizes (``lsize[0] = N`` leaves, then ceil-divisions by B down to one root) and the
    offsets of the internal levels in a dispatcher's row of ``tree_min``/``tree_count``."""
    sizes = [n_servers]
    while True:
        sizes.append(-(-sizes[-1] // B))
        if sizes[-1] == 1:
            break
    offs = [0, 0]
    for k in range(1, len(sizes) - 1):
        offs.append(offs[-1] + sizes[k])
    return np.array(sizes, dtype=np.int64), np.array(offs, dtype=np.int64)


@njit(cache=True)
def tree_node(est, tree_min, tree_count, lsize, loff, m, k, node):
    """(min, count of the min) of internal node ``node`` of level ``k`` from its children."""
    lo = node * B
    hi = min(lo + B, lsize[k - 1])
    mn = np.int64(1) << 62
    ct = np.int64(0)
    if k == 1:
        for c in range(lo, hi):
            v = np.int64(est[m, c])
            if v < mn:
                mn = v
                ct = 1
            elif v == mn:
                ct += 1
    else:
        base = loff[k - 1]
        for c in range(lo, hi):
            v = np.int64(tree_min[m, base + c])
            if v < mn:
                mn = v
                ct = np.int64(tree_count[m, base + c])
            elif v == mn:
                ct += tree_count[m, base + c]
    return mn, ct


@njit(cache=True)
def tree_fix(est, tree_min, tree_count, lsize, loff, m, n, old, new):
    """Update the ancestors of leaf ``n`` after ``est[m, n]`` went from ``old`` to ``new``.

    Incremental: a child's (min, count) going from ``(om, oc)`` to ``(nm, nc)`` changes its
    parent's ``(P, C)`` to ``(nm, nc)`` if ``nm < P``; to ``(P, C - oc [if om == P] + nc)`` if
    ``nm == P``; to ``(P, C - oc)`` if ``nm > P == om`` -- and only when that count reaches 0 are
    the parent's B children rescanned; nothing changes if ``nm > P`` and ``om > P``, and the walk
    stops at the first unchanged node. So a change away from the minima costs O(1), and at most
    O(B log_B N)."""
    om = np.int64(old)
    oc = np.int64(1)
    nm = np.int64(new)
    nc = np.int64(1)
    child = n
    for k in range(1, lsize.size):
        node = child // B
        j = loff[k] + node
        p_min = np.int64(tree_min[m, j])
        p_cnt = np.int64(tree_count[m, j])
        if nm < p_min:
            q_min = nm
            q_cnt = nc
        elif nm == p_min:
            q_min = p_min
            q_cnt = p_cnt + nc - (oc if om == p_min else 0)
        elif om == p_min:
            q_min = p_min
            q_cnt = p_cnt - oc
            if q_cnt == 0:
                q_min, q_cnt = tree_node(est, tree_min, tree_count, lsize, loff, m, k, node)
        else:
            return
        if q_min == p_min and q_cnt == p_cnt:
            return
        tree_min[m, j] = q_min
        tree_count[m, j] = q_cnt
        om, oc, nm, nc = p_min, p_cnt, q_min, q_cnt
        child = node


@njit(cache=True)
def tree_build(est, lsize, loff):
    """The trees of every row of ``est`` (O(M N))."""
    n_disp = est.shape[0]
    size = max(1, loff[lsize.size - 1] + 1)
    tree_min = np.zeros((n_disp, size), dtype=np.int32)
    tree_count = np.zeros((n_disp, size), dtype=np.int32)
    for m in range(n_disp):
        for k in range(1, lsize.size):
            for node in range(lsize[k]):
                mn, ct = tree_node(est, tree_min, tree_count, lsize, loff, m, k, node)
                tree_min[m, loff[k] + node] = mn
                tree_count[m, loff[k] + node] = ct
    return tree_min, tree_count


@njit(cache=True)
def pick_ljsq(est, tree_min, tree_count, lsize, loff, m, s0, s1, s2, s3):
    """L-JSQ: a server of smallest estimate, uniform among the ties: a uniform rank ``r`` among
    the root's count of minima, descended by the children's counts. O(B log_B N)."""
    depth = lsize.size - 1
    root = loff[depth]
    mn = np.int64(tree_min[m, root])
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    rank = below(r, tree_count[m, root])
    node = 0
    for k in range(depth, 0, -1):
        lo = node * B
        hi = min(lo + B, lsize[k - 1])
        if k == 1:
            for c in range(lo, hi):
                if est[m, c] == mn:
                    if rank == 0:
                        return np.int64(c), s0, s1, s2, s3
                    rank -= 1
        else:
            base = loff[k - 1]
            for c in range(lo, hi):
                if tree_min[m, base + c] == mn:
                    cc = np.int64(tree_count[m, base + c])
                    if rank < cc:
                        node = c
                        break
                    rank -= cc
    return np.int64(-1), s0, s1, s2, s3  # not reached: the counts are consistent


@njit(cache=True)
def set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n, new, use_tree):
    """Set dispatcher ``m``'s estimate of server ``n`` to ``new`` (any jump): O(1), plus the
    tree fix-up for L-JSQ."""
    old = np.int64(est[m, n])
    est[m, n] = new
    esum[m] += new - old
    if use_tree and new != old:
        tree_fix(est, tree_min, tree_count, lsize, loff, m, n, old, new)


# --------------------------------------------------------------------------------------------
# decisions (one per dispatcher and slot with arrivals)
# --------------------------------------------------------------------------------------------
#: L-JBA: rejection tries before the exact O(N) draw
JBA_TRIES = 64


@njit(cache=True)
def pick_ljba(est, m, esum_m, mu, alias_thr, alias_idx, hetero, s0, s1, s2, s3):
    """L-JBA: a server with estimate <= the mean estimate, with probability prop. to ``mu_n``.

    Estimates are integers, so ``est <= esum / N`` iff ``est <= esum // N`` (never empty: the
    minimum is at most the mean). A server drawn with probability ``mu_n / mu_Sigma`` (alias
    table; uniform when all means are equal) is accepted if it is in the set: the accepted one
    has probability ``mu_n / sum_set mu``; expected tries ``mu_Sigma / sum_set mu``. After
    :data:`JBA_TRIES` rejections the draw is made exactly by one O(N) pass (the law is still
    exact: given that the tries failed, the fallback draws from the same law). Returns
    ``(server, 1 if the fallback was used, RNG words)``."""
    n_servers = est.shape[1]
    theta = esum_m // n_servers
    for _ in range(JBA_TRIES):
        n, s0, s1, s2, s3 = alias_server(n_servers, hetero, alias_thr, alias_idx, s0, s1, s2, s3)
        if est[m, n] <= theta:
            return np.int64(n), 0, s0, s1, s2, s3
    total = 0.0
    last = 0
    for n in range(n_servers):
        if est[m, n] <= theta:
            total += mu[n]
            last = n
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    u = u01(r) * total
    acc = 0.0
    for n in range(n_servers):
        if est[m, n] <= theta:
            acc += mu[n]
            if u < acc:
                return np.int64(n), 1, s0, s1, s2, s3
    return np.int64(last), 1, s0, s1, s2, s3


@njit(cache=True)
def pick_min_sample(vals, d, samp, s0, s1, s2, s3):
    """``d`` distinct servers (partial Fisher-Yates on ``samp``), the one of smallest
    ``vals``; the sample is in uniform random order, so the first minimum (strict ``<``) breaks
    ties uniformly."""
    s0, s1, s2, s3 = sample_fy(samp, d, s0, s1, s2, s3)
    best = np.int64(samp[0])
    bq = np.int64(vals[best])
    for j in range(1, d):
        c = np.int64(samp[j])
        v = np.int64(vals[c])
        if v < bq:
            best = c
            bq = v
    return best, s0, s1, s2, s3


#: splitmix64's constants (Steele, Lea & Flood 2014): an odd increment and the finaliser's
#: multipliers; the finaliser is a bijection of uint64
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_U27, _U30, _U31 = np.uint64(27), np.uint64(30), np.uint64(31)


@njit(cache=True)
def shared_rank(key, n):
    """Server ``n``'s rank in the random order of the servers that the slot's shared draw
    ``key`` defines: splitmix64's finaliser of ``key + (n + 1) * gamma``. The inputs of distinct
    servers differ (gamma is odd) and the finaliser is a bijection, so no two servers share a
    rank: every dispatcher that compares the same servers in a slot orders them the same way."""
    z = key + (np.uint64(n) + np.uint64(1)) * _GAMMA
    z = (z ^ (z >> _U30)) * _MIX1
    z = (z ^ (z >> _U27)) * _MIX2
    return z ^ (z >> _U31)


@njit(cache=True)
def pick_min_sample_shared(vals, d, samp, key, s0, s1, s2, s3):
    """Power-of-d with the shared tie rule: ``d`` distinct servers (partial Fisher-Yates, drawn
    by this dispatcher alone), the one of smallest ``vals``, ties to the smallest
    :func:`shared_rank` under the slot's ``key``, so dispatchers whose samples hold the same
    tied servers pick the same one."""
    s0, s1, s2, s3 = sample_fy(samp, d, s0, s1, s2, s3)
    best = np.int64(samp[0])
    bq = np.int64(vals[best])
    br = shared_rank(key, best)
    for j in range(1, d):
        c = np.int64(samp[j])
        v = np.int64(vals[c])
        if v < bq:
            best, bq, br = c, v, shared_rank(key, c)
        elif v == bq:
            rc = shared_rank(key, c)
            if rc < br:
                best, br = c, rc
    return best, s0, s1, s2, s3


@njit(cache=True)
def pick_jsq(minlist, nmin, shared, key, s0, s1, s2, s3):
    """JSQ on the true lengths: a server of the list ``minlist[:nmin]`` of the shortest queues,
    uniform; ``shared``: the one the slot's shared draw ``key`` picks (the same for every
    dispatcher: the paper's single shortest queue), else from a draw of its own."""
    if shared:
        return np.int64(minlist[below(key, nmin)]), s0, s1, s2, s3
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    return np.int64(minlist[below(r, nmin)]), s0, s1, s2, s3


@njit(cache=True)
def pick_jiq(jlist, jlen, listed, m, n_servers, s0, s1, s2, s3):
    """JIQ: a listed server of dispatcher ``m`` drawn uniformly (and dropped from the list),
    else a uniform server."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    k = jlen[m]
    if k > 0:
        i = below(r, k)
        n = np.int64(jlist[m, i])
        jlist[m, i] = jlist[m, k - 1]
        jlen[m] = k - 1
        listed[n] = 0
        return n, s0, s1, s2, s3
    return below(r, n_servers), s0, s1, s2, s3


@njit(cache=True)
def pick_weighted(alias_thr, alias_idx, s0, s1, s2, s3):
    """A server with probability ``mu_n / mu_Sigma`` (Vose's alias table)."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    i = below(r, alias_thr.size)
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    if r < alias_thr[i]:
        return np.int64(i), s0, s1, s2, s3
    return np.int64(alias_idx[i]), s0, s1, s2, s3


# --------------------------------------------------------------------------------------------
# updates (end of slot)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def push_update(est, tree_min, tree_count, lsize, loff, esum, m, q, d_u, samp, use_tree, s0, s1, s2, s3):
    """Push: dispatcher ``m`` samples ``d_u`` distinct servers and sets their estimates to the
    true lengths ``q`` (the caller has drawn the ``p_hat`` coin)."""
    s0, s1, s2, s3 = sample_fy(samp, d_u, s0, s1, s2, s3)
    for j in range(d_u):
        n = np.int64(samp[j])
        set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n, q[n], use_tree)
    return s0, s1, s2, s3


@njit(cache=True)
def pull_report(est, tree_min, tree_count, lsize, loff, esum, n, qn, p_thr, use_tree, s0, s1, s2, s3):
    """Pull: server ``n``, which completed tasks in this slot and now holds ``qn``, picks a
    dispatcher uniformly; it sends ``(n, 0)`` if empty, else ``(n, qn)`` with probability
    ``p_hat``. Returns (the dispatcher that got a report or -1, RNG words)."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    m = below(r, est.shape[0])
    if qn == 0:
        set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n, 0, use_tree)
        return m, s0, s1, s2, s3
    hit, s0, s1, s2, s3 = _coin(p_thr, s0, s1, s2, s3)
    if hit:
        set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n, qn, use_tree)
        return m, s0, s1, s2, s3
    return np.int64(-1), s0, s1, s2, s3


# --------------------------------------------------------------------------------------------
# FIFO of (slot, count) batches in a pool of linked entries
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def fifo_push(n, t, a, head, tail, pslot, pcnt, pnext, sc):
    """``a`` tasks arrive at server ``n`` in slot ``t`` (merged with a batch of the same slot)."""
    tl = tail[n]
    if tl >= 0 and pslot[tl] == t:
        pcnt[tl] += a
        return
    idx = sc[FREE_HEAD]
    sc[FREE_HEAD] = pnext[idx]
    sc[N_FREE] -= 1
    pslot[idx] = t
    pcnt[idx] = a
    pnext[idx] = -1
    if tl >= 0:
        pnext[tl] = idx
    else:
        head[n] = idx
    tail[n] = idx


@njit(cache=True)
def fifo_pop(n, k, t, shift, head, tail, pslot, pcnt, pnext, sc, w_jobs, w_resp):
    """Server ``n`` completes its ``k`` oldest tasks in slot ``t``: each response
    ``t - arrival + 1`` is credited to the window of its arrival slot."""
    while k > 0:
        h = head[n]
        c = pcnt[h]
        a = pslot[h]
        take = c if c < k else k
        wa = a >> shift
        w_jobs[wa] += take
        w_resp[wa] += take * (t - a + 1)
        k -= take
        if take == c:
            nx = pnext[h]
            pnext[h] = sc[FREE_HEAD]
            sc[FREE_HEAD] = h
            sc[N_FREE] += 1
            head[n] = nx
            if nx < 0:
                tail[n] = -1
        else:
            pcnt[h] = c - take


@njit(cache=True)
def drain(t_end, shift, thr, off, guide, goff, gshift, pieces, srv_law, q, head, tail, pslot,
          pcnt, pnext, sc, state, w_jobs, w_resp):
    """Close the run without censoring: the tasks present at the end keep being served (no new
    arrivals, which cannot affect them under FIFO) until each completes, so every task that
    arrived in the run has its exact response. Servers are independent, so each is drained on
    its own clock from slot ``t_end``."""
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for n in range(q.size):
        x = q[n]
        t = t_end
        while x > 0:
            sv, s0, s1, s2, s3 = sample_law(thr, off, guide, goff, gshift, pieces, srv_law[n],
                                            s0, s1, s2, s3)
            served = sv if sv < x else x
            if served > 0:
                fifo_pop(n, served, t, shift, head, tail, pslot, pcnt, pnext, sc, w_jobs, w_resp)
                x -= served
            t += 1
        q[n] = 0
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3


# --------------------------------------------------------------------------------------------
# the slot loop
# --------------------------------------------------------------------------------------------
@functools.cache
def _make_run(policy: int, update: int):
    """The slot loop compiled for one policy code and (LED policies) one update code."""
    policy, update = int(policy), int(update)
    led = policy in (L_JSQ, L_JBA, L_POD)
    use_tree = policy == L_JSQ
    push = led and update == PUSH
    pull = led and update == PULL
    track_min = policy == JSQ
    track_done = pull or policy == JIQ
    true_state = policy == JSQ or policy == POD

    @njit(cache=True)
    def run(t_first, d, d_u, p_thr, count_own, hetero, debug, shared, q_cap, max_level,
            thr, off, guide, goff, gshift, pieces, arr_law, srv_law,
            q, add, arr, target, done, minlist, est, tree_min, tree_count, lsize, loff, esum, samp,
            jlist, jlen, listed, alias_thr, alias_idx, mu,
            head, tail, pslot, pcnt, pnext, sc, bounds, state,
            w_q, w_imb, w_u, w_u2, w_qu, w_arr, w_dec, w_msg, w_idle, w_busy,
            w_jobs, w_resp, w_hist):
        """Run slots ``t_first, ...`` until the end, a growth stop (before any state change of
        the slot; its arrivals are kept in ``arr`` with ``sc[PENDING] = 1``) or ``sum Q >
        q_cap``. Returns ``(next slot, code)``."""
        n_servers = q.size
        n_disp = arr.size
        t_end = bounds[-1]
        n_windows = bounds.size - 1
        shift = window_shift(bounds)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        sum_q = sc[SUM_Q]
        sum_q2 = sc[SUM_Q2]
        qmax = sc[Q_MAX]
        nmin = sc[N_MIN]
        pending = sc[PENDING]
        mismatches = sc[MISMATCH]
        fallbacks = sc[FALLBACKS]
        splits = sc[SPLITS]
        t = t_first
        code = DONE
        while t < t_end:
            # ---- 1. arrivals of the slot (drawn once, even across a growth stop)
            atot = np.int64(0)
            if pending == 0:
                for m in range(n_disp):
                    a, s0, s1, s2, s3 = sample_law(thr, off, guide, goff, gshift, pieces,
                                                   arr_law[m], s0, s1, s2, s3)
                    arr[m] = a
                    atot += a
                pending = 1
            else:
                for m in range(n_disp):
                    atot += arr[m]
            if sc[N_FREE] < n_disp:
                code = GROW
                break
            pending = 0
            w = t >> shift
            # ---- observations at the start of the slot: Q(t)
            w_q[w] += sum_q
            var = float(sum_q2) - float(sum_q) * (float(sum_q) / n_servers)
            if var > 0.0:
                w_imb[w] += math.sqrt(var)
            if debug and led:
                bad = False
                for m in range(n_disp):
                    for n in range(n_servers):
                        if est[m, n] != q[n]:
                            bad = True
                if bad:
                    mismatches += 1
            # ---- 2. dispatching: every decision on the information of the slot's start
            msg = np.int64(0)
            dec = np.int64(0)
            # the shared tie rule: one draw per slot with arrivals, read by every dispatcher
            # (the independent rule draws nothing here, so its random stream is unchanged)
            key = np.uint64(0)
            if true_state and shared and atot > 0:
                key, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            for m in range(n_disp):
                if arr[m] == 0:
                    continue
                dec += 1
                if policy == L_JSQ:
                    n, s0, s1, s2, s3 = pick_ljsq(est, tree_min, tree_count, lsize, loff, m,
                                                  s0, s1, s2, s3)
                elif policy == L_JBA:
                    n, fb, s0, s1, s2, s3 = pick_ljba(est, m, esum[m], mu, alias_thr, alias_idx,
                                                      hetero, s0, s1, s2, s3)
                    fallbacks += fb
                elif policy == L_POD:
                    n, s0, s1, s2, s3 = pick_min_sample(est[m], d, samp, s0, s1, s2, s3)
                elif policy == JSQ:
                    n, s0, s1, s2, s3 = pick_jsq(minlist, nmin, shared, key, s0, s1, s2, s3)
                    msg += 2 * n_servers
                elif policy == POD:
                    if shared:
                        n, s0, s1, s2, s3 = pick_min_sample_shared(q, d, samp, key,
                                                                   s0, s1, s2, s3)
                    else:
                        n, s0, s1, s2, s3 = pick_min_sample(q, d, samp, s0, s1, s2, s3)
                    msg += 2 * d
                elif policy == JIQ:
                    n, s0, s1, s2, s3 = pick_jiq(jlist, jlen, listed, m, n_servers,
                                                 s0, s1, s2, s3)
                elif policy == RANDOM:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    n = below(r, n_servers)
                else:
                    n, s0, s1, s2, s3 = pick_weighted(alias_thr, alias_idx, s0, s1, s2, s3)
                target[m] = n
            if debug and true_state and dec > 1:
                # slots in which the dispatchers with arrivals did not all pick one server
                first = np.int64(-1)
                for m in range(n_disp):
                    if arr[m] > 0:
                        if first < 0:
                            first = target[m]
                        elif target[m] != first:
                            splits += 1
                            break
            for m in range(n_disp):
                a = arr[m]
                if a == 0:
                    continue
                n = target[m]
                add[n] += a
                fifo_push(n, t, a, head, tail, pslot, pcnt, pnext, sc)
                if led and count_own:
                    set_estimate(est, tree_min, tree_count, lsize, loff, esum, m, n,
                                 np.int64(est[m, n]) + a, use_tree)
            # ---- 3. service; Q(t+1) and its statistics (credited to the window of t+1)
            wn = (t + 1) >> shift if t + 1 < t_end else n_windows
            u_tot = np.int64(0)
            s_new = np.int64(0)
            s2_new = np.int64(0)
            qmx = np.int64(0)
            nd = 0
            n_idle = np.int64(0)
            n_busy = np.int64(0)
            mn = np.int64(1) << 62
            k_min = 0
            for n in range(n_servers):
                x = q[n] + add[n]
                add[n] = 0
                sv, s0, s1, s2, s3 = sample_law(thr, off, guide, goff, gshift, pieces,
                                                srv_law[n], s0, s1, s2, s3)
                if sv >= x:
                    served = x
                    u_tot += sv - x
                    qn = np.int64(0)
                else:
                    served = sv
                    qn = x - sv
                if served > 0:
                    fifo_pop(n, served, t, shift, head, tail, pslot, pcnt, pnext, sc,
                             w_jobs, w_resp)
                    if track_done:
                        done[nd] = n
                        nd += 1
                    if qn == 0:
                        n_idle += 1
                    else:
                        n_busy += 1
                q[n] = qn
                s_new += qn
                s2_new += qn * qn
                if qn > qmx:
                    qmx = qn
                w_hist[wn, qn if qn < max_level else max_level] += 1
                if track_min:
                    if qn < mn:
                        mn = qn
                        k_min = 0
                    if qn == mn:
                        minlist[k_min] = n
                        k_min += 1
            # ---- 4. updates at the end of the slot (true lengths Q(t+1))
            if push:
                for m in range(n_disp):
                    if arr[m] > 0:
                        hit, s0, s1, s2, s3 = _coin(p_thr, s0, s1, s2, s3)
                        if hit:
                            s0, s1, s2, s3 = push_update(est, tree_min, tree_count, lsize, loff, esum, m,
                                                         q, d_u, samp, use_tree, s0, s1, s2, s3)
                            msg += 2 * d_u
            if pull:
                for i in range(nd):
                    n = done[i]
                    got, s0, s1, s2, s3 = pull_report(est, tree_min, tree_count, lsize, loff, esum, n,
                                                      q[n], p_thr, use_tree, s0, s1, s2, s3)
                    if got >= 0:
                        msg += 1
            if policy == JIQ:
                for i in range(nd):
                    n = done[i]
                    if q[n] == 0 and listed[n] == 0:
                        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                        m = below(r, n_disp)
                        jlist[m, jlen[m]] = n
                        jlen[m] += 1
                        listed[n] = 1
                        msg += 1
            # ---- slot statistics
            w_u[w] += u_tot
            w_u2[w] += float(u_tot) * float(u_tot)
            w_qu[w] += float(s_new) * float(u_tot)
            w_arr[w] += atot
            w_dec[w] += dec
            w_msg[w] += msg
            w_idle[w] += n_idle
            w_busy[w] += n_busy
            sum_q = s_new
            sum_q2 = s2_new
            qmax = qmx
            if track_min:
                nmin = k_min
            t += 1
            if sum_q > q_cap:
                code = CAPPED
                break
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        sc[SUM_Q] = sum_q
        sc[SUM_Q2] = sum_q2
        sc[Q_MAX] = qmax
        sc[N_MIN] = nmin
        sc[PENDING] = pending
        sc[MISMATCH] = mismatches
        sc[FALLBACKS] = fallbacks
        sc[SPLITS] = splits
        return t, code

    return run


# --------------------------------------------------------------------------------------------
# test helpers: one decision / one update on hand-built states
# --------------------------------------------------------------------------------------------
def _tree_of(est):
    lsize, loff = tree_shape(est.shape[1])
    tree_min, tree_count = tree_build(est, lsize, loff)
    return tree_min, tree_count, lsize, loff


def choose_led(policy, est_row, mu, d, state):
    """The server one LED decision of ``policy`` picks from the estimates ``est_row`` (``mu``:
    the service means, for L-JBA's weights). Same pick functions as the kernel, on structures
    built from ``est_row``; ``state`` (uint64[4]) advanced in place. Test helper."""
    est = np.asarray(est_row, dtype=np.int32).reshape(1, -1)
    n_servers = est.shape[1]
    mu = np.ones(n_servers) if mu is None else np.asarray(mu, dtype=np.float64)
    hetero = bool(np.any(mu != mu[0]))
    alias_thr, alias_idx = (alias_table(mu / mu.sum()) if hetero else
                            (np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.int64)))
    words = tuple(np.uint64(x) for x in state)
    if policy == L_JSQ:
        tree_min, tree_count, lsize, loff = _tree_of(est)
        n, *words = pick_ljsq(est, tree_min, tree_count, lsize, loff, 0, *words)
    elif policy == L_JBA:
        n, _, *words = pick_ljba(est, 0, np.int64(est.sum()), mu, alias_thr, alias_idx, hetero,
                                 *words)
    else:
        samp = np.arange(n_servers, dtype=np.int64)
        n, *words = pick_min_sample(est[0], d, samp, *words)
    state[:] = np.array([np.uint64(x) for x in words], dtype=np.uint64)
    return int(n)


def choose_true(policy, q, d, ties, n_disp, state):
    """The servers that ``n_disp`` dispatchers, all with arrivals, pick in one slot under ``jsq``
    or ``pod`` (codes) with tie rule ``ties`` (:data:`TIE_CODES`) from the true lengths ``q``:
    the kernel's pick functions and order (the shared draw first, then the dispatchers in
    turn); ``state`` (uint64[4]) advanced in place. Test helper."""
    q = np.asarray(q, dtype=np.int64)
    minlist = np.flatnonzero(q == q.min()).astype(np.int64)
    samp = np.arange(q.size, dtype=np.int64)
    shared = int(ties) == SHARED
    words = tuple(np.uint64(x) for x in state)
    key = np.uint64(0)
    if shared:
        key, *words = next_raw(*words)
        words = tuple(np.uint64(x) for x in words)  # numba returns Python ints
    out = []
    for _ in range(n_disp):
        if policy == JSQ:
            n, *words = pick_jsq(minlist, np.int64(minlist.size), shared, np.uint64(key), *words)
        elif shared:
            n, *words = pick_min_sample_shared(q, np.int64(d), samp, np.uint64(key), *words)
        else:
            n, *words = pick_min_sample(q, np.int64(d), samp, *words)
        words = tuple(np.uint64(x) for x in words)
        out.append(int(n))
    state[:] = np.array([np.uint64(x) for x in words], dtype=np.uint64)
    return out


def push_once(est, q, m, d_u, state):
    """One Push update of dispatcher ``m`` on the hand-built estimates ``est`` (int32 [M, N],
    changed in place) against true lengths ``q`` (int64). Returns the L-JSQ trees and ``esum``
    as maintained incrementally, for comparison with a fresh build. Test helper."""
    tree_min, tree_count, lsize, loff = _tree_of(est)
    esum = est.sum(axis=1).astype(np.int64)
    samp = np.arange(est.shape[1], dtype=np.int64)
    words = tuple(np.uint64(x) for x in state)
    words = push_update(est, tree_min, tree_count, lsize, loff, esum, m, q, d_u, samp, True, *words)
    state[:] = np.array([np.uint64(x) for x in words], dtype=np.uint64)
    return tree_min, tree_count, esum


def pull_once(est, q_new, served, p_thr, state):
    """The Pull reports at the end of one hand-built slot: servers with ``served[n] > 0``
    report ``q_new[n]`` by the kernel's rule; ``est`` (int32 [M, N]) is changed in place.
    Returns ``(to, tree_min, tree_count, esum)``, ``to[n]`` the dispatcher that got server ``n``'s report
    (-1: none). Test helper."""
    tree_min, tree_count, lsize, loff = _tree_of(est)
    esum = est.sum(axis=1).astype(np.int64)
    to = np.full(q_new.size, -1, dtype=np.int64)
    words = tuple(np.uint64(x) for x in state)
    for n in range(q_new.size):
        if served[n] > 0:
            got, *words = pull_report(est, tree_min, tree_count, lsize, loff, esum, n,
                                      np.int64(q_new[n]), p_thr, True, *words)
            words = tuple(np.uint64(x) for x in words)  # numba returns Python ints
            to[n] = got
    state[:] = np.array([np.uint64(x) for x in words], dtype=np.uint64)
    return to, tree_min, tree_count, esum


# --------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------
def _grow_pool(pslot, pcnt, pnext, sc):
    cap = pslot.size
    new = 2 * cap
    ps = np.zeros(new, dtype=np.int64)
    pc = np.zeros(new, dtype=np.int64)
    pn = np.empty(new, dtype=np.int64)
    ps[:cap] = pslot
    pc[:cap] = pcnt
    pn[:cap] = pnext
    pn[cap:new - 1] = np.arange(cap + 1, new)
    pn[new - 1] = sc[FREE_HEAD]
    sc[FREE_HEAD] = cap
    sc[N_FREE] += new - cap
    return ps, pc, pn


def slotted_kernel(policy, update, *, d, d_u, p_thr, count_own, hetero, debug, q_cap, max_level,
                   tables, arr_law, srv_law, alias_thr, alias_idx, mu, bounds, state, out,
                   ties=INDEPENDENT):
    """Run ``bounds[-1]`` slots from empty queues and fill the per-window accumulators ``out``
    (a dict of zero-initialised arrays: ``w_q, w_imb, w_u, w_u2, w_qu, w_arr, w_dec, w_msg,
    w_idle, w_busy, w_jobs, w_resp`` of length W and ``w_hist`` [W + 1, max_level + 1], the
    last row for the state after the last slot). Plain Python: picks the compiled loop
    (:func:`_make_run`), grows arrays between spans, drains the queues at the end.

    ``ties`` (:data:`TIE_CODES`, ``jsq`` and ``pod`` only): ``SHARED`` breaks ties by one draw
    per slot shared by every dispatcher, ``INDEPENDENT`` (default) by each dispatcher's own.

    Returns ``(slots run, capped, mismatches, fallbacks, splits)``: ``capped`` when ``sum Q``
    exceeded ``q_cap`` (the run stops there, not drained); ``mismatches`` the slots (of a
    ``debug`` run of an LED policy) at whose start some estimate differed from its true queue;
    ``fallbacks`` the L-JBA decisions that needed the exact O(N) draw; ``splits`` the slots (of a
    ``debug`` run of ``jsq`` or ``pod``) in which the dispatchers with arrivals did not all pick
    the same server.
    """
    n_servers = srv_law.size
    n_disp = arr_law.size
    led = policy in (L_JSQ, L_JBA, L_POD)
    use_tree = policy == L_JSQ
    i32 = np.int32
    q = np.zeros(n_servers, dtype=np.int64)
    add = np.zeros(n_servers, dtype=np.int64)
    arr = np.zeros(n_disp, dtype=np.int64)
    target = np.zeros(n_disp, dtype=np.int64)
    done = np.zeros(n_servers, dtype=np.int64)
    minlist = np.arange(n_servers, dtype=np.int64)  # Q(0) = 0: every server is shortest
    if led:
        est = np.zeros((n_disp, n_servers), dtype=i32)
    else:
        est = np.zeros((1, 1), dtype=i32)
    if use_tree:  # all estimates 0: every node's minimum is 0, counted over its leaves
        lsize, loff = tree_shape(n_servers)
        tree_min, tree_count = tree_build(est, lsize, loff)
    else:
        lsize, loff = tree_shape(1)
        tree_min = np.zeros((1, 1), dtype=i32)
        tree_count = np.zeros((1, 1), dtype=i32)
    esum = np.zeros(n_disp, dtype=np.int64)
    samp = np.arange(n_servers, dtype=np.int64)
    if policy == JIQ:
        # every server starts idle and listed at a uniformly chosen dispatcher
        jlist = np.zeros((n_disp, n_servers), dtype=i32)
        jlen = np.zeros(n_disp, dtype=np.int64)
        listed = np.ones(n_servers, dtype=np.int8)
        owner = _uniform_owners(n_servers, n_disp, state)
        for n, m in enumerate(owner):
            jlist[m, jlen[m]] = n
            jlen[m] += 1
    else:
        jlist = np.zeros((1, 1), dtype=i32)
        jlen = np.zeros(1, dtype=np.int64)
        listed = np.zeros(1, dtype=np.int8)
    head = np.full(n_servers, -1, dtype=np.int64)
    tail = np.full(n_servers, -1, dtype=np.int64)
    cap = max(1024, 4 * n_disp)
    pslot = np.zeros(cap, dtype=np.int64)
    pcnt = np.zeros(cap, dtype=np.int64)
    pnext = np.append(np.arange(1, cap, dtype=np.int64), -1)
    sc = np.zeros(N_SCALARS, dtype=np.int64)
    sc[N_MIN] = n_servers
    sc[FREE_HEAD] = 0
    sc[N_FREE] = cap
    out["w_hist"][0, 0] += n_servers  # Q(0) = 0
    run = _make_run(int(policy), int(update) if led else 0)
    tb = tables
    t, code = 0, DONE
    while True:
        t, code = run(t, int(d), int(d_u), p_thr, bool(count_own), bool(hetero), bool(debug),
                      int(ties) == SHARED, int(q_cap), int(max_level), tb.thr, tb.off, tb.guide, tb.goff, tb.gshift,
                      tb.pieces, arr_law, srv_law, q, add, arr, target, done, minlist,
                      est, tree_min, tree_count, lsize, loff, esum, samp, jlist, jlen, listed,
                      alias_thr, alias_idx, mu, head, tail, pslot, pcnt, pnext, sc,
                      bounds, state, out["w_q"], out["w_imb"], out["w_u"], out["w_u2"],
                      out["w_qu"], out["w_arr"], out["w_dec"], out["w_msg"], out["w_idle"],
                      out["w_busy"], out["w_jobs"], out["w_resp"], out["w_hist"])
        if code != GROW:
            break
        pslot, pcnt, pnext = _grow_pool(pslot, pcnt, pnext, sc)
    capped = code == CAPPED
    if not capped:
        drain(t, window_shift(bounds), tb.thr, tb.off, tb.guide, tb.goff, tb.gshift, tb.pieces,
              srv_law, q, head, tail, pslot, pcnt, pnext, sc, state, out["w_jobs"],
              out["w_resp"])
    return int(t), bool(capped), int(sc[MISMATCH]), int(sc[FALLBACKS]), int(sc[SPLITS])


@njit(cache=True)
def _uniform_owners_kernel(n_servers, n_disp, state):
    out = np.empty(n_servers, dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for n in range(n_servers):
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        out[n] = below(r, n_disp)
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return out


def _uniform_owners(n_servers, n_disp, state):
    return _uniform_owners_kernel(n_servers, n_disp, state)
