r"""Mean-field (N -> infinity) limit of distributed Join-the-Idle-Queue and two variants.

Model (Wang, Feng & Cheng, "Distributed Join-the-Idle-Queue for low latency cloud services",
Section III; ``/work/shared/papers/wang-feng-cheng-distributed-jiq.txt``)
-----------------------------------------------------------------------------------------------
``N`` identical FIFO servers with Exp(1) service, ``M`` schedulers, ``r = N / M`` servers per
scheduler (``r > 0`` fixed, ``N -> infinity``).  Tasks arrive as a Poisson process of rate
``lam * N`` (``0 < lam < 1``), each to a uniformly chosen scheduler (rate ``lam * r`` per
scheduler).  Each scheduler keeps an *I-queue*, a list of idle servers.

* A server that becomes idle sends one "join" message to an I-queue: a uniform one (``jiq``,
  ``jiq_pod``), or the shortest of ``d`` uniformly sampled ones, ties uniform (``jiq_sqd``).
* A task arriving at a scheduler with a non-empty I-queue goes to a server drawn uniformly from
  that I-queue, which leaves it (no message).  With an empty I-queue the task goes to a uniform
  server among all ``N`` (``jiq``, ``jiq_sqd``) or to the shortest of ``d`` distinct uniformly
  probed servers, ties uniform (``jiq_pod``).  If that server was idle it is listed in some other
  I-queue and sends it a "delete" message: I-queues hold idle servers only, and every idle server
  is listed exactly once.

Notation: ``s_i`` fraction of servers with ``>= i`` tasks (``s_0 = 1``), ``q_i = s_i - s_{i+1}``;
``p_j`` fraction of I-queues of size ``j``, ``P_j = sum_{k >= j} p_k`` (``P_0 = 1``) and
``p0 = p_0`` the fraction of empty I-queues.  ``d' = d`` for ``jiq_pod`` and ``1`` otherwise (how a
scheduler with an empty I-queue picks a server); ``d'' = d`` for ``jiq_sqd`` and ``1`` otherwise
(how a server picks an I-queue to join).  ``jiq`` ignores ``d``.

Derivation (rates per unit time, in the limit)
----------------------------------------------
*Where the tasks go.*  A fraction ``1 - p0`` of the schedulers has a non-empty I-queue, so tasks
reach idle servers "directly" at rate ``lam (1 - p0)`` per server.  The rest, ``lam p0`` per
server, is dispatched blindly: it lands on a server with exactly ``i - 1`` tasks with probability
``s_{i-1}^{d'} - s_i^{d'}``.  Since all idle servers are exchangeable, one given idle server is hit
by a blind task at rate ``beta = lam p0 (1 - s_1^{d'}) / (1 - s_1)``; at the fixed point
``s_1 = lam`` (work conservation: departures ``s_1`` = arrivals ``lam``), so
``beta = lam p0 alpha`` with ``alpha = (1 - lam^d) / (1 - lam) = 1 + lam + ... + lam^{d-1}``
(``alpha = 1`` for ``jiq`` and ``jiq_sqd``).

*One server* is a Markov chain on "busy with ``i >= 1`` tasks" and "idle, listed in an I-queue of
size ``j >= 1``", written ``(0, j)``:

====================  ==========================================================  ===========
transition            rate                                                        why
====================  ==========================================================  ===========
i -> i-1, i >= 2      1                                                           service
i -> i+1, i >= 1      lam p0 (s_i^{d'} - s_{i+1}^{d'}) / q_i                      blind task
1 -> (0, j)           w_{j-1} := P_{j-1}^{d''} - P_j^{d''}  (``p_{j-1}`` if d''=1) joins a size-(j-1) queue
(0, j) -> 1           lam r / j + beta                                            own scheduler, or blind
(0, j) -> (0, j+1)    r q_1 w_j / p_j   (``r q_1`` if d'' = 1)                    another server joins
(0, j) -> (0, j-1)    (j - 1) (lam r / j + beta)                                  a queue-mate leaves
====================  ==========================================================  ===========

(``r q_1`` is the join rate per I-queue: ``N q_1`` servers become idle per unit time, spread over
``M`` I-queues.)  For ``jiq`` these are exactly the rates printed in the paper's Section III.

*One I-queue* of size ``j`` grows when a server joins it and shrinks when its scheduler serves a
task (``lam r``, if ``j >= 1``) or one of its ``j`` servers is hit blindly (``j beta``, a delete).
The flow across the cut between sizes ``j - 1`` and ``j`` balances at the fixed point::

    r q_1 w_{j-1} = (lam r + beta j) p_j,        j >= 1.                               (I)

*Server tails.*  The flow across the cut between ``i - 1`` and ``i`` tasks, ``i >= 2``, is
``lam p0 (s_{i-1}^{d'} - s_i^{d'}) = q_i``; telescoping gives ``s_i = lam p0 s_{i-1}^{d'}``, so with
``s_1 = lam``::

    jiq, jiq_sqd:  s_i = p0^(i-1) lam^i,      T = 1 + p0 sum_i s_i = 1 / (1 - lam p0)
    jiq_pod:       s_i = p0^((d^(i-1)-1)/(d-1)) lam^((d^i-1)/(d-1)),   T = 1 + p0 sum_i s_i^d

(``T``: with probability ``1 - p0`` a task meets an idle server, otherwise it joins a server with
``>= i`` tasks with probability ``s_i^{d'}``; equal to Little's ``sum_i s_i / lam``.)  Hence
``q_1 = lam (1 - p0 lam^{d'})``.

*The equation for p0, jiq and jiq_pod* (``d'' = 1``, ``w_{j-1} = p_{j-1}``).  (I) is a
birth-death balance with product form::

    p_j = p0 prod_{k=1}^{j} a / (c + k),   c = r / (p0 alpha),   a = r (1 - p0 lam^{d'}) / (p0 alpha),

(for ``jiq``: ``c = r / p0``, ``a = r (1/p0 - lam)``), and ``p0`` is the root in ``(0, 1)`` of the
normalisation ``sum_j p_j = 1``, i.e. ``p0 * 1F1(1; c + 1; a) = 1``.  Using
``sum_{j>=1} a^j / (c+1)_j = a^{-c} e^a int_0^a t^c e^{-t} dt`` this is the paper's form
``p0 (1 + e^a a^{-c} int_0^a g(p0, t) dt) = 1`` with ``a(p0) = r (1/p0 - lam)`` and
``g(p0, t) = t^{r/p0} e^{-t}``.  Summing (I) over ``j`` for a normalised ``p`` gives
``lam r (1 - p0) + beta sum_j j p_j = r q_1``, i.e. ``sum_j j p_j = r (1 - lam)``: the listed
servers are exactly the idle ones, nothing more to impose.  It is therefore the same equation
as the normalisation of the whole server chain (its stationary law is ``pi(i) = q_i``,
``pi(0, j) = j p_j / r``, which one checks in the balance equations above, and
``sum pi = lam + (1 - lam) = 1``; :func:`server_chain_stationary` checks it numerically).

The root is found by ``brentq`` on ``x = log p0``: ``F(x) = x + log sum_j exp(l_j)``, with
``l_j = sum_{k<=j} [log1p(-p0 lam^{d'}) - log1p(k / c)]`` decreasing in ``j`` (``a < c``), summed
by blocks until the remainder is below ``1e-18`` of the sum (``F > 0`` iff ``p0`` is too large).

*The equation for p0, jiq_sqd* (``d'' = d``): (I) is no longer a product form, but it is still an
explicit forward recursion once ``p0`` is given: ``P_1 = 1 - p0`` and, for ``k >= 1``,
``p_k = p_{k-1} * r (1 - lam p0) S_k / (r + p0 k)`` with
``S_k = (P_{k-1}^d - P_k^d) / (P_{k-1} - P_k) = sum_{i<d} P_{k-1}^i P_k^{d-1-i}``,
``P_{k+1} = P_k - p_k``.  ``p_k`` is built multiplicatively (in logs), never as a difference of
``P``'s, so the bulk has no cancellation even when ``p0`` is astronomically small (``log p0`` is
about ``-r (1 - lam) log d``: joins to the shortest of ``d`` keep I-queues away from 0).  The
right ``p0`` is the one whose sequence decreases to 0.  Summing (I) over ``j <= k`` gives, for
any ``p0``, ``p0 (M - r (1 - lam)) = r [P_inf - (1 - lam p0) P_inf^d]`` (``M = sum_j j p_j``,
sequence run to its end) if ``P`` stays >= 0, and ``= r [P_{k+1} - (1 - lam p0) P_k^d] < 0`` if it
first turns negative at ``k + 1``.  So ``P_inf = 0`` (normalisation) iff ``M = r (1 - lam)``
(listed = idle), and the sign of ``r (1 - lam) - M`` says on which side ``p0`` is.  The shooting
is done on ``1 - M / (r (1 - lam))`` by ``brentq`` on ``log p0``: ``P_inf`` itself would be useless
when ``p0`` is small, as it is then ``O(p0)`` times the defect of the mean (for ``p0 -> 0`` every
sequence ends at ``P_inf = 0``, whatever its front position).  For ``d = 1`` this is the ``jiq``
equation.

*Large r.*  ``jiq``/``jiq_pod``: ``p0 ~ kappa / r`` with ``kappa`` from
``int_0^inf exp(-lam^{d'} y - alpha y^2 / (2 kappa)) dy = 1`` (:func:`large_r_limit`; the
I-queue sizes are spread over a width of order ``r``, so an I-queue is empty with probability
of order ``1/r``); ``jiq_sqd``: ``p0`` decays exponentially, ``log p0 ~ -r (1 - lam) log d``.
``T -> 1`` in both cases.

Differences from the paper's text and from the colleague's formula
------------------------------------------------------------------
* ``jiq``: the rates, tails, ``T`` and the appendix's ``a(p0)``, ``g(p0, t)`` all agree with the
  derivation above (the appendix's integral is the tail ``sum_{j>=1}`` of the same series).
* ``jiq_pod``: the paper's rates for JIQ-Po(d) are missing from the text; the colleague's
  ``p_j = p0 prod_{k<=j} a / (c + k)`` with ``c = r / (p0 alpha)``, ``a = r (1 - p0 lam^d)/(p0 alpha)``
  is what (I) gives, so it is correct.  Note it rests on ``s_1 = lam`` (``alpha`` is ``beta /
  (lam p0)`` at the fixed point only; the ODE below uses ``(1 - s_1^d) / (1 - s_1)``).
* The paper says its ``p0`` is "the fraction of empty I-queues" and the *probability of joining
  an empty I-queue*; both are the same ``p0`` here because tasks pick schedulers uniformly.
* The paper does not analyse ``jiq_sqd`` (JIQ-SQ(d) only appears in its simulations).

Second route: the mean-field ODE
--------------------------------
State ``x = (s_1..s_L, P_1..P_K)``, with ``s_0 = P_0 = 1``, ``s_{L+1} = P_{K+1} = 0`` and
``p0 = 1 - P_1``; using tails for the I-queues makes ``sum_j p_j = 1`` hold by construction::

    ds_i/dt = lam p0 (s_{i-1}^{d'} - s_i^{d'}) + [i = 1] lam (1 - p0) - (s_i - s_{i+1})
    dP_j/dt = r (s_1 - s_2) (P_{j-1}^{d''} - P_j^{d''}) - (lam r + beta j) (P_j - P_{j+1})

with ``beta = lam p0 (1 + s_1 + ... + s_1^{d'-1})``.  Truncation: a task that would give a server
``L + 1`` tasks, or a join that would make an I-queue of size ``K + 1``, is dropped.  The
invariant "listed = idle" (``sum_j P_j = r (1 - s_1)``) is attracting: its defect decays at rate
``beta``.  Start ("empty"): all servers idle and listed, I-queue sizes Poisson(r) (what ``N``
uniform joins give; ``start="balanced"`` uses sizes ``floor(r)``/``ceil(r)`` with mean ``r``).
:func:`fixed_point_ode` integrates with ``solve_ivp`` (BDF, sparse analytic Jacobian) until the
drift is below ``1e-10`` (or ``t_end = 1e8``; the slow modes, e.g. at ``lam = 0.999`` or
``r = 1000``, need ``t`` of order ``1e4..1e6``), polishes with Newton on ``drift = 0`` (the Jacobian is
nonsingular: no conserved quantity is left in the tail coordinates), then checks the
truncation.  ``L`` and ``K`` start at 64 and ``r + 10 sqrt(r) + 32`` (the Poisson(r) start fits);
the truncation is accepted when ``s_L``, ``P_K`` and the estimated neglected sums
``s_L / (1 - rho)``, ``P_K / (1 - rho)`` are all below ``1e-15``, with ``rho`` the decay rate per
level read between levels ``n/2`` and ``3n/4`` (the last levels carry the truncation's boundary
layer).  Otherwise the decay at rate ``rho`` is extrapolated to ``1e-15`` (with a margin) to give
the new ``L`` or ``K``, and the whole run (from empty, then Newton) is repeated: the reported run
is one from the empty start with the final truncation.  Nothing of the first route is used.

Messages (per server per unit time): a join or a delete is 1, a probe (of a server or an
I-queue) 2 (request and reply).  ``join_rate = q_1`` (servers becoming idle),
``delete_rate = lam p0 (1 - lam^{d'})`` (blind tasks meeting an idle server; 0 < it < join_rate),
``probe_rate = 2 d lam p0`` (``jiq_pod``, also for ``d = 1`` as the policy is literally run),
``2 d q_1`` (``jiq_sqd``), 0 (``jiq``), ``messages_per_job = (join + delete + probe) / lam``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.integrate import solve_ivp
from scipy.optimize import brentq
from scipy.sparse.linalg import spsolve
from scipy.special import erfcx, gammainc, logsumexp

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.responses import exact_response_columns
from sim.core.results import is_number
from sim.core.settings import DEFAULTS, RunSettings
from sim.jiq import MODEL
from sim.jiq.lu import lu_approximation
from sim.jiq.policies import policy as policy_record
from sim.jiq.policies import served_by

__all__ = [
    "POLICIES",
    "probe_rate",
    "JiqFixedPoint",
    "JiqOdeFixedPoint",
    "JiqOdeSolution",
    "drift",
    "drift_jacobian",
    "fixed_point",
    "fixed_point_ode",
    "initial_state",
    "large_r_limit",
    "p0_root",
    "root_function",
    "response_law",
    "run_task",
    "server_chain_stationary",
    "solve_ode",
]

POLICIES = served_by("meanfield")

CI_METHOD = "mean field (N = infinity): p0 by root of the normalisation"

#: neglected mass allowed at a truncation level (ODE route)
TRUNC_EPS = 1e-15

#: default horizon of the ODE (integration stops earlier, once the drift is below its tolerance)
T_END = 1e8

#: relative size of the neglected remainder of a series (root route)
_SERIES_EPS = 1e-18


class JiqFixedPoint(NamedTuple):
    """Stationary mean-field values.  ``tail[i - 1] = s_i`` (``i = 1..max_level``),
    ``iqueue_pmf[j] = p_j`` (``j = 0..``, cut where the rest is below ~1e-16)."""

    p0: float
    tail: np.ndarray
    mean_response: float
    mean_queue: float
    iqueue_pmf: np.ndarray
    mean_iqueue: float
    join_rate: float
    delete_rate: float
    probe_rate: float
    messages_per_job: float


class JiqOdeSolution(NamedTuple):
    """Result of :func:`solve_ode`.  ``tail[k, i-1] = s_i(t[k])``, ``iqueue_tail[k, j-1] = P_j(t[k])``."""

    t: np.ndarray
    tail: np.ndarray
    iqueue_tail: np.ndarray
    p0: np.ndarray
    end: np.ndarray  # the state x = (s_1..s_L, P_1..P_K) at the last time
    levels: int
    iqueue_levels: int
    max_drift: float  # max |drift| at the last time
    success: bool
    message: str


class JiqOdeFixedPoint(NamedTuple):
    """Result of :func:`fixed_point_ode`: the values, and how they were obtained."""

    point: JiqFixedPoint
    state: np.ndarray  # x = (s_1..s_L, P_1..P_K) after Newton
    levels: int
    iqueue_levels: int
    residual: float  # max |drift| after Newton
    newton_iterations: int
    ode_time: float  # time integrated in the final run
    ode_gap: float  # max |x_ode_end - x_newton| of the final run from empty (how close the ODE got)


# ---------------------------------------------------------------------------------------------
# checks: ValueError naming the parameter and its value


def _check_policy(policy) -> str:
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} must be one of {', '.join(POLICIES)}")
    return policy


def _check_lam(lam) -> float:
    """The load of the mean field: in (0, 1) (p0 solves a normalisation that degenerates at
    lam = 0), the declaration the model's check_task applies to a meanfield task."""
    return POSITIVE_LOAD_BELOW_ONE.check("lam", lam)


