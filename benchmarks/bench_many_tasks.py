"""A sweep of many tiny tasks through the real driver: SIGKILL part-way, resume, reproduce.

The benchmark form of tests/integration/test_many_tasks.py (which runs it at 10^4 in CI), for the
sizes a test cannot afford (10^5 tasks). The sweep is bench_sweep_overhead.py's grid (power-of-2,
agent engine, ``--events`` events, one replication, N x 10 loads). Steps, each timed:

1. ``python -m pipeline`` is started and SIGKILLed, with every process it started (by PID), once
   ``--kill-at`` of the rows are on disk;
2. ``python -m pipeline.resume`` runs the rest;
3. the rows are checked: one per task, each with the seed of tasks.json, all ``ok``; the run
   folder's files and result files are counted;
4. ``python -m pipeline.reproduce`` reruns the archive (every task again) and must print
   ``REPRODUCED`` with every row bitwise identical: the rows of the killed-and-resumed run are
   then those an uninterrupted run gives.

It prints the CPU first (times move with the machine and its load; the counts do not)::

    nice -n 15 python benchmarks/bench_many_tasks.py --tasks 100000
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_sweep_overhead import overrides  # noqa: E402
from benchmarks.common import cpu_model  # noqa: E402


def rows_on_disk(out: Path) -> int:
    from pipeline.store import done_task_ids

    return len(done_task_ids(out / "results"))


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and every process it had started (by PID), and wait for them."""
    import psutil

    tree = []
    with contextlib.suppress(psutil.NoSuchProcess):
        tree.append(psutil.Process(proc.pid))
        tree += tree[0].children(recursive=True)
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait(timeout=60)
    psutil.wait_procs(tree, timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=100_000, help="a multiple of 10")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--kill-at", type=float, default=0.3, help="fraction of rows on disk at the SIGKILL")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs of the local Ray cluster")
    ap.add_argument("--keep", type=Path, default=None, help="run in this folder and keep it")
    args = ap.parse_args()
    if not 0 < args.kill_at < 1:
        raise SystemExit(f"--kill-at={args.kill_at} must be in (0, 1)")
    print(f"CPU: {cpu_model()}; Ray cluster of {args.cpus} CPU(s); {args.tasks} tasks of {args.events} events",
          flush=True)
    work_ctx = tempfile.TemporaryDirectory(prefix="bench-many-") if args.keep is None else None
    work = Path(work_ctx.name) if work_ctx else args.keep
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"run-{args.tasks}"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONUNBUFFERED": "1"}
    try:
        t0 = time.perf_counter()
        with open(work / "driver.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "pipeline",
                                     *overrides(args.tasks, args.events, out, None, args.cpus)],
                                    cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        target = int(args.kill_at * args.tasks)
        while (out / "results").is_dir() is False or rows_on_disk(out) < target:
            if proc.poll() is not None:
                raise SystemExit(f"the driver exited {proc.returncode} before the kill; see {work / 'driver.log'}")
            time.sleep(1.0)
        kill_tree(proc)
        before = rows_on_disk(out)
        t_kill = time.perf_counter() - t0
        status = json.loads((out / "run.json").read_text())["status"]
        print(f"1. SIGKILL after {t_kill:.1f} s: {before} of {args.tasks} rows on disk; run.json status {status!r}",
              flush=True)

        t1 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "pipeline.resume", str(out), "--no-progress"], cwd=work,
                             env=env, capture_output=True, text=True)
        t_resume = time.perf_counter() - t1
        if res.returncode != 0:
            raise SystemExit(f"resume exited {res.returncode}:\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
        ran = re.search(r"(\d+) run now", res.stdout)
        print(f"2. resume: {t_resume:.1f} s, {ran.group(1) if ran else '?'} tasks run now "
              f"(expected {args.tasks - before})", flush=True)

        import polars as pl

        from pipeline.store import result_files

        frame = pl.read_parquet(out / "results.parquet")
        tasks = json.loads((out / "tasks.json").read_text())["tasks"]
        seeds = dict(zip(frame["task_id"].to_list(), frame["seed"].to_list()))
        seeds_ok = all(seeds.get(t["_meta"]["task_id"]) == t["seed"] for t in tasks)
        files = sum(1 for p in out.rglob("*") if p.is_file())
        n_chunks = len(result_files(out / "results"))
        print(f"3. rows: {frame.height} ({frame['task_id'].n_unique()} task ids, "
              f"{int((frame['status'] == 'ok').sum())} ok), seeds those of tasks.json: {seeds_ok}; "
              f"files in the run folder {files} (result chunks {n_chunks}); archive "
              f"{(out / 'archive.tar.gz').stat().st_size / 2**20:.1f} MB", flush=True)

        t2 = time.perf_counter()
        rep = subprocess.run([sys.executable, "-m", "pipeline.reproduce", str(out / "archive.tar.gz"),
                              "--no-progress", "--out", str(work / "again")], cwd=work, env=env,
                             capture_output=True, text=True)
        t_rep = time.perf_counter() - t2
        lines = rep.stdout.rstrip().splitlines()
        same = next((ln.strip() for ln in lines if "bitwise identical" in ln), "(no bitwise line)")
        print(f"4. reproduce: {t_rep:.1f} s, exit {rep.returncode}, {same}; last line: "
              f"{lines[-1] if lines else rep.stderr[-500:]}", flush=True)
        ok = (frame.height == args.tasks == frame["task_id"].n_unique() and seeds_ok and rep.returncode == 0
              and lines and lines[-1].endswith("REPRODUCED"))
        print("ALL CHECKS HOLD" if ok else "A CHECK FAILED", flush=True)
        if not ok:
            raise SystemExit(1)
    finally:
        if work_ctx:
            work_ctx.cleanup()


if __name__ == "__main__":
    main()
