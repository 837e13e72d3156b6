"""MLflow down or a full disk (issue 34, item 6).

- A tracking store that cannot be used is refused before Ray starts: one line, exit code 4,
  within seconds, nothing written (an unreachable server, a corrupt ``mlflow.db``, a read-only
  store folder). The command lines run in a subprocess whose ``pipeline.execute.connect`` leaves
  a marker file, so "Ray never started" is checked, not assumed.
- A store that fails mid-run loses tracking, not the run: one warning, no more MLflow calls,
  exit 0, every row, ``run.json`` and the archive's ``tracking.json`` say ``lost: ...``.
- A full disk while rows are written: one line, exit code 5, ``run.json`` ends ``failed`` with
  the reason (in the bytes it keeps reserved), and ``pipeline.resume`` completes the run. A
  file size limit (``RLIMIT_FSIZE``) needs no privileges; a real full filesystem (a small tmpfs
  in a user namespace, filled by another writer mid-run) runs where user namespaces are allowed.

Everything runs serially (no Ray). The command lines are ``-m integration`` (about 40 s); the
mid-run loss and the reserved bytes are in the fast suite (about 15 s).
"""
from __future__ import annotations

import errno
import io
import json
import logging
import os
import resource
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from pipeline import state as run_state
from pipeline.run import run_sweep, to_plain
from tests.helpers import REPO, compose

FAST = ["+sweep=smoke", "execution.backend=serial", "execution.progress=false", "params.events=20000"]
N_TASKS = 12  # the smoke sweep: 4 points x (2 agent replications + 1 mean field)

#: the command line with a marker file where Ray would start (:func:`pipeline.execute.connect`;
#: the serial backend then goes on, Ray is refused)
RUNNER = '''
import sys
from pathlib import Path

import pipeline.execute as ex

marker = Path(sys.argv[1])
real_connect = ex.connect


def connect(exec_cfg, *args, **kwargs):  # where Ray would start (or, serially, the run begins)
    marker.write_text("connect called")
    if exec_cfg["backend"] != "serial":
        raise ex.ClusterError("this test does not start Ray")
    return real_connect(exec_cfg, *args, **kwargs)


ex.connect = connect
fill = sys.argv[2]
if fill != "-":  # another writer fills the disk while the third task runs
    import os

    import pipeline.worker as w

    run_one, calls = w.run_one, [0]

    def filling(task):
        calls[0] += 1
        if calls[0] == 3:
            fd = os.open(fill, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while True:
                    os.write(fd, b"x" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
        return run_one(task)

    w.run_one = filling
sys.argv = ["pipeline", *sys.argv[3:]]
from pipeline.__main__ import cli

cli()
'''


def _cli(tmp: Path, args: list[str], prefix: list[str] = (), fill: str = "-", preexec=None,
         timeout: float = 120) -> tuple[subprocess.CompletedProcess, Path]:
    # the timeout is the guard against hanging: MLflow's own retries of an unreachable store took 256 s
    runner = tmp / "runner.py"
    runner.write_text(RUNNER)
    marker = tmp / "ray-started"
    res = subprocess.run([*prefix, sys.executable, str(runner), str(marker), fill, *args,
                          f"hydra.run.dir={tmp / 'hydra'}"],
                         cwd=REPO, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)
    return res, marker


def _lines(res: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]


def _assert_refused(res, marker, out: Path, *words: str):
    lines = _lines(res)
    assert res.returncode == 4, (res.returncode, lines)
    assert len(lines) == 1, lines
    assert "tracking error" in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert not marker.exists(), "Ray (here: the serial backend) started before the store was checked"
    assert not out.exists(), "the run folder was written"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration  # a real command line
def test_unreachable_server_is_one_line_exit_4_before_ray(tmp_path):
    port = _closed_port()
    out = tmp_path / "out"
    res, marker = _cli(tmp_path, [*FAST, f"mlflow.tracking_uri=http://127.0.0.1:{port}",
                                           f"output_dir={out}"], timeout=120)
    _assert_refused(res, marker, out, f"127.0.0.1:{port}", "cannot reach")


