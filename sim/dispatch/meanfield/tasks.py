"""Mean-field (N -> infinity) limits of ``pod_per_task`` and ``batch_sampling`` (k-task jobs),
and of ``random`` and ``jsq`` with k-task jobs (``k`` independent task responses: M/M/1 ones,
or Exp(1) ones, zero queueing, for JSQ below capacity).

Model as in :mod:`sim.dispatch`: N FIFO servers, Exp(1) service, jobs of ``k`` tasks at rate
``N lam / k`` (tasks at rate ``lam`` per server), ``0 <= lam < 1``; ``s_i`` is the fraction of
servers with at least ``i`` tasks (``s_0 = 1``). In the limit the queues a job probes have
i.i.d. lengths with ``P(Q >= i) = s_i`` (the simulators probe distinct queues; with ``k`` and
``d`` fixed the difference vanishes), and the tasks of one job meet in one queue with
probability O(1/N). docs/responses.md has the derivations; in short:

``pod_per_task`` (each task samples its own ``k d`` distinct queues and joins the shortest,
:func:`sim.dispatch._occupancy_kernel._place_pod_per_task_min`): every task is a power-of-``D``
task, ``D = k d``, at task rate ``lam``, so the tail is the supermarket fixed point
``s_i = lam**((D**i - 1)/(D - 1))`` and a task takes position ``i`` with probability
``s_{i-1}**D - s_i**D``. The ``k`` tasks of a job land in ``k`` distinct queues whose lengths
are asymptotically independent, so the job response is the maximum of ``k`` independent task
responses: ``P(T <= t) = F_task(t)**k`` (:class:`MaxOfIid`). Its ``mean_response`` is
``H_k +`` :meth:`MaxOfIid.excess_mean` (``int (F_1^k - F_task^k) dt``, positive terms only, for
``k d >= 2``), so that the queueing ratio ``(E[T] - H_k) / H_k`` keeps its relative precision
when it is tiny (``lam**(kd)`` can be 1e-300): ``law.mean() - H_k`` would be rounding noise
(~1e-16, of either sign) there.

``batch_sampling`` (``k d`` distinct queues probed, one task to each of the ``k`` shortest,
:func:`sim.dispatch._occupancy_kernel._fill_batch_sampling`): a job puts a task at position
``>= i`` in ``T_i = (k - B_{i-1})^+`` queues, ``B_j`` the number of probes at length ``< j``,
``B_j ~ Binomial(kd, 1 - s_j)``. The drift is

    ds_i/dt = (lam / k) E[T_i - T_{i+1}] - (s_i - s_{i+1}),   i >= 1,

(jobs raise ``N s_i`` by the number of their tasks at position exactly ``i``, services lower
it at rate ``N (s_i - s_{i+1})``), and summing the fixed-point equations over the levels above
``i`` gives the closed recursion ``s_i = (lam / k) E[(k - B_{i-1})^+]`` (:func:`bs_fixed_point`;
checked against the ODE's fixed point by :func:`bs_fixed_point_ode`). The job's tasks sit at
positions ``1 + `` the ``k`` lowest order statistics of ``kd`` i.i.d. lengths, one per queue,
so its response is ``max_j Gamma(L_(j) + 1, 1)``; the law of the signature (how many of the
``k`` lowest lengths equal each level) comes from an exact program over the levels
(:func:`bs_signature_law`). ``mean_response`` (and ``queueing_ratio``) come from the exact
chain over the levels of :func:`sim.dispatch.meanfield.large_sampling.job_excess_exact` (numba,
Loader binomial pmfs, windows of the binomials; seconds at k ~ 10^3, kd ~ 10^7), which gives
``E[T] - H_k`` directly as an integral of non-negative terms; :class:`BatchSamplingLaw` (cost
levels x k^2 per node) is kept for the response columns and the checks.
"""
from __future__ import annotations

import abc
import math

import numpy as np
from scipy import integrate, optimize
from scipy.stats import binom

