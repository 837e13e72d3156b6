"""Sampling without replacement: from arrays of servers and from counts of servers per level,
and Vose's alias table for unequal probabilities.

- :func:`sample_fy`: partial Fisher-Yates on a persistent permutation, O(m).
- :func:`sample_rej`: i.i.d. draws with rejection of repeats (a stamp array), expected O(m) for
  2m <= N, with prefetching.
- :func:`draw_levels`: ``n`` distinct servers drawn uniformly from the counts ``x[l]`` of servers
  at level ``l``: the multivariate hypergeometric of the occupancy engines, O(levels) per draw.
- :func:`draw_levels_hg`: the same law as level counts, one hypergeometric draw per level
  (:func:`hypergeometric`), O(levels * sd) whatever ``n``: for large samples.
- :func:`alias_table`: O(1) draws from a discrete law (per-server service rates).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from sim.core.rng import below, below64, next_raw, threshold, u01

__all__ = ["probes_in", "prefetch", "sample_fy", "sample_rej", "draw_levels", "draw_levels_hg", "hypergeometric",
           "log_falling", "log_none_marked", "min_level", "sample_min_levels", "sample_levels", "sample_levels_hg", "hypergeometric_draws",
           "lowest_occupied", "level_totals", "alias_table", "HG_MIN_SAMPLE"]

#: batch samples of at least this many servers are drawn by :func:`draw_levels_hg` in the
#: occupancy engine (one hypergeometric per level, about 0.4 us a sample at N = 10**6) instead of
#: server by server (:func:`draw_levels`, about 3 ns a server there): the crossover is near 150
HG_MIN_SAMPLE = 256

@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to load the cache line of ``arr[idx]`` (any 1-D array, strided views
    included): ``llvm.prefetch`` (read, high locality). No effect on results."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True)
def sample_fy(samp, m, s0, s1, s2, s3):
    """Partial Fisher-Yates on the persistent permutation ``samp`` (size N). O(m)."""
    n_servers = samp.size
    for j in range(m):
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        i = j + below(r, n_servers - j)
        c = samp[i]
        samp[i] = samp[j]
        samp[j] = c
    return s0, s1, s2, s3


@njit(cache=True, inline="always")
def alias_server(n_servers, hetero, alias_thr, alias_idx, s0, s1, s2, s3):
    """A server with probability ``mu_n / mu_Sigma``: a uniform one, kept iff the next raw draw
    is below ``alias_thr[n]`` and else passed to ``alias_idx[n]`` (alias table) when
    ``hetero``; uniform (one draw) when not. Returns ``(server, s0..s3)``."""
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    n = below(r, n_servers)
    if hetero:
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        if r >= alias_thr[n]:
            n = alias_idx[n]
    return n, s0, s1, s2, s3


@njit(cache=True, inline="always")
def first_min(vals, samp, m):
    """The first ``i`` in ``samp[:m]`` with the smallest ``vals[i]``: uniform among the tied
    smallest when the sample is in uniformly random order."""
    best = samp[0]
    bv = vals[best]
    for j in range(1, m):
        c = samp[j]
        if vals[c] < bv:
            best = c
            bv = vals[c]
    return best


@njit(cache=True, inline="always")
def shortest_fy(vals, d, samp, s0, s1, s2, s3):
    """Index of the smallest of ``d`` distinct uniformly sampled entries of ``vals``, ties
    uniform, by partial Fisher-Yates on ``samp`` (:func:`sample_fy`; a permutation of the
    indices of ``vals``, left permuted between calls, which does not change the law). O(d).
    Returns ``(index, s0..s3)``."""
    s0, s1, s2, s3 = sample_fy(samp, d, s0, s1, s2, s3)
    return first_min(vals, samp, d), s0, s1, s2, s3


@njit(cache=True)
def sample_rej(samp, m, mark, stamp, s0, s1, s2, s3):
    """Uniform draws with rejection of repeats into ``samp[:m]``; a server is taken iff
    ``mark[server] != stamp`` (a fresh stamp per sample, so ``mark`` never needs clearing).
    Expected O(m) for 2m <= N.

    Two passes, so that the cache misses overlap: first ``m`` i.i.d. candidates are drawn and
    their records prefetched, then, in order, a candidate equal to an earlier accepted server
    is replaced by fresh draws until new. Position ``j`` thus takes the first new server of the
    i.i.d. sequence (candidate j, fresh draws...), which is the law of sequential rejection.
    Measured at N = 10**6, m = 382 (sampling and batch-filling plan): 60 -> 41 ns per server."""
    n_servers = mark.size
    for j in range(m):
        r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
        c = below(r, n_servers)
        samp[j] = c
        prefetch(mark, c)
    for j in range(m):
        c = samp[j]
        while mark[c] == stamp:
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            c = below(r, n_servers)
        mark[c] = stamp
        samp[j] = c
    return s0, s1, s2, s3


@njit(cache=True)
def lowest_occupied(x):
    """The lowest index ``l`` with ``x[l] > 0`` of counts per level (some count must be > 0)."""
    lvl = 0
    while x[lvl] == 0:
        lvl += 1
    return lvl


@njit(cache=True, inline="always")
def level_totals(x):
    """Of counts per level ``x[l]`` (servers with ``l`` tasks): the total ``sum l x[l]`` (tasks)
    and the highest level with a positive count (0 if none)."""
    total = np.int64(0)
    top = 0
    for lvl in range(x.size):
        total += lvl * x[lvl]
        if x[lvl] > 0:
            top = lvl
    return total, top


@njit(cache=True)
def draw_levels(x, n_servers, n, low, stop, sample_hist, s0, s1, s2, s3):
    """Draw up to ``n`` distinct servers uniformly without replacement and count their levels in
    ``sample_hist`` (zero on entry). Stops early once ``sample_hist[low] == stop`` (``low`` = the lowest occupied
    level; pass -1 never to stop). Returns ``(highest level drawn, s0, s1, s2, s3)``."""
    top = 0
    for j in range(n):
        u, s0, s1, s2, s3 = below64(n_servers - j, s0, s1, s2, s3)
        lvl = 0
        while True:
            a = x[lvl] - sample_hist[lvl]
            if u < a:
                break
            u -= a
            lvl += 1
        sample_hist[lvl] += 1
        if lvl > top:
            top = lvl
        if lvl == low and sample_hist[lvl] >= stop:
            break
    return top, s0, s1, s2, s3


@njit(cache=True)
def min_of_sample(c, n, d, sample_hist, first, s0, s1, s2, s3):
    """Lowest index among ``d`` distinct items drawn uniformly without replacement from counts
    ``c`` (``n = sum(c)``, ``c[i] = 0`` below ``first``, the lowest occupied index); ``sample_hist`` is
    zero scratch of ``c``'s size (left zero). The draw works on the views from ``first`` on, so
    its level scans do not walk the empty sizes below (O(N) for one I-queue listing N(1-lam))."""
    cv = c[first:]
    hv = sample_hist[first:]
    top, s0, s1, s2, s3 = draw_levels(cv, n, d, 0, 1, hv, s0, s1, s2, s3)
    i = 0
    while hv[i] == 0:
        i += 1
    for k in range(top + 1):
        hv[k] = 0
    return first + i, s0, s1, s2, s3


_STIRLING_MIN = 20.0


@njit(cache=True)
def _stirling_rest(x):
    """``lgamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2)`` for ``x >= 20`` (error < 1e-14)."""
    r = 1.0 / x
    r2 = r * r
    return r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 / 1680.0)))


@njit(cache=True)
def log_falling(a, b):
    """``log(a! / (a - b)!)`` for integers ``0 <= b <= a``, accurate to about 1e-15 relative to
    the result even at ``a = 10**12``: ``lgamma(a + 1) - lgamma(a - b + 1)`` would lose to
    cancellation about ``eps * a log a`` (2e-6 at ``a = 10**9``), so for ``a - b + 1 >= 20`` the
    difference of Stirling's series is taken in the form ``b log x1 - (x2 - 1/2) log1p(-b / x1)
    - b + rest(x1) - rest(x2)`` with ``x1 = a + 1``, ``x2 = a - b + 1``."""
    if b == 0:
        return 0.0
    x1 = a + 1.0
    x2 = x1 - b
    if x2 < _STIRLING_MIN:
        return math.lgamma(x1) - math.lgamma(x2)
    return (b * math.log(x1) - (x2 - 0.5) * math.log1p(-b / x1) - b
            + _stirling_rest(x1) - _stirling_rest(x2))


@njit(cache=True)
def _log_ratio(a, b):
    """``log(a / b)`` for integers ``0 < a <= b`` held exactly as floats: ``log1p((a - b) / b)``
    near 1 (no rounding of ``a / b`` near 1 to amplify), ``log(a / b)`` below 1/2."""
    if 2.0 * a > b:
        return math.log1p((a - b) / b)
    return math.log(a / b)


@njit(cache=True)
def log_none_marked(total, marked, n):
    """``log P(no marked item among n drawn without replacement from total, marked of them
    marked) = log(C(total - marked, n) / C(total, n))`` for integers ``0 <= marked <= total``,
    ``0 <= n <= total`` (``-inf`` when ``total - marked < n``). This is ``log_falling(total -
    marked, n) - log_falling(total, n)``, but that difference of two numbers of size ``n log
    total`` (2e6 at total = 10**9, n = 10**5) would lose its small value (about ``-n marked /
    total``) to rounding; with ``x1 = total + 1``, ``x2 = total - n + 1``, ``x2' = x2 -
    marked`` and ``x1' = x1 - marked`` the difference of Stirling's series is taken as

        n log(x1' / x1) + (x2 - 1/2) log1p(n marked / (x1 x2')) + marked log(x2' / x1')
        + rest(x1') - rest(x2') - rest(x1) + rest(x2),

    whose terms are of the size of the result (each log of a ratio near 1 taken as ``log1p`` of
    the exact difference over the denominator): relative error below 1e-14 against mpmath at
    total up to 10**12 and n up to 10**6 (tests/dispatch/test_occupancy_fast_paths.py); 4e-13
    measured where nearly every item is marked (total - marked - n = 25 at total = 10**9,
    n = 10**5), where the probability is below e**-10**6. Below ``x2' = 20`` the two falling
    factorials are subtracted directly (they are small there, or the result is far below any
    probability that matters)."""
    if marked == 0 or n == 0:
        return 0.0
    if total - marked < n:
        return -math.inf
    x1 = total + 1.0
    x2 = x1 - n
    x2p = x2 - marked
    if x2p < _STIRLING_MIN:
        return log_falling(total - marked, n) - log_falling(total, n)
    x1p = x1 - marked
    return (n * _log_ratio(x1p, x1) + (x2 - 0.5) * math.log1p((n * (marked / x1)) / x2p)
            + marked * _log_ratio(x2p, x1p)
            + _stirling_rest(x1p) - _stirling_rest(x2p) - _stirling_rest(x1) + _stirling_rest(x2))


#: ``-log`` of the least uniform :func:`min_level` can draw (``2**-54``) is 37.43: below
#: ``P(min > low) <= exp(-MIN_LEVEL_SURE)`` no draw could choose a higher level
MIN_LEVEL_SURE = 38.0
_LOG2E = 1.4426950408889634


@njit(cache=True)
def min_level(x, n_servers, n, low, s0, s1, s2, s3):
    """The lowest level among ``n`` servers drawn uniformly without replacement from the
    counts ``x`` (``low`` = the lowest occupied level), by inversion of its law

        P(min >= l) = C(N - n_<l, n) / C(N, n),  n_<l = servers below level l,

    with one uniform ``U`` in (0, 1) (53 bits, ``(r + 1/2) 2**-53``): the minimum is the
    highest ``l`` with ``U <= P(min >= l)``, found by a scan up from ``low`` with
    :func:`log_none_marked` (``log U`` against the log of the ratio of binomials, accurate at
    N = 10**9 and n = 10**5). O(levels) instead of up to ``n`` draws (:func:`draw_levels`
    stops at the first draw at ``low``: about ``N / x[low]`` draws).

    Shortcuts with the same outcome as the scan for the same ``U``: ``P(min > low) <=
    (1 - x[low] / N)**n <= exp(-beta)``, ``beta = n x[low] / N``; if ``beta >
    MIN_LEVEL_SURE`` every ``U`` exceeds it (``low``, no random number used); else with ``m =
    floor(beta log2 e)`` a ``U > 2**-m`` exceeds it (``low`` after one comparison). The law
    is exact up to the 2**-53 granularity of ``U``. Returns ``(level, s0, s1, s2, s3)``."""
    beta = x[low] * (n / n_servers) * (1.0 - 1e-12)
    if beta > MIN_LEVEL_SURE:
        return low, s0, s1, s2, s3
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    u = (np.int64(r >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)
    m = int(beta * _LOG2E)
    if m > 0 and u > 1.0 / (np.int64(1) << m):
        return low, s0, s1, s2, s3
    logu = math.log(u)
    lvl = low
    below = x[low]
    while logu <= log_none_marked(n_servers, below, n):  # U <= P(min >= lvl + 1)
        lvl += 1
        below += x[lvl]
    return lvl, s0, s1, s2, s3


@njit(cache=True)
def sample_min_levels(x, n, size, state):
    """``size`` draws of :func:`min_level` on counts ``x`` (a test helper); ``state`` advanced
    in place."""
    out = np.empty(size, dtype=np.int64)
    n_servers = x.sum()
    low = lowest_occupied(x)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for i in range(size):
        out[i], s0, s1, s2, s3 = min_level(x, n_servers, n, low, s0, s1, s2, s3)
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return out


@njit(cache=True)
def _hg_log_pmf(total, good, n, m):
    """``log P(H = m)`` for ``H`` hypergeometric: ``n`` draws from ``total``, ``good`` of them
    marked: ``C(good, m) C(total - good, n - m) / C(total, n)`` through :func:`log_falling`."""
    return (log_falling(n, m) - math.lgamma(m + 1.0) + log_falling(good, m)
            + log_falling(total - good, n - m) - log_falling(total, n))


@njit(cache=True)
def hypergeometric(total, good, n, s0, s1, s2, s3):
    """The number of marked items among ``n`` drawn without replacement from ``total`` items,
    ``good`` of them marked: returns ``(value, s0, s1, s2, s3)``.

    Inversion by chop-down search from the mode (Kachitvichyanukul & Schmeiser 1985's HIN
    idea): one uniform ``U``; the pmf at the mode is computed once (:func:`log_falling`), then the
    neighbours by the pmf's ratio recursion, alternately below and above, until their mass
    exceeds ``U``: O(standard deviation) steps, one random number. If rounding leaves ``U``
    above the whole computed mass (total mass 1 - O(1e-13)) the mode is returned."""
    if n == 0 or good == 0:
        return 0, s0, s1, s2, s3
    bad = total - good
    if bad == 0:
        return n, s0, s1, s2, s3
    lo_b = n - bad if n > bad else 0
    hi_b = n if n < good else good
    if lo_b == hi_b:
        return lo_b, s0, s1, s2, s3
    mode = int(((n + 1.0) * (good + 1.0)) / (total + 2.0))
    if mode < lo_b:
        mode = lo_b
    elif mode > hi_b:
        mode = hi_b
    pm = math.exp(_hg_log_pmf(total, good, n, mode))
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    u = u01(r)
    if u < pm:
        return mode, s0, s1, s2, s3
    u -= pm
    lo = mode
    hi = mode
    plo = pm
    phi = pm
    while lo > lo_b or hi < hi_b:
        if lo > lo_b:
            # P(lo - 1) / P(lo) = lo (bad - n + lo) / ((good - lo + 1) (n - lo + 1))
            plo *= (lo * (bad - n + lo + 0.0)) / ((good - lo + 1.0) * (n - lo + 1.0))
            lo -= 1
            if u < plo:
                return lo, s0, s1, s2, s3
            u -= plo
        if hi < hi_b:
            # P(hi + 1) / P(hi) = (good - hi) (n - hi) / ((hi + 1) (bad - n + hi + 1))
            phi *= ((good - hi) * (n - hi + 0.0)) / ((hi + 1.0) * (bad - n + hi + 1.0))
            hi += 1
            if u < phi:
                return hi, s0, s1, s2, s3
            u -= phi
    return mode, s0, s1, s2, s3


@njit(cache=True)
def draw_levels_hg(x, n_servers, n, low, stop, sample_hist, s0, s1, s2, s3):
    """The law of :func:`draw_levels` (``n`` distinct servers drawn uniformly from the counts
    ``x``, their levels counted in ``sample_hist``, zero on entry) by level counts: ``sample_hist[low]`` is
    hypergeometric (``n`` from ``n_servers``, ``x[low]`` marked), then each next level's count
    given the ones before (the multivariate hypergeometric's chain rule), until the sample is
    used up. Levels below ``low`` must be empty. Stops after level ``low`` if ``sample_hist[low] >=
    stop`` (pass ``stop = -1`` never to stop): there :func:`draw_levels` stops with ``sample_hist[low] ==
    stop`` exactly and the rest of its histogram partial, which no caller reads (every placement
    only needs ``sample_hist[low] >= stop`` then), so the outcomes have one law. Cost O(levels * sd)
    instead of O(n * scan). Returns ``(highest level written, s0, s1, s2, s3)``."""
    rest = n_servers
    left = n
    lvl = low
    top = low
    while left > 0:
        h, s0, s1, s2, s3 = hypergeometric(rest, x[lvl], left, s0, s1, s2, s3)
        sample_hist[lvl] = h
        if h > 0:
            top = lvl
        if lvl == low and stop >= 0 and h >= stop:
            break
        left -= h
        rest -= x[lvl]
        lvl += 1
    return top, s0, s1, s2, s3


@njit(cache=True)
def sample_levels(x, n, state):
    """Histogram of the levels of ``n`` servers drawn without replacement from counts ``x``
    (no early stop); ``state`` (uint64[4]) advanced in place."""
    sample_hist = np.zeros(x.size, dtype=np.int64)
    _, s0, s1, s2, s3 = draw_levels(x, x.sum(), n, -1, 1, sample_hist,
                                       state[0], state[1], state[2], state[3])
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return sample_hist


@njit(cache=True)
def sample_levels_hg(x, n, stop, state):
    """:func:`draw_levels_hg` from the lowest occupied level of ``x`` (``stop`` as there, -1 for
    the whole sample), as a histogram; ``state`` (uint64[4]) advanced in place."""
    sample_hist = np.zeros(x.size, dtype=np.int64)
    _, s0, s1, s2, s3 = draw_levels_hg(x, x.sum(), n, lowest_occupied(x), stop, sample_hist,
                                       state[0], state[1], state[2], state[3])
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return sample_hist


@njit(cache=True)
def hypergeometric_draws(total, good, n, size, state):
    """``size`` draws of :func:`hypergeometric` (a test helper); ``state`` advanced in place."""
    out = np.empty(size, dtype=np.int64)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    for i in range(size):
        out[i], s0, s1, s2, s3 = hypergeometric(total, good, n, s0, s1, s2, s3)
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return out


def alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table for probabilities ``p``: (acceptance thresholds as uint64 compared with
    a raw 64-bit draw, alias indices)."""
    n = p.size
    scaled = p * n
    prob = np.ones(n)
    alias = np.arange(n, dtype=np.int64)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s = small.pop()
        g = large.pop()
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] = scaled[g] + scaled[s] - 1.0
        (small if scaled[g] < 1.0 else large).append(g)
    # leftovers are 1 up to rounding
    thr = np.empty(n, dtype=np.uint64)
    for i in range(n):
        thr[i] = threshold(prob[i])
    return thr, alias


@njit(cache=True, inline="always")
def probes_in(s, n, d, replacement, inv_den, n_den):
    """Probability that ``d`` probes all land in a set of ``N s`` servers: without replacement
    ``C(N s, d) / C(N, d) = prod_{j<d} (N s - j) / (N - j)`` (``s**d`` at ``n = inf``), with
    replacement ``s**d``. ``inv_den = 1 / prod_{j<d} (N - j)`` for ``n == n_den`` (the
    task's N, precomputed by the declaration's parameters: one multiplication instead of divisions), or 0. The polynomial in
    ``N s`` is smooth off the lattice too (the refined expansion differences it) and exactly 0
    where ``N s`` is an integer below ``d`` (the count is ``N s`` up to rounding)."""
    if replacement or n == np.inf:
        return s ** d
    c = s * n
    if c < d - 0.5:
        return 0.0
    num = 1.0
    if inv_den > 0.0 and n == n_den:
        for j in range(d):
            num *= c - j
        return num * inv_den
    out = 1.0
    den = 1.0
    for j in range(d):  # each partial product of 8 factors below 2**53 ** 8: no overflow
        num *= c - j
        den *= n - j
        if j % 8 == 7:
            out *= num / den
            num = 1.0
            den = 1.0
    return out * (num / den)
