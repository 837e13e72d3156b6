"""Time per point of the SQ(d) cavity fixed point (:func:`sim.dispatch.meanfield.cavity.fixed_point`).

Prints the CPU, then for each law, lam and d: the process CPU time of one call (two fixed points,
at ``h`` and ``h / 2``, and their Richardson extrapolation), the best of ``--repeat`` calls after
one call that compiles or loads the kernel, with the sweeps, the levels and the age cells of the
fine solve, E[T] and its ``num_error``. CPU time, not wall time: the machine is shared.

Usage (from the repository root)::

    python benchmarks/bench_cavity.py [--lams 0.5 0.9 0.99] [--ds 2 5] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import cpu_model, law_by_name  # noqa: E402
from sim.dispatch.meanfield import cavity  # noqa: E402

LAWS = {name: law_by_name(name) for name in (
    "exponential", "deterministic", "erlang-2", "hyperexponential-4", "lognormal-4", "pareto-1.5-100")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.5, 0.9, 0.99])
    ap.add_argument("--ds", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--laws", nargs="+", default=list(LAWS), choices=list(LAWS))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    print(f"CPU: {cpu_model()}", flush=True)
    cavity.fixed_point(LAWS["exponential"], 0.5, 2)  # compile or load the kernel
    for name in a.laws:
        law = LAWS[name]
        cells = cavity._edges(law, cavity.H_DEFAULT / 2).size - 1
        for lam in a.lams:
            for d in a.ds:
                best = float("inf")
                for _ in range(a.repeat):
                    t0 = time.process_time()
                    fp = cavity.fixed_point(law, lam, d)
                    best = min(best, time.process_time() - t0)
                print(f"{name} lam={lam} d={d}: {best:.3f} s CPU per point ({fp.sweeps} sweeps, "
                      f"{fp.levels} levels, {cells} age cells at h/2); E[T] "
                      f"{fp.mean_response:.9f}, num_error {fp.num_error:.1e}", flush=True)


if __name__ == "__main__":
    main()