def _check_r(r) -> float:
    return MODEL.param("r").check("r", r)


def _check_int(name: str, v, low: int = 1) -> int:
    """A truncation or run argument (``levels``, ``iqueue_levels``, ``max_level``): not a model
    parameter, so no declaration of its own."""
    if not is_number(v) or not math.isfinite(float(v)) or float(v) != int(v) or int(v) < low:
        raise ValueError(f"{name}={v!r} must be an integer >= {low}")
    return int(v)


def _check(policy, lam, r, d):
    return _check_policy(policy), _check_lam(lam), _check_r(r), MODEL.param("d").check("d", d)


def _choice_exponents(policy: str, d: int) -> tuple[int, int]:
    """(d', d''): samples for a blind task, samples for a join."""
    return policy_record(policy).exponents(d)


# ---------------------------------------------------------------------------------------------
# first route: closed-form tails and the root of the normalisation


def _log_server_tail(lam: float, p0: float, dp: int, n: int) -> np.ndarray:
    """``log s_i``, i = 1..n, from ``s_1 = lam``, ``s_i = lam p0 s_{i-1}^{d'}`` (no ``d**i`` formed)."""
    out = np.full(n, -np.inf)
    if n == 0:
        return out
    base = math.log(lam) + (math.log(p0) if p0 > 0.0 else -math.inf)
    v = math.log(lam)
    for i in range(n):
        out[i] = v
        v = base + dp * v
        if v < -800.0:  # exp(-800) is 0.0; all further levels too
            break
    return out


