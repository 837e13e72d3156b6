"""The limits of general service laws against simulation: the figures of docs/service.md,
"Limits" (issue 47 item 3).

- phase-type populations (:mod:`sim.dispatch.phase_population`): the population simulation
  against the general-size engine at one N (two engines of one model), and the mean field and
  refined mean field against the population simulation at N = 10^3, 10^4;
- LL(d) (:mod:`sim.dispatch.meanfield.least_loaded`): the workload fixed point against the
  general-size engine's ``ll`` at N = 10^3, 10^4.

Each line: what, N, the estimate with its batch-means SE, the limit, the gap and the gap in SEs
(and the refined term's prediction of the gap where there is one). Run from the repository:
``python benchmarks/measure_service_limits.py [--quick]`` (``--quick``: ten times shorter runs).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.core.service import service_law  # noqa: E402
from sim.dispatch import phase_population as pp  # noqa: E402
from sim.dispatch.general import simulate as general  # noqa: E402
from sim.dispatch.meanfield.least_loaded import workload_fixed_point  # noqa: E402

LAM, D = 0.9, 2
LAWS = {"hyperexponential SCV 4": {"service": "hyperexponential", "service_scv": 4.0},
        "erlang 2": {"service": "erlang", "service_phases": 2}}


def line(*parts):
    print(*parts, flush=True)


def law_record(keys: dict):
    return service_law(keys["service"], **{k: v for k, v in keys.items() if k != "service"})


def engines_agree(scale: float) -> None:
    n = 100
    cases = [("pod", D, "hyperexponential SCV 4"), ("pod", D, "erlang 2"),
             ("jiq", 1, "hyperexponential SCV 4")]
    for policy, d, name in cases:
        keys = LAWS[name]
        t0 = time.time()
        pop = pp.run_task({"policy": policy, "lam": LAM, "d": d, "n_servers": n,
                           "events": int(8e6 * scale), "seed": 11, **keys})
        gen = general(n, LAM, policy, d=d, jobs=int(4e6 * scale), service=law_record(keys), seed=12)
        for key in ("mean_response", "prob_wait"):
            a, sa = pop[key], pop[key + "_se"]
            b, sb = getattr(gen, key), getattr(gen, key + "_se")
            z = abs(a - b) / (sa**2 + sb**2) ** 0.5
            line(f"agree {policy} {name} N={n} {key}: population {a:.5f} +- {sa:.5f}, general "
                 f"{b:.5f} +- {sb:.5f}, {z:.2f} combined SE (drop {pop['drop_prob']:.2g}; "
                 f"{time.time() - t0:.0f} s)")


def phase_limits(scale: float) -> None:
    for policy, d, name in [("pod", D, "hyperexponential SCV 4"), ("pod", D, "erlang 2"),
                            ("jiq", 1, "hyperexponential SCV 4")]:
        keys = LAWS[name]
        base = {"policy": policy, "lam": LAM, "d": d, **keys}
        mf = pp.run_meanfield({**base, "n_servers": 1000})
        line(f"meanfield {policy} {name}: E[T] {mf['mean_response']:.6f}, P(wait) "
             f"{mf['prob_wait']:.6f}")
        for n, events in ((1000, 2e7), (10_000, 4e7)):
            t0 = time.time()
            ref = pp.run_refined({**base, "n_servers": n})
            row = pp.run_task({**base, "n_servers": n, "events": int(events * scale),
                               "seed": 100 + n, "init": "meanfield"})
            est, se = row["mean_response"], row["mean_response_se"]
            gap = est - mf["mean_response"]
            pred = ref["mean_response"] - mf["mean_response"]
            line(f"limit {policy} {name} N={n}: sim E[T] {est:.5f} +- {se:.5f}, mean field "
                 f"{mf['mean_response']:.5f}, gap {gap:+.5f} ({gap / se:+.2f} SE), refined "
                 f"predicts {pred:+.5f} (V_T = {pred * n:+.3f}), sim - refined "
                 f"{est - ref['mean_response']:+.5f} ({(est - ref['mean_response']) / se:+.2f} SE);"
                 f" drop {row['drop_prob']:.2g}; {time.time() - t0:.0f} s")


def ll_limits(scale: float) -> None:
    for name, keys in (("hyperexponential SCV 4", LAWS["hyperexponential SCV 4"]),
                       ("deterministic", {"service": "deterministic"})):
        law = law_record(keys)
        t0 = time.time()
        fp = workload_fixed_point(law, LAM, D)
        line(f"ll fixed point {name}: E[W] {fp.mean_wait:.6f} (num. error {fp.num_error:.1g}), "
             f"E[T] {fp.mean_response:.6f}, E[W^2] {fp.mean_wait_sq:.5f}; "
             f"{time.time() - t0:.0f} s")
        for n, jobs in ((1000, 1e7), (10_000, 2e7)):
            t0 = time.time()
            g = general(n, LAM, "ll", d=D, jobs=int(jobs * scale), service=law, seed=200 + n)
            for key, lim in (("mean_response", fp.mean_response), ("prob_wait", fp.prob_wait),
                             ("mean_wait_sq", fp.mean_wait_sq)):
                est, se = getattr(g, key), getattr(g, key + "_se")
                line(f"ll {name} N={n} {key}: sim {est:.5f} +- {se:.5f}, limit {lim:.5f}, gap "
                     f"{est - lim:+.5f} ({(est - lim) / se:+.2f} SE); {time.time() - t0:.0f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("agree", "phase", "ll"), default=None)
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0
    if args.only in (None, "ll"):
        ll_limits(scale)
    if args.only in (None, "agree"):
        engines_agree(scale)
    if args.only in (None, "phase"):
        phase_limits(scale)