@pytest.mark.integration  # a real command line
def test_silent_server_is_one_line_exit_4_within_the_timeout(tmp_path):
    """A server that accepts connections and never answers: MLflow's client waited 120 s per
    request, 7 times; the check gives up after ``mlflow.timeout``."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        out = tmp_path / "out"
        res, marker = _cli(tmp_path, [*FAST, f"mlflow.tracking_uri=http://127.0.0.1:{port}",
                                               "mlflow.timeout=2", f"output_dir={out}"], timeout=90)
    _assert_refused(res, marker, out, f"127.0.0.1:{port}", "timed out")


@pytest.mark.integration  # a real command line
def test_corrupt_sqlite_store_is_one_line_exit_4_before_ray(tmp_path):
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(b"this is not an SQLite database\n" * 200)
    out = tmp_path / "out"
    res, marker = _cli(tmp_path, [*FAST, f"mlflow.tracking_uri=sqlite:///{db}", f"output_dir={out}"])
    _assert_refused(res, marker, out, str(db), "not a readable SQLite database")


def _userns_works() -> bool:
    if not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "-Urm", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.integration  # a real command line
def test_read_only_store_folder_is_one_line_exit_4_before_ray(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    out = tmp_path / "out"
    prefix: list[str] = []
    if os.geteuid() != 0:
        folder.chmod(0o555)
    elif _userns_works():  # root writes through permissions: mount the folder read-only
        prefix = ["unshare", "-Urm", "sh", "-c",
                  f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" "{folder}" '
                  '&& exec "$@"', "sh"]
    else:
        pytest.skip("running as root without user namespaces: no way to make a folder read-only")
    try:
        res, marker = _cli(tmp_path, [*FAST, f"mlflow.tracking_uri=sqlite:///{folder / 'mlflow.db'}",
                                               f"output_dir={out}"], prefix=prefix)
    finally:
        folder.chmod(0o755)
    _assert_refused(res, marker, out, str(folder), "not writable")


def test_store_failing_mid_run_loses_tracking_not_the_run(tmp_path, monkeypatch, caplog):
    """Fault injection: the store's ``log_batch`` fails from its second call on (the first
    sends the parent run's parameters; progress metrics are flushed at every task here), i.e.
    while the tasks run."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    import pipeline.tracking
    from pipeline.__main__ import run_cli

    calls = {"n": 0}
    real = MlflowClient.log_batch

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:
            raise MlflowException("injected: the tracking store went away")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    monkeypatch.setattr(pipeline.tracking, "FLUSH_SECONDS", 0.0)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "out"
    conf = to_plain(compose([*FAST, f"mlflow.tracking_uri={uri}", f"output_dir={out}"]))
    with caplog.at_level(logging.WARNING):
        code = run_cli(lambda: run_sweep(conf, quiet=True))
    assert code == 0
    assert calls["n"] == 2, "MLflow was called again after tracking was lost"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "tracking lost" in r.getMessage()]
    assert len(warnings) == 1 and "injected" in warnings[0].getMessage()
    frame = pl.read_parquet(out / "results.parquet")
    assert frame.height == N_TASKS and (frame["status"] == "ok").all()
    state = run_state.read(out)
    assert state["status"] == "finished" and state["tracking"].startswith("lost: MlflowException: injected")
    assert not (out / "PARTIAL").exists()
    with tarfile.open(out / "archive.tar.gz") as tar:
        tracking = json.load(tar.extractfile("run/tracking.json"))
        chunks = [m for m in tar.getnames() if m.startswith("run/results/")]
        assert sum(pl.read_parquet(io.BytesIO(tar.extractfile(m).read())).height for m in chunks) == N_TASKS
    assert tracking["tracking"] == state["tracking"] and tracking["mlflow_run_id"] == state["mlflow_run_id"]
    # no more calls: the parent run was never ended, it stays RUNNING in the store
    assert MlflowClient(uri).get_run(state["mlflow_run_id"]).info.status == "RUNNING"


def _assert_failed_for_disk(res, out: Path, reason: str, kept: int | None = None):
    lines = _lines(res)
    assert res.returncode == 5, (res.returncode, lines[-5:])
    assert not any("Traceback" in ln for ln in lines), lines
    errors = [ln for ln in lines if "[ERROR]" in ln]
    assert len(errors) == 1 and "output error" in errors[0] and "pipeline.resume" in errors[0], errors
    state = run_state.read(out)
    assert state["status"] == "failed" and reason in state["reason"], state
    assert (out / "PARTIAL").exists()
    files = sorted((out / "results").glob("*.parquet"))
    rows = sum(pl.read_parquet(f).height for f in files)  # what was kept is whole, readable
    if kept is not None:
        assert rows == kept
    assert not list((out / "results").glob(".*.tmp")) and not (out / f".{run_state.STATE_FILE}.tmp").exists()


