"""Speed of the generic population engine against the hand-written occupancy engine (issue 38).

The same run on both: power-of-d (``pod``) at N = 10**6 by default, the same load, d, number of
events and seed, both from the mean-field fixed point; ``--policy jiq`` (or ``jiq_pod``) times
distributed JIQ the same way (``--r`` servers per scheduler) against :mod:`sim.jiq.occupancy`. Both engines are jump chains on the
counts with the same events (job arrivals and service completions), so time per event is the
like-for-like figure. Prints the CPU model, each engine's time per event and the ratio
population / occupancy (issue 38 asks for at most 3, 2 as a stretch goal).

Each figure is the best of ``--repeat`` runs after a warm-up run (compile time and the
population engine's fixed point are excluded: both are paid once per process and point).
Wall times include the whole call (set-up and output analysis).

Usage (from the repository root)::

    python benchmarks/bench_population.py [--policy pod] [--n 1000000] [--lam 0.9] [--d 2]
        [--r 10] [--events 20000000] [--repeat 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_occupancy import best_time  # noqa: E402  (a warm-up run, then the best)
from benchmarks.common import cpu_model, engine_arguments  # noqa: E402
from sim.dispatch.occupancy import run_task as occupancy_task  # noqa: E402
from sim.dispatch.population import run_task as population_task  # noqa: E402
from sim.jiq.occupancy import run_task as jiq_occupancy_task  # noqa: E402
from sim.jiq.population import run_task as jiq_population_task  # noqa: E402


def main(argv=None):
    ap = engine_arguments(__doc__, events=20_000_000)
    ap.add_argument("--policy", choices=("pod", "jiq", "jiq_pod"), default="pod")
    ap.add_argument("--r", type=float, default=10.0, help="jiq: servers per scheduler")
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--d", type=int, default=2)
    args = ap.parse_args(argv)
    task = {"policy": args.policy, "n_servers": args.n, "lam": args.lam, "d": args.d,
            "events": args.events, "seed": 1, "init": "meanfield", "n_batches": 20,
            "max_level": 64, "h": 1}
    engines = (("occupancy", occupancy_task), ("population", population_task))
    extra = ""
    if args.policy != "pod":
        task["r"] = args.r
        engines = (("occupancy", jiq_occupancy_task), ("population", jiq_population_task))
        extra = f", r = {args.r:g}"
    print(f"CPU: {cpu_model()}")
    print(f"{args.policy}, N = {args.n:.0e}, lam = {args.lam}, d = {args.d}{extra}, "
          f"{args.events:,} events, best of {args.repeat}")
    rows = {}
    for name, fn in engines:
        sec, row = best_time(lambda fn=fn: fn({**task, "engine": name}), args.repeat)
        rows[name] = (sec, row)
        print(f"  {name:10s} {1e9 * sec / args.events:7.1f} ns/event   E[T] = "
              f"{row['mean_response']:.5f} +- {row['mean_response_se']:.5f}")
    ratio = rows["population"][0] / rows["occupancy"][0]
    print(f"ratio population / occupancy per event: {ratio:.2f}"
          + (" (issue 38: within 3x)" if args.policy == "pod" else ""))
    return ratio


if __name__ == "__main__":
    main()
