"""Coverage of single-run 95% intervals against exact small-N values (issue 44 item 5).

For power-of-2 (``pod``, d = 2) and JSQ at N = 4 and 8, lam = 0.7 and 0.9, the exact mean
response comes from the truncated CTMC of ``tests/exact_small_n.py`` (cap and the mass at the
cap printed). Each seed is run through ``sim.run`` twice per run length, once per SE method
(``batch_means``: the old one; ``obm``: the new default; same seed, same run, so the same
estimate), at

* ``short``: ``MIN_RUN_RELAX / (1 - lam)^2`` time units (at least 300) (what the old method accepted as well as
  any other length);
* ``accepted``: the run ``run.precision`` accepts: a loose target (``precision: 0.5``) started
  at the short length, so ``sim.run`` grows the run until the run-length check passes.

Printed per case and length: coverage of the t intervals (``rel_halfwidth``'s quantiles) of
both methods, sd over seeds / root-mean-square reported SE, the mean kept run length, and the
share of runs flagged too short. Slow (minutes); not part of any test suite:

    python benchmarks/se_coverage.py [--seeds 200] [--engine occupancy] [--cases 4:pod:0.7,...]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402
from sim.core.output import MIN_RUN_RELAX, OBM_DOF, TOO_SHORT  # noqa: E402
from tests.exact_small_n import solve  # noqa: E402

#: truncation caps: the stationary mass at the cap is printed beside each value
CAPS = {(4, 0.7): 25, (4, 0.9): 30, (8, 0.7): 9, (8, 0.9): 11}


def _task(engine, policy, n, lam, t, seed, method, **extra):
    task = {"engine": engine, "policy": policy, "n_servers": n, "lam": lam, "time": t, "seed": seed,
            "init": "meanfield", "n_batches": 20, "max_level": 32, "h": 1, "se_method": method, **extra}
    if policy == "pod":
        task["d"] = 2
    task["events"] = sim.events_for_time(task)
    return task


def _summary(name, est, se, dof, truth, kept, flagged):
    q = student_t.ppf(0.975, dof)
    cover = float(np.mean(np.abs(est - truth) <= q * se))
    ratio = float(np.std(est, ddof=1) / math.sqrt(np.mean(se ** 2)))
    return cover, ratio


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--engine", default="occupancy")
    ap.add_argument("--cases", default="4:pod:0.7,4:jsq:0.7,4:pod:0.9,4:jsq:0.9,8:pod:0.7,8:jsq:0.7,8:jsq:0.9")
    a = ap.parse_args(argv)
    print("| case | exact (cap, mass at cap) | run | kept T | flagged | coverage old / new | "
          "sd/SE old / new | bias / sd |")
    print("|---|---|---|---|---|---|---|---|")
    for case in a.cases.split(","):
        n, policy, lam = case.split(":")
        n, lam = int(n), float(lam)
        cap = CAPS[(n, lam)]
        ex = solve(n, lam, policy, cap=cap)
        truth = ex.mean_response
        t0 = max(MIN_RUN_RELAX / (1 - lam) ** 2, 300.0)  # at least 1000 events
        for label in ("short", "accepted"):
            t_start = time.time()
            est, se_old, se_new, kept, flag = [], [], [], [], []
            for s in range(a.seeds):
                seed = 10_000 + s
                extra = {"precision": 0.5, "precision_cap": 1e4} if label == "accepted" else {}
                new = sim.run(_task(a.engine, policy, n, lam, t0, seed, "obm", **extra))
                ev = new["events_run"]
                old_task = _task(a.engine, policy, n, lam, t0, seed, "batch_means")
                old_task["events"] = ev
                old = sim.run(old_task)
                assert old["mean_response"] == new["mean_response"]
                est.append(new["mean_response"])
                se_new.append(new["mean_response_se"])
                se_old.append(old["mean_response_se"])
                kept.append(new["sim_time"] - new["warmup_time"])
                flag.append(TOO_SHORT in new["ci_method"])
            est, se_old, se_new = map(np.asarray, (est, se_old, se_new))
            c_old, r_old = _summary("old", est, se_old, 19, truth, kept, flag)
            c_new, r_new = _summary("new", est, se_new, OBM_DOF, truth, kept, flag)
            bias = (est.mean() - truth) / est.std(ddof=1)
            print(f"| {policy} N={n} lam={lam} | {truth:.4f} ({cap}, {ex.mass_at_cap:.0e}) | {label} | "
                  f"{np.mean(kept):.0f} | {np.mean(flag):.2f} | {c_old:.3f} / {c_new:.3f} | "
                  f"{r_old:.2f} / {r_new:.2f} | {bias:+.2f} |  <!-- {a.seeds} seeds, "
                  f"{time.time() - t_start:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
