"""Mean-field limit of batch-filling for k-task jobs with fixed k and d (Ying, Srikant & Kang).

Model: N servers, FIFO, Exp(1) service; jobs of k tasks arrive at rate ``N lam / k``; each
samples ``k d`` servers and places its tasks one by one, each into the currently shortest
sampled queue (batch-filling, "water-filling"). As N -> infinity with k and d fixed, the
sampled queues have i.i.d. lengths with ``P(Q >= i) = s_i`` and the tail obeys

    ds_i/dt = (lam / k) E[A_{i-1}(s)] - (s_i - s_{i+1}),   i >= 1,  s_0 = 1,

where ``A_j`` is the number of the job's tasks that raise a sampled queue from length j to
j + 1. Water-filling fills layer after layer: with ``C_j`` = number of sampled queues of
length <= j (Binomial(kd, 1 - s_{j+1})) and ``T_j = min(k, C_0 + ... + C_j)`` the tasks used
by the layers up to j, ``A_j = min(C_j, k - T_{j-1})``. ``(C_j, T_j)`` is a Markov chain in j
(``C_{j+1} = C_j + Binomial(kd - C_j, (s_{j+1} - s_{j+2}) / s_{j+1})``), so ``E[A_j]`` comes
from an exact dynamic program over its (kd + 1)(k + 1) states (:func:`_layer_flows`).
With k = 1 this is the power-of-d (supermarket) ODE. (Ying, Srikant and Kang, "The power of
slightly more than one sample in randomized load balancing", 2015, derive this limit.)

The same program gives, exactly at the fixed point: the probability that a job waits (some
task at position >= 2: ``T_0 < k``), the fraction of jobs whose tasks all land at positions
<= h (``T_{h-1} >= k``), and the mean task wait (a task on layer j waits for j services).
Its (kd + 1)(k + 1) states limit it to small kd; the engine's rows (:func:`run_task`) come
from :mod:`sim.dispatch.meanfield.large_batch` instead, exact at every k and d: the fixed
point by a forward recursion and E[T] = E[max over the job's queues of Gamma(final length,
1)] as an integral over the job's signature law. :func:`mean_job_delay` (Monte Carlo over
arrivals at the fixed point) and :func:`job_signature_law` (enumeration at small kd) are the
independent routes the tests check it against.

The ODE is truncated at a level L where the fixed-point tail is below 1e-15 (L is doubled until
it is), and solved with scipy's BDF; the fixed point by Newton's method (scipy.optimize.root)
from the ODE's state at a long time.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.integrate import solve_ivp
from scipy.optimize import root

from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma, harmonic
from sim.core.results import exact_row
from sim.core.settings import RunSettings
from sim.dispatch.meanfield._common import _check_k_d
from sim.dispatch.policies import only

TAIL_EPS = 1e-15
MC_JOBS = 40_000
CI_METHOD = "mean field (N = infinity): exact (tail, E[T] over the job signature law)"


@njit(cache=True)
def _binom_pmf_row(n, q, out):
    """out[m] = P(Binomial(n, q) = m), m = 0..n (stable recursion in logs)."""
    for m in range(out.size):
        out[m] = 0.0
    if q <= 0.0:
        out[0] = 1.0
        return
    if q >= 1.0:
        out[n] = 1.0
        return
    lq, l1q = math.log(q), math.log1p(-q)
    for m in range(n + 1):
        out[m] = math.exp(math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1) + m * lq + (n - m) * l1q)


@njit(cache=True)
def _layer_flows(s, k, d, h):
    """(E[A_j] for j = 0..L-1, P(T_0 < k), P(T_{h-1} >= k)) for the tail ``s`` = s_1..s_L."""
    L = s.size
    n = k * d
    flows = np.zeros(L)
    # distribution over (C, T): prob[c, t]
    prob = np.zeros((n + 1, k + 1))
    new = np.zeros((n + 1, k + 1))
    pmf = np.zeros(n + 1)
    # layer 0: C_0 ~ Binomial(n, 1 - s_1)
    _binom_pmf_row(n, 1.0 - s[0], pmf)
    for c in range(n + 1):
        a = min(c, k)
        flows[0] += pmf[c] * a
        prob[c, min(k, c)] += pmf[c]
    p_wait = 0.0
    for c in range(n + 1):
        for t in range(k):
            p_wait += prob[c, t]
    p_within = 1.0 if h == 0 else -1.0
    if h == 1:
        p_within = 0.0
        for c in range(n + 1):
            p_within += prob[c, k]
    for j in range(1, L):
        s_j = s[j - 1]                       # P(Q >= j)
        s_j1 = s[j] if j < L else 0.0        # P(Q >= j + 1)
        q = 0.0 if s_j <= 0.0 else (s_j - s_j1) / s_j
        if q > 1.0:
            q = 1.0
        for c in range(n + 1):
            for t in range(k + 1):
                new[c, t] = 0.0
        for c in range(n + 1):
            row_mass = 0.0
            for t in range(k + 1):
                row_mass += prob[c, t]
            if row_mass == 0.0:
                continue
            _binom_pmf_row(n - c, q, pmf)
            for m in range(n - c + 1):
                w = pmf[m]
                if w == 0.0:
                    continue
                c2 = c + m
                for t in range(k + 1):
                    pt = prob[c, t]
                    if pt == 0.0:
                        continue
                    a = min(c2, k - t)
                    flows[j] += w * pt * a
                    new[c2, min(k, t + c2)] += w * pt
        prob, new = new, prob
        if j == h - 1:
            p_within = 0.0
            for c in range(n + 1):
                p_within += prob[c, k]
    return flows, p_wait, p_within


def drift(s: np.ndarray, lam: float, k: int, d: int) -> np.ndarray:
    """ds/dt of the truncated system (s = s_1..s_L, s_{L+1} = 0)."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    flows, _, _ = _layer_flows(s, k, d, 0)
    below = np.append(s[1:], 0.0)
    return lam / k * flows - (s - below)


