"""Cost per jump of the occupancy engine against its C loop, at N = 10**3 .. 10**9 (issue 22).

Prints (no assertions):

1. ``occupancy``: the single-task occupancy engine (:func:`sim.dispatch.occupancy.simulate`,
   policies ``pod`` d = 2, ``random`` and ``jsq``) beside the C jump chain
   ``../shared/limits/occupancy_limit.c`` (power-of-2 on the counts, group ``c``) at each N and
   load: marginal CPU ns per jump and the ratio engine / C (target <= 1.5). Both count the same
   jumps (arrivals and service completions of the jump chain, rate ``N lam + busy``) from the
   same mean-field start; the C loop computes the mean response only (by Little's law), the
   engine every estimate it reports (per-window sums, lazy tail and queue areas, warm-up cut,
   batch means). ``random`` and ``jsq`` have no C loop of their own: their ratio is to the
   power-of-2 C loop of the same N and load.
2. ``agent`` (optional, ``--only agent``): the dispatch agent engine (``pod`` d = 2) beside
   ``../shared/limits/pod_limit.c`` at N = 10**4, 10**6 and 10**7 (``--agent-sizes``), both on
   uniformized events. The agent starts at the mean-field fixed point (its default
   ``init="meanfield"``), ``pod_limit.c`` empty, so at these run lengths (a few events per
   server at N = 10**7) the C loop would be timed far from its steady state (fewer busy
   servers, other branch outcomes). The ratio is therefore taken against a warm-started copy
   (``C pod_limit.c warm``): the file copied into the temporary build directory with one
   change, inserted before its event loop: the queues drawn i.i.d. from the same mean-field
   law, ``P(Q >= i) = lam**((d**i - 1) / (d - 1))``, by inversion of one ``u01()`` per server
   taken from the loop's xoshiro stream before the loop (``total`` set to their sum); the
   loop, its 20% warm-up cut and its output are unchanged. The unchanged file, started empty,
   is timed beside it.
3. ``batch``: batch-filling (k = 16, d = 4, N = 10**6, lam = 0.9) in the occupancy engine,
   marginal CPU per job, against its floor: the job's ``k + 1`` jumps (its arrival and its
   ``k`` service completions) at the per-jump cost of the single-task power-of-2 engine timed
   in the same rounds, and, as a second yardstick, ``k`` single-task jobs (``k`` arrivals and
   ``k`` completions). The batch job also draws up to ``k*d`` queues where ``k`` power-of-2
   jobs draw at most ``2k``, which neither floor counts.

Timing, as in ``bench_jiq.py``: CPU time (``time.process_time`` for the engines, plus
``RUSAGE_CHILDREN`` for the C child process), each case at two run lengths ``E1 < E2``, the
marginal cost ``(t2 - t1) / (E2 - E1)`` (compile time, set-up, process start and output
analysis drop out), best of ``--repeat`` rounds after a warm-up run, the cases of one N
interleaved in each round in a shuffled order so that they share the machine's load. The C
loop is built with ``gcc -O3 -march=native`` into a temporary directory (the agent's
``pod_limit`` into ``benchmarks/pod_limit``, gitignored, by :mod:`benchmarks.bench_agent_vs_c`).

Usage (from the repository root)::

    python benchmarks/bench_limits.py [--sizes 1000 1000000 1000000000] [--lams 0.9 0.98]
        [--events 4000000 20000000] [--repeat 3] [--only occupancy c agent batch]
        [--policies pod random jsq]
"""
from __future__ import annotations

import argparse
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model  # noqa: E402

LIMITS = (REPO / ".." / "shared" / "limits").resolve()
D = 2  #: power-of-d of the single-task cases
BATCH_K, BATCH_D, BATCH_N, BATCH_LAM = 16, 4, 10**6, 0.9
AGENT_SIZES = (10**4, 10**6, 10**7)
#: inserted before pod_limit.c's event loop in the warm-started copy (see the docstring)
_WARM_ANCHOR = "  const double rate = N * (1.0 + lam), parr = lam / (1.0 + lam);\n"
_WARM_START = """\
  /* warm start (added by bench_limits.py): queue lengths i.i.d. from the mean-field fixed
     point of power-of-d, P(Q >= i) = lam^((d^i - 1)/(d - 1)), by inversion */
  for (uint32_t n = 0; n < N; n++) { double u = u01(), ex = 1; uint32_t l = 0;
    while (pow(lam, ex) > u) { l++; ex = d > 1 ? ex * d + 1 : ex + 1; }
    q[n] = l; total += l; }
"""


@dataclass(frozen=True)
class Case:
    label: str
    group: str  #: "occupancy", "c", "agent", "agent_c", "batch"
    run: Callable[[int, float, int], "Run"]  #: run(n_servers, lam, events) -> Run


@dataclass(frozen=True)
class Run:
    mean_response: float
    se: float  #: nan for the C loops
    jobs: int  #: arriving jobs in the whole run (-1 where not known: C loops, agent)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the C loops run as one)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def build(source: Path, binary: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise SystemExit("no C compiler (gcc/cc) on PATH")
    subprocess.run([cc, "-O3", "-march=native", "-o", str(binary), str(source), "-lm"],
                   check=True)
    return binary


