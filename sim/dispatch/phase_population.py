"""Power-of-d (SQ(d)) and JIQ with one dispatcher under phase-type task sizes, declared by their
transitions: one declaration gives the simulation (:mod:`sim.core.population_engine`), the mean
field and the refined mean field (:mod:`sim.core.population_limit`).

Model: N FIFO servers, Poisson arrivals of rate ``lam N``, sizes of a phase-type law of mean 1
with ``m`` phases (:meth:`sim.core.service.ServiceLaw.phase_type`: the exponential, erlang and
hyperexponential laws), initial law ``alpha``, sub-generator ``T`` and exit rates ``t = -T 1``.
The policies are those of :mod:`sim.dispatch.general`:

- ``pod``: ``d`` distinct uniform servers (``replacement: true``: independent), the shortest
  queue among them, ties uniform;
- ``jiq``: one dispatcher whose I-queue lists every idle server: an idle server while there is
  one, else a uniform server.

State (fractions of N; a server's queue is its number of tasks, the one in service included):

- ``s``: ``s_l``, the fraction of servers with at least ``l`` tasks, ``l = 0 .. L + 1``
  (``s_0 = 1`` and ``s_{L+1} = 0`` never move);
- ``x``: ``x[j * S + l]``, the fraction of servers with exactly ``l`` tasks whose task in
  service is in phase ``j``, for the phases ``j = 0 .. m - 2`` and ``l = 1 .. L`` (a block of
  ``S`` coordinates per phase, ``S`` the stride: a power of two above ``L + 1``; the other
  coordinates stay 0). The last phase is implied, ``occ(m - 1, l) = s_l - s_{l+1} - sum_{j <
  m-1} x[j S + l]`` (rounded to a count at finite N), so that the state has no redundant
  coordinate: a redundant one (a kept linear relation) leaves the limits' root finding a
  Jacobian whose deep-tail columns are lost in rounding (measured: singular at the
  hyperexponential's fixed point).

Transitions (rates per server; ``occ(j, l)`` the fraction with ``l`` tasks in phase ``j``;
``h(s)`` the probability that ``d`` probes all fall among the ``N s`` servers with at least a
given queue, ``C(N s, d) / C(N, d)``, ``s**d`` at ``N = inf``); each jump below names ``x`` of
the explicit phases only, the implied phase follows from ``s``:

- ``idle<k>``: an arrival that starts service at an idle server in phase ``k``: ``pod``: ``lam
  (1 - h(s_1)) alpha_k``; ``jiq``: ``lam alpha_k`` while a server is idle (``N (1 - s_1) >=
  1``), else 0. Jump ``s_1 += 1``, ``x[k S + 1] += 1``; position 1.
- ``busy<j>`` (``l = 2 .. L``): an arrival that joins a queue of ``l - 1`` tasks whose task in
  service is in phase ``j``: ``pod``: ``lam (h(s_{l-1}) - h(s_l)) occ(j, l - 1) / (s_{l-1} -
  s_l)`` (the shortest sampled queue has ``l - 1`` tasks and the server is uniform among
  those), written with the divided difference of the polynomial ``h``
  (:func:`_divided_difference`), smooth where ``s_{l-1} = s_l``; ``jiq``: ``lam occ(j, l - 1)``
  while no server is idle, else 0. Jump ``s_l += 1``, ``x[j S + l - 1] -= 1``, ``x[j S + l]
  += 1``; position ``l``.
- ``phase<j>_<k>`` (``T_jk > 0``, ``l = 1 .. L``): the task in service moves from phase ``j``
  to ``k``: rate ``T_jk occ(j, l)``; jump ``x[j S + l] -= 1``, ``x[k S + l] += 1``.
- ``next<j>_<k>`` (``t_j alpha_k > 0``, ``l = 2 .. L``): the task in service ends in phase
  ``j`` and the next starts in phase ``k``: rate ``t_j alpha_k occ(j, l)``; jump ``s_l -= 1``,
  ``x[j S + l] -= 1``, ``x[k S + l - 1] += 1``.
- ``last<j>``: a server's last task ends in phase ``j``: rate ``t_j occ(j, 1)``; jump ``s_1 -=
  1``, ``x[j S + 1] -= 1``.

The families are indexed by a number ``i = c S + l`` that carries the level ``l`` and a code
``c`` (``j``, or ``j m + k`` for the pairs), so that one compiled rate function serves every
phase (and its machine code is cached on disk, :mod:`sim.core.population_engine`); the jump
offsets subtract ``c S``. The generated kernel depends on the stride and the phase pattern,
not on ``L``.

JIQ's drift is discontinuous where ``s_1 = 1`` (no idle server). Its mean field from empty
never gets there for ``lam < 1`` (``s_1`` rises to ``lam``: the busy fraction of
M/G/infinity), and at its fixed point (``s_1 = lam``, ``s_2 = 0``: no task waits) the drift is
smooth, so the declaration is ``smooth=True`` and the limits apply there. The refined term is
then 0 (near the fixed point the rates are linear in the state and do not depend on N): JIQ's
finite-N effects come from the times when every server is busy, whose probability falls
faster than any power of 1/N at fixed ``lam``.

Truncation: a task that would be the ``(L+1)``-th at its server is lost (``drop_prob``); ``L``
is set out of reach (:func:`levels`), and the tests check that ``drop_prob`` is 0.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit

from sim.core.population import At, Population, Transitions, Vector, tail_vector
from sim.core.population_engine import simulate
from sim.core.population_limit import fixed_point, limit_row, refined_row
from sim.core.results import simulation_row
from sim.core.sampling import probes_in
from sim.core.service import LAW_KEYS, ServiceLaw, service_law

__all__ = ["POLICIES", "declaration", "law_of", "levels", "params", "run_task", "run_meanfield",
           "run_refined"]

#: the policies declared here
POLICIES = ("pod", "jiq")

# p = (lam, d, replacement, L, m, S, N of a simulation or 0, alpha_0 .. alpha_{m-1},
#      t_0 .. t_{m-1}, T (m x m, row-major, diagonal 0))
_LAM, _D, _REP, _L, _M, _S, _NSIM, _ALPHA = range(8)

#: the limits' truncation: the first L tried, and the largest
L_LIMIT_START, L_LIMIT_MAX = 30, 254
#: the limits' truncation is accepted when the fixed point's s_L is below this
LIMIT_TAIL = 1e-14
#: levels a pod simulation keeps above the mean field's reach (finite N has longer queues)
SIM_MARGIN = 4
#: the truncation of a jiq simulation
JIQ_LEVELS = 30


# ---------------------------------------------------------------------------------------------
# rate functions (one per kind of family; the phase comes from the index: i = c S + l)
# ---------------------------------------------------------------------------------------------
@njit(cache=True)
def _divided_difference(a, b, n, d, rep):
    """``(h(a) - h(b)) / (a - b)`` for ``h(s) = prod_{j<d} (s - j/n) / (1 - j/n)`` (``s**d``
    with replacement or at ``n = inf``), as the polynomial it is: ``sum_k prod_{j<k} (b - c_j)
    prod_{k<j<d} (a - c_j)`` by a Horner-like recursion, divided by ``prod (1 - c_j)``, ``c_j =
    j/n``. On counts it equals the hypergeometric difference quotient exactly, and it is >= 0
    there: every term is a product of non-negative factors or has an exact zero factor."""
    e = 1.0
    pk = 1.0
    den = 1.0
    for k in range(1, d):
        c_prev = 0.0 if rep or n == np.inf else (k - 1) / n
        c_k = 0.0 if rep or n == np.inf else k / n
        pk *= b - c_prev
        e = e * (a - c_k) + pk
        den *= 1.0 - c_k
    return e / den


@njit(cache=True)
def _occ(j, lvl, s, x, n, p):
    """``occ(j, l)``: the fraction of servers with ``l`` tasks whose task in service is in phase
    ``j``; the last phase implied by the tail, in a simulation (``n`` the task's N) rounded to
    a whole count, so that an empty class has rate exactly 0 and never a rounding error's
    sign (the limits, which difference the drift at other ``n``, get the unrounded value)."""
    st = np.int64(p[_S])
    last = np.int64(p[_M]) - 1
    if j < last:
        return x[j * st + lvl]
    v = s[lvl] - s[lvl + 1]
    for k in range(last):
        v -= x[k * st + lvl]
    if n == p[_NSIM]:
        v = np.rint(v * n) / n
    return v


@njit(cache=True)
def _pod_idle_rate(i, s, x, n, p):
    k = i // np.int64(p[_S])
    h1 = probes_in(s[1], n, np.int64(p[_D]), p[_REP] != 0.0, 0.0, 0.0)
    r = p[_LAM] * (1.0 - h1) * p[_ALPHA + k]
    return r if r > 0.0 else 0.0


@njit(cache=True)
def _pod_busy_rate(i, s, x, n, p):
    st = np.int64(p[_S])
    j = i // st
    lvl = i - j * st
    return p[_LAM] * _divided_difference(s[lvl - 1], s[lvl], n, np.int64(p[_D]),
                                         p[_REP] != 0.0) * _occ(j, lvl - 1, s, x, n, p)


@njit(cache=True)
def _some_idle(s, n):
    """At least one idle server: ``N (1 - s_1) >= 1`` (at ``n = inf``: ``s_1 < 1``)."""
    g = 1.0 - s[1]
    if n == np.inf:
        return g > 0.0
    return g * n > 0.5


@njit(cache=True)
def _jiq_idle_rate(i, s, x, n, p):
    return p[_LAM] * p[_ALPHA + i // np.int64(p[_S])] if _some_idle(s, n) else 0.0


@njit(cache=True)
def _jiq_busy_rate(i, s, x, n, p):
    if _some_idle(s, n):
        return 0.0
    st = np.int64(p[_S])
    j = i // st
    return p[_LAM] * _occ(j, i - j * st - 1, s, x, n, p)


@njit(cache=True, inline="always")
def _phase_pair(i, p):
    """``(j, k, l, m)`` of index ``i = (j m + k) S + l`` of a family over pairs of phases
    (``m`` phases, stride ``S``): from phase ``j`` to ``k``, ``l`` tasks."""
    st = np.int64(p[_S])
    m = np.int64(p[_M])
    c = i // st
    j = c // m
    return j, c - j * m, i - c * st, m


@njit(cache=True)
def _phase_rate(i, s, x, n, p):
    j, k, lvl, m = _phase_pair(i, p)
    return p[_ALPHA + 2 * m + j * m + k] * _occ(j, lvl, s, x, n, p)


@njit(cache=True)
def _next_rate(i, s, x, n, p):
    j, k, lvl, m = _phase_pair(i, p)
    return p[_ALPHA + m + j] * p[_ALPHA + k] * _occ(j, lvl, s, x, n, p)


@njit(cache=True)
def _last_rate(i, s, x, n, p):
    st = np.int64(p[_S])
    j = i // st
    return p[_ALPHA + np.int64(p[_M]) + j] * _occ(j, i - j * st, s, x, n, p)


# ---------------------------------------------------------------------------------------------
# the law and the declaration
# ---------------------------------------------------------------------------------------------
def law_of(task: dict) -> ServiceLaw:
    """The task's service law (keys ``service``, ``service_scv``, ``service_phases``), refused
    in one line unless it is phase-type."""
    keys = {k: task[k] for k in LAW_KEYS.values() if task.get(k) is not None}
    law = service_law(task.get("service", "exponential"), **keys)
    if law.phase_type() is None:
        raise ValueError(f"service={law.name!r} is not phase-type: its SQ(d) and JIQ populations "
                         "are not declared (exponential, erlang and hyperexponential are)")
    return law


def _phases(law: ServiceLaw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    alpha, t = law.phase_type()
    alpha = np.asarray(alpha, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    return alpha, t, -t.sum(axis=1)


def _stride(levels_: int) -> int:
    s = 32
    while s < levels_ + 2:
        s *= 2
    return s


@functools.lru_cache(maxsize=64)
def _declare(policy: str, pattern: tuple, m: int, stride: int, top: int) -> Population:
    """The declaration for a policy, a phase pattern (which ``alpha_k``, ``T_jk`` and ``t_j``
    are positive), ``m`` phases, the stride and the truncation ``L = top``."""
    alpha_pos, t_pos, exit_pos = pattern
    st, L, last = stride, top, m - 1
    idle_rate, busy_rate = ((_pod_idle_rate, _pod_busy_rate) if policy == "pod"
                            else (_jiq_idle_rate, _jiq_busy_rate))

    def x_at(j, off, delta):  # a component on x of phase j, none for the implied phase
        return (("x", j * st + off, delta),) if j < last else ()

    def occ_reads(j, off):  # the coordinates occ(j, l) reads, l = i + off (off includes -c S)
        if j < last:
            return (("x", j * st + off),)
        return (("s", off), ("s", off + 1)) + tuple(("x", k * st + off) for k in range(last))

    # every family's rate is called out of line (inline=False, sim.core.population.Transitions):
    # inlined at each of the loop's places (154 for the hyperexponential's ten families) they
    # made a kernel that LLVM had not compiled after 4 CPU minutes and 5 GB
    fams = []
    for k in range(m):  # arrivals at an idle server, starting in phase k
        if alpha_pos[k]:
            b = k * st
            fams.append(Transitions(f"idle{k}", idle_rate, (("s", -b, 1),) + x_at(k, -b, 1),
                                    b + 1, b + 2, reads=(("s", -b),), arrival=True, position=-b,
                                    inline=False))
    for j in range(m):  # arrivals joining a busy server in phase j
        b = j * st
        reads = occ_reads(j, -b - 1) + ((("s", -b - 1), ("s", -b)) if policy == "pod"
                                        else (("s", At(1)),))
        fams.append(Transitions(f"busy{j}", busy_rate,
                                (("s", -b, 1),) + x_at(j, -b - 1, -1) + x_at(j, -b, 1),
                                b + 2, b + L + 1, reads=tuple(dict.fromkeys(reads)), arrival=True,
                                position=-b, inline=False))
    for j in range(m):
        for k in range(m):
            b = (j * m + k) * st
            if j != k and t_pos[j][k]:
                fams.append(Transitions(f"phase{j}_{k}", _phase_rate,
                                        x_at(j, -b, -1) + x_at(k, -b, 1), b + 1, b + L + 1,
                                        reads=occ_reads(j, -b), inline=False))
            if exit_pos[j] and alpha_pos[k]:
                fams.append(Transitions(f"next{j}_{k}", _next_rate,
                                        (("s", -b, -1),) + x_at(j, -b, -1) + x_at(k, -b - 1, 1),
                                        b + 2, b + L + 1, reads=occ_reads(j, -b), inline=False))
    for j in range(m):
        if exit_pos[j]:
            b = j * st
            fams.append(Transitions(f"last{j}", _last_rate, (("s", -b, -1),) + x_at(j, -b, -1),
                                    b + 1, b + 2, reads=occ_reads(j, -b), inline=False))
    return Population(
        name=f"{policy}_phase",
        vectors=(Vector("s", L + 2), Vector("x", max(last * st, 1))),
        transitions=tuple(fams),
        params=params,
        start=_start,
        **tail_vector("s"),
        arrival_rate=lambda p: float(p[_LAM]),
        mean_service=1.0,
        messages=(lambda p: 2.0 * p[_D]) if policy == "pod" else None,
        counts=_counts,
    )


def declaration(policy: str, law: ServiceLaw, top: int) -> Population:
    """The population of ``policy`` (``pod`` or ``jiq``) with sizes of the phase-type ``law``,
    truncated at ``L = top`` tasks per server."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is not declared with phase-type sizes; valid: "
                         f"{', '.join(POLICIES)}")
    alpha, t, ex = _phases(law)
    m = alpha.size
    pattern = (tuple(bool(a > 0) for a in alpha),
               tuple(tuple(bool(t[j, k] > 0) for k in range(m)) for j in range(m)),
               tuple(bool(e > 0) for e in ex))
    return _declare(policy, pattern, m, _stride(int(top)), int(top))