from sim.core.responses import Mixture, exact_response_columns
from sim.core.results import exact_row
from sim.core.settings import RunSettings
from sim.dispatch.meanfield import large_sampling, pod
from sim.dispatch.meanfield._common import CI_METHOD, _check_k_d
from sim.dispatch.policies import policy as policy_record

__all__ = ["ExactLaw", "MaxOfIid", "BatchSamplingLaw", "ppt_response_law", "bs_fixed_point",
           "bs_drift", "bs_fixed_point_ode", "bs_signature_law", "bs_signature_mixture",
           "bs_response_mixture", "response_law", "run_task"]

#: levels of the batch-sampling tail kept until s_i is below this
TAIL_EPS = 1e-16
#: branches of the signature program below this probability are dropped (their mass is
#: reported by bs_signature_law)
PRUNE = 1e-20


def _check(lam, k, d):
    return _check_k_d(lam, k, d)


# --------------------------------------------------------------------------------------------
# pod_per_task
# --------------------------------------------------------------------------------------------
class ExactLaw(abc.ABC):
    """A response-time law known through its exact CCDF (subclasses define :meth:`ccdf`,
    vectorised over ``t``), with the quantiles and the mean of a
    :class:`sim.core.responses.Mixture`."""

    @abc.abstractmethod
    def ccdf(self, t) -> np.ndarray:
        """P(T > t), vectorised over ``t``."""

    def quantile(self, q: float) -> float:
        """The ``q``-quantile: the root of ``P(T > t) = 1 - q``, bracketed on a grid, then
        brentq to 1e-12 relative."""
        if not 0.0 < q < 1.0:
            return float("nan")
        target = 1.0 - q
        grid = _BRACKET_GRID
        c = self.ccdf(grid)
        while c[-1] > target:
            if grid[-1] > 1e7:
                return float("nan")
            grid = np.append(grid, 2.0 * grid[-1])
            c = np.append(c, self.ccdf(grid[-1:]))
        j = int(np.argmax(c <= target))
        lo = 0.0 if j == 0 else float(grid[j - 1])
        return float(optimize.brentq(lambda x: float(self.ccdf(x)[0]) - target, lo,
                                     float(grid[j]), xtol=1e-12, rtol=1e-13))

    def mean(self) -> float:
        """E[T] = integral of the CCDF: 16-point Gauss-Legendre on unit panels up to where the
        CCDF is below 1e-18 (as :func:`sim.core.jobdelay.expected_max_gamma`)."""
        from sim.core.jobdelay import GL_W, GL_X

        hi = 8.0
        while float(self.ccdf(hi)[0]) > 1e-18:
            hi *= 2.0
        t = (np.arange(int(hi))[:, None] + GL_X[None, :]).ravel()
        return float(np.dot(self.ccdf(t), np.tile(GL_W, int(hi))))


#: brackets of the quantile search
_BRACKET_GRID = np.concatenate((np.arange(1, 40) * 0.25, 10.0 * 1.1 ** np.arange(40)))