def _occupancy(policy: str, k: int = 1, d: int = D):
    def run(n, lam, events):
        from sim.dispatch.occupancy import simulate

        r = simulate(n, lam, policy, k=k, d=d, events=events, seed=1)
        return Run(r.mean_response, r.mean_response_se, r.arrivals_run)
    return run


def _occupancy_c(binary_dir: Path):
    state = {}

    def run(n, lam, events):
        if "bin" not in state:
            state["bin"] = build(LIMITS / "occupancy_limit.c", binary_dir / "occupancy_limit")
        out = subprocess.run([str(state["bin"]), str(n), repr(lam), str(D), str(events), "1"],
                             check=True, capture_output=True, text=True).stdout.split()
        return Run(float(out[6]), float("nan"), -1)
    return run


def _agent(policy: str = "pod"):
    def run(n, lam, events):
        from sim.dispatch.agent import simulate

        r = simulate(n, lam, policy, d=D, events=events, seed=1)
        return Run(r.mean_response, r.mean_response_se, -1)
    return run


def _agent_c(binary_dir: Path | None = None):
    """``pod_limit.c`` as it is (``binary_dir`` None: built into ``benchmarks/pod_limit``), or
    its warm-started copy built in ``binary_dir`` (see the module docstring)."""
    state = {}

    def run(n, lam, events):
        from benchmarks.bench_agent_vs_c import build_c, run_c

        if "bin" not in state:
            if binary_dir is None:
                state["bin"] = build_c(LIMITS / "pod_limit.c", REPO / "benchmarks" / "pod_limit")
            else:
                src = (LIMITS / "pod_limit.c").read_text()
                if src.count(_WARM_ANCHOR) != 1:
                    raise SystemExit("pod_limit.c changed: cannot insert the warm start")
                warm = binary_dir / "pod_limit_warm.c"
                warm.write_text(src.replace(_WARM_ANCHOR, _WARM_START + _WARM_ANCHOR))
                state["bin"] = build_c(warm, binary_dir / "pod_limit_warm")
        out = run_c(state["bin"], n, lam, D, events, 1)
        return Run(out["mean_response"], float("nan"), -1)
    return run


def measure(cases: list[Case], n: int, lam: float, events: tuple[int, int], repeat: int,
            rng: random.Random) -> dict:
    """Best CPU time of each case at both run lengths, interleaved in shuffled rounds."""
    e1, e2 = events
    for case in cases:
        case.run(n, lam, min(e1, 10**6))  # warm-up: compile or load the cache, build the C
    best = {c.label: [float("inf"), float("inf")] for c in cases}
    runs: dict[str, list[Run]] = {c.label: [None, None] for c in cases}
    order = list(cases)
    for _ in range(repeat):
        rng.shuffle(order)
        for case in order:
            for i, ev in enumerate((e1, e2)):
                c0 = cpu_seconds()
                res = case.run(n, lam, ev)
                cpu = cpu_seconds() - c0
                best[case.label][i] = min(best[case.label][i], cpu)
                runs[case.label][i] = res
    out = {}
    for case in cases:
        (t1, t2), (r1, r2) = best[case.label], runs[case.label]
        out[case.label] = {"marginal_ns": 1e9 * (t2 - t1) / (e2 - e1),
                           "whole_ns": 1e9 * t2 / e2,
                           "us_per_job": (1e6 * (t2 - t1) / (r2.jobs - r1.jobs)
                                          if r2.jobs > r1.jobs else float("nan")),
                           "jumps_per_job": (e2 - e1) / (r2.jobs - r1.jobs)
                                            if r2.jobs > r1.jobs else float("nan"),
                           "mean_response": r2.mean_response, "se": r2.se}
    return out


