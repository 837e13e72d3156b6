"""``python -m pipeline +sweep=NAME plan=true``: what a sweep would do, and how long it would take.

Validates the sweep as a real run does (a task whose estimated memory exceeds
``execution.memory_share`` is refused there, before any timing run allocates it), then prints its
points, task count and total events, the largest task's memory estimate, and an estimated wall time on this machine and on a cluster of ``plan_cpus`` CPUs. Starts no Ray,
writes no run folder (only its timing cache, below), logs nothing to MLflow.

The estimate is measured, not guessed: for each (engine, policy, variant) of the sweep, the task with the
most servers runs twice in this process, for ``PROBE_EVENTS`` and five times as many events (a
warm-up run first, so that compilation is not counted). The difference gives the marginal CPU
time per event and the rest a fixed cost per task (setting up the state, e.g. the mean-field
start of a large system), and every task of that pair costs the fixed part plus its own events
at the marginal rate. One short run alone would charge the fixed part to every event, which
overstates long tasks several-fold where the set-up grows with N.
Mean-field tasks count as a short fixed time, except on a limit path beyond N = 10^7 (large k
and d), where each (engine, policy, variant)'s largest-N task is timed too. The wall time on P CPUs is that of the
longest-first schedule of the tasks on P CPUs plus Ray's start, about what the grouping achieves.

The timings are kept in ``~/.cache/lbsweep/plan-timings.json`` (``XDG_CACHE_HOME`` honoured),
keyed by the digest of ``sim/``'s source, the CPU as the numbers see it (model, numba's target and
features: :func:`pipeline.archive.cpu`), the timed task's inputs and the probe lengths: a second
dry run of a sweep on this machine, with the same code, times nothing it has timed before (the
headline's took 53 s, nearly all timing runs). Changed code or another CPU gives other keys. The
file holds at most :data:`CACHE_ENTRIES` entries (the newest); an unreadable one is ignored.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import logging
import math
import os
import time
from collections import defaultdict
from pathlib import Path

from pipeline.execute import MEANFIELD_SECONDS
from pipeline.plan import Plan, run_settings
from sim import MAX_RUNS
from sim.registry import STOCHASTIC_ENGINES

log = logging.getLogger("pipeline")

#: events of each timing run (and a tenth of that as the warm-up)
PROBE_EVENTS = 1_000_000
#: limit tasks (mean field) are timed only where a path goes beyond this N (large k and d)
LIMIT_N = 10**7
#: what starting a local Ray cluster costs here, seconds
RAY_START_SECONDS = 6.0


def _events(task: dict) -> int:
    return int(task.get("events") or 0)


def _n(task: dict) -> float:
    """The task's N (``10^log10_n`` for a heavy-traffic task, which has no n_servers)."""
    return float(task["n_servers"]) if task.get("n_servers") is not None else 10.0 ** task["log10_n"]


def _key(task: dict) -> tuple:
    return task["engine"], task["policy"], task["_meta"]["params"].get("variant") or ""


#: most timings kept in the cache file (the newest)
CACHE_ENTRIES = 2000


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lbsweep" / "plan-timings.json"


def _machine_code() -> dict:
    """What decides a timing besides the task: the source of ``sim/`` and the CPU."""
    import importlib.util

    from pipeline.archive import cpu
    from pipeline.worker import tree_digest

    spec = importlib.util.find_spec("sim")
    c = cpu()
    return {"sim": tree_digest(Path(list(spec.submodule_search_locations)[0])),
            "cpu": [c.get("model"), c.get("llvm_target"), c.get("llvm_features"), c.get("overrides")]}