class MaxOfIid(ExactLaw):
    """The law of the maximum of ``k`` independent copies of a law ``base`` (a
    :class:`sim.core.responses.Mixture`): ``P(T <= t) = F(t)**k``."""

    def __init__(self, base: Mixture, k: int):
        self.base = base
        self.k = int(k)

    def ccdf(self, t) -> np.ndarray:
        c = np.clip(self.base.ccdf(t), 0.0, 1.0)
        with np.errstate(divide="ignore"):
            return -np.expm1(self.k * np.log1p(-c))

    def excess_mean(self) -> float:
        """``E[T] - H_k = int_0^inf (F_1(t)^k - F(t)^k) dt`` for a base law of single tasks (a
        Mixture whose signatures are one task each, weights ``w_p`` at positions ``p``), in
        non-negative terms only: ``F_1 - F = sum_{i >= 1} P(Poisson(t) = i) W_{>i}`` with
        ``W_{>i}`` the weight of the positions above ``i`` (over the total), and ``F_1^k - F^k =
        F_1^k (-expm1(k log1p(-x)))``, ``x = (F_1 - F) / F_1``. Relative precision however
        small the excess (the queueing ratio); same nodes as :meth:`mean`. Cost: positions x
        nodes (meant for few positions, e.g. power-of-D with D >= 2)."""
        from sim.core.jobdelay import GL_W, GL_X

        base = self.base
        if base.grid_weight > 0 or any(p.size != 1 or c[0] != 1.0 for p, c in base.signatures):
            raise ValueError("excess_mean needs a base law of single tasks without grid jobs")
        pos = np.array([int(p[0]) for p, _ in base.signatures], dtype=np.int64)
        w = np.bincount(pos, weights=base.weights)
        if w.sum() <= 0:
            return float("nan")
        # above[i] = W_{>i}, i = 0..max position: suffix sums of the weights (no differences)
        above = np.append(np.cumsum(w[::-1])[::-1][1:], 0.0) / w.sum()
        hi = 8.0
        while float(self.ccdf(hi)[0]) > 1e-18:
            hi *= 2.0
        t = (np.arange(int(hi))[:, None] + GL_X[None, :]).ravel()
        f1 = -np.expm1(-t)
        x = np.zeros(t.size)
        logt = np.log(t)
        for i in range(1, above.size):
            if above[i] > 0.0:
                x += above[i] * np.exp(i * logt - t - math.lgamma(i + 1.0))
        x = np.minimum(x / f1, 1.0)
        with np.errstate(divide="ignore"):
            integrand = np.exp(self.k * np.log(f1)) * -np.expm1(self.k * np.log1p(-x))
        return float(np.dot(integrand, np.tile(GL_W, int(hi))))


def ppt_response_law(lam: float, k: int, d: int) -> MaxOfIid:
    """Mean-field job response law of ``pod_per_task``: the maximum of ``k`` independent
    power-of-``kd`` task responses (:func:`sim.dispatch.meanfield.pod.response_law`)."""
    lam, k, d = _check(lam, k, d)
    return MaxOfIid(pod.response_law("pod", lam, k * d), k)


def _ppt_row(lam, k, d, max_level, h):
    return _max_of_tasks_row(lam, k, k * d, max_level, h)


def _max_of_tasks_row(lam, k, dd, max_level, h):
    """k independent power-of-``dd`` tasks per job (``pod_per_task``: ``dd = k d``; ``random``
    with k-task jobs: ``dd = 1``)."""
    tail = pod.fixed_point(lam, dd, max_level) if lam > 0 else np.zeros(max_level)
    law = MaxOfIid(pod.response_law("pod", lam, dd), k)
    mean_queue = pod.pod_mean_queue(lam, dd)
    # a task waits i - 1 services at position i: E[wait] = sum_{i>=1} s_i**D (Little: the
    # tasks waiting per server, sum_{i>=2} s_i, over the task rate lam)
    mean_wait = (mean_queue - lam) / lam if lam > 0 else 0.0
    s_h = float(pod.fixed_point(lam, dd, h)[h - 1]) if lam > 0 else 0.0
    return {
        "tail": tail, "mean_queue": mean_queue, "mean_wait": mean_wait,
        # a task waits iff all its D probes are busy (lam**D); the job iff one of its k does
        "prob_wait": 1.0 - (1.0 - lam**dd) ** k,
        "frac_within_h": (1.0 - s_h**dd) ** k,
        "law": law,
        # E[T] - H_k in positive terms (few positions for dd >= 2; dd = 1 has many, and a
        # queueing ratio of order 1, so there law.mean() is used)
        "excess": law.excess_mean() if dd >= 2 else None,
    }


def _jsq_row(lam, k, max_level):
    """JSQ with k-task jobs: below capacity every task of a job finds an idle server in the
    limit (``s_1 = lam``, zero queueing), so the job response is the maximum of k Exp(1)."""
    tail = np.zeros(max_level)
    tail[0] = lam
    return {"tail": tail, "mean_queue": lam, "mean_wait": 0.0, "prob_wait": 0.0,
            "frac_within_h": 1.0, "law": MaxOfIid(Mixture.of_positions([1.0]), k)}