def _tail_sums(lam: float, p0: float, dp: int) -> tuple[float, float]:
    """``(sum_i s_i, sum_i s_i^{d'})`` of the closed-form tail."""
    if dp == 1:
        x = lam * p0
        return lam / (1.0 - x), lam / (1.0 - x)
    s, s1, sd = lam, 0.0, 0.0
    while s > 0.0:
        s1 += s
        sd += s**dp
        if s < 1e-18 * s1:
            break
        s = lam * p0 * s**dp
    return s1, sd


def _alpha(lam: float, dp: int) -> float:
    """``(1 - lam^d') / (1 - lam)`` as the sum ``1 + lam + ... + lam^{d'-1}`` (no cancellation)."""
    return float(sum(lam**k for k in range(dp)))


def _product_log_terms(lam: float, r: float, dp: int, p0: float) -> np.ndarray:
    """``l_j = log prod_{k<=j} a / (c + k)``, j = 0, 1, ..., until the remainder is negligible."""
    c = r / (p0 * _alpha(lam, dp))
    log_ratio0 = math.log1p(-p0 * lam**dp)  # log(a / c) < 0
    chunks, last, total_log = [np.zeros(1)], 0.0, 0.0
    start, size = 1, 1024
    while True:
        k = np.arange(start, start + size, dtype=float)
        block = last + np.cumsum(log_ratio0 - np.log1p(k / c))
        chunks.append(block)
        last = float(block[-1])
        total_log = float(logsumexp(np.concatenate(chunks)))
        # the terms after the block shrink at least geometrically with ratio rho
        rho = math.exp(log_ratio0 - math.log1p((start + size) / c))
        if last + math.log(rho / (1.0 - rho)) < total_log + math.log(_SERIES_EPS):
            break
        start += size
        size *= 2
    return np.concatenate(chunks)


