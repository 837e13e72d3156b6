"""The SQ(d) cavity limit (:mod:`sim.dispatch.meanfield.cavity`) against the general-size engine
(:mod:`sim.dispatch.general`, policy ``pod``): the figures of docs/service.md ("SQ(d) with any
law: the cavity queue").

For each (lam, d) and law, one run of the engine at N (10^4 by default) from empty, and the
limit. The exponential law comes first at each (lam, d): its limit is the closed form, so its
gap is the finite-N gap of SQ(d) at that N, lam and d (plus noise); the tests take their
allowance from these lines. Each line: law, lam, d, N, E[T] limit, E[T] simulated +- batch-means
SE, the gap and the gap in SE, P(wait) limit and simulated +- SE, the limit's ``num_error``,
its solve time and the run's time.

Run from the repository: ``python benchmarks/measure_cavity_limits.py [--n 10000]
[--jobs 20000000] [--lams 0.5 0.9] [--ds 2 5] [--laws ...]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import law_by_name  # noqa: E402
from sim.dispatch.general import simulate  # noqa: E402
from sim.dispatch.meanfield.cavity import fixed_point  # noqa: E402

LAWS = {name: law_by_name(name) for name in (
    "exponential", "deterministic", "lognormal-1", "lognormal-4", "pareto-1.5-20", "pareto-1.5-100")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=20_000_000)
    ap.add_argument("--lams", type=float, nargs="+", default=[0.5, 0.9])
    ap.add_argument("--ds", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--laws", nargs="+", default=list(LAWS), choices=list(LAWS))
    ap.add_argument("--seed", type=int, default=47_3)
    a = ap.parse_args(argv)
    for lam in a.lams:
        for d in a.ds:
            for name in a.laws:
                law = LAWS[name]
                t0 = time.process_time()
                fp = fixed_point(law, lam, d)
                t1 = time.process_time()
                g = simulate(a.n, lam, "pod", d=d, jobs=a.jobs, service=law, seed=a.seed)
                t2 = time.process_time()
                gap = g.mean_response - fp.mean_response
                print(f"{name} lam={lam} d={d} N={a.n}: E[T] limit {fp.mean_response:.6f}, sim "
                      f"{g.mean_response:.6f} +- {g.mean_response_se:.6f}, gap {gap:+.6f} "
                      f"({gap / g.mean_response_se:+.2f} SE); P(wait) limit {fp.prob_wait:.6f}, "
                      f"sim {g.prob_wait:.6f} +- {g.prob_wait_se:.6f}; num_error "
                      f"{fp.num_error:.1e}, limit {t1 - t0:.2f} s CPU, sim {t2 - t1:.1f} s CPU "
                      f"({g.sim_time:.0f} time units, warm-up {g.warmup_time:.0f})", flush=True)


if __name__ == "__main__":
    main()
