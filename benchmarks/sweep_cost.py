"""Measured cost of a shipped sweep: CPU seconds per task and total core-hours.

Runs one task of each distinct (policy, variant, N) of the sweep for ``--events`` events (after a
short warm-up run that compiles), scales the CPU time per event to each task's own event count,
and prints the cheapest, median and dearest task and the total. Mean-field tasks are counted at
the pipeline's planning cost.

    python benchmarks/sweep_cost.py sub_halfin_whitt_large --events 2000000
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import cpu_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--events", type=int, default=2_000_000)
    args = ap.parse_args()
    import sim
    from pipeline.execute import MEANFIELD_SECONDS
    from pipeline.plan import make_plan
    from pipeline.run import to_plain
    from tests.helpers import compose

    plan = make_plan(to_plain(compose([f"+sweep={args.sweep}", "output_dir=/tmp/unused"])))
    per_event: dict[tuple, float] = {}
    for t in plan.tasks:
        if t["engine"] == "meanfield":
            continue
        key = (t["engine"], t["policy"], t["n_servers"], t["_meta"]["params"].get("variant"))
        if key in per_event:
            continue
        task = {k: v for k, v in t.items() if k != "_meta"}
        sim.run({**task, "events": max(args.events // 10, 1000)})  # compile, warm caches
        c0 = time.process_time()
        sim.run({**task, "events": args.events})
        per_event[key] = (time.process_time() - c0) / args.events
    costs = []
    for t in plan.tasks:
        if t["engine"] == "meanfield":
            costs.append(MEANFIELD_SECONDS)
            continue
        key = (t["engine"], t["policy"], t["n_servers"], t["_meta"]["params"].get("variant"))
        costs.append(per_event[key] * t["events"])
    costs.sort()
    print(f"CPU: {cpu_model()}")
    print(f"sweep {args.sweep}: {len(costs)} tasks; seconds per task: min {costs[0]:.1f}, "
          f"median {costs[len(costs) // 2]:.1f}, max {costs[-1]:.1f}; total {sum(costs) / 3600:.2f} core-hours")
    for key, v in sorted(per_event.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  dearest per event: {key}: {v * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
