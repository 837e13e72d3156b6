"""Per-task power-of-(kd) (``pod_per_task``) mean field evaluated in logs, for any ``1 - lam`` a
float holds (down to ~1e-300) and any ``D = k d`` a float holds: the ``heavy_traffic`` engine's
``pod_per_task`` member, which carries the exact mean field past N = 10^15 (where the
``meanfield`` engine, given ``lam`` itself, stops being usable: ``lam`` rounds to 1 past
N ~ 10^53) to N = 10^300 on the sub_halfin_whitt path.

The model is that of :mod:`sim.dispatch.meanfield.tasks`: each task samples ``D = k d`` queues
and joins the shortest, so the tail is the supermarket fixed point ``s_i = lam^((D^i - 1)/(D -
1))`` and a task is at position ``>= i + 1`` with probability ``W_i = s_i^D = lam^(D G_i)``,
``G_i = (D^i - 1)/(D - 1)``. The job's k tasks are independent, its response the max of k task
sojourns, a task at position p taking Gamma(p, 1). Unlike the batch policies' heavy-traffic form
this is not an approximation: the closed form is exact at every ``1 - lam``; only its
evaluation differs from :func:`sim.dispatch.meanfield.tasks.MaxOfIid.excess_mean`:

* ``ln W_i = -a exp(ln D + ln G_i)``, ``a = -log1p(-(1 - lam))`` (never ``ln lam``), ``ln G_i =
  (i - 1) ln D + log1p(-D^-i) - log1p(-1/D)``: no power of D is formed (D may be 1e95);
* ``E[T] - H_k = int_0^inf F_1^k (1 - (1 - x)^k) dt``, ``x = (F_1 - F) / F_1``, ``F_1 - F =
  sum_{i >= 1} P(Poisson(t) = i) W_i`` (F the task's sojourn CDF, a mixture of Gamma(p, 1)
  CDFs): non-negative terms only, so the ratio keeps its relative precision however small;
* 16-point Gauss-Legendre on unit panels from ``floor(ln(k / 750))`` (below it ``F_1^k <
  e^-750``) to the first ``t`` where the integrand's tail ``k sum_i W_i P(Poisson(t) <= i)``
  is below ``1e-17 sum_i W_i``; levels until ``ln W_i < -745`` (W_i = 0 in floats).

Along the path the ratio's asymptotic forms are derived in docs/analysis.md, "Per-task
power-of-(kd) along the path": :func:`asymptotic_form` gives them (with constant d the ratio grows
without bound, like ``ln(1/(1 - lam)) / (ln(k d) H_k)``; with ``(1 - lam) k d -> infinity`` it
vanishes like ``lam^(kd)``).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

from sim.core.settings import RunSettings
from sim.dispatch.policies import only
from sim.dispatch.policies import policy as policy_record

#: the policy whose limit this module carries: each task joins the shortest of its own k*d
#: sampled queues (power-of-(kd) per task)
_PER_TASK = only(k_task=True, batch=False)

__all__ = ["log_wait_tail", "queueing_ratio", "asymptotic_form", "batch_little_bound", "check_task",
           "run_task"]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W
#: ln of the smallest W_i kept (exp(-745) is the last nonzero double)
_LOG_W_MIN = -745.0


def _check(k, d, one_minus_lam):
    """The heavy-traffic engine's checks of ``k, d, 1 - lam``, and ``D = k d >= 2``."""
    from sim.dispatch.meanfield.heavy_traffic import _check as checked

    k, d, eps = checked(k, d, one_minus_lam)
    if not k * d >= 2.0:
        raise ValueError(f"k d = {float(k * d)!r} must be a finite number >= 2 (power-of-D with D >= 2)")
    return k, d, eps


