"""Response-time distributions from the queue positions jobs take (FIFO, Exp(1) service).

With FIFO queues and Exp(1) service a task that joins a queue at position ``p`` (``p = 1``: it
starts service at once) completes after ``Gamma(p, 1)`` time, independently of the other queues.
A job whose tasks end, in its distinct queues, at positions ``p_1..p_m`` (for a queue holding
several of its tasks only the last counts) is done after ``max_i Gamma(p_i, 1)``, so given the
positions

    P(T <= t | positions) = prod_i F_{p_i}(t),   F_p(t) = P(Gamma(p, 1) <= t),

and the law of the response time of an arriving job is the *mixture* of these over the
positions arriving jobs see (by PASTA, the steady-state law). Only the *signature* of a job
matters: ``counts[p]`` = number of its distinct queues whose job-last task is at position ``p``.
For single-task jobs the signature is the position, and the mixture is a mixture of
``Gamma(p, 1)`` weighted by the position histogram.

Recording (inside the kernels of :mod:`sim.dispatch._agent_jobs_kernel`,
:mod:`sim.dispatch._occupancy_kernel` and :mod:`sim.jiq._occupancy_kernel`; the common cases
inline in their event loops, the rest through :func:`record_job`): per window of the run,

- ``w_sig[w, s]``: admitted jobs (arrived in window ``w``) of signature number ``s``. For
  ``k = 1`` the number is ``position - 1`` (positions up to ``max_sig``); for ``k > 1`` the
  signatures are numbered in order of first appearance by an open-addressing table keyed by
  the exact counts (:func:`sig_id`; positions up to :data:`SIG_MAX_POS`, at most ``max_sig``
  signatures). These jobs are recorded *exactly*: the mixture CDF is known in closed form.
- ``w_grid[w, g]``: for jobs whose signature does not fit (deeper positions, or more distinct
  signatures than the table holds), ``prod_i F_{p_i}(t_g)`` summed over those jobs, on the fixed
  grid :data:`RESPONSE_GRID`; ``w_over[w]`` counts them. Between grid points their CDF is
  interpolated linearly (quantiles of such jobs are then approximate; the row's ``ci_method``
  says which fraction of jobs it concerns). Beyond the last grid point (970) their CCDF is 0.

Output (:func:`summarize`): the pooled CCDF on :data:`RESPONSE_GRID` and the quantiles
:data:`QUANTILES` by root finding on the pooled mixture CCDF of the kept windows (after the
warm-up cut): bracketed on the grid, then the Illinois variant of regula falsi, vectorised over
the pooled mixture and the batches, to 1e-13 relative (:meth:`Mixture.quantile` does the same
for one mixture with ``scipy.optimize.brentq``); standard errors by batch means *of the per-batch
quantiles* (and of the per-batch CCDF values), on the same contiguous batches as the means
(:func:`sim.core.output.contiguous_batches`): ``std(ddof=1) / sqrt(n_batches)``.

Exactness: given the jump chain (which both the agent engine's uniformized chain and the
occupancy engine's embedded chain simulate exactly), the distribution is exact -- no response
time is sampled, so neither engine needs random clocks, and the agent engine's deterministic
time step (exact for means) does not enter.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from sim.core.jobdelay import log_cdf_product, nonzero_counts

__all__ = ["RESPONSE_GRID", "QUANTILES", "QUANTILE_NAMES", "RESPONSE_COLUMNS", "SIG_MAX_POS",
           "exact_response_columns",
           "SIG_WORDS", "Mixture", "ResponseSummary", "Recorder", "new_recorder",
           "dummy_recorder", "sig_id", "grid_add", "record_job", "summarize"]

#: the fixed grid of t for the CCDF: 0, 0.25, ..., 9.75 (40 points), then 10 * 1.1**j,
#: j = 0..48 (10 to 970): 89 points, fine where delays of a few service times live and
#: geometric beyond (heavy load, random routing)
RESPONSE_GRID = np.concatenate((np.arange(40) * 0.25, 10.0 * 1.1 ** np.arange(49)))
#: reported quantiles and their column names
QUANTILES = (0.5, 0.9, 0.99, 0.999)
QUANTILE_NAMES = ("p50", "p90", "p99", "p999")
#: result columns (sim.registry.RESULTS)
RESPONSE_COLUMNS = tuple(c for q in QUANTILE_NAMES for c in (f"response_{q}", f"response_{q}_se")) \
    + ("response_grid", "response_ccdf", "response_ccdf_se")

#: signatures (counts at positions 1..SIG_MAX_POS) are packed 16 bits per position
SIG_WORDS = 8
SIG_MAX_POS = 4 * SIG_WORDS
_SIG_MAX_COUNT = 1 << 16
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: default number of exactly recorded signatures (k > 1) or positions (k = 1)
MAX_SIG_K1 = 256
MAX_SIG_K = 1024


# --------------------------------------------------------------------------------------------
# kernel side (numba)
# --------------------------------------------------------------------------------------------
class Recorder(NamedTuple):
    """Arrays a kernel fills when it records distributions (see the module docstring)."""

    w_sig: np.ndarray  #: int32[W, max_sig]
    w_grid: np.ndarray  #: float64[W, G]
    w_over: np.ndarray  #: int64[W]
    sig_keys: np.ndarray  #: int64[T, SIG_WORDS] hash table of signatures (k > 1)
    sig_pos: np.ndarray  #: int64[T] top position of the slot's signature (0: free)
    sig_slot_id: np.ndarray  #: int64[T] signature number of the slot
    sig_counts: np.ndarray  #: int64[max_sig, SIG_MAX_POS + 1] counts of signature s
    n_sig: np.ndarray  #: int64[1] signatures numbered so far
    grid: np.ndarray  #: float64[G]
    ps: np.ndarray  #: int64[k + 1] scratch (distinct positions of one job)
    cs: np.ndarray  #: int64[k + 1] scratch (their counts)
    key0: np.ndarray  #: int64[SIG_WORDS] scratch (a packed signature)


def new_recorder(n_windows: int, k: int, max_sig: int | None = None,
                 grid: np.ndarray = RESPONSE_GRID) -> Recorder:
    """Zeroed recording arrays for a run of ``n_windows`` windows and ``k``-task jobs."""
    if max_sig is None:
        max_sig = MAX_SIG_K1 if k == 1 else MAX_SIG_K
    table = 1 if k == 1 else 4 * max_sig  # power of two for k > 1
    if k > 1 and table & (table - 1):
        raise ValueError(f"max_sig={max_sig!r} must be a power of two")
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    return Recorder(np.zeros((n_windows, max_sig), np.int32), np.zeros((n_windows, grid.size)),
                    np.zeros(n_windows, np.int64), np.zeros((table, SIG_WORDS), np.int64),
                    np.zeros(table, np.int64), np.zeros(table, np.int64),
                    np.zeros((max_sig if k > 1 else 1, SIG_MAX_POS + 1), np.int64),
                    np.zeros(1, np.int64), grid, np.zeros(k + 1, np.int64), np.zeros(k + 1, np.int64),
                    np.zeros(SIG_WORDS, np.int64))


def dummy_recorder() -> Recorder:
    """Arrays of the right types and minimal sizes, passed when nothing is recorded."""
    return Recorder(np.zeros((1, 1), np.int32), np.zeros((1, 1)), np.zeros(1, np.int64),
                    np.zeros((1, SIG_WORDS), np.int64), np.zeros(1, np.int64),
                    np.zeros(1, np.int64), np.zeros((1, SIG_MAX_POS + 1), np.int64),
                    np.zeros(1, np.int64), np.zeros(1), np.zeros(1, np.int64),
                    np.zeros(1, np.int64), np.zeros(SIG_WORDS, np.int64))


@njit(cache=True, inline="always")
def find_key(key, top_pos, n_words, keys, key_pos):
    """Open addressing with linear probing over a table of packed signatures: row ``i`` holds
    the key ``keys[i, :n_words]`` of a signature reaching position ``key_pos[i]`` (0: a free
    row; the table's size is a power of two). Returns ``(row, True)`` where ``key`` (``n_words``
    words, up to position ``top_pos``) is stored, else ``(the free row where it goes, False)``."""
    hsh = np.uint64(top_pos)
    for q in range(n_words):
        hsh = (hsh ^ np.uint64(key[q])) * _GOLDEN
    mask = key_pos.size - 1
    i = np.int64(hsh >> np.uint64(40)) & mask
    while key_pos[i] != 0:
        if key_pos[i] == top_pos:
            same = True
            for q in range(n_words):
                if keys[i, q] != key[q]:
                    same = False
                    break
            if same:
                return i, True
        i = (i + 1) & mask
    return i, False


@njit(cache=True, inline="always")
def store_key(i, key, top_pos, n_words, keys, key_pos):
    """Write ``key`` into the free row ``i`` found by :func:`find_key`."""
    key_pos[i] = top_pos
    for q in range(n_words):
        keys[i, q] = key[q]


@njit(cache=True, inline="always")
def sig_id(job_signature, top_pos, sig_keys, sig_pos, sig_slot_id, sig_counts, n_sig, key0):
    """Number of the signature ``job_signature[1..top_pos]`` (numbered on first sight), or -1 if it does
    not fit (``top_pos > SIG_MAX_POS``, a count >= 2**16, or the table is full). ``key0``:
    scratch int64[SIG_WORDS]."""
    max_sig = sig_counts.shape[0]
    if top_pos > SIG_MAX_POS:
        return -1
    for q in range(SIG_WORDS):
        key0[q] = 0
    for p in range(1, top_pos + 1):
        c = job_signature[p]
        if c >= _SIG_MAX_COUNT:
            return -1
        key0[(p - 1) >> 2] |= np.int64(c) << np.int64(16 * ((p - 1) & 3))
    n_words = (top_pos + 3) >> 2
    i, found = find_key(key0, top_pos, n_words, sig_keys, sig_pos)
    if found:
        return sig_slot_id[i]
    s = n_sig[0]
    if s >= max_sig:
        return -1
    store_key(i, key0, top_pos, n_words, sig_keys, sig_pos)
    sig_slot_id[i] = s
    for p in range(1, top_pos + 1):
        sig_counts[s, p] = job_signature[p]
    n_sig[0] = s + 1
    return s


@njit(cache=True)
def grid_add(job_signature, top_pos, grid, ps, cs, out_row):
    """Add ``prod_p F_p(t)**job_signature[p]`` at every grid point ``t`` to ``out_row``. ``ps``, ``cs``:
    scratch of size >= the number of distinct positions."""
    nd = nonzero_counts(job_signature, top_pos, ps, cs)
    for g in range(grid.size):
        lp = log_cdf_product(ps, cs, nd, grid[g])[0]
        if lp > -745.0:
            out_row[g] += math.exp(lp)


@njit(cache=True)
def record_job(w, k, job_signature, top_pos, w_sig, w_grid, w_over, sig_keys, sig_pos, sig_slot_id,
               sig_counts, n_sig, grid, ps, cs, key0):
    """Record one admitted job of window ``w`` with signature ``job_signature[1..top_pos]`` (for
    ``k = 1``: ``top_pos`` is its position and ``job_signature`` is not read). ``ps``, ``cs``: scratch
    of size >= k + 1 (a job has at most k distinct positions)."""
    if k == 1:
        if top_pos <= w_sig.shape[1]:
            w_sig[w, top_pos - 1] += 1
            return
        ps[0] = top_pos
        cs[0] = 1
        for g in range(grid.size):
            lp = log_cdf_product(ps, cs, 1, grid[g])[0]
            if lp > -745.0:
                w_grid[w, g] += math.exp(lp)
        w_over[w] += 1
        return
    s = sig_id(job_signature, top_pos, sig_keys, sig_pos, sig_slot_id, sig_counts, n_sig, key0)
    if s >= 0:
        w_sig[w, s] += 1
        return
    grid_add(job_signature, top_pos, grid, ps, cs, w_grid[w])
    w_over[w] += 1


# --------------------------------------------------------------------------------------------
# mixtures (numpy / scipy)
# --------------------------------------------------------------------------------------------
def _log_cdf_gamma(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """log P(Gamma(p, 1) <= t), accurate on both sides (broadcasting)."""
    from scipy.special import gammainc, gammaincc

    p, t = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(t, dtype=np.float64))
    with np.errstate(divide="ignore"):
        low = gammainc(p, t)
        out = np.where(low < 0.5, np.log(low), np.log1p(-gammaincc(p, t)))
    return out


class Mixture:
    """The law of ``max_i Gamma(p_i, 1)`` mixed over signatures, plus optional jobs known only
    on a grid.

    ``weights[s]`` (non-negative, any scale) of signature ``s`` = ``(ps[s], cs[s])`` (distinct
    positions and their counts); ``grid_cdf_sum[g]`` = sum over ``grid_weight`` grid-only jobs
    of their CDF at ``grid[g]`` (linearly interpolated in between, CCDF 0 beyond the grid).
    """

    def __init__(self, weights, signatures, grid=None, grid_cdf_sum=None, grid_weight=0.0):
        self.weights = np.asarray(weights, dtype=np.float64)
        self.signatures = [(np.asarray(p, np.int64), np.asarray(c, np.float64))
                           for p, c in signatures]
        if len(self.signatures) != self.weights.size:
            raise ValueError("one weight per signature")
        self.grid = None if grid is None else np.asarray(grid, dtype=np.float64)
        self.grid_cdf_sum = None if grid_cdf_sum is None else np.asarray(grid_cdf_sum, np.float64)
        self.grid_weight = float(grid_weight)
        self.total = float(self.weights.sum()) + self.grid_weight
        # one matrix: rows = signatures, columns = distinct positions, entries = counts
        keep = self.weights > 0
        self._w = self.weights[keep]
        sigs = [s for s, kp in zip(self.signatures, keep) if kp]
        allp = np.unique(np.concatenate([p for p, _ in sigs])) if sigs else np.zeros(0, np.int64)
        self._pos = allp
        self._cnt = np.zeros((len(sigs), allp.size))
        for i, (p, c) in enumerate(sigs):
            self._cnt[i, np.searchsorted(allp, p)] = c

    @classmethod
    def of_positions(cls, weights, positions=None, **kw) -> "Mixture":
        """Single-task jobs: ``weights[i]`` at position ``positions[i]`` (default ``i + 1``)."""
        weights = np.asarray(weights, dtype=np.float64)
        if positions is None:
            positions = np.arange(1, weights.size + 1)
        return cls(weights, [([p], [1.0]) for p in positions], **kw)

    def ccdf(self, t) -> np.ndarray:
        """P(T > t) at the points ``t``."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        out = np.zeros(t.size)
        if self.total <= 0:
            return out * np.nan
        if self._w.size:
            lf = _log_cdf_gamma(self._pos[:, None], t[None, :])  # (P, T)
            lf = np.where(np.isneginf(lf), -1e300, lf)
            comp = -np.expm1(self._cnt @ lf)  # (S, T)
            out += self._w @ np.clip(comp, 0.0, 1.0)
        if self.grid_weight > 0:
            cdf = np.interp(t, self.grid, self.grid_cdf_sum, left=0.0, right=self.grid_weight)
            out += self.grid_weight - cdf
        return out / self.total

    def quantile(self, q: float) -> float:
        """The ``q``-quantile: the root of ``P(T > t) = 1 - q`` (brentq)."""
        from scipy.optimize import brentq

        if not 0.0 < q < 1.0 or self.total <= 0:
            return float("nan")
        target = 1.0 - q
        hi = 1.0
        while self.ccdf(hi)[0] > target:
            hi *= 2.0
            if hi > 1e7:
                return float("nan")
        return float(brentq(lambda x: self.ccdf(x)[0] - target, 0.0, hi, xtol=1e-10,
                            rtol=1e-12))

    def mean(self) -> float:
        """E[T]: exact for the signatures (:func:`sim.core.jobdelay.expected_max_gamma`), by
        the trapezoid rule on the grid for grid-only jobs."""
        from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma

        acc = 0.0
        for w, (p, c) in zip(self.weights, self.signatures):
            if w > 0:
                counts = np.zeros(int(p.max()) + 1, dtype=np.int64)
                counts[p] = np.rint(c).astype(np.int64)
                acc += w * expected_max_gamma(counts, GL_X, GL_W)
        if self.grid_weight > 0:
            acc += np.trapezoid(self.grid_weight - self.grid_cdf_sum, self.grid)
        return acc / self.total if self.total > 0 else float("nan")


