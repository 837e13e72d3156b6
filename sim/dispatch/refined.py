"""Refined mean field: the 1/N term of the stationary tails (Gast & Van Houdt 2017/2018).

For a density-dependent population process whose state ``x`` (here the tail ``s_i``) jumps by
``l / N`` at rate ``N beta_l(x)``, with drift ``f^N(x) = sum_l l beta_l(x) = f(x) + f1(x) / N +
O(1/N^2)``, the stationary mean of a smooth model with an exponentially stable fixed point
``x*`` of ``f`` is (Gast & Van Houdt, "A refined mean field approximation", SIGMETRICS 2018;
Gast, Bortolussi & Tribastone, "Size expansions of mean field approximation", 2019)::

    E[X^N] = x* + V / N + O(1/N^2),
    V = -A^{-1} ( (1/2) B : W + f1(x*) ),   A W + W A^T + Q(x*) = 0,

with ``A = Df(x*)``, ``B = D^2 f(x*)`` (``(B : W)_j = sum_{k,l} B_{j,kl} W_{kl}``) and
``Q(x) = sum_l l l^T beta_l(x)``.  ``W / N`` is the covariance of the fluctuations, ``V / N`` the
bias of the mean field.

Power-of-d (``pod``) of this model: a job probes ``d`` servers and joins a shortest one; the tail
``s_i`` (fraction of servers with at least ``i`` tasks) rises by ``1/N`` when the job joins a
queue of length ``i - 1`` and falls by ``1/N`` at a service completion at a server of length
``i``.  With ``h_N(x)`` = P(all ``d`` probes have ``>= i`` tasks) when ``x = s_i``::

    f^N_i(s) = lam (h_N(s_{i-1}) - h_N(s_i)) - (s_i - s_{i+1}),
    Q_ii(s) = lam (h_N(s_{i-1}) - h_N(s_i)) + (s_i - s_{i+1})   (Q diagonal: jumps are +-e_i/N).

* With replacement (``replacement=True``): ``h_N(x) = x**d`` exactly, ``f1 = 0``.
* Without replacement (the project's simulators: ``d`` distinct servers), ``h_N(x) =
  C(N x, d) / C(N, d) = prod_{j<d} (x - j/N) / (1 - j/N)``; expanding the product to first order
  in ``1/N``, ``h_N(x) = x**d - (d (d - 1) / 2) x**(d - 1) (1 - x) / N + O(1/N^2)``, so
  ``f1_i = lam (g(s_{i-1}) - g(s_i))`` with ``g(x) = -(d(d-1)/2) x**(d-1) (1 - x)`` (``g(1) = 0``:
  the ``s_0 = 1`` boundary gains nothing).

``A`` is tridiagonal and ``B`` has two non-zero entries per row (``d^2 f_i / ds_{i-1}^2 = lam d
(d-1) s_{i-1}^{d-2}``, ``d^2 f_i / ds_i^2 = -lam d (d-1) s_i^{d-2}``), both written out here;
the tests check them (and ``V``) against finite differences of the drift and against
long simulations.  ``d = 1`` is random routing, independent M/M/1 queues: ``f`` is linear and
``f1 = 0``, so ``V = 0`` (the M/M/1 tail is exact at every N).

Derived quantities, all to first order in ``1/N``:

* mean queue per server ``E[Q] = sum_i E[s_i] = sum_i x*_i + (sum_i V_i) / N``; the row's
  ``mean_queue_1n`` is ``sum_i V_i``;
* mean response ``E[T] = E[Q] / lam`` (Little's law, exact at every N for single-task jobs);
* the probability that a job waits, by PASTA ``E[h_N(s_1)]``: for a smooth ``g``,
  ``E[g(X)] = g(x*) + (Dg V + (1/2) tr(D^2 g W) + g1) / N``; likewise ``frac_within_h =
  1 - E[h_N(s_h)]``.

Truncation: the state is infinite; it is cut at the level ``L`` (``s_{L+1} := 0``) where the
fixed point falls below ``TAIL_EPS = 1e-12`` relative to ``s_1``, then ``TRUNC_EXTRA``
further levels are kept, because ``V_i`` decays more slowly than ``x*_i`` (``V_i`` is driven by
``s_{i-1}``).  :func:`pod_refined` reports the change of ``sum V`` when ``L`` grows by
``TRUNC_EXTRA`` (``trunc_change``): docs/refined.md shows it is at round-off.

Discontinuous drifts are left out: JSQ (the limit drift jumps where ``s_1`` reaches 1) and
partial centralization (the central server serves a longest queue) have no Jacobian at their
fixed points, so the expansion above does not apply.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.core.refined import probes_in_set, probes_in_set_1n, refined_expansion, single_task_row
from sim.core.settings import RunSettings
from sim.dispatch.meanfield._common import _check_d, _check_lam
from sim.dispatch.meanfield.pod import fixed_point, pod_mean_queue
from sim.dispatch.policies import policy_of

__all__ = [
    "RefinedExpansion",
    "pod_drift",
    "pod_drift_1n",
    "pod_h_exact",
    "pod_jacobian",
    "pod_hessian_contract",
    "pod_noise",
    "pod_levels",
    "pod_refined",
    "run_task",
    "TAIL_EPS",
    "TRUNC_EXTRA",
]

#: relative size of the fixed-point tail below which levels are cut (before TRUNC_EXTRA)
TAIL_EPS = 1e-12
#: levels kept beyond the TAIL_EPS level (V decays more slowly than x*)
TRUNC_EXTRA = 4


class RefinedExpansion(NamedTuple):
    """``E[X^N] = x + v / N + O(1/N^2)`` with the covariance ``w / N`` of the fluctuations."""

    x: np.ndarray  #: the fixed point x* (length L)
    v: np.ndarray  #: the 1/N coefficient V
    w: np.ndarray  #: solution of A W + W A^T + Q = 0 (L x L)
    a: np.ndarray  #: Jacobian of the drift at x*
    f1: np.ndarray  #: the 1/N part of the drift at x*
    levels: int
    trunc_change: float  #: |sum V(L + TRUNC_EXTRA) - sum V(L)| (nan when not measured)


# ---------------------------------------------------------------------------------------------
# power-of-d


def _shift_down(s: np.ndarray, first: float) -> np.ndarray:
    """``out[i] = s[i - 1]`` with ``out[0] = first`` (the value at level i - 1)."""
    out = np.empty_like(s)
    out[0] = first
    out[1:] = s[:-1]
    return out


def _shift_up(s: np.ndarray) -> np.ndarray:
    """``out[i] = s[i + 1]``, 0 past the last level (the truncation ``s_{L+1} = 0``)."""
    out = np.zeros_like(s)
    out[:-1] = s[1:]
    return out


def pod_h_exact(x, d: int, n: float | None, replacement: bool) -> np.ndarray:
    """P(all ``d`` probes fall among the ``N x`` servers of a set): ``x**d`` with replacement
    (or ``n=None``: the limit), ``prod_{j<d} (x - j/N) / (1 - j/N)`` without; 0 when ``N x < d``
    would make the product negative is *not* clipped (the expansion needs the polynomial)."""
    x = np.asarray(x, dtype=float)
    if replacement or n is None:
        return x**d
    return probes_in_set(x, d, n)


def pod_drift(s, lam: float, d: int, n: float | None = None, replacement: bool = True) -> np.ndarray:
    """Drift of the truncated pod tail; the exact finite-N one when ``n`` is given (and
    ``replacement`` is false), the limit ``f`` otherwise."""
    s = np.asarray(s, dtype=float)
    h = pod_h_exact(s, d, n, replacement)
    return lam * (_shift_down(h, 1.0) - h) - (s - _shift_up(s))


def pod_drift_1n(s, lam: float, d: int, replacement: bool) -> np.ndarray:
    """``f1``: the 1/N part of the drift (0 with replacement)."""
    s = np.asarray(s, dtype=float)
    if replacement:
        return np.zeros_like(s)
    g = probes_in_set_1n(s, d)
    return lam * (_shift_down(g, 0.0) - g)


def pod_jacobian(s, lam: float, d: int) -> np.ndarray:
    """Dense Jacobian of the limit drift (tridiagonal)."""
    s = np.asarray(s, dtype=float)
    dh = d * s ** (d - 1)
    a = np.diag(-lam * dh - 1.0)
    idx = np.arange(s.size - 1)
    a[idx + 1, idx] = lam * dh[:-1]  # df_i / ds_{i-1}
    a[idx, idx + 1] = 1.0  # df_i / ds_{i+1}
    return a


def pod_hessian_contract(s, lam: float, d: int, w) -> np.ndarray:
    """``(B : W)_i = lam d (d-1) (s_{i-1}^{d-2} W_{i-1,i-1} - s_i^{d-2} W_{ii})``."""
    s = np.asarray(s, dtype=float)
    diag = np.diag(np.asarray(w, dtype=float))
    if d < 2:
        return np.zeros_like(s)
    d2h = d * (d - 1) * s ** (d - 2) * diag
    return lam * (_shift_down(d2h, 0.0) - d2h)


def pod_noise(s, lam: float, d: int) -> np.ndarray:
    """``Q(s)`` of the limit rates: diagonal, arrivals plus departures at each level."""
    s = np.asarray(s, dtype=float)
    h = s**d
    return np.diag(lam * (_shift_down(h, 1.0) - h) + (s - _shift_up(s)))


def pod_levels(lam: float, d: int, eps: float = TAIL_EPS) -> int:
    """Levels kept: first ``i`` with ``x*_i <= eps * x*_1``, plus :data:`TRUNC_EXTRA`."""
    lam = _check_lam(lam)
    d = _check_d(d)
    if lam == 0.0:
        return 1
    cap = 20_000
    tail = fixed_point(lam, d, cap)
    below = np.nonzero(tail <= eps * tail[0])[0]
    if below.size == 0:
        raise ValueError(f"lam={lam}, d={d}: the tail stays above {eps} for {cap} levels")
    return int(below[0]) + 1 + TRUNC_EXTRA


def _pod_expansion(lam: float, d: int, replacement: bool, levels: int):
    x = fixed_point(lam, d, levels)
    a = pod_jacobian(x, lam, d)
    q = pod_noise(x, lam, d)
    f1 = pod_drift_1n(x, lam, d, replacement)
    v, w = refined_expansion(x, a, lambda ww: pod_hessian_contract(x, lam, d, ww), q, f1)
    return x, v, w, a, f1


def pod_refined(lam: float, d: int, replacement: bool = False, levels: int | None = None,
                check_truncation: bool = True) -> RefinedExpansion:
    """The refined expansion of pod at load ``lam`` with ``d`` probes (``replacement``: with
    or without); ``levels`` defaults to :func:`pod_levels`.  ``trunc_change`` is the change of
    ``sum V`` when ``TRUNC_EXTRA`` more levels are kept."""
    lam = _check_lam(lam)
    d = _check_d(d)
    if levels is None:
        levels = pod_levels(lam, d)
    if lam == 0.0:
        z = np.zeros(levels)
        return RefinedExpansion(z, z.copy(), np.zeros((levels, levels)), -np.eye(levels), z.copy(),
                                levels, 0.0)
    x, v, w, a, f1 = _pod_expansion(lam, d, bool(replacement), int(levels))
    change = math.nan
    if check_truncation:
        _, v2, _, _, _ = _pod_expansion(lam, d, bool(replacement), int(levels) + TRUNC_EXTRA)
        change = abs(float(v2.sum()) - float(v.sum()))
    return RefinedExpansion(x, v, w, a, f1, int(levels), change)


def _expect_h(e: RefinedExpansion, level: int, d: int, n: int, replacement: bool) -> float:
    """``E[h_N(s_level)]`` to first order: ``h(x) + (h'(x) V + h''(x) W / 2 + h1(x)) / N``."""
    if level > e.levels:
        return 0.0
    i = level - 1
    x = float(e.x[i])
    h = x**d
    dh = d * x ** (d - 1)
    d2h = d * (d - 1) * x ** (d - 2) if d >= 2 else 0.0
    h1 = 0.0 if replacement else float(probes_in_set_1n(np.array([x]), d)[0])
    return h + (dh * e.v[i] + 0.5 * d2h * e.w[i, i] + h1) / n


# ---------------------------------------------------------------------------------------------
# the engine entry point


def run_task(task: dict) -> dict:
    """Refined mean-field values of one ``pod`` task at its ``n_servers`` (result keys of
    ``docs/results-schema.md`` plus ``mean_queue_1n``); standard errors are ``None``.

    ``replacement`` (default false, as the simulators): the ``d`` probes are drawn with
    replacement.  Single-task jobs only (``k`` is not a parameter of ``pod``). A batch
    policy's task goes to :func:`sim.dispatch.refined_batch.run_task` (the engine's one
    runner picks the expansion)."""
    pol = policy_of(task)
    if pol.batch:
        from sim.dispatch.refined_batch import run_task as run_batch
        return run_batch(task)
    if not pol.single_task:
        raise ValueError(f"policy={pol.name!r} has no refined mean field here")
    lam = _check_lam(task["lam"])
    d = _check_d(task["d"])
    n = int(task["n_servers"])
    replacement = bool(task.get("replacement") or False)
    settings = RunSettings.from_task(task)
    max_level, h_level = settings.max_level, settings.h
    if h_level < 1:
        raise ValueError(f"h={h_level!r} must be an integer >= 1")
    e = pod_refined(lam, d, replacement)
    tail_full = e.x + e.v / n
    tail = np.zeros(max_level)
    m = min(max_level, e.levels)
    tail[:m] = tail_full[:m]
    v_sum = float(e.v.sum())
    mean_queue = pod_mean_queue(lam, d) + v_sum / n  # x* summed to 1e-300 (d = 1: lam/(1-lam))
    if lam > 0:
        mean_response = mean_queue / lam  # Little's law, exact for single-task jobs
        prob_wait = _expect_h(e, 1, d, n, replacement)
        within = 1.0 - _expect_h(e, h_level, d, n, replacement)
    else:
        mean_response, prob_wait, within = 1.0, 0.0, 1.0
    return single_task_row(mean_response=mean_response, prob_wait=prob_wait, mean_queue=mean_queue,
                           tail=tail, within=within, mean_queue_1n=v_sum,
                           messages_per_job=pol.messages(n, 1, d))