# --------------------------------------------------------------------------------------------
# batch_sampling
# --------------------------------------------------------------------------------------------
def _binom_pmf(x, n, p):
    """The Binomial(n, p) pmf at ``x`` in logs (``scipy.stats.binom.pmf`` raises an overflow
    error for some tiny ``p``), with ``p = 0`` and ``p = 1`` exact."""
    from scipy.special import gammaln

    x, n, p = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(n, np.float64),
                                  np.asarray(p, dtype=np.float64))
    inner = (p > 0.0) & (p < 1.0) & (x >= 0) & (x <= n)
    out = np.where(p <= 0.0, (x == 0).astype(float), (x == n).astype(float))
    if inner.any():
        xi, ni, pi = x[inner], n[inner], p[inner]
        out = out.copy()
        out[inner] = np.exp(gammaln(ni + 1) - gammaln(xi + 1) - gammaln(ni - xi + 1)
                            + xi * np.log(pi) + (ni - xi) * np.log1p(-pi))
    return out


def _expected_tasks_above(s_prev: float, k: int, n: int) -> float:
    """E[(k - B)^+], B ~ Binomial(n, 1 - s_prev): tasks of a job at positions >= i when
    ``s_prev = s_{i-1}``. Written with ``G = n - B ~ Binomial(n, s_prev)`` (the probes at
    length >= i - 1), ``(k - B)^+ = (G - (n - k))^+``: no ``1 - s`` is formed, so a small
    ``s_prev`` keeps its relative precision."""
    g = np.arange(n - k + 1, n + 1)
    return float(np.dot(g - (n - k), _binom_pmf(g, n, s_prev)))


def bs_fixed_point(lam: float, k: int, d: int, eps: float = TAIL_EPS) -> np.ndarray:
    """The batch-sampling fixed point ``s_1..s_L`` by the recursion
    ``s_i = (lam / k) E[(k - B_{i-1})^+]`` (``s_1 = lam``), up to the first level below ``eps``."""
    lam, k, d = _check(lam, k, d)
    if lam == 0.0:
        return np.zeros(1)
    n = k * d
    s = [lam]
    while s[-1] >= eps and len(s) < 100_000:
        s.append(min(s[-1], lam / k * _expected_tasks_above(s[-1], k, n)))
    return np.array(s)


def _tasks_above_all(s: np.ndarray, k: int, n: int) -> np.ndarray:
    """E[T_i] for i = 1..L+1 at the tail ``s`` = s_1..s_L (T_1 = k)."""
    prev = np.concatenate(([1.0], np.clip(s, 0.0, 1.0)))  # s_{i-1}, i = 1..L+1
    g = np.arange(n - k + 1, n + 1)  # probes at length >= i - 1 (as _expected_tasks_above)
    pmf = _binom_pmf(g[None, :], n, prev[:, None])
    return pmf @ (g - (n - k))


def bs_drift(s: np.ndarray, lam: float, k: int, d: int) -> np.ndarray:
    """ds/dt of the truncated batch-sampling system (s = s_1..s_L, s_{L+1} = 0: a task that
    would reach level L + 1 is lost)."""
    s = np.asarray(s, dtype=np.float64)
    t = _tasks_above_all(s, int(k), int(k) * int(d))
    below = np.append(s[1:], 0.0)
    return lam / k * (t[:-1] - t[1:]) - (s - below)


def bs_fixed_point_ode(lam: float, k: int, d: int, levels: int | None = None) -> np.ndarray:
    """The fixed point of :func:`bs_drift` found without the recursion: the ODE from the empty
    state to ``t = 50 / (1 - lam)`` (scipy BDF), then ``scipy.optimize.root`` on the drift."""
    lam, k, d = _check(lam, k, d)
    if levels is None:
        levels = bs_fixed_point(lam, k, d).size + 2
    sol = integrate.solve_ivp(lambda t, y: bs_drift(y, lam, k, d), (0.0, 50.0 / (1.0 - lam)),
                              np.zeros(levels), method="BDF", rtol=1e-9, atol=1e-13)
    if not sol.success:
        raise RuntimeError(f"ODE solver failed: {sol.message}")
    guess = sol.y[:, -1]
    rt = optimize.root(lambda y: bs_drift(y, lam, k, d), guess, method="hybr", tol=1e-15)
    s = np.clip(rt.x, 0.0, 1.0)
    if np.max(np.abs(bs_drift(s, lam, k, d))) > 1e-12:  # hybr may stop at its own xtol
        raise RuntimeError(f"no fixed point found: {rt.message}")
    return s


