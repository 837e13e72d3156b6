r"""Refined mean field of batch-filling at fixed k and d: ``E[s] = x* + V / N`` (docs/refined.md).

Model (:mod:`sim.dispatch.meanfield.batch_filling`): jobs of ``k`` tasks at rate ``N lam / k``
sample ``m = k d`` distinct servers and water-fill: each task in turn joins a currently shortest
sampled queue (ties uniform, whether the job already used it or not).

A job's effect depends only on the *histogram* ``n = (n_0, .., n_L)`` of the sampled queues'
lengths (``n_l`` sampled queues with exactly ``l`` tasks; the tail is cut at ``L``,
``s_{L+1} = 0``).  Water-filling a histogram gives ``A_j(n)``, the tasks that raise a queue from
``j`` to ``j + 1``, so the job moves the tail by ``a(n) / N`` with ``a(n)_i = A_{i-1}(n)``.  All
histograms of ``m`` samples over ``L + 1`` levels are enumerated (``C(m + L, m)``; e.g. 20475
for ``k = d = 2``, ``L = 24``), with their probabilities:

* limit (i.i.d. lengths): multinomial, ``m! / prod n_l! prod q_l^{n_l}``, ``q_l = s_l - s_{l+1}``;
* ``N`` servers, ``m`` distinct samples: multivariate hypergeometric
  ``prod_l C(N q_l, n_l) / C(N, m) = m!/prod n_l! prod_l prod_{t<n_l} (q_l - t/N) / prod_{t<m} (1 - t/N)``,
  whose 1/N part is the multinomial times ``m(m-1)/2 - sum_l n_l (n_l - 1) / (2 q_l)`` (written
  without the division: ``d/d eps prod_{t<n}(q - t eps) = -(n(n-1)/2) q^{n-1}`` at ``eps = 0``).

Then (services as for ``pod``: ``-e_i`` at rate ``s_i - s_{i+1}``)::

    f_i = (lam / k) E[A_{i-1}] - (s_i - s_{i+1}),   f1_i = (lam / k) E1[A_{i-1}],
    Q = (lam / k) E[a a^T] + diag(s_i - s_{i+1}),

``E`` over the multinomial, ``E1`` its 1/N part.  ``A`` and ``B : W`` by central finite
differences of ``f`` (Jacobian step 1e-6; Hessian along the eigenvectors of ``W``, Richardson
on steps 1e-3 and 2e-3, exact for the polynomial degree ``m <= 5`` and O(h^4) above); the tests
check them with other steps, check ``f`` against the dynamic program of
:mod:`sim.dispatch.meanfield.batch_filling`, ``f1`` against a difference in ``eps = 1/N`` of the
exact finite-N drift, and ``k = 1`` against :mod:`sim.dispatch.refined` (pod).

Per-job quantities are smooth functions of the state, ``g(s) = E[G(n) | s]``, so by PASTA
``E[g(X)] = g(x*) + (Dg V + (1/2) tr(D^2 g W) + g1) / N`` (derivatives by finite differences,
``g1`` from the hypergeometric 1/N part): the job's mean response ``G(n) = E[max_i Gamma(p_i, 1)]``
over its queues' final positions, averaged exactly over the uniform tie-breaking; the
probability that a job waits (``n_0 < k``); the mean task wait ``sum_j j A_j / k``.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.jobdelay import expected_job_delay, harmonic
from sim.core.refined import CI_METHOD, refined_expansion
from sim.core.results import exact_row
from sim.core.settings import RunSettings
from sim.dispatch.meanfield import batch_filling as bmf
from sim.dispatch.policies import policy_of

__all__ = ["BatchRefined", "Histograms", "histograms", "batch_refined", "drift", "drift_1n",
           "drift_exact", "noise", "run_task", "TAIL_EPS", "TRUNC_EXTRA", "MAX_SAMPLES"]

TAIL_EPS = 1e-12
TRUNC_EXTRA = 4
#: largest k d enumerated (the histograms number C(kd + L, kd))
MAX_SAMPLES = 8


class Histograms(NamedTuple):
    counts: np.ndarray  #: (H, L+1) sampled queues per level
    coef: np.ndarray  #: m! / prod n_l!
    flows: np.ndarray  #: (H, L) a(n)_i = A_{i-1}(n), i = 1..L (A_L dropped: truncation)
    delay: np.ndarray  #: E[job response | n] (ties averaged)
    waits: np.ndarray  #: 1 if some task waits (n_0 < k)
    task_wait: np.ndarray  #: sum_j j A_j / k


@functools.lru_cache(maxsize=4096)
def _fill_delay(state: tuple, left: int) -> float:
    """E[job response] of water-filling ``left`` more tasks; ``state`` = sorted ((length, used))."""
    if left == 0:
        pos = [ln for ln, used in state if used]
        return expected_job_delay(pos)
    low = min(ln for ln, _ in state)
    at = [i for i, (ln, _) in enumerate(state) if ln == low]
    n_used = sum(1 for i in at if state[i][1])
    n_fresh = len(at) - n_used
    out = 0.0
    for flag, cnt in ((True, n_used), (False, n_fresh)):
        if cnt == 0:
            continue
        i = next(i for i in at if state[i][1] == flag)
        new = list(state)
        new[i] = (low + 1, True)
        out += cnt / len(at) * _fill_delay(tuple(sorted(new)), left - 1)
    return out


@functools.lru_cache(maxsize=16)
def histograms(k: int, d: int, levels: int) -> Histograms:
    """Every histogram of ``m = k d`` sampled lengths over levels ``0..levels``."""
    m, L = k * d, levels
    rows, coefs, flows, delay, waits, tw = [], [], [], [], [], []
    for combo in itertools.combinations_with_replacement(range(L + 1), m):
        c = np.bincount(combo, minlength=L + 1)
        lengths = sorted(combo)
        a = np.zeros(L + 1)
        q = list(lengths)
        for _ in range(k):  # water-filling: the histogram's flows do not depend on ties
            j = int(np.argmin(q))
            a[q[j]] += 1
            q[j] += 1
        rows.append(c)
        coefs.append(math.factorial(m) / math.prod(math.factorial(int(v)) for v in c))
        flows.append(a[:L])
        delay.append(_fill_delay(tuple((ln, False) for ln in lengths), k))
        waits.append(1.0 if c[0] < k else 0.0)
        tw.append(float(np.dot(np.arange(L + 1), a)) / k)
    return Histograms(np.array(rows), np.array(coefs), np.array(flows), np.array(delay),
                      np.array(waits), np.array(tw))


def _q(s):
    se = np.concatenate(([1.0], np.asarray(s, dtype=float), [0.0]))
    return se[:-1] - se[1:]  # q_l, l = 0..L


def _probs(hist: Histograms, s, eps: float = 0.0) -> np.ndarray:
    """Probabilities of the histograms at tail ``s``: multinomial (``eps = 0``) or hypergeometric
    with ``eps = 1/N`` (a rational function of eps, defined for eps < 0 too)."""
    q = _q(s)
    c = hist.counts
    m = int(c[0].sum())
    p = hist.coef.copy()
    for t in range(m):
        fac = np.where(c > t, q[None, :] - t * eps, 1.0)
        p *= np.prod(fac, axis=1) / (1.0 - t * eps)
    return p


def _probs_1n(hist: Histograms, s) -> np.ndarray:
    """The 1/N part of the hypergeometric probabilities."""
    q = _q(s)
    c = hist.counts.astype(float)
    m = int(hist.counts[0].sum())
    base = hist.coef * np.prod(np.where(c > 0, q[None, :] ** c, 1.0), axis=1)
    # d/d eps of prod_l prod_{t<n_l}(q_l - t eps): sum_l [-(n_l(n_l-1)/2) q_l^(n_l-1) prod_{l'!=l} q^n]
    corr = np.zeros(c.shape[0])
    for lv in range(c.shape[1]):
        nl = c[:, lv]
        other = np.prod(np.where((c > 0) & (np.arange(c.shape[1])[None, :] != lv),
                                 q[None, :] ** c, 1.0), axis=1)
        corr += -(nl * (nl - 1) / 2.0) * np.where(nl >= 1, q[lv] ** np.maximum(nl - 1, 0), 0.0) * other
    return hist.coef * corr + base * m * (m - 1) / 2.0


def _services(s):
    s = np.asarray(s, dtype=float)
    return s - np.append(s[1:], 0.0)


def drift(s, lam, k, d, hist: Histograms | None = None) -> np.ndarray:
    hist = histograms(k, d, np.size(s)) if hist is None else hist
    return lam / k * (_probs(hist, s) @ hist.flows) - _services(s)


def drift_exact(s, lam, k, d, n: float, hist: Histograms | None = None) -> np.ndarray:
    """The exact drift with ``N = n`` servers (``k d`` distinct samples)."""
    hist = histograms(k, d, np.size(s)) if hist is None else hist
    return lam / k * (_probs(hist, s, 1.0 / n) @ hist.flows) - _services(s)


def drift_1n(s, lam, k, d, hist: Histograms | None = None) -> np.ndarray:
    hist = histograms(k, d, np.size(s)) if hist is None else hist
    return lam / k * (_probs_1n(hist, s) @ hist.flows)


def noise(s, lam, k, d, hist: Histograms | None = None) -> np.ndarray:
    hist = histograms(k, d, np.size(s)) if hist is None else hist
    p = _probs(hist, s)
    a = hist.flows
    return lam / k * (a.T * p) @ a + np.diag(_services(s))


def _fd_jacobian(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)]).T


def _fd_second(f, x, u, h):
    """``D^2 f[u, u]``, Richardson on steps h and 2h."""
    def c(hh):
        return (f(x + hh * u) - 2 * f(x) + f(x - hh * u)) / hh**2
    return (4 * c(h) - c(2 * h)) / 3


def _contract(f, x, w, h=1e-3):
    mu, u = np.linalg.eigh(w)
    return sum(mu[i] * _fd_second(f, x, u[:, i], h) for i in range(mu.size))


class BatchRefined(NamedTuple):
    x: np.ndarray
    v: np.ndarray
    w: np.ndarray
    a: np.ndarray
    f1: np.ndarray
    levels: int
    trunc_change: float


def _levels(lam, k, d):
    s = bmf.fixed_point(lam, k, d)
    below = np.nonzero(s <= TAIL_EPS * s[0])[0]
    L = (int(below[0]) + 1 if below.size else s.size) + TRUNC_EXTRA
    return max(L, 2), s


def _expansion(lam, k, d, L, s0):
    hist = histograms(k, d, L)
    x = np.zeros(L)
    m = min(L, s0.size)
    x[:m] = s0[:m]
    for _ in range(20):  # Newton on the truncated drift, Jacobian by differences
        f = drift(x, lam, k, d, hist)
        if np.max(np.abs(f)) < 1e-15:
            break
        x = x - solve(_fd_jacobian(lambda y: drift(y, lam, k, d, hist), x), f)
    a = _fd_jacobian(lambda y: drift(y, lam, k, d, hist), x)
    q = noise(x, lam, k, d, hist)
    f1 = drift_1n(x, lam, k, d, hist)
    v, w = refined_expansion(x, a, lambda ww: _contract(lambda y: drift(y, lam, k, d, hist), x, ww), q, f1)
    return x, v, w, a, f1, hist


def batch_refined(lam: float, k: int, d: int, levels: int | None = None,
                  check_truncation: bool = True) -> BatchRefined:
    """The refined expansion of batch-filling (``k d <= MAX_SAMPLES``)."""
    bmf._check(lam, k, d)
    if k * d > MAX_SAMPLES:
        raise ValueError(f"k*d={k * d}: the refined batch-filling enumerates histograms of k d "
                         f"samples, at most {MAX_SAMPLES}")
    POSITIVE_LOAD_BELOW_ONE.check("lam", lam)
    L0, s0 = _levels(lam, k, d)
    L = L0 if levels is None else int(levels)
    x, v, w, a, f1, _ = _expansion(lam, k, d, L, s0)
    change = math.nan
    if check_truncation:
        _, v2, *_ = _expansion(lam, k, d, L + TRUNC_EXTRA, s0)
        change = abs(float(v2.sum() - v.sum()))
    return BatchRefined(x, v, w, a, f1, L, change)


def _expect(e: BatchRefined, hist: Histograms, values: np.ndarray, n: int) -> float:
    """``E[g(X)]`` to first order, ``g(s) = sum_n P(n | s) values[n]``."""
    def g(y):
        return np.atleast_1d(_probs(hist, y) @ values)

    x = e.x
    g0 = float(g(x)[0])
    dg = _fd_jacobian(g, x)[0]
    quad = float(_contract(g, x, e.w)[0])
    g1 = float(_probs_1n(hist, x) @ values)
    return g0 + (float(dg @ e.v) + 0.5 * quad + g1) / n


def run_task(task: dict) -> dict:
    """Refined values of a ``batch_filling`` task at its ``n_servers`` (fixed ``k``, ``d``)."""
    pol = policy_of(task)
    if not pol.fills:
        raise ValueError(f"policy={pol.name!r}: this runner serves batch-filling")
    if task.get("b") is not None:
        raise ValueError("b: the refined batch-filling has no finite buffer")
    lam, k, d = float(task["lam"]), int(task.get("k") or 1), int(task["d"])
    n = int(task["n_servers"])
    settings = RunSettings.from_task(task)
    max_level, h = settings.max_level, settings.h
    e = batch_refined(lam, k, d)
    hist = histograms(k, d, e.levels)
    tail = np.zeros(max_level)
    m = min(max_level, e.levels)
    tail[:m] = (e.x + e.v / n)[:m]
    v_sum = float(e.v.sum())
    mean_t = _expect(e, hist, hist.delay, n)
    mean_wait = _expect(e, hist, hist.task_wait, n)
    p_wait = _expect(e, hist, hist.waits, n)
    if h == 1:
        within = 1.0 - p_wait
    else:  # all tasks at positions <= h: water-filling used only levels < h
        within = _expect(e, hist, (hist.flows[:, h:].sum(axis=1) == 0).astype(float), n)
    hk = harmonic(k)
    row = exact_row(mean_response=mean_t, mean_wait=mean_wait, prob_wait=p_wait,
                    mean_queue=float(e.x.sum()) + v_sum / n, tail=tail,
                    queueing_ratio=(mean_t - hk) / hk, drop_prob=0.0, frac_within_h=within,
                    messages_per_job=pol.messages(n, k, d), ci_method=CI_METHOD)
    return {**row, "mean_queue_1n": v_sum}
