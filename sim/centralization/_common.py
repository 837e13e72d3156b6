"""What the two simulators of partial centralization share (:mod:`~sim.centralization.agent`,
:mod:`~sim.centralization.occupancy`; model: :mod:`sim.centralization`).

Both run the same conventions as the dispatch model's agent engine: uniformization at total rate
``N (1 + lam)`` (an event is an arrival w.p. ``lam/(1+lam)``, a local tick w.p.
``(1-p)/(1+lam)``, a central tick w.p. ``p/(1+lam)``), a deterministic clock of ``1/R`` per event
(all means unchanged), windows of ``2**k`` events, MSER-5 on the per-window mean queue length,
batch means, xoshiro256+ seeded by ``numpy.random.SeedSequence(seed)``.

Both report ``prob_wait`` (fraction of tasks that find their station non-empty), ``frac_within_h``
(fraction of tasks arriving to a queue of fewer than ``h`` tasks), ``queueing_ratio = None``
(no service-time baseline here), ``drop_prob = 0``, ``messages_per_job = 0`` (no dispatching:
each task joins its own station; the central server's knowledge of the longest queue is not a
per-task probe and is not counted).

Here: the result of a run (:class:`CentralResult`), the checks of a run's arguments, the raw-draw
thresholds, the output analysis of the windows and the row of a task.
"""
from __future__ import annotations

from sim.centralization import MODEL
from sim.centralization.meanfield import _check_int
from sim.core.results import result_row, simulation_result
from sim.core.rng import threshold
from sim.core.settings import RunSettings, task_int
from sim.core.skeleton import Run

__all__ = ["CentralResult", "check_sim_args", "thresholds", "new_windows", "summarize_windows", "task_args",
           "sim_row"]


#: estimates of one simulation run (times in the model's time unit)
CentralResult = simulation_result("CentralResult", "Estimates of one simulation run (times in the model's time unit).", {
    "mean_response": "agent: measured per task; occupancy: v_1 / lam (Little)",
    "prob_wait": "fraction of tasks that find their station non-empty", "prob_wait_se": "",
    "frac_within_h": "fraction of tasks arriving to a queue of fewer than h tasks "
                     "(its SE is not a result column; for tests)", "frac_within_h_se": "",
    "mean_queue": "v_1, time-average tasks per station",
    "n_jobs": "tasks measured after the warm-up cut (occupancy: arrivals counted)",
    "events_run": "events simulated, drain included",
    "drain_events": "agent, p > 0: events run after the end to finish the measured tasks",
    "sim_time": "horizon of the time averages (warm-up included, drain excluded)"})


def check_sim_args(n_servers, lam, p, events, seed, init, n_batches, max_level, h, n_windows,
                   se_method) -> tuple:
    """The model's values by their declarations, then the run settings (:class:`~sim.core.
    skeleton.Run`, ``h`` an integer-valued number >= 1): ``(n_servers, lam, p, h, run)``."""
    n_servers, lam, p = (MODEL.param(key).check(key, value)
                         for key, value in (("n_servers", n_servers), ("lam", lam), ("p", p)))
    if n_servers >= 2**31:  # the bound both simulators take; check_task applies it to the agent engine
        raise ValueError(f"n_servers={n_servers!r} must be < 2**31")
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, se_method=se_method)
    return n_servers, lam, p, _check_int("h", h, 1), run


def thresholds(lam: float, p: float):
    """Raw-draw thresholds of an arrival and of an arrival-or-local tick; central flag."""
    thr_arrival = threshold(lam / (1.0 + lam))
    thr_local = threshold((lam + 1.0 - p) / (1.0 + lam))
    return thr_arrival, thr_local, p > 0.0


def new_windows(run: Run):
    """The per-window series both simulators fill: ``w_arr, w_waited, w_within, w_qarea,
    w_tail`` (int64 zeros; ``w_tail`` one column per level up to ``max_level``)."""
    return (*(run.zeros() for _ in range(4)), run.tail_zeros())


def summarize_windows(run: Run, n_servers, lam, rate, w_arr, w_waited, w_within, w_qarea, w_tail,
                      resp_num=None, resp_den=None):
    """The epilogue of either simulator (:meth:`sim.core.skeleton.Run.epilogue`): the warm-up
    cut, batch means of every estimate, the mean response measured (``resp_num`` over
    ``resp_den``, in events) or, without it, by Little's law; ``sim_time`` the horizon of the
    time averages, ``events / rate``."""
    dt = 1.0 / rate
    ratios = {"prob_wait": (w_waited, w_arr), "frac_within_h": (w_within, w_arr)}
    if resp_num is not None:
        ratios = {"mean_response": (resp_num * dt, resp_den), **ratios}
    out = run.epilogue(n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, ratios=ratios,
                       little=lam, jobs=w_arr if resp_num is None else resp_den, dt=dt)
    out["sim_time"] = run.events / rate
    return out


def task_args(task: dict) -> dict:
    """The arguments of either simulator's ``simulate`` from a task (its run settings read by
    :class:`~sim.core.settings.RunSettings`)."""
    s = RunSettings.from_task(task)
    return dict(n_servers=task_int(task, "n_servers"), lam=task["lam"], p=task.get("p"),
                events=task_int(task, "events"), seed=s.seed, init=s.init, n_batches=s.n_batches,
                max_level=s.max_level, h=s.h)


def sim_row(res: CentralResult) -> dict:
    # a task is served at the tick that removes it (no service time): wait = response
    return result_row(res, mean_wait=res.mean_response, mean_wait_se=res.mean_response_se,
                      queueing_ratio=None, queueing_ratio_se=None, drop_prob=0.0,
                      drop_prob_se=0.0, messages_per_job=0.0)