def _sqd_shoot(lam: float, r: float, d: int, x: float, record: bool = False):
    """Forward recursion of (I) for ``jiq_sqd`` with ``log p0 = x``.

    Returns ``(defect, pmf)``: ``defect = 1 - M / (r (1 - lam))`` with ``M = sum_{j>=1} j p_j``
    over the sequence (cut at the first ``P_k < 0``), ``> 0`` iff ``p0`` is too large; ``pmf``
    (``p_0, p_1, ...``) only with ``record``.  See the module docstring for why the mean, and not
    ``P_inf``, is the quantity to shoot on.
    """
    p0 = math.exp(x)
    B = 1.0 - lam * p0  # r q_1 / (lam r)
    logp = x  # log p_{k-1}
    P_prev, P_k = 1.0, -math.expm1(x)  # P_0, P_1
    pmf = [p0] if record else None
    M = 0.0
    k = 0
    while True:
        k += 1
        if k > 10_000_000:
            raise RuntimeError(f"jiq_sqd recursion did not settle (lam={lam}, r={r}, d={d}, x={x})")
        S = sum(P_prev**i * P_k ** (d - 1 - i) for i in range(d))
        if S <= 0.0:  # P_k == 0 exactly (d > 1): nothing more can happen
            break
        logp += math.log(B * S * r / (r + p0 * k))
        pk = math.exp(logp)
        M += k * pk
        if record:
            pmf.append(pk)
        P_next = P_k - pk
        if P_next < 0.0:  # overshoot: too much mass
            break
        # later factors p_{k+1}/p_k are at most f (P decreases, p0 k grows): once f < 1 the rest
        # of sum j p_j is at most pk (k f / (1 - f) + f / (1 - f)^2); stop when negligible
        f = B * d * P_k ** (d - 1) * r / (r + p0 * (k + 1))
        if f < 1.0 and pk * (k * f / (1.0 - f) + f / (1.0 - f) ** 2) <= 1e-17 * M:
            break
        P_prev, P_k = P_k, P_next
    return 1.0 - M / (r * (1.0 - lam)), (np.array(pmf) if record else None)


def root_function(policy: str, lam: float, r: float, log_p0: float, d: int = 1) -> float:
    """The function whose root in ``log p0`` is :func:`p0_root`; ``> 0`` iff ``p0`` is too large.

    ``jiq``/``jiq_pod``: ``log sum_j p_j`` with the product form of ``p_j``.  ``jiq_sqd``:
    ``1 - sum_j j p_j / (r (1 - lam))`` along the forward recursion (see the module docstring).
    """
    policy, lam, r, d = _check(policy, lam, r, d)
    dp, dq = _choice_exponents(policy, d)
    if not (math.isfinite(log_p0) and log_p0 <= 0.0):
        raise ValueError(f"log_p0={log_p0!r} must be <= 0")
    if dq == 1:
        return log_p0 + float(logsumexp(_product_log_terms(lam, r, dp, math.exp(log_p0))))
    return _sqd_shoot(lam, r, dq, log_p0)[0]


def _solve_log_p0(policy: str, lam: float, r: float, d: int) -> float:
    def F(x):
        return root_function(policy, lam, r, x, d)

    hi = 0.0  # p0 = 1: F > 0 (every I-queue size j >= 1 then has positive mass)
    lo = math.log(0.5)
    while F(lo) >= 0.0:
        hi = lo
        lo *= 2.0
        if lo < -1e6:
            raise RuntimeError(f"no bracket for p0 (policy={policy}, lam={lam}, r={r}, d={d})")
    return brentq(F, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)


def p0_root(policy: str, lam: float, r: float, d: int = 1, log: bool = False) -> float:
    """Fraction of empty I-queues at the fixed point (first route: root of the normalisation).

    With ``log=True`` returns ``log p0`` (for ``jiq_sqd`` at large ``r`` ``p0`` underflows).
    """
    policy, lam, r, d = _check(policy, lam, r, d)
    x = _solve_log_p0(policy, lam, r, d)
    return x if log else math.exp(x)


