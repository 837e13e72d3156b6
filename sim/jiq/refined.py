r"""Refined mean field of distributed JIQ: ``E[X^N] = x* + V / N + O(1/N^2)`` (docs/refined.md).

The expansion of Gast & Van Houdt (SIGMETRICS 2018; :func:`sim.core.refined.refined_expansion`)
for the JIQ model of :mod:`sim.jiq.meanfield`, policies ``jiq``, ``jiq_pod`` and ``jiq_sqd``.

State and jumps
---------------
``x = (s_1..s_L, P_1..P_K)`` as in :mod:`sim.jiq.meanfield` (``s_i``: fraction of the ``N``
servers with ``>= i`` tasks; ``P_j``: fraction of the ``M = N / r`` I-queues of size ``>= j``;
``p_j = P_j - P_{j+1}``, ``p0 = 1 - P_1``).  A server changing level moves one ``s`` by ``1/N``;
an I-queue changing size moves one ``P`` by ``1/M = r/N``.  So the process jumps by ``l / N``,
``l`` having entries ``+-1`` on the ``s`` coordinates and ``+-r`` on the ``P`` coordinates, at rate
``N beta_l(x)``.  The transitions (as in :mod:`sim.jiq._occupancy_kernel`), with ``h(x) = x^{d'}``
(``d' = d`` for ``jiq_pod``, else 1), ``H(x) = x^{d''}`` (``d'' = d`` for ``jiq_sqd``, else 1),
``beta = lam p0 (1 - h(s_1)) / (1 - s_1)`` (a given idle server is hit blindly at this rate)
and ``J = r (s_1 - s_2)`` (joins per I-queue):

=========================================  ===========================  =====================================
event                                      ``l``                        ``beta_l``
=========================================  ===========================  =====================================
task at a scheduler with I-queue size j    ``e_{s_1} - r e_{P_j}``      ``lam p_j``
blind task, server with i >= 1 tasks       ``e_{s_{i+1}}``              ``lam p0 (h(s_i) - h(s_{i+1}))``
blind task, idle server in a size-j queue  ``e_{s_1} - r e_{P_j}``      ``beta j p_j / r`` (size-biased:
                                                                        ``j y_j / x_0 = j p_j / (r (1 - s_1))``)
service, server with i >= 2 tasks          ``-e_{s_i}``                 ``s_i - s_{i+1}``
service, server with 1 task, joins a       ``-e_{s_1} + r e_{P_j}``     ``(s_1 - s_2) (H(P_{j-1}) - H(P_j))``
size-(j-1) I-queue
=========================================  ===========================  =====================================

Their drift ``sum_l l beta_l`` is :func:`sim.jiq.meanfield.drift` (the tests rebuild it from
this list), and ``Q = sum_l l l^T beta_l`` is built from the list (:func:`noise`).  Every jump
keeps ``sum_j P_j = r (1 - s_1)`` (listed = idle) exactly; the drift is tangent to that plane on
it, so ``V`` lies in it too: ``sum_j V_{P_j} = -r V_{s_1}``, and ``V_{s_1} = 0`` because
``E[s_1] = lam`` at every N (work conservation).  Both are checked by the tests.

The 1/N part of the drift, ``f1``
---------------------------------
* ``jiq``: none (a blind task picks one uniform server; joins a uniform I-queue): ``f1 = 0``.
* ``jiq_pod``: the ``d`` probes are distinct servers, so ``h`` is ``h_N(x) = C(N x, d) / C(N, d)
  = x^d + g(x) / N + O(1/N^2)`` with ``g(x) = -(d (d-1)/2) x^{d-1} (1 - x)``
  (:func:`sim.core.refined.probes_in_set_1n`, as for ``pod``): ``f1_{s_i} = lam p0 (g(s_{i-1}) - g(s_i))`` and, through
  ``beta``, ``f1_{P_j} = -j p_j lam p0 (-g(s_1)) / (1 - s_1) = -j p_j lam p0 (d(d-1)/2) s_1^{d-1}``.
* ``jiq_sqd``: the ``d`` sampled I-queues are distinct among ``M = N / r``, so ``H`` is
  ``H_M(x) = x^d + r g(x) / N + O(1/N^2)``: ``f1_{P_j} = J r (g(P_{j-1}) - g(P_j))``.

``A`` is :func:`sim.jiq.meanfield.drift_jacobian` (analytic); ``B : W`` is written out here
(:func:`hessian_contract`; the drift is a polynomial of degree ``max(d', d'') + 1``); the tests
check both against finite differences, and the whole coefficient against the exact stationary
law of the N-server chain at small N and against long simulations.

Fixed point and truncation
--------------------------
``x*`` from the first route (:func:`sim.jiq.meanfield.fixed_point`: closed-form tails, ``p0`` by
root finding), polished by Newton on the truncated drift.  Levels ``L``: first ``i`` with
``s_i <= TAIL_EPS s_1``, plus ``TRUNC_EXTRA``; sizes ``K``: first ``j`` with ``P_j <= TAIL_EPS``,
plus ``TRUNC_EXTRA`` (``L >= 2``).  :func:`jiq_refined` reports the change of ``sum_i V_{s_i}``
and of ``V_{P_1}`` when both grow by ``TRUNC_EXTRA`` (``trunc_change``).

Derived quantities (first order): ``E[g(X)] = g(x*) + (Dg V + (1/2) tr(D^2 g W) + g_1) / N``
for ``prob_wait = E[p0 h_N(s_1)]`` (PASTA: blind, and the server reached is busy),
``frac_within_h = 1 - E[p0 h_N(s_h)]`` and the message rates; linear ones (``mean_queue``,
``p0``, ``mean_iqueue``, ``join_rate``) take ``V`` only.  ``mean_response = mean_queue / lam``
(Little's law, exact at every N).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve

from sim.core.refined import probes_in_set, probes_in_set_1n, refined_expansion, single_task_row
from sim.core.settings import RunSettings
from sim.jiq import meanfield as mf
from sim.jiq.policies import policy as policy_record
from sim.jiq.policies import served_by

__all__ = [
    "POLICIES",
    "JiqRefined",
    "jiq_refined",
    "transitions",
    "noise",
    "hessian_contract",
    "drift_1n",
    "drift_exact",
    "levels_for",
    "run_task",
    "TAIL_EPS",
    "TRUNC_EXTRA",
]

POLICIES = served_by("refined")

#: relative size of the fixed point below which levels / sizes are cut (before TRUNC_EXTRA)
TAIL_EPS = 1e-12
#: levels and sizes kept beyond the TAIL_EPS one
TRUNC_EXTRA = 6



class JiqRefined(NamedTuple):
    """``E[X^N] = x + v / N + O(1/N^2)``, ``x = (s_1..s_L, P_1..P_K)``; ``w / N`` the covariance."""

    x: np.ndarray
    v: np.ndarray
    w: np.ndarray
    a: np.ndarray  #: Jacobian of the drift at x*
    f1: np.ndarray  #: the 1/N part of the drift at x*
    levels: int  #: L
    iqueue_levels: int  #: K
    trunc_change: float  #: max of the changes of sum V_s and of V_{P_1} with TRUNC_EXTRA more (nan: not measured)


def _exponents(policy: str, d: int) -> tuple[int, int]:
    return policy_record(policy).exponents(d)


def _ext(x, L, K):
    s, P = mf._split(x, L, K)
    se = np.concatenate(([1.0], s, [0.0]))  # se[i] = s_i, i = 0..L+1
    Pe = np.concatenate(([1.0], P, [0.0]))  # Pe[j] = P_j, j = 0..K+1
    return s, P, se, Pe


def transitions(x, policy: str, lam: float, r: float, d: int, levels: int, iqueue_levels: int):
    """The limit transitions at ``x``: ``(jumps, rates)``, ``jumps[t]`` the vector ``l`` (entries
    ``+-1`` on ``s``, ``+-r`` on ``P``), ``rates[t]`` the rate ``beta_l`` per ``N``.  The parts of
    transitions out of the truncation are dropped as in :func:`sim.jiq.meanfield.drift` (a task
    to a server with ``L`` tasks; the I-queue side of a join to a size-``K`` I-queue)."""
    L, K = int(levels), int(iqueue_levels)
    dp, dq = _exponents(policy, d)
    s, P, se, Pe = _ext(x, L, K)
    n = L + K
    p0 = 1.0 - P[0]
    p = Pe[1 : K + 1] - Pe[2:]  # p_j, j = 1..K
    beta = lam * p0 * sum(s[0] ** k for k in range(dp))
    jumps, rates = [], []

    def add(entries, rate):
        v = np.zeros(n)
        for idx, val in entries:
            v[idx] += val
        jumps.append(v)
        rates.append(rate)

    for j in range(1, K + 1):  # direct task, and blind task deleting from a size-j I-queue
        add(((0, 1.0), (L + j - 1, -r)), lam * p[j - 1] + beta * j * p[j - 1] / r)
    sd = se**dp
    for i in range(1, L):  # blind task to a server with i tasks (i + 1 <= L)
        add(((i, 1.0),), lam * p0 * (sd[i] - sd[i + 1]))
    for i in range(2, L + 1):  # service at a server with i >= 2 tasks
        add(((i - 1, -1.0),), se[i] - se[i + 1])
    Pq = Pe**dq
    for j in range(1, K + 1):  # service at a server with 1 task, joining a size-(j-1) I-queue
        add(((0, -1.0), (L + j - 1, r)), (se[1] - se[2]) * (Pq[j - 1] - Pq[j]))
    # joining a size-K I-queue: P_{K+1} is not tracked, the server still becomes idle (as in
    # sim.jiq.meanfield.drift, where only the I-queue side of such a join is dropped)
    add(((0, -1.0),), (se[1] - se[2]) * Pq[K])
    return np.array(jumps), np.array(rates)


def noise(x, policy, lam, r, d, levels, iqueue_levels) -> np.ndarray:
    """``Q(x) = sum_l l l^T beta_l(x)`` from :func:`transitions`."""
    jumps, rates = transitions(x, policy, lam, r, d, levels, iqueue_levels)
    return (jumps * rates[:, None]).T @ jumps


def hessian_contract(x, policy, lam, r, d, levels, iqueue_levels, w) -> np.ndarray:
    """``(B : W)_m = sum_{k,l} d^2 f_m / dx_k dx_l W_{kl}`` of :func:`sim.jiq.meanfield.drift`.

    s-rows: ``f_i = lam (1 - P_1) (h(s_{i-1}) - h(s_i)) + [i = 1] lam P_1 - s_i + s_{i+1}``.
    P-rows: ``f_j = J (H(P_{j-1}) - H(P_j)) - (lam r + j beta) (P_j - P_{j+1})`` with
    ``J = r (s_1 - s_2)``, ``beta = lam (1 - P_1) G(s_1)``, ``G(x) = sum_{k<d'} x^k``.
    """
    L, K = int(levels), int(iqueue_levels)
    dp, dq = _exponents(policy, d)
    s, P, se, Pe = _ext(x, L, K)
    w = np.asarray(w, dtype=float)
    p0 = 1.0 - P[0]
    iP1 = L
    out = np.zeros(L + K)
    dh = dp * se ** (dp - 1)
    d2h = dp * (dp - 1) * se ** (dp - 2) if dp >= 2 else np.zeros_like(se)
    for i in range(1, L + 1):
        k = i - 1  # row / column of s_i
        v = -lam * p0 * d2h[i] * w[k, k] + 2.0 * lam * dh[i] * w[iP1, k]
        if i >= 2:
            v += lam * p0 * d2h[i - 1] * w[k - 1, k - 1] - 2.0 * lam * dh[i - 1] * w[iP1, k - 1]
        out[k] = v
    J = r * (s[0] - s[1])
    s1 = s[0]
    G = sum(s1**k for k in range(dp))
    dG = sum(k * s1 ** (k - 1) for k in range(1, dp))
    d2G = sum(k * (k - 1) * s1 ** (k - 2) for k in range(2, dp))
    db_ds1, db_dP1 = lam * p0 * dG, -lam * G
    d2beta_w = lam * p0 * d2G * w[0, 0] - 2.0 * lam * dG * w[0, iP1]
    dH = dq * Pe ** (dq - 1)
    d2H = dq * (dq - 1) * Pe ** (dq - 2) if dq >= 2 else np.zeros_like(Pe)
    for j in range(1, K + 1):
        m = L + j - 1  # row / column of P_j
        delta = Pe[j] - Pe[j + 1]
        # J w_j: J linear in (s_1, s_2), w_j = H(P_{j-1}) - H(P_j)
        v = -J * d2H[j] * w[m, m]
        v += 2.0 * (-dH[j]) * r * (w[0, m] - w[1, m])
        if j >= 2:
            v += J * d2H[j - 1] * w[m - 1, m - 1]
            v += 2.0 * dH[j - 1] * r * (w[0, m - 1] - w[1, m - 1])
        # -j beta delta_j, delta_j = P_j - P_{j+1}
        cross = db_ds1 * w[0, m] + db_dP1 * w[iP1, m]
        if j < K:
            cross -= db_ds1 * w[0, m + 1] + db_dP1 * w[iP1, m + 1]
        v -= j * (d2beta_w * delta + 2.0 * cross)
        out[m] = v
    return out


def drift_1n(x, policy, lam, r, d, levels, iqueue_levels) -> np.ndarray:
    """``f1``: the 1/N part of the drift (sampling without replacement; 0 for ``jiq``)."""
    L, K = int(levels), int(iqueue_levels)
    s, P, se, Pe = _ext(x, L, K)
    out = np.zeros(L + K)
    p0 = 1.0 - P[0]
    pol = policy_record(policy)
    if pol.probes and d >= 2:
        g = probes_in_set_1n(se, d)
        g[0] = 0.0  # s_0 = 1 exactly
        g[-1] = 0.0
        out[:L] = lam * p0 * (g[:L] - g[1 : L + 1])
        j = np.arange(1, K + 1)
        beta1 = lam * p0 * 0.5 * d * (d - 1) * s[0] ** (d - 1)
        out[L:] = -j * (Pe[1 : K + 1] - Pe[2:]) * beta1
    elif pol.joins_shortest_iqueue and d >= 2:
        g = probes_in_set_1n(Pe, d)
        g[0] = 0.0
        g[-1] = 0.0
        out[L:] = r * (s[0] - s[1]) * r * (g[:K] - g[1 : K + 1])
    return out


def drift_exact(x, policy, lam, r, d, levels, iqueue_levels, n: float) -> np.ndarray:
    """The exact finite-N drift (``N = n`` servers, ``M = n / r`` I-queues; distinct probes), a
    rational function of ``1/n`` that is also defined for ``n < 0`` (the tests difference it in
    ``1/n`` to check :func:`drift_1n`)."""
    L, K = int(levels), int(iqueue_levels)
    dp, dq = _exponents(policy, d)
    s, P, se, Pe = _ext(x, L, K)
    p0 = 1.0 - P[0]
    probe_tail = probes_in_set(se, dp, n) if dp >= 2 else se.copy()
    probe_tail[0], probe_tail[-1] = 1.0, 0.0
    fs = lam * p0 * (probe_tail[:L] - probe_tail[1 : L + 1]) - (se[1 : L + 1] - se[2:])
    fs[0] += lam * (1.0 - p0)
    beta = lam * p0 * (1.0 - probe_tail[1]) / (1.0 - s[0])
    HP = probes_in_set(Pe, dq, n / r) if dq >= 2 else Pe.copy()
    HP[0], HP[-1] = 1.0, 0.0
    J = r * (s[0] - s[1])
    j = np.arange(1, K + 1)
    fP = J * (HP[:K] - HP[1 : K + 1]) - (lam * r + beta * j) * (Pe[1 : K + 1] - Pe[2:])
    return np.concatenate((fs, fP))


# ---------------------------------------------------------------------------------------------
# fixed point and the expansion


def levels_for(policy: str, lam: float, r: float, d: int, eps: float = TAIL_EPS):
    """``(L, K, point)``: truncation levels (first below ``eps``, plus :data:`TRUNC_EXTRA`) and
    the first-route fixed point."""
    fp = mf.fixed_point(policy, lam, r, d, max_level=4096)
    below = np.nonzero(fp.tail <= eps * fp.tail[0])[0]
    if below.size == 0:
        raise ValueError(f"policy={policy}, lam={lam}, r={r}, d={d}: the tail stays above {eps}")
    L = max(2, int(below[0]) + 1 + TRUNC_EXTRA)
    P = np.cumsum(fp.iqueue_pmf[::-1])[::-1][1:]  # P_j, j = 1..
    below = np.nonzero(P <= eps)[0]
    K = (int(below[0]) + 1 if below.size else P.size) + TRUNC_EXTRA
    return L, K, fp


def _fixed_state(policy, lam, r, d, L, K, fp):
    tail = np.zeros(L)
    m = min(L, fp.tail.size)
    tail[:m] = fp.tail[:m]
    P = np.cumsum(fp.iqueue_pmf[::-1])[::-1][1:]
    Pk = np.zeros(K)
    m = min(K, P.size)
    Pk[:m] = P[:m]
    x = np.concatenate((tail, Pk))
    for _ in range(20):  # Newton on the truncated drift (the closed form is off by ~TAIL_EPS)
        f = mf.drift(x, policy, lam, r, d, L, K)
        if np.max(np.abs(f)) < 1e-15 * max(1.0, r):
            break
        x = x - solve(mf.drift_jacobian(x, policy, lam, r, d, L, K).toarray(), f)
    return x


def _expansion(policy, lam, r, d, L, K, fp):
    x = _fixed_state(policy, lam, r, d, L, K, fp)
    a = mf.drift_jacobian(x, policy, lam, r, d, L, K).toarray()
    q = noise(x, policy, lam, r, d, L, K)
    f1 = drift_1n(x, policy, lam, r, d, L, K)
    v, w = refined_expansion(x, a, lambda ww: hessian_contract(x, policy, lam, r, d, L, K, ww), q, f1)
    return x, v, w, a, f1


def jiq_refined(policy: str, lam: float, r: float, d: int = 1, levels: int | None = None,
                iqueue_levels: int | None = None, check_truncation: bool = True) -> JiqRefined:
    """The refined expansion of a JIQ policy at load ``lam``, ``r`` servers per scheduler."""
    policy, lam, r, d = mf._check(policy, lam, r, d)
    d = policy_record(policy).probe_d(d)
    L0, K0, fp = levels_for(policy, lam, r, d)
    L = L0 if levels is None else mf._check_int("levels", levels, 2)
    K = K0 if iqueue_levels is None else mf._check_int("iqueue_levels", iqueue_levels)
    x, v, w, a, f1 = _expansion(policy, lam, r, d, L, K, fp)
    change = math.nan
    if check_truncation:
        L2, K2 = L + TRUNC_EXTRA, K + TRUNC_EXTRA
        _, v2, _, _, _ = _expansion(policy, lam, r, d, L2, K2, fp)
        change = max(abs(float(v2[:L2].sum() - v[:L].sum())), abs(float(v2[L2] - v[L])))
    return JiqRefined(x, v, w, a, f1, L, K, change)


def _expect_blind_busy(e: JiqRefined, level: int, policy: str, d: int, n: int) -> float:
    """``E[p0 h_N(s_level)]`` to first order (p0 = 1 - P_1)."""
    L = e.levels
    if level > L:
        return 0.0
    dp, _ = _exponents(policy, d)
    i, iP = level - 1, L
    s, p0 = float(e.x[i]), 1.0 - float(e.x[iP])
    h, dh = s**dp, dp * s ** (dp - 1)
    d2h = dp * (dp - 1) * s ** (dp - 2) if dp >= 2 else 0.0
    lin = -h * e.v[iP] + p0 * dh * e.v[i]
    quad = 0.5 * p0 * d2h * e.w[i, i] - dh * e.w[i, iP]
    g1 = p0 * float(probes_in_set_1n(s, dp)) if dp >= 2 else 0.0
    return p0 * h + (lin + quad + g1) / n


# ---------------------------------------------------------------------------------------------
# the engine entry point


def run_task(task: dict) -> dict:
    """Refined mean-field values of one JIQ task at its ``n_servers`` (``M = N / r``): the
    first-order values of the result keys of :func:`sim.jiq.meanfield.run_task`, plus
    ``mean_queue_1n``; standard errors ``None``."""
    policy = task.get("policy")
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} has no refined mean field here; valid: {', '.join(POLICIES)}")
    policy, lam, r, d = mf._check(policy, task.get("lam"), task.get("r"), task.get("d", 1) or 1)
    d = policy_record(policy).probe_d(d)
    n = int(task["n_servers"])
    settings = RunSettings.from_task(task)
    max_level, h_level = settings.max_level, settings.h
    if h_level < 1:
        raise ValueError(f"h={h_level!r} must be an integer >= 1")
    e = jiq_refined(policy, lam, r, d)
    L = e.levels
    tail = np.zeros(max_level)
    m = min(max_level, L)
    tail[:m] = (e.x[:L] + e.v[:L] / n)[:m]
    v_sum = float(e.v[:L].sum())
    mean_queue = float(e.x[:L].sum()) + v_sum / n
    mean_response = mean_queue / lam
    p0 = 1.0 - float(e.x[L]) - float(e.v[L]) / n
    mean_iqueue = float(e.x[L:].sum()) + float(e.v[L:].sum()) / n
    prob_wait = _expect_blind_busy(e, 1, policy, d, n)
    within = 1.0 - _expect_blind_busy(e, h_level, policy, d, n)
    join = float(e.x[0] - e.x[1]) + float(e.v[0] - e.v[1]) / n
    delete = lam * (p0 - prob_wait)
    probe = mf.probe_rate(policy, d, lam, p0, join)
    return single_task_row(
        mean_response=mean_response, prob_wait=prob_wait, mean_queue=mean_queue, tail=tail,
        within=within, mean_queue_1n=v_sum,
        p0=p0, p0_se=None, mean_iqueue=mean_iqueue, mean_iqueue_se=None,
        join_rate=join, join_rate_se=None, delete_rate=float(delete), delete_rate_se=None,
        probe_rate=float(probe), probe_rate_se=None,
        messages_per_job=float((join + delete + probe) / lam))
