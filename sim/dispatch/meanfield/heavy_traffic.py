"""Batch-filling and batch-sampling mean field in heavy traffic: ``eps = 1 - lam -> 0`` with
``k`` and ``mu = k d eps`` (the mean number of idle servers a job samples) given. Reaches the
sub_halfin_whitt path (lam = 1 - N^-0.3, k = ceil(ln^2 N), d = ceil(c / ((1 - lam) ln k))) to
N = 10^300 (k ~ 4.8e5, d ~ 10^88) in under a second a point and to N = 10^1000 (k ~ 5.3e6,
1 - lam = 1e-300) in seconds, where the exact recursion of
:mod:`sim.dispatch.meanfield.large_batch` costs minutes at N = 10^25 and cannot pass N ~ 10^53
(``1 - lam`` rounds to 0 there). Measured agreement with it: <= 6e-9 in the ratio from N = 10^10,
<= 1.6e-4 at N = 10^2..10^9 (jobs that reach layer 2). docs/analysis.md, "Batch-filling in heavy traffic", has the
derivation; in short (notation of :mod:`~sim.dispatch.meanfield.large_batch`, ``n = k d``):

* ``s_1 = lam``; ``s_2 = (lam / k) E[(k - C_0)^+]``, ``C_0 ~ Binomial(n, eps)`` (the sampled
  idle queues, -> Poisson(mu)): exact, as in the recursion;
* ``s_3 = (lam / k) E[(k - S_1)^+] <= lam P(C_1 < k)``, ``C_1 ~ Binomial(n, 1 - s_2)`` with mean
  ``>= n (s_1 - s_2) ~ d mu``: exp(-Theta(d mu)), ``d mu / k ~ c^2 / (eps ln^2 k)`` on the path
  (the bound is reported as ``log_layer2_bound``; jobs that reach layer 2 are left out);
* so a job ends on layer 0 (``C_0 >= k``: k tasks at position 1) or on layer 1: its
  ``c0 = C_0 < k`` idle queues take one task each, and the other ``r = k - c0`` go to ``r``
  distinct queues of length <= 1 among the ``C_1 = c0 + Binomial(n - c0, q_1)`` sampled,
  ``q_1 = (s_1 - s_2) / s_1 = E[min(k, C_0)] / k``. ``X ~ Hypergeometric(C_1, c0, r)`` of them
  are the job's own (batch-filling; batch-sampling never reuses a queue: X = 0), so its last
  tasks sit at position 1 in ``c0 - X`` queues and at position 2 in ``r``. ``C_1 ~ d mu`` is
  huge: X is taken as ``Binomial(r, pi)``, ``pi = c0 / E[C_1 | c0]`` (E[X] ~ k / d);
* ``E[T] = H_k + int_0^inf (F_1^k - P(T <= t)) dt``, with
  ``P(T <= t) = P(C_0 >= k) F_1^k + sum_{c0 < k} P(C_0 = c0) F_1^c0 (F_2 (1 - pi + pi / F_1))^r``
  (``F_p`` the Gamma(p, 1) CDF), so the excess integrand is
  ``F_1^k sum_{c0 < k} P(c0) (-expm1(r [log1p(-t / expm1(t)) + log1p(pi / expm1(t))]))``,
  every term >= 0 (``F_2 <= F_1^2``): the ratio keeps its relative precision.

The eps -> 0 limit itself (``C_0 ~ Poisson(mu)``, X = 0, no layer 2, d = infinity) is
:func:`limit_ratio` (``k``, ``mu``: no eps, so any k); :func:`queueing_ratio` keeps the
Binomial law of ``C_0`` and the X term (the O(eps) and O(k/d) corrections), and is what agrees
with the exact recursion (docs/analysis.md has the table). :func:`asymptotic_ratio` is the
large-k form ``[ln(1 + tau (1 - rho)) + gamma beta] / H_k``, ``rho = mu / k``,
``tau = ln k + ln(1 + tau (1 - rho))``, ``beta = (1 - rho) / (1 + tau (1 - rho))``, whose
expansion is
``ln ln k / ln k + ((1 - gamma) ln ln k + 1 + gamma - c) / ln^2 k + O((ln ln k)^2 / ln^3 k)``
on the path (``rho -> c / ln k``).

Numerics: the pmf of C_0 on the window ``mean +- (12 sd + 30)`` (log-concave; its mass outside
is below 1e-30), normalized over the window; 16-point Gauss-Legendre on unit panels from
``max(0, ln(k / 750))`` (below it ``F_1^k < e^-750``) to where ``k (1 + t) e^-t < 1e-18``
(the excess integrand is below ``P(some task > t)``). Cost: (window of C_0) x (nodes), numba.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy import special

from sim.core.results import is_number
from sim.core.settings import RunSettings
from sim.dispatch import LOG10_N_MAX, MODEL
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import served_by

LN10 = math.log(10.0)
EULER_GAMMA = float(np.euler_gamma)
#: the batch policies this limit covers (those the heavy_traffic engine serves)
POLICIES = served_by("heavy_traffic")

_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W

__all__ = ["path_point", "level0_law", "fixed_point", "queueing_ratio", "limit_ratio",
           "asymptotic_ratio", "leading_rate", "harmonic_number", "check_task", "run_task",
           "POLICIES", "LAYER2_LOG_MAX", "LOG10_N_MAX"]


def path_point(log10_n: float, c: float, alpha: float = 0.3, beta: float = 1.0) -> dict:
    """The sweep's path at N = 10^log10_n: ``one_minus_lam = beta N^-alpha`` (never formed as
    1 - lam), ``k = ceil(ln(N)^2)``, ``d = ceil(c / ((1 - lam) ln k))``: the ceil of a float,
    as the sweep's formula evaluates it, returned as a Python int (of any size)."""
    x = MODEL.param("log10_n").check("log10_n", log10_n)
    oml = float(beta) * 10.0 ** (-float(alpha) * x)
    if not 0.0 < oml < 1.0:
        raise ValueError(f"1 - lam = {oml!r} is not in (0, 1) (float range)")
    k = math.ceil((x * LN10) ** 2)
    dd = float(c) / (oml * math.log(k))
    if not math.isfinite(dd):
        raise ValueError(f"d = {dd!r} overflows a float at log10_n={log10_n!r}")
    return {"log10_n": x, "one_minus_lam": oml, "k": int(k), "d": int(math.ceil(dd)),
            "c": float(c)}