def _iqueue_pmf(policy: str, lam: float, r: float, d: int, x: float) -> np.ndarray:
    dp, dq = _choice_exponents(policy, d)
    if dq == 1:
        pmf = np.exp(x + _product_log_terms(lam, r, dp, math.exp(x)))
    else:
        _, pmf = _sqd_shoot(lam, r, dq, x, record=True)
        pmf = np.clip(pmf, 0.0, None)
    # drop the part below the resolution of a double
    keep = np.nonzero(pmf > 1e-300)[0]
    return pmf[: keep[-1] + 1] if keep.size else pmf[:1]


def probe_rate(policy: str, d: int, lam: float, p0: float, join: float) -> float:
    """Probe messages per server per unit time (2 each): ``jiq_pod`` probes ``d`` servers per
    blind task (rate ``lam p0``), ``jiq_sqd`` ``d`` I-queues per join; ``jiq`` none."""
    pol = policy_record(policy)
    if pol.probes:
        return 2.0 * d * lam * p0
    if pol.joins_shortest_iqueue:
        return 2.0 * d * join
    return 0.0


def _measures(policy, lam, d, p0, tail, mean_queue, mean_response, pmf, s1, s2):
    """Message rates and the rest, common to both routes (``s1 = lam`` at the fixed point)."""
    dp, _ = _choice_exponents(policy, d)
    join = s1 - s2  # q_1: servers becoming idle
    delete = lam * p0 * (1.0 - s1**dp)  # blind tasks meeting an idle server
    probe = probe_rate(policy, d, lam, p0, join)
    mean_iqueue = float(np.dot(np.arange(pmf.size), pmf))
    return JiqFixedPoint(
        p0=float(p0),
        tail=np.asarray(tail, dtype=float),
        mean_response=float(mean_response),
        mean_queue=float(mean_queue),
        iqueue_pmf=np.asarray(pmf, dtype=float),
        mean_iqueue=mean_iqueue,
        join_rate=float(join),
        delete_rate=float(delete),
        probe_rate=float(probe),
        messages_per_job=float((join + delete + probe) / lam),
    )


def fixed_point(policy: str, lam: float, r: float, d: int = 1, max_level: int = DEFAULTS.max_level) -> JiqFixedPoint:
    """Stationary mean-field values by the first route (closed-form tails, ``p0`` by root)."""
    policy, lam, r, d = _check(policy, lam, r, d)
    max_level = _check_int("max_level", max_level)
    dp, _ = _choice_exponents(policy, d)
    x = _solve_log_p0(policy, lam, r, d)
    p0 = math.exp(x)
    tail = np.exp(_log_server_tail(lam, p0, dp, max(max_level, 2)))
    s_sum, sd_sum = _tail_sums(lam, p0, dp)
    pmf = _iqueue_pmf(policy, lam, r, d, x)
    return _measures(policy, lam, d, p0, tail[:max_level], s_sum, 1.0 + p0 * sd_sum, pmf, lam, tail[1])


# ---------------------------------------------------------------------------------------------
# second route: the mean-field ODE


def _split(x, levels, iqueue_levels):
    x = np.asarray(x, dtype=float)
    if x.shape != (levels + iqueue_levels,):
        raise ValueError(
            f"x has shape {x.shape}, expected ({levels + iqueue_levels},) for levels={levels}, "
            f"iqueue_levels={iqueue_levels}"
        )
    return x[:levels], x[levels:]


def _check_state_args(policy, lam, r, d, levels, iqueue_levels):
    """The checked arguments of :func:`drift` and :func:`drift_jacobian`: policy, lam, r, d,
    L, K."""
    return (*_check(policy, lam, r, d), _check_int("levels", levels, 2),
            _check_int("iqueue_levels", iqueue_levels))


def _extended(x, policy, d, L, K):
    """What the drift and its Jacobian read at ``x``: the choice exponents (d', d''), the tails
    ``s`` and ``P``, the same with 1 before and 0 after (``se``, ``Pe``), and ``p0 = 1 - P_1``."""
    dp, dq = _choice_exponents(policy, d)
    s, P = _split(x, L, K)
    se = np.concatenate(([1.0], s, [0.0]))
    Pe = np.concatenate(([1.0], P, [0.0]))
    return dp, dq, s, P, se, Pe, 1.0 - P[0]


def drift(x, policy: str, lam: float, r: float, d: int, levels: int, iqueue_levels: int) -> np.ndarray:
    """Mean-field drift ``dx/dt`` at ``x = (s_1..s_L, P_1..P_K)`` (see the module docstring)."""
    return _drift(x, *_check_state_args(policy, lam, r, d, levels, iqueue_levels))


def _drift(x, policy, lam, r, d, L, K):
    dp, dq, s, P, se, Pe, p0 = _extended(x, policy, d, L, K)
    sd = se**dp
    fs = lam * p0 * (sd[:L] - sd[1 : L + 1]) - (se[1 : L + 1] - se[2:])
    fs[0] += lam * (1.0 - p0)
    J = r * (s[0] - s[1])  # joins per I-queue
    beta = lam * p0 * sum(s[0] ** k for k in range(dp))  # blind hits per idle server
    Pq = Pe**dq
    j = np.arange(1, K + 1)
    fP = J * (Pq[:K] - Pq[1 : K + 1]) - (lam * r + beta * j) * (Pe[1 : K + 1] - Pe[2:])
    return np.concatenate((fs, fP))


def drift_jacobian(x, policy: str, lam: float, r: float, d: int, levels: int, iqueue_levels: int):
    """Sparse (CSC) Jacobian of :func:`drift`."""
    return _jacobian(x, *_check_state_args(policy, lam, r, d, levels, iqueue_levels))


