"""Simulators and engine entry points of partial centralization (model: :mod:`sim.centralization`).

:func:`simulate_agent` (one entry per station, FIFO ring buffers, response times measured per
task) and :func:`simulate_occupancy` (counts of stations per queue length only; cost per event
independent of N) share the conventions of :mod:`sim.dispatch.agent`: uniformization at total rate
``N (1 + lam)`` (an event is an arrival w.p. ``lam/(1+lam)``, a local tick w.p.
``(1-p)/(1+lam)``, a central tick w.p. ``p/(1+lam)``), a deterministic clock of ``1/R`` per event
(all means unchanged, see :mod:`sim.dispatch.agent`), windows of ``2**k`` events, MSER-5 on the per-window
mean queue length, batch means, xoshiro256+ seeded by ``numpy.random.SeedSequence(seed)``.

* Agent engine, end of run: with the central server chasing the longest queues the remaining
  time of a task still present is *not* a Gamma of its position (that correction,
  :func:`sim.core.fifo.close_censored`, is used only for ``p = 0``, where it is exact with
  rate ``1 - p = 1``). For ``p > 0`` the run is followed by a *drain*: the same dynamics
  (arrivals included, new tasks untracked) run on until every task that arrived during the run has
  left, each credited to the window it arrived in. This is exact (the censored tasks get their
  true responses), costs tens of time units of events (see :func:`simulate_agent`), and those
  events are counted in ``events_run`` (``sim_time`` remains the horizon of the time averages).
* Occupancy engine: no task identities, so the mean response is ``v_1 / lam`` (Little's law,
  with the exact arrival rate), its standard error ``se(v_1) / lam``.

Both report ``prob_wait`` (fraction of tasks that find their station non-empty), ``frac_within_h``
(fraction of tasks arriving to a queue of fewer than ``h`` tasks), ``queueing_ratio = None``
(no service-time baseline here), ``drop_prob = 0``, ``messages_per_job = 0`` (no dispatching:
each task joins its own station; the central server's knowledge of the longest queue is not a
per-task probe and is not counted).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.centralization.theory import (
    _check_int, _check_lam, _check_p, invariant_mean_queue, invariant_mean_response, invariant_tail,
)
from sim.core.buckets import build_buckets
from sim.core.fifo import close_censored, draw_initial_queues, grow_rings
from sim.core.output import batch_means, ci_label, tail_estimate, warmup_cut
from sim.core.results import RESULT_KEYS, check_run_args, result_row
from sim.core.rng import seed_state, threshold
from sim.core.windows import window_bounds, window_shift

__all__ = ["CentralResult", "simulate_agent", "simulate_occupancy", "run_agent_task",
           "run_occupancy_task", "run_meanfield_task"]

CI_METHOD_MF = "closed form (fluid invariant state, Tsitsiklis-Xu Theorem 2)"


# ---------------------------------------------------------------------------------------------
# simulators


class CentralResult(NamedTuple):
    """Estimates of one simulation run (times in the model's time unit)."""

    mean_response: float  #: agent: measured per task; occupancy: v_1 / lam (Little)
    mean_response_se: float
    prob_wait: float  #: fraction of tasks that find their station non-empty
    prob_wait_se: float
    frac_within_h: float  #: fraction of tasks arriving to a queue of fewer than h tasks
    frac_within_h_se: float  #: its batch-means SE (not a result column; for tests)
    mean_queue: float  #: v_1, time-average tasks per station
    mean_queue_se: float
    tail: np.ndarray  #: tail[i-1] = s_i, time average, i = 1..max_level
    tail_se: np.ndarray  #: batch-means standard errors of ``tail``
    n_jobs: int  #: tasks measured after the warm-up cut (occupancy: arrivals counted)
    events_run: int  #: events simulated, drain included
    drain_events: int  #: agent, p > 0: events run after the end to finish the measured tasks
    sim_time: float  #: horizon of the time averages (warm-up included, drain excluded)
    warmup_time: float
    warmup_windows: int
    n_windows: int
    n_batches: int
    ci_method: str


def _check_sim_args(n_servers, lam, p, events, seed, init, n_batches, max_level, h, n_windows):
    n_servers = _check_int("n_servers", n_servers, 1, 2**31 - 1)
    lam, p = _check_lam(lam), _check_p(p)
    check_run_args(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
                   n_windows=n_windows)
    h = _check_int("h", h, 1)
    return (n_servers, lam, p, int(events), int(seed), int(n_batches), int(max_level), h,
            int(n_windows))


def _thresholds(lam: float, p: float):
    """Raw-draw thresholds of an arrival and of an arrival-or-local tick; central flag."""
    thr_arrival = threshold(lam / (1.0 + lam))
    thr_local = threshold((lam + 1.0 - p) / (1.0 + lam))
    return thr_arrival, thr_local, p > 0.0


def _init_tail(lam: float, p: float) -> np.ndarray:
    """Invariant tail cut where it drops below 1e-17 (for drawing initial queues)."""
    if lam <= p:
        return np.zeros(0)
    if p == 0.0:
        levels = max(1, int(math.ceil(math.log(1e-17) / math.log(lam))))
        return invariant_tail(lam, p, levels)
    return invariant_tail(lam, p)


def _summarize(bounds, n_servers, lam, rate, n_batches, w_arr, w_waited, w_within, w_qarea, w_tail,
               resp_num=None, resp_den=None):
    """MSER-5 cut on the per-window mean queue length, then batch means of every estimate."""
    n_windows = bounds.size - 1
    lengths = np.diff(bounds).astype(np.float64)
    cut = warmup_cut(w_qarea, lengths, n_servers, n_batches)
    keep = slice(cut, n_windows)
    dt = 1.0 / rate
    queue = batch_means(w_qarea[keep], lengths[keep] * n_servers, n_batches)
    if resp_num is not None:
        resp = batch_means(resp_num[keep] * dt, resp_den[keep], n_batches)
        r_est, r_se, r_batches = resp.estimate, resp.se, resp.batch_values
        n_jobs = int(resp_den[keep].sum())
    else:  # Little's law: mean response = v_1 / lam
        if lam > 0:
            r_est, r_se, r_batches = queue.estimate / lam, queue.se / lam, queue.batch_values / lam
        else:
            r_est, r_se, r_batches = math.nan, math.nan, queue.batch_values
        n_jobs = int(w_arr[keep].sum())
    pwait = batch_means(w_waited[keep], w_arr[keep], n_batches)
    within = batch_means(w_within[keep], w_arr[keep], n_batches)
    tail, tail_se = tail_estimate(w_tail[keep], lengths[keep], n_servers, n_batches)
    return dict(mean_response=float(r_est), mean_response_se=float(r_se),
                prob_wait=float(pwait.estimate), prob_wait_se=float(pwait.se),
                frac_within_h=float(within.estimate), frac_within_h_se=float(within.se),
                mean_queue=float(queue.estimate),
                mean_queue_se=float(queue.se), tail=tail, tail_se=tail_se, n_jobs=n_jobs,
                warmup_time=float(bounds[cut]) * dt, warmup_windows=int(cut),
                n_windows=int(n_windows), n_batches=int(n_batches),
                ci_method=ci_label(n_batches, r_batches))


def simulate_agent(n_servers: int, lam: float, p: float, events: int = 10**6, seed: int = 0,
                   init: str = "meanfield", n_batches: int = 20, max_level: int = 64, h: int = 1,
                   *, n_windows: int = 1000, max_drain_events: int | None = None) -> CentralResult:
    """Agent simulation of the partially centralized system (one entry per station).

    Response times are measured per task from FIFO ring buffers and credited to the window of
    the task's arrival. End of run: ``p = 0`` -- the exact expected remaining time of each task
    still present (Gamma of its position at rate 1, :func:`sim.core.fifo.close_censored`);
    ``p > 0`` -- a drain phase (module docstring), at most ``max_drain_events`` (default:
    ``events``) events, after which any task still present is credited with its elapsed time plus
    the local-service bound ``(position)/(1 - p)`` (never reached in our runs; reported in
    ``ci_method`` if it is). Measured drain cost: 0.02-0.2% of the events at N = 1000
    (30 000 time units), 4.7% at N = 10^5 with 10^8 events (25 time units).
    ``init="meanfield"`` draws the queues i.i.d. from the invariant tail. Memory: ``8 N C`` bytes of ring buffers, ``C`` a power of two above the longest queue.
    """
    n_servers, lam, p, events, seed, n_batches, max_level, h, n_windows = _check_sim_args(
        n_servers, lam, p, events, seed, init, n_batches, max_level, h, n_windows)
    from sim.centralization import _kernel as K

    rate = n_servers * (1.0 + lam)
    thr_arrival, thr_local, central = _thresholds(lam, p)
    state = seed_state(seed)
    if init == "meanfield":
        q = draw_initial_queues(_init_tail(lam, p), n_servers, state)
    else:
        q = np.zeros(n_servers, dtype=np.int64)
    cap = 8
    while cap <= int(q.max()):
        cap *= 2
    buf = np.full((n_servers, cap), np.nan)
    head = np.zeros(n_servers, dtype=np.int64)
    levels = cap + 2
    cnt = np.zeros(levels, dtype=np.int64)
    hist = np.bincount(q, minlength=levels)[:levels]
    cnt[1:] = n_servers - np.cumsum(hist)[:-1]
    acc = np.zeros(levels, dtype=np.int64)
    perm, pos, start = build_buckets(q, levels)
    top_ref = np.array([int(q.max())], dtype=np.int64)
    bounds = window_bounds(events, n_windows)
    nw = bounds.size - 1
    w_jobs = np.zeros(nw, dtype=np.int64)
    w_resp = np.zeros(nw)
    w_arr = np.zeros(nw, dtype=np.int64)
    w_waited = np.zeros(nw, dtype=np.int64)
    w_within = np.zeros(nw, dtype=np.int64)
    w_qarea = np.zeros(nw, dtype=np.int64)
    w_tail = np.zeros((nw, max_level), dtype=np.int64)

    w, e = 0, 0
    while True:
        w, e = K.agent_span(thr_arrival, thr_local, central, h, q, buf, head, cnt, acc, perm, pos,
                            start, top_ref, bounds, state, w, e, w_jobs, w_resp, w_arr, w_waited,
                            w_within, w_qarea, w_tail)
        if w >= nw:
            break
        buf, cnt, acc, start = grow_rings(q, buf, head, cnt, acc, start)

    drain_events, note = 0, ""
    if p == 0.0:
        close_censored(q, buf, head, np.full(n_servers, 1.0 - p), rate, bounds, w_jobs, w_resp,
                         np.zeros(nw, dtype=np.int64), np.zeros(nw))
    else:
        remaining = int(K.count_tracked(q, buf, head))
        limit = events + (events if max_drain_events is None else int(max_drain_events))
        shift = int(window_shift(bounds))
        e = events
        while remaining > 0 and e < limit:
            remaining, e, full = K.drain_span(thr_arrival, thr_local, central, q, buf, head, cnt,
                                              perm, pos, start, top_ref, shift, state, e,
                                              remaining, limit, w_jobs, w_resp)
            if full:
                buf, cnt, acc, start = grow_rings(q, buf, head, cnt, acc, start)
        drain_events = e - events
        if remaining > 0:  # fallback, see docstring
            mu = np.full(n_servers, 1.0 - p if p < 1.0 else 1.0)
            close_censored(q, buf, head, mu, rate, bounds, w_jobs, w_resp,
                             np.zeros(nw, dtype=np.int64), np.zeros(nw))
            note = f"; drain stopped with {remaining} tasks (credited with local-service bound)"

    out = _summarize(bounds, n_servers, lam, rate, n_batches, w_arr, w_waited, w_within, w_qarea,
                     w_tail, resp_num=w_resp, resp_den=w_jobs)
    out["ci_method"] += note
    return CentralResult(events_run=int(events + drain_events), drain_events=int(drain_events),
                         sim_time=events / rate, **out)


def simulate_occupancy(n_servers: int, lam: float, p: float, events: int = 10**6, seed: int = 0,
                       init: str = "meanfield", n_batches: int = 20, max_level: int = 64,
                       h: int = 1, *, n_windows: int = 1000) -> CentralResult:
    """Occupancy simulation: the counts of stations per queue length only (O(log top) per event,
    memory O(top), independent of N). The mean response is ``v_1 / lam`` (Little's law);
    ``n_jobs`` counts the arrivals after the warm-up cut. ``init="meanfield"``: the initial counts
    are multinomial over the invariant law ``P(Q = i) = s_i - s_{i+1}`` (a numpy ``Generator``
    on a child of the task's ``SeedSequence``)."""
    n_servers, lam, p, events, seed, n_batches, max_level, h, n_windows = _check_sim_args(
        n_servers, lam, p, events, seed, init, n_batches, max_level, h, n_windows)
    from sim.centralization import _kernel as K

    rate = n_servers * (1.0 + lam)
    thr_arrival, thr_local, central = _thresholds(lam, p)
    ss = np.random.SeedSequence(seed)
    state = ss.generate_state(4, dtype=np.uint64)
    levels = 64
    if init == "meanfield":
        tail = _init_tail(lam, p)
        pmf = -np.diff(np.concatenate([[1.0], tail, [0.0]]))
        pmf = np.clip(pmf, 0.0, None)
        rng = np.random.Generator(np.random.PCG64(ss.spawn(1)[0]))
        counts = rng.multinomial(n_servers, pmf / pmf.sum())  # stations with exactly i tasks
        top = int(np.nonzero(counts)[0].max())
        while levels < top + 3:
            levels *= 2
        cnt = np.zeros(levels, dtype=np.int64)
        counts = counts[: top + 1]
        cnt[: top + 1] = n_servers - np.concatenate([[0], np.cumsum(counts)[:-1]])
    else:
        top = 0
        cnt = np.zeros(levels, dtype=np.int64)
        cnt[0] = n_servers
    acc = np.zeros(levels, dtype=np.int64)
    top_ref = np.array([top], dtype=np.int64)
    bounds = window_bounds(events, n_windows)
    nw = bounds.size - 1
    w_arr = np.zeros(nw, dtype=np.int64)
    w_waited = np.zeros(nw, dtype=np.int64)
    w_within = np.zeros(nw, dtype=np.int64)
    w_qarea = np.zeros(nw, dtype=np.int64)
    w_tail = np.zeros((nw, max_level), dtype=np.int64)
    w, e = 0, 0
    while True:
        w, e = K.occupancy_span(thr_arrival, thr_local, central, h, n_servers, cnt, acc, top_ref,
                                bounds, state, w, e, w_arr, w_waited, w_within, w_qarea, w_tail)
        if w >= nw:
            break
        cnt = np.concatenate([cnt, np.zeros(cnt.size, dtype=np.int64)])
        acc = np.concatenate([acc, np.zeros(acc.size, dtype=np.int64)])
    out = _summarize(bounds, n_servers, lam, rate, n_batches, w_arr, w_waited, w_within, w_qarea,
                     w_tail)
    out["ci_method"] = out["ci_method"].replace(
        "batch means", "batch means (mean response = v_1/lam, Little)", 1)
    return CentralResult(events_run=int(events), drain_events=0, sim_time=events / rate, **out)


# ---------------------------------------------------------------------------------------------
# engine entry points (the runners of sim.registry.ENTRIES)


def _task_args(task: dict) -> dict:
    def as_int(key, default=None):
        x = task.get(key, default)
        return int(x) if isinstance(x, float) and x.is_integer() else x

    return dict(n_servers=as_int("n_servers"), lam=task["lam"], p=task.get("p"),
                events=as_int("events"), seed=as_int("seed"), init=task.get("init", "meanfield"),
                n_batches=as_int("n_batches", 20), max_level=as_int("max_level", 64),
                h=as_int("h", 1))


def _sim_row(res: CentralResult) -> dict:
    # a task is served at the tick that removes it (no service time): wait = response
    return result_row(res, mean_wait=res.mean_response, mean_wait_se=res.mean_response_se,
                      queueing_ratio=None, queueing_ratio_se=None, drop_prob=0.0,
                      drop_prob_se=0.0, messages_per_job=0.0)


def run_agent_task(task: dict) -> dict:
    """Agent engine for one task (keys of docs/results-schema.md); returns :data:`RESULT_KEYS`."""
    return _sim_row(simulate_agent(**_task_args(task)))


def run_occupancy_task(task: dict) -> dict:
    """Occupancy engine for one task; returns :data:`RESULT_KEYS` (mean response by Little)."""
    return _sim_row(simulate_occupancy(**_task_args(task)))


def run_meanfield_task(task: dict) -> dict:
    """Fluid invariant state (closed form, Theorem 2) for one task; returns :data:`RESULT_KEYS`.

    ``mean_response = mean_wait = v_1 / lam`` (Little; the ``lam -> 0`` limit at ``lam = 0``),
    ``prob_wait = s_1`` (PASTA: an arrival finds its station non-empty w.p. ``s_1``),
    ``frac_within_h = 1 - s_h``. Standard errors are None (nothing is estimated).
    """
    lam, p = _check_lam(task.get("lam")), _check_p(task.get("p"))
    max_level = _check_int("max_level", task.get("max_level", 64), 1)
    h = _check_int("h", task.get("h", 1), 1)
    tail = invariant_tail(lam, p, max(max_level, h))
    resp = invariant_mean_response(lam, p)
    out = {
        "mean_response": float(resp), "mean_response_se": None,
        "mean_wait": float(resp), "mean_wait_se": None,
        "prob_wait": float(tail[0]), "prob_wait_se": None,
        "mean_queue": float(invariant_mean_queue(lam, p)), "mean_queue_se": None,
        "tail": [float(x) for x in tail[:max_level]], "tail_se": None,
        "queueing_ratio": None, "queueing_ratio_se": None,
        "drop_prob": 0.0, "drop_prob_se": None,
        "frac_within_h": float(1.0 - tail[h - 1]),
        "messages_per_job": 0.0,
        "n_jobs": 0, "events_run": 0, "sim_time": 0.0, "warmup_time": 0.0,
        "ci_method": CI_METHOD_MF,
    }
    assert tuple(out) == RESULT_KEYS
    return out
