"""Events per second of the agent engine against the C reference loop ``pod_limit.c``.

Builds the C loop (gcc -O3 -march=native) into ``benchmarks/pod_limit`` (gitignored), warms the
numba kernel (so compile time is excluded), then runs both on the same workload -- power-of-d,
N servers, load lam, the same number of uniformized events -- and prints the events/s of each,
their ratio and both mean responses. The C loop only integrates the total queue length (and gets
the mean response by Little's law); the agent engine also tracks every job's arrival time, the
tail counts, the per-window accumulators and the warm-up analysis, and its time is the wall time
of the whole :func:`sim.dispatch.agent.simulate` call.

Usage (from the repository root)::

    python benchmarks/bench_agent_vs_c.py [--c-source ../shared/limits/pod_limit.c]
        [--n-servers 10000] [--lam 0.9] [--d 2] [--events 100000000] [--repeat 3]
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import c_loop_arguments, cpu_model, run_c_loop  # noqa: E402
from sim.dispatch.agent import simulate  # noqa: E402


def build_c(source: Path, binary: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise SystemExit("no C compiler (gcc/cc) on PATH")
    if not source.is_file():
        raise SystemExit(f"C source not found: {source}")
    cmd = [cc, "-O3", "-march=native", "-o", str(binary), str(source), "-lm"]
    subprocess.run(cmd, check=True)
    return binary


def run_c(binary: Path, n: int, lam: float, d: int, events: int, seed: int) -> dict:
    fields = run_c_loop(binary, n, lam, d, events, seed)
    return {"events_per_s": float(fields["events_per_s"]),
            "mean_response": float(fields["mean_response"]), "seconds": float(fields["seconds"])}


def run_agent(n: int, lam: float, d: int, events: int, seed: int) -> dict:
    t0 = time.perf_counter()
    r = simulate(n, lam, "pod", d=d, events=events, seed=seed)
    sec = time.perf_counter() - t0
    return {"events_per_s": events / sec, "mean_response": r.mean_response,
            "mean_response_se": r.mean_response_se, "seconds": sec}


def main(argv=None) -> int:
    p = c_loop_arguments(
        __doc__, REPO / ".." / "shared" / "limits" / "pod_limit.c", REPO / "benchmarks" / "pod_limit",
        "events", 100_000_000,
        c_help="pod_limit.c (default: ../shared/limits/pod_limit.c from the repo root)",
        binary_help="where to put the compiled C loop (default: benchmarks/pod_limit)")
    a = p.parse_args(argv)

    binary = build_c(a.c_source.resolve(), a.binary)
    # warm the numba kernel (compile or load from the on-disk cache) on a tiny run
    simulate(a.n_servers, a.lam, "pod", d=a.d, events=10_000, seed=0)

    c_runs, agent_runs = [], []
    for i in range(a.repeat):  # interleaved, so both see the same machine load
        c_runs.append(run_c(binary, a.n_servers, a.lam, a.d, a.events, a.seed + i))
        agent_runs.append(run_agent(a.n_servers, a.lam, a.d, a.events, a.seed + i))
    c = max(c_runs, key=lambda r: r["events_per_s"])
    ag = max(agent_runs, key=lambda r: r["events_per_s"])
    print(f"cpu: {cpu_model()}")
    print(f"workload: power-of-{a.d}, N={a.n_servers}, lam={a.lam}, events={a.events:.3g}, "
          f"best of {a.repeat}")
    print(f"C loop (pod_limit.c): {c['events_per_s']:.4g} events/s  "
          f"mean_response={c['mean_response']:.5f} (Little, 20% warm-up, empty start)")
    print(f"agent engine        : {ag['events_per_s']:.4g} events/s  "
          f"mean_response={ag['mean_response']:.5f} +- {ag['mean_response_se']:.5f} "
          "(batch-means SE)")
    print(f"ratio agent / C     : {ag['events_per_s'] / c['events_per_s']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