class ResponseSummary(NamedTuple):
    """Quantiles and CCDF of the response time from one run (see :func:`summarize`)."""

    quantiles: np.ndarray  #: at QUANTILES
    quantiles_se: np.ndarray
    grid: np.ndarray
    ccdf: np.ndarray  #: P(T > grid[g])
    ccdf_se: np.ndarray
    n_jobs: int  #: jobs in the distribution (after the warm-up cut)
    grid_only_fraction: float  #: of those, jobs known on the grid only (not exact)
    mixture: Mixture  #: the pooled mixture

    def row(self) -> dict:
        """The result columns :data:`RESPONSE_COLUMNS` as plain Python values."""
        out = {}
        for name, v, se in zip(QUANTILE_NAMES, self.quantiles, self.quantiles_se):
            out[f"response_{name}"] = _plain(v)
            out[f"response_{name}_se"] = _plain(se)
        out["response_grid"] = [float(x) for x in self.grid]
        out["response_ccdf"] = [float(x) for x in self.ccdf]
        out["response_ccdf_se"] = [float(x) if math.isfinite(x) else None for x in self.ccdf_se]
        return out

    def method(self) -> str:
        """A phrase for ``ci_method``."""
        text = ("response quantiles: root of the exact mixture CCDF, SE by batch means of the "
                "per-batch quantiles")
        if self.grid_only_fraction > 0:
            text += (f" ({100 * self.grid_only_fraction:.3g}% of jobs known on the response grid "
                     "only: interpolated)")
        return text


