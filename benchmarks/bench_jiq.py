"""Speed of the JIQ engines (prints figures; no assertions).

Agent half: events per second of :func:`sim.jiq.agent.simulate` for ``jiq`` and ``jiq_pod``
(d = 2) at N = 10**4 and 10**6 (r = 10, lam = 0.9), beside the dispatch model's power-of-d agent
engine (:func:`sim.dispatch.agent.simulate` with ``pod``, d = 2) on the same load, which counts
events the same way (uniformized events of rate N (1 + lam), a service token at an idle server
wasted), so ns/event is the like-for-like figure. Target: the JIQ agent within 1.5x of the pod
agent's cost per event.

Each figure is the best of ``--repeat`` runs after a warm-up run (compile time and first-touch
of the cache excluded), the cases interleaved in each round so that they share the machine's
load, in CPU time of this process and its children (``time.process_time`` plus
``RUSAGE_CHILDREN``: on a machine shared with other jobs, wall time measures the neighbours
too; both are printed). Beside them, the C loop ``../shared/limits/pod_limit.c`` (gcc -O3
-march=native, built by :mod:`benchmarks.bench_agent_vs_c` into ``benchmarks/pod_limit``) on
the same power-of-2 workload (group ``"c"``), timed the same way (its process start is a
constant that the marginal cost removes). A run includes set-up
(O(N): initial state, ring buffers) and output analysis; to report the cost of the event loop
alone, each case is timed at two run lengths and the *marginal* cost ``(t2 - t1) / (E2 - E1)``
is shown beside the plain one. The cost ratios use the marginal CPU costs.

Extending: a case is a :class:`Case` (label, engine group, a function ``run(n, events)``) in
:data:`CASES`; the occupancy half adds its own cases (e.g. a group ``"occupancy"``) to the list
or through :func:`register`, and :func:`main` times whatever is registered, with ``--only``
selecting groups.

Before / after a change of the agent kernel, in one run (the machine's load moves between
runs): ``--baseline FILE`` also times the JIQ agent with the kernel module at ``FILE`` (a copy
of ``sim/jiq/_agent_kernel.py`` taken before the change; group ``"baseline"``, ratios printed
like the agent's). Its cases run through the same :func:`sim.jiq.agent.simulate`, with the
module swapped in for the duration of each call.

Usage (from the repository root)::

    python benchmarks/bench_jiq.py [--sizes 10000 1000000] [--events 4000000 16000000]
        [--repeat 3] [--only agent dispatch c] [--baseline /tmp/old_agent_kernel.py]
"""
from __future__ import annotations

import argparse
import platform
import random
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model  # noqa: E402

LAM, R = 0.9, 10


@dataclass(frozen=True)
class Case:
    label: str
    group: str  #: engine group, e.g. "agent", "dispatch", "occupancy"
    run: Callable[[int, int], object]  #: run(n_servers, events) -> a result with mean_response


CASES: list[Case] = []


def register(case: Case) -> Case:
    CASES.append(case)
    return case


def _jiq_agent(policy: str, d: int = 1, kernel=None):
    def run(n, events):
        from sim.jiq import agent

        if kernel is None:
            return agent.simulate(n, LAM, policy, R, d=d, events=events, seed=1)
        current = agent._k
        agent._k = kernel
        try:
            return agent.simulate(n, LAM, policy, R, d=d, events=events, seed=1)
        finally:
            agent._k = current
    return run


def load_kernel(path: str):
    """The kernel module at ``path`` (a copy of ``sim/jiq/_agent_kernel.py``), importable by
    numba's cache under its own name."""
    import importlib.util

    name = "bench_jiq_baseline_kernel"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def register_baseline(path: str) -> None:
    """Add the JIQ agent cases run with the kernel module at ``path`` (group "baseline")."""
    kernel = load_kernel(path)
    register(Case("baseline jiq agent, jiq", "baseline", _jiq_agent("jiq", kernel=kernel)))
    register(Case("baseline jiq agent, jiq_pod d=2", "baseline",
                  _jiq_agent("jiq_pod", 2, kernel=kernel)))


def _dispatch_pod(d: int):
    def run(n, events):
        from sim.dispatch.agent import simulate

        return simulate(n, LAM, "pod", d=d, events=events, seed=1)
    return run


def _c_reference(d: int):
    """The C loop ``../shared/limits/pod_limit.c`` (power-of-d, the same uniformized events;
    built with gcc -O3 -march=native by :mod:`benchmarks.bench_agent_vs_c`): the physical
    limit of an event loop on this machine, run in the same session as the engines."""
    state = {}

    def run(n, events):
        from benchmarks.bench_agent_vs_c import build_c, run_c

        if "binary" not in state:
            state["binary"] = build_c((REPO / ".." / "shared" / "limits" / "pod_limit.c").resolve(),
                                      REPO / "benchmarks" / "pod_limit")
        out = run_c(state["binary"], n, LAM, d, events, 1)
        return _CResult(out["mean_response"], float("nan"))
    return run