def _cache_key(machine: dict, task: dict, probe_events: int) -> str:
    text = json.dumps({"machine": machine, "task": task, "probe": probe_events}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_cache(path: Path) -> dict[str, list]:
    """The cached timings, ``key -> [fixed, per_event, stamp]``; entries of another shape dropped."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(v, list) and len(v) == 3
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                    for x in v)}


def _write_cache(path: Path, entries: dict[str, list]) -> None:
    """Keep the newest :data:`CACHE_ENTRIES`; written to a temporary file renamed into place. A
    cache that cannot be written is no error (the next dry run times again)."""
    newest = dict(sorted(entries.items(), key=lambda kv: kv[1][2])[-CACHE_ENTRIES:])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(newest))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def measure_costs(plan: Plan, probe_events: int = PROBE_EVENTS,
                  cache: bool = True) -> dict[tuple, tuple[float, float]]:
    """``(fixed CPU seconds per task, CPU seconds per event)`` of each stochastic (engine,
    policy, variant), on its largest-N task (module docstring); and, keyed the same way,
    ``(CPU seconds per task, 0)`` of each limit (engine, policy, variant) that a limit path takes
    beyond ``LIMIT_N`` (its largest-N task, once after a warm-up). With ``cache``, timings made
    before on this machine with this code are read from :func:`cache_path` and new ones added."""
    if not cache:
        return _measure_tasks(_largest_tasks(plan), probe_events)
    machine = _machine_code()
    path = cache_path()
    entries = _read_cache(path)
    largest = _largest_tasks(plan)
    keys = {key: _cache_key(machine, {k: v for k, v in t.items() if k not in ("_meta", "precision")}, probe_events)
            for key, t in largest.items()}
    known = {key: (entries[h][0], entries[h][1]) for key, h in keys.items() if h in entries}
    todo = {key: t for key, t in largest.items() if key not in known}
    measured = _measure_tasks(todo, probe_events) if todo else {}
    if known:
        log.info("plan: %d of %d timings read from %s (timed before on this CPU with this code)",
                 len(known), len(largest), path)
    if measured:
        now = time.time()
        entries.update({keys[key]: [fixed, per, now] for key, (fixed, per) in measured.items()})
        _write_cache(path, entries)
    return {key: known.get(key) or measured[key] for key in largest}


def _largest_tasks(plan: Plan) -> dict[tuple, dict]:
    """The largest-N task of each (engine, policy, variant) that is timed."""
    largest: dict[tuple, dict] = {}
    for t in plan.tasks:
        if t["engine"] not in STOCHASTIC_ENGINES and _n(t) <= LIMIT_N:
            continue
        key = _key(t)
        if key not in largest or _n(t) > _n(largest[key]):
            largest[key] = t
    return largest


def _measure_tasks(largest: dict[tuple, dict], probe_events: int) -> dict[tuple, tuple[float, float]]:
    """Time each task of ``largest`` (module docstring)."""
    import sim

    unit_costs = {}
    for key, t in largest.items():
        task = {k: v for k, v in t.items() if k not in ("_meta", "precision")}
        if t["engine"] not in STOCHASTIC_ENGINES:  # a limit task's cost is per task
            sim.run(task)
            c0 = time.process_time()
            sim.run(task)
            unit_costs[key] = (time.process_time() - c0, 0.0)
            continue
        n1 = max(1000, min(probe_events, _events(t)))
        n2 = max(n1, min(5 * probe_events, _events(t)))
        sim.run({**task, "events": max(n1 // 10, 1000)})
        c0 = time.process_time()
        sim.run({**task, "events": n1})
        t1 = time.process_time() - c0
        if n2 == n1:  # the task is no longer than the probe: its own cost, all per event
            unit_costs[key] = (0.0, t1 / n1)
            continue
        c0 = time.process_time()
        sim.run({**task, "events": n2})
        t2 = time.process_time() - c0
        marginal = (t2 - t1) / (n2 - n1)
        if marginal <= 0.0:  # timer noise on a cheap task: the longer run's average
            marginal = t2 / n2
        unit_costs[key] = (max(0.0, t2 - marginal * n2), marginal)
    return unit_costs


def task_seconds(plan: Plan, unit_costs: dict[tuple, tuple[float, float]]) -> list[float]:
    """Estimated CPU seconds of each task: a simulation's fixed cost plus its events at its
    pair's marginal cost per event; a limit task its pair's measured cost at its largest N (an
    upper bound), or ``MEANFIELD_SECONDS`` if none was measured."""
    out = []
    for t in plan.tasks:
        if t["engine"] not in STOCHASTIC_ENGINES:
            out.append(unit_costs[_key(t)][0] if _key(t) in unit_costs else MEANFIELD_SECONDS)
        else:
            fixed, marginal = unit_costs[_key(t)]
            out.append(fixed + marginal * _events(t))
    return out


def wall_seconds(costs: list[float], cpus: int) -> float:
    """Makespan of the longest-first schedule on ``cpus`` CPUs."""
    loads = [0.0] * max(1, cpus)
    heapq.heapify(loads)
    for c in sorted(costs, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + c)
    return max(loads) + RAY_START_SECONDS


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def describe(plan: Plan, conf: dict, cluster_cpus: int, measure: bool = True) -> str:
    lines = [f"sweep {plan.sweep!r}: {len(plan.points)} points, {len(plan.tasks)} tasks "
             f"({sum(t['engine'] in STOCHASTIC_ENGINES for t in plan.tasks)} simulations), "
             f"{sum(_events(t) for t in plan.tasks if t['engine'] in STOCHASTIC_ENGINES):.3g} events in all"]
    by_engine: dict[str, int] = defaultdict(int)
    for t in plan.tasks:
        by_engine[t["engine"]] += 1
    lines.append("tasks by engine: " + ", ".join(f"{e} {n}" for e, n in sorted(by_engine.items())))
    lp = conf.get("limit_path") or {}
    if lp.get("n_servers_max") is not None:
        path_n = sorted({t["n_servers"] for t in plan.tasks if t["engine"] == lp.get("engine")})
        lines.append(f"limit path: engine {lp.get('engine')} at {len(path_n)} values of N, "
                     f"{path_n[0]:g} to {float(path_n[-1]):.3g}" if path_n else "limit path: no arm has a limit")
        for engine, xs in plan.precise.items():  # past the float range (a model's precise path)
            if xs:
                lines.append(f"  and past it: engine {engine} at {len(xs)} values of N, 10^{xs[0]:g} "
                             f"to 10^{xs[-1]:g}")
        lines.extend(f"  not on the path: {why}" for why in plan.path_skipped)
    lines.append("varying: " + (", ".join(plan.varying) or "(nothing)"))
    if plan.memory.get("task"):
        from pipeline.memory import fmt_bytes

        m = plan.memory
        lines.append(f"memory: the largest task needs about {fmt_bytes(m['bytes'])} (estimate; {m['task']}); "
                     f"a task may use {fmt_bytes(m['allowed'])} ({m['allowed'] / m['total']:g} of "
                     f"{fmt_bytes(m['total'])}, {m['source']})")
    shown = 12
    # per point, the parameters some task of it takes (a task's row has the others null)
    used: dict[int, set] = defaultdict(set)
    for t in plan.tasks:
        meta = t["_meta"]
        used[meta["point_id"]].update(k for k, v in meta["params"].items() if v is not None)
        used[meta["point_id"]].add("variant")
    for p in plan.points[:shown]:
        lines.append(f"  {p.label(used[p.point_id])}")
    if len(plan.points) > shown:
        lines.append(f"  ... and {len(plan.points) - shown} more points")
    if not measure:
        return "\n".join(lines)
    unit_costs = measure_costs(plan)
    costs = task_seconds(plan, unit_costs)
    here = int(conf["execution"].get("num_cpus") or os.cpu_count() or 1)
    lines.append("measured CPU time per event here (largest N of each; + fixed cost per task): " + ", ".join(
        f"{'/'.join(filter(None, k))} {v[1] * 1e9:.0f} ns" + (f" + {v[0]:.2g} s" if v[0] >= 0.001 else "")
        for k, v in sorted(unit_costs.items()) if k[0] in STOCHASTIC_ENGINES))
    limit = {k: v for k, v in unit_costs.items() if k[0] not in STOCHASTIC_ENGINES}
    if limit:
        lines.append("measured CPU time per limit task here (largest N of each): " + ", ".join(
            f"{'/'.join(filter(None, k))} {v[0]:.2f} s" for k, v in sorted(limit.items())))
    lines.append(f"estimated: {sum(costs) / 3600:.2f} core-hours; the dearest task {_duration(max(costs))}; "
                 f"wall time {_duration(wall_seconds(costs, here))} on this machine ({here} CPUs), "
                 f"{_duration(wall_seconds(costs, cluster_cpus))} on {cluster_cpus} CPUs")
    run = conf.get("run") or {}
    if run.get("precision") is not None:
        cap = float(run_settings(run).precision_cap)
        lines.append(f"precision {run['precision']:g}: these are the first runs; a task that misses "
                     f"the target is rerun longer (at most {MAX_RUNS} runs, the last at most "
                     f"{cap:g} times the given events)")
    return "\n".join(lines)