def _plain(v):
    v = float(v)
    return v if math.isfinite(v) else None


def _signatures(rec: Recorder, k: int, n_cols: int) -> list:
    """(positions, counts) of the recorded signature numbers 0..n_cols-1."""
    if k == 1:
        return [([p], [1.0]) for p in range(1, n_cols + 1)]
    out = []
    for s in range(n_cols):
        cnt = rec.sig_counts[s]
        ps = np.flatnonzero(cnt)
        out.append((ps, cnt[ps].astype(np.float64)))
    return out


def _ccdf_rows(cnt, pos, weights, grid, g_sum, g_w, t, rows):
    """Unnormalised mixture CCDF of mixture ``rows[i]`` at ``t[i]`` (vectorised): mixtures
    share the signatures (matrix ``cnt``: signatures x positions ``pos``) and differ in their
    ``weights[row]``, grid sums ``g_sum[row]`` and grid weights ``g_w[row]``."""
    lf = _log_cdf_gamma(pos[:, None], t[None, :])
    lf = np.where(np.isneginf(lf), -1e300, lf)
    comp = np.clip(-np.expm1(cnt @ lf), 0.0, 1.0)  # (S, M)
    out = np.einsum("ms,sm->m", weights[rows], comp)
    if np.any(g_w > 0):
        j = np.clip(np.searchsorted(grid, t, side="right"), 1, grid.size - 1)
        x0, x1 = grid[j - 1], grid[j]
        f = np.clip((t - x0) / (x1 - x0), 0.0, 1.0)
        cdf = (1 - f) * g_sum[rows, j - 1] + f * g_sum[rows, j]
        cdf = np.where(t >= grid[-1], g_w[rows], cdf)
        out = out + g_w[rows] - cdf
    return out