@dataclass(frozen=True)
class _CResult:
    mean_response: float
    mean_response_se: float


register(Case("jiq agent, jiq", "agent", _jiq_agent("jiq")))
register(Case("jiq agent, jiq_pod d=2", "agent", _jiq_agent("jiq_pod", 2)))
register(Case("dispatch agent, pod d=2 (reference)", "dispatch", _dispatch_pod(2)))
register(Case("C loop pod_limit.c, pod d=2", "c", _c_reference(2)))




def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the C loop runs as one)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def measure_all(cases: list[Case], n: int, events: tuple[int, int], repeat: int) -> dict:
    """Best CPU and wall time of each case at both run lengths, the cases interleaved in each
    of ``repeat`` rounds (in a shuffled order) so that they share the machine's load."""
    e1, e2 = events
    for case in cases:
        case.run(n, min(e1, 10 * n + 10**5))  # warm-up: compile or load the cache
    best = {c.label: {"c1": float("inf"), "c2": float("inf"), "w2": float("inf")} for c in cases}
    results = {}
    order = list(cases)
    rng = random.Random(0)
    for _ in range(repeat):
        rng.shuffle(order)
        for case in order:
            for key, ev in (("c1", e1), ("c2", e2)):
                c0, w0 = cpu_seconds(), time.perf_counter()
                res = case.run(n, ev)
                cpu, wall = cpu_seconds() - c0, time.perf_counter() - w0
                b = best[case.label]
                b[key] = min(b[key], cpu)
                if key == "c2":
                    b["w2"] = min(b["w2"], wall)
                    results[case.label] = res
    out = {}
    for case in cases:
        b, res = best[case.label], results[case.label]
        marginal = (b["c2"] - b["c1"]) / (e2 - e1) if b["c2"] > b["c1"] else float("nan")
        out[case.label] = {"ns_per_event": 1e9 * b["c2"] / e2, "events_per_s": e2 / b["c2"],
                           "wall_ns_per_event": 1e9 * b["w2"] / e2, "marginal_ns": 1e9 * marginal,
                           "mean_response": float(res.mean_response),
                           "se": float(res.mean_response_se)}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**6])
    ap.add_argument("--events", type=int, nargs=2, default=[4_000_000, 16_000_000],
                    help="two run lengths (the marginal cost is their difference)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=None, help="engine groups to time")
    ap.add_argument("--baseline", default=None,
                    help="also time the JIQ agent with this copy of sim/jiq/_agent_kernel.py")
    args = ap.parse_args(argv)
    if args.baseline and not any(c.group == "baseline" for c in CASES):
        register_baseline(args.baseline)
    print(f"CPU: {cpu_model()}  (python {platform.python_version()})")
    print(f"lam = {LAM}, r = {R}; best of {args.repeat} after a warm-up, CPU time; "
          f"events {args.events[1]:,} (marginal: {args.events[1]:,} - {args.events[0]:,})")
    out = {}
    for n in args.sizes:
        print(f"N = {n:,}")
        cases = [c for c in CASES if not args.only or c.group in args.only]
        got = measure_all(cases, n, tuple(args.events), args.repeat)
        ref = None
        for case in cases:
            m = got[case.label]
            out[(case.label, n)] = m
            if case.group == "dispatch":
                ref = m
            se = "" if m["se"] != m["se"] else f" +- {m['se']:.4f}"  # the C loop has no SE
            print(f"  {case.label:<38s} cpu {m['ns_per_event']:7.1f} ns/event "
                  f"({m['events_per_s'] / 1e6:6.2f} M events/s), marginal "
                  f"{m['marginal_ns']:7.1f} ns; wall {m['wall_ns_per_event']:7.1f} ns/event; "
                  f"E[T] = {m['mean_response']:.4f}{se}")
        if ref is not None:
            for case in cases:
                m = out[(case.label, n)]
                if case.group in ("agent", "baseline"):
                    print(f"  cost per event, {case.label} / pod agent: marginal "
                          f"{m['marginal_ns'] / ref['marginal_ns']:.2f}, whole run "
                          f"{m['ns_per_event'] / ref['ns_per_event']:.2f} (target <= 1.5)")
                elif case.group == "c":
                    print(f"  cost per event, pod agent / {case.label}: marginal "
                          f"{ref['marginal_ns'] / m['marginal_ns']:.2f}")
    return out


if __name__ == "__main__":
    main()