def harmonic_number(k: float) -> float:
    """H_k = E[max of k Exp(1)] (digamma(k + 1) + gamma; exact sum for k <= 10^6)."""
    k = int(k)
    if k <= 1_000_000:
        return float(np.sum(1.0 / np.arange(k, 0, -1, dtype=np.float64)))
    return float(special.digamma(k + 1.0)) + EULER_GAMMA


#: the largest k the form is evaluated at (the headline's path reaches k = ceil(ln(N)^2), about
#: 4.8e5, at N = 10^300, the largest log10_n)
K_BELOW = 10**9


def _check(k, d, one_minus_lam):
    """``(k, d, 1 - lam)`` checked against the declarations of ``k``, ``d_real`` (the d a
    heavy-traffic task carries; a refusal names ``d``, the argument, since the registry has
    already checked a task's ``d_real`` under its own name) and ``one_minus_lam``, and k below
    :data:`K_BELOW`."""
    k, d, oml = (MODEL.param("k").check("k", k), MODEL.param("d_real").check("d", d),
                 MODEL.param("one_minus_lam").check("one_minus_lam", one_minus_lam))
    if k >= K_BELOW:
        raise ValueError(f"k={k!r} must be < 10**9 (the heavy-traffic form's range of k)")
    if not math.isfinite(k * d):
        raise ValueError(f"k d = {k} * {d} overflows a float")
    return int(k), d, oml


