"""The driver's cost per task of a sweep of many tiny tasks, against the tasks' own simulation.

Runs ``python -m pipeline`` (a local Ray cluster on this machine's CPUs) on a grid of tiny tasks:
power-of-2, agent engine, ``--events`` events (20,000 by default), one replication, no mean
field; the grid is ``n_servers`` x ``lam`` (``n / 10`` values of N from 20 up, 10 loads from 0.5 to
0.86), so every task is about as cheap as the next. Per sweep size and with MLflow off and on
(``--mlflow off|on|both``; on: a SQLite store in a temporary folder) it prints:

- ``wall/task``: the process's wall time (imports, Ray's start, the run, analysis, archive, and
  MLflow when on) over the number of tasks;
- ``sim med``: the median task's own simulation time (the rows' ``wall_time`` column);
- ``ovh/task``: the driver's overhead per task, (wall time - the tasks' summed simulation time /
  the CPUs Ray used) / tasks: what the driver adds beyond keeping every CPU busy with
  simulations (fixed start-up costs included, so it falls as sweeps grow);
- ``marg/task``: the growth of the wall time per added task from the previous size, in which
  the fixed costs cancel (linear growth: the same figure at each size);
- ``drv cpu/task``: the driver process's own CPU time (user + system, ``wait4``) per task;
- ``marg cpu``: the growth of that CPU time per added task from the previous size (the
  driver's per-task work; on a loaded machine steadier than ``marg/task``, since the wall time
  also carries the tasks' own simulations slowed by the neighbours);
- the files written in the run folder and the archive's size;
- ``load``: the machine's 1-minute load average when the sweep started and when it ended (on a
  shared machine the wall times carry the neighbours).

It prints the CPU and the checkout's commit first (figures move between machines and with the
load of a shared one).
With ``--baseline DIR`` (another checkout of the project, e.g. a ``git worktree`` of an earlier
commit) every sweep is also run with that checkout's code, right before the same sweep with this
one (so both see the same load), and the ratio of wall times (this / baseline) is printed.
``--repeat R`` runs the whole set R times (on a loaded machine one pair's ratio moves by tens of
percent):

    nice -n 15 python benchmarks/bench_sweep_overhead.py --sizes 10 --mlflow on --repeat 4 --baseline ../base

    nice -n 15 python benchmarks/bench_sweep_overhead.py --sizes 1000 10000 --mlflow both
    nice -n 15 python benchmarks/bench_sweep_overhead.py --sizes 100000 --mlflow off   # about 20 min here
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_model  # noqa: E402

#: loads of the grid (the other axis is N)
LOADS = [round(0.5 + 0.04 * i, 2) for i in range(10)]


def overrides(n_tasks: int, events: int, out: Path, mlflow_uri: str | None, cpus: int) -> list[str]:
    if n_tasks % len(LOADS):
        raise SystemExit(f"--sizes: {n_tasks} is not a multiple of {len(LOADS)}")
    ns = list(range(20, 20 + n_tasks // len(LOADS)))
    return ["name=bench_overhead", "policies=[pod]", "engines=[agent]", "replications=1",
            f"+axes.n_servers=[{','.join(map(str, ns))}]", f"+axes.lam=[{','.join(map(str, LOADS))}]",
            "params.d=2", f"params.events={events}", f"output_dir={out}", "execution.progress=false",
            f"execution.num_cpus={cpus}",
            *(["mlflow.enabled=true", f"mlflow.tracking_uri={mlflow_uri}"] if mlflow_uri else
              ["mlflow.enabled=false"])]


def run_one(n_tasks: int, events: int, mlflow: bool, cpus: int, work: Path, root: Path = ROOT,
            tag: str = "") -> dict:
    out = work / f"run-{n_tasks}-{'mlflow' if mlflow else 'plain'}{tag}"
    uri = f"sqlite:///{work / f'mlflow-{n_tasks}{tag}.db'}" if mlflow else None  # a new store each
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(work / f"{out.name}.log", "w") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", *overrides(n_tasks, events, out, uri, cpus)],
                                cwd=work, env=env, stdout=logf, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the sweep of {n_tasks} tasks exited {proc.returncode}; see {work / out.name}.log")
    import polars as pl

    times = pl.read_parquet(out / "results.parquet")["wall_time"]
    files = sum(1 for p in out.rglob("*") if p.is_file())
    results_files = sum(1 for p in (out / "results").rglob("*") if p.is_file())
    return {"n": n_tasks, "mlflow": mlflow, "wall": wall, "sim_median": float(times.median()),
            "sim_sum": float(times.sum()), "driver_cpu": usage.ru_utime + usage.ru_stime,
            "files": files, "results_files": results_files,
            "archive_mb": (out / "archive.tar.gz").stat().st_size / 2**20,
            "load": (load_start, os.getloadavg()[0])}


def commit(root: Path) -> str:
    """The checkout's commit, with ``-dirty`` when its tracked files differ from it."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--mlflow", choices=["off", "on", "both"], default="both")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs of the local Ray cluster")
    ap.add_argument("--keep", type=Path, default=None, help="run in this folder and keep the runs")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole set this many times")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout: each sweep also run with its code, just before this one's")
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}; Ray cluster of {args.cpus} CPU(s); {args.events} events per task; "
          f"commit {commit(ROOT)}")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.mlflow]
    work_ctx = tempfile.TemporaryDirectory(prefix="bench-sweep-") if args.keep is None else None
    work = Path(work_ctx.name) if work_ctx else args.keep
    work.mkdir(parents=True, exist_ok=True)
    if args.baseline:
        print(f"baseline: {args.baseline.resolve()} (rows 'base'), this checkout: {ROOT} (rows 'this')")
    print(f"{'tasks':>7} {'mlflow':>6} {'wall s':>8} {'wall/task':>10} {'sim med':>8} {'ovh/task':>9} "
          f"{'marg/task':>9} {'drv cpu/task':>12} {'marg cpu':>9} {'files':>6} {'results/':>8} {'archive':>9} {'load':>10}")
    try:
        for rep, mlflow in [(r, m) for r in range(args.repeat) for m in modes]:
            previous = None
            for n in args.sizes:
                if args.baseline:
                    b = run_one(n, args.events, mlflow, args.cpus, work, args.baseline.resolve(), f"-{rep}-base")
                    print(f"{n:>7} {'on' if mlflow else 'off':>6} {b['wall']:>8.1f} base: median task "
                          f"{b['sim_median'] * 1e3:.2f} ms, driver CPU {b['driver_cpu']:.1f} s", flush=True)
                r = run_one(n, args.events, mlflow, args.cpus, work, tag=f"-{rep}")
                if args.baseline:
                    print(f"{n:>7} {'on' if mlflow else 'off':>6} {r['wall']:>8.1f} this: median task "
                          f"{r['sim_median'] * 1e3:.2f} ms, driver CPU {r['driver_cpu']:.1f} s; wall this/base "
                          f"{r['wall'] / b['wall']:.2f}, difference {r['wall'] - b['wall']:+.1f} s", flush=True)
                overhead = (r["wall"] - r["sim_sum"] / args.cpus) / n
                marginal = ("" if previous is None else
                            f"{(r['wall'] - previous['wall']) / (n - previous['n']) * 1e3:.2f} ms")
                marginal_cpu = ("" if previous is None else
                                f"{(r['driver_cpu'] - previous['driver_cpu']) / (n - previous['n']) * 1e3:.2f} ms")
                print(f"{n:>7} {'on' if mlflow else 'off':>6} {r['wall']:>8.1f} {r['wall'] / n * 1e3:>7.2f} ms "
                      f"{r['sim_median'] * 1e3:>5.2f} ms {overhead * 1e3:>6.2f} ms {marginal:>9} "
                      f"{r['driver_cpu'] / n * 1e3:>9.2f} ms {marginal_cpu:>9} {r['files']:>6} {r['results_files']:>8} "
                      f"{r['archive_mb']:>6.1f} MB {r['load'][0]:>4.1f}-{r['load'][1]:<4.1f}", flush=True)
                previous = r
    finally:
        if work_ctx:
            work_ctx.cleanup()


if __name__ == "__main__":
    main()
