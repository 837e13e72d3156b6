"""A sweep of 10^4 tiny tasks through a real driver: SIGKILL part-way, resume, reproduce.

The rows come back in batches and are written in chunk files (pipeline/store.py): the run folder
holds a few dozen result files, not 10^4; a SIGKILL of the driver loses at most the rows of its
last few seconds, which the resume runs again, and the rows are then those of an uninterrupted
run (each task's row once; seeds those of tasks.json; a sample of tasks rerun here in-process
gives their estimates bitwise). The archive then reproduces (python -m pipeline.reproduce).
"""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys

import polars as pl

from pipeline.run import PARTIAL_MARKER
from pipeline.store import ESTIMATE_COLUMNS, result_files
from tests.helpers import driver_cwd
from tests.integration.conftest import driver_env, kill_tree, n_results, reap, start_driver, wait_for

#: 100 values of N x 10 loads, power-of-2 on the agent engine, 20,000 events, one replication
LOADS = [round(0.5 + 0.04 * i, 2) for i in range(10)]
N_TASKS = 10_000
SWEEP = ["name=many_tasks", "policies=[pod]", "engines=[agent]", "replications=1",
         f"+axes.n_servers=[{','.join(str(n) for n in range(20, 20 + N_TASKS // len(LOADS)))}]",
         f"+axes.lam=[{','.join(map(str, LOADS))}]", "params.d=2", "params.events=20000",
         "mlflow.enabled=false", "execution.progress=false"]


def test_ten_thousand_tasks_sigkill_resume_reproduce(tmp_path):
    out, log = tmp_path / "out", tmp_path / "driver.log"
    proc = start_driver([*SWEEP, f"output_dir={out}"], driver_env(), log)
    try:
        wait_for(lambda: n_results(out) >= 2000, 900, "2000 rows on disk", proc, log)
    finally:
        kids = kill_tree(proc, signal.SIGKILL)
        proc.wait(timeout=30)
        reap(kids, timeout=15)
    done_before = n_results(out)
    assert 2000 <= done_before < N_TASKS
    assert json.loads((out / "run.json").read_text())["status"] == "running" and (out / PARTIAL_MARKER).exists()

    res = subprocess.run([sys.executable, "-m", "pipeline.resume", str(out), "--no-progress"], cwd=driver_cwd(),
                         env=driver_env(), capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert f"{N_TASKS - done_before} run now" in res.stdout, res.stdout[-2000:]
    assert json.loads((out / "run.json").read_text())["status"] == "finished"

    frame = pl.read_parquet(out / "results.parquet")
    tasks = json.loads((out / "tasks.json").read_text())["tasks"]
    assert frame.height == N_TASKS and frame["task_id"].n_unique() == N_TASKS
    assert (frame["status"] == "ok").all(), frame.filter(pl.col("status") != "ok")["error"].head(3).to_list()
    seeds = dict(zip(frame["task_id"].to_list(), frame["seed"].to_list()))
    assert all(seeds[t["_meta"]["task_id"]] == t["seed"] for t in tasks)
    # a few dozen chunk files for 10^4 rows (1000 rows or 5 s each), not one per row
    files = result_files(out / "results")
    assert len(files) <= 100 and all(f.name.startswith("chunk-") for f in files), len(files)
    assert sum(1 for p in out.rglob("*") if p.is_file()) <= 200

    # a sample of tasks, rerun here: their estimates are those of the rows, bitwise
    from pipeline.worker import run_one

    by_id = {t["_meta"]["task_id"]: t for t in tasks}
    for task_id in random.Random(45).sample(sorted(by_id), 20):
        again = run_one(by_id[task_id])
        row = frame.filter(pl.col("task_id") == task_id).row(0, named=True)
        for col in ESTIMATE_COLUMNS:
            if col in again:
                assert row[col] == again[col] or (row[col] != row[col] and again[col] != again[col]), (task_id, col)

    rep = subprocess.run([sys.executable, "-m", "pipeline.reproduce", str(out / "archive.tar.gz"), "--no-progress",
                          "--out", str(tmp_path / "again")], cwd=driver_cwd(), env=driver_env(),
                         capture_output=True, text=True, timeout=1800)
    assert rep.returncode == 0 and rep.stdout.rstrip().endswith("REPRODUCED"), rep.stdout[-3000:] + rep.stderr[-2000:]
    assert f"{N_TASKS}/{N_TASKS} bitwise identical" in rep.stdout, rep.stdout[-3000:]