def level0_law(n: float, eps: float | None, mu: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, pmf)`` of ``C_0`` on its window (``mean +- (12 sd + 30)``, normalized):
    ``Binomial(n, eps)`` (``n`` a float, may be ~1e95; ``x <= n``), or ``Poisson(mu)`` when
    ``eps`` is None.

    Binomial in logs: ``x log(n eps) - lgamma(x + 1) + sum_{i<x} log1p(-i/n) + (n - x)
    log1p(-eps)`` (no lgamma of n: exact for any n)."""
    if eps is None:
        mean, var = float(mu), float(mu)
        top = math.inf
    else:
        mean, var = n * eps, n * eps * (1.0 - eps)
        top = math.floor(n)
    sd = math.sqrt(var)
    lo = max(0, int(math.floor(mean - 12.0 * sd - 30.0)))
    hi = int(min(top, math.ceil(mean + 12.0 * sd + 30.0)))
    x = np.arange(lo, hi + 1, dtype=np.float64)
    if eps is None:
        logp = x * math.log(mean) - mean - special.gammaln(x + 1.0) if mean > 0 else np.where(
            x == 0, 0.0, -np.inf)
    else:
        i = np.arange(0, hi, dtype=np.float64)
        csum = np.concatenate(([0.0], np.cumsum(np.log1p(-i / n))))   # csum[x] = sum_{i<x}
        logp = (x * math.log(n * eps) - special.gammaln(x + 1.0) + csum[lo:hi + 1]
                + (n - x) * math.log1p(-eps))
    logp = logp - logp.max()
    pmf = np.exp(logp)
    return x, pmf / pmf.sum()


def fixed_point(k, d, one_minus_lam) -> dict:
    """The heavy-traffic fixed point at (k, d, 1 - lam): ``s1 = lam``, ``s2``,
    ``one_minus_s2`` (``eps + lam q1``, no cancellation), ``q1 = (s1 - s2) / s1 = E[min(k,
    C_0)] / k``, ``mu = k d eps``, ``log_layer2_bound`` (natural log of the Chernoff bound on
    ``P(C_1 < k)``, which bounds ``s_3 / lam`` and the probability that a job reaches layer 2;
    the limit sets both to 0), and the law of C_0 (``x0``, ``pmf0``)."""
    k, d, eps = _check(k, d, one_minus_lam)
    n = k * d
    x0, pmf0 = level0_law(n, eps)
    lam = 1.0 - eps
    q1 = float(np.dot(np.minimum(x0, k), pmf0)) / k
    one_minus_s2 = eps + lam * q1
    s2 = lam * (1.0 - q1)
    m = n * one_minus_s2                      # E[C_1]
    if m > k:
        # n KL(k/n || p): k ln(k / m) + (n - k) ln((n - k) / (n - m))
        log_bound = -(k * math.log(k / m) + (n - k) * math.log1p((m - k) / (n - m)))
    else:
        log_bound = 0.0
    return {"s1": lam, "s2": s2, "one_minus_s2": one_minus_s2, "q1": q1, "mu": n * eps,
            "n": n, "log_layer2_bound": log_bound, "x0": x0, "pmf0": pmf0}


@njit(cache=True)
def _excess(t, wt, k, r, w, pi):
    """sum_nodes wt F_1(t)^k sum_i w_i (-expm1(r_i [log1p(-t / expm1 t) + log1p(pi_i / expm1 t)]))"""
    total = 0.0
    for j in range(t.size):
        tj = t[j]
        f1k = math.exp(k * math.log1p(-math.exp(-tj)))
        if f1k == 0.0:
            continue
        e = math.expm1(tj)
        g = math.log1p(-tj / e)
        acc = 0.0
        for i in range(r.size):
            dlog = g
            if pi[i] > 0.0:
                dlog += math.log1p(pi[i] / e)
            acc += w[i] * (-math.expm1(r[i] * dlog))
        total += wt[j] * f1k * acc
    return total


def _nodes(k: int):
    t0 = max(0.0, math.floor(math.log(k / 750.0))) if k > 750 else 0.0
    t1 = t0 + 1.0
    while k * (1.0 + t1) * math.exp(-t1) > 1e-18:
        t1 += 1.0
    panels = np.arange(t0, t1)
    t = (panels[:, None] + _GL_X[None, :]).ravel()
    return t, np.tile(_GL_W, panels.size)


def _job_excess(k: int, x0, pmf0, pi_of_c0):
    """int_0^inf (F_1^k - P(T <= t)) dt for the layer-0/1 job law (module docstring)."""
    below = x0 < k
    c0 = x0[below]
    if c0.size == 0:
        return 0.0, 0.0, 0.0
    w = np.ascontiguousarray(pmf0[below])
    r = k - c0
    pi = pi_of_c0(c0)
    t, wt = _nodes(k)
    exc = _excess(t, wt, float(k), np.ascontiguousarray(r), w, np.ascontiguousarray(pi))
    return exc, float(np.dot(w, r)), float(np.dot(w, r * pi))


def _result(k, excess, mean_r, mean_x, extra):
    hk = harmonic_number(k)
    return {**extra, "k": k, "h_k": hk, "mean_response": hk + excess, "excess": excess,
            "queueing_ratio": excess / hk, "frac_position2": mean_r / k,
            "mean_own_hits": mean_x}


def queueing_ratio(k, d, one_minus_lam, policy: str = "batch_filling") -> dict:
    """Heavy-traffic mean field of ``policy`` (batch_filling or batch_sampling) at (k, d,
    1 - lam), all floats allowed (d may be ~1e88; ``one_minus_lam`` is taken as given, never
    as 1 - lam): ``{"queueing_ratio", "mean_response", "excess" (= E[T] - H_k), "h_k",
    "frac_position2" (E[r] / k), "mean_own_hits" (E[X]), "s1", "s2", "one_minus_s2", "q1",
    "mu", "log_layer2_bound", "prob_short" (P(C_0 < k): some task waits), "prob_full", ...}``
    (module docstring: C_0 Binomial, X Binomial(r, pi))."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is not one of {POLICIES}")
    fp = fixed_point(k, d, one_minus_lam)
    k, n, q1 = int(float(k)), fp["n"], fp["q1"]
    if policy_record(policy).fills:
        def pi_of_c0(c0):
            return c0 / (c0 + (n - c0) * q1)
    else:
        def pi_of_c0(c0):
            return np.zeros_like(c0)
    excess, mean_r, mean_x = _job_excess(k, fp["x0"], fp["pmf0"], pi_of_c0)
    extra = {key: v for key, v in fp.items() if key not in ("x0", "pmf0")}
    # P(C_0 < k) and P(C_0 >= k), each summed on its own (the second may be ~1e-300)
    extra["prob_short"] = float(fp["pmf0"][fp["x0"] < k].sum())
    extra["prob_full"] = float(fp["pmf0"][fp["x0"] >= k].sum())
    return _result(k, excess, mean_r, mean_x, {**extra, "policy": policy})


