"""Slotted engine: discrete-time simulation of the LED model (:mod:`sim.led`), one entry per
server and per (dispatcher, server) estimate.

Order within slot ``t`` (the issue's, the paper's): observe ``Q(t)``; draw every dispatcher's
arrivals ``A_m(t)``; every dispatcher with arrivals decides on the information it has at the
start of the slot (LED: its estimates; ``jsq``/``pod``: the true ``Q(t)``, so that dispatchers
of one slot do not see each other's tasks: the herd effect of JSQ with several dispatchers) and
sends all of ``A_m(t)`` to one server (``count_own``: it adds them to its estimate); every
server draws ``S_n(t)`` and serves FIFO; the updates (Push, Pull, JIQ reports) read ``Q(t+1)``.
The run starts empty (all estimates 0, which is then exact).

Measurements (per window of ``2**k`` slots, then MSER-5 cut and batch means as in the other
engines, :mod:`sim.core.output`):

- ``mean_total_queue``: time average of ``sum_n Q_n(t)`` over slot starts; ``mean_queue`` is it
  over N; ``tail[i-1]``: time-average fraction of servers with at least ``i`` tasks;
- ``mean_response``: measured per task from the FIFO order (a batch of ``A`` tasks arriving
  together is one ``(slot, count)`` entry), response = completion slot - arrival slot + 1,
  credited to the window of the arrival; at the end of the run the queues are drained (served on,
  no new arrivals, which cannot change a FIFO task's completion), so no response is censored.
  ``little_response = 1 + mean_total_queue / lam_Sigma`` is Little's law for the same quantity;
- ``unused_service``: ``E[U_Sigma]``, ``U_Sigma(t) = sum_n U_n(t)`` (the identity
  ``E[U_Sigma] = eps`` is exact in steady state); ``mean_u2 = E[U_Sigma^2]``, ``mean_qu =
  E[Q_Sigma(t+1) U_Sigma(t)]`` and ``identity_gap = eps E[sum Q] - (zeta + eps^2/2 -
  E[U_Sigma^2]/2 + E[Q_Sigma(t+1) U_Sigma(t)])``, which is 0 in steady state (the drift of
  ``(sum Q)^2``), with the batch-means SE of the combination;
- ``imbalance``: ``E[||Q(t) - mean_n Q_n(t) 1||_2]``, the Euclidean norm of the deviation from
  the mean (the paper's ``||Q_perp||``, bounded as eps -> 0 under state-space collapse);
- ``eps``, ``zeta = (sigma_Sigma^2 + nu_Sigma^2) / 2`` from the laws' own variances, and
  ``ht_ratio = eps * mean_total_queue / zeta`` (-> 1 as eps -> 0 for heavy-traffic optimal
  policies);
- ``messages_per_job``: one-way messages (``sim.led``) per arriving task; ``reports_idle`` and
  ``reports_busy``: per arriving task, the servers that completed tasks in a slot and were then
  empty / not empty (a Pull run spends ``reports_idle + p_hat * reports_busy`` per task, which
  calibrates ``p_hat`` to a message budget).

Message budget: with ``msg_budget`` or ``msg_budget_pod_d`` (:func:`sim.led.model.model_spec`)
instead of ``p_hat``, Push gets its ``p_hat`` exactly; Pull's is calibrated before the main run by
:func:`calibrate_pull` (pilot runs from a stream derived from the task's seed, a fixed-point
step on ``reports_idle + p_hat * reports_busy``, clipped to [0, 1]). The result carries
``p_hat_used``, ``msg_budget_per_job`` (the target), ``messages_per_job`` (spent) with its SE,
``calib_slots`` (the pilots' slots, not in ``events_run``), ``calib_se`` and ``calibration``
(the pilots in order). ``mean_u2`` and ``mean_qu`` with their SEs are row columns too.

Status (instability rule): ``"unstable"`` if ``sum Q`` exceeded ``max_total_queue`` (the run
stops there; default ``100 * N * (1 + zeta / eps)``, a hundred times the level of mu-weighted
random routing, which any policy at least as good as it never reaches), or if the batch means of
``sum Q`` after the warm-up cut grow: the least-squares slope over the batch index is positive
with a t statistic above the one-sided ``1e-4`` quantile of Student's t (``B - 2`` degrees of
freedom) *and* the fitted rise over the kept part exceeds 20 % of the mean. Either an unstable
policy or a run much shorter than the relaxation time (see :func:`suggested_slots`); either way
the mean is not a steady-state mean. Otherwise ``"ok"``. The result says which
(``unstable_by``: ``"cap"`` or ``"drift"``) and carries the growth test's ``drift_p`` and
``drift_rise`` for every run and ``relaxation_slots`` = ``2 zeta / eps^2`` (below), so that a
flag can be weighed against the run's length; a task's ``queue_cap`` sets ``max_total_queue``.

Run length near eps = 0: in heavy traffic ``sum Q`` is close to a reflected random walk with
drift ``-eps`` and variance ``2 zeta`` per slot; its relaxation time is about ``2 zeta / eps^2``
slots, and the time average of reflected Brownian motion over ``T`` has variance
``c sigma^6 / (mu^4 T)`` with ``c = 1/2`` (Poisson equation of RBM(-1, 1): ``g' = x``,
``2 E[g(Z)(Z - 1/2)] = 1/2`` for ``Z ~ Exp(2)``), so the relative SE of ``mean_total_queue`` is
about ``2 sqrt(zeta) / (eps sqrt(T))``. :func:`suggested_slots` turns a target relative SE into
a run length (plus a warm-up of many relaxation times, most of which MSER-5 cuts). A sweep over
eps should call it per point (``events = suggested_slots(eps, zeta, rel_se)``, the constants
from :func:`sim.led.model.model_spec`). Measured (N = 4 servers of means 1, 1, 2, 2, M = 2,
L-JSQ-Pull, rho = 0.9 .. 0.99, target 3 %): the relative SE reached was 0.3 to 0.6 of the
target (1.0 % at rho = 0.9, 1.8 % at 0.98 and 0.99), so the rule is
conservative for heavy-traffic optimal policies; policies that are not (weighted random, JSQ
with herding) fluctuate more: check ``ci_method`` for correlated batches.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.core.output import batch_means, ci_label, tail_estimate, warmup_cut
from sim.core.results import result_row
from sim.core.rng import threshold
from sim.core.sampling import alias_table
from sim.core.settings import DEFAULTS as RUN_DEFAULTS
from sim.core.settings import N_WINDOWS, RunSettings, as_int
from sim.core.skeleton import Run
from sim.led.distributions import build_tables
from sim.led.model import DEFAULTS, ModelSpec, model_spec
from sim.led.policies import policy as policy_record

__all__ = ["LedResult", "Calibration", "simulate", "run_task", "suggested_slots",
           "calibrate_pull", "pilot_slots", "EXTRA_KEYS", "Trend", "trend_test"]

#: result keys this engine adds to :data:`sim.core.results.RESULT_KEYS`
EXTRA_KEYS = ("mean_total_queue", "mean_total_queue_se", "unused_service", "unused_service_se",
              "imbalance", "imbalance_se", "eps", "zeta", "ht_ratio", "ht_ratio_se", "status",
              "mean_u2", "mean_u2_se", "mean_qu", "mean_qu_se",
              "messages_per_job_se", "p_hat_used", "msg_budget_per_job", "calib_slots",
              "unstable_by", "drift_p", "drift_rise", "relaxation_slots")
#: of :data:`EXTRA_KEYS`, those that are null (not NaN) in a row where they do not apply
OPTIONAL_KEYS = ("p_hat_used", "msg_budget_per_job", "calib_slots", "unstable_by", "drift_p",
                 "drift_rise")

#: Pull calibration: at most this many pilot runs
MAX_PILOTS = 6
#: key mixed with the task's seed for the pilots' stream (the main run keeps the task's seed)
PILOT_KEY = 0x9E11

#: one-sided level of the growth test of the instability rule
TREND_ALPHA = 1e-4
#: smallest fitted rise (fraction of the mean) that the growth test calls growth
TREND_RISE = 0.2


class LedResult(NamedTuple):
    """Estimates of one slotted run (times in slots)."""

    mean_total_queue: float  #: E[sum_n Q_n(t)] at slot starts
    mean_total_queue_se: float
    mean_queue: float  #: mean_total_queue / N
    mean_queue_se: float
    mean_response: float  #: measured per task (completion - arrival + 1)
    mean_response_se: float
    little_response: float  #: 1 + mean_total_queue / lam_Sigma
    little_response_se: float
    unused_service: float  #: E[U_Sigma]
    unused_service_se: float
    mean_u2: float  #: E[U_Sigma(t)^2]
    mean_u2_se: float
    mean_qu: float  #: E[Q_Sigma(t+1) U_Sigma(t)]
    mean_qu_se: float
    identity_gap: float  #: eps E[sum Q] - zeta - eps^2/2 + E[U^2]/2 - E[Q(t+1) U(t)]
    identity_gap_se: float
    imbalance: float  #: E[||Q - mean(Q)||_2]
    imbalance_se: float
    eps: float
    zeta: float
    lam_sigma: float
    ht_ratio: float  #: eps * mean_total_queue / zeta
    ht_ratio_se: float
    arrivals_per_slot: float  #: measured A_Sigma per slot (kept windows)
    tail: np.ndarray
    tail_se: np.ndarray
    messages_per_job: float
    messages_per_slot: float
    decisions_per_job: float  #: dispatchers with arrivals per slot, per task
    reports_idle: float  #: per task: servers that completed tasks and were then empty
    reports_busy: float  #: per task: servers that completed tasks and were then not empty
    n_jobs: int
    events_run: int  #: slots run (warm-up included)
    sim_time: float  #: = events_run
    warmup_time: float  #: slots cut by MSER-5
    warmup_windows: int
    n_windows: int
    n_batches: int
    ci_method: str
    status: str  #: "ok" or "unstable"
    estimate_mismatches: int  #: debug runs: slots with some estimate != true queue (else -1)
    jba_fallbacks: float = 0.0  #: L-JBA: fraction of decisions (whole run) drawn by the O(N) pass
    messages_per_job_se: float = float("nan")  #: batch-means SE of messages_per_job
    p_hat_used: float = float("nan")  #: LED policies: the p_hat of the run (calibrated or given)
    msg_budget_per_job: float = float("nan")  #: the message budget per task, if one was given
    calib_slots: int = 0  #: slots of the Pull calibration's pilot runs (not in events_run)
    calib_se: float = float("nan")  #: SE of the last pilot's messages per task
    calibration: str = ""  #: the pilots, "p_hat -> messages per task (SE)", in order
    #: debug runs of ``jsq``/``pod``: slots with decisions of two or more dispatchers in which
    #: they did not all pick the same server (0 for ``jsq`` with ``ties="shared"``); else -1
    herd_splits: int = -1
    #: evidence of the status: ``"cap"`` (sum Q passed ``max_total_queue``; the run stopped),
    #: ``"drift"`` (the growth test fired) or ``""`` (status ok)
    unstable_by: str = ""
    drift_p: float = float("nan")  #: one-sided p-value of the growth test's slope (NaN: not run)
    drift_rise: float = float("nan")  #: the growth test's fitted rise over the kept part / mean
    #: ``2 zeta / eps^2``: the relaxation time of sum Q in heavy traffic under state-space
    #: collapse (module docstring); ``events_run / relaxation_slots`` is the run in those units
    relaxation_slots: float = float("nan")


class Calibration(NamedTuple):
    """Outcome of :func:`calibrate_pull`."""

    p_hat: float  #: the p_hat for the main run, in [0, 1]
    budget: float  #: the target, one-way messages per arriving task
    pilots: tuple  #: ``(p_hat, messages per task, its SE, idle reports, busy reports)`` per pilot
    slots: int  #: slots run by the pilots
    se: float  #: SE of the last pilot's messages per task
    clipped: str  #: ``""``, ``"1"`` (budget above what p_hat = 1 spends) or ``"0"`` (below the
    #: mandatory idle reports)


def pilot_slots(events: int) -> int:
    """Slots of one calibration pilot: ``events // 16``, at least ``min(events, 2**15)``."""
    return int(max(min(events, 2**15), events // 16))


def calibrate_pull(spec: ModelSpec, events: int, seed: int, n_batches: int = RUN_DEFAULTS.n_batches,
                   n_windows: int = N_WINDOWS, max_level: int = RUN_DEFAULTS.max_level, cap=None,
                   pilot_events=None) -> Calibration:
    """The ``p_hat`` at which Pull spends ``spec.budget`` one-way messages per arriving task.

    Pull spends, per task, ``I(p) + p B(p)``: the mandatory reports of servers that became
    empty (``reports_idle``) plus ``p_hat`` times the servers that completed tasks and were then
    not empty (``reports_busy``), both functions of ``p_hat`` through the queue dynamics.
    Pilot runs of :func:`pilot_slots` slots (or ``pilot_events``), each from empty queues and
    from one stream derived from ``seed`` (the same for every pilot: common random numbers, so
    the measured curve is smooth in ``p_hat``), with the MSER-5 cut of the main runs:

    1. a pilot at ``p_hat = 1``; if it spends at most the budget, ``p_hat = 1`` (clipped: the
       budget cannot be spent);
    2. else the fixed-point step ``p <- clip((budget - I(p)) / B(p), 0, 1)`` on the last pilot's
       ``I`` and ``B``, then a pilot at the new ``p``; until ``p`` moves by at most
       ``max(0.001, 1 % of p)`` or the pilot is within one SE of the budget (the step is still
       taken), at most :data:`MAX_PILOTS` pilots. At ``p = 0`` the step stays at 0 when the
       mandatory idle reports alone exceed the budget (clipped to 0).

    A pilot whose queues exceeded the bound (too little information to be stable) moves ``p``
    halfway to 1. Deterministic for a seed; the main run keeps the task's own seed."""
    if spec.budget is None or spec.update != "pull":
        raise ValueError("calibrate_pull needs a Pull LED spec with a message budget")
    budget = float(spec.budget)
    n_ev = pilot_slots(events) if pilot_events is None else int(pilot_events)
    n_win = min(int(n_windows), n_ev)
    if cap is None:
        cap = _default_cap(spec)
    words = np.random.SeedSequence([int(seed), PILOT_KEY]).generate_state(2, dtype=np.uint32)
    pseed = int(words[0]) << 32 | int(words[1])
    p = 1.0
    pilots, slots, se, clipped = [], 0, float("nan"), ""
    for k in range(MAX_PILOTS):
        pilot = Run(events=n_ev, seed=pseed, init="empty", n_batches=n_batches,
                    max_level=max_level, n_windows=n_win)
        r = _run(spec._replace(p_hat=p), pilot, cap, False)
        slots += int(r.events_run)
        msg = r.messages_per_job
        if not math.isfinite(msg):
            pilots.append((p, msg, float("nan"), float("nan"), float("nan")))
            if p >= 1.0:
                break
            p = 0.5 * (p + 1.0)
            continue
        se = r.messages_per_job_se
        idle, busy = r.reports_idle, r.reports_busy
        pilots.append((p, msg, se, idle, busy))
        if k == 0 and msg <= budget:
            clipped = "1"
            break
        if busy > 0:
            p_new = (budget - idle) / busy
        else:
            p_new = 1.0 if budget > idle else 0.0
        p_new = float(min(max(p_new, 0.0), 1.0))
        done = abs(p_new - p) <= max(1e-3, 0.01 * p) or abs(msg - budget) <= se
        p = p_new
        if done:
            break
    if p == 0.0 and not clipped:
        clipped = "0"
    return Calibration(p_hat=p, budget=budget, pilots=tuple(pilots), slots=slots, se=se,
                       clipped=clipped)


def suggested_slots(eps: float, zeta: float, rel_se: float = 0.05, *,
                    warmup_relaxations: float = 20.0, minimum: int = 10**5) -> int:
    """Slots for a relative SE ``rel_se`` of ``mean_total_queue`` in heavy traffic.

    ``T = 4 zeta / (rel_se^2 eps^2)`` for the kept part (module docstring: reflected Brownian
    motion with drift ``-eps`` and variance ``2 zeta``) plus ``warmup_relaxations`` relaxation
    times ``2 zeta / eps^2`` (runs start empty, and MSER-5 may cut up to half), doubled so that
    the kept part is at least the target after a cut of up to half; at least ``minimum``.
    For a policy that is heavy-traffic optimal; others need more."""
    if not eps > 0 or not zeta > 0 or not rel_se > 0:
        raise ValueError(f"eps={eps!r}, zeta={zeta!r}, rel_se={rel_se!r} must all be > 0")
    keep = 4.0 * zeta / (rel_se * rel_se * eps * eps)
    warm = warmup_relaxations * 2.0 * zeta / (eps * eps)
    return int(max(minimum, math.ceil(2.0 * keep + warm)))


class Trend(NamedTuple):
    """The growth test of the instability rule (module docstring) on a run's batch means."""

    unstable: bool  #: p < TREND_ALPHA and rise > TREND_RISE
    p: float  #: one-sided p-value of a positive slope (NaN if the test could not run)
    rise: float  #: fitted rise over the kept part, as a fraction of the mean


def trend_test(batch_values) -> Trend:
    """The growth test of the instability rule (module docstring): least-squares slope of the
    batch means over their index, its one-sided p-value (Student's t, ``B - 2`` degrees of
    freedom) and the fitted rise over the kept part relative to the mean."""
    from scipy import stats

    nan = float("nan")
    y = np.asarray(batch_values, dtype=np.float64)
    if y.size < 4 or not np.all(np.isfinite(y)):
        return Trend(False, nan, nan)
    x = np.arange(y.size, dtype=np.float64)
    x -= x.mean()
    slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    resid = y - y.mean() - slope * x
    s2 = float((resid * resid).sum() / (y.size - 2))
    mean = float(y.mean())
    rise = slope * (y.size - 1) / mean if mean > 0 else nan
    se = math.sqrt(s2 / float((x * x).sum())) if s2 > 0 else 0.0
    if se > 0:
        p = float(stats.t.sf(slope / se, y.size - 2))
    else:
        p = 0.0 if slope > 0 else 1.0
    return Trend(bool(p < TREND_ALPHA and mean > 0 and rise > TREND_RISE), p, rise)


def simulate(service_rates, lam, policy, m_dispatchers=1, *, update=None, p_hat=None,
             d_u=None, d=None, count_own=False, arrival_dist="poisson", arrival_n=None,
             service_dist="poisson", service_n=None, dispatch_weights=None,
             events: int = 10**6, seed: int = RUN_DEFAULTS.seed, n_batches: int = RUN_DEFAULTS.n_batches, n_windows: int = N_WINDOWS,
             max_level: int = RUN_DEFAULTS.max_level, max_total_queue=None, n_servers=None,
             debug: bool = False, msg_budget=None, msg_budget_pod_d=None,
             pilot_events=None, ties=None) -> LedResult:
    """Simulate the slotted LED engine; batch-means estimates after an MSER-5 warm-up cut.

    Parameters
    ----------
    service_rates : list of float, or None
        ``mu_n``, the service mean per slot of each server (> 0); None means all 1, and then
        ``n_servers`` gives N.
    lam : float
        The load ``rho = lam_Sigma / mu_Sigma`` in [0, 1).
    policy : str
        ``l_jsq``, ``l_jba``, ``l_pod`` (LED), ``jsq``, ``pod``, ``jiq``, ``random``,
        ``weighted_random``.
    m_dispatchers : int
        M >= 1.
    update, p_hat, d_u, count_own :
        LED policies: ``"push"`` or ``"pull"`` (default pull), the report/update probability
        (default 1), Push's sample size (default 1), whether a dispatcher adds its own tasks to
        its estimate (default False, as the paper).
    d : int
        ``l_pod``/``pod``: servers sampled per decision (default 2).
    arrival_dist, arrival_n, service_dist, service_n :
        Laws by name (:mod:`sim.led.distributions`); ``*_n`` the binomial's trials.
    dispatch_weights : list of float or None
        Split of ``lam_Sigma`` over the dispatchers (> 0); None: equal.
    events : int
        Slots, warm-up included (>= n_windows).
    seed, n_batches, n_windows, max_level :
        As in the other engines.
    max_total_queue : int or None
        Stop (status ``unstable``) when ``sum Q`` exceeds it; None: ``100 N (1 + zeta/eps)``.
    debug : bool
        LED policies: count the slots at whose start some estimate differs from its queue
        (``estimate_mismatches``; an O(M N) check per slot). ``jsq``, ``pod``: count the slots
        in which the dispatchers with arrivals did not all pick one server (``herd_splits``).
    msg_budget, msg_budget_pod_d : float or int, optional
        LED policies, instead of ``p_hat``: a message budget, one-way messages per arriving task
        or Power-of-d's with that d (:func:`sim.led.model.model_spec`). Push: ``p_hat`` exact;
        Pull: calibrated by :func:`calibrate_pull` before the main run.
    pilot_events : int, optional
        Slots per calibration pilot (default :func:`pilot_slots`).
    ties : str, optional
        ``jsq``, ``pod``: the tie rule (:data:`sim.led.model.TIES`). ``"independent"`` (default):
        each dispatcher breaks ties among the shortest true queues by a draw of its own.
        ``"shared"``: one draw per slot is shared by every dispatcher: JSQ sends every
        dispatcher's arrivals of the slot to the same one of the shortest queues (the paper's
        "single shortest queue"); Power-of-d breaks ties among its own sample by a random order
        of the servers that the shared draw defines. Ignored by the other policies.

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter, before any compute.
    """
    if service_rates is None:
        if n_servers is None:
            raise ValueError("service_rates=None needs n_servers (all service means 1)")
        n = n_servers
    else:
        n = len(service_rates) if n_servers is None else n_servers
    spec = model_spec(n, lam, policy, m_dispatchers, update=update, p_hat=p_hat, d_u=d_u, d=d,
                      count_own=count_own, arrival_dist=arrival_dist, arrival_n=arrival_n,
                      service_dist=service_dist, service_n=service_n,
                      service_rates=service_rates, dispatch_weights=dispatch_weights,
                      msg_budget=msg_budget, msg_budget_pod_d=msg_budget_pod_d, ties=ties)
    if pilot_events is not None and (not isinstance(pilot_events, (int, np.integer))
                                     or pilot_events < 1):
        raise ValueError(f"pilot_events={pilot_events!r} must be an integer >= 1")
    run = Run(events=events, seed=seed, init="empty", n_batches=n_batches, max_level=max_level,
              n_windows=n_windows)
    if max_total_queue is None:
        cap = _default_cap(spec)
    else:
        if not isinstance(max_total_queue, (int, np.integer)) or max_total_queue < 1:
            raise ValueError(f"max_total_queue={max_total_queue!r} must be an integer >= 1")
        cap = int(max_total_queue)
    cal = None
    if spec.budget is not None and spec.update == "pull":
        cal = calibrate_pull(spec, run.events, run.seed, run.n_batches, int(n_windows),
                             run.max_level, cap, pilot_events)
        spec = spec._replace(p_hat=cal.p_hat)
    res = _run(spec, run, cap, bool(debug))
    if spec.update is not None:  # an LED policy
        res = res._replace(p_hat_used=spec.p_hat)
    if spec.budget is not None:
        res = res._replace(msg_budget_per_job=spec.budget)
    if cal is not None:
        text = "; ".join(f"{p:.4g} -> {m:.4g} ({e:.2g})" for p, m, e, _, _ in cal.pilots)
        res = res._replace(calib_slots=cal.slots, calib_se=cal.se,
                           calibration=text + (f"; clipped to {cal.clipped}" if cal.clipped
                                               else ""))
    return res


def _default_cap(spec: ModelSpec) -> int:
    ratio = spec.zeta / spec.eps if spec.eps > 0 else 0.0
    return int(min(2**30, max(10**4, 100.0 * spec.n_servers * (1.0 + ratio))))


def _run(spec: ModelSpec, run: Run, cap, debug):
    """The slotted kernel on ``run``'s windows and seed (:class:`sim.core.skeleton.Run`), then
    its own epilogue, :func:`_analyse`."""
    from sim.led import _slotted_kernel as K

    n_servers = spec.n_servers
    # laws: each distinct law once; per dispatcher / server an index
    laws, index = [], {}
    def law_id(law):
        if law not in index:
            index[law] = len(laws)
            laws.append(law)
        return index[law]
    arr_law = np.array([law_id(x) for x in spec.arrival_laws], dtype=np.int64)
    srv_law = np.array([law_id(x) for x in spec.service_laws], dtype=np.int64)
    tables = build_tables(laws)
    mu = spec.mu
    hetero = bool(np.any(mu != mu[0]))
    pol = policy_record(spec.policy)
    code = pol.code
    upd = K.UPDATE_CODES[spec.update] if spec.update is not None else 0
    if pol.draws_by_rate and hetero:
        alias_thr, alias_idx = alias_table(mu / mu.sum())
    elif pol.blind_by_rate:  # equal means: uniform
        alias_thr = np.full(n_servers, threshold(1.0), dtype=np.uint64)
        alias_idx = np.arange(n_servers, dtype=np.int64)
    else:
        alias_thr = np.zeros(1, dtype=np.uint64)
        alias_idx = np.zeros(1, dtype=np.int64)
    out = {k: run.zeros() for k in
           ("w_q", "w_u", "w_arr", "w_dec", "w_msg", "w_idle", "w_busy", "w_jobs", "w_resp")}
    for k in ("w_imb", "w_u2", "w_qu"):
        out[k] = run.zeros(float)
    # slot-start histograms of the queue lengths: one row per window and one for the last slot
    out["w_hist"] = np.zeros((run.n_win + 1, run.max_level + 1), dtype=np.int64)
    slots, capped, mismatches, fallbacks, splits = K.slotted_kernel(
        code, upd, d=spec.d, d_u=spec.d_u, p_thr=threshold(spec.p_hat),
        count_own=spec.count_own, hetero=hetero, debug=debug, q_cap=cap, max_level=run.max_level,
        tables=tables, arr_law=arr_law, srv_law=srv_law, alias_thr=alias_thr,
        alias_idx=alias_idx, mu=mu, bounds=run.bounds, state=run.xoshiro(), out=out,
        ties=K.TIE_CODES[spec.ties])
    mism = mismatches if (debug and pol.local) else -1
    res = _analyse(spec, out, run, slots, capped, mism)
    dec = float(out["w_dec"].sum())
    herd = splits if (debug and pol.ties) else -1
    return res._replace(jba_fallbacks=fallbacks / dec if dec > 0 else 0.0, herd_splits=herd)


def _analyse(spec: ModelSpec, out, run: Run, slots, capped, mism):
    """The slotted engine's own epilogue. Not :meth:`sim.core.skeleton.Run.epilogue`: its
    queue estimate is the total queue (``mean_queue`` that over N, the heavy-traffic ratio and
    the trend test follow it, and so does the CI label), its standard errors are batch means of
    ``n_batches`` batches after the MSER-5 cut whatever ``se_method`` (the run setting is not
    this engine's), a run stopped at its queue bound has no estimate at all, and the tail comes
    from slot-start histograms; the shared epilogue would change every one of these numbers."""
    n_servers, bounds, n_batches, max_level = spec.n_servers, run.bounds, run.n_batches, run.max_level
    eps, zeta, lam_sigma = spec.eps, spec.zeta, spec.lam_sigma
    n_win = bounds.size - 1
    nan = float("nan")
    lengths = np.diff(bounds).astype(np.float64)
    if capped:  # no steady state to report: every estimate NaN
        fields = dict.fromkeys(LedResult._fields, nan)
        fields.update(
            eps=eps, zeta=zeta, lam_sigma=lam_sigma, tail=np.full(max_level, nan),
            tail_se=np.full(max_level, nan), n_jobs=0, events_run=int(slots),
            sim_time=float(slots), warmup_time=0.0, warmup_windows=0, n_windows=int(n_win),
            n_batches=int(n_batches), status="unstable", estimate_mismatches=int(mism),
            ci_method=f"none: the run stopped at slot {slots}, sum Q above its bound",
            jba_fallbacks=0.0, calib_slots=0, calibration="", unstable_by="cap",
            relaxation_slots=_relaxation(eps, zeta))
        return LedResult(**fields)
    cut = warmup_cut(out["w_q"], lengths, n_servers, n_batches)
    keep = slice(cut, n_win)
    ln = lengths[keep]
    tq = batch_means(out["w_q"][keep], ln, n_batches)
    resp = batch_means(out["w_resp"][keep], out["w_jobs"][keep], n_batches)
    unused = batch_means(out["w_u"][keep], ln, n_batches)
    u2 = batch_means(out["w_u2"][keep], ln, n_batches)
    qu = batch_means(out["w_qu"][keep], ln, n_batches)
    gap_w = (eps * out["w_q"][keep] - (zeta + 0.5 * eps * eps) * ln + 0.5 * out["w_u2"][keep]
             - out["w_qu"][keep])
    gap = batch_means(gap_w, ln, n_batches)
    imb = batch_means(out["w_imb"][keep], ln, n_batches)
    arr = batch_means(out["w_arr"][keep], ln, n_batches)
    hist = out["w_hist"][:n_win][keep].astype(np.float64)
    # tail[w, i-1] = slot-start area of servers with >= i tasks, i = 1..max_level
    w_tail = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, 1:]
    tail, tail_se = tail_estimate(w_tail, ln, n_servers, n_batches)
    n_arr = float(out["w_arr"][keep].sum())
    n_slots = float(ln.sum())
    msgs = float(out["w_msg"][keep].sum())
    msg_bm = batch_means(out["w_msg"][keep], out["w_arr"][keep], n_batches)
    per_job = msgs / n_arr if n_arr > 0 else nan
    idle = float(out["w_idle"][keep].sum()) / n_arr if n_arr > 0 else nan
    busy = float(out["w_busy"][keep].sum()) / n_arr if n_arr > 0 else nan
    little = 1.0 + tq.estimate / lam_sigma if lam_sigma > 0 else nan
    little_se = tq.se / lam_sigma if lam_sigma > 0 else nan
    ratio = eps * tq.estimate / zeta if zeta > 0 else nan
    ratio_se = eps * tq.se / zeta if zeta > 0 else nan
    trend = trend_test(tq.batch_values)
    status = "unstable" if trend.unstable else "ok"
    return LedResult(
        mean_total_queue=tq.estimate, mean_total_queue_se=tq.se,
        mean_queue=tq.estimate / n_servers, mean_queue_se=tq.se / n_servers,
        mean_response=resp.estimate, mean_response_se=resp.se,
        little_response=little, little_response_se=little_se,
        unused_service=unused.estimate, unused_service_se=unused.se,
        mean_u2=u2.estimate, mean_u2_se=u2.se, mean_qu=qu.estimate, mean_qu_se=qu.se,
        identity_gap=gap.estimate, identity_gap_se=gap.se,
        imbalance=imb.estimate, imbalance_se=imb.se, eps=eps, zeta=zeta, lam_sigma=lam_sigma,
        ht_ratio=ratio, ht_ratio_se=ratio_se, arrivals_per_slot=arr.estimate,
        tail=tail, tail_se=tail_se, messages_per_job=per_job,
        messages_per_slot=msgs / n_slots,
        decisions_per_job=float(out["w_dec"][keep].sum()) / n_arr if n_arr > 0 else nan,
        reports_idle=idle, reports_busy=busy,
        n_jobs=int(out["w_jobs"][keep].sum()), events_run=int(slots), sim_time=float(slots),
        warmup_time=float(bounds[cut]), warmup_windows=int(cut), n_windows=int(n_win),
        n_batches=int(n_batches), ci_method=ci_label(n_batches, tq.batch_values),
        status=status, estimate_mismatches=int(mism), messages_per_job_se=msg_bm.se,
        unstable_by="drift" if trend.unstable else "", drift_p=trend.p, drift_rise=trend.rise,
        relaxation_slots=_relaxation(eps, zeta))


def _relaxation(eps: float, zeta: float) -> float:
    return 2.0 * zeta / (eps * eps) if eps > 0 else float("inf")


def run_task(task: dict) -> dict:
    """Run one slotted task (keys as in docs/results-schema.md) and return the row: the keys
    of :data:`sim.core.results.RESULT_KEYS` plus :data:`EXTRA_KEYS`, plain Python values."""
    def get(key):
        v = task.get(key)
        return DEFAULTS.get(key) if v is None else v

    settings = RunSettings.from_task(task)
    rates = task.get("service_rates")
    res = simulate(
        rates, task["lam"], task["policy"], as_int(get("m_dispatchers")),
        update=task.get("update"), p_hat=task.get("p_hat"), d_u=as_int(task.get("d_u")),
        d=as_int(task.get("d")), count_own=task.get("count_own"),
        arrival_dist=get("arrival_dist"), arrival_n=as_int(task.get("arrival_n")),
        service_dist=get("service_dist"), service_n=as_int(task.get("service_n")),
        dispatch_weights=task.get("dispatch_weights"), msg_budget=task.get("msg_budget"),
        msg_budget_pod_d=as_int(task.get("msg_budget_pod_d")), ties=task.get("ties"),
        events=as_int(task["events"]), max_total_queue=as_int(task.get("queue_cap")),
        seed=settings.seed, n_batches=settings.n_batches, max_level=settings.max_level,
        n_servers=as_int(task["n_servers"]))
    row = result_row(
        res, mean_wait=res.mean_response - 1.0, mean_wait_se=res.mean_response_se,
        prob_wait=None, prob_wait_se=None, queueing_ratio=None, queueing_ratio_se=None,
        drop_prob=0.0, drop_prob_se=0.0, frac_within_h=None)
    for key in EXTRA_KEYS:
        v = getattr(res, key)
        if key in OPTIONAL_KEYS:
            if key == "unstable_by":
                row[key] = v or None
                continue
            applies = (res.calib_slots > 0 if key == "calib_slots"
                       else math.isfinite(float(v)))
            row[key] = (int(v) if key == "calib_slots" else float(v)) if applies else None
        else:
            row[key] = v if isinstance(v, str) else float(v)
    return row