def bs_signature_law(s: np.ndarray, k: int, d: int, prune: float = PRUNE):
    """Exact law, at the tail ``s`` (s_1..s_L), of a batch-sampling job's signature: the
    number of its ``k`` queues at each position. Returns ``(law, dropped)`` with ``law`` a list
    of ``(prob, {position: count})`` and ``dropped`` the probability of the pruned branches.

    Program over the levels ``j = 0, 1, ...``: ``m`` probes not yet placed (all of length
    ``>= j``), ``r`` tasks not yet placed. Given that, the number at length exactly ``j`` is
    ``C ~ Binomial(m, q_j)``, ``q_j = (s_j - s_{j+1}) / s_j``; if ``C >= r`` the last ``r``
    tasks go to queues of length ``j`` (position ``j + 1``) and the job is placed; otherwise
    ``C`` tasks take position ``j + 1`` and ``(m - C, r - C)`` carry on to level ``j + 1``.
    Beyond the last level of ``s`` every remaining probe has length ``L`` (``q_L = 1``).
    """
    s = np.asarray(s, dtype=np.float64)
    k, n = int(k), int(k) * int(d)
    sl = np.concatenate(([1.0], s, [0.0]))  # s_0..s_{L+1}
    law: list = []
    dropped = 0.0
    states = [(1.0, n, k, ())]  # (prob, m, r, signature as ((position, count), ...))
    j = 0
    while states:
        q = 1.0 if j >= sl.size - 1 or sl[j] <= 0.0 else min(1.0, (sl[j] - sl[j + 1]) / sl[j])
        nxt = []
        for w, m, r, sig in states:
            c = np.arange(r)
            pc = _binom_pmf(c, m, q)
            done = w * float(binom.sf(r - 1, m, q))
            if done > 0.0:
                law.append((done, dict(sig + ((j + 1, r),))))
            for cc in range(r):
                p = w * float(pc[cc])
                if p <= 0.0:
                    continue
                if p < prune:
                    dropped += p
                    continue
                nxt.append((p, m - cc, r - cc, sig + (((j + 1, cc),) if cc else ())))
        states = nxt
        j += 1
    return law, dropped


def bs_signature_mixture(lam: float, k: int, d: int, s: np.ndarray | None = None) -> Mixture:
    """The job response law of ``batch_sampling`` as a :class:`sim.core.responses.Mixture`
    over the enumerated :func:`bs_signature_law` (pruned at :data:`PRUNE`; the number of
    signatures grows with the levels, so this is for moderate loads and checks:
    :class:`BatchSamplingLaw` is the one the engine uses)."""
    lam, k, d = _check(lam, k, d)
    if s is None:
        s = bs_fixed_point(lam, k, d)
    law, _ = bs_signature_law(s, k, d)
    return Mixture([w for w, _ in law],
                   [(sorted(sig), [float(sig[p]) for p in sorted(sig)]) for _, sig in law])


