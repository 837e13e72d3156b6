"""Fixtures of the integration tests: real Ray clusters on loopback, driver subprocesses.

These tests start real servers (``ray start`` nodes, local Ray clusters of driver processes)
and stop them by PID. They are marked ``integration``: the fast suite skips them, `.ci/run`
runs them (README's test command).
"""
from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.helpers import driver_cwd
from tests.loopback_cluster import LoopbackCluster

#: the sweep every integration test runs: the smoke grid with tasks long enough to interrupt
SWEEP = ["+sweep=smoke", "params.events=20000000", "replications=2"]
#: columns that legitimately differ between runs of the same tasks
VOLATILE = ("wall_time", "node", "run_id")


#: The integration tier runs on two pytest-xdist workers (README's test command: ``-n 2 --dist
#: loadgroup --no-loadscope-reorder``): most of its tests hold one core (an in-process simulation,
#: a driver's imports, Ray's start) while the other waits. Each test file is one xdist group, so
#: that a module's fixtures are built once, as with ``--dist loadfile``; the tests that use the
#: loopback ``cluster`` share one group, so that one three-node cluster serves them all (a second
#: worker would start a second one on the same loopback addresses). Groups are handed out longest
#: first, so that no long group starts last: the wall seconds each group took in a two-worker run
#: (2026-12-07, AMD EPYC, a machine shared with other jobs, load 17-30; the cluster's group run on
#: its own, load 10-18; only their order matters; a group not listed comes after those listed).
CLUSTER_GROUP = "loopback_cluster"
GROUP_SECONDS = {CLUSTER_GROUP: 1428, "tests/integration/test_many_tasks.py": 1020,
                 "tests/integration/test_headline_path.py": 813, "tests/integration/test_run_control.py": 411,
                 "tests/dispatch/test_population.py": 332, "tests/jiq/test_population.py": 302,
                 "tests/integration/test_mlflow_browser.py": 298, "tests/pipeline/test_console.py": 297,
                 "tests/pipeline/test_pipeline.py": 263, "tests/pipeline/test_execute.py": 177,
                 "tests/integration/test_run_folder_cli.py": 176, "tests/integration/test_multirun.py": 159,
                 "tests/centralization/test_population.py": 119, "tests/analysis/test_model_analyses.py": 96,
                 "tests/pipeline/test_bad_input_corpus.py": 90, "tests/pipeline/test_tracking_faults.py": 75,
                 "tests/pipeline/test_reproduce.py": 72, "tests/pipeline/test_resume_contract.py": 62}


def xdist_group(item) -> str:
    """The xdist group of an integration test: the loopback cluster's, else its file's."""
    if "cluster" in getattr(item, "fixturenames", ()):
        return CLUSTER_GROUP
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before -m deselects and xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # every integration test in its group, the groups longest first (a stable sort: within a
    # group, tests keep their order); the marks matter only under --dist loadgroup
    groups = {}
    for item in items:
        if item.get_closest_marker("integration") is not None:
            groups[id(item)] = xdist_group(item)
            item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    items.sort(key=lambda item: -GROUP_SECONDS.get(groups.get(id(item)), 0.0))


def assert_same_rows(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Every column but wall_time, node and run_id equal, bitwise, row by row (by task id)."""
    cols = [c for c in a.columns if c not in VOLATILE]
    assert sorted(cols) == sorted(c for c in b.columns if c not in VOLATILE)
    a, b = a.sort("task_id"), b.sort("task_id")
    assert a["task_id"].to_list() == b["task_id"].to_list()
    for ra, rb in zip(a.select(cols).iter_rows(named=True), b.select(cols).iter_rows(named=True)):
        for c in cols:
            x, y = ra[c], rb[c]
            same = (x == y) or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            assert same, f"task {ra['task_id']}, column {c}: {x!r} != {y!r}"


def serial_reference(sweep: list, out):
    """``sweep`` run in-process with the serial backend into ``out``: the rows to match."""
    from pipeline.run import run_sweep, to_plain
    from tests.helpers import compose

    cfg = compose([*sweep, f"output_dir={out}", "mlflow.enabled=false", "execution.backend=serial",
                   "execution.progress=false"])
    return run_sweep(to_plain(cfg), quiet=True)["frame"]


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """The integration sweep run in-process with the serial backend: the rows to match. Under
    pytest-xdist the first worker that needs it computes it and leaves it as Parquet in the
    session's folder (shared by its workers, under a lock) for the other."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return serial_reference(SWEEP, tmp_path_factory.mktemp("reference") / "out")
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, the parent of each worker's popen-gwK/
    path = shared / "reference.parquet"
    with open(shared / "reference.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            frame = serial_reference(SWEEP, tmp_path_factory.mktemp("reference") / "out")
            frame.write_parquet(shared / "reference.parquet.tmp")
            os.replace(shared / "reference.parquet.tmp", path)
    return pl.read_parquet(path)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Head (1 CPU) and two worker nodes (1 CPU each) on 127.0.0.2-4, with token auth."""
    c = LoopbackCluster(tmp_path_factory.mktemp("cluster"), head_cpus=1, auth_token=secrets.token_hex(16))
    try:
        c.start_head()
        c.add_node(cpus=1)
        c.add_node(cpus=1)
        yield c
    finally:
        c.stop()


def driver_env(extra: dict | None = None, cluster: LoopbackCluster | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    if cluster is not None and cluster.token_path:
        env["RAY_AUTH_TOKEN_PATH"] = str(cluster.token_path)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def start_driver(args: list[str], env: dict, log: Path, module: str = "pipeline") -> subprocess.Popen:
    out = open(log, "wb")
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=driver_cwd(), env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(cond, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout} s" + (f"; log:\n{log.read_text()[-3000:]}" if log else ""))


def n_results(out_dir: Path) -> int:
    """The rows on disk in ``out_dir/results`` (chunk files, written whole)."""
    from pipeline.store import done_task_ids

    return len(done_task_ids(out_dir / "results"))


def kill_tree(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> list:
    """Send ``sig`` to a driver and, after it, to every process it started (by PID)."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    proc.send_signal(sig)
    return kids


def reap(procs, timeout: float = 20) -> None:
    """Wait for processes to end, then SIGKILL those still alive (by PID)."""
    import psutil

    gone, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
