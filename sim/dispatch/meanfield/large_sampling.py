"""Batch-sampling mean field at large k and d (k ~ 10^3, kd ~ 10^7): exact E[T] of a job.

Model and notation as in :mod:`sim.dispatch.meanfield.tasks`: a job of ``k`` tasks probes
``n = k d`` queues with i.i.d. lengths, ``P(Q >= i) = s_i`` (the fixed point
:func:`sim.dispatch.meanfield.tasks.bs_fixed_point`, ``s_0 = 1``, ``s_{L+1} = 0``), and puts one
task on each of the k shortest; the job's response is ``T = max`` over its tasks of independent
``Gamma(position, 1)``.

Chain over the levels
---------------------
``sigma`` = tasks placed at positions ``<= j`` (``sigma < k``); the ``n - sigma`` probes not
yet used all have length ``>= j`` and ``C ~ Binomial(n - sigma, q_j)`` of them have length
exactly ``j``, ``q_j = (s_j - s_{j+1}) / s_j`` (``1 - q_j = s_{j+1} / s_j`` used as is;
``q_L = 1``). If ``C >= r = k - sigma`` the last r tasks take position ``j + 1`` and the job is
done, else ``C`` tasks take position ``j + 1`` and ``sigma += C``. For each quadrature node t
the chain carries, per ``sigma``,

    P(sigma)      probability of the state,
    W(sigma, t) = E[1{state} prod over placed tasks of F_pos(t)],
    D(sigma, t) = E[1{state} (F_1(t)^sigma - prod over placed tasks of F_pos(t))]  (>= 0),

``F_p`` the Gamma(p, 1) CDF. Placing c tasks at position p = j + 1 maps (W, D) to
``(W F_p^c, D F_1^c + W (F_1^c - F_p^c))`` times ``Bin(c; n - sigma, q_j)``, and a completing
state adds ``P(C >= r) (D F_1^r + W (F_1^r - F_p^r))`` to the excess ``X(t) = F_1(t)^k -
P(T <= t)`` (times the captured mass). Hence

    E[T] = H_k + int_0^inf X(t) dt / mass,   (E[T] - H_k) / H_k = int X / (mass H_k),

``H_k = E[max of k Exp(1)]``, with only sums of non-negative terms: the queueing ratio keeps
its relative precision however small it is (no ``1 - P(T <= t)`` near 0 is ever formed).
``F_1^c - F_p^c = F_1^c (-expm1(c log(F_p / F_1)))`` with ``log(F_p / F_1) =
log1p(-delta_p / F_1)``, ``delta_p = F_1 - F_p = P(1 <= Poisson(t) <= p - 1)`` summed term by
term (or the difference of the two log CDFs once ``F_p <= F_1 / 2``); all powers as
``exp(c log F)`` of accurate log CDFs (:func:`large_batch._log_gamma_cdf`).

Truncations
-----------
Binomial pmfs by Loader's saddle point (:func:`large_batch._log_binom_pmf`, ~1e-15 relative
for n ~ 10^8) on the window ``mean +- (12 sd + 50)`` of C, cut to ``c < r``; ``P(C >= r)`` is
``1 - P(C < r)`` when ``P(C < r) < 1/2`` and else summed directly over the window (then
``r`` is above the median and the window above r is short), so probability is conserved up
to rounding. States and transitions whose probability is below ``PRUNE`` (1e-26) are dropped
(at most k per level); the captured mass (``mass``) is reported and the integral is divided
by it. The integral: 16-point Gauss-Legendre on unit panels (``large_batch._GL_X/_GL_W``) on
``[0, t_max]``, ``k P(Gamma(L + 1) > t_max) < 1e-18`` (:func:`large_batch._t_max`: every task
is at a position ``<= L + 1``). Cost per level: (states) x (window of C) x (nodes), in numba.

Measured (here, 2 cores)
------------------------
* Agreement with :class:`tasks.BatchSamplingLaw` ``.mean()`` to <= 6.6e-15 relative on the
  grid lam = 0.5, 0.7, 0.9, 0.95 x k = 2..8 x d = 1..4, and with
  :func:`tasks.bs_signature_mixture` to <= 3.1e-15 (d >= 2); closed forms (d = 1: k M/M/1
  queues; k = 1: power-of-d) to ~1e-12 (the tail's own truncation at 1e-16).
* On the sub_halfin_whitt path (alpha = 0.3, N = 10^2..10^15, k <= 1193, kd <= 2.1e7): the
  summed program agrees to <= 1e-13 at kd <= 400, but its gap grows with kd (4e-12 at
  kd = 9359, 1.1e-10 at 1.4e5, 4.4e-9 at 2.1e7): its pmfs, ``Bin(m - c; m, 1 - q_j)`` by
  gammaln, are 1e-10 off at n ~ 10^5 and 2e-8 to 5e-8 at n = 2.1e7 (against mpmath; scipy's
  ``binom.logpmf`` patched in is no better there, 2e-8). At N = 10^12 and 10^15 (rule c4:
  jobs end on levels 0-1), an independent sum over
  the level-0 count with mpmath pmfs and :func:`sim.core.jobdelay.expected_max_gamma` agrees
  to 1.6e-15 relative.
* 32-point panels change E[T] by <= 1.2e-15 relative (the excess by <= 3.8e-15); prune = 0
  and windows of 20 sd + 100 change nothing (bitwise); |1 - mass| <= 2e-15 on the path.
* Time per point on the path (half-decades, rules c1, c4, c1_loglog, const2, single_task):
  <= 1.1 s warm (const2 at N = 10^15: 16 levels, 2386 probes), <= 0.1 s for the d rules; a
  first call in a fresh process with a cold numba cache adds ~3-4 s of compiling. The cost grows
  as levels^2 (the nodes grow with the levels): d = 1 at lam = 0.95, k = 8 (719 levels) takes
  ~7 s, d = 1 at lam = 0.9, k = 1193 ~1 minute; ``(k + 1) x nodes > MAX_CELLS`` raises.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.core.jobdelay import harmonic
from sim.dispatch.meanfield.large_batch import _GL_W, _GL_X, _log_binom_pmf, _log_gamma_cdf, _t_max

__all__ = ["PRUNE", "job_excess_exact", "job_delay_exact", "queueing_ratio"]

#: chain states and transitions with probability below this are dropped (reported in mass)
PRUNE = 1e-26
#: half-width of the window of a binomial, in standard deviations, plus a constant
_WIN_SD, _WIN_ADD = 12.0, 50.0
#: largest (k + 1) x (quadrature nodes) of one state array (7 are live at once)
MAX_CELLS = 20_000_000


@njit(cache=True)
def _rows(c, lf, lf1, lr, G, E, H):
    """Row c of the tables G = F_p^c, E = F_1^c, H = F_1^c - F_p^c (c >= 1)."""
    for i in range(lf.size):
        e = math.exp(c * lf1[i])
        G[c, i] = math.exp(c * lf[i])
        E[c, i] = e
        H[c, i] = e * -math.expm1(c * lr[i])


@njit(cache=True)
def _level(W, D, P, lo, hi, n, k, q, q1, lf, lf1, lr, prune, exc):
    """One level of the chain (module docstring) for the states sigma = lo..hi; adds the
    completing jobs to ``exc``. Returns (W', D', P', lo', hi', completed mass, dropped mass)."""
    T = lf.size
    W2 = np.zeros((k, T))
    D2 = np.zeros((k, T))
    P2 = np.zeros(k)
    G = np.empty((k + 1, T))
    E = np.empty((k + 1, T))
    H = np.empty((k + 1, T))
    have = np.zeros(k + 1, dtype=np.bool_)
    for i in range(T):
        G[0, i] = 1.0
        E[0, i] = 1.0
        H[0, i] = 0.0
    have[0] = True
    done = 0.0
    dropped = 0.0
    lo2, hi2 = k, -1
    for sigma in range(lo, hi + 1):
        ps = P[sigma]
        if ps <= 0.0:
            continue
        if ps < prune:
            dropped += ps
            continue
        m = n - sigma
        r = k - sigma
        mean = m * q
        half = _WIN_SD * math.sqrt(m * q * q1) + _WIN_ADD
        clo = max(0, int(mean - half))
        chi = min(m, int(mean + half) + 1)
        lower = 0.0
        for c in range(clo, min(r - 1, chi) + 1):
            b = math.exp(_log_binom_pmf(c, m, q, q1))
            lower += b
            wgt = ps * b
            if wgt < prune:
                dropped += wgt
                continue
            if not have[c]:
                _rows(c, lf, lf1, lr, G, E, H)
                have[c] = True
            s2 = sigma + c
            P2[s2] += wgt
            lo2 = min(lo2, s2)
            hi2 = max(hi2, s2)
            w_in, d_in = W[sigma], D[sigma]
            w_out, d_out = W2[s2], D2[s2]
            g, e, h = G[c], E[c], H[c]
            for i in range(T):
                w_out[i] += b * (w_in[i] * g[i])
                d_out[i] += b * (d_in[i] * e[i] + w_in[i] * h[i])
        if lower < 0.5:
            pr = 1.0 - lower
        else:
            pr = 0.0
            for c in range(max(r, clo), chi + 1):
                pr += math.exp(_log_binom_pmf(c, m, q, q1))
            dropped += ps * max(0.0, 1.0 - lower - pr)
        if pr <= 0.0:
            continue
        if not have[r]:
            _rows(r, lf, lf1, lr, G, E, H)
            have[r] = True
        done += ps * pr
        w_in, d_in = W[sigma], D[sigma]
        e, h = E[r], H[r]
        for i in range(T):
            exc[i] += pr * (d_in[i] * e[i] + w_in[i] * h[i])
    return W2, D2, P2, lo2, hi2, done, dropped


def _check(s, k, d):
    for name, v in (("k", k), ("d", d)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}={v!r} must be an integer >= 1")
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("the tail s must be a non-empty 1-d array (s_1..s_L)")
    if not (np.all(np.isfinite(s)) and np.all(s >= 0.0) and np.all(s <= 1.0)):
        raise ValueError("the tail s must lie in [0, 1]")
    if s.size > 1 and not np.all(np.diff(s) <= 0.0):
        raise ValueError("the tail s must be non-increasing (a fixed point)")
    return np.ascontiguousarray(s), int(k), int(d)


def job_excess_exact(s, k: int, d: int, prune: float = PRUNE, one_minus_lam: float | None = None,
                     panels: tuple | None = None) -> tuple[float, float]:
    """``(E[T] - H_k, mass)`` of a batch-sampling job at the tail ``s`` = s_1..s_L: the exact
    chain over the levels (module docstring), no Monte Carlo. ``one_minus_lam``: ``1 - s_1``
    exactly (default computed from s_1); ``panels``: ``(x, w)`` Gauss-Legendre nodes and
    weights on [0, 1] (default 16 points)."""
    s, k, d = _check(s, k, d)
    n = k * d
    L = s.size
    gl_x, gl_w = (_GL_X, _GL_W) if panels is None else panels
    pn = int(math.ceil(_t_max(k, L)))
    t = (np.arange(pn)[:, None] + np.asarray(gl_x)[None, :]).ravel()
    wt = np.tile(np.asarray(gl_w), pn)
    T = t.size
    if (k + 1) * T > MAX_CELLS:
        raise ValueError(f"k={k} with {L} levels needs {T} quadrature nodes: (k + 1) x nodes > {MAX_CELLS} "
                         "(the chain's arrays would not fit; such tails come from d = 1 at high load)")
    lf1 = np.log(-np.expm1(-t))         # log F_1(t)
    f1 = -np.expm1(-t)
    logt = np.log(t)
    delta = np.zeros(T)                  # F_1 - F_p = P(1 <= Poisson(t) <= p - 1)
    exc = np.zeros(T)
    W = np.zeros((k, T))
    W[0] = 1.0
    D = np.zeros((k, T))
    P = np.zeros(k)
    P[0] = 1.0
    lo = hi = 0
    mass = dropped = 0.0
    sl = np.concatenate(([1.0], s, [0.0]))
    for j in range(L + 1):
        sj, sj1 = sl[j], sl[j + 1]
        if sj <= 0.0:
            q, q1 = 1.0, 0.0
        else:
            q, q1 = (sj - sj1) / sj, sj1 / sj
        if j == 0 and one_minus_lam is not None:
            q = float(one_minus_lam)
        if j >= 1:
            delta += np.exp(j * logt - t - math.lgamma(j + 1.0))
        lf = lf1 if j == 0 else _log_gamma_cdf(float(j + 1), t)
        x = delta / f1
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.where(x < 0.5, np.log1p(-np.minimum(x, 0.5)), lf - lf1)
        W, D, P, lo, hi, done, drop = _level(W, D, P, lo, hi, n, k, float(q), float(q1), lf, lf1, lr, float(prune), exc)
        mass += done
        dropped += drop
        if hi < lo or float(P[lo:hi + 1].sum()) < prune:
            dropped += float(P[lo:hi + 1].sum()) if hi >= lo else 0.0
            break
    if mass <= 0.0:
        raise RuntimeError("no job completed: the chain lost all its mass")
    return float(np.dot(wt, exc)) / mass, mass


def job_delay_exact(s, k: int, d: int, prune: float = PRUNE,
                    one_minus_lam: float | None = None) -> tuple[float, float]:
    """``(E[T], captured mass)`` of a batch-sampling job at the tail ``s`` (s_1..s_L,
    s_{L+1} = 0): ``H_k +`` :func:`job_excess_exact`. ``1 - mass`` is the probability the
    truncations dropped."""
    excess, mass = job_excess_exact(s, k, d, prune, one_minus_lam)
    return float(harmonic(int(k))) + excess, mass


def queueing_ratio(lam: float, k: int, d: int) -> dict:
    """Mean-field batch-sampling at (lam, k, d): ``{"s", "mean_response", "queueing_ratio",
    "mass"}`` at :func:`sim.dispatch.meanfield.tasks.bs_fixed_point`."""
    from sim.dispatch.meanfield.tasks import bs_fixed_point

    s = bs_fixed_point(lam, k, d)
    _check(s, k, d)
    hk = float(harmonic(int(k)))
    if float(lam) == 0.0:
        return {"s": s, "mean_response": hk, "queueing_ratio": 0.0, "mass": 1.0}
    excess, mass = job_excess_exact(s, k, d)
    return {"s": s, "mean_response": hk + excess, "queueing_ratio": excess / hk, "mass": mass}