class BatchSamplingLaw(ExactLaw):
    """The mean-field job response law of ``batch_sampling`` at the tail ``s``: the program of
    :func:`bs_signature_law` with the signature summed out. Only ``r`` (tasks not yet placed;
    the probes not yet placed are ``r + kd - k``) matters for what follows a level, so for each
    ``t`` it carries, per ``r``, ``A_r = P(state, and some placed task still running at t)``
    and ``B_r = E[1{state} prod over placed tasks of F_p(t)]``: placing ``c`` tasks at
    position ``p`` maps ``(A, B)`` to ``(A + B (1 - F_p^c), B F_p^c)`` times ``P(C = c)``. Only
    sums of non-negative terms: the CCDF keeps its relative precision far in the tail. Cost
    per ``t``: levels x k^2."""

    def __init__(self, s: np.ndarray, k: int, d: int):
        self.s = np.asarray(s, dtype=np.float64)
        self.k, self.n = int(k), int(k) * int(d)
        sl = np.concatenate(([1.0], self.s, [0.0]))
        # 1 - q_j = P(length > j | length >= j) = s_{j+1} / s_j, j = 0..L (0 at the last
        # level, and where s_j = 0), used as is so that q_j near 1 loses no precision
        self._q1 = np.zeros(self.s.size + 1)
        pos = sl[:-1] > 0
        self._q1[pos] = np.clip(sl[1:][pos] / sl[:-1][pos], 0.0, 1.0)
        k, n = self.k, self.n
        # P(C = c) for c < r and P(C >= r), C ~ Binomial(r + n - k, q_j), per level and r:
        # C = c iff m - c of the m probes are longer (Binomial(m, 1 - q_j))
        self._pc = np.zeros((self._q1.size, k + 1, k))
        self._pge = np.zeros((self._q1.size, k + 1))
        for r in range(1, k + 1):
            m = r + n - k
            c = np.arange(r)
            self._pc[:, r, :r] = _binom_pmf(m - c[None, :], m, self._q1[:, None])
            self._pge[:, r] = binom.cdf(m - r, m, self._q1)

    def ccdf(self, t) -> np.ndarray:
        from sim.core.responses import _log_cdf_gamma

        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        k = self.k
        a = np.zeros((k + 1, t.size))  # A_r
        b = np.zeros((k + 1, t.size))  # B_r
        b[k] = 1.0
        out = np.zeros(t.size)
        for j in range(self._q1.size):
            lf = np.where(t > 0, _log_cdf_gamma(j + 1, t), -np.inf)  # log F_{j+1}(t)
            na = np.zeros_like(a)
            nb = np.zeros_like(b)
            with np.errstate(invalid="ignore"):
                for r in range(1, k + 1):
                    if not (a[r].any() or b[r].any()):
                        continue
                    # the last r tasks all at position j + 1
                    out += self._pge[j, r] * (a[r] + b[r] * -np.expm1(r * lf))
                    for c in range(r):
                        w = self._pc[j, r, c]
                        if w == 0.0:
                            continue
                        if c == 0:
                            na[r] += w * a[r]
                            nb[r] += w * b[r]
                        else:
                            na[r - c] += w * (a[r] + b[r] * -np.expm1(c * lf))
                            nb[r - c] += w * b[r] * np.exp(c * lf)
            a, b = na, nb
        return np.clip(out, 0.0, 1.0)


def bs_response_mixture(lam: float, k: int, d: int, s: np.ndarray | None = None):
    """The mean-field job response law of ``batch_sampling`` (:class:`BatchSamplingLaw` at the
    fixed point :func:`bs_fixed_point`, or at the tail ``s``)."""
    lam, k, d = _check(lam, k, d)
    if s is None:
        s = bs_fixed_point(lam, k, d)
    return BatchSamplingLaw(s, k, d)


