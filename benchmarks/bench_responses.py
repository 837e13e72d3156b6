"""Cost of recording response-time distributions (docs/responses.md), in the same run.

For each case, both engines, with and without ``responses=True``, best of ``--repeat`` runs
after a warm-up run (compile time excluded), the runs with and without recording interleaved
so that load from other processes on the machine hits both alike. Process CPU time of the
whole ``simulate`` call (set-up, event loop, output analysis -- the distribution's root finding
included). Cases (N = 10**4, lam = 0.9):

- power-of-2 (k = 1): the single-task agent engine :func:`sim.dispatch.agent.simulate` (where
  the pipeline runs single-task pod tasks, recording or not), the parallel-job agent engine
  :func:`sim.dispatch.agent_jobs.simulate` with ``batch_filling``, k = 1 (the same model), and
  occupancy ``pod``;
- batch-filling, k = 16, d = 2;
- JIQ (``jiq``, r = 10) on the JIQ agent and occupancy engines.

Prints events/s and the slowdown ``1 - (events/s with) / (events/s without)`` (the budget is
20%), and the slowdown of the event loop alone: without the fixed cost of the quantiles' root
finding (:func:`sim.core.responses.summarize`, timed separately; it does not grow with the run
length). No assertions. On a loaded machine the figures move by several percent between runs:
use a large ``--repeat``.

Usage (from the repository root)::

    python benchmarks/bench_responses.py [--events 10000000] [--repeat 3] [--case TEXT ...]

``--case TEXT`` (repeatable) runs only the cases whose label contains ``TEXT``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model, engine_arguments  # noqa: E402


def timed(fn):
    """Process CPU time of ``fn()`` (the machine is shared: CPU time is less disturbed by other
    processes than wall time; the kernels are single-threaded) and its result."""
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


_SUMMARY = {"sec": 0.0}


def _timed_summaries():
    """Wrap the engines' ``summarize`` to add its CPU time to ``_SUMMARY``."""
    from sim.core import responses
    from sim.dispatch import agent, agent_jobs, occupancy
    from sim.jiq import agent as jiq_agent
    from sim.jiq import occupancy as jiq_occupancy

    def wrapped(*a, **kw):
        t0 = time.process_time()
        out = responses.summarize(*a, **kw)
        _SUMMARY["sec"] += time.process_time() - t0
        return out

    agent.summarize = occupancy.summarize = agent_jobs.summarize = wrapped
    jiq_agent.summarize = jiq_occupancy.summarize = wrapped


def compare(label, fn, events, repeat):
    """Interleaved best-of-``repeat`` CPU times of ``fn(False)`` and ``fn(True)``."""
    fn(False)
    fn(True)  # warm-up (compile / load the cache)
    best = {False: float("inf"), True: float("inf")}
    best_summary = float("inf")
    out = {}
    for _ in range(repeat):
        for rec in (False, True):
            _SUMMARY["sec"] = 0.0
            sec, out[rec] = timed(lambda: fn(rec))
            best[rec] = min(best[rec], sec)
            if rec:
                best_summary = min(best_summary, _SUMMARY["sec"])
    off, on = events / best[False], events / best[True]
    loop = 1 - best[False] / (best[True] - best_summary)
    q = out[True].responses.quantiles
    print(f"{label:44s} {off / 1e6:7.2f} {on / 1e6:7.2f} {100 * (1 - on / off):7.1f}% "
          f"{100 * loop:7.1f}% {best_summary:7.3f}s  p50={q[0]:.4g} p99.9={q[3]:.4g} "
          f"(grid-only jobs: {100 * out[True].responses.grid_only_fraction:.2g}%)")
    return off, on


def main(argv=None):
    ap = engine_arguments(__doc__, events=10**7)
    ap.add_argument("--n", type=int, default=10**4)
    ap.add_argument("--case", action="append", default=None,
                    help="run only the cases whose label contains this text (repeatable)")
    args = ap.parse_args(argv)
    from sim.dispatch import agent, agent_jobs, occupancy
    from sim.jiq import agent as jiq_agent
    from sim.jiq import occupancy as jiq_occupancy

    n, lam, ev, rep = args.n, args.lam, args.events, args.repeat
    print(f"CPU: {cpu_model()}")
    print(f"N = {n}, lam = {lam}, {ev} events per run, best of {rep} (interleaved)")
    _timed_summaries()
    print(f"{'case':44s} {'Mev/s':>7s} {'Mev/s':>7s} {'slow-':>8s} {'loop':>7s} {'root':>8s}")
    print(f"{'':44s} {'off':>7s} {'on':>7s} {'down':>8s} {'alone':>7s} {'finding':>8s}")

    # (label, engine's simulate, policy, its parameters): each run at N, lam, ev events, seed 1
    cases = [("pod d=2, agent (single-task engine)", agent.simulate, "pod", {"d": 2}),
             ("pod d=2, agent (k-task engine, k=1)", agent_jobs.simulate, "batch_filling", {"k": 1, "d": 2}),
             ("pod d=2, occupancy", occupancy.simulate, "pod", {"d": 2}),
             ("batch_filling k=16 d=2, agent", agent_jobs.simulate, "batch_filling", {"k": 16, "d": 2}),
             ("batch_filling k=16 d=2, occupancy", occupancy.simulate, "batch_filling", {"k": 16, "d": 2}),
             ("jiq r=10, JIQ agent", jiq_agent.simulate, "jiq", {"r": 10}),
             ("jiq r=10, JIQ occupancy", jiq_occupancy.simulate, "jiq", {"r": 10})]
    for label, simulate, policy, kw in cases:
        if args.case is None or any(c in label for c in args.case):
            compare(label, lambda r, simulate=simulate, policy=policy, kw=kw:
                    simulate(n, lam, policy, **kw, events=ev, seed=1, responses=r), ev, rep)


if __name__ == "__main__":
    main()
