"""Speed of the trajectory engine: does recording a path on a grid cost more than the writes?

The issue's claim (docs/transients.md): "trajectories at most the cost of writing the grid".
Prints (no assertions):

1. the power-of-d trajectory kernel (:func:`sim.dispatch._trajectory_kernel.pod_trajectory`,
   real exponential clock) at the same N, lam and number of events for grid = 2 (no recording to
   speak of) and grid = 200, 2000, 20000 and 100000 (the most it accepts): events/s, and the
   extra time over grid = 2 per grid point in ns; beside it the cost of the grid output alone
   (the grid and the NaN-filled output allocated, then the kernel's ``_record`` called ``grid``
   times on the final state in a compiled loop) -- when the two agree, the extra time is the
   writes. The extra counts as resolved when it exceeds twice the timing noise, taken as the
   median minus the best of the grid = 2 runs;
2. the occupancy engine (:func:`sim.dispatch.occupancy.simulate`, the stationary jump chain
   with the Rao-Blackwellised clock, windows and the output analysis) at the same N, lam and
   events, and the C reference loop ``pod_limit.c`` (agent-style, uniformized, one entry per
   server; built into benchmarks/pod_limit) at the same N, lam and d;
3. the batch-filling and partial-centralization trajectory kernels at grid = 200.

Every run of section 1 is the same path: the seed and the number of events are the same, the
grid only decides where the state is written (the horizon T is the time the grid = 2 probe
reached after ``events`` events, so each grid covers the whole path). The kernels alone are
timed (the ODE beside a path is solved once and cached, not part of the per-path cost). Each
figure is the best of ``--repeat`` runs after a warm-up run (compile time excluded).

Usage (from the repository root)::

    python benchmarks/bench_trajectory.py [--n 10000] [--lam 0.9] [--d 2] [--events 20000000]
        [--repeat 3] [--c-source ../shared/limits/pod_limit.c] [--skip-c]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_model  # noqa: E402
from sim.core.rng import seed_state  # noqa: E402
from sim.dispatch import _trajectory_kernel as _k  # noqa: E402
from sim.dispatch.occupancy import simulate as occupancy_simulate  # noqa: E402

GRIDS = (2, 200, 2000, 20000, 100000)  # 100000: the most the engine accepts
LEVELS = 8


def timings(fn, repeat: int):
    """(every time of ``repeat`` runs after a warm-up, the last output)."""
    fn()  # warm-up: compile / load the cache, touch memory
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def best_time(fn, repeat: int):
    times, out = timings(fn, repeat)
    return min(times), out


def pod_path(n, lam, d, t_end, grid, events, seed=1):
    t = np.linspace(0.0, t_end, grid)
    out = np.full((grid, LEVELS), np.nan)
    x0 = np.array([n], dtype=np.int64)
    x, ev, t_last, rows = _k.pod_trajectory(n, n * lam, d, x0, t, out, seed_state(seed), events)
    return x, ev, t_last, rows


@njit(cache=True)
def _writes_only(x, n_servers, out):
    for j in range(out.shape[0]):
        _k._record(x, n_servers, out, j)


def writes_only(x, n, t_end, grid, repeat):
    """Seconds to produce a grid's output without the path: the grid and the output array
    allocated as :func:`pod_path` does (``linspace``, ``full`` of NaN) and ``grid`` calls of the
    kernel's ``_record`` on the counts ``x`` (the final state of the path)."""
    def once():
        np.linspace(0.0, t_end, grid)
        out = np.full((grid, LEVELS), np.nan)
        _writes_only(x, n, out)
    sec, _ = best_time(once, repeat)
    return sec


def build_c(source: Path, binary: Path) -> Path | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None or not source.is_file():
        return None
    subprocess.run([cc, "-O3", "-march=native", "-o", str(binary), str(source), "-lm"], check=True)
    return binary