def _bs_row(lam, k, d, max_level, h):
    n = k * d
    s = bs_fixed_point(lam, k, d)
    tail = np.zeros(max_level)
    m = min(max_level, s.size)
    tail[:m] = s[:m]
    # E[T] - H_k by the exact chain of large_sampling (fast at large k, d); BatchSamplingLaw
    # (whose tables take levels x k^2 memory: ~0.3 GB at k = 1193) only for the response
    # columns, built by run_task when they are asked for
    excess, mass = large_sampling.job_excess_exact(s, k, d)
    if not abs(mass - 1.0) < 1e-9:
        raise RuntimeError(f"batch_sampling E[T] at lam={lam}, k={k}, d={d}: captured mass {mass!r}")
    mean_queue = float(s.sum()) if lam > 0 else 0.0
    # mean over tasks of position - 1 = (1/k) sum_{i>=2} E[T_i] = (1/lam) sum_{i>=2} s_i
    mean_wait = float(s[1:].sum()) / lam if lam > 0 else 0.0
    sl = np.concatenate(([1.0], s, [0.0]))
    s_h = sl[h] if h < sl.size else 0.0
    return {
        "tail": tail, "mean_queue": mean_queue, "mean_wait": mean_wait,
        # some task at position >= 2 iff fewer than k probes are idle: B_1 < k
        "prob_wait": float(binom.cdf(k - 1, n, 1.0 - lam)) if lam > 0 else 0.0,
        # every task at position <= h iff at least k probes are shorter than h: B_h >= k
        "frac_within_h": float(binom.sf(k - 1, n, 1.0 - s_h)) if lam > 0 else 1.0,
        "law": lambda: bs_response_mixture(lam, k, d, s), "excess": excess,
    }


# --------------------------------------------------------------------------------------------
# the engine entry point
# --------------------------------------------------------------------------------------------
def response_law(policy: str, lam: float, k: int, d: int) -> ExactLaw:
    """The mean-field job response law of ``pod_per_task`` or ``batch_sampling``."""
    pol = policy_record(policy)
    if pol.k_task and not pol.batch:  # each task its own sample of k*d queues
        return ppt_response_law(lam, k, d)
    if pol.batch and not pol.fills:  # the k shortest of one sample
        return bs_response_mixture(lam, k, d)
    raise ValueError(f"policy={pol.name!r} is not pod_per_task or batch_sampling")


def run_task(task: dict) -> dict:
    """Mean-field values of a ``pod_per_task`` or ``batch_sampling`` task (the result keys of
    :data:`sim.core.results.RESULT_KEYS`; with ``responses: true`` also the response columns,
    exact: quantiles and CCDF of the law, SEs null). ``mean_response`` is the exact E[T] of
    the job response law (no Monte Carlo): ``H_k +`` the excess ``E[T] - H_k`` computed directly
    for ``batch_sampling`` (:func:`large_sampling.job_excess_exact`, every k and d) and
    ``pod_per_task`` with ``kd >= 2`` (:meth:`MaxOfIid.excess_mean`), with ``queueing_ratio =
    excess / H_k``; ``law.mean()`` otherwise."""
    from sim.core.jobdelay import harmonic

    pol = policy_record(task["policy"])
    lam, k, d = _check(task["lam"], task.get("k") or 1, task.get("d") or 1)
    if task.get("b") is not None:
        raise ValueError("b: the mean field here has no finite buffer")
    settings = RunSettings.from_task(task)
    h, max_level = settings.h, settings.max_level
    if pol.fills or pol.single_task:
        raise ValueError(f"policy={pol.name!r} has no mean-field limit in this module")
    if pol.probes_all:
        vals = _jsq_row(lam, k, max_level)
    elif pol.batch:
        vals = _bs_row(lam, k, d, max_level, h)
    else:  # each task the shortest of its own sample (1 queue: random, k independent M/M/1)
        vals = _max_of_tasks_row(lam, k, pol.sample_size(k, d), max_level, h)
    law = vals["law"]
    hk = float(harmonic(k))
    if vals.get("excess") is not None:
        mean_t, ratio = hk + vals["excess"], vals["excess"] / hk
    else:
        mean_t = float(law.mean())
        ratio = (mean_t - hk) / hk
    out = exact_row(
        mean_response=mean_t, mean_wait=vals["mean_wait"], prob_wait=vals["prob_wait"],
        mean_queue=vals["mean_queue"], tail=vals["tail"], queueing_ratio=ratio,
        drop_prob=0.0, frac_within_h=vals["frac_within_h"],
        messages_per_job=pol.messages(int(task["n_servers"]), k, d),
        ci_method=CI_METHOD,
    )
    if task.get("responses"):
        if not isinstance(law, ExactLaw):   # built on demand (batch_sampling)
            law = law()
        out.update(exact_response_columns(law))
        out["ci_method"] += "; response law exact (mean field)"
    return out
