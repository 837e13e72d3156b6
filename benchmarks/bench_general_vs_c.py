"""Cost per job and per event of the general-size engine against the exponential agent engine
and a C loop of the same chain (``benchmarks/general_limit.c``).

Builds the C loop (gcc -O3 -march=native) into ``benchmarks/general_limit`` (gitignored), warms
the numba kernels (compile time excluded), then runs, interleaved so that all see the same
machine load, on one workload -- power-of-d, N servers, load lam, exponential sizes, the same
number of jobs (arrivals):

- the C loop: arrivals, lazy ring reads of the d sampled servers, mean response only;
- :func:`sim.dispatch.general.simulate` (``pod``, exponential law): the whole call, windows,
  tails, second moments and the warm-up analysis included;
- :func:`sim.dispatch.agent.simulate` (``pod``): ``jobs (1 + lam) / lam`` uniformized events,
  the same simulated time.

Per job is the like-for-like figure (the same simulated time). Per event: an agent event is a
uniformized event (an arrival or a service token, wasted at an idle server, ``(1 + lam) /
lam`` per job); a general-engine event is an arrival or a departure (2 per job; the departure
is the lazy drop of a completion time from a ring). Times are process CPU time (the C loop's
``CLOCK_PROCESS_CPUTIME_ID``, Python's ``time.process_time``), so that on a machine shared with
other jobs the time a program waits for a CPU is not counted (it still pays for the caches
that the others evict). Every figure names the CPU.

Usage (from the repository root)::

    python benchmarks/bench_general_vs_c.py [--n-servers 10000] [--lam 0.9] [--d 2]
        [--jobs 20000000] [--repeat 3]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_agent_vs_c import build_c  # noqa: E402
from benchmarks.common import c_loop_arguments, cpu_model, run_c_loop  # noqa: E402
from sim.dispatch import agent, general  # noqa: E402


def run_c(binary: Path, n: int, lam: float, d: int, jobs: int, seed: int) -> dict:
    fields = run_c_loop(binary, n, lam, d, jobs, seed)
    return {"seconds": float(fields["seconds"]), "mean_response": float(fields["mean_response"]),
            "se": float("nan")}


def run_general(n: int, lam: float, d: int, jobs: int, seed: int) -> dict:
    t0 = time.process_time()
    r = general.simulate(n, lam, "pod", d=d, jobs=jobs, seed=seed)
    return {"seconds": time.process_time() - t0, "mean_response": r.mean_response,
            "se": r.mean_response_se}


def run_agent(n: int, lam: float, d: int, jobs: int, seed: int) -> dict:
    events = int(round(jobs * (1 + lam) / lam))
    t0 = time.process_time()
    r = agent.simulate(n, lam, "pod", d=d, events=events, seed=seed)
    return {"seconds": time.process_time() - t0, "mean_response": r.mean_response,
            "se": r.mean_response_se, "events": events}


def main(argv=None) -> int:
    p = c_loop_arguments(__doc__, REPO / "benchmarks" / "general_limit.c",
                         REPO / "benchmarks" / "general_limit", "jobs", 20_000_000)
    a = p.parse_args(argv)

    binary = build_c(a.c_source.resolve(), a.binary)
    general.simulate(a.n_servers, a.lam, "pod", d=a.d, jobs=10_000, seed=0)  # warm the kernels
    agent.simulate(a.n_servers, a.lam, "pod", d=a.d, events=10_000, seed=0)

    runs = {"C": [], "general": [], "agent": []}
    for i in range(a.repeat):  # interleaved, so that all see the same machine load
        runs["C"].append(run_c(binary, a.n_servers, a.lam, a.d, a.jobs, a.seed + i))
        runs["general"].append(run_general(a.n_servers, a.lam, a.d, a.jobs, a.seed + i))
        runs["agent"].append(run_agent(a.n_servers, a.lam, a.d, a.jobs, a.seed + i))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    events = {"C": 2 * a.jobs, "general": 2 * a.jobs, "agent": best["agent"]["events"]}
    print(f"cpu: {cpu_model()}")
    print(f"workload: power-of-{a.d}, N={a.n_servers}, lam={a.lam}, exponential sizes, "
          f"jobs={a.jobs:.3g}, best of {a.repeat}")
    for name, label in (("C", "C loop (general_limit.c)"), ("general", "general engine"),
                        ("agent", "agent engine (exp.)")):
        r = best[name]
        print(f"{label:25s}: {1e9 * r['seconds'] / a.jobs:7.1f} ns/job  "
              f"{1e9 * r['seconds'] / events[name]:6.1f} ns/event  "
              f"mean_response={r['mean_response']:.4f}"
              + (f" +- {r['se']:.4f}" if r["se"] == r["se"] else ""))
    g, e, c = (best[k]["seconds"] for k in ("general", "agent", "C"))
    print(f"general / agent per job : {g / e:.2f}   per event: "
          f"{(g / events['general']) / (e / events['agent']):.2f}")
    print(f"general / C per job     : {g / c:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