def _jacobian(x, policy, lam, r, d, L, K):
    dp, dq, s, P, se, Pe, p0 = _extended(x, policy, d, L, K)
    iP1 = L  # column of P_1
    rows, cols, vals = [], [], []

    def add(rr, cc, vv):
        rr = np.atleast_1d(rr)
        rows.append(rr)
        cols.append(np.broadcast_to(cc, rr.shape))
        vals.append(np.broadcast_to(np.asarray(vv, dtype=float), rr.shape))

    i = np.arange(L)  # row of s_{i+1}
    sd = se**dp
    dsd = dp * se ** (dp - 1)  # d(s^d')/ds
    # arrivals lam p0 (s_{i-1}^{d'} - s_i^{d'}) (+ lam (1 - p0) at i = 1)
    add(i[1:], i[1:] - 1, lam * p0 * dsd[1:L])
    add(i, i, -lam * p0 * dsd[1 : L + 1])
    dA_dP1 = -lam * (sd[:L] - sd[1 : L + 1])
    dA_dP1[0] += lam
    add(i, iP1, dA_dP1)
    # departures -(s_i - s_{i+1})
    add(i, i, -1.0)
    add(i[:-1], i[:-1] + 1, 1.0)
    # I-queue rows
    j = np.arange(1, K + 1)
    row = L + j - 1
    J = r * (s[0] - s[1])
    g = sum(s[0] ** k for k in range(dp))
    dg = sum(k * s[0] ** (k - 1) for k in range(1, dp))
    beta = lam * p0 * g
    Pq = Pe**dq
    dPq = dq * Pe ** (dq - 1)
    w = Pq[:K] - Pq[1 : K + 1]
    add(row, 0, r * w)
    add(row, 1, -r * w)
    add(row[1:], row[1:] - 1, J * dPq[1:K])
    add(row, row, -J * dPq[1 : K + 1])
    rate = lam * r + beta * j
    delta = Pe[1 : K + 1] - Pe[2:]
    add(row, row, -rate)
    add(row[:-1], row[:-1] + 1, rate[:-1])
    add(row, iP1, j * delta * lam * g)  # -j delta d(beta)/dP_1, d(beta)/dP_1 = -lam g
    add(row, 0, -j * delta * lam * p0 * dg)
    n = L + K
    return sparse.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    )


def _default_iqueue_levels(r: float) -> int:
    return math.ceil(r + 10.0 * math.sqrt(r) + 32.0)


def initial_state(r: float, levels: int, iqueue_levels: int, start: str = "poisson") -> np.ndarray:
    """The "empty" start: all servers idle and listed; I-queue sizes Poisson(r) or balanced."""
    r = _check_r(r)
    L = _check_int("levels", levels, 2)
    K = _check_int("iqueue_levels", iqueue_levels)
    j = np.arange(1, K + 1, dtype=float)
    if start == "poisson":
        P = gammainc(j, r)  # P(Poisson(r) >= j)
    elif start == "balanced":
        lo = math.floor(r)
        frac = r - lo  # a fraction frac of size lo + 1, the rest of size lo: mean r
        P = np.where(j <= lo, 1.0, np.where(j == lo + 1, frac, 0.0))
    else:
        raise ValueError(f"start={start!r} must be 'poisson' or 'balanced'")
    return np.concatenate((np.zeros(L), P))


def _integrate(x0, policy, lam, r, d, L, K, t_end, tol, rtol, atol, t_eval=None):
    def f(t, x):
        return _drift(x, policy, lam, r, d, L, K)

    def jac(t, x):
        return _jacobian(x, policy, lam, r, d, L, K)

    def settled(t, x):  # crosses 0 when the drift gets below tol
        return math.log(max(float(np.max(np.abs(f(t, x)))), 1e-300)) - math.log(tol)

    settled.terminal = True
    settled.direction = -1
    return solve_ivp(f, (0.0, t_end), x0, method="BDF", jac=jac, rtol=rtol, atol=atol,
                     events=settled, t_eval=t_eval)


def solve_ode(policy: str, lam: float, r: float, d: int = 1, t_end: float | None = None,
              levels: int | None = None, iqueue_levels: int | None = None, start: str = "poisson",
              x0=None, tol: float = 1e-10, rtol: float = 1e-8, atol: float = 1e-13,
              t_eval=None) -> JiqOdeSolution:
    """Integrate the mean-field ODE from the empty start (or ``x0``) up to ``t_end``.

    ``levels`` (``L``, default 64) and ``iqueue_levels`` (``K``, default ``r + 10 sqrt(r) + 32``)
    are the truncation; ``x0``, if given, is a state ``(s_1..s_L, P_1..P_K)`` of that size.
    Stops early once ``max |drift| < tol`` (default ``t_end = 1e8``: in effect, until then).
    """
    policy, lam, r, d = _check(policy, lam, r, d)
    L = 64 if levels is None else _check_int("levels", levels, 2)
    K = _default_iqueue_levels(r) if iqueue_levels is None else _check_int("iqueue_levels", iqueue_levels)
    if t_end is None:
        t_end = T_END
    if not (is_number(t_end) and t_end > 0):
        raise ValueError(f"t_end={t_end!r} must be > 0")
    x0 = initial_state(r, L, K, start) if x0 is None else np.asarray(x0, dtype=float)
    _split(x0, L, K)
    sol = _integrate(x0, policy, lam, r, d, L, K, float(t_end), tol, rtol, atol, t_eval)
    end = sol.y[:, -1].copy()
    return JiqOdeSolution(
        t=sol.t, tail=sol.y[:L].T, iqueue_tail=sol.y[L:].T, p0=1.0 - sol.y[L],
        end=end, levels=L, iqueue_levels=K,
        max_drift=float(np.max(np.abs(_drift(end, policy, lam, r, d, L, K)))),
        success=bool(sol.success), message=str(sol.message),
    )


def _newton(x, policy, lam, r, d, L, K, tol=1e-15, max_iter=50):
    f = _drift(x, policy, lam, r, d, L, K)
    res = float(np.max(np.abs(f)))
    it = 0
    while res > tol and it < max_iter:
        it += 1
        step = spsolve(_jacobian(x, policy, lam, r, d, L, K), -f)
        a = 1.0
        while True:  # backtracking on the residual
            trial = x + a * step
            f_trial = _drift(trial, policy, lam, r, d, L, K)
            res_trial = float(np.max(np.abs(f_trial)))
            if res_trial < res or a < 1e-4:
                break
            a *= 0.5
        if res_trial >= res:
            break  # no more progress at machine precision
        x, f, res = trial, f_trial, res_trial
    return x, res, it