def _check(lam, k, d):
    _check_k_d(lam, k, d)


def solve_ode(lam: float, k: int, d: int, t_end: float, s0=None, levels: int = 40,
              rtol: float = 1e-9, atol: float = 1e-13):
    """Integrate the truncated ODE from ``s0`` (default: empty) to ``t_end``; return (t, s)."""
    _check(lam, k, d)
    y0 = np.zeros(levels) if s0 is None else np.asarray(s0, dtype=np.float64)
    sol = solve_ivp(lambda t, y: drift(y, lam, k, d), (0.0, t_end), y0, method="BDF",
                    rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"ODE solver failed: {sol.message}")
    return sol.t, sol.y.T


def fixed_point(lam: float, k: int, d: int, levels: int = 24) -> np.ndarray:
    """The fixed point s_1..s_L (L doubled until s_L < 1e-15), by ODE then Newton."""
    _check(lam, k, d)
    if lam == 0.0:
        return np.zeros(1)
    while True:
        t_end = 50.0 / (1.0 - lam)
        _, ys = solve_ode(lam, k, d, t_end, levels=levels, rtol=1e-8, atol=1e-14)
        guess = ys[-1]
        sol = root(lambda y: drift(y, lam, k, d), guess, method="hybr", tol=1e-14)
        s = np.clip(sol.x, 0.0, 1.0)
        if not sol.success or np.max(np.abs(drift(s, lam, k, d))) > 1e-11:
            s = guess  # the ODE state at t_end: converged to solver tolerance
        if s[-1] < TAIL_EPS or levels >= 4096:
            return s
        levels *= 2


def _sample_lengths(rng: np.random.Generator, s: np.ndarray, size: int) -> np.ndarray:
    # P(Q >= i) = s_i: inverse transform on the tail
    u = rng.random(size)
    # Q = number of i with s_i > u
    return np.searchsorted(-s, -u, side="left")


def mean_job_delay(s: np.ndarray, k: int, d: int, n_jobs: int = MC_JOBS, seed: int = 0) -> tuple[float, float]:
    """E[T] at the tail ``s`` by Monte Carlo over arrivals (exact water-filling), with its SE."""
    rng = np.random.default_rng(seed)
    n = k * d
    vals = np.empty(n_jobs)
    counts = np.zeros(int(s.size) + k + 2, dtype=np.int64)
    for j in range(n_jobs):
        final = _sample_lengths(rng, s, n)
        # water-filling k tasks: raise a lowest queue one at a time, ties uniformly at random.
        # Ties matter for E[T] (not for the tail): a tie between a queue this job already used
        # and a fresh one puts the task behind the job's own task or in parallel with it.
        used = np.zeros(n, dtype=bool)
        for _ in range(k):
            low = np.flatnonzero(final == final.min())
            i = int(low[rng.integers(low.size)])
            final[i] += 1
            used[i] = True
        counts[:] = 0
        np.add.at(counts, final[used], 1)
        vals[j] = expected_max_gamma(counts, GL_X, GL_W)
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(n_jobs))