def _quantiles(cnt, pos, weights, grid, g_sum, g_w, probs, grid_ccdf=None,
               iters: int = 60, rtol: float = 1e-13) -> np.ndarray:
    """Quantiles ``probs`` of every mixture (rows of ``weights``), the roots of
    ``P(T > t) = 1 - q`` on the exact mixture CCDF: bracketed on the grid (``grid_ccdf``,
    unnormalised, rows as ``weights``; by doubling beyond it), then the Illinois variant of
    regula falsi, vectorised, to ``rtol`` relative. NaN for an empty mixture."""
    n_rows = weights.shape[0]
    n_q = len(probs)
    total = weights.sum(axis=1) + g_w
    rows = np.repeat(np.arange(n_rows), n_q)
    target = np.tile(1.0 - np.asarray(probs, dtype=np.float64), n_rows) * total[rows]
    ok = total[rows] > 0

    def f(t):
        return _ccdf_rows(cnt, pos, weights, grid, g_sum, g_w, t, rows) - target

    if grid_ccdf is None:
        grid_ccdf = _ccdf_rows(cnt, pos, weights, grid, g_sum, g_w,
                               np.tile(grid, n_rows), np.repeat(np.arange(n_rows), grid.size)
                               ).reshape(n_rows, grid.size)
    above = grid_ccdf[rows] > target[:, None]  # ccdf decreasing: True, ..., True, False, ...
    j = above.sum(axis=1)  # first grid index with ccdf <= target
    inside = j < grid.size
    a = np.where(j > 0, grid[np.maximum(j - 1, 0)], 0.0)
    b = np.where(inside, grid[np.minimum(j, grid.size - 1)], grid[-1])
    fa = np.where(j > 0, grid_ccdf[rows, np.maximum(j - 1, 0)] - target, total[rows] - target)
    fb = np.where(inside, grid_ccdf[rows, np.minimum(j, grid.size - 1)] - target, 1.0)
    for _ in range(60):  # beyond the grid: double until the CCDF is below the target
        far = ok & (fb > 0)
        if not far.any():
            break
        a = np.where(far, b, a)
        fa = np.where(far, fb, fa)
        b = np.where(far, 2.0 * b, b)
        fb = np.where(far, f(b), fb)
    step = np.abs(b - a)
    for _ in range(iters):
        act = ok & (step > rtol * np.abs(b)) & (fb != 0) & (fa != fb)
        if not act.any():
            break
        c = np.where(act, (a * fb - b * fa) / np.where(act, fb - fa, 1.0), b)
        c = np.clip(c, np.minimum(a, b), np.maximum(a, b))
        fc = f(c)
        flip = act & (fc * fb < 0)  # the root lies between b and c
        keep = act & ~flip  # Illinois: halve the retained end's value
        step = np.where(act, np.abs(c - b), step)
        a, fa = np.where(flip, b, a), np.where(flip, fb, np.where(keep, 0.5 * fa, fa))
        b, fb = np.where(act, c, b), np.where(act, fc, fb)
    out = np.where(np.abs(fa) < np.abs(fb), a, b)
    out[~ok] = np.nan
    return out.reshape(n_rows, n_q)


