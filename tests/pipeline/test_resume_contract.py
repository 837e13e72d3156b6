"""The resume contract (issue 45, docs/running.md "Resume"): one writer per run folder, the code
recorded and a resume from other code refused unless forced (then recorded), one row per task
when rows are merged, no interpolation in sweep files, no symbolic link as ``output_dir``.

Each test here failed at commit 230ea18, where two resumes of one folder both ran (22 rows for
12 tasks), a resume from another commit went through without a word, a sweep file's
``${oc.env:...}`` reached config.yaml, and a dangling link as ``output_dir`` was followed. The
names that commit lacks (the lock, the code state) are imported inside the tests that need them,
so that there the other tests fail on the behaviour itself.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import polars as pl
import pytest

import pipeline.run
from pipeline import state as run_state
from pipeline.__main__ import run_cli
from pipeline.errors import ConfigError
from pipeline.execute import PROJECT_ROOT
from pipeline.resume import main as resume
from pipeline.run import EXIT_CONFIG, PARTIAL_MARKER, run_sweep, to_plain
from pipeline.safe_yaml import check_sweep_files
from pipeline.store import read_results, rows_frame, schema_for, write_chunk
from tests.helpers import CONF, REPO, compose

#: twelve tasks of a few thousand events (8 simulations, 4 mean-field points), as in the issue's
#: two-resume attack: serial backend, no Ray, no MLflow
SMALL = ["+sweep=smoke", "axes.n_servers=[20,50]", "axes.d=[1,2]", "replications=2", "params.events=20000",
         "execution.backend=serial", "execution.progress=false", "mlflow.enabled=false"]
#: columns that describe how a row was computed, not what: left out where rows are compared
RUN_COLUMNS = ["wall_time", "node"]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _as_if_killed(out: Path) -> None:
    """The folder as a SIGKILL of the driver before its first row leaves it: no rows, no
    results.parquet, analysis or archive, run.json ``running``, PARTIAL present."""
    for name in ("results", "analysis"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("results.parquet", "archive.tar.gz"):
        (out / name).unlink(missing_ok=True)
    state = run_state.read(out)
    state.update(status="running")
    state.pop("finished", None)
    run_state.write(out, state)
    (out / PARTIAL_MARKER).write_text("killed\n")


def _resume_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.resume", str(out), "--backend", "serial", "--no-mlflow",
            "--no-progress", *extra]


# ------------------------------------------------------------------------ one writer per folder

def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_holder_frees_the_folder(tmp_path):
    from pipeline.runfolder import lock_folder

    held = lock_folder(tmp_path, "run")
    with pytest.raises(ConfigError, match=rf"is being written by process {os.getpid()} on host .* \(run since"):
        lock_folder(tmp_path, "resume")
    held.release()
    lock_folder(tmp_path, "resume").release()  # free again
    # a holder killed by SIGKILL: the operating system releases its lock, nothing to clean up
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from pipeline.runfolder import "
         "lock_folder; lock_folder(Path(sys.argv[1]), 'resume'); print('locked', flush=True); time.sleep(120)",
         str(tmp_path)], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"process {holder.pid} on host .* \(resume since"):
            lock_folder(tmp_path, "run")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    lock_folder(tmp_path, "run").release()


def test_a_run_holds_its_folder_for_its_whole_life(tmp_path, monkeypatch):
    """While a run's tasks run, its folder is locked (a resume started then is refused); after
    the run it is free."""
    from pipeline.runfolder import LOCK_NAME, lock_folder

    out = tmp_path / "run"
    seen = []
    execute = pipeline.run.execute

    def execute_and_try_the_lock(*a, **k):
        with pytest.raises(ConfigError, match=f"process {os.getpid()}") as refused:
            lock_folder(out, "resume")
        seen.append(str(refused.value))
        return execute(*a, **k)

    monkeypatch.setattr(pipeline.run, "execute", execute_and_try_the_lock)
    run_sweep(to_plain(compose([*SMALL, "axes.n_servers=[20]", "axes.d=[2]", "replications=1",
                                f"output_dir={out}"])), quiet=True)
    assert len(seen) == 1 and "(run since" in seen[0], seen
    lock_folder(out, "resume").release()
    assert (out / LOCK_NAME).read_text() == ""  # a released lock names no holder


@pytest.mark.integration  # real command lines: CI runs them with -m integration
def test_two_resumes_of_one_folder_the_second_is_refused_and_the_rows_are_an_uninterrupted_runs(tmp_path):
    """The first resume is stopped (SIGSTOP) while it holds the folder; the second exits 2 in
    one line naming the first's process id and writes nothing; the first then finishes, and
    the rows are those of the uninterrupted run (one per task, same estimates)."""
    out = tmp_path / "run"
    run_sweep(to_plain(compose([*SMALL, f"output_dir={out}"])), quiet=True)
    reference = pl.read_parquet(out / "results.parquet")
    assert reference.height == 12
    _as_if_killed(out)
    first = subprocess.Popen(_resume_cmd(out), cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:  # PARTIAL says "resuming" once the first has the folder (and its lock) and runs tasks
        deadline = time.monotonic() + 180
        partial = out / PARTIAL_MARKER
        while not (partial.read_text() if partial.exists() else "").startswith("resuming"):
            assert first.poll() is None, f"the first resume ended before it ran a task:\n{first.stdout.read()}"
            assert time.monotonic() < deadline, "the first resume did not start in 180 s"
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGSTOP)  # it holds the lock, and keeps it while stopped
        second = subprocess.run(_resume_cmd(out), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                                timeout=300)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    lines = [ln for ln in (second.stdout + second.stderr).splitlines() if ln.strip()]
    assert second.returncode == EXIT_CONFIG, second.stdout + second.stderr
    assert len(lines) == 1 and f"is being written by process {first.pid} on host" in lines[0], lines
    text = first.communicate(timeout=300)[0]
    assert first.returncode == 0, text
    rows = pl.read_parquet(out / "results.parquet")
    assert read_results(out / "results").height == rows.height == 12
    assert rows["task_id"].n_unique() == 12
    assert rows.drop(RUN_COLUMNS).equals(reference.drop(RUN_COLUMNS)), "rows differ from the uninterrupted run's"
    assert run_state.read(out)["resumed"] == 1 and run_state.read(out)["status"] == "finished"
    assert not (out / PARTIAL_MARKER).exists()


# ----------------------------------------------------------------------- the code, recorded

def _other_code(tmp_path: Path, monkeypatch, commit: str) -> dict:
    """This process's code as another commit: the state ``pipeline.submit`` records for a Ray
    job (LBSWEEP_PROVENANCE), which :func:`pipeline.archive.git_state` reads."""
    folder = tmp_path / "other_checkout"
    folder.mkdir()
    (folder / "git.json").write_text(json.dumps({"commit": commit, "dirty": False, "status": ""}))
    monkeypatch.setenv("LBSWEEP_PROVENANCE", str(folder))
    return {"commit": commit, "dirty": False, "changes": None}


def test_a_resume_from_other_code_is_refused_and_with_the_flag_recorded(tmp_path, monkeypatch, caplog):
    out = tmp_path / "run"
    run_sweep(to_plain(compose([*SMALL, "axes.n_servers=[20]", f"output_dir={out}"])), quiet=True)
    # a kill after some rows: the rows of some tasks are gone (the chunks rewritten without them)
    files = sorted((out / "results").glob("*.parquet"))
    written = pl.concat([pl.read_parquet(f) for f in files])
    lost = set(written["task_id"].to_list()[: max(1, written.height // 2)])
    for f in files:
        f.unlink()
    write_chunk(out / "results", written.filter(~pl.col("task_id").is_in(sorted(lost))))
    state = run_state.read(out)
    state["status"] = "running"
    run_state.write(out, state)

    other = _other_code(tmp_path, monkeypatch, "c0ffee" * 6 + "c0ff")
    before = sorted(p.name for p in (out / "results").iterdir())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline"):
        code = resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress"])
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert code == EXIT_CONFIG and len(shown) == 1, shown
    from pipeline.archive import code_label, code_state

    monkeypatch.delenv("LBSWEEP_PROVENANCE")
    here = code_state(PROJECT_ROOT)
    monkeypatch.setenv("LBSWEEP_PROVENANCE", str(tmp_path / "other_checkout"))
    recorded = run_state.read(out)["code"]  # recorded at the start of the run
    assert [{k: c[k] for k in ("commit", "dirty", "changes")} for c in recorded] == [here]
    assert (code_label(here) or "unknown") in shown[0] and other["commit"] in shown[0], shown
    assert "--allow-code-change" in shown[0]
    assert sorted(p.name for p in (out / "results").iterdir()) == before  # nothing ran
    assert run_state.read(out)["resumed"] == 0

    assert resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress", "--allow-code-change"]) == 0
    history = run_state.read(out)["code"]
    assert [c["commit"] for c in history] == [here["commit"], other["commit"]]
    with tarfile.open(out / "archive.tar.gz") as tar:
        git = json.load(tar.extractfile("run/git.json"))
    assert [c["commit"] for c in git["commits"]] == [here["commit"], other["commit"]]
    rows = read_results(out / "results")
    by_task = dict(zip(rows["task_id"], rows["code_commit"]))
    assert len(by_task) == rows.height == 6
    assert all(by_task[t] == other["commit"] for t in lost)  # the rows this resume computed
    assert all(by_task[t] == code_label(here) for t in set(by_task) - lost)
    # the same other code again: no flag needed, nothing appended
    assert resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress"]) == 0
    assert len(run_state.read(out)["code"]) == 2


def test_a_run_folder_that_records_no_code_is_other_code(tmp_path, caplog):
    """A folder started before runs recorded their code (run.json without ``code``) is resumed
    only with --allow-code-change; its old rows have no ``code_commit`` column and are read back
    next to the new rows (null there)."""
    out = tmp_path / "run"
    run_sweep(to_plain(compose([*SMALL, "axes.n_servers=[20]", "axes.d=[2]", f"output_dir={out}"])), quiet=True)
    state = run_state.read(out)
    state.pop("code", None)  # as runs wrote it before
    state["status"] = "running"
    run_state.write(out, state)
    files = sorted((out / "results").glob("*.parquet"))
    first = pl.concat([pl.read_parquet(f) for f in files]).head(1)
    for f in files:
        f.unlink()
    # one row kept, as the old code wrote it: one file per row, no code_commit column
    first.drop("code_commit").write_parquet(out / "results" / f"{first['task_id'][0]}-0123456789ab.parquet")
    with caplog.at_level(logging.INFO, logger="pipeline"):
        assert resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress"]) == EXIT_CONFIG
    assert any("not recorded" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress", "--allow-code-change"]) == 0
    rows = read_results(out / "results")
    assert rows.height == 3 and rows["code_commit"].null_count() == 1
    assert [c["commit"] for c in run_state.read(out)["code"]][0] is None


def test_a_resume_with_other_code_records_every_commit_on_the_mlflow_parent(tmp_path, monkeypatch):
    """With MLflow on: the parent run's ``code_commits`` tag names the code the run started
    with, and after a resume with --allow-code-change both codes, in order, as git.json and
    the rows' ``code_commit`` do."""
    from mlflow.tracking import MlflowClient

    from pipeline.archive import code_label, code_state

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "run"
    tracked = [o for o in SMALL if not o.startswith("mlflow.")] + [f"mlflow.tracking_uri={uri}"]
    first = run_sweep(to_plain(compose([*tracked, "axes.n_servers=[20]", "axes.d=[2]", f"output_dir={out}"])),
                      quiet=True)
    here = code_label(code_state(PROJECT_ROOT)) or "unknown"
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(first["mlflow_run_id"]).data.tags["code_commits"] == here
    files = sorted((out / "results").glob("*.parquet"))  # a kill lost every row
    for f in files:
        f.unlink()
    state = run_state.read(out)
    state["status"] = "running"
    run_state.write(out, state)

    other = _other_code(tmp_path, monkeypatch, "be11ed" * 6 + "be11")
    assert resume([str(out), "--backend", "serial", "--no-progress", "--allow-code-change"]) == 0
    parent = client.get_run(first["mlflow_run_id"])  # the resume continues the run's own parent
    assert parent.data.tags["code_commits"] == f"{here}, {other['commit']}"
    assert [c["commit"] for c in run_state.read(out)["code"]][-1] == other["commit"]
    assert set(read_results(out / "results")["code_commit"]) == {other["commit"]}