def run_c(binary: Path, n: int, lam: float, d: int, events: int, seed: int = 1) -> dict:
    out = subprocess.run([str(binary), str(n), repr(lam), str(d), str(events), str(seed)],
                         check=True, capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(\w+)=([^\s]+)", out))
    return {"events_per_s": float(fields["events_per_s"]), "seconds": float(fields["seconds"])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--lam", type=float, default=0.9)
    p.add_argument("--d", type=int, default=2)
    p.add_argument("--events", type=int, default=20_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--c-source", type=Path, default=REPO / ".." / "shared" / "limits" / "pod_limit.c")
    p.add_argument("--binary", type=Path, default=REPO / "benchmarks" / "pod_limit")
    p.add_argument("--skip-c", action="store_true")
    a = p.parse_args(argv)
    n, lam, d, ev = a.n, a.lam, a.d, a.events
    print(f"cpu: {cpu_model()}")
    print(f"N = {n}, lam = {lam}, d = {d}, {ev:,} events per run, best of {a.repeat}")

    # the horizon the path reaches after `events` events (grid = 2 probe, no cap on time)
    _, ev_probe, t_reach, _ = pod_path(n, lam, d, 1e12, 2, ev)
    t_end = t_reach * (1.0 - 1e-9)
    print(f"\n1. power-of-{d} trajectory kernel, one path of T = {t_end:.6g} "
          f"(the time {ev_probe:,} events reach)")
    base = noise = None
    for g in GRIDS:
        times, (x, evs, _, rows) = timings(lambda g=g: pod_path(n, lam, d, t_end, g, ev), a.repeat)
        sec, med = min(times), float(np.median(times))
        line = (f"  grid = {g:>6d}: best {sec:7.4f} s, median {med:7.4f} s  "
                f"{evs / sec / 1e6:6.2f} M events/s  {1e9 * sec / evs:5.1f} ns/event  "
                f"(rows written {rows}, events {evs:,})")
        if base is None:
            base, noise = sec, med - sec
            line += f"\n      timing noise (median - best): {1e3 * noise:.3f} ms"
        else:
            extra = sec - base
            w = writes_only(x, n, t_end, g, a.repeat)
            if abs(extra) <= 2 * noise:
                verdict = "within twice the timing noise: not resolved"
            elif extra <= w + 2 * noise:
                verdict = "resolved, explained by the grid output"
            else:
                verdict = f"resolved, {extra / w:.1f}x the grid output alone"
            line += (f"\n      extra over grid = 2: {1e3 * extra:+8.3f} ms ({1e9 * extra / (g - 2):+8.1f} ns "
                     f"per grid point, {100 * extra / sec:+.2f}% of the run); the grid output alone: "
                     f"{1e3 * w:.3f} ms ({1e9 * w / g:.1f} ns per point): {verdict}")
        print(line)

    print("\n2. beside it, the same N, lam and events")
    sec, _ = best_time(lambda: occupancy_simulate(n, lam, "pod", d=d, events=ev, seed=1), a.repeat)
    print(f"  occupancy engine (simulate, jump chain, windows + analysis): {sec:7.3f} s  "
          f"{ev / sec / 1e6:7.2f} M events/s  {1e9 * sec / ev:6.1f} ns/event")
    if not a.skip_c:
        binary = build_c(a.c_source, a.binary)
        if binary is None:
            print(f"  C reference: no compiler or no source at {a.c_source}: skipped")
        else:
            c = min((run_c(binary, n, lam, d, ev) for _ in range(a.repeat)),
                    key=lambda m: m["seconds"])
            print(f"  C loop pod_limit.c (uniformized, one entry per server):       "
                  f"{c['seconds']:7.3f} s  {c['events_per_s'] / 1e6:7.2f} M events/s  "
                  f"{1e9 / c['events_per_s']:6.1f} ns/event")

    print("\n3. the other trajectory kernels, grid = 200, the same events")
    from sim.centralization import _trajectory_kernel as _c

    def batch(k):
        t = np.linspace(0.0, 1e12, 200)
        out = np.full((200, LEVELS), np.nan)
        return _k.batch_trajectory(n, n * lam / k, k, d, np.array([n], dtype=np.int64), t, out,
                                   seed_state(1), ev)

    def central(pc):
        t = np.linspace(0.0, 1e12, 200)
        out = np.full((200, LEVELS), np.nan)
        top = np.full(200, np.nan)
        return _c.central_trajectory(n, lam, pc, np.array([n], dtype=np.int64), t, out, top,
                                     seed_state(1), ev)

    for label, fn in ((f"batch-filling k = 2, d = {d}", lambda: batch(2)),
                      (f"batch-filling k = 16, d = {d}", lambda: batch(16)),
                      ("partial centralization p = 0.15", lambda: central(0.15))):
        sec, res = best_time(fn, a.repeat)
        evs = res[1]
        print(f"  {label:<34s} {sec:7.3f} s  {evs / sec / 1e6:7.2f} M events/s  "
              f"{1e9 * sec / evs:6.1f} ns/event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
