"""Numerical engines for load-balancing systems.

Pure numerics: numpy, numba and scipy only (never Ray, Hydra, MLflow or Polars).

The one entry point the pipeline uses is :func:`run`, which takes a *task* -- a plain dict
of values -- and returns a plain dict of estimates. The task and result keys are documented
in ``docs/results-schema.md``. Each model is one package (``sim/dispatch/``,
``sim/centralization/``, ...) that declares itself in its ``__init__.py`` (``MODEL``: engines,
policies, parameters, result columns, ...); :mod:`sim.registry` assembles the declarations, and
``sim/core/`` holds the model-free machinery (docs/architecture.md, docs/extending.md).
"""
from __future__ import annotations

import importlib
import math
import time

from sim.core.declare import INT_LIMIT, SHARED_PARAMS, bound_text
from sim.core.settings import RunSettings
from sim.registry import ENGINE_POLICIES, ENGINES, POLICIES, STOCHASTIC_ENGINES, check_task, entry, model_of

__all__ = ["run", "check_task", "events_for_time", "rel_halfwidth", "run_too_short", "ENGINES", "POLICIES",
           "ENGINE_POLICIES"]

#: most runs one task makes to reach its ``precision`` (the first included)
MAX_RUNS = 4
#: a rerun's length is the estimate ``events * (reached / target)**2`` times this margin
RERUN_MARGIN = 1.2


def events_for_time(task: dict) -> int:
    """The events of a run of ``task["time"]`` simulated time units on the task's engine.

    Each model declares its engines' events per unit time (:attr:`Model.events_per_time`:
    exact for uniformized engines, the steady-state rate for jump chains); the row's
    ``sim_time`` records the time a run covered. ``ValueError`` if the run would have fewer
    than 1000 events.
    """
    rate = model_of(task).events_per_time(task)
    t = task["time"]
    events = math.ceil(t * rate) if math.isfinite(t * rate) else INT_LIMIT
    declared = SHARED_PARAMS["events"]
    if events < declared.domain[0]:
        raise ValueError(f"time={t!r} is {events} events at n_servers={task['n_servers']} "
                         f"(engine={task['engine']}): a run needs at least "
                         f"{bound_text(declared.domain[0])}; give a longer time")
    if not declared.within(events):
        raise ValueError(f"time={t!r} is {t * rate:.3g} events: {declared.refusal('events', events)}")
    return events


def rel_halfwidth(task: dict, out: dict) -> float | None:
    """The relative 95% half-width of the task's ``precision_estimate`` (default: its model's
    main estimate, :attr:`Model.main_estimate`): ``t(0.975, dof) * se / |estimate|`` with the
    degrees of freedom of the run's SE method (``n_batches - 1`` for batch means,
    :data:`sim.core.output.OBM_DOF` for overlapping batch means); None if the estimate or its SE
    is missing, not finite, or the estimate is 0."""
    from scipy.stats import t as student_t

    from sim.core.output import LEGACY_SE_METHOD, OBM_LABEL, se_dof

    key = task.get("precision_estimate") or model_of(task).main_estimate
    est, se = out.get(key), out.get(f"{key}_se")
    if (est is None or se is None or not math.isfinite(est) or not math.isfinite(se)
            or est == 0):
        return None
    method = "obm" if str(out.get("ci_method") or "").startswith(OBM_LABEL) else LEGACY_SE_METHOD
    q = float(student_t.ppf(0.975, max(se_dof(method, RunSettings.from_task(task).n_batches), 1)))
    return q * se / abs(est)


def run_too_short(task: dict, out: dict) -> float | None:
    """An ``obm`` run too short for its standard error to be trusted: the factor its length
    must grow by (> 1), else None (also for a ``batch_means`` run, which has no such check).

    Two checks (docs/analysis.md, section 1): the run, after its warm-up cut, is at least
    :data:`~sim.core.output.MIN_RUN_PER_IAT` times its integrated autocorrelation time as the
    run estimates it (from the windows of its labelled estimate), and, where ``0 < lam < 1``,
    at least :data:`~sim.core.output.MIN_RUN_RELAX` / (1 - lam)^2 time units (the relaxation
    time of a queue near saturation: a run much shorter than it can look settled)."""
    from sim.core.output import MIN_RUN_PER_IAT, MIN_RUN_RELAX, label_run_per_iat

    ratio = label_run_per_iat(str(out.get("ci_method") or ""))
    if ratio is None:
        return None
    grow = MIN_RUN_PER_IAT / ratio if ratio > 0 else (4.0 if not ratio >= 0 else math.inf)
    lam, t, cut = task.get("lam"), out.get("sim_time"), out.get("warmup_time") or 0.0
    if lam is not None and 0 < lam < 1 and t:
        kept = t - cut
        need = MIN_RUN_RELAX / (1.0 - lam) ** 2
        grow = max(grow, need / kept if kept > 0 else math.inf)
    return grow if grow > 1 else None


def run(task: dict) -> dict:
    """Run one task and return its estimates as a plain dict (see docs/results-schema.md).

    The task is checked first (:func:`sim.registry.check_task`); a bad task raises
    ``ValueError`` naming the offending key and value.

    A stochastic task with ``precision`` (a target relative 95% half-width of its model's main
    estimate, :attr:`Model.main_estimate`) is run again, longer, until the target is
    met: each rerun is a new run (same seed) of ``events * (reached / target)**2 * 1.2``
    events, at most ``precision_cap`` times the given ``events`` and at most :data:`MAX_RUNS`
    runs in all; the result is the last run's, with ``rel_halfwidth`` (reached) and ``runs``.
    """
    check_task(task)
    t0 = time.perf_counter()
    module, _, func = entry(task["engine"], task["policy"], task.get("model")).runner.partition(":")
    runner = getattr(importlib.import_module(module), func)
    out = runner(task)
    if task["engine"] in STOCHASTIC_ENGINES:
        from sim.core.output import MIN_RUN_RELAX, TOO_SHORT

        reached = rel_halfwidth(task, out)
        runs = 1
        settings = RunSettings.from_task(task)
        target = settings.precision
        short = run_too_short(task, out)
        if target is not None:
            events = int(task["events"])
            cap = int(min(events * float(settings.precision_cap), INT_LIMIT - 1))
            while ((reached is None or reached > target or short is not None) and events < cap
                   and runs < MAX_RUNS):
                grow = 4.0 if reached is None else (reached / target) ** 2 * RERUN_MARGIN
                if short is not None:
                    grow = max(grow, min(short, 1e6) * RERUN_MARGIN)
                events = min(cap, math.ceil(events * max(grow, 1.25)))
                out = runner({**task, "events": events})
                reached = rel_halfwidth(task, out)
                short = run_too_short(task, out)
                runs += 1
        if short is not None and TOO_SHORT not in out["ci_method"]:  # the 1/(1-lam)^2 check
            out["ci_method"] += (f"; {TOO_SHORT} against 1/(1-lam)^2 (needs {MIN_RUN_RELAX} x): "
                                 "SE not trusted, run longer")
        out["rel_halfwidth"] = reached
        out["runs"] = runs
    out["wall_time"] = time.perf_counter() - t0
    return out
