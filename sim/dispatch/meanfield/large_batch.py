"""Batch-filling mean field at large k and d (k ~ 10^3, kd ~ 10^7): exact fixed point, exact
job signature law and exact E[T], without the (kd + 1)(k + 1)-state program of
:mod:`sim.dispatch.meanfield.batch_filling` or its Monte Carlo E[T].

Model and notation as in :mod:`sim.dispatch.meanfield.batch_filling`: ``n = k d`` sampled
queues with i.i.d. lengths ``Q``, ``P(Q >= i) = s_i``, ``p_i = s_i - s_{i+1}``; ``C_j`` = sampled
queues of length <= j, ``S_j = C_0 + ... + C_j``, ``T_j = min(k, S_j)``.

Fixed point (:func:`fixed_point_large`)
---------------------------------------
Summing the ODE over levels ``i >= m`` at a fixed point gives (every job places its k tasks)

    s_m = (lam / k) E[k - T_{m-2}] = (lam / k) E[(k - S_{m-2})^+],   s_1 = lam,

and ``S_j = sum over the n queues of (j + 1 - Q)^+`` is a sum of n i.i.d. variables with pmf
``g = (s_{j+1}, p_j, p_{j-1}, ..., p_0)`` on 0..j+1, which depends on s_1..s_{j+1} only. So the
fixed point is an explicit forward recursion: ``s_m`` needs the law of ``S_{m-2}`` below k, the
first k coefficients of ``g(z)^n``, computed exactly by the J. C. P. Miller recurrence for
powers of a power series (all its terms are positive since n >= k: no cancellation) in log
space (``g_0^n`` underflows for n ~ 10^7). Cost O(k j) per level. The recursion stops at the
first level L with ``s_{L+1} < TAIL_EPS`` (1e-20), and ``s_{L+1}, ... := 0``; s_1..s_L are
exact (not those of a truncated system). The truncation only changes jobs that reach layer L
(raise queues of length L), which happens with probability ``P(S_{L-1} < k) <= k s_{L+1} / lam
< 1e-16 / lam`` for k <= 10^4. Measured: lowering TAIL_EPS to 1e-30 changes no L and no E[T]
on the sub_halfin_whitt path; the recursion and the chain below give the same s_m to 2e-12
relative (N = 10^8, 10^15).

Job law (:func:`signature_law_large`)
-------------------------------------
Only the water-filling until the k-th task matters: the chain ``(C_j, S_j)`` is carried only
while ``S_j < k`` (then ``C_j <= S_j < k``: at most k(k+1)/2 states, not (kd+1)(k+1)), with
transitions ``C_{j+1} = C_j + Binomial(n - C_j, q_{j+1})``, ``q_j = p_j / s_j``, of which only
the values keeping ``S_{j+1} < k`` are needed (pmfs by Loader's saddle-point formula, accurate
to ~1e-15 relative also for n ~ 10^8). The job ends at layer J when ``S_{J-1} = sigma < k <=
S_J``: its ``c' = C_{J-1}`` queues below J are filled to J, and the ``r = k - sigma`` remaining
tasks go to r distinct queues among the ``C_J`` of length J, uniformly; ``X`` ~
Hypergeometric(C_J, c', r) of them are the job's own, so its signature is ``a = c' - X`` queues
whose last task is at position J and r queues at J + 1 (:func:`batch_filling.job_signature_law`).
Summing over ``C_J = c' + Binomial(n - c', q_J)`` (which can be ~10^7) in closed form:
``Bin(c - c'; n - c', q) / C(c, c') = Bin(c; n, q) q^(-c') / C(n, c')``, hence

    P(a | c', r) = q_J^(-c') C(r, c' - a) K_J(r, a) / C(n, c'),
    K_J(r, a) = E[C(Z - r, a); Z >= r],   Z ~ Binomial(n, q_J),

and ``K(r, a) = K(r + 1, a) + K(r + 1, a - 1)`` (a >= 1; Pascal), ``K(r, 0) = P(Z >= r)``: one
row ``K(k, .)`` by a direct sum over a window of Z, then the recursion downwards, all in log
space (sums of positive terms only). The summands ``Bin(c; n, q) C(c - k, a)`` are log-concave
in c; the window runs from 12 sd + 50 below the mean of Z to where the a = k summand (whose
mode is the highest) is below e^-60 of its maximum (:func:`_tilted_top`), and a summand that is
still within e^-50 of the maximum at the window's top edge raises RuntimeError. States of the
chain with mass below ``PRUNE`` (1e-26) are dropped: at most k(k+1)/2 of them per layer, so at
most ~1e-20 of mass per layer (measured: prune = 0 changes E[T] by <= 1.1e-14 at N = 10^12,
10^15). The captured mass is reported (``mass``; measured |1 - mass| <= 4.6e-12 on the path,
rounding).

E[T] (:func:`job_delay_exact`)
------------------------------
``P(T <= t) = sum_J sum_{a, r} P(J, a, r) F_J(t)^a F_{J+1}(t)^r`` with ``F_p`` the Gamma(p, 1)
CDF (scipy.special.gammainc), a bilinear form evaluated for all quadrature nodes at once
(BLAS), and ``E[T] = int_0^inf (1 - P(T <= t)) dt / mass`` by composite 16-point
Gauss-Legendre on unit panels up to ``t_max`` where ``k P(Gamma(J_max + 1) > t_max) < 1e-18``.
No Monte Carlo: the result is exact up to the truncations above. Measured: agreement with the
exact small-kd :func:`batch_filling.response_law` to 1.2e-14 (lam = 0.5..0.95, k = 2..8, d =
1..4, kd <= 24); 32-point panels change E[T] by <= 1.1e-14; Monte Carlo of the full
water-filling (:func:`batch_filling.mean_job_delay`) at k = 191, kd = 382..9359 and of the
signature chain at kd up to 3.8e7 agree within 1.8 SE. Time per point of sub_halfin_whitt
(N = 10^2..10^15, k <= 1193, kd <= 3.8e7): <= 1.5 s warm, here; about 4 s of JIT compiling
on a cold numba cache.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy import special

from sim.core.jobdelay import harmonic
from sim.dispatch.meanfield._common import _check_k_d

TAIL_EPS = 1e-20
PRUNE = 1e-26
_LN_2PI = math.log(2.0 * math.pi)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W

# Loader (2000), "Fast and accurate computation of binomial probabilities"
_S0, _S1, _S2, _S3, _S4 = 1.0 / 12, 1.0 / 360, 1.0 / 1260, 1.0 / 1680, 1.0 / 1188


@njit(cache=True)
def _stirlerr(x):
    """log(x!) - log(sqrt(2 pi x) (x / e)^x), x >= 1."""
    if x <= 15.0:
        return math.lgamma(x + 1.0) - (x + 0.5) * math.log(x) + x - 0.5 * _LN_2PI
    x2 = x * x
    return (_S0 - (_S1 - (_S2 - (_S3 - _S4 / x2) / x2) / x2) / x2) / x


@njit(cache=True)
def _bd0(x, m):
    """x log(x / m) + m - x, stable when x ~ m."""
    if abs(x - m) < 0.1 * (x + m):
        v = (x - m) / (x + m)
        s = (x - m) * v
        ej = 2.0 * x * v
        v2 = v * v
        j = 1
        while True:
            ej *= v2
            s1 = s + ej / (2 * j + 1)
            if s1 == s:
                return s1
            s = s1
            j += 1
    return x * math.log(x / m) + m - x


@njit(cache=True)
def _log_binom_pmf(x, n, p, q):
    """log P(Binomial(n, p) = x), q = 1 - p given separately (both accurate)."""
    if x < 0 or x > n:
        return -math.inf
    if p <= 0.0:
        return 0.0 if x == 0 else -math.inf
    if q <= 0.0:
        return 0.0 if x == n else -math.inf
    if x == 0:
        return n * (math.log1p(-p) if p < 0.5 else math.log(q))
    if x == n:
        return n * (math.log(p) if p > 0.5 else math.log1p(-q))
    fx, fn = float(x), float(n)
    return (_stirlerr(fn) - _stirlerr(fx) - _stirlerr(fn - fx) - _bd0(fx, fn * p)
            - _bd0(fn - fx, fn * q) + 0.5 * math.log(fn / (2.0 * math.pi * fx * (fn - fx))))


@njit(cache=True)
def _log_choose(nn, m):
    """log C(nn, m) (accurate for nn up to ~1e15)."""
    if m < 0 or m > nn:
        return -math.inf
    if m == 0 or m == nn:
        return 0.0
    fn, fm = float(nn), float(m)
    if nn <= 30:
        return math.lgamma(fn + 1) - math.lgamma(fm + 1) - math.lgamma(fn - fm + 1)
    return (_stirlerr(fn) - _stirlerr(fm) - _stirlerr(fn - fm) + fm * math.log(fn / fm)
            - (fn - fm) * math.log1p(-fm / fn) + 0.5 * math.log(fn / (2.0 * math.pi * fm * (fn - fm))))


@njit(cache=True)
def _logaddexp(x, y):
    if x == -math.inf:
        return y
    if y == -math.inf:
        return x
    if x > y:
        return x + math.log1p(math.exp(y - x))
    return y + math.log1p(math.exp(x - y))


# ------------------------------------------------------------------------------ fixed point

@njit(cache=True)
def log_power_head(logg, n, k, out):
    """out[m] = log [z^m] g(z)^n, m = 0..k-1, for the pmf g (logs ``logg``, g_0 > 0), n >= k
    (Miller's recurrence, positive terms only)."""
    deg = logg.size - 1
    out[0] = n * logg[0]
    for m in range(1, k):
        acc = -math.inf
        for i in range(1, min(m, deg) + 1):
            if logg[i] == -math.inf or out[m - i] == -math.inf:
                continue
            acc = _logaddexp(acc, math.log((n + 1.0) * i - m) + logg[i] + out[m - i])
        out[m] = acc - math.log(m) - logg[0]


@njit(cache=True)
def _fixed_point_kernel(lam, one_minus_lam, k, d, eps, max_levels):
    n = k * d
    s = np.zeros(max_levels + 2)       # s[i] = s_i, s[0] = 1
    p = np.zeros(max_levels + 2)       # p[i] = s_i - s_{i+1}
    s[0] = 1.0
    s[1] = lam
    p[0] = one_minus_lam
    logf = np.empty(k)
    L = 1
    for m in range(2, max_levels + 2):
        # law of S_{m-2} below k: g = (s_{m-1}, p_{m-2}, ..., p_0)
        j = m - 2
        logg = np.empty(j + 2)
        if s[j + 1] > 0.5:   # log s_{j+1} = log(1 - p_0 - ... - p_j), accurate near 1
            cum = 0.0
            for i in range(j + 1):
                cum += p[i]
            logg[0] = math.log1p(-cum)
        else:
            logg[0] = math.log(s[j + 1])
        for x in range(1, j + 2):
            pr = p[j + 1 - x]
            logg[x] = math.log(pr) if pr > 0.0 else -math.inf
        log_power_head(logg, n, k, logf)
        acc = 0.0
        for t in range(k):
            if logf[t] > -745.0:
                acc += (k - t) * math.exp(logf[t])
        s[m] = lam * acc / k
        p[m - 1] = s[m - 1] - s[m]
        if s[m] < eps:
            s[m] = 0.0
            p[m - 1] = s[m - 1]
            return s[1:m].copy()
        L = m
    return s[1:L + 1].copy()


def _check(lam, k, d):
    _check_k_d(lam, k, d)


def fixed_point_large(lam: float, k: int, d: int, eps: float = TAIL_EPS,
                      max_levels: int = 100_000, one_minus_lam: float | None = None) -> np.ndarray:
    """The batch-filling fixed point s_1..s_L (s_{L+1} < eps set to 0) by the exact forward
    recursion ``s_m = (lam/k) E[(k - S_{m-2})^+]`` (module docstring). ``one_minus_lam``: pass
    ``1 - lam`` exactly when lam is within rounding of 1 (default ``1 - lam``)."""
    _check(lam, k, d)
    lam = float(lam)
    if lam == 0.0:
        return np.zeros(1)
    oml = 1.0 - lam if one_minus_lam is None else float(one_minus_lam)
    return _fixed_point_kernel(lam, oml, int(k), int(d), float(eps), int(max_levels))


# -------------------------------------------------------------------------------- job law

@njit(cache=True)
def _tilted(c, n, q, q1, k):
    return _log_binom_pmf(c, n, q, q1) + _log_choose(c - k, k)


@njit(cache=True)
def _tilted_top(n, q, q1, k):
    """The least c above the mode of f(c) = log[Bin(c; n, q) C(c - k, k)] (log-concave in c)
    with f(c) < max f - 60 (n if none). The summands C(c - k, a) Bin(c; n, q), a < k, have
    f_a - f decreasing in c and their modes lower, so they are below their maxima by more
    than 60 there too, and all decrease beyond it."""
    if 2 * k > n:
        return n
    lo, hi = 2 * k, n
    while hi - lo > 1:   # mode: last c with f(c + 1) > f(c)
        mid = (lo + hi) // 2
        if _tilted(mid + 1, n, q, q1, k) > _tilted(mid, n, q, q1, k):
            lo = mid
        else:
            hi = mid
    mode = hi if _tilted(hi, n, q, q1, k) > _tilted(lo, n, q, q1, k) else lo
    top = _tilted(mode, n, q, q1, k) - 60.0
    if _tilted(n, n, q, q1, k) >= top:
        return n
    lo, hi = mode, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _tilted(mid, n, q, q1, k) >= top:
            lo = mid
        else:
            hi = mid
    return hi


@njit(cache=True)
def _logK_table(n, q, q1, k):
    """(logK, short): logK[r, a] = log E[C(Z - r, a); Z >= r], Z ~ Binomial(n, q), r, a =
    0..k (q1 = 1 - q); short = 1 if a summand at the window's top edge was not negligible."""
    logK = np.full((k + 1, k + 1), -math.inf)
    if q1 <= 0.0:  # Z = n
        for r in range(k + 1):
            for a in range(k + 1):
                if n - r >= a:
                    logK[r, a] = _log_choose(n - r, a)
        return logK, 0
    if q <= 0.0:  # Z = 0
        logK[0, 0] = 0.0
        return logK, 0
    mean = n * q
    sd = math.sqrt(n * q * q1)
    # window of Z: Bin(n, q) tilted by C(Z - k, a), a <= k (log-concave summands)
    lo = max(0, int(mean - 12.0 * sd - 50.0))
    hi = min(n, int(mean + 12.0 * sd + 50.0))
    hi = max(hi, _tilted_top(n, q, q1, k))
    size = hi - lo + 1
    lp = np.empty(size)
    for i in range(size):
        lp[i] = _log_binom_pmf(lo + i, n, q, q1)
    # K(r, 0) = P(Z >= r): suffix sums (from the top, positive terms)
    mx = -math.inf
    for i in range(size):
        if lp[i] > mx:
            mx = lp[i]
    suffix = np.zeros(size + 1)
    for i in range(size - 1, -1, -1):
        suffix[i] = suffix[i + 1] + math.exp(lp[i] - mx)
    for r in range(k + 1):
        i = max(r - lo, 0)
        if i < size and suffix[i] > 0.0:
            logK[r, 0] = mx + math.log(suffix[i])
    short = 0
    if hi < n and lp[size - 1] > mx - 50.0:
        short = 1
    # seed row r = k: sum_c pmf(c) C(c - k, a) over the window, a = 0..k
    start = max(k - lo, 0)  # index of c = max(k, lo)
    m = size - start
    if m > 0:
        lt = np.empty(m)   # log pmf(c) + log C(c - k, a), c = lo + start + i
        for i in range(m):
            lt[i] = lp[start + i]
        for a in range(k + 1):
            if a > 0:
                for i in range(m):
                    x = lo + start + i - k - a + 1
                    if x > 0:
                        lt[i] += math.log(x / a)
                    else:
                        lt[i] = -math.inf
            mx2 = -math.inf
            for i in range(m):
                if lt[i] > mx2:
                    mx2 = lt[i]
            if mx2 == -math.inf:
                continue
            if hi < n and lt[m - 1] > mx2 - 50.0 and mx2 > mx - 700.0:
                short = 1
            acc = 0.0
            for i in range(m):
                v = lt[i] - mx2
                if v > -50.0:
                    acc += math.exp(v)
            logK[k, a] = mx2 + math.log(acc)
    for r in range(k - 1, -1, -1):
        for a in range(1, k + 1):
            logK[r, a] = _logaddexp(logK[r + 1, a], logK[r + 1, a - 1])
    return logK, short


@njit(cache=True)
def _small_log_choose(k):
    lcs = np.full((k + 1, k + 1), -math.inf)
    for r in range(k + 1):
        for x in range(r + 1):
            lcs[r, x] = math.lgamma(r + 1.0) - math.lgamma(x + 1.0) - math.lgamma(r - x + 1.0)
    return lcs


@njit(cache=True)
def _big_log_choose(n, k):
    out = np.empty(k)
    for c in range(k):
        out[c] = _log_choose(n, c)
    return out


@njit(cache=True)
def _end_layer(w, logK, lcn, lcs, k, logq, prune):
    """P[a, r] of the jobs ending on this layer, from the chain ``w[c', sigma]`` one layer
    below (P(a | c', r) = q^-c' C(r, c' - a) K(r, a) / C(n, c'), r = k - sigma)."""
    P = np.zeros((k, k + 1))
    for sigma in range(k):
        r = k - sigma
        for cp in range(sigma + 1):
            wv = w[cp, sigma]
            if wv < prune:
                continue
            base = math.log(wv) - cp * logq - lcn[cp]
            for a in range(max(0, cp - r), cp + 1):
                lk = logK[r, a]
                if lk == -math.inf:
                    continue
                P[a, r] += math.exp(base + lcs[r, cp - a] + lk)
    return P


@njit(cache=True)
def _step(w, n, q, q1, k, prune):
    """The chain (C_j, S_j), S_j < k, one layer up, in place; returns its remaining mass."""
    B = np.zeros((k, k))
    for c in range(k):
        for m in range(k - c):
            B[c, m] = math.exp(_log_binom_pmf(m, n - c, q, q1))
    new = np.zeros((k, k))
    for c in range(k):
        for sigma in range(c, k):
            wv = w[c, sigma]
            if wv < prune:
                continue
            for m in range(k - sigma - c):
                c2 = c + m
                new[c2, sigma + c2] += wv * B[c, m]
    total = 0.0
    for c in range(k):
        for t in range(k):
            w[c, t] = new[c, t]
            total += new[c, t]
    return total


def _layers(s, k, d, prune, one_minus_lam=None):
    """Yield (J, P_J[a, r]) for the layers J = 0, 1, ... on which jobs end."""
    s = np.ascontiguousarray(s, dtype=np.float64)
    if s.size > 1 and not np.all(np.diff(s) < 0):
        raise ValueError("the tail s must be strictly decreasing (a fixed point)")
    L = s.size
    n = k * d
    w = np.zeros((k, k))
    w[0, 0] = 1.0
    lcn = _big_log_choose(n, k)
    lcs = _small_log_choose(k)
    for J in range(L + 1):
        sJ = 1.0 if J == 0 else float(s[J - 1])
        sJ1 = float(s[J]) if J < L else 0.0
        q, q1 = (sJ - sJ1) / sJ, sJ1 / sJ
        if J == 0 and one_minus_lam is not None:
            q = float(one_minus_lam)     # 1 - s_1 = 1 - lam, exactly as given
        logK, short = _logK_table(n, q, q1, k)
        if short:
            raise RuntimeError(f"layer {J}: the window of Binomial({n}, {q}) was too short")
        yield J, _end_layer(w, logK, lcn, lcs, k, math.log(q), prune)
        if _step(w, n, q, q1, k, prune) < prune:
            return


def signature_law_large(s: np.ndarray, k: int, d: int, prune: float = PRUNE,
                        one_minus_lam: float | None = None) -> list:
    """``[P_0, P_1, ...]``, ``P_J[a, r]``: probability, at the tail ``s`` (s_1..s_L,
    s_{L+1} = 0), that a batch-filling job ends on layer J with ``a`` of its queues' last tasks
    at position J and ``r`` at J + 1 (``a + r`` distinct queues). Exact (module docstring) up
    to the pruning of chain states with mass below ``prune``; the sum of all entries is the
    captured mass. ``one_minus_lam``: ``1 - s_1`` exactly (default computed from s_1)."""
    return [P for _, P in _layers(s, int(k), int(d), float(prune), one_minus_lam)]


def _log_gamma_cdf(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """log P(Gamma(p, 1) <= t) (p >= 1)."""
    lower = special.gammainc(p, t)
    upper = special.gammaincc(p, t)
    with np.errstate(divide="ignore"):
        return np.where(lower > 0.5, np.log1p(-upper), np.log(lower))


class _Cdf:
    """Accumulates P(T <= t) on the quadrature nodes, one layer's law at a time."""

    def __init__(self, k: int, t_max: float):
        panels = int(math.ceil(t_max))
        self.t = (np.arange(panels)[:, None] + _GL_X[None, :]).ravel()
        self.wt = np.tile(_GL_W, panels)
        self.cdf = np.zeros(self.t.size)
        self.mass = 0.0

    def add(self, J: int, PJ: np.ndarray):
        self.mass += float(PJ.sum())
        nz_a = np.flatnonzero(PJ.any(axis=1))
        nz_r = np.flatnonzero(PJ.any(axis=0))
        if nz_a.size == 0:
            return
        a = np.arange(nz_a[0], nz_a[-1] + 1)
        r = np.arange(nz_r[0], nz_r[-1] + 1)
        box = PJ[a[0]:a[-1] + 1, r[0]:r[-1] + 1]
        lv = _log_gamma_cdf(float(J + 1), self.t)
        with np.errstate(invalid="ignore"):
            V = np.exp(np.where(r[:, None] == 0, 0.0, r[:, None] * lv[None, :]))
            if J == 0:
                U = np.ones((a.size, self.t.size))   # a = 0 only on layer 0
            else:
                lu = _log_gamma_cdf(float(J), self.t)
                U = np.exp(np.where(a[:, None] == 0, 0.0, a[:, None] * lu[None, :]))
        self.cdf += np.einsum("at,at->t", U, box @ V)

    def mean(self) -> float:
        return float(np.dot(self.wt, self.mass - self.cdf) / self.mass)


def _t_max(k: int, L: int) -> float:
    # P(T > t) <= k P(Gamma(L + 1) > t): every task sits at a position <= L + 1
    t = float(L + 11)
    while k * special.gammaincc(L + 1, t) > 1e-18:
        t += 5.0
    return t


def job_delay_exact(s: np.ndarray, k: int, d: int, prune: float = PRUNE,
                    one_minus_lam: float | None = None) -> tuple[float, float]:
    """(E[T], captured mass) of a batch-filling job at the tail ``s``: the exact integral over
    the job's signature law (module docstring), one layer at a time, no Monte Carlo.
    ``1 - mass`` bounds the probability the truncations dropped (measured |1 - mass| <= 5e-12
    on the sub_halfin_whitt path, N = 10^2..10^15)."""
    s = np.asarray(s, dtype=np.float64)
    acc = _Cdf(int(k), _t_max(int(k), s.size + 1))
    for J, PJ in _layers(s, int(k), int(d), float(prune), one_minus_lam):
        acc.add(J, PJ)
    return acc.mean(), acc.mass


def queueing_ratio(lam: float, k: int, d: int, one_minus_lam: float | None = None) -> dict:
    """Mean-field batch-filling at (lam, k, d): ``{"s", "mean_response", "queueing_ratio",
    "mass"}``, ratio ``(E[T] - H_k) / H_k`` (H_k = E[max of k Exp(1)])."""
    s = fixed_point_large(lam, k, d, one_minus_lam=one_minus_lam)
    hk = harmonic(int(k))
    if float(lam) == 0.0:
        return {"s": s, "mean_response": hk, "queueing_ratio": 0.0, "mass": 1.0}
    et, mass = job_delay_exact(s, k, d, one_minus_lam=one_minus_lam)
    return {"s": s, "mean_response": et, "queueing_ratio": (et - hk) / hk, "mass": mass}