# ------------------------------------------------------------------- merging: one row per task

def test_merging_rows_never_keeps_two_rows_of_one_task(tmp_path, caplog):
    schema = schema_for({"n_servers": int})
    base = {"sweep": "s", "run_id": "r", "point_id": 0, "replication": 0, "engine": "agent",
            "policy": "pod", "status": "ok", "n_servers": 10}
    for i, task in enumerate(["p0-agent-r000", "p0-agent-r000", "p1-agent-r000", "p0-agent-r000"]):
        write_chunk(tmp_path, rows_frame([{**base, "task_id": task, "mean_response": 1.0 + (task == "p1-agent-r000"),
                                           "wall_time": float(i)}], schema))
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        frame = read_results(tmp_path)
        again = read_results(tmp_path)
    assert frame["task_id"].to_list() == ["p0-agent-r000", "p1-agent-r000"]
    assert frame.equals(again)  # the same row kept every time
    assert any("2 rows dropped" in r.getMessage() for r in caplog.records)


def test_an_error_row_is_never_kept_beside_a_result_of_its_task(tmp_path, caplog):
    """A failed attempt's row and a result of the same task: the result is kept, whichever file
    comes first (chunks sort by write time; files of runs made before chunks, named by task
    id, sort after them)."""
    schema = schema_for({"n_servers": int})
    base = {"sweep": "s", "run_id": "r", "point_id": 0, "replication": 0, "engine": "agent",
            "policy": "pod", "n_servers": 10}
    failed = {**base, "task_id": "p00000-agent-r000", "status": "error", "error": "boom"}
    good = {**base, "task_id": "p00000-agent-r000", "status": "ok", "mean_response": 1.5}
    other = {**base, "task_id": "p00001-agent-r000", "point_id": 1, "status": "ok", "mean_response": 2.0}
    cases = {"error first": [[failed, other], [good]], "result first": [[good, other], [failed]]}
    for name, chunks in cases.items():
        folder = tmp_path / name
        for rows in chunks:
            write_chunk(folder, rows_frame(rows, schema))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pipeline"):
            frame = read_results(folder)
        assert frame["task_id"].to_list() == ["p00000-agent-r000", "p00001-agent-r000"], name
        assert frame["status"].to_list() == ["ok", "ok"] and frame["mean_response"][0] == 1.5, name
        assert any("1 rows dropped" in r.getMessage() for r in caplog.records), name
    # the error in a chunk, the result in a file of the old layout (named by task id: after it)
    folder = tmp_path / "old layout"
    write_chunk(folder, rows_frame([failed, other], schema))
    rows_frame([good], schema).write_parquet(folder / "p00000-agent-r000-0123456789ab.parquet")
    assert read_results(folder)["status"].to_list() == ["ok", "ok"]


