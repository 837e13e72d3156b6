"""Occupancy engine of partial centralization (model: :mod:`sim.centralization`): the counts of
stations per queue length only, cost per event independent of N (the conventions both
simulators share: :mod:`sim.centralization._common`). No task identities, so the mean response
is ``v_1 / lam`` (Little's law, with the exact arrival rate), its standard error
``se(v_1) / lam``.
"""
from __future__ import annotations

import numpy as np

from sim.centralization._common import CentralResult, check_sim_args, new_windows, sim_row, summarize_windows, task_args, thresholds
from sim.centralization.meanfield import initial_tail
from sim.core.settings import DEFAULTS, N_WINDOWS

__all__ = ["simulate", "run_task"]


def simulate(n_servers: int, lam: float, p: float, events: int = 10**6, seed: int = DEFAULTS.seed,
             init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level,
             h: int = DEFAULTS.h, *, n_windows: int = N_WINDOWS, se_method: str = DEFAULTS.se_method) -> CentralResult:
    """Occupancy simulation: the counts of stations per queue length only (O(log top) per event,
    memory O(top), independent of N). The mean response is ``v_1 / lam`` (Little's law);
    ``n_jobs`` counts the arrivals after the warm-up cut. ``init="meanfield"``: the initial counts
    are multinomial over the invariant law ``P(Q = i) = s_i - s_{i+1}`` (a numpy ``Generator``
    on a child of the task's ``SeedSequence``)."""
    n_servers, lam, p, h, run = check_sim_args(n_servers, lam, p, events, seed, init, n_batches,
                                               max_level, h, n_windows, se_method)
    from sim.centralization import _occupancy_kernel as K

    rate = n_servers * (1.0 + lam)
    thr_arrival, thr_local, central = thresholds(lam, p)
    state = run.xoshiro()
    levels = 64
    if run.init == "meanfield":
        tail = initial_tail(lam, p)
        pmf = -np.diff(np.concatenate([[1.0], tail, [0.0]]))
        pmf = np.clip(pmf, 0.0, None)
        counts = run.generator().multinomial(n_servers, pmf / pmf.sum())  # stations with exactly i tasks
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
    w_arr, w_waited, w_within, w_qarea, w_tail = new_windows(run)
    w, e = 0, 0
    while True:
        w, e = K.occupancy_span(thr_arrival, thr_local, central, h, n_servers, cnt, acc, top_ref,
                                run.bounds, state, w, e, w_arr, w_waited, w_within, w_qarea, w_tail)
        if w >= run.n_win:
            break
        cnt = np.concatenate([cnt, np.zeros(cnt.size, dtype=np.int64)])
        acc = np.concatenate([acc, np.zeros(acc.size, dtype=np.int64)])
    out = summarize_windows(run, n_servers, lam, rate, w_arr, w_waited, w_within, w_qarea, w_tail)
    out["ci_method"] = out["ci_method"].replace(
        "batch means", "batch means (mean response = v_1/lam, Little)", 1)
    return CentralResult(drain_events=0, **out)


def run_task(task: dict) -> dict:
    """Occupancy engine for one task; returns :data:`RESULT_KEYS` (mean response by Little)."""
    return sim_row(simulate(**task_args(task)))