def _more_levels(v: np.ndarray) -> int:
    """How many levels to add so that the neglected part beyond the last one is below TRUNC_EPS.

    The decay rate ``rho`` is read between levels ``n/2`` and ``3n/4`` (the last levels carry a
    boundary layer of the truncation: there ``s_L ~ s_{L-1} / 2``).  0 if ``v[-1]`` and the
    geometric estimate ``v[-1] / (1 - rho)`` of the neglected sum are below ``TRUNC_EPS``;
    otherwise extrapolate the decay at rate ``rho`` down to ``TRUNC_EPS`` (an overestimate for the
    doubly exponential tails), with a margin.
    """
    n = v.size
    last = abs(float(v[-1]))
    i1, i2 = n // 2, (3 * n) // 4
    a, b = abs(float(v[i1])), abs(float(v[i2]))
    rho = (b / a) ** (1.0 / (i2 - i1)) if a > 0.0 and i2 > i1 else 0.0
    if last <= TRUNC_EPS and rho < 1.0 and last / (1.0 - rho) <= TRUNC_EPS:
        return 0
    if not 0.0 < rho < 1.0:  # no decay seen: double
        return n
    need = math.log(TRUNC_EPS * (1.0 - rho) / max(b, 1e-300)) / math.log(rho) - (n - i2)
    return int(min(max(32, 1.2 * need + 16), 4 * n))


def fixed_point_ode(policy: str, lam: float, r: float, d: int = 1, max_level: int = DEFAULTS.max_level,
                    start: str = "poisson", t_end: float | None = None,
                    max_rounds: int = 30) -> JiqOdeFixedPoint:
    """Stationary values by the second route: ODE from empty, Newton polish, truncation check."""
    policy, lam, r, d = _check(policy, lam, r, d)
    max_level = _check_int("max_level", max_level)
    dp, _ = _choice_exponents(policy, d)
    L, K = 64, _default_iqueue_levels(r)
    if t_end is None:
        t_end = T_END
    for _ in range(max_rounds):
        # every round starts from empty, so the last one is a full run of the final truncation
        sol = _integrate(initial_state(r, L, K, start), policy, lam, r, d, L, K, t_end,
                         1e-10, 1e-6, 1e-12)
        x_ode = sol.y[:, -1]
        x, res, it = _newton(x_ode.copy(), policy, lam, r, d, L, K)
        s, P = x[:L], x[L:]
        nL, nK = _more_levels(s), _more_levels(P)
        if nL == 0 and nK == 0:
            break
        L, K = L + nL, K + nK
    else:
        raise RuntimeError(f"truncation did not settle (policy={policy}, lam={lam}, r={r}, d={d})")
    gap = float(np.max(np.abs(x - x_ode)))
    total_t = float(sol.t[-1])
    if not res <= 1e-12 * max(1.0, r):  # rates are up to ~ r: round-off of the drift ~ eps r
        raise RuntimeError(f"Newton did not converge (policy={policy}, lam={lam}, r={r}, d={d}): "
                           f"max|drift|={res:.3g}")
    s, P = x[:L], x[L:]
    p0 = 1.0 - P[0]
    tail = np.zeros(max_level)
    tail[: min(L, max_level)] = s[:max_level]
    pmf = -np.diff(np.concatenate(([1.0], P, [0.0])))
    point = _measures(policy, lam, d, p0, tail, float(np.sum(s)),
                      1.0 + p0 * float(np.sum(s**dp)), pmf, s[0], s[1])
    return JiqOdeFixedPoint(point, x, L, K, res, it, total_t, gap)


# ---------------------------------------------------------------------------------------------
# checks of the derivation


def server_chain_stationary(policy: str, lam: float, r: float, d: int = 1,
                            levels: int = 400, iqueue_levels: int | None = None):
    """Stationary law of the one-server chain with the rates of the module docstring.

    The environment (``p0``, ``s_i``, ``p_j``) is taken from :func:`fixed_point`; returns
    ``(busy, idle)`` with ``busy[i-1] = pi(i)``, ``idle[j-1] = pi(0, j)``, to be compared with
    ``q_i = s_i - s_{i+1}`` and ``j p_j / r``.  Truncated (transitions out of range dropped).
    """
    policy, lam, r, d = _check(policy, lam, r, d)
    dp, dq = _choice_exponents(policy, d)
    fp = fixed_point(policy, lam, r, d, max_level=levels + 1)
    p0, s = fp.p0, np.concatenate(([1.0], fp.tail))
    pmf = fp.iqueue_pmf
    K = pmf.size - 1 if iqueue_levels is None else iqueue_levels
    pmf = np.concatenate((pmf, np.zeros(max(0, K + 2 - pmf.size))))
    P = np.concatenate((np.cumsum(pmf[::-1])[::-1], [0.0]))  # P_j, j = 0..
    w = P[: K + 1] ** dq - P[1 : K + 2] ** dq  # w_j, j = 0..K
    q = s[:-1] - s[1:]  # q_i, i = 0..levels
    q1 = q[1]
    beta = lam * p0 * _alpha(lam, dp)
    L = levels
    n = L + K
    Q = np.zeros((n, n))  # busy i -> index i-1; idle (0, j) -> index L + j - 1
    for i in range(1, L + 1):
        if i >= 2:
            Q[i - 1, i - 2] += 1.0
        if i < L and q[i] > 0:
            Q[i - 1, i] += lam * p0 * (s[i] ** dp - s[i + 1] ** dp) / q[i]
    for j in range(1, K + 1):
        Q[0, L + j - 1] += w[j - 1]  # 1 -> (0, j)
        Q[L + j - 1, 0] += lam * r / j + beta
        if j >= 2:
            Q[L + j - 1, L + j - 2] += (j - 1) * (lam * r / j + beta)
        if j < K and pmf[j] > 0:
            Q[L + j - 1, L + j] += r * q1 * w[j] / pmf[j]
    np.fill_diagonal(Q, -Q.sum(axis=1))
    A = Q.T.copy()
    A[-1, :] = 1.0  # replace one balance equation by the normalisation
    b = np.zeros(n)
    b[-1] = 1.0
    pi = np.linalg.solve(A, b)
    return pi[:L], pi[L:]


