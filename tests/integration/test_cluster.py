"""A real three-node Ray cluster on 127.0.0.2-4 with token authentication (tests/loopback_cluster.py):
sweeps through it, through ``python -m pipeline.submit`` (a Ray job), and through faults.

Every run's rows are compared with the in-process serial reference (every column but
wall_time, node and run_id). The tests share the cluster; the one that kills a whole worker
node adds a fresh node afterwards.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import polars as pl
import pytest

from tests.helpers import REPO, driver_cwd
from tests.integration.conftest import SWEEP, assert_same_rows, driver_env, kill_tree, n_results, reap, serial_reference, start_driver, wait_for

#: the sweep of the `ray job stop` test: its simulations (3e8 events, about 3 s each here) must
#: outlast the stop's latency (the CLI starts in 2-3 s); with SWEEP's 2e7 events a quiet machine
#: once finished the whole job before the stop arrived
SWEEP_LONG = ["+sweep=smoke", "params.events=300000000", "replications=2"]


@pytest.fixture(scope="module")
def reference_long(tmp_path_factory):
    return serial_reference(SWEEP_LONG, tmp_path_factory.mktemp("reference_long") / "out")


def run_driver(args: list[str], env: dict, timeout: float = 600, module: str = "pipeline"):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=driver_cwd(), env=env, capture_output=True,
                          text=True, timeout=timeout)


def worker_pids(cluster, name: str = "ray::run_chunk") -> list:
    return [p for node in cluster.nodes for p in node.processes() if _name(p).startswith(name)]


def _name(p) -> str:
    try:
        return p.name() if p.name().startswith("ray::") else " ".join(p.cmdline()[:1])
    except Exception:
        return ""


def test_sweep_spreads_over_the_nodes_and_matches_a_local_run(cluster, reference, tmp_path):
    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    res = run_driver([*SWEEP, f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}",
                      "execution.progress=false", f"execution.address={cluster.gcs_address}"],
                     driver_env(cluster=cluster))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "joined Ray cluster: 3 CPUs on 3 node(s)" in res.stdout + res.stderr
    frame = pl.read_parquet(out / "results.parquet")
    assert frame["node"].n_unique() >= 2, frame.group_by("node").len()
    assert_same_rows(frame, reference)


def test_a_local_run_while_a_cluster_exists_starts_its_own(cluster, tmp_path):
    """``address`` unset: a local cluster of its own, even with the loopback cluster up."""
    out = tmp_path / "out"
    res = run_driver(["+sweep=smoke", f"output_dir={out}", "mlflow.enabled=false", "execution.progress=false",
                      "execution.num_cpus=1"], driver_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert "started a local Ray cluster: 1 CPUs on 1 node(s)" in res.stdout + res.stderr


def test_no_token_is_refused_with_one_line_and_nothing_left(cluster, tmp_path):
    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    env = driver_env({"HOME": str(tmp_path / "home"), "RAY_AUTH_MODE": "disabled"})
    res = run_driver(["+sweep=smoke", f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}",
                      f"execution.address={cluster.gcs_address}"], env, timeout=300)
    assert res.returncode == 3, res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr and "could not start or join" in res.stdout + res.stderr
    assert not out.exists() and not db.exists()
    # asked for token mode without a token: refused before any connection attempt
    env = driver_env({"HOME": str(tmp_path / "home")})
    res = run_driver(["+sweep=smoke", f"output_dir={out}", "mlflow.enabled=false", "execution.auth=token",
                      f"execution.address={cluster.gcs_address}"], env, timeout=120)
    assert res.returncode == 3 and "no token was found" in res.stdout + res.stderr, res.stderr[-2000:]
    assert not out.exists()


def test_submit_as_a_ray_job_keeps_results_provenance_and_mlflow(cluster, reference, tmp_path):
    results, db = tmp_path / "results", tmp_path / "mlflow.db"
    res = run_driver(["--address", cluster.dashboard_url, "--results-dir", str(results), *SWEEP,
                      f"mlflow.tracking_uri=sqlite:///{db}", "execution.progress=false"],
                     driver_env(cluster=cluster), module="pipeline.submit")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "SUCCEEDED (driver exit code 0)" in res.stdout
    job_id = res.stdout.split("submitted job ", 1)[1].split()[0]
    (out,) = list((results / "smoke").iterdir())
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)
    # the driver's log moved from results/.log/JOB_ID into the run folder
    assert "sweep 'smoke'" in (out / "__main__.log").read_text() and not any((results / ".log").iterdir())
    with tarfile.open(out / "archive.tar.gz") as tar:
        git = json.load(tar.extractfile("run/git.json"))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    if head:  # a git checkout (CI's is): the commit recorded before the upload
        assert git["commit"] == head and git["recorded_by"].startswith("pipeline.submit")
    assert not (REPO / ".lbsweep-submit" / job_id).exists()
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(f"sqlite:///{db}").search_runs(["1"], filter_string="tags.sweep = 'smoke'")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    # the job is an ordinary Ray job: the status line submit printed works when pasted into a
    # shell whose environment says nothing of Ray's authentication mode
    (line,) = [ln.split("status:", 1)[1].strip() for ln in res.stdout.splitlines() if ln.strip().startswith("status:")]
    env = {k: v for k, v in driver_env(cluster=cluster).items() if k != "RAY_AUTH_MODE"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the venv's ray
    st = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and "succeeded" in (st.stdout + st.stderr).lower(), line + st.stdout + st.stderr


def test_submit_refuses_bad_input_before_submitting(cluster, tmp_path):
    res = run_driver(["--address", cluster.dashboard_url, "--results-dir", str(tmp_path), "+sweep=smoke",
                      "params.lam=1.5"], driver_env(cluster=cluster), module="pipeline.submit")
    assert res.returncode == 2 and "lam=1.5" in res.stdout + res.stderr, res.stderr[-2000:]
    assert not any(tmp_path.iterdir())


def sweep_killing_a_worker(cluster, args: list[str], log) -> int:
    """Run a driver on the cluster, SIGKILL one worker process once a task runs; its exit code."""
    proc = start_driver(args, driver_env(cluster=cluster), log)
    try:
        wait_for(lambda: worker_pids(cluster), 240, "a running task", proc, log)
        worker_pids(cluster)[0].send_signal(signal.SIGKILL)
        return proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_killed_worker_is_retried_and_rows_match(cluster, reference, tmp_path):
    out, log = tmp_path / "out", tmp_path / "driver.log"
    code = sweep_killing_a_worker(cluster, [*SWEEP, f"output_dir={out}", "mlflow.enabled=false",
                                            "execution.progress=false",
                                            f"execution.address={cluster.gcs_address}"], log)
    assert code == 0, log.read_text()[-3000:]
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)


def test_killed_worker_without_retries_fails_the_run(cluster, tmp_path):
    out, db, log = tmp_path / "out", tmp_path / "mlflow.db", tmp_path / "driver.log"
    code = sweep_killing_a_worker(cluster, [*SWEEP, f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}",
                                            "execution.progress=false", "execution.max_retries=0",
                                            f"execution.address={cluster.gcs_address}"], log)
    assert code == 1, log.read_text()[-3000:]
    frame = pl.read_parquet(out / "results.parquet")
    bad = frame.filter(pl.col("status") == "error")
    assert bad.height >= 1 and all(e.startswith("Ray task failed") for e in bad["error"])
    state = json.loads((out / "run.json").read_text())
    from mlflow.tracking import MlflowClient

    assert MlflowClient(f"sqlite:///{db}").get_run(state["mlflow_run_id"]).info.status == "FAILED"


def test_driver_killed_then_resumed_through_the_cluster(cluster, reference, tmp_path):
    out, log = tmp_path / "out", tmp_path / "driver.log"
    # a chunk per row: the kill comes after the second row, before the last (with chunks of 5 s
    # the first chunk could hold every row of this short sweep)
    proc = start_driver([*SWEEP, f"output_dir={out}", "mlflow.enabled=false", "execution.progress=false",
                         "execution.chunk_seconds=0", f"execution.address={cluster.gcs_address}"],
                        driver_env(cluster=cluster), log)
    wait_for(lambda: n_results(out) >= 2, 240, "two result rows", proc, log)
    kids = kill_tree(proc, signal.SIGKILL)
    proc.wait(timeout=30)
    reap(kids, timeout=10)
    assert n_results(out) < reference.height
    res = run_driver([str(out), "--no-progress"], driver_env(cluster=cluster), module="pipeline.resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)


def test_killed_worker_node_is_survived(cluster, reference, tmp_path):
    """SIGKILL of a whole worker node (raylet and its workers) mid-sweep: its tasks run again
    elsewhere; then a fresh node joins so that the cluster is whole again."""
    out, log = tmp_path / "out", tmp_path / "driver.log"
    proc = start_driver([*SWEEP, f"output_dir={out}", "mlflow.enabled=false", "execution.progress=false",
                         f"execution.address={cluster.gcs_address}", "execution.max_retries=3"],
                        driver_env(cluster=cluster), log)
    victim = cluster.nodes[-1]
    try:
        wait_for(lambda: any(_name(p).startswith("ray::run_chunk") for p in victim.processes()), 240,
                 "a task on the last worker node", proc, log)
        t0 = time.time()
        victim.kill(signal.SIGKILL)
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    cluster.nodes.remove(victim)
    frame = pl.read_parquet(out / "results.parquet")
    assert_same_rows(frame, reference)
    print(f"sweep finished {time.time() - t0:.1f} s after the node was killed")
    cluster.add_node(cpus=1)


def test_ray_job_stop_interrupts_cleanly_and_the_run_resumes(cluster, reference_long, tmp_path):
    """``ray job stop`` sends the driver SIGTERM: the sweep ends as after Ctrl-C (run.json
    interrupted, PARTIAL kept, MLflow KILLED), and pipeline.resume completes it."""
    reference = reference_long
    results, db = tmp_path / "results", tmp_path / "mlflow.db"
    res = run_driver(["--address", cluster.dashboard_url, "--results-dir", str(results), "--no-wait", *SWEEP_LONG,
                      f"mlflow.tracking_uri=sqlite:///{db}", "execution.progress=false"],
                     driver_env(cluster=cluster), module="pipeline.submit")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    job_id = res.stdout.split("submitted job ", 1)[1].split()[0]
    wait_for(lambda: (results / "smoke").exists() and any(n_results(d) >= 1 for d in (results / "smoke").iterdir()),
             240, "a first result row of the job")
    (out,) = list((results / "smoke").iterdir())
    ray = str(__import__("pathlib").Path(sys.executable).with_name("ray"))
    env = driver_env({"RAY_AUTH_MODE": "token"}, cluster=cluster)
    subprocess.run([ray, "job", "stop", job_id, "--address", cluster.dashboard_url], env=env,
                   capture_output=True, text=True, timeout=120)
    wait_for(lambda: json.loads((out / "run.json").read_text())["status"] != "running", 120,
             "the driver to record the interruption")
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "interrupted" and (out / "PARTIAL").exists()
    from mlflow.tracking import MlflowClient

    assert MlflowClient(f"sqlite:///{db}").get_run(state["mlflow_run_id"]).info.status == "KILLED"
    res = run_driver([str(out), "--no-progress"], driver_env(cluster=cluster), module="pipeline.resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_rows(pl.read_parquet(out / "results.parquet"), reference)
    assert MlflowClient(f"sqlite:///{db}").get_run(state["mlflow_run_id"]).info.status == "FINISHED"
