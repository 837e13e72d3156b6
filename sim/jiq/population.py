"""Distributed JIQ and JIQ-Po(d) declared by their transitions: the ``population``,
``population_meanfield`` and ``population_refined`` engines of the JIQ model's ``jiq`` and
``jiq_pod``.

State (units ``1/N``; ``N`` servers, ``M = N / r`` schedulers): the tail ``s_i``, the fraction
of servers with at least ``i`` tasks, ``i = 0 .. L + 1`` (``s_0 = 1`` and ``s_{L+1} = 0`` never
move), and the I-queue tail ``P_j``, the number of I-queues holding at least ``j`` idle servers
over ``N``, ``j = 0 .. K + 1`` (``P_0 = 1 / r`` and ``P_{K+1} = 0`` never move). The fraction of
schedulers whose I-queue has size ``j`` is ``r (P_j - P_{j+1})``; ``p0 = 1 - r P_1``. With
delete messages every idle server is listed exactly once, ``sum_j P_j = 1 - s_1``: every jump
below keeps it (the limits find it with :func:`sim.core.population_limit.conserved`).

Transitions (those of :mod:`sim.jiq._occupancy_kernel`; ``h(s)`` the probability that the
blind task's ``d`` distinct probes all find at least the level of ``s``, ``C(N s, d) / C(N, d)``,
``h(s) = s`` for ``jiq``):

- ``direct`` (j = 1..K): a task at a scheduler whose I-queue has size ``j``, rate ``N lam r
  (P_j - P_{j+1})``: ``P_j -= 1/N`` and the listed server leaves the idle level, ``s_1 += 1/N``
  (the fixed coordinate ``At(1)``); position 1.
- ``blind_idle`` (j = 1..K): a blind task (empty I-queue, ``lam p0``) whose server is idle
  (``1 - h(s_1)``), listed in an I-queue of size ``j`` (size-biased, ``j (P_j - P_{j+1}) / (1 -
  s_1)``): the delete shrinks that I-queue, ``P_j -= 1/N``, ``s_1 += 1/N``; position 1.
- ``blind`` (i = 2..L): a blind task to a server with ``i - 1 >= 1`` tasks, rate ``N lam p0
  (h(s_{i-1}) - h(s_i))``: ``s_i += 1/N``; position ``i``.
- ``depart`` (i = 2..L): ``s_i -= 1/N`` at rate ``N (s_i - s_{i+1})``.
- ``join`` (j = 1..K): a server with one task completes and joins a uniform I-queue, of size
  ``j - 1`` w.p. ``r (P_{j-1} - P_j)``: ``P_j += 1/N``, ``s_1 -= 1/N``.

Truncations: a job that would be the ``(L+1)``-th at its server is lost (``drop_prob``); an
I-queue of size ``K`` receives no join (the completion that would join it does not happen), so
``K`` is set out of reach. Simulation: ``K = ceil(r) + ceil(8 sqrt(r)) + 8`` (the empty start
spreads ``r`` servers per I-queue), ``L`` from the mean-field tail with ``p0`` raised by ``5 /
sqrt(M)`` for the finite-M fluctuations (``jiq_pod``: at most power-of-d's level,
:func:`sim.core.memory.longest_queue`) plus 2, reached by ``10^6`` times the run's
independent queues; the row's ``drop_prob`` shows any loss (tests check it is 0). Limits:
where the hand-written fixed point (:func:`sim.jiq.meanfield.fixed_point`) is below ``1e-20``,
plus 6.

``init: meanfield`` rounds the fixed point to counts that keep listed = idle
(:func:`_counts`). Rows: the population engine's keys (``mean_response`` by Little's law,
``prob_wait``, ``tail``, ...); the JIQ columns (``p0``, message rates) are the occupancy
engine's.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.memory import longest_queue
from sim.core.population import At, Population, Transitions, Vector, tail_vector
from sim.core.population_engine import simulate
from sim.core.population_limit import limit_row, refined_row
from sim.core.results import simulation_row
from sim.core.sampling import probes_in
from sim.jiq import check_task, n_schedulers
from sim.jiq.policies import POLICIES

__all__ = ["DECLS", "levels", "run_task", "run_meanfield", "run_refined"]

# p = (lam, r, d, L, K, 1 / prod_{j<d} (N - j) or 0, N or 0, N or 0, M or 0)
_LAM, _R, _D, _L, _K, _INV, _NDEN, _N, _M = range(9)


@njit(cache=True, inline="always")
def _h(s, n, p):
    """``C(N s, d) / C(N, d)`` (``s**d`` at ``n = inf``; ``s`` for ``d = 1``)."""
    d = np.int64(p[2])
    if d == 1:
        return s
    return probes_in(s, n, d, False, p[5], p[6])


# The rates are the polynomials of the module docstring, not clipped at 0: on counts the tails
# are non-increasing and every difference is >= 0; in the mean field a clip would make the
# drift flat (its Jacobian singular) where the ODE leaves a deep coordinate a rounding error
# below 0. ``p0`` is clipped at 0: ``r * (M / N)`` may round above 1.
@njit(cache=True)
def _direct(j, s, P, n, p):
    return p[0] * p[1] * (P[j] - P[j + 1])


@njit(cache=True)
def _blind_idle(j, s, P, n, p):
    p0 = max(1.0 - p[1] * P[1], 0.0)
    idle = 1.0 - s[1]
    if idle <= 0.0:  # all busy: no I-queue lists a server
        return 0.0
    ratio = 1.0 if np.int64(p[2]) == 1 else (1.0 - _h(s[1], n, p)) / idle
    return p[0] * p0 * ratio * j * (P[j] - P[j + 1])


@njit(cache=True)
def _blind(i, s, P, n, p):
    p0 = max(1.0 - p[1] * P[1], 0.0)
    return p[0] * p0 * (_h(s[i - 1], n, p) - _h(s[i], n, p))


@njit(cache=True)
def _depart(i, s, P, n, p):
    return s[i] - s[i + 1]


@njit(cache=True)
def _join(j, s, P, n, p):
    return (s[1] - s[2]) * p[1] * (P[j - 1] - P[j])


def _start(p, sizes):
    """All servers idle and listed, ``r`` per I-queue as evenly as the counts allow (the
    occupancy engine's empty start); in the limits (``N`` unknown) ``floor(r)`` or one more."""
    s = np.zeros(sizes[0])
    s[0] = 1.0
    P = np.zeros(sizes[1])
    r = p[_R]
    P[0] = 1.0 / r
    if p[_N] > 0:
        n, m = int(p[_N]), int(p[_M])
        q, rem = divmod(n, m)
        P[1: q + 1] = m / n
        P[q + 1] += rem / n
    else:
        q = int(math.floor(r))
        P[1: q + 1] = 1.0 / r
        P[q + 1] += (r - q) / r
    return [s, P]


def _counts(p, x, n):
    """Counts of ``n`` servers from fractions ``x`` (flat ``s`` then ``P``): the tails rounded
    and kept non-increasing, then I-queues moved one size at a time (the smallest up, or the
    largest down) until the listed servers are the idle ones."""
    L2 = int(p[_L]) + 2
    c = np.rint(np.asarray(x) * n).astype(np.int64)
    s, P = c[:L2].copy(), c[L2:].copy()
    s[0] = n
    s = np.minimum.accumulate(np.clip(s, 0, n))
    m = int(p[_M]) if p[_M] > 0 else int(round(n / p[_R]))
    P[0] = m
    P = np.minimum.accumulate(np.clip(P, 0, m))
    y = P - np.append(P[1:], 0)  # I-queues per size
    k_top = P.size - 2  # sizes 0 .. K
    defect = int(n - s[1]) - int(P[1:].sum())
    while defect != 0:
        occ = np.nonzero(y[: k_top + 1])[0]
        if defect > 0:
            j = int(occ[occ < k_top][0])
            y[j] -= 1
            y[j + 1] += 1
            defect -= 1
        else:
            j = int(occ[occ > 0][-1])
            y[j] -= 1
            y[j - 1] += 1
            defect += 1
    P = np.cumsum(y[::-1])[::-1]
    return np.concatenate((s, P))


def _declare(name: str, pod: bool) -> Population:
    s1 = (("s", At(1)),) if pod else ()
    return Population(
        name=name,
        vectors=(Vector("s", lambda p: int(p[_L]) + 2), Vector("P", lambda p: int(p[_K]) + 2)),
        transitions=(
            Transitions("direct", _direct, (("P", 0, -1), ("s", At(1), 1)), 1, -1,
                        reads=(("P", 0), ("P", 1)), arrival=True, position=At(1)),
            Transitions("blind_idle", _blind_idle, (("P", 0, -1), ("s", At(1), 1)), 1, -1,
                        reads=(("P", 0), ("P", 1), ("P", At(1))) + s1, arrival=True,
                        position=At(1)),
            Transitions("blind", _blind, (("s", 0, 1),), 2, -1,
                        reads=(("s", -1), ("s", 0), ("P", At(1))), arrival=True, position=0),
            Transitions("depart", _depart, (("s", 0, -1),), 2, -1, reads=(("s", 0), ("s", 1))),
            Transitions("join", _join, (("P", 0, 1), ("s", At(1), -1)), 1, -1,
                        reads=(("P", -1), ("P", 0), ("s", At(1)), ("s", At(2)))),
        ),
        params=_params,
        start=_start,
        **tail_vector("s"),
        arrival_rate=lambda p: float(p[_LAM]),
        mean_service=1.0,
        counts=_counts,
    )


def _d(task: dict) -> int:
    return POLICIES[task["policy"]].probe_d(task.get("d"))


def levels(task: dict) -> tuple[int, int]:
    """The truncations ``(L, K)`` of a task (module docstring)."""
    from sim.jiq.meanfield import fixed_point as mf_fixed_point

    lam, r, d, policy = float(task["lam"]), float(task["r"]), _d(task), task["policy"]
    fp = mf_fixed_point(policy, lam, r, d, max_level=4096)
    if task.get("events") is None:  # the limits: where the fixed point is below 1e-20
        below = np.nonzero(fp.tail <= 1e-20)[0]
        L = (int(below[0]) + 1 if below.size else fp.tail.size) + 6
        P = np.cumsum(fp.iqueue_pmf[::-1])[::-1][1:]
        below = np.nonzero(P <= 1e-20)[0]
        K = max((int(below[0]) + 1 if below.size else P.size), math.ceil(r) + 1) + 6
        return max(L, 3), K
    n = float(task["n_servers"])
    m = n / r
    run_time = float(task["events"]) / (2.0 * n * lam)
    p0 = min(1.0, fp.p0 + 5.0 / math.sqrt(m))
    L = longest_queue(n * 1e6, lam * p0, 1, None, run_time) + 2
    if d > 1:
        L = min(L, longest_queue(n * 1e6, lam, d, None, run_time) + 2)
    K = math.ceil(r) + math.ceil(8.0 * math.sqrt(r)) + 8
    return max(L, 3), K


def _params(task: dict) -> tuple:
    d, n = _d(task), task.get("n_servers")
    L, K = levels(task)
    inv_den = 0.0
    if n is not None and 1 < d <= 16:
        den = math.prod(float(n) - j for j in range(d))
        inv_den = 1.0 / den if 0.0 < den < 1e300 else 0.0
    sim = task.get("events") is not None
    m = n_schedulers(n, task["r"]) if sim else 0
    return (float(task["lam"]), float(task["r"]), float(d), float(L), float(K), inv_den,
            float(n) if inv_den else 0.0, float(n) if sim else 0.0, float(m))


#: distributed JIQ and JIQ-Po(d) as transitions
DECLS = {p.name: _declare(p.name, pod=p.probes) for p in POLICIES.values() if "population" in p.engines}


def _task(task: dict) -> dict:
    def as_int(v):
        return int(v) if isinstance(v, float) and v.is_integer() else v

    out = dict(task)
    for key in ("n_servers", "d", "events", "seed", "n_batches", "max_level", "h"):
        if out.get(key) is not None:
            out[key] = as_int(out[key])
    if out.get("policy") not in DECLS:
        raise ValueError(f"policy={out.get('policy')!r} is not declared by transitions; "
                         f"valid: {', '.join(DECLS)}")
    check_task(out)
    POSITIVE_LOAD_BELOW_ONE.check("lam", out["lam"])
    return out


def run_task(task: dict) -> dict:
    """One ``population`` task of ``jiq`` or ``jiq_pod`` (keys as docs/results-schema.md)."""
    task = _task(task)
    return simulation_row(simulate(DECLS[task["policy"]], task))


def run_meanfield(task: dict) -> dict:
    """One ``population_meanfield`` task: the fixed point of the declared drift."""
    task = _task(task)
    task.pop("events", None)
    return limit_row(DECLS[task["policy"]], task)


def run_refined(task: dict) -> dict:
    """One ``population_refined`` task: ``x* + V/N`` of the declared drift at the task's N."""
    task = _task(task)
    task.pop("events", None)
    return refined_row(DECLS[task["policy"]], task)
