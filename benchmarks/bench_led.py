"""Speed of the slotted engine (sim.led.slotted): slots and arrivals per second, cost per slot.

Prints (no assertions):

1. at (N, M) = (100, 10), (10**4, 100), (10**5, 1000), load 0.9, heterogeneous servers (half of
   service mean 1, half of mean 3 per slot; Poisson arrivals and services): slots/s, arrivals/s,
   microseconds per slot and nanoseconds per (server x slot) for L-JSQ, L-JBA, L-Pod (d = 2),
   each with Push (p_hat = 1, d_u = 2) and Pull (p_hat = 1: the most reports), and JSQ;
2. the growth of the cost per slot with M at fixed N and with N at fixed M, for L-JSQ-Pull,
   L-JBA-Push and JSQ (with section 1's points).

``status`` is the engine's instability rule on these short runs from empty: at N >= 10**4 it
flags the filling transient (sum Q still rising), not an unstable policy.

The cost of a slot is measured as ``(t(2T) - t(T)) / T`` from two runs of ``T`` and ``2T`` slots
(same seed), so compilation, set-up and output analysis cancel; both runs start empty, so at
large N the figure includes part of the filling transient (queues grow for ~100 slots when one
dispatcher sends ~180 tasks per slot to one server). The service step costs O(N) per slot by
design (every server draws its service); a decision costs O(1) to O(B log_B N) (L-JSQ's tree),
so ns per (server x slot) should stay roughly flat as N grows, and grow with M only through the
M decisions and, for Pull, through the cache misses of reports to M rows of estimates.

Usage (from the repository root)::

    python benchmarks/bench_led.py [--slots-scale 1.0] [--skip-growth] [--skip-large]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model  # noqa: E402
from sim.led.slotted import simulate  # noqa: E402

LOAD = 0.9
ARMS = [
    ("l_jsq", dict(update="push", p_hat=1.0, d_u=2), "L-JSQ-Push"),
    ("l_jsq", dict(update="pull", p_hat=1.0), "L-JSQ-Pull"),
    ("l_jba", dict(update="push", p_hat=1.0, d_u=2), "L-JBA-Push"),
    ("l_jba", dict(update="pull", p_hat=1.0), "L-JBA-Pull"),
    ("l_pod", dict(update="push", p_hat=1.0, d_u=2, d=2), "L-Pod-Push"),
    ("l_pod", dict(update="pull", p_hat=1.0, d=2), "L-Pod-Pull"),
    ("jsq", {}, "JSQ"),
]


def rates(n: int) -> list[float]:
    return [1.0] * (n // 2) + [3.0] * (n - n // 2)


def cost_per_slot(n, m, policy, kw, slots):
    """Seconds per slot from runs of ``slots`` and ``2 * slots`` slots, and the longer run."""
    mu = rates(n)
    simulate(mu, LOAD, policy, m, events=100, n_windows=10, n_batches=2, **kw)  # compile/load
    t0 = time.perf_counter()
    simulate(mu, LOAD, policy, m, events=slots, n_windows=100, seed=1, **kw)
    t1 = time.perf_counter()
    res = simulate(mu, LOAD, policy, m, events=2 * slots, n_windows=100, seed=1, **kw)
    t2 = time.perf_counter()
    per = max((t2 - t1) - (t1 - t0), 1e-12) / slots
    return per, res


def row(n, m, label, per, res):
    lam_sigma = LOAD * sum(rates(n))
    q = res.mean_queue
    return (f"{n:>7} {m:>5}  {label:<11} {1 / per:>10.0f} {lam_sigma / per:>12.3g} "
            f"{per * 1e6:>10.1f} {per * 1e9 / n:>9.1f} {q:>8.1f} {res.messages_per_job:>7.3f} "
            f"{res.status:>8}")


HEADER = (f"{'N':>7} {'M':>5}  {'policy':<11} {'slots/s':>10} {'arrivals/s':>12} "
          f"{'us/slot':>10} {'ns/(N*s)':>9} {'Q/N':>8} {'msg/job':>7} {'status':>8}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slots-scale", type=float, default=1.0,
                    help="multiply every run length (default 1)")
    ap.add_argument("--skip-growth", action="store_true")
    ap.add_argument("--skip-large", action="store_true", help="skip (N, M) = (10**5, 1000)")
    args = ap.parse_args(argv)
    print(f"CPU: {cpu_model()}")
    try:
        print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    except OSError:
        pass
    print(f"load {LOAD}, half the servers of mean 1 and half of mean 3, Poisson laws\n")

    print("1. slots and arrivals per second")
    print(HEADER)
    sizes = [(100, 10, 20_000), (10**4, 100, 600), (10**5, 1000, 150)]
    if args.skip_large:
        sizes = sizes[:2]
    for n, m, slots in sizes:
        slots = max(100, int(slots * args.slots_scale))
        for policy, kw, label in ARMS:
            per, res = cost_per_slot(n, m, policy, kw, slots)
            print(row(n, m, label, per, res), flush=True)
    if args.skip_growth:
        return
    print("\n2. growth of the cost per slot with M at fixed N (N = 10**3: M = 10, 100; "
          "N = 10**4: M = 100 in section 1, 1000 here) and with N at fixed M "
          "(M = 100: N = 10**3 here, 10**4 in section 1; M = 1000: N = 10**4 here, 10**5 in "
          "section 1). The tasks per dispatcher and slot, lam_m = 1.8 N / M, change with them.")
    print(HEADER)
    growth = [("l_jsq", dict(update="pull", p_hat=1.0), "L-JSQ-Pull"),
              ("l_jba", dict(update="push", p_hat=1.0, d_u=2), "L-JBA-Push"),
              ("jsq", {}, "JSQ")]
    for n, m, slots in [(10**3, 10, 4000), (10**3, 100, 4000), (10**4, 1000, 600)]:
        slots = max(100, int(slots * args.slots_scale))
        for policy, kw, label in growth:
            per, res = cost_per_slot(n, m, policy, kw, slots)
            print(row(n, m, label, per, res), flush=True)

if __name__ == "__main__":
    main()