def job_signature_law(s: np.ndarray, k: int, d: int) -> list:
    """Exact law, at the tail ``s`` (s_1..s_L), of a batch-filling job's signature: the
    positions of its last task in each of its distinct queues. Returns ``[(prob, {position:
    count})]`` (probabilities summing to 1 up to the mass the truncation drops).

    Water-filling of the ``n = kd`` i.i.d. sampled queues (as :func:`_layer_flows`): with
    ``C_j`` the sampled queues of length <= j and ``S_j = C_0 + ... + C_j``, the job's last
    layer is the least ``J`` with ``S_J >= k``. The ``C_{J-1}`` queues shorter than ``J`` are
    filled to length ``J`` (their last task at position ``J``) and the ``r = k - S_{J-1}``
    remaining tasks go, one each, to ``r`` of the ``C_J`` queues of length <= J, uniformly
    (ties): ``X`` ~ Hypergeometric(C_J, C_{J-1}, r) of them are queues the job already filled
    (whose last task then moves to position ``J + 1``), so the signature is ``C_{J-1} - X``
    queues at position ``J`` and ``r`` at ``J + 1``. The program runs over the Markov chain
    ``(C_j, min(k, S_j))`` in j, as :func:`_layer_flows`.
    """
    from scipy.stats import binom, hypergeom

    s = np.asarray(s, dtype=np.float64)
    n = int(k) * int(d)
    k = int(k)
    terms: dict = {}

    def emit(j, c_prev, c_now, rest, w):
        # j = last layer J (0-based: tasks raise queues from J to J + 1)
        if c_prev == 0:
            key = (j, 0, rest)
            terms[key] = terms.get(key, 0.0) + w
            return
        xs = np.arange(max(0, rest - (c_now - c_prev)), min(rest, c_prev) + 1)
        px = hypergeom.pmf(xs, c_now, c_prev, rest)
        for x, pxx in zip(xs, px):
            if pxx > 0:
                key = (j, c_prev - int(x), rest)
                terms[key] = terms.get(key, 0.0) + w * float(pxx)

    # layer 0: C_0 ~ Binomial(n, 1 - s_1)
    c = np.arange(n + 1)
    p0 = binom.pmf(c, n, 1.0 - s[0])
    prob = np.zeros((n + 1, k))  # (C_j, S_j) with S_j < k: jobs still filling
    for cc in range(n + 1):
        if p0[cc] == 0:
            continue
        if cc >= k:
            emit(0, 0, cc, k, p0[cc])
        else:
            prob[cc, cc] += p0[cc]
    for j in range(1, s.size + 1):
        if prob.sum() < 1e-300:
            break
        s_j = s[j - 1]
        s_j1 = s[j] if j < s.size else 0.0
        q = 0.0 if s_j <= 0.0 else min(1.0, (s_j - s_j1) / s_j)
        new = np.zeros_like(prob)
        for cp in range(n + 1):
            row = prob[cp]
            if not row.any():
                continue
            m = np.arange(n - cp + 1)
            pm = binom.pmf(m, n - cp, q)
            for mm in m[pm > 0]:
                cn = cp + int(mm)
                w = pm[mm]
                for t in np.flatnonzero(row):
                    if t + cn >= k:
                        emit(j, cp, cn, k - int(t), w * row[t])
                    else:
                        new[cn, t + cn] += w * row[t]
        prob = new
    out = []
    for (j, at_j, rest), w in sorted(terms.items()):
        sig = {j + 1: rest}
        if at_j > 0:
            sig[j] = at_j
        out.append((w, sig))
    return out


