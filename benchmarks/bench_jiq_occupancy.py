"""Speed of the distributed-JIQ occupancy engine: time per event against N.

Prints (no assertions) the CPU model and, for ``jiq`` and ``jiq_pod`` (``d = 2``) at
``lam = 0.9``, ``r = 10`` and N = 10**3 .. 10**9:

- ``kernel``: the event loop alone (:func:`sim.jiq._occupancy_kernel.occupancy_kernel` from the
  warm-start counts), ns per jump-chain event -- the figure that should be flat in N (the state
  is the counts per level and per I-queue size, nothing grows with N; target within 1.5x);
- ``simulate``: the whole :func:`sim.jiq.occupancy.simulate` call (mean-field fixed point, warm
  start draw, output analysis included), ns per event.

Each figure is the best of ``--repeat`` runs after a warm-up run (compile time excluded).

Usage (from the repository root)::

    python benchmarks/bench_jiq_occupancy.py [--events 10000000] [--lam 0.9] [--r 10] [--d 2]
        [--repeat 3] [--max-exp 9]
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model, engine_arguments  # noqa: E402
from sim.core._trajectory_kernel import padded  # noqa: E402
from sim.core.windows import window_bounds  # noqa: E402
from sim.jiq import _occupancy_kernel as K  # noqa: E402
from sim.jiq.occupancy import initial_counts, simulate  # noqa: E402
from sim.jiq.policies import POLICIES  # noqa: E402


def best_time(fn, repeat: int):
    """Best (wall, CPU) seconds of ``repeat`` runs after a warm-up run. On a shared machine the
    CPU time (``time.process_time``: this process only; the kernels are single-threaded) is the
    steadier figure; the wall time includes waits for a core."""
    fn()  # warm-up: compile / load the cache, touch memory
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def kernel_ns(n, lam, policy, r, d, events, repeat):
    m = n // r
    x0, y0, _ = initial_counts(policy, lam, r, d, n, m, "meanfield", 1)
    bounds = window_bounds(events, 1000)

    def run():
        x, y = padded(x0, 2), padded(y0, 2)
        state = np.random.SeedSequence(1).generate_state(4, dtype=np.uint64)
        outs = K.new_outputs(bounds.size - 1, 64)
        K.occupancy_kernel(POLICIES[policy].occupancy_code, n, m, lam * n, d, x, y, bounds, state, outs)

    wall, cpu = best_time(run, repeat)
    return 1e9 * wall / events, 1e9 * cpu / events


def simulate_ns(n, lam, policy, r, d, events, repeat):
    wall, cpu = best_time(lambda: simulate(n, lam, policy, r, d, events=events, seed=1), repeat)
    return 1e9 * wall / events, 1e9 * cpu / events


def main(argv=None) -> int:
    p = engine_arguments(__doc__, events=10_000_000)
    p.add_argument("--r", type=int, default=10)
    p.add_argument("--d", type=int, default=2, help="jiq_pod probes")
    p.add_argument("--max-exp", type=int, default=9, help="largest N = 10**max_exp")
    a = p.parse_args(argv)
    print(f"CPU: {cpu_model()} ({platform.machine()}, {__import__('os').cpu_count()} logical)")
    print(f"JIQ occupancy engine, lam = {a.lam}, r = {a.r}, {a.events:,} events per run, "
          f"best of {a.repeat}, compile time excluded")
    ns_values = [10**e for e in range(3, a.max_exp + 1)]
    for policy, d in (("jiq", 1), ("jiq_pod", a.d)):
        print(f"\n{policy} (d = {d})")
        print(f"  {'N':>8s}   ns/event: {'kernel cpu':>10s} {'kernel wall':>11s} "
              f"{'simulate cpu':>12s} {'simulate wall':>13s}")
        ker = []
        for n in ns_values:
            kw, kc = kernel_ns(n, a.lam, policy, a.r, d, a.events, a.repeat)
            sw, sc = simulate_ns(n, a.lam, policy, a.r, d, a.events, a.repeat)
            ker.append(kc)
            print(f"  {n:>8.0e}             {kc:>10.1f} {kw:>11.1f} {sc:>12.1f} {sw:>13.1f}",
                  flush=True)
        print(f"  -> kernel CPU time per event, max / min over N: {max(ker) / min(ker):.2f} "
              f"(target <= 1.5); N = 1e{a.max_exp} / N = 1e3: {ker[-1] / ker[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
