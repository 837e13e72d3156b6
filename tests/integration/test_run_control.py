"""Run control on this machine: exit codes, Ctrl-C, SIGKILL of the driver, resume.

Drivers are real ``python -m pipeline`` subprocesses with their own local Ray cluster; what they
start is stopped by PID. Rows after an interruption and a resume must equal, bitwise, those of
an uninterrupted run (every column but wall_time, node and run_id).
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import polars as pl

from pipeline.run import PARTIAL_MARKER
from tests.helpers import driver_cwd, unresponsive_peer
from tests.integration.conftest import SWEEP, assert_same_rows, driver_env, kill_tree, n_results, reap, start_driver, wait_for


def mlflow_status(db, run_id: str) -> str:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{db}").get_run(run_id).info.status


def test_ctrl_c_gives_one_line_killed_run_and_resume_completes_it(tmp_path, reference):
    out, db, log = tmp_path / "out", tmp_path / "mlflow.db", tmp_path / "driver.log"
    # a chunk per row: the interruption comes after the first row, long before the last (with
    # chunks of 5 s the first chunk could hold every row of this short sweep)
    args = [*SWEEP, f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}", "execution.progress=false",
            "execution.num_cpus=1", "execution.chunk_seconds=0"]
    proc = start_driver(args, driver_env(), log)
    try:
        wait_for(lambda: n_results(out) >= 1, 240, "a first result row", proc, log)
        kids = kill_tree(proc, signal.SIGINT)
        assert proc.wait(timeout=60) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    reap(kids)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in text.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "interrupted:" in errors[0] and "pipeline.resume" in errors[0], errors
    assert errors[0].split("] - ", 1)[1] in (out / "__main__.log").read_text()  # the run folder's log has it
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "interrupted" and (out / PARTIAL_MARKER).exists()
    assert not (out / "archive.tar.gz").exists()
    assert mlflow_status(db, state["mlflow_run_id"]) == "KILLED"
    done_before = n_results(out)
    assert 1 <= done_before < reference.height

    res = subprocess.run([sys.executable, "-m", "pipeline.resume", str(out), "--no-progress"], cwd=driver_cwd(),
                         env=driver_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert f"{reference.height - done_before} run now" in res.stdout
    assert not (out / PARTIAL_MARKER).exists() and (out / "archive.tar.gz").exists()
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    assert mlflow_status(db, state["mlflow_run_id"]) == "FINISHED"
    assert (out / "__main__.log").read_text().count("sweep 'smoke'") == 2  # the resume's lines follow
    frame = pl.read_parquet(out / "results.parquet")
    assert frame["run_id"].unique().to_list() == [state["run_id"]]
    assert_same_rows(frame, reference)


def test_sigkill_of_the_driver_then_resume(tmp_path, reference):
    out, db, log = tmp_path / "out", tmp_path / "mlflow.db", tmp_path / "driver.log"
    args = [*SWEEP, f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}", "execution.progress=false",
            "execution.num_cpus=1"]
    proc = start_driver(args, driver_env(), log)
    wait_for(lambda: n_results(out) >= 2, 240, "two result rows", proc, log)
    kids = kill_tree(proc, signal.SIGKILL)
    proc.wait(timeout=30)
    reap(kids, timeout=15)  # the driver's own local cluster: Ray's reaper, else by PID
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "running" and (out / PARTIAL_MARKER).exists()
    assert mlflow_status(db, state["mlflow_run_id"]) == "RUNNING"  # nobody could say otherwise

    res = subprocess.run([sys.executable, "-m", "pipeline.resume", str(out), "--no-progress"], cwd=driver_cwd(),
                         env=driver_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert mlflow_status(db, state["mlflow_run_id"]) == "FINISHED"
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)
    # a finished folder resumes to the same rows without running anything
    res = subprocess.run([sys.executable, "-m", "pipeline.resume", str(out), "--no-progress",
                          "--backend", "serial"], cwd=driver_cwd(), env=driver_env(), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0 and "0 run now" in res.stdout, res.stderr[-3000:]
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)


def test_failed_tasks_give_exit_1_and_a_failed_mlflow_run(tmp_path, monkeypatch):
    """A task that fails at run time: its row says why, the exit code is 1, MLflow FAILED,
    and the archive is still written (the other rows are results)."""
    import sim
    from pipeline.__main__ import run_cli
    from pipeline.run import run_sweep, to_plain
    from tests.helpers import compose

    real = sim.run

    def flaky(task):
        if task["engine"] == "agent" and task["n_servers"] == 200 and task["d"] == 2:
            raise RuntimeError("injected failure")
        return real(task)

    monkeypatch.setattr(sim, "run", flaky)
    db = tmp_path / "mlflow.db"
    cfg = to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path / 'out'}", "execution.backend=serial",
                            f"mlflow.tracking_uri=sqlite:///{db}", "execution.progress=false"]))
    seen = {}
    code = run_cli(lambda: seen.setdefault("out", run_sweep(cfg, quiet=True)))
    assert code == 1
    frame = seen["out"]["frame"]
    bad = frame.filter(pl.col("status") == "error")
    assert bad.height == 2 and all("injected failure" in e for e in bad["error"])
    assert mlflow_status(db, seen["out"]["mlflow_run_id"]) == "FAILED"
    assert (tmp_path / "out" / "archive.tar.gz").exists()
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "failed"

    # --retry-failed reruns exactly those (now healthy) tasks; their old rows are kept aside
    monkeypatch.setattr(sim, "run", real)
    cfg2 = dict(cfg)
    code = run_cli(lambda: seen.__setitem__("again", run_sweep(cfg2, quiet=True, resume=True,
                                                               retry_failed=True)) or seen["again"])
    assert code == 0 and seen["again"]["ran"] == 2
    assert (seen["again"]["frame"]["status"] == "ok").all()
    assert pl.scan_parquet(str(tmp_path / "out" / "results" / "failed" / "*.parquet")).collect().height == 2


def test_unreachable_cluster_leaves_nothing_behind(tmp_path):
    """An address nobody answers: exit 3 within the connection time limit, one line, no output
    folder and no MLflow run (a loopback peer that drops the connection attempt)."""
    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    with unresponsive_peer() as (host, port):
        res = subprocess.run([sys.executable, "-m", "pipeline", "+sweep=smoke", f"output_dir={out}",
                              f"mlflow.tracking_uri=sqlite:///{db}", f"execution.address={host}:{port}",
                              "execution.connect_timeout=3"], cwd=driver_cwd(), env=driver_env(),
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr[-2000:]
    assert "Traceback" not in res.stdout + res.stderr and "cannot reach" in res.stdout + res.stderr
    assert not out.exists() and not db.exists()
