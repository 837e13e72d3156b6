"""Exact stationary means of small load-balancing systems: the continuous-time Markov chain of
N exponential servers (rate 1) with Poisson arrivals (rate N lam) dispatched by power-of-d
(``pod``: d distinct queues sampled without replacement, join the shortest; as the project's
simulators) or join-the-shortest-queue (``jsq``).

The state is the vector of queue lengths up to a permutation (the chain is symmetric), stored
as the counts of servers per level: a non-increasing tuple of N queue lengths, each at most
``L``. Truncation: an arrival that would take a queue past ``L`` is dropped. The stationary
distribution is solved exactly, level by level: every jump moves the total number of tasks by
one, so the generator is block tridiagonal in that total, and linear level reduction (from
the top level down, ``S_J = D_J + A_{J,J+1} (-S_{J+1})^{-1} A_{J+1,J}``, then ``pi_J =
pi_{J-1} A_{J-1,J} (-S_J)^{-1}`` from the empty state up) needs dense LU factors of one level at
a time, not of the whole lattice (a sparse LU of the whole fills in; an ILU-preconditioned
GMRES did not finish power-of-2 at N = 8, cap 11 in 20 minutes). :func:`solve` reports the
stationary mass on states with a queue at ``L`` (``mass_at_cap``).

Dropping arrivals at the cap makes the truncated system smaller under the natural coupling, so
its mean rises with ``L`` towards the true one. Where the mass at the cap is not negligible
(N = 8, lam = 0.9), :func:`extrapolated` takes the means at consecutive caps, whose increments
shrink geometrically, and returns the limit of that geometric tail with a bound.

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


def _level_reduction(Q, total: np.ndarray) -> np.ndarray:
    """The stationary vector of a generator whose jumps all move ``total`` by exactly one (block
    tridiagonal by level), with level 0 a single state: linear level reduction with dense LU
    factors per level (see the module doc)."""
    import scipy.linalg as sla

    top = int(total.max())
    levels = [np.flatnonzero(total == j) for j in range(top + 1)]
    if len(levels[0]) != 1:
        raise ValueError("level 0 must hold one state (the empty system)")

    def block(a: int, b: int) -> np.ndarray:
        return Q[levels[a]][:, levels[b]].toarray()

    factors = [None] * (top + 1)
    s = block(top, top)
    factors[top] = sla.lu_factor(-s)
    for j in range(top - 1, 0, -1):
        s = block(j, j) + block(j, j + 1) @ sla.lu_solve(factors[j + 1], block(j + 1, j))
        factors[j] = sla.lu_factor(-s)
    pi = np.zeros(Q.shape[0])
    part = np.ones(1)
    pi[levels[0]] = part
    for j in range(1, top + 1):
        # pi_J (-S_J) = pi_{J-1} A_{J-1,J}: the transposed system of -S_J's factors
        part = sla.lu_solve(factors[j], part @ block(j - 1, j), trans=1)
        pi[levels[j]] = part
    return pi


def solve(n: int, lam: float, policy: str, d: int = 2, cap: int = 30) -> Exact:
    """The stationary mean response and queue of the truncated chain (see the module doc)."""
    Q, states = generator(n, lam, policy, d, cap)
    jobs = np.array([sum(s) for s in states], dtype=np.float64)
    pi = _level_reduction(Q, jobs.astype(np.int64))
    pi = np.maximum(pi, 0.0)
    pi /= pi.sum()
    at_cap = np.array([s[0] == cap for s in states])
    ej = float(pi @ jobs)
    return Exact(ej / (n * lam), ej / n, float(pi[at_cap].sum()), len(states), cap)


class Extrapolated(NamedTuple):
    mean_response: float  #: the fitted limit of the truncated means (the last ``FIT_CAPS`` caps)
    bound: float  #: error estimate: ``EXTRAPOLATION_SAFETY`` x the change from one cap more in the fit
    caps: tuple[int, ...]
    means: tuple[float, ...]  #: the truncated chains' means at ``caps``
    mass_at_cap: float  #: at the largest cap


#: caps in the fit of :func:`extrapolated`, and the factor from the fit's change to its bound
FIT_CAPS, EXTRAPOLATION_SAFETY = 5, 4.0


def _tail_fit(caps, means) -> float:
    """The limit ``m`` of ``m(L) = m - C L**beta rho**L`` fitted through the means at the caps."""
    from scipy.optimize import least_squares

    x, y = np.asarray(caps, dtype=np.float64), np.asarray(means, dtype=np.float64)
    inc = np.diff(y)
    r = inc[-1] / inc[-2]
    start = [y[-1] + inc[-1] * r / (1.0 - r), math.log(inc[-1] / (1.0 - r)) - math.log(r) * x[-1], 0.0,
             math.log(r)]

    def residual(p):
        limit, log_c, beta, log_rho = p
        return (limit - np.exp(log_c + beta * np.log(x) + log_rho * x) - y) * 1e3

    return float(least_squares(residual, start, method="lm", xtol=1e-15, ftol=1e-15).x[0])


def extrapolated(n: int, lam: float, policy: str, caps: tuple[int, ...], d: int = 2) -> Extrapolated:
    """The untruncated mean response from the truncated means at consecutive ``caps`` (at least
    ``FIT_CAPS + 1``). The truncated means rise with the cap and their gap to the limit falls
    like ``L**beta rho**L`` (the mass at the cap does), so the limit is fitted through the last
    ``FIT_CAPS`` means; the bound is ``EXTRAPOLATION_SAFETY`` times the fit's change when one
    more cap is added: an error estimate, not a proof. On power-of-2 and JSQ at N = 4, lam = 0.9
    (caps 5..20 against cap 36, whose mass at the cap is 4e-7) the fit's error was positive and
    1.8-4.6 times that change for windows ending at caps 10-20, and 8-12 times smaller than a
    geometric (Aitken) tail's; tests/core/test_exact_small_n.py checks it at N = 3."""
    caps = tuple(int(c) for c in caps)
    if len(caps) < FIT_CAPS + 1 or any(b != a + 1 for a, b in zip(caps, caps[1:])):
        raise ValueError(f"caps={caps!r}: at least {FIT_CAPS + 1} consecutive caps")
    exact = [solve(n, lam, policy, d, c) for c in caps]
    means = tuple(e.mean_response for e in exact)
    if any(b <= a for a, b in zip(means, means[1:])):
        raise ValueError(f"caps={caps!r}: the truncated means do not rise ({means})")
    fit = _tail_fit(caps[-FIT_CAPS:], means[-FIT_CAPS:])
    wider = _tail_fit(caps[-FIT_CAPS - 1:], means[-FIT_CAPS - 1:])
    return Extrapolated(fit, EXTRAPOLATION_SAFETY * abs(fit - wider), caps, means, exact[-1].mass_at_cap)