def response_law(lam: float, k: int, d: int, s: np.ndarray | None = None):
    """The mean-field law of a batch-filling job's response time, as a
    :class:`sim.core.responses.Mixture` of ``max`` of independent Gammas over the exact
    signature law (:func:`job_signature_law`) at the fixed point (``s``: default
    :func:`fixed_point`). Exact up to the truncation of the tail at 1e-15."""
    from sim.core.responses import Mixture

    _check(lam, k, d)
    if s is None:
        s = fixed_point(lam, k, d)
    law = job_signature_law(s, k, d)
    return Mixture([w for w, _ in law],
                   [(sorted(sig), [sig[p] for p in sorted(sig)]) for _, sig in law])


def prob_fills_by(s: np.ndarray, k: int, d: int, h: int) -> float:
    """P(T_{h-1} >= k) at the tail ``s`` (s_1..s_L): the probability that a job's k tasks all
    land at positions <= h. ``T_{h-1} = min(k, S_{h-1})`` with ``S_j`` the sum over the kd
    sampled queues of ``(j + 1 - Q)^+`` (i.i.d., pmf ``(s_{j+1}, p_j, ..., p_0)`` on 0..j+1), so
    ``P(S_{h-1} < k)`` is the head of a power of that pmf
    (:func:`sim.dispatch.meanfield.large_batch.log_power_head`, exact, positive terms only)."""
    from sim.dispatch.meanfield.large_batch import log_power_head

    s = np.asarray(s, dtype=np.float64)
    if h > s.size or s[h - 1] <= 0.0:  # every sampled queue is shorter than h
        return 1.0
    sl = np.concatenate(([1.0], s, [0.0]))
    p = sl[:-1] - sl[1:]  # p_0..p_L
    with np.errstate(divide="ignore"):
        logg = np.log(np.concatenate(([sl[h]], p[h - 1::-1])))
    head = np.empty(k)
    log_power_head(logg, k * d, k, head)
    return float(max(0.0, 1.0 - np.exp(head).sum()))


def run_task(task: dict) -> dict:
    """Mean-field values of a batch-filling task (keys of :data:`sim.core.results.RESULT_KEYS`),
    all exact at the fixed point and no Monte Carlo: the tail by the forward recursion of
    :func:`sim.dispatch.meanfield.large_batch.fixed_point_large` (the same fixed point as
    :func:`fixed_point`, to 2e-12), E[T] by the integral over the job's signature law
    (:func:`sim.dispatch.meanfield.large_batch.job_delay_exact`), so that k ~ 10^3 and kd ~ 10^7
    cost seconds."""
    from scipy.stats import binom

    from sim.dispatch.meanfield import large_batch

    lam, k, d = float(task["lam"]), int(task.get("k", 1)), int(task["d"])
    settings = RunSettings.from_task(task)
    h, max_level = settings.h, settings.max_level
    if task.get("b") is not None:
        raise ValueError("b: the batch-filling mean field here has no finite buffer")
    _check(lam, k, d)
    hk = harmonic(k)
    s = large_batch.fixed_point_large(lam, k, d)
    tail = np.zeros(max_level)
    m = min(max_level, s.size)
    tail[:m] = s[:m]
    if lam > 0:
        mean_t, _ = large_batch.job_delay_exact(s, k, d)
        # Little's law over waiting tasks: sum_{i >= 2} s_i per server, tasks at rate lam
        mean_wait = float(s[1:].sum()) / lam
        # some task waits iff fewer than k of the kd sampled queues are idle
        p_wait = float(binom.cdf(k - 1, k * d, 1.0 - lam))
        p_within = prob_fills_by(s, k, d, h)
    else:
        mean_t, mean_wait, p_wait, p_within = hk, 0.0, 0.0, 1.0
    out = exact_row(
        mean_response=mean_t, mean_wait=mean_wait, prob_wait=p_wait,
        mean_queue=float(s.sum()), tail=tail, queueing_ratio=(mean_t - hk) / hk,
        drop_prob=0.0, frac_within_h=p_within,
        messages_per_job=only(fills=True, by_work=False).messages(0, k, d),  # N is not needed
        ci_method=CI_METHOD,
    )
    if task.get("responses"):  # docs/responses.md: the exact signature law at the fixed point
        from sim.core.responses import exact_response_columns

        out.update(exact_response_columns(response_law(lam, k, d, s)))
        out["ci_method"] += "; response law exact (mean field)"
    return out