def _log_tails(k: int, d: float, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """``(ln s_i, ln W_i)`` for i = 1, 2, ... while ``ln s_i >= -745``; ``ln W_i = D ln s_i``
    (``-inf`` below -745). ``ln s_i = -a G_i``, ``ln G_i = (i - 1) ln D + log1p(-D^-i) -
    log1p(-1/D)``: no power of D is formed."""
    ln_d = math.log(k * d)
    ln_a = math.log(-math.log1p(-eps))
    ls, lw = [], []
    i = 1
    while True:
        ln_g = (i - 1) * ln_d + math.log1p(-math.exp(-i * ln_d)) - math.log1p(-math.exp(-ln_d))
        if ln_a + ln_g > math.log(-_LOG_W_MIN) and i > 1:
            break
        ls.append(-math.exp(ln_a + ln_g))
        w = ln_a + ln_d + ln_g
        lw.append(-math.exp(w) if w <= math.log(-_LOG_W_MIN) else -math.inf)
        i += 1
    return np.array(ls), np.array(lw)


def log_wait_tail(k, d, one_minus_lam) -> np.ndarray:
    """``ln W_i`` for i = 1, 2, ... while ``ln W_i >= -745``: ``W_i = P(a task's position >= i +
    1) = lam^(D G_i)``, ``G_i = (D^i - 1)/(D - 1)``, D = k d (module docstring). ``W_i`` is also
    ``s_i^D``."""
    k, d, eps = _check(k, d, one_minus_lam)
    lw = _log_tails(k, d, eps)[1]
    return lw[np.isfinite(lw)]


def _nodes(k: int, log_w: np.ndarray):
    """Gauss-Legendre nodes on unit panels (module docstring)."""
    t0 = max(0.0, math.floor(math.log(k / 750.0))) if k > 750 else 0.0
    if log_w.size == 0:
        return np.zeros(0), np.zeros(0)
    i = np.arange(1, log_w.size + 1, dtype=np.float64)
    top = float(np.logaddexp.reduce(log_w))
    t1 = t0 + 1.0
    while True:
        with np.errstate(divide="ignore"):
            tail = np.log(k) + np.logaddexp.reduce(log_w + np.log(special.pdtr(i, t1)))
        if tail < math.log(1e-17) + top:
            break
        t1 += 1.0
    panels = np.arange(t0, t1)
    t = (panels[:, None] + _GL_X[None, :]).ravel()
    return t, np.tile(_GL_W, panels.size)


def _one_minus_pow(log_w: float, k: int) -> float:
    """``1 - (1 - W)^k`` from ``ln W`` (W may round to 1: ``1 - W = -expm1(ln W)``)."""
    if log_w == -math.inf:
        return 0.0
    if log_w == 0.0:
        return 1.0
    return float(-math.expm1(k * math.log(-math.expm1(log_w))))


def harmonic_number(k: int) -> float:
    """H_k (exact sum to 10^6, digamma beyond)."""
    if k <= 1_000_000:
        return float(np.sum(1.0 / np.arange(k, 0, -1, dtype=np.float64)))
    return float(special.digamma(k + 1.0)) + float(np.euler_gamma)


def queueing_ratio(k, d, one_minus_lam) -> dict:
    """The pod_per_task mean field at (k, d, 1 - lam), d a float (it may be ~1e89), 1 - lam taken
    as given: ``{"queueing_ratio", "excess" (E[T] - H_k), "mean_response", "h_k", "log_w"
    (ln W_i, i >= 1), "mean_queue" (sum s_i), "mean_wait" (sum_{i >= 2} s_i / lam, tasks waiting
    per server over the task rate), "prob_wait" (P(some task of a job waits)), "levels" (the
    positions a task reaches with W > 0), "mean_position" (1 + sum W_i, a task's E[sojourn])}``."""
    k, d, eps = _check(k, d, one_minus_lam)
    log_w = log_wait_tail(k, d, eps)
    hk = harmonic_number(k)
    t, wt = _nodes(k, log_w)
    if log_w.size == 0 or t.size == 0:
        excess = 0.0
    else:
        i = np.arange(1, log_w.size + 1, dtype=np.float64)
        # ln P(Poisson(t) = i) + ln W_i, summed over i: F_1 - F (no differences)
        with np.errstate(divide="ignore"):
            lt = np.log(t)
        lp = i[None, :] * lt[:, None] - t[:, None] - special.gammaln(i + 1.0)[None, :] + log_w[None, :]
        diff = np.exp(lp).sum(axis=1)
        f1 = -np.expm1(-t)
        x = np.minimum(diff / f1, 1.0)
        with np.errstate(divide="ignore"):
            integrand = np.exp(k * np.log(f1)) * -np.expm1(k * np.log1p(-x))
        excess = float(np.dot(integrand, wt))
    # s_i = W_i^(1/D): ln s_i = ln W_i / D; s_1 = lam
    s = np.exp(_log_tails(k, d, eps)[0])
    lam = 1.0 - eps
    lw1 = float(log_w[0]) if log_w.size else -math.inf
    return {"queueing_ratio": excess / hk, "excess": excess, "mean_response": hk + excess, "h_k": hk,
            "k": k, "d": d, "one_minus_lam": eps, "log_w": log_w, "tail": s,
            "mean_queue": float(s.sum()), "mean_wait": float(s[1:].sum()) / lam,
            "prob_wait": _one_minus_pow(lw1, k), "levels": int(log_w.size) + 1,
            "mean_position": 1.0 + float(np.exp(log_w).sum())}


def asymptotic_form(k, d, one_minus_lam) -> dict:
    """The derived forms of docs/analysis.md, "Per-task power-of-(kd) along the path", at one
    point: ``idle_probes`` (``a D``, ``a = -ln lam``: the mean number of idle queues a task
    samples; ``W_1 = e^-(a D)``), ``levels_ahead`` (``x = ln(1 / a) / ln D``: a task waits behind
    about this many tasks when it is large), ``vanishing_form`` (``W_1 = lam^D``: the ratio to
    first order in W_1 when ``a D`` is large), ``growing_form`` (``x / H_k``: the leading term of
    the ratio when x is large, d constant), and ``little_bound`` (``(1 + sum_i W_i) / H_k - 1``:
    E[T] >= a task's mean sojourn, a lower bound on the ratio at every point)."""
    k, d, eps = _check(k, d, one_minus_lam)
    a = -math.log1p(-eps)
    big_d = k * d
    hk = harmonic_number(k)
    log_w = log_wait_tail(k, d, eps)
    x = math.log(1.0 / a) / math.log(big_d)
    return {"idle_probes": a * big_d, "levels_ahead": x, "vanishing_form": math.exp(-a * big_d),
            "growing_form": x / hk, "little_bound": (1.0 + float(np.exp(log_w).sum())) / hk - 1.0,
            "h_k": hk}


def batch_little_bound(k, d, one_minus_lam, policy: str = "batch_sampling") -> dict:
    """A lower bound on the batch policies' mean-field ratio at any (k, d, 1 - lam), derived in
    docs/analysis.md ("Per-task power-of-(kd) along the path", constant d for the batch
    policies): ``E[T] >= E[Q] / lam`` (a job's last task ends no earlier than the mean of its
    tasks' sojourns; Little's law over tasks), and from ``s_i = (lam / k) E[T_i]`` (``T_i`` the
    tasks of a job at position >= i) with ``T_i >= k - sum_q (i - 1 - Q_q)^+`` over the ``k d``
    sampled queues, ``1 - s_i <= (1 - lam) g_i``: ``g_i = (d^i - 1)/(d - 1)`` for batch_sampling
    (one task a queue: ``T_i >= k - B_{i-1}``), ``(d + 1)^(i - 1)`` for batch_filling. So
    ``E[Q] >= sum_i (1 - (1 - lam) g_i)^+`` and the ratio is at least ``bound = E[Q]_lower /
    (lam H_k) - 1``; ``E[Q]_lower ~ ln(1 / (1 - lam)) / ln(d or d + 1)`` grows without bound as
    lam -> 1 with d fixed. Returns ``{"queue_lower", "bound", "h_k"}``."""
    k, d, eps = _check(k, d, one_minus_lam)
    pol = policy_record(policy)
    if not pol.batch:
        raise ValueError(f"policy={policy!r} is not batch_sampling or batch_filling")
    ln_eps = math.log(eps)
    total = 0.0
    i = 1
    while True:
        if not pol.fills:  # one task a queue
            ln_g = math.log(i) if d == 1.0 else (i * math.log(d) + math.log1p(-d ** -i) - math.log(d - 1.0))
        else:
            ln_g = (i - 1) * math.log(d + 1.0)
        term = -math.expm1(ln_eps + ln_g) if ln_eps + ln_g < 0.0 else 0.0
        if term <= 0.0:
            break
        total += term
        i += 1
    hk = harmonic_number(k)
    return {"queue_lower": total, "bound": total / ((1.0 - eps) * hk) - 1.0, "h_k": hk}


def _task_point(task: dict) -> tuple[int, float, float]:
    """The heavy-traffic engine's task checks (log10_n, no buffer, k d <= N) with this module's
    :func:`_check` (power-of-D needs D = k d >= 2)."""
    from sim.dispatch.meanfield.heavy_traffic import _task_point as checked_point

    return checked_point(task, _check, "the per-task mean field here")


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a ``heavy_traffic`` pod_per_task task cannot run
    (k, d_real, one_minus_lam as :func:`queueing_ratio` takes them, ``log10_n`` in (0, 300], no
    buffer). Every such point is exact: nothing is refused for being outside a regime."""
    _task_point(task)


def run_task(task: dict) -> dict:
    """The ``heavy_traffic`` engine's pod_per_task row (:data:`sim.core.results.RESULT_KEYS`):
    the exact mean field of :func:`queueing_ratio` at ``k``, ``d_real``, ``one_minus_lam``."""
    from sim.core.results import exact_row

    k, d, eps = _task_point(task)
    res = queueing_ratio(k, d, eps)
    settings = RunSettings.from_task(task)
    h, max_level = settings.h, settings.max_level
    tail = np.zeros(max_level)
    m = min(max_level, res["tail"].size)
    tail[:m] = res["tail"][:m]
    lw_h = res["log_w"][h - 1] if h - 1 < res["log_w"].size else -math.inf
    return exact_row(
        mean_response=res["mean_response"], mean_wait=res["mean_wait"], prob_wait=res["prob_wait"],
        mean_queue=res["mean_queue"], tail=tail, queueing_ratio=res["queueing_ratio"], drop_prob=0.0,
        # every task of a job within position h: (1 - W_h)^k
        frac_within_h=1.0 - _one_minus_pow(lw_h, k),
        messages_per_job=_PER_TASK.messages(0, k, d),
        ci_method=("per-task power-of-(kd) mean field, closed form in logs (exact at any 1 - lam; "
                   f"{res['levels']} positions reached)"),
    )