class Killed(BaseException):
    """A SIGKILL of the driver at a chosen point: nothing after it runs (not an Exception, so no
    handler of the pipeline takes it for a failure of its own)."""


#: the tasks that fail in the first run (both replications of one agent point)
FAILING = ("p00002-agent-r000", "p00002-agent-r001")


def _on_disk(out: Path) -> pl.DataFrame:
    """Every row in ``results/`` (not ``results/failed/``), duplicates and all."""
    files = sorted((out / "results").glob("*.parquet"))
    return pl.concat([pl.read_parquet(f).select("task_id", "status") for f in files])


def _no_error_beside_a_result(out: Path) -> None:
    rows = _on_disk(out)
    with_result = set(rows.filter(pl.col("status") != "error")["task_id"].to_list())
    errors = set(rows.filter(pl.col("status") == "error")["task_id"].to_list())
    assert not (errors & with_result), f"error rows beside a result: {sorted(errors & with_result)}"


@pytest.mark.parametrize("kill", ["after setting aside", "before removing the rewritten chunk",
                                  "while retrying"])
def test_a_retry_of_failed_tasks_killed_part_way_leaves_one_row_per_task(tmp_path, monkeypatch, kill):
    """Two tasks fail; ``--retry-failed`` is killed (i) after their rows moved to results/failed/
    and before the chunk that held them is rewritten, (ii) after it is rewritten and before the
    old one is removed (every other row of that chunk on disk twice), or (iii) after the first
    retried task's result is written. At no point does a task's error row sit beside a result of
    that task; a plain resume then a ``--retry-failed`` resume end with the rows of a run where
    nothing failed."""
    import pipeline.store
    import sim

    # rows in chunks of many (a failed task's row beside others), the first run's in one
    small = [*SMALL, "execution.chunk_seconds=600"]
    reference = run_sweep(to_plain(compose([*small, f"output_dir={tmp_path / 'ref'}"])), quiet=True)["frame"]
    seeds = {r["seed"] for r in reference.iter_rows(named=True) if r["task_id"] in FAILING}
    real_run = sim.run

    def failing(task):
        if task.get("seed") in seeds:
            raise RuntimeError("boom")
        return real_run(task)

    out = tmp_path / "run"
    monkeypatch.setattr(sim, "run", failing)
    first = run_sweep(to_plain(compose([*small, f"output_dir={out}"])), quiet=True)
    assert sorted(first["frame"].filter(pl.col("status") == "error")["task_id"]) == list(FAILING)
    monkeypatch.setattr(sim, "run", real_run)

    real_write = pipeline.store.write_chunk
    if kill == "while retrying":
        retried = []

        def run_then_kill(task):
            if task.get("seed") in seeds:
                retried.append(task["seed"])
                if len(retried) == 2:
                    raise Killed
            return real_run(task)

        monkeypatch.setattr(sim, "run", run_then_kill)
    else:
        def write_then_kill(folder, frame):
            path = real_write(folder, frame)
            if (Path(folder).name == "failed") == (kill == "after setting aside"):
                raise Killed
            return path

        monkeypatch.setattr(pipeline.store, "write_chunk", write_then_kill)
    with pytest.raises(Killed):
        resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress", "--retry-failed"])
    monkeypatch.setattr(sim, "run", real_run)
    monkeypatch.setattr(pipeline.store, "write_chunk", real_write)
    _no_error_beside_a_result(out)
    if kill == "while retrying":  # the first retried task's row was written (the run's end
        assert len(retried) == 2  # writes what waits; a SIGKILL's loss is a resume's to rerun)
        assert set(_on_disk(out)["task_id"]) == set(reference["task_id"]) - {FAILING[1]}
    if kill == "before removing the rewritten chunk":
        assert _on_disk(out)["task_id"].n_unique() < _on_disk(out).height  # rows there twice

    # a plain resume runs the tasks without a row: the failed ones too where the kill came after
    # their rows had left results/ (exit 0), else their error rows stay (exit 1: tasks failed)
    code = resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress"])
    assert code == (0 if kill == "while retrying" else 1)
    _no_error_beside_a_result(out)
    rows = read_results(out / "results")
    assert rows["task_id"].to_list() == reference["task_id"].to_list()  # one row per task
    assert resume([str(out), "--backend", "serial", "--no-mlflow", "--no-progress", "--retry-failed"]) == 0
    _no_error_beside_a_result(out)
    rows = read_results(out / "results")
    assert (rows["status"] == "ok").all()
    volatile = [*RUN_COLUMNS, "run_id"]  # two runs: the reference's run id is its own
    assert rows.drop(volatile).equals(reference.drop(volatile))
    assert pl.read_parquet(out / "results.parquet").drop(volatile).equals(reference.drop(volatile))