def large_r_limit(policy: str, lam: float, d: int = 1) -> float:
    """``kappa = lim_{r -> inf} r p0`` for ``jiq`` and ``jiq_pod``.

    With ``p0 = kappa / r`` and ``j = r y / kappa`` the product form becomes
    ``exp(-lam^{d'} y - alpha y^2 / (2 kappa))`` and the normalisation
    ``int_0^inf exp(-lam^{d'} y - alpha y^2 / (2 kappa)) dy = 1``, i.e.
    ``sigma sqrt(pi/2) erfcx(lam^{d'} sigma / sqrt 2) = 1`` with ``sigma^2 = kappa / alpha``.
    (``jiq_sqd`` has ``p0`` decaying faster than any power of ``r``: no such limit.)
    """
    policy, lam, _, d = _check(policy, lam, 1.0, d)
    if policy_record(policy).joins_shortest_iqueue:
        raise ValueError(f"policy={policy!r} has r p0 -> 0 (no finite large-r limit)")
    dp, _ = _choice_exponents(policy, d)
    alpha, b = _alpha(lam, dp), lam**dp

    def h(log_kappa):
        sigma = math.sqrt(math.exp(log_kappa) / alpha)
        return math.log(sigma * math.sqrt(math.pi / 2.0) * erfcx(b * sigma / math.sqrt(2.0)))

    return math.exp(brentq(h, -50.0, 50.0, xtol=1e-15, rtol=4 * np.finfo(float).eps))


# ---------------------------------------------------------------------------------------------
# response-time distribution (docs/responses.md)


def response_law(policy: str, lam: float, r: float, d: int = 1, eps: float = 1e-17):
    """The mean-field law of the response time, a :class:`sim.core.responses.Mixture` of
    ``Gamma(p, 1)`` over the position ``p`` an arriving task takes: with probability ``1 - p0``
    its scheduler's I-queue is non-empty and it joins an idle server (position 1); otherwise it
    is dispatched blindly, to a server with exactly ``i`` tasks with probability
    ``s_i^{d'} - s_{i+1}^{d'}`` (``d' = d`` for ``jiq_pod``, else 1), at position ``i + 1``.
    ``p0`` and the tail from :func:`fixed_point`; positions are kept until the blind mass
    ``p0 s_L^{d'}`` left is below ``eps``. Its mean is the fixed point's ``mean_response``."""
    from sim.core.responses import Mixture

    dp, _ = _choice_exponents(_check_policy(policy), int(d) if d is not None else 1)
    levels = 64
    while True:
        fp = fixed_point(policy, lam, r, d, max_level=levels)
        sd = np.concatenate(([1.0], fp.tail)) ** dp
        if fp.p0 * sd[-1] < eps or levels >= 2**20:
            break
        levels *= 4
    w = fp.p0 * (sd[:-1] - sd[1:])  # blind tasks at positions 1..levels
    w[0] += 1.0 - fp.p0
    return Mixture.of_positions(w)


# ---------------------------------------------------------------------------------------------
# the engine entry point


def run_task(task: dict) -> dict:
    """Mean-field values of one task as a plain dict (standard errors ``None``: nothing estimated).

    Keys used: ``engine`` ("meanfield"), ``policy``, ``n_servers`` (checked, not used: N =
    infinity), ``lam``, ``r``, ``d`` (required for ``jiq_pod``/``jiq_sqd``), ``max_level`` (64).
    """
    if task.get("engine") != "meanfield":
        raise ValueError(f"engine={task.get('engine')!r} must be 'meanfield'")
    policy = _check_policy(task.get("policy"))
    pol = policy_record(policy)
    MODEL.param("n_servers").check("n_servers", task.get("n_servers"))
    if not pol.samples:
        d = task.get("d", 1)
    elif "d" not in task:
        raise ValueError(f"d=None must be given for policy={policy!r}")
    else:
        d = task["d"]
    fp = fixed_point(policy, task.get("lam"), task.get("r"), d, RunSettings.from_task(task).max_level)
    dp, _ = _choice_exponents(policy, int(d))
    lam = float(task["lam"])
    out = {
        "mean_response": fp.mean_response,
        "mean_response_se": None,
        "mean_wait": fp.mean_response - 1.0,  # unit mean service
        "mean_wait_se": None,
        # a task waits iff it is sent to a busy server: blind dispatch (p0) to a busy one (lam^{d'})
        "prob_wait": float(fp.p0 * lam**dp),
        "prob_wait_se": None,
        "mean_queue": fp.mean_queue,
        "mean_queue_se": None,
        "tail": [float(v) for v in fp.tail],
        "tail_se": None,
        "p0": fp.p0,
        "p0_se": None,
        "mean_iqueue": fp.mean_iqueue,
        "mean_iqueue_se": None,
        "join_rate": fp.join_rate,
        "join_rate_se": None,
        "delete_rate": fp.delete_rate,
        "delete_rate_se": None,
        "probe_rate": fp.probe_rate,
        "probe_rate_se": None,
        "messages_per_job": fp.messages_per_job,
        "n_jobs": 0,
        "events_run": 0,
        "sim_time": 0.0,
        "warmup_time": 0.0,
        "ci_method": CI_METHOD,
    }
    # Lu et al.'s approximation (sim.jiq.lu; reconstructed, unverified) of the same point, for
    # the policies it covers: JIQ-Random for jiq (d = 1), JIQ-SQ(d) for jiq_sqd; a limit value
    # like the mean field's, so the analyses read it from this row (docs/jiq.md, Figure 5)
    if pol.lu:
        lu = lu_approximation(lam, task.get("r"), pol.probe_d(d))
        out["lu_mean_response"], out["lu_rho"] = float(lu.mean_response), float(lu.rho)
    else:
        out["lu_mean_response"], out["lu_rho"] = None, None
    if task.get("responses"):  # docs/responses.md: the exact position law at the fixed point
        out.update(exact_response_columns(response_law(policy, lam, task.get("r"), d)))
        out["ci_method"] += "; response law exact (mean field)"
    return out


