"""What a fresh worker process pays before its first result: importing ``sim`` and loading the
numba-compiled kernels of one task of each engine from the on-disk cache.

Each measurement is a new Python process that does what a Ray worker does before a task
(``pipeline.worker.configure_numba(1)``: the node-local cache folder of this version of ``sim/``,
``~/.cache/lbsweep/numba/<digest>``, unless ``NUMBA_CACHE_DIR`` is set), then imports ``sim``
and runs, for each (model, engine), the model's first declared entry of that engine on its
declared example with a short run (``--events``, at most). Every task runs twice in a row: the
first run pays the loading of its kernels (and whatever the process had not imported yet), the
second only the simulation, so ``first - second`` is the load. A numba event listener counts
the kernels the process *compiled* (a cache miss) rather than loaded: with a warm cache that
count is 0, and any other figure names the kernels compiled.

One process (not measured) warms the cache first; then ``--repeat`` measured processes run
one after another, and the median of each figure is printed, with the CPU. On a shared machine
the figures carry the neighbours' load: compare them with the ``import numba`` line, measured
in the same process.

    nice -n 15 python benchmarks/bench_worker_start.py
    python benchmarks/bench_worker_start.py --only dispatch   # the dispatch model's engines
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_model  # noqa: E402


def tasks(only: list[str] | None, events: int) -> list[dict]:
    """One task per (model, engine): the first declared entry's example, ``events`` at most."""
    from sim import registry

    seen, out = set(), []
    for e in registry.ENTRIES:
        if (e.model, e.engine) in seen or (only and e.model not in only):
            continue
        seen.add((e.model, e.engine))
        task = {**e.example, "model": e.model, "engine": e.engine, "policy": e.policy, "seed": 12345}
        if "events" in task:
            task["events"] = min(int(task["events"]), events)
        out.append(task)
    return out


def child(only: list[str] | None, events: int) -> None:
    """One fresh worker: configure numba as a worker does, import sim, each task twice."""
    t0 = time.perf_counter()
    import numba  # noqa: F401  (its own import time, for scale)
    from numba.core import event

    t_numba = time.perf_counter() - t0
    from pipeline.worker import configure_numba

    configure_numba(1)
    compiled: list[str] = []

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled.append(str(ev.data.get("dispatcher", "?")))

        def on_end(self, ev):
            pass

    event.register("numba:compile", Listener())
    t1 = time.perf_counter()
    import sim

    t_sim = time.perf_counter() - t1
    rows = []
    for task in tasks(only, events):
        before = len(compiled)
        a = time.perf_counter()
        sim.run(dict(task))
        b = time.perf_counter()
        sim.run(dict(task))
        c = time.perf_counter()
        rows.append({"task": f"{task['model']} {task['engine']} {task['policy']}", "first": b - a,
                     "second": c - b, "compiled": compiled[before:]})
    print(json.dumps({"numba": t_numba, "sim": t_sim, "total": time.perf_counter() - t0,
                      "cache": os.environ.get("NUMBA_CACHE_DIR"), "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="measured processes (after one warm-up)")
    ap.add_argument("--events", type=int, default=20_000, help="events per run, at most")
    ap.add_argument("--only", nargs="+", default=None, help="these models only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.only, args.events)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, __file__, "--child", "--events", str(args.events),
           *(["--only", *args.only] if args.only else [])]

    def one() -> dict:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(f"CPU: {cpu_model()}")
    t0 = time.perf_counter()
    warm = one()
    n_compiled = sum(len(r["compiled"]) for r in warm["rows"])
    print(f"warm-up process: {time.perf_counter() - t0:.1f} s, {n_compiled} kernels compiled "
          f"(0 if the cache was warm already); cache {warm['cache']}")
    runs = [one() for _ in range(args.repeat)]

    def med(values) -> float:
        return statistics.median(values)

    print(f"median of {args.repeat} fresh processes:")
    print(f"  import numba {med(r['numba'] for r in runs):6.2f} s   import sim {med(r['sim'] for r in runs):6.2f} s"
          f"   whole process (imports, every task twice) {med(r['total'] for r in runs):6.2f} s")
    print(f"  {'task (model engine policy)':<44} {'first s':>8} {'second s':>9} {'load s':>7} {'compiled':>8}")
    for i, row in enumerate(runs[0]["rows"]):
        first = med(r["rows"][i]["first"] for r in runs)
        second = med(r["rows"][i]["second"] for r in runs)
        comp = max(len(r["rows"][i]["compiled"]) for r in runs)
        print(f"  {row['task']:<44} {first:8.3f} {second:9.3f} {first - second:7.3f} {comp:8d}")
        for r in runs:
            if r["rows"][i]["compiled"]:
                print(f"      compiled: {', '.join(sorted(set(r['rows'][i]['compiled'])))}")
                break
    loads = [sum(x["first"] - x["second"] for x in r["rows"]) for r in runs]
    print(f"  every engine's first task, load only (sum of first - second): {med(loads):.2f} s; "
          f"with import sim: {med(x + r['sim'] for x, r in zip(loads, runs)):.2f} s")


if __name__ == "__main__":
    main()