# --------------------------------------------------------------- sweep files: no interpolation

@pytest.mark.integration  # real command lines: CI runs them with -m integration
def test_an_interpolation_in_a_sweep_file_is_refused_and_the_environment_stays_out(tmp_path):
    conf = tmp_path / "conf"
    (conf / "sweep").mkdir(parents=True)
    (conf / "sweep" / "leaky.yaml").write_text(  # tiny (mean field only): what 230ea18 ran
        "# @package _global_\nname: leaky\ndescription: ${oc.env:FAKE_SECRET}\nengines: [meanfield]\n"
        "params:\n  n_servers: 20\n")
    env = {**_env(), "FAKE_SECRET": "s3cr3t-do-not-log"}
    out = tmp_path / "out"
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pipeline", "+sweep=leaky", f"hydra.searchpath=[file://{conf}]",
                           f"output_dir={out}", "mlflow.enabled=false", "execution.backend=serial"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == EXIT_CONFIG and len(lines) == 1, proc.stdout + proc.stderr
    assert "description='${oc.env:FAKE_SECRET}' is an interpolation" in lines[0] and "leaky.yaml" in lines[0]
    assert not out.exists()
    for f in tmp_path.rglob("*"):
        assert not f.is_file() or b"s3cr3t" not in f.read_bytes(), f


def test_interpolations_are_refused_through_a_defaults_list_but_hydras_own_configs_keep_theirs(tmp_path):
    conf = tmp_path / "conf"
    (conf / "sweep").mkdir(parents=True)
    (conf / "sweep" / "inner.yaml").write_text("# @package _global_\nparams:\n  lam: ${oc.env:HOME}\n")
    (conf / "sweep" / "outer.yaml").write_text("# @package _global_\ndefaults:\n  - inner\n  - _self_\nname: o\n")
    with pytest.raises(ConfigError, match=r"inner\.yaml.*params\.lam='\$\{oc\.env:HOME\}' is an interpolation"):
        check_sweep_files([f"hydra.searchpath=[file://{conf}]", "+sweep=outer"], CONF)
    # the shipped primary config names Hydra's folders with ${now:...}: as --config-name it passes
    check_sweep_files(["--config-name", "config", "+sweep=smoke"], CONF)
    for name in sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")):  # every shipped sweep
        check_sweep_files([f"+sweep={name}"], CONF)


# ---------------------------------------------------------------- output_dir: no symbolic link

@pytest.mark.parametrize("dangling", [True, False])
def test_a_symlinked_output_dir_is_refused(tmp_path, monkeypatch, caplog, dangling):
    def no_ray(*a, **k):
        raise AssertionError("Ray's connect was called")

    monkeypatch.setattr(pipeline.run, "connect", no_ray)
    target = tmp_path / "elsewhere"
    if not dangling:
        target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        code = run_cli(lambda: run_sweep(to_plain(compose([*SMALL, f"output_dir={link}"])), quiet=True))
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert code == EXIT_CONFIG and len(shown) == 1, shown
    assert f"output_dir='{link}' is a symbolic link" in shown[0], shown
    assert link.is_symlink() and target.exists() == (not dangling)
    assert not dangling or not target.exists()
    assert dangling or not any(target.iterdir())


def test_resume_and_reproduce_refuse_a_symbolic_link_as_the_folder(tmp_path, caplog):
    from pipeline.reproduce import reproduce

    out = tmp_path / "run"
    run_sweep(to_plain(compose([*SMALL, "axes.n_servers=[20]", "axes.d=[2]", f"output_dir={out}"])), quiet=True)
    link = tmp_path / "link"
    link.symlink_to(out)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        assert resume([str(link), "--backend", "serial", "--no-mlflow", "--no-progress"]) == EXIT_CONFIG
    assert any("is a symbolic link" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    dangling = tmp_path / "rerun_link"
    dangling.symlink_to(tmp_path / "rerun_target")
    with pytest.raises(ConfigError, match="--out=.* is a symbolic link"):
        reproduce(out / "archive.tar.gz", dangling, backend="serial", progress=False)
    assert not (tmp_path / "rerun_target").exists()