def show(label: str, m: dict) -> None:
    se = "" if m["se"] != m["se"] else f" +- {m['se']:.4f}"
    print(f"    {label:<34s} marginal {m['marginal_ns']:6.1f} ns/jump (whole run "
          f"{m['whole_ns']:6.1f}); E[T] = {m['mean_response']:.4f}{se}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**6, 10**9])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.9, 0.98])
    ap.add_argument("--events", type=int, nargs=2, default=[4_000_000, 20_000_000],
                    help="two run lengths in jumps (the marginal cost is their difference)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", nargs="+", default=["pod", "random", "jsq"])
    ap.add_argument("--only", nargs="+", default=None,
                    help="sections: occupancy (with its C loop), agent, batch")
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffled order")
    ap.add_argument("--agent-sizes", type=int, nargs="+", default=list(AGENT_SIZES),
                    help="N of the agent section")
    args = ap.parse_args(argv)
    sections = args.only or ["occupancy", "batch"]
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bench_limits_"))
    c_case = Case(f"C occupancy_limit.c, pod d={D}", "c", _occupancy_c(tmp))
    engine = {p: Case(f"occupancy {p}" + (f" d={D}" if p == "pod" else ""), "occupancy",
                      _occupancy(p)) for p in args.policies}
    print(f"CPU: {cpu_model()}  (python {platform.python_version()})")
    print(f"best of {args.repeat} after a warm-up, CPU time, marginal over "
          f"{args.events[1]:,} - {args.events[0]:,} jumps; cases interleaved, shuffled")
    out: dict = {}
    try:
        if "occupancy" in sections or "c" in sections:
            print("\n1. single-task occupancy engine vs the C jump chain occupancy_limit.c")
            table = []
            for n in args.sizes:
                for lam in args.lams:
                    print(f"  N = {n:.0e}, lam = {lam}")
                    cases = [c_case] + list(engine.values())
                    got = measure(cases, n, lam, tuple(args.events), args.repeat, rng)
                    c = got[c_case.label]
                    for case in cases:
                        show(case.label, got[case.label])
                    row = {"n": n, "lam": lam, "c": c["marginal_ns"]}
                    for p, case in engine.items():
                        row[p] = got[case.label]["marginal_ns"]
                    table.append(row)
                    out[(n, lam)] = got
            print("\n  marginal ns per jump (ratio engine / C, target <= 1.5)")
            head = "".join(f"{p:>18s}" for p in engine)
            print(f"  {'N':>6s} {'lam':>5s} {'C':>7s}{head}")
            for row in table:
                cells = "".join(f"{row[p]:8.1f} ({row[p] / row['c']:4.2f}x)  " for p in engine)
                print(f"  {row['n']:6.0e} {row['lam']:5.2f} {row['c']:7.1f}  {cells}")

        if "agent" in sections:
            print(f"\n2. dispatch agent engine vs pod_limit.c (pod d={D}, uniformized events)")
            a_eng = Case(f"agent pod d={D} (mean-field start)", "agent", _agent())
            a_cw = Case(f"C pod_limit.c warm, pod d={D}", "agent_c", _agent_c(tmp))
            a_c = Case("C pod_limit.c as is (empty start)", "agent_c", _agent_c())
            cases = [a_eng, a_cw, a_c]
            for n in args.agent_sizes:
                for lam in args.lams:
                    print(f"  N = {n:.0e}, lam = {lam}")
                    got = measure(cases, n, lam, tuple(args.events), args.repeat, rng)
                    for case in cases:
                        show(case.label, got[case.label])
                    r = got[a_eng.label]["marginal_ns"] / got[a_cw.label]["marginal_ns"]
                    r0 = got[a_eng.label]["marginal_ns"] / got[a_c.label]["marginal_ns"]
                    print(f"    -> agent / C warm: {r:.2f} (target <= 1.5; agent / C as is, "
                          f"not in its steady state: {r0:.2f})")
                    out[("agent", n, lam)] = got
            print("  (both warm-started loops are in steady state from the first event: compare "
                  "their E[T] with the empty-started C's)")

        if "batch" in sections:
            k, d, n, lam = BATCH_K, BATCH_D, BATCH_N, BATCH_LAM
            print(f"\n3. batch-filling k = {k}, d = {d}, N = {n:.0e}, lam = {lam}: cost per job "
                  f"against its floor")
            b_case = Case(f"occupancy batch_filling k={k} d={d}", "batch",
                          _occupancy("batch_filling", k, d))
            p_case = Case(f"occupancy pod d={D}", "occupancy", _occupancy("pod"))
            # jumps per batch job are (k + 1) / k of the single-task chain's: fewer jobs per
            # jump, so the same run lengths in jobs need about k / 2 times as many jumps
            got = measure([b_case, p_case, c_case], n, lam, tuple(args.events), args.repeat,
                          rng)
            for case in (b_case, p_case, c_case):
                show(case.label, got[case.label])
            b, p, c = got[b_case.label], got[p_case.label], got[c_case.label]
            job_ns = 1e3 * b["us_per_job"]
            floor_jumps = (k + 1) * p["marginal_ns"]
            floor_jobs = k * 1e3 * p["us_per_job"]
            floor_c = (k + 1) * c["marginal_ns"]
            print(f"    batch-filling: {job_ns:7.1f} ns per job ({b['jumps_per_job']:.2f} jumps "
                  f"per job, {b['marginal_ns']:.1f} ns per jump)")
            print(f"    floor (k+1) jumps x single-task engine's {p['marginal_ns']:.1f} ns/jump: "
                  f"{floor_jumps:7.1f} ns -> job / floor {job_ns / floor_jumps:.2f}")
            print(f"    k single-task jobs ({p['jumps_per_job']:.2f} jumps, "
                  f"{1e3 * p['us_per_job']:.1f} ns each): {floor_jobs:7.1f} ns -> job / that "
                  f"{job_ns / floor_jobs:.2f}")
            print(f"    (k+1) jumps x C loop's {c['marginal_ns']:.1f} ns/jump: {floor_c:7.1f} ns "
                  f"-> job / that {job_ns / floor_c:.2f}")
            out["batch"] = got
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
