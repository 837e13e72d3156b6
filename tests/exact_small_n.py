"""Exact stationary means of small load-balancing systems: the continuous-time Markov chain of
N exponential servers (rate 1) with Poisson arrivals (rate N lam) dispatched by power-of-d
(``pod``: d distinct queues sampled without replacement, join the shortest; as the project's
simulators) or join-the-shortest-queue (``jsq``).

The state is the vector of queue lengths up to a permutation (the chain is symmetric), stored
as the counts of servers per level: a non-increasing tuple of N queue lengths, each at most
``L``. Truncation: an arrival that would take a queue past ``L`` is dropped. The stationary
distribution is solved with scipy's sparse LU on ``pi Q = 0`` with one state's
probability fixed, then normalised; :func:`solve` reports the stationary mass on states with a queue
at ``L`` (``mass_at_cap``), which bounds how much the truncation can move the answer, and the
tests and the coverage script pick ``L`` so that it is negligible (and compare with ``L - 4``).

Mean response by Little's law: ``E[total jobs] / (N lam)``. Used by
``tests/core/test_exact_small_n.py`` (N = 1 is M/M/1) and ``benchmarks/se_coverage.py``.
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np


class Exact(NamedTuple):
    mean_response: float  #: E[total jobs] / (N lam) (Little)
    mean_queue: float  #: E[jobs per server]
    mass_at_cap: float  #: stationary mass of the states with a queue at the cap L
    n_states: int
    cap: int


def _states(n: int, cap: int) -> list[tuple[int, ...]]:
    """Non-increasing tuples of ``n`` queue lengths in 0..cap."""
    return [tuple(sorted(c, reverse=True))
            for c in itertools.combinations_with_replacement(range(cap + 1), n)]


def _join_probs(q: tuple[int, ...], policy: str, d: int) -> dict[int, float]:
    """Probability that an arrival joins a queue of each length (by level: the chain is
    symmetric, so which server of a level does not matter)."""
    n = len(q)
    levels = sorted(set(q))
    if policy == "jsq":
        return {levels[0]: 1.0}
    if policy != "pod":
        raise ValueError(f"policy={policy!r}: jsq or pod")
    # P(min of d distinct sampled >= l) = C(#{q >= l}, d) / C(n, d)
    total = math.comb(n, d)
    out = {}
    for lv in levels:
        ge = sum(1 for x in q if x >= lv)
        gt = sum(1 for x in q if x > lv)
        p = (math.comb(ge, d) - math.comb(gt, d)) / total
        if p > 0:
            out[lv] = p
    return out


def _replace(q: tuple[int, ...], old: int, new: int) -> tuple[int, ...]:
    lst = list(q)
    lst[lst.index(old)] = new
    return tuple(sorted(lst, reverse=True))


def generator(n: int, lam: float, policy: str, d: int = 2, cap: int = 30):
    """The truncated chain's generator (scipy CSR) and its state list."""
    import scipy.sparse as sp

    states = _states(n, cap)
    index = {s: i for i, s in enumerate(states)}
    rows, cols, vals = [], [], []
    for i, q in enumerate(states):
        for lv, p in _join_probs(q, policy, d).items():
            if lv < cap:
                rows.append(i), cols.append(index[_replace(q, lv, lv + 1)]), vals.append(n * lam * p)
        for lv in set(q):
            if lv > 0:
                rows.append(i), cols.append(index[_replace(q, lv, lv - 1)])
                vals.append(float(sum(1 for x in q if x == lv)))
    m = len(states)
    Q = sp.csr_matrix((vals, (rows, cols)), shape=(m, m))
    Q = Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())
    return Q.tocsr(), states


def solve(n: int, lam: float, policy: str, d: int = 2, cap: int = 30) -> Exact:
    """The stationary mean response and queue of the truncated chain (see the module doc)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    Q, states = generator(n, lam, policy, d, cap)
    # pi_0 = 1 (state 0: the empty system), the balance equations of the other states:
    # sum_{i>0} pi_i Q_ij = -Q_0j (no dense normalisation row, which would fill the LU)
    A = sp.csc_matrix(Q.T)[1:, 1:]
    rhs = -np.asarray(Q[0, 1:].todense()).ravel()
    if A.shape[0] <= 5000:
        x = spla.spsolve(A, rhs)
    else:  # GMRES preconditioned by an incomplete LU (a full LU fills in on these lattices)
        ilu = spla.spilu(A, drop_tol=1e-5, fill_factor=20)
        x, info = spla.gmres(A, rhs, M=spla.LinearOperator(A.shape, ilu.solve), rtol=1e-12,
                             atol=0.0, restart=50, maxiter=1000)
        if info != 0:
            raise RuntimeError(f"gmres did not converge (info={info})")
    pi = np.concatenate(([1.0], x))
    pi = np.maximum(pi, 0.0)
    pi /= pi.sum()
    jobs = np.array([sum(s) for s in states], dtype=np.float64)
    at_cap = np.array([s[0] == cap for s in states])
    ej = float(pi @ jobs)
    return Exact(ej / (n * lam), ej / n, float(pi[at_cap].sum()), len(states), cap)
