"""Coverage of single-run 95% intervals against exact small-N values (issue 44 item 5).

For power-of-2 (``pod``, d = 2) and JSQ at N = 4 and 8, lam = 0.7 and 0.9, the exact mean
response comes from the truncated CTMC of ``tests/exact_small_n.py`` (its cap and the mass at
the cap printed; ``--exact FILE`` keeps the solved values in a JSON file, as the N = 8 chains
take minutes). At N = 8, lam = 0.9 no feasible cap has negligible mass at the cap (2.5e-3 for
power-of-2 at cap 11, whose chain has 75,582 states), so the truth there is the limit fitted
through caps 7..12 (``tests.exact_small_n.extrapolated``), printed with its error bound.
Each seed is run through ``sim.run`` with the ``obm`` SE method (the default) and, at the
first two lengths, also with ``batch_means`` (the method before it), at

* ``short``: 30 / (1 - lam)^2 time units: a run the run-length check flags (``run too short``);
* ``accepted``: the shortest run ``run.precision`` accepts: a loose target (``precision: 0.5``)
  started at ``MIN_RUN_RELAX / (1 - lam)^2`` kept time units (the warm-up cut added), so the
  first run is kept unless its own autocorrelation check flags it, and then ``sim.run`` grows
  it (the share grown is printed);
* ``long``: 1000 / (1 - lam)^2 time units.

Printed per case and length, as a markdown table: coverage of the t intervals (``sim.rel_halfwidth``'s
quantiles) of both methods, sd over seeds / root-mean-square reported SE, the mean kept run
length, the share of runs flagged too short (or grown, for ``accepted``), and the bias of the
``obm`` estimate over its sd. Slow (minutes); not part of any test suite:

    python benchmarks/se_coverage.py [--seeds 200] [--engine occupancy] [--cases 4:pod:0.7,...]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402
from sim.core.output import MIN_RUN_RELAX, OBM_WARMUP, TOO_SHORT  # noqa: E402
from tests.exact_small_n import extrapolated, solve  # noqa: E402

#: truncation caps: the stationary mass at the cap is printed beside each value; a range of caps
#: is extrapolated to the untruncated chain
CAPS = {(4, 0.7): 25, (4, 0.9): 36, (8, 0.7): 11, (8, 0.9): range(7, 13)}
CASES = "4:pod:0.7,4:jsq:0.7,4:pod:0.9,4:jsq:0.9,8:pod:0.7,8:jsq:0.7,8:jsq:0.9,8:pod:0.9"


def _task(engine, policy, n, lam, t, seed, method, **extra):
    task = {"engine": engine, "policy": policy, "n_servers": n, "lam": lam, "time": t, "seed": seed,
            "init": "meanfield", "n_batches": 20, "max_level": 32, "h": 1, "se_method": method, **extra}
    if policy == "pod":
        task["d"] = 2
    task["events"] = sim.events_for_time(task)
    return task


def _interval_stats(est, out, task, truth):
    """Coverage of the t interval ``rel_halfwidth * |est|`` and the sd / rms SE ratio."""
    hw = np.array([sim.rel_halfwidth(task, o) * abs(o["mean_response"]) for o in out])
    se = np.array([o["mean_response_se"] for o in out])
    return float(np.mean(np.abs(est - truth) <= hw)), float(np.std(est, ddof=1) / math.sqrt(np.mean(se ** 2)))


def _exact(n, policy, lam, store):
    """``[mean response, mass at the (largest) cap, error bound]`` and how the truth was got."""
    caps = CAPS[(n, lam)]
    if isinstance(caps, range):
        key, label = f"{policy}:{n}:{lam}:caps{caps.start}-{caps.stop - 1}", f"caps {caps.start}-{caps.stop - 1} fitted"
        if key not in store:
            ex = extrapolated(n, lam, policy, tuple(caps))
            store[key] = [ex.mean_response, ex.mass_at_cap, ex.bound]
    else:
        key, label = f"{policy}:{n}:{lam}:cap{caps}", f"{caps}"
        if key not in store:
            ex = solve(n, lam, policy, cap=caps)
            store[key] = [ex.mean_response, ex.mass_at_cap, 0.0]
    truth, mass, *bound = store[key]  # files written before the bound hold two values
    return truth, mass, (bound or [0.0])[0], label


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--engine", default="occupancy")
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--exact", type=Path, default=None, help="JSON file of solved exact values (read, extended)")
    a = ap.parse_args(argv)
    store = json.loads(a.exact.read_text()) if a.exact and a.exact.exists() else {}
    print("| case | exact (cap, mass at cap) | run | kept T (x 1/(1-lam)^2) | flagged or grown | "
          "coverage obm / batch_means | sd/SE obm / batch_means | bias / sd |")
    print("|---|---|---|---|---|---|---|---|")
    for case in a.cases.split(","):
        n, policy, lam = case.split(":")
        n, lam = int(n), float(lam)
        truth, mass, bound, how = _exact(n, policy, lam, store)
        if a.exact:
            a.exact.write_text(json.dumps(store, indent=1))
        relax = 1.0 / (1.0 - lam) ** 2
        lengths = {"short": 30 * relax, "accepted": MIN_RUN_RELAX * relax / (1 - OBM_WARMUP) * 1.001,
                   "long": 1000 * relax}
        for label, t0 in lengths.items():
            t_start = time.time()
            extra = {"precision": 0.5, "precision_cap": 1e4} if label == "accepted" else {}
            new, old = [], []
            for s in range(a.seeds):
                seed = 10_000 + s
                new.append(sim.run(_task(a.engine, policy, n, lam, t0, seed, "obm", **extra)))
                if label != "long":
                    old.append(sim.run(_task(a.engine, policy, n, lam, t0, seed, "batch_means")))
            est = np.array([o["mean_response"] for o in new])
            cov, ratio = _interval_stats(est, new, _task(a.engine, policy, n, lam, t0, 0, "obm"), truth)
            kept = np.mean([o["sim_time"] - o["warmup_time"] for o in new]) / relax
            if label == "accepted":
                flag = np.mean([o["runs"] > 1 or TOO_SHORT in o["ci_method"] for o in new])
            else:
                flag = np.mean([TOO_SHORT in o["ci_method"] for o in new])
            old_txt = " / -", " / -"
            if old:
                est_old = np.array([o["mean_response"] for o in old])
                c_old, r_old = _interval_stats(est_old, old, _task(a.engine, policy, n, lam, t0, 0, "batch_means"), truth)
                old_txt = f" / {c_old:.3f}", f" / {r_old:.2f}"
            bias = (est.mean() - truth) / est.std(ddof=1)
            exact = f"{truth:.4f} +- {bound:.0e}" if bound else f"{truth:.4f}"
            print(f"| {policy} N={n} lam={lam} | {exact} ({how}, {mass:.0e}) | {label} | "
                  f"{kept:.0f} | {flag:.2f} | {cov:.3f}{old_txt[0]} | {ratio:.2f}{old_txt[1]} | {bias:+.2f} |"
                  f"  <!-- {a.seeds} seeds, {time.time() - t_start:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