def params(task: dict, top: int | None = None) -> tuple:
    """The parameter tuple ``p`` of a task (layout above ``_LAM``), with truncation ``top``
    (default: :func:`levels`)."""
    law = law_of(task)
    alpha, t, ex = _phases(law)
    m = alpha.size
    L = int(top if top is not None else task.get("_levels") or levels(task))
    d = int(task.get("d") or 1)
    off = t.copy()
    np.fill_diagonal(off, 0.0)
    nsim = float(task["n_servers"]) if task.get("events") is not None else 0.0
    return (float(task["lam"]), float(d), 1.0 if task.get("replacement") else 0.0, float(L),
            float(m), float(_stride(L)), nsim, *map(float, alpha), *map(float, ex),
            *map(float, off.ravel()))


def _start(p, sizes):
    s = np.zeros(sizes[0])
    s[0] = 1.0
    return [s, np.zeros(sizes[1])]


def _counts(p, x, n):
    """Counts of ``n`` servers from fractions ``x`` (flat ``s`` then ``x``): each phase's
    occupancy per level (the implied one included) rounded, the largest lowered while they
    exceed ``n``, then ``s`` summed from them: the implied phase is then a whole count >= 0."""
    L2 = int(p[_L]) + 2
    m, st = int(p[_M]), int(p[_S])
    s = np.asarray(x[:L2])
    xs = np.asarray(x[L2:])
    occ = np.zeros((m, L2))
    occ[: m - 1] = xs[: (m - 1) * st].reshape(m - 1, st)[:, :L2] if m > 1 else 0.0
    occ[m - 1, 1:L2 - 1] = s[1:L2 - 1] - s[2:L2] - occ[: m - 1, 1:L2 - 1].sum(axis=0)
    cnt = np.maximum(np.rint(occ * n).astype(np.int64), 0)
    cnt[:, 0] = 0
    while cnt.sum() > n:
        cnt.flat[int(np.argmax(cnt))] -= 1
    per_level = cnt.sum(axis=0)
    cs = np.cumsum(per_level[::-1])[::-1].copy()
    cs[0] = n
    cx = np.zeros(xs.size, dtype=np.int64)
    for j in range(m - 1):
        cx[j * st: j * st + L2] = cnt[j]
    return np.concatenate((cs, cx))


