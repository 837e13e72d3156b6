"""Speed of the occupancy engine: per-event cost against N, and against the agent engine.

Prints (no assertions):

1. time per event of :func:`sim.dispatch.occupancy.simulate` at N = 10**3 and N = 10**9 (same policy,
   load and number of events; the ratio should be close to 1 -- the state is the counts per
   queue length, so nothing grows with N) for batch-filling with k = 16 and a moderate d, and
   for power-of-d with k = 1;
2. power-of-d (k = 1) at N = 10**6 in the occupancy engine and in the agent engine
   (:func:`sim.dispatch.agent.simulate`): events/s and wall time per job. The two engines count events
   differently (agent: uniformized events of rate N*(1 + lam), a service token at an idle server
   wasted; occupancy: jump-chain transitions of rate N*lam + busy), so time per *job* is the
   like-for-like figure;
3. batch-filling at N = 10**6 in the occupancy engine and, if ``sim/dispatch/agent_jobs.py`` exists
   (agent engine for k-task jobs, written concurrently), in that engine: time per job;
4. the headline's batch sample at N = 10**6 (``sub_halfin_whitt``'s single-task rule: k = 191,
   d = 64, k d = 12,224 queues, stop at k idle ones) on the counts of a state near its fixed
   point: per sample, server by server (:func:`sim.core.sampling.draw_levels`) against level
   counts by hypergeometrics (:func:`sim.core.sampling.draw_levels_hg`, which the engine uses for
   samples of at least ``HG_MIN_SAMPLE`` queues).

Each figure is the best of ``--repeat`` runs after a warm-up run (compile time excluded).
Wall times include the whole ``simulate`` call (set-up and output analysis).

Usage (from the repository root)::

    python benchmarks/bench_occupancy.py [--events 20000000] [--lam 0.9] [--k 16] [--d 4]
        [--repeat 3] [--skip-agent]
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model, engine_arguments  # noqa: E402
from sim.dispatch.occupancy import simulate  # noqa: E402


def best_time(fn, repeat: int):
    fn()  # warm-up: compile / load the cache, touch memory
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def occupancy(n, lam, policy, k, d, events, repeat):
    sec, r = best_time(lambda: simulate(n, lam, policy, k=k, d=d, events=events, seed=1), repeat)
    jobs = r.arrivals_run
    return {"sec": sec, "ns_per_event": 1e9 * sec / events, "events_per_s": events / sec,
            "us_per_job": 1e6 * sec / jobs, "mean_response": r.mean_response,
            "se": r.mean_response_se}


def agent_pod(n, lam, d, events, repeat):
    from sim.dispatch.agent import simulate as agent_simulate

    sec, r = best_time(lambda: agent_simulate(n, lam, "pod", d=d, events=events, seed=1), repeat)
    jobs = events * lam / (1.0 + lam)  # expected arrivals among the uniformized events
    return {"sec": sec, "ns_per_event": 1e9 * sec / events, "events_per_s": events / sec,
            "us_per_job": 1e6 * sec / jobs, "mean_response": r.mean_response,
            "se": r.mean_response_se}


def parallel_batch_filling(n, lam, k, d, events, repeat):
    from sim.dispatch.agent_jobs import simulate as parallel_simulate

    sec, r = best_time(lambda: parallel_simulate(n, lam, "batch_filling", k=k, d=d,
                                                 events=events, seed=1), repeat)
    jobs = events * (lam / k) / (lam / k + 1.0)  # expected arrivals among uniformized events
    return {"sec": sec, "ns_per_event": 1e9 * sec / events, "events_per_s": events / sec,
            "us_per_job": 1e6 * sec / jobs, "mean_response": r.mean_response,
            "se": r.mean_response_se}


def show(label, m):
    print(f"  {label:<44s} {m['ns_per_event']:8.1f} ns/event  {m['events_per_s'] / 1e6:7.2f} "
          f"M events/s  {m['us_per_job']:8.3f} us/job   E[T] = {m['mean_response']:.5f} "
          f"+- {m['se']:.1g}")


def main(argv=None) -> int:
    p = engine_arguments(__doc__, events=20_000_000)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--d", type=int, default=4, help="batch-filling probes per task")
    p.add_argument("--pod-d", type=int, default=2)
    p.add_argument("--skip-agent", action="store_true")
    a = p.parse_args(argv)
    ev, lam = a.events, a.lam
    print(f"cpu: {cpu_model()}")
    print(f"occupancy engine, lam = {lam}, {ev:,} events per run, best of {a.repeat}")

    print("\n1. per-event cost against N")
    for policy, k, d in (("batch_filling", a.k, a.d), ("pod", 1, a.pod_d)):
        small = occupancy(10**3, lam, policy, k, d, ev, a.repeat)
        large = occupancy(10**9, lam, policy, k, d, ev, a.repeat)
        show(f"{policy} k={k} d={d} N=1e3", small)
        show(f"{policy} k={k} d={d} N=1e9", large)
        print(f"  -> time per event N=1e9 / N=1e3: "
              f"{large['ns_per_event'] / small['ns_per_event']:.2f}")

    if not a.skip_agent:
        print(f"\n2. power-of-{a.pod_d}, k = 1, N = 1e6: occupancy vs agent")
        o = occupancy(10**6, lam, "pod", 1, a.pod_d, ev, a.repeat)
        g = agent_pod(10**6, lam, a.pod_d, ev, a.repeat)
        show("occupancy (jump-chain events)", o)
        show("agent (uniformized events)", g)
        print(f"  -> time per job agent / occupancy: {g['us_per_job'] / o['us_per_job']:.2f}")

    print(f"\n3. batch-filling k = {a.k}, d = {a.d}, N = 1e6: occupancy vs sim.dispatch.agent_jobs")
    o = occupancy(10**6, lam, "batch_filling", a.k, a.d, ev, a.repeat)
    show("occupancy (jump-chain events)", o)
    if a.skip_agent:
        pass
    elif importlib.util.find_spec("sim.dispatch.agent_jobs") is None:
        print("  sim/dispatch/agent_jobs.py does not exist: skipped")
    else:
        g = parallel_batch_filling(10**6, lam, a.k, a.d, ev, a.repeat)
        show("sim.dispatch.agent_jobs agent (uniformized events)", g)
        print(f"  -> time per job parallel / occupancy: {g['us_per_job'] / o['us_per_job']:.2f}")

    print("\n4. one batch sample of 12,224 of 10^6 queues (k = 191), stop at k idle: draws vs level counts")
    one, hg = sample_costs(a.repeat)
    print(f"  server by server (draw_levels)      {one:9.2f} us/sample")
    print(f"  level counts (draw_levels_hg)       {hg:9.2f} us/sample")
    print(f"  -> draws / level counts: {one / hg:.1f}")
    return 0


def sample_costs(repeat: int, samples: int = 20_000) -> tuple[float, float]:
    """Microseconds per sample of :func:`draw_levels` and :func:`draw_levels_hg` (best of
    ``repeat``) on counts like the headline's N = 10**6 state: 1.6% idle, a short tail."""
    import numpy as np
    from numba import njit

    from sim.core.sampling import draw_levels, draw_levels_hg

    @njit(cache=False)
    def loop(x, n, stop, samples, fast, state):
        hs = np.zeros(x.size + 2, dtype=np.int64)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        n_servers = x.sum()
        acc = 0
        for _ in range(samples):
            if fast:
                top, s0, s1, s2, s3 = draw_levels_hg(x, n_servers, n, 0, stop, hs, s0, s1, s2, s3)
            else:
                top, s0, s1, s2, s3 = draw_levels(x, n_servers, n, 0, stop, hs, s0, s1, s2, s3)
            acc += hs[0]
            for i in range(top + 1):
                hs[i] = 0
        return acc

    x = np.array([15_850, 900_000, 70_000, 14_150, 0, 0], dtype=np.int64)
    state = np.random.SeedSequence(0).generate_state(4, dtype=np.uint64)
    out = []
    for fast in (False, True):
        loop(x, 12_224, 191, 10, fast, state)
        sec, _ = best_time(lambda f=fast: loop(x, 12_224, 191, samples, f, state), repeat)
        out.append(sec / samples * 1e6)
    return out[0], out[1]


if __name__ == "__main__":
    raise SystemExit(main())