def limit_ratio(k, mu) -> dict:
    """The eps -> 0 limit at (k, mu = k d eps): ``C_0 ~ Poisson(mu)``, the ``k - min(k, C_0)``
    other tasks at position 2 in distinct queues, nothing higher (batch-filling and
    batch-sampling alike). Any k (no eps or d is formed)."""
    k = MODEL.param("k").check("k", k)
    if not (is_number(mu) and math.isfinite(float(mu)) and float(mu) >= 0.0):
        raise ValueError(f"mu={mu!r} must be a finite number >= 0")
    x0, pmf0 = level0_law(0.0, None, mu=float(mu))
    excess, mean_r, _ = _job_excess(k, x0, pmf0, np.zeros_like)
    return _result(k, excess, mean_r, 0.0, {"mu": float(mu)})


def asymptotic_ratio(k, mu) -> float:
    """The large-k form of the limit: ``[ln(1 + tau (1 - rho)) + gamma beta] / H_k``,
    ``rho = mu / k < 1``, ``tau = ln k + ln(1 + tau (1 - rho))`` (fixed-point iteration),
    ``beta = (1 - rho) / (1 + tau (1 - rho))``: the Gumbel approximation of the max of
    ``k - mu`` Gamma(2, 1) and ``mu`` Exp(1) to first order in beta (docs/analysis.md)."""
    k, rho = float(k), float(mu) / float(k)
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"mu / k = {rho!r} must be in [0, 1)")
    tau = math.log(k)
    for _ in range(200):
        new = math.log(k) + math.log1p(tau * (1.0 - rho))
        if abs(new - tau) < 1e-15:
            break
        tau = new
    beta = (1.0 - rho) / (1.0 + tau * (1.0 - rho))
    return (math.log1p(tau * (1.0 - rho)) + EULER_GAMMA * beta) / harmonic_number(k)


def leading_rate(k) -> float:
    """``ln ln k / ln k``: the leading term of the ratio along the path (every c)."""
    lk = math.log(float(k))
    return math.log(lk) / lk