# ---------------------------------------------------------------------------------------------
# truncation
# ---------------------------------------------------------------------------------------------
def _limit_levels(task: dict) -> int:
    """The limits' ``L``: from :data:`L_LIMIT_START` (stride 32), doubled with the stride until the
    fixed point's ``s_L`` is below :data:`LIMIT_TAIL`."""
    policy = task["policy"]
    if policy == "jiq":
        return JIQ_LEVELS  # s_2 = 0 at the fixed point; the simulation's stride
    top = L_LIMIT_START
    while True:
        dec = declaration(policy, law_of(task), top)
        p = np.asarray(params(task, top))
        x = fixed_point(dec, p).x
        if x[top] < LIMIT_TAIL:
            return top
        if top >= L_LIMIT_MAX:
            raise ValueError(f"lam={task['lam']!r}: the mean-field tail at {top} tasks is "
                             f"{x[top]:.3g} > {LIMIT_TAIL:g}; a longer truncation is not offered")
        top = 2 * (top + 2) - 2


def levels(task: dict) -> int:
    """The truncation ``L`` of a task: ``levels`` if the task gives it; for the limits (no
    ``events``) :func:`_limit_levels`; for a simulation of ``pod`` the first level where
    ``samples * s_L < 1e-6`` for ``s`` the mean-field fixed point, ``samples = N (1 + run_time
    (1 - lam))`` the independent queue lengths of the run (as
    :func:`sim.core.memory.longest_queue`), plus :data:`SIM_MARGIN`; for ``jiq``
    :data:`JIQ_LEVELS` (its mean field has no queue to read a level from). A truncation in
    reach shows as ``drop_prob > 0`` in the row; the tests check that it is 0."""
    if task.get("levels") is not None:
        top = task["levels"]
        if not isinstance(top, int) or isinstance(top, bool) or not 3 <= top <= L_LIMIT_MAX:
            raise ValueError(f"levels={top!r} must be an integer in [3, {L_LIMIT_MAX}]")
        return top
    if task.get("events") is None:
        return _limit_levels(task)
    if task["policy"] == "jiq":
        return JIQ_LEVELS
    lam, n = float(task["lam"]), float(task["n_servers"])
    run_time = float(task["events"]) / (2.0 * n * lam)
    target = 1e-6 / (n * (1.0 + run_time * (1.0 - lam)))
    limit = {k: v for k, v in task.items() if k != "events"}
    top = _limit_levels(limit)
    tail = fixed_point(declaration("pod", law_of(limit), top),
                       np.asarray(params(limit, top))).x[:top + 1]
    below = np.nonzero(tail < target)[0]
    return min((int(below[0]) if below.size else top) + SIM_MARGIN, L_LIMIT_MAX)


