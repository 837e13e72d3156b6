"""CPU per job of each batch policy on the headline path, against batch-filling's floor (issue 36).

Points of ``conf/sweep/sub_halfin_whitt.yaml`` (alpha = 0.3, beta = 1): ``lam = 1 - N**-0.3``,
``k = ceil(ln(N)**2)``, ``d = ceil(1 / ((1 - lam) ln k))`` (the rule with c = 1), at
N = 10**5, 10**6, 10**7 (``--sizes``). Cases, all in the occupancy engine
(:func:`sim.dispatch.occupancy.simulate`, mean-field start):

- ``batch_filling`` with the c = 1 d: the floor (``k + 1`` jumps per job at the single-task
  cost, docs/performance.md);
- ``batch_sampling`` with d = 2 (the ``const2`` rule): its jobs' positions spread over several
  levels, so their E[T | positions] rarely repeat;
- ``batch_sampling`` with the c = 1 d (for reference);
- ``pod_per_task`` with the c = 1 d: ``k d`` queues sampled for each of the ``k`` tasks.

Printed per case: CPU microseconds per job and the ratio to batch-filling's figure of the same
N in the same run (issue 36's targets at N = 10**7: batch-sampling d = 2 <= 2x, pod_per_task
<= 3x), and the run's mean response with its SE (a sanity check, not a result: the runs are
short).

Timing as in ``bench_limits.py``: CPU time (``time.process_time``), each case at two run
lengths ``E1 < E2`` events with the same seed, the marginal cost ``(t2 - t1) / (jobs2 -
jobs1)`` over the arriving jobs (compile time, set-up such as the mean-field start, and output
analysis drop out), the median of ``--repeat`` rounds after a warm-up run (the machine is
shared: the median is steadier than the best when neighbours come and go), the cases of one N
shuffled in each round so that they share the machine's load. Events are chosen per N so that
``E2 - E1`` covers about ``--jobs`` jobs of ``k + 1`` jumps.

Usage (from the repository root)::

    python benchmarks/bench_batch_policies.py [--sizes 100000 1000000 10000000] [--jobs 20000]
        [--repeat 3] [--seed 1]
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model  # noqa: E402


def lscpu_line() -> str:
    """``Model name``, ``CPU family`` and ``Model`` as lscpu reports them (empty if no lscpu)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return (f"lscpu: {fields.get('Model name', '?')}, family {fields.get('CPU family', '?')} "
            f"model {fields.get('Model', '?')}, {fields.get('CPU(s)', '?')} CPU(s), "
            f"hypervisor {fields.get('Hypervisor vendor', 'none')}")


def path_point(n: int) -> dict:
    """lam, k and the c = 1 d of sub_halfin_whitt at N (alpha = 0.3, beta = 1)."""
    lam = 1.0 - n ** -0.3
    k = math.ceil(math.log(n) ** 2)
    d = min(math.ceil(1.0 / ((1.0 - lam) * math.log(k))), n // k)
    return {"lam": lam, "k": k, "d": d}


def cases(n: int) -> list[tuple[str, str, int]]:
    pt = path_point(n)
    return [("batch_filling", "batch_filling", pt["d"]),
            ("batch_sampling d=2", "batch_sampling", 2),
            ("batch_sampling c=1", "batch_sampling", pt["d"]),
            ("pod_per_task", "pod_per_task", pt["d"])]


def run_once(n, policy, d, events, seed):
    from sim.dispatch.occupancy import simulate

    pt = path_point(n)
    t0 = time.process_time()
    r = simulate(n, pt["lam"], policy, k=pt["k"], d=d, events=events, seed=seed)
    return time.process_time() - t0, r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6, 10**7])
    p.add_argument("--jobs", type=int, default=20_000, help="jobs between the two run lengths")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", nargs="+", default=None, help="case labels to time (default all)")
    a = p.parse_args(argv)
    print(f"cpu: {cpu_model()}")
    line = lscpu_line()
    if line:
        print(line)
    print(f"occupancy engine on the sub_halfin_whitt path; CPU per job, marginal over ~{a.jobs:,} "
          f"jobs, median of {a.repeat} shuffled rounds")
    rng = random.Random(0)
    rows = []
    for n in a.sizes:
        pt = path_point(n)
        todo = [c for c in cases(n) if a.only is None or c[0] in a.only]
        e1 = max(200_000, (pt["k"] + 1) * a.jobs // 4)
        e2 = e1 + (pt["k"] + 1) * a.jobs
        print(f"\nN = {n:.0e}: lam = {pt['lam']:.6f}, k = {pt['k']}, c = 1 d = {pt['d']}; "
              f"events {e1:,} and {e2:,}", flush=True)
        for _, policy, d in todo:  # warm-up: compile, load the cache
            run_once(n, policy, d, 20_000, a.seed)
        per_job: dict[str, list[float]] = {c[0]: [] for c in todo}
        last = {}
        for _ in range(a.repeat):
            order = list(todo)
            rng.shuffle(order)
            for label, policy, d in order:
                t1, r1 = run_once(n, policy, d, e1, a.seed)
                t2, r2 = run_once(n, policy, d, e2, a.seed)
                per_job[label].append(1e6 * (t2 - t1) / (r2.arrivals_run - r1.arrivals_run))
                last[label] = r2
        floor = statistics.median(per_job["batch_filling"]) if "batch_filling" in per_job else None
        for label, policy, d in todo:
            us = statistics.median(per_job[label])
            ratio = f"{us / floor:6.2f}x" if floor else "     -"
            r = last[label]
            spread = ", ".join(f"{v:.2f}" for v in per_job[label])
            print(f"  {label:<20s} d={d:<4d} {us:9.2f} us/job  {ratio} of batch_filling  "
                  f"(rounds {spread})  E[T] = {r.mean_response:.5f} +- {r.mean_response_se:.1g}",
                  flush=True)
            rows.append((n, label, d, us, us / floor if floor else float("nan")))
    print("\n| N | case | d | us per job | x batch_filling |")
    print("|---|---|---|---|---|")
    for n, label, d, us, ratio in rows:
        print(f"| {n:.0e} | {label} | {d} | {us:.2f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