#: the largest ``log_layer2_bound`` (natural log of the bound on the probability that a job
#: reaches layer 2, which the heavy-traffic form leaves out) a task may have: e^-27.6 = 1e-12
LAYER2_LOG_MAX = math.log(1e-12)


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a ``heavy_traffic`` task cannot run: k, d_real,
    one_minus_lam as :func:`fixed_point` takes them, ``log10_n`` in (0, 300], no buffer, and a
    point where the form holds (``log_layer2_bound <= ln 1e-12``: with a small ``k d (1 - lam)``,
    constant d for one, jobs reach layer 2 and this limit does not apply)."""
    k, d, eps = _task_point(task)
    _refuse_layer2(fixed_point(k, d, eps)["log_layer2_bound"], k, d, eps)


def _task_point(task: dict, check=None, limit: str = "the heavy-traffic limit") -> tuple[int, float, float]:
    """``(k, d_real, one_minus_lam)`` of a task after the checks that need no fixed point;
    ``check`` validates (k, d, 1 - lam) (default :func:`_check`), ``limit`` names the limit in
    the refusal of a buffer (per-task power-of-(kd)'s engine shares this)."""
    MODEL.check_values(log10_n=task["log10_n"])
    x = float(task["log10_n"])
    if task.get("b") is not None:
        raise ValueError(f"b={task['b']!r}: {limit} has no finite buffer")
    k, d, eps = (check or _check)(task["k"], task["d_real"], task["one_minus_lam"])
    if k * d > 10.0 ** x * (1.0 + 1e-9):
        raise ValueError(f"k*d_real={k * d:.6g} (k={k}, d_real={d:.6g}) must not exceed N = 10^{x:g}")
    return k, d, eps


def _refuse_layer2(bound: float, k: int, d: float, eps: float) -> None:
    """``ValueError`` where jobs may reach layer 2 (the bound above ``LAYER2_LOG_MAX``)."""
    if bound > LAYER2_LOG_MAX:
        raise ValueError(
            f"d_real={d:.6g} at k={k}, one_minus_lam={eps:.4g}: jobs reach layer 2 with probability "
            f"up to e^{bound:.3g} (k d (1 - lam) = {k * d * eps:.3g}); the heavy-traffic form needs it "
            f"below 1e-12 (docs/analysis.md, 'Batch-filling in heavy traffic'); use meanfield")


def run_task(task: dict) -> dict:
    """The ``heavy_traffic`` engine's row (keys of :data:`sim.core.results.RESULT_KEYS`) from
    :func:`queueing_ratio` at the task's ``k``, ``d_real`` and ``one_minus_lam``: the fixed point
    ``s_1 = lam``, ``s_2``, nothing above (``tail``), E[T] (``mean_response``), the queueing
    ratio, ``mean_wait = s_2 / lam`` (Little's law over waiting tasks), ``prob_wait = P(C_0 <
    k)`` (some task waits), ``frac_within_h`` (all of a job's tasks start within position h):
    ``P(C_0 >= k)`` for h = 1 (a job short of idle queues puts tasks at position 2), 1 for
    h >= 2."""
    from sim.core.results import exact_row

    policy = task["policy"]
    k, d, eps = _task_point(task)
    res = queueing_ratio(k, d, eps, policy)  # one fixed point serves the check and the row
    _refuse_layer2(res["log_layer2_bound"], k, d, eps)
    p_wait, p_full = res["prob_short"], res["prob_full"]
    settings = RunSettings.from_task(task)
    h, max_level = settings.h, settings.max_level
    tail = np.zeros(max_level)
    tail[:2] = [res["s1"], res["s2"]][:max_level]
    return exact_row(
        mean_response=res["mean_response"], mean_wait=res["s2"] / res["s1"], prob_wait=p_wait,
        mean_queue=res["s1"] + res["s2"], tail=tail, queueing_ratio=res["queueing_ratio"],
        drop_prob=0.0, frac_within_h=p_full if h <= 1 else 1.0,
        messages_per_job=policy_record(policy).messages(0, k, d),
        ci_method=("heavy-traffic mean field (1 - lam -> 0 with k d (1 - lam) given; jobs end on "
                   f"layers 0-1, layer 2 bounded by e^{res['log_layer2_bound']:.3g})"),
    )