def summarize(rec: Recorder, k: int, cut: int, n_batches: int) -> ResponseSummary:
    """Pooled quantiles and CCDF over the windows from ``cut`` on, with batch-means SEs over
    ``n_batches`` contiguous batches of those windows (the batches of
    :func:`sim.core.output.batch_means`): the SE of a quantile is the standard deviation of
    the per-batch quantiles over sqrt(n_batches), likewise for the CCDF at each grid point."""
    from sim.core.output import contiguous_batches

    w_sig = rec.w_sig[cut:]
    if k > 1:  # only the numbered signatures
        w_sig = w_sig[:, : max(int(rec.n_sig[0]), 1)]
    starts = contiguous_batches(w_sig.shape[0], n_batches)[:-1]
    b_sig = np.add.reduceat(w_sig.astype(np.float64), starts, axis=0)
    b_grid = np.add.reduceat(rec.w_grid[cut:], starts, axis=0)
    b_over = np.add.reduceat(rec.w_over[cut:].astype(np.float64), starts)
    # row 0: the pooled mixture; rows 1..B: the batches
    weights = np.vstack((b_sig.sum(axis=0), b_sig))
    g_sum = np.vstack((b_grid.sum(axis=0), b_grid))
    g_w = np.concatenate(([b_over.sum()], b_over))
    used = np.flatnonzero(weights[0] > 0)
    sigs = _signatures(rec, k, weights.shape[1])
    pooled = Mixture(weights[0], sigs, grid=rec.grid, grid_cdf_sum=g_sum[0], grid_weight=g_w[0])
    sub = [sigs[i] for i in used]
    pos = np.unique(np.concatenate([p for p, _ in sub])) if sub else np.ones(1, np.int64)
    cnt = np.zeros((len(sub), pos.size))
    for i, (p, c) in enumerate(sub):
        cnt[i, np.searchsorted(pos, p)] = c
    wts = weights[:, used]
    grid = rec.grid
    total = wts.sum(axis=1) + g_w
    rows = np.repeat(np.arange(weights.shape[0]), grid.size)
    raw = _ccdf_rows(cnt, pos, wts, grid, g_sum, g_w, np.tile(grid, weights.shape[0]), rows
                     ).reshape(weights.shape[0], grid.size)
    qs = _quantiles(cnt, pos, wts, grid, g_sum, g_w, QUANTILES, grid_ccdf=raw)
    with np.errstate(invalid="ignore", divide="ignore"):
        cc = raw / total[:, None]
        qse = np.std(qs[1:], axis=0, ddof=1) / math.sqrt(n_batches)
        cse = np.std(cc[1:], axis=0, ddof=1) / math.sqrt(n_batches)
    n_jobs = int(round(total[0]))
    frac = float(g_w[0]) / n_jobs if n_jobs else 0.0
    return ResponseSummary(qs[0], qse, grid.copy(), cc[0], cse, n_jobs, frac, pooled)


def exact_response_columns(law) -> dict:
    """The response columns (:data:`RESPONSE_COLUMNS`) of an exact law (a :class:`Mixture`, or
    anything with ``quantile`` and ``ccdf``): its quantiles at :data:`QUANTILES` (root finding on
    the exact CCDF) and its CCDF on :data:`RESPONSE_GRID`, the grid of the simulators' rows. The
    standard errors are null, as every standard error of an exact (mean-field) row."""
    out = {}
    for name, q in zip(QUANTILE_NAMES, QUANTILES):
        v = float(law.quantile(q))
        out[f"response_{name}"] = v if math.isfinite(v) else None
        out[f"response_{name}_se"] = None
    out["response_grid"] = [float(x) for x in RESPONSE_GRID]
    out["response_ccdf"] = [float(x) for x in np.clip(law.ccdf(RESPONSE_GRID), 0.0, 1.0)]
    out["response_ccdf_se"] = None
    return out