# ---------------------------------------------------------------------------------------------
# runners
# ---------------------------------------------------------------------------------------------
def _task(task: dict) -> dict:
    out = dict(task)
    if out.get("policy") not in POLICIES:
        raise ValueError(f"policy={out.get('policy')!r} is not declared with phase-type sizes; "
                         f"valid: {', '.join(POLICIES)}")
    lam = out.get("lam")
    if not isinstance(lam, (int, float)) or not 0.0 < float(lam) < 1.0:
        raise ValueError(f"lam={lam!r} must be a number with 0 < lam < 1")
    if out["policy"] == "pod":
        d = out.get("d")
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            raise ValueError(f"d={d!r} must be an integer >= 1")
        n = out.get("n_servers")
        if n is not None and not out.get("replacement") and d > n:
            raise ValueError(f"d={d!r} must not exceed n_servers={n!r} (sampling without "
                             "replacement)")
    else:
        out["d"] = 1
    law_of(out)
    return out


def _decl_and_task(task: dict) -> tuple[Population, dict]:
    task = _task(task)
    top = levels(task)
    task["_levels"] = top
    return declaration(task["policy"], law_of(task), top), task


def run_task(task: dict) -> dict:
    """One simulation of the population (``n_servers``, ``lam``, ``d``, ``events``, ``seed``,
    the law's keys and the run settings): a row of :func:`sim.core.results.simulation_row`."""
    decl, task = _decl_and_task(task)
    return simulation_row(simulate(decl, task))


def run_meanfield(task: dict) -> dict:
    """The mean field (fixed point of the declared drift) of a task."""
    task = {k: v for k, v in task.items() if k != "events"}
    decl, task = _decl_and_task(task)
    return limit_row(decl, task)


def run_refined(task: dict) -> dict:
    """``x* + V / N`` of the declared drift at the task's ``n_servers``."""
    task = {k: v for k, v in task.items() if k != "events"}
    decl, task = _decl_and_task(task)
    return refined_row(decl, task)
