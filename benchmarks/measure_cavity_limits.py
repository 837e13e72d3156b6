"""The SQ(d) cavity limit (:mod:`sim.dispatch.meanfield.cavity`) against the general-size engine
(:mod:`sim.dispatch.general`, policy ``pod``): the figures of docs/service.md ("SQ(d) with any
law: the cavity queue").

For each (lam, d) and law, one run of the engine at N (10^4 by default) from empty, and the
limit. The exponential law comes first at each (lam, d): its limit is the closed form, so its
gap is the finite-N gap of SQ(d) at that N, lam and d (plus noise); the tests take their
allowance from these lines. Each line: law, lam, d, N, E[T] limit, E[T] simulated +- batch-means
SE, the gap and the gap in SE, P(wait) limit and simulated +- SE, the limit's ``num_error``,
its solve time and the run's time.

With ``--reps R`` (R >= 2), R independent runs (seeds ``seed .. seed + R - 1``) per line instead
of one: their mean, its SE from the spread over the runs (not from any run's batch means) and
the gap in those SEs, and the spread over the batch-means SEs (sd over runs / rms SE): the
figures of docs/service.md on the gap against N.

Run from the repository: ``python benchmarks/measure_cavity_limits.py [--n 10000]
[--jobs 20000000] [--lams 0.5 0.9] [--ds 2 5] [--laws ...] [--reps R]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

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
    ap.add_argument("--reps", type=int, default=1, help="independent runs per line (SE from their spread)")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error(f"--reps={a.reps}: at least 1")
    for lam in a.lams:
        for d in a.ds:
            for name in a.laws:
                law = LAWS[name]
                t0 = time.process_time()
                fp = fixed_point(law, lam, d)
                t1 = time.process_time()
                if a.reps > 1:
                    _replicated(a, name, law, lam, d, fp, t1 - t0)
                    continue
                g = simulate(a.n, lam, "pod", d=d, jobs=a.jobs, service=law, seed=a.seed)
                t2 = time.process_time()
                gap = g.mean_response - fp.mean_response
                print(f"{name} lam={lam} d={d} N={a.n}: E[T] limit {fp.mean_response:.6f}, sim "
                      f"{g.mean_response:.6f} +- {g.mean_response_se:.6f}, gap {gap:+.6f} "
                      f"({gap / g.mean_response_se:+.2f} SE); P(wait) limit {fp.prob_wait:.6f}, "
                      f"sim {g.prob_wait:.6f} +- {g.prob_wait_se:.6f}; num_error "
                      f"{fp.num_error:.1e}, limit {t1 - t0:.2f} s CPU, sim {t2 - t1:.1f} s CPU "
                      f"({g.sim_time:.0f} time units, warm-up {g.warmup_time:.0f})", flush=True)


def _replicated(a, name, law, lam, d, fp, limit_cpu) -> None:
    """One line of ``--reps``: the mean of independent runs against the limit."""
    from scipy import stats

    t0 = time.process_time()
    runs = [simulate(a.n, lam, "pod", d=d, jobs=a.jobs, service=law, seed=a.seed + r) for r in range(a.reps)]
    est = np.array([g.mean_response for g in runs])
    batch_se = np.array([g.mean_response_se for g in runs])
    mean, se = float(est.mean()), float(est.std(ddof=1) / np.sqrt(a.reps))
    half = float(stats.t.ppf(0.975, a.reps - 1)) * se
    gap = mean - fp.mean_response
    print(f"{name} lam={lam} d={d} N={a.n}, {a.reps} runs of {a.jobs} jobs: E[T] limit "
          f"{fp.mean_response:.6f}, sim {mean:.6f} +- {se:.6f} (spread; 95% [{mean - half:.6f}, "
          f"{mean + half:.6f}]), gap {gap:+.6f} ({gap / se:+.2f} SE, {100 * gap / fp.mean_response:+.3f}%); "
          f"sd over runs / rms batch SE {est.std(ddof=1) / np.sqrt(np.mean(batch_se ** 2)):.2f}; limit "
          f"{limit_cpu:.2f} s CPU, sims {time.process_time() - t0:.1f} s CPU", flush=True)


if __name__ == "__main__":
    main()
