"""The model-free part of the refined mean field (Gast & Van Houdt 2017/2018; docs/refined.md).

For a density-dependent population process whose state ``x`` jumps by ``l / N`` at rate
``N beta_l(x)``, with drift ``f^N(x) = f(x) + f1(x) / N + O(1/N^2)``, the stationary mean of a
smooth model with an exponentially stable fixed point ``x*`` of ``f`` is::

    E[X^N] = x* + V / N + O(1/N^2),
    V = -A^{-1} ( (1/2) B : W + f1(x*) ),   A W + W A^T + Q(x*) = 0,

with ``A = Df(x*)``, ``B = D^2 f(x*)`` and ``Q(x) = sum_l l l^T beta_l(x)``
(:func:`refined_expansion`). A model supplies ``x*``, ``A``, ``B : W``, ``Q`` and ``f1``
(:mod:`sim.dispatch.refined`, :mod:`sim.dispatch.refined_batch`, :mod:`sim.jiq.refined`).

Also here: the result row of a refined single-task model (:func:`single_task_row`) and the
probability that ``d`` probes drawn without replacement among ``N`` all fall in a set of ``N x``
(:func:`probes_in_set`), with its 1/N part (:func:`probes_in_set_1n`), which the models that
sample distinct servers (or distinct I-queues) share.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import solve, solve_continuous_lyapunov

from sim.core.results import exact_row

__all__ = ["CI_METHOD", "refined_expansion", "single_task_row", "probes_in_set",
           "probes_in_set_1n"]

CI_METHOD = "refined mean field: x* + V/N to first order in 1/N (no estimate, no SE)"


def refined_expansion(x, a, hess_w, q, f1) -> tuple[np.ndarray, np.ndarray]:
    """``(V, W)`` from ``x*``, ``A``, the map ``W -> (B : W)``, ``Q(x*)`` and ``f1(x*)``.

    ``hess_w(W)`` returns the vector ``sum_{k,l} B_{j,kl} W_{kl}``.  ``A`` must be Hurwitz
    (the fixed point exponentially stable): checked, ``ValueError`` otherwise.
    """
    a = np.asarray(a, dtype=float)
    q = np.asarray(q, dtype=float)
    eig = np.linalg.eigvals(a)
    if not np.all(eig.real < 0):
        raise ValueError(f"the Jacobian at the fixed point is not Hurwitz (max Re = {eig.real.max():.3g})")
    w = solve_continuous_lyapunov(a, -q)  # A W + W A^T = -Q
    w = 0.5 * (w + w.T)
    rhs = 0.5 * np.asarray(hess_w(w), dtype=float) + np.asarray(f1, dtype=float)
    v = -solve(a, rhs)
    return v, w


def single_task_row(*, mean_response, prob_wait, mean_queue, tail, within, mean_queue_1n,
                    **extra) -> dict:
    """The result row of a refined single-task model (no SEs: nothing is estimated), with the
    model's own columns ``extra`` (message rates, ``p0``, ...)."""
    row = exact_row(mean_response=mean_response, mean_wait=mean_response - 1.0,
                    prob_wait=prob_wait, mean_queue=mean_queue, tail=tail,
                    queueing_ratio=mean_response - 1.0, drop_prob=0.0, frac_within_h=within,
                    messages_per_job=extra.pop("messages_per_job"), ci_method=CI_METHOD)
    return {**row, **extra, "mean_queue_1n": mean_queue_1n}


def probes_in_set(x, d: int, n: float) -> np.ndarray:
    """P(``d`` probes drawn without replacement among ``n`` all fall among ``n x`` of them):
    ``C(n x, d) / C(n, d) = prod_{j<d} (x - j/n) / (1 - j/n)``, a polynomial in ``x`` (not
    clipped where ``n x < d`` makes it negative: the expansions need the polynomial), also
    defined for ``n < 0`` (the tests difference it in ``1/n``)."""
    x = np.asarray(x, dtype=float)
    out = np.ones_like(x)
    for j in range(d):
        out = out * (x - j / n) / (1.0 - j / n)
    return out


def probes_in_set_1n(x, d: int):
    """The 1/N part of :func:`probes_in_set`: ``-(d(d-1)/2) x**(d-1) (1 - x)`` (``x**d`` is the
    limit, with replacement)."""
    x = np.asarray(x, dtype=float)
    return -0.5 * d * (d - 1) * x ** (d - 1) * (1.0 - x)
