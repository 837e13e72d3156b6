"""Agent engine of partial centralization (model: :mod:`sim.centralization`): one entry per
station, FIFO ring buffers, response times measured per task (the conventions both simulators
share: :mod:`sim.centralization._common`).

End of run: with the central server chasing the longest queues the remaining time of a task
still present is *not* a Gamma of its position (that correction,
:func:`sim.core.fifo.close_censored`, is used only for ``p = 0``, where it is exact with rate
``1 - p = 1``). For ``p > 0`` the run is followed by a *drain*: the same dynamics (arrivals
included, new tasks untracked) run on until every task that arrived during the run has left,
each credited to the window it arrived in. This is exact (the censored tasks get their true
responses), costs tens of time units of events (see :func:`simulate`), and those events are
counted in ``events_run`` (``sim_time`` remains the horizon of the time averages).
"""
from __future__ import annotations

import numpy as np

from sim.centralization._common import CentralResult, check_sim_args, new_windows, sim_row, summarize_windows, task_args, thresholds
from sim.centralization.meanfield import initial_tail
from sim.core.buckets import build_buckets
from sim.core.fifo import close_censored, draw_initial_queues, grow_rings
from sim.core.settings import DEFAULTS, N_WINDOWS
from sim.core.windows import window_shift

__all__ = ["simulate", "run_task"]


def simulate(n_servers: int, lam: float, p: float, events: int = 10**6, seed: int = DEFAULTS.seed,
             init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level, h: int = DEFAULTS.h,
             *, n_windows: int = N_WINDOWS, max_drain_events: int | None = None,
             se_method: str = DEFAULTS.se_method) -> CentralResult:
    """Agent simulation of the partially centralized system (one entry per station).

    Response times are measured per task from FIFO ring buffers and credited to the window of
    the task's arrival. End of run: ``p = 0`` -- the exact expected remaining time of each task
    still present (Gamma of its position at rate 1, :func:`sim.core.fifo.close_censored`);
    ``p > 0`` -- a drain phase (module docstring), at most ``max_drain_events`` (default:
    ``events``) events, after which any task still present is credited with its elapsed time plus
    the local-service bound ``(position)/(1 - p)`` (never reached in our runs; reported in
    ``ci_method`` if it is). Measured drain cost: 0.02-0.2% of the events at N = 1000
    (30 000 time units), 4.7% at N = 10^5 with 10^8 events (25 time units).
    ``init="meanfield"`` draws the queues i.i.d. from the invariant tail. Memory: ``8 N C``
    bytes of ring buffers, ``C`` a power of two above the longest queue.
    """
    n_servers, lam, p, h, run = check_sim_args(n_servers, lam, p, events, seed, init, n_batches,
                                               max_level, h, n_windows, se_method)
    from sim.centralization import _agent_kernel as K

    rate = n_servers * (1.0 + lam)
    thr_arrival, thr_local, central = thresholds(lam, p)
    state = run.xoshiro()
    if run.init == "meanfield":
        q = draw_initial_queues(initial_tail(lam, p), n_servers, state)
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
    w_arr, w_waited, w_within, w_qarea, w_tail = new_windows(run)
    bounds, nw, events = run.bounds, run.n_win, run.events
    w_jobs, w_resp = run.zeros(), run.zeros(float)

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

    out = summarize_windows(run, n_servers, lam, rate, w_arr, w_waited, w_within, w_qarea,
                            w_tail, resp_num=w_resp, resp_den=w_jobs)
    out.update(ci_method=out["ci_method"] + note, events_run=int(events + drain_events))
    return CentralResult(drain_events=int(drain_events), **out)


def run_task(task: dict) -> dict:
    """Agent engine for one task (keys of docs/results-schema.md); returns :data:`RESULT_KEYS`."""
    return sim_row(simulate(**task_args(task)))