@pytest.mark.integration  # a real command line
def test_file_size_limit_while_rows_are_written_ends_failed_and_resumes(tmp_path):
    """``RLIMIT_FSIZE`` of 16 KiB in the subprocess: the config, tasks and the 8 KiB of run.json
    fit, a result file (about 29 KB) does not (EFBIG)."""
    from pipeline.resume import main as resume

    out = tmp_path / "out"
    limit = 16384

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    res, _ = _cli(tmp_path, [*FAST, "mlflow.enabled=false", f"output_dir={out}"], preexec=small_files)
    _assert_failed_for_disk(res, out, "file size limit", kept=0)
    # the resume checks the store too: give the run an unreachable one
    conf = yaml.safe_load((out / "config.yaml").read_text())
    conf["mlflow"].update(enabled=True, tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    (out / "config.yaml").write_text(yaml.safe_dump(conf))
    assert resume([str(out), "--no-progress"]) == 4
    assert run_state.read(out)["status"] == "failed"
    assert resume([str(out), "--no-progress", "--no-mlflow"]) == 0
    assert run_state.read(out)["status"] == "finished"
    frame = pl.read_parquet(out / "results.parquet")
    assert frame.height == N_TASKS and (frame["status"] == "ok").all()


@pytest.mark.integration  # a real command line
@pytest.mark.skipif(not _userns_works(), reason="needs user namespaces (unshare -Urm) for a small tmpfs")
def test_full_filesystem_while_rows_are_written_ends_failed(tmp_path):
    """The run folder on a 2 MiB tmpfs that another writer fills while the third task runs: the
    third row cannot be written (ENOSPC), and neither can a new run.json; the state goes into
    run.json's reserved bytes. (The namespace's mount ends with the process: the folder is
    copied out first.)"""
    mnt, copy = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    copy.mkdir()
    prefix = ["unshare", "-Urm", "sh", "-c",
              f'mount -t tmpfs -o size=2m tmpfs "{mnt}" && "$@"; rc=$?; cp -a "{mnt}/out" "{copy}/"; exit $rc', "sh"]
    # one task per group and a chunk per row: each row is written as its task ends (two before
    # the disk fills)
    res, _ = _cli(tmp_path, [*FAST, "mlflow.enabled=false", "execution.tasks_per_cpu=12",
                                "execution.chunk_rows=1", f"output_dir={mnt / 'out'}"],
                     prefix=prefix, fill=str(mnt / "filler"))
    _assert_failed_for_disk(res, copy / "out", "disk full", kept=2)


def test_state_goes_into_its_reserved_bytes_when_no_new_file_can_be_written(tmp_path, monkeypatch):
    """Fault injection at the one call that needs new blocks (the new file), as on a full disk."""
    state = {"sweep": "s", "status": "running"}
    run_state.write(tmp_path, state)
    path = tmp_path / run_state.STATE_FILE
    assert path.stat().st_size == run_state.RESERVED
    inode = path.stat().st_ino

    def no_space(file, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))

    monkeypatch.setattr(run_state, "open", no_space, raising=False)
    state.update(status="failed", reason="x" * 5000)
    run_state.write(tmp_path, state)
    assert path.stat().st_ino == inode and path.stat().st_size == run_state.RESERVED
    back = run_state.read(tmp_path)
    assert back["status"] == "failed" and back["reason"] == "x" * run_state.MAX_TEXT


def test_sqlite_check_creates_nothing_and_refuses_a_foreign_database(tmp_path):
    """The pre-flight opens no store in MLflow (which would create ``mlflow.db`` before Ray is
    known to start), and refuses a database with tables of something else."""
    import sqlite3

    from pipeline.errors import TrackingError
    from pipeline.tracking import check_store

    new = tmp_path / "new.db"
    check_store(f"sqlite:///{new}", "lbsweep", tmp_path)
    assert not new.exists()
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    with pytest.raises(TrackingError, match="not an MLflow store"):
        check_store(f"sqlite:///{other}", "lbsweep", tmp_path)


def test_disk_full_at_a_row_ends_run_json_and_the_mlflow_run_failed(tmp_path, monkeypatch):
    """Fault injection: the third row's write fails with ENOSPC (the store is elsewhere; a chunk
    per row here): exit 5, run.json ``failed`` with the reason (not a traceback and exit 1), the
    MLflow run FAILED."""
    from mlflow.tracking import MlflowClient

    import pipeline.store
    from pipeline.__main__ import run_cli

    real, calls = pipeline.store.write_chunk, {"n": 0}

    def full_at_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline.store, "write_chunk", full_at_third)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "out"
    conf = to_plain(compose([*FAST, "execution.tasks_per_cpu=12", "execution.chunk_rows=1",
                             f"mlflow.tracking_uri={uri}", f"output_dir={out}"]))
    assert run_cli(lambda: run_sweep(conf, quiet=True)) == 5
    state = run_state.read(out)
    assert state["status"] == "failed" and state["reason"].startswith("disk full"), state
    assert len(list((out / "results").glob("*.parquet"))) == 2 and (out / "PARTIAL").exists()
    assert MlflowClient(uri).get_run(state["mlflow_run_id"]).info.status == "FAILED"
