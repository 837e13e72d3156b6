"""One sweep from a composed config to results, analysis, MLflow and the archive.

Order matters for bad input: the whole plan is validated (:func:`pipeline.plan.make_plan`)
before anything is written or started, so a refused config leaves only Hydra's log behind (in
``outputs/.log/``). The run folder is made by :func:`run_sweep` itself, exclusively, once Ray is
up (:mod:`pipeline.runfolder`): one run, one folder.

The resume contract (docs/running.md, "Resume"): one writer per run folder (a run or a resume
holds the folder's lock, :func:`pipeline.runfolder.lock_folder`, for its whole life; a second
is refused naming the holder's process id); the code's commit and dirty state are recorded in
``run.json`` (``code``) at the start, and a resume from other code is refused unless
``allow_code_change``, which then appends the new code state there (it reaches the archive's
``git.json`` as ``commits``, and each row computed by it names it in ``code_commit``); the
rows are read back with one row per task (:func:`pipeline.store.read_results`); an
``output_dir`` that is a symbolic link is refused.
"""
from __future__ import annotations

import inspect
import json
import logging
import shutil
import time
import uuid
from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline import state as run_state
from pipeline.errors import ConfigError, OutputError
from pipeline.execute import PROJECT_ROOT, connect, execute
from pipeline.plan import Plan, make_plan
from pipeline.runfolder import OUTPUTS, attach_log, check_new, check_not_link, create_exclusive, lock_folder, new_run_folder, stamp
from pipeline.store import ChunkWriter, done_task_ids, read_results, schema_for, set_aside_failed, write_frame
from sim.engines import MEANFIELD
from sim.registry import STOCHASTIC_ENGINES

log = logging.getLogger("pipeline")


def to_plain(cfg: DictConfig | dict) -> dict:
    """The composed config as plain, resolved Python values (Hydra's own section dropped)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = dict(cfg)
    cfg.pop("hydra", None)
    return cfg


def tasks_document(plan: Plan) -> dict:
    return {
        "sweep": plan.sweep,
        "root_seed": plan.root_seed,
        "param_columns": plan.param_columns,
        "varying": plan.varying,
        "tasks": plan.tasks,
    }


#: exit codes of the command lines (README.md): 1 = some tasks failed (their rows say why),
#: 2 = refused input (nothing started), 3 = Ray could not be started or joined (nothing
#: written), 4 = the MLflow store cannot be reached, read or written (nothing started),
#: 5 = the run folder could not be written (disk full ...; run.json ``failed``, resumable),
#: 130 = interrupted (the folder is marked partial; ``python -m pipeline.resume``)
EXIT_OK, EXIT_TASKS_FAILED, EXIT_CONFIG, EXIT_CLUSTER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TRACKING, EXIT_OUTPUT = 4, 5
#: present in an output folder while some task has no result (interrupted, killed or running)
PARTIAL_MARKER = "PARTIAL"
STATE_FILE = run_state.STATE_FILE


class Interrupted(Exception):
    """The run was stopped (Ctrl-C, SIGTERM, ``ray job stop``); its folder is marked partial."""

    def __init__(self, out_dir: Path, done: int, total: int):
        super().__init__(f"interrupted: {done} of {total} tasks have results in {out_dir}; "
                         f"resume with: python -m pipeline.resume {out_dir}")
        self.out_dir, self.done, self.total = out_dir, done, total


def _write_state(out_dir: Path, state: dict) -> None:
    run_state.write(out_dir, state)  # space reserved: it can end the run on a full disk


def _check_run_folder(out_dir: Path) -> None:
    for name in ("config.yaml", "tasks.json", STATE_FILE):
        if not (out_dir / name).is_file():
            raise ConfigError(f"output_dir={str(out_dir)!r} has no {name}: not a run folder to resume")


def _check_resumable(out_dir: Path, plan: Plan) -> dict:
    _check_run_folder(out_dir)
    archived = json.loads((out_dir / "tasks.json").read_text())["tasks"]
    if [(t["_meta"]["task_id"], t.get("seed")) for t in archived] != \
            [(t["_meta"]["task_id"], t.get("seed")) for t in plan.tasks]:
        raise ConfigError(f"output_dir={str(out_dir)!r}: its tasks.json differs from the tasks its "
                          "config.yaml plans now (changed code or config?); refusing to mix them")
    return run_state.read(out_dir)


def _code_entry(code: dict) -> dict:
    return {**code, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _check_code(out_dir: Path, state: dict, code: dict, allow_code_change: bool) -> None:
    """Refuse (ConfigError) to resume ``out_dir`` with code other than the one that last ran on
    it (run.json's ``code``, the last entry) unless ``allow_code_change``; then the new code
    state is appended to ``state["code"]``."""
    from pipeline.archive import code_label, same_code

    history = state.get("code")
    last = history[-1] if isinstance(history, list) and history else None
    if same_code(last, code):
        return

    def label(c):
        return (code_label(c) or "unknown (not a git checkout)") if c else "not recorded (started before runs recorded their code)"

    if not allow_code_change:
        raise ConfigError(f"output_dir={str(out_dir)!r}: its rows were computed by commit {label(last)}, "
                          f"this code is commit {label(code)}: a resume would mix rows of two codes; "
                          "resume from that commit, or pass --allow-code-change (every commit that "
                          "computed rows is then recorded)")
    log.warning("resuming %s with other code (--allow-code-change): commit %s after %s; both are "
                "recorded (run.json code, the archive's git.json commits, the rows' code_commit)",
                out_dir, label(code), label(last))
    state["code"] = [*(history if isinstance(history, list) else [{"commit": None, "dirty": None,
                                                                      "changes": None, "since": None,
                                                                      "note": "not recorded"}]),
                     _code_entry(code)]


def run_sweep(cfg: DictConfig | dict, project_root: Path = PROJECT_ROOT, quiet: bool = False,
              resume: bool = False, retry_failed: bool = False, group=None,
              archived: bool = False, allow_code_change: bool = False) -> dict:
    """Validate, execute, record, analyse, track and archive one sweep; return what was made.

    The run folder is made here once the plan is valid and Ray is up (:mod:`pipeline.runfolder`):
    ``output_dir`` if given (refused, ConfigError, if it exists: checked before Ray starts and
    again by the exclusive ``mkdir``), else a new ``outputs/<name>/<date>_<time>[-k]`` of the
    working folder (in a multirun, ``group.job_folder``); the log moves into it. A refused input
    or a dry run makes no folder.
    With ``resume``, ``output_dir`` is an existing run folder: only the tasks without a row
    in ``results/`` run (with ``retry_failed``, also those whose row is an error: their old rows move to
    ``results/failed/``), under the run's own run id and MLflow run, so that the final rows are
    those of an uninterrupted run. Raises :class:`Interrupted` after recording an interruption.
    ``group`` (a :class:`pipeline.multirun.Group`, in a Hydra multirun) shares its Ray session
    and nests the sweep's MLflow parent run under the multirun's. With ``resume`` or
    ``archived`` (a reproduction of an archive) a parameter that no task uses is logged, not
    refused: the run may predate that rule.
    The run or resume holds the folder's lock (:func:`pipeline.runfolder.lock_folder`) until it
    returns: a resume takes it before anything else (ConfigError naming the holder if another
    process has it), and then refuses code other than the one recorded in run.json unless
    ``allow_code_change`` (module doc). An ``output_dir`` that is a symbolic link is refused.
    """
    conf = to_plain(cfg)
    plan = make_plan(conf, unused="warn" if (resume or archived) else "refuse")
    if conf.get("plan"):
        from pipeline.dryrun import describe

        cpus = conf.get("plan_cpus", 64)
        if not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1:
            raise ConfigError(f"plan_cpus={cpus!r} must be a positive integer")
        print(describe(plan, conf, cpus))
        return {"errors": 0, "plan": plan, "dry_run": True}
    given = conf.get("output_dir")
    if given:
        check_not_link(given)  # before resolve(), which would follow it
    out_dir = Path(given).resolve() if given else None
    from pipeline.archive import code_state

    code = code_state(project_root)  # the code this process computes with (run.json, rows)
    lock = started = None
    try:
        if resume:
            if out_dir is None:
                raise ConfigError("output_dir is not set: resume needs the run folder")
            _check_run_folder(out_dir)
            lock = lock_folder(out_dir, "resume")  # first: run.json is read under the lock
            state = _check_resumable(out_dir, plan)
            _check_code(out_dir, state, code, allow_code_change)
        elif out_dir is not None:
            check_new(out_dir)  # refused before Ray starts; create_exclusive below decides
        # before anything is written: a failure leaves nothing
        from pipeline.models import py_modules

        shipped = py_modules(conf)  # out-of-tree models (pipeline/models.py)
        if conf["mlflow"]["enabled"]:  # a store that cannot be used: one line, exit 4, before Ray
            _check_tracking(conf["mlflow"], project_root)
            from pipeline.tracking import StoreStart

            # MLflow's start-up (import, a new SQLite store) in a thread while Ray starts;
            # nothing of it is written where the run writes before Ray is up
            started = StoreStart(conf["mlflow"]["tracking_uri"], project_root)
        session = (group.connect(conf["execution"], shipped) if group is not None
                   else connect(conf["execution"], shipped))
        try:
            if not resume:  # Ray is up: claim the folder (a concurrent run gets another one)
                if out_dir is not None:
                    out_dir = create_exclusive(out_dir)
                elif group is not None:
                    out_dir = group.job_folder(plan.sweep)
                else:
                    out_dir = new_run_folder(Path(OUTPUTS) / plan.sweep, stamp())
                lock = lock_folder(out_dir, "run")  # a resume started now waits for its end
                conf["output_dir"] = str(out_dir)  # config.yaml names the folder (resume, reproduce)
            attach_log(out_dir)
            return _run(conf, plan, out_dir, out_dir / "results", session, project_root, quiet,
                        state if resume else None, retry_failed, group, code, started)
        except (Interrupted, ConfigError):
            raise
        except Exception as exc:  # a full disk (or a failing one): one line, exit 5
            reason = run_state.output_problem(exc, out_dir)
            if reason is None:
                raise
            raise OutputError(f"cannot write the run folder {out_dir}: {reason}; run.json says failed, "
                              f"the rows written so far are kept: free space, then python -m "
                              f"pipeline.resume {out_dir}") from None
        finally:
            if group is None:  # a multirun's session serves its next sweep (Group.close ends it)
                session.close()
    finally:
        if started is not None:  # its temporary store, unless installed (a refusal, Ray failed)
            started.discard()
        if lock is not None:  # after the session: the folder is written until here
            lock.release()


def _run(conf: dict, plan: Plan, out_dir: Path, results_dir: Path, session, project_root: Path,
         quiet: bool, state: dict | None, retry_failed: bool, group=None, code: dict | None = None,
         started=None) -> dict:
    t0 = time.perf_counter()
    resuming = state is not None
    if resuming:
        run_id = state["run_id"]
        if retry_failed:
            set_aside_failed(results_dir)
    else:
        run_id = uuid.uuid4().hex[:16]  # out_dir: made by run_sweep, empty but for the log
        (out_dir / PARTIAL_MARKER).write_text("this run has not finished: some tasks have no result; "
                                              f"python -m pipeline.resume {out_dir}\n")
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(conf)))
        (out_dir / "tasks.json").write_text(json.dumps(tasks_document(plan), indent=1))
        from pipeline.tracking import command_line_overrides

        overrides = command_line_overrides()
        if overrides is not None:  # what was typed, beside the resolved config.yaml
            (out_dir / "overrides.txt").write_text("".join(f"{o}\n" for o in overrides))
        state = {"sweep": plan.sweep, "run_id": run_id, "status": "running",
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "n_tasks": len(plan.tasks),
                 "mlflow_run_id": None, "tracking_uri": None, "resumed": 0,
                 "code": [_code_entry(code or {})]}
    state.pop("reason", None)  # of an earlier failure, on resume
    done = done_task_ids(results_dir)
    todo = [t for t in plan.tasks if t["_meta"]["task_id"] not in done]
    n_sim = sum(t["engine"] in STOCHASTIC_ENGINES for t in todo)
    log.info("sweep %r: %d points, %d tasks (%d to run, %d simulations), output %s", plan.sweep,
             len(plan.points), len(plan.tasks), len(todo), n_sim, out_dir)
    if resuming:
        state["resumed"] = state.get("resumed", 0) + 1
        (out_dir / PARTIAL_MARKER).write_text(f"resuming: {len(todo)} tasks to run\n")
    state["status"] = "running"
    _write_state(out_dir, state)

    tracker = None
    from pipeline.archive import code_label
    from pipeline.tracking import TrackingGuard

    provenance = {"sweep": plan.sweep, "run_id": run_id, "code_commit": code_label(code)}

    def lost(reason: str) -> None:  # recorded at once: a later kill still leaves it in run.json
        state["tracking"] = f"lost: {reason}"
        run_state.finish(out_dir, state)

    # every MLflow call goes through the guard: a store failing mid-run loses tracking (one
    # warning), never the run
    guard = TrackingGuard(on_lost=lost)
    state["tracking"] = "ok" if conf["mlflow"]["enabled"] else "off"
    if conf["mlflow"]["enabled"]:
        tracker = guard(_start_tracking, conf, plan, run_id, out_dir, project_root, state, resuming, group,
                        started)
        if tracker is not None:
            _write_state(out_dir, state)
    status = "FAILED"
    try:
        ex = conf["execution"]
        writer = ChunkWriter(results_dir, schema_for(plan.param_types), provenance,
                             max_rows=ex.get("chunk_rows"), max_seconds=ex.get("chunk_seconds"))
        try:  # rows go to disk in chunks (pipeline/store.py); what waits is written on any exit
            execute(
                todo, conf["execution"],
                on_row=lambda row: (writer.add(row), tracker is not None and guard(tracker.log_task, row)),
                desc=plan.sweep, session=session, on_idle=writer.flush_if_due,
            )
        finally:
            writer.flush()
        frame = read_results(results_dir)
        errors = int((frame["status"] == "error").sum()) if frame.height else 0
        write_frame(frame, out_dir / "results.parquet")
        if errors:
            log.warning("%d of %d tasks failed; see the 'error' column of results.parquet", errors, len(plan.tasks))
        _warn_missed_precision(frame, conf["run"].get("precision"))

        from analysis import analyze

        # the analysis is made anew from every row: what an earlier attempt of this run folder
        # wrote there (a resume after a failed analysis) must not reach the archive
        shutil.rmtree(out_dir / "analysis", ignore_errors=True)
        params = analysis_params(plan)
        analysis = analyze(frame, params, out_dir / "analysis", plan.sweep)
        analysis["params"] = params
        analysis["extra"] = {}
        from analysis import model_analyses

        ANALYSES = model_analyses()

        for name in conf.get("extra_analyses") or []:
            fn = ANALYSES[name]
            kw = {"context": analysis_context(conf)} if "context" in inspect.signature(fn).parameters else {}
            analysis["extra"][name] = fn(frame, params, out_dir / "analysis" / name, plan.sweep, **kw)
        elapsed = time.perf_counter() - t0

        from pipeline.archive import write_archive
        from pipeline.models import archive_members

        def archive_run() -> Path:
            return write_archive(out_dir, {
                **archive_members(conf),  # out-of-tree models' source (pipeline/models.py)
                "config.yaml": out_dir / "config.yaml",
                "tasks.json": out_dir / "tasks.json",
                **({"overrides.txt": out_dir / "overrides.txt"} if (out_dir / "overrides.txt").exists() else {}),
                "results": results_dir,
                "analysis": out_dir / "analysis",
                "tracking.json": _tracking_document(state),
            }, project_root, commits=state.get("code"))

        archive = archive_run()
        if tracker is not None and guard.lost is None:
            from pipeline.mlflow_log import log_sweep

            guard(log_sweep, tracker, plan, analysis, [out_dir / "results.parquet", out_dir / "config.yaml",
                                                        out_dir / "analysis", archive], elapsed, errors)
            if guard.lost is not None:  # lost while uploading: the archive says so too
                archive = archive_run()
        status = "FAILED" if errors else "FINISHED"
        state["status"] = "failed" if errors else "finished"
        state["n_failed"] = errors
        state["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _write_state(out_dir, state)
        (out_dir / PARTIAL_MARKER).unlink(missing_ok=True)
    except KeyboardInterrupt:  # during the tasks, or after them (analysis, archive, MLflow)
        status = "KILLED"
        n_done = len(done_task_ids(results_dir))
        state["status"] = "interrupted"
        run_state.finish(out_dir, state)
        raise Interrupted(out_dir, n_done, len(plan.tasks)) from None
    except Exception as exc:  # a failure of the run itself (a full disk among them)
        state["status"] = "failed"
        state["reason"] = run_state.output_problem(exc, out_dir) or run_state.one_line(exc)
        run_state.finish(out_dir, state)  # in the reserved bytes when the disk is full
        raise
    finally:
        if state["status"] == "running":  # anything else that ends the run early
            state["status"] = "failed"
            run_state.finish(out_dir, state)
        if tracker is not None:
            guard(tracker.end, status)
    if not quiet:
        # the end of the console fits one screen (docs/running.md): the answer, then
        # one line of counts, the run folder and what is in it (paths in it relative), MLflow
        table = print_summary(analysis, plan, table_file=out_dir / SUMMARY_TABLE, folder=out_dir)
        where = f" on cluster {session.address}" if session.address else ""
        tracked = ""
        if guard.lost is not None:
            tracked = f"; mlflow: tracking lost ({guard.lost}), results and archive are complete"
        elif tracker is not None:
            tracked = f"; mlflow run {tracker.parent_id} in {tracker.uri}"
        print(f"{len(plan.tasks)} tasks ({errors} failed{', ' + str(len(todo)) + ' run now' if resuming else ''})"
              f" in {elapsed:.1f} s{where}{tracked}")
        own_reports = [x["report"] for x in analysis["extra"].values() if x.get("report")]
        report = own_reports[0] if own_reports else analysis.get("report")
        # results.parquet and archive.tar.gz are there too (README.md, "What a run writes")
        table_text = f"table {table.name}, " if table is not None else ""
        # relative to the working folder where it lies inside it, so that the line fits 120 columns
        print(f"run folder {_in(out_dir, Path.cwd())}: {table_text}report {_in(report, out_dir)}")
    return {"output_dir": out_dir, "frame": frame, "analysis": analysis, "archive": archive,
            "errors": errors, "run_id": run_id, "plan": plan, "ran": len(todo),
            "mlflow_run_id": tracker.parent_id if tracker else None, "tracking": state["tracking"]}


def _check_tracking(mlflow_cfg: dict, project_root: Path) -> None:
    """The store is reachable and usable (:func:`pipeline.tracking.check_store`, exit code 4),
    and MLflow's HTTP retries are bounded for the run."""
    from pipeline.tracking import DEFAULT_TIMEOUT, bound_http, check_store

    timeout = mlflow_cfg.get("timeout", DEFAULT_TIMEOUT)  # absent from older archived configs
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"mlflow.timeout={timeout!r} must be a positive number of seconds")
    check_store(mlflow_cfg["tracking_uri"], mlflow_cfg["experiment"], project_root, float(timeout))
    bound_http(float(timeout))


def _start_tracking(conf: dict, plan: Plan, run_id: str, out_dir: Path, project_root: Path,
                    state: dict, resuming: bool, group, started=None):
    """The sweep's tracker with its parent run (new, or the resumed run's own); ``started``:
    the store's start-up begun while Ray started (:class:`pipeline.tracking.StoreStart`)."""
    from pipeline.tracking import SweepTracker

    tracker = SweepTracker(conf["mlflow"]["tracking_uri"], conf["mlflow"]["experiment"], project_root,
                           started=started)
    from pipeline.mlflow_log import code_commits_tag

    # every code that computed rows (a resume with --allow-code-change appends its own), on the
    # parent as in git.json and the rows' code_commit
    label = code_commits_tag(state.get("code"))
    commits = {"code_commits": label} if label else {}
    reopened = resuming and state.get("mlflow_run_id") and tracker.reopen(state["mlflow_run_id"])
    if not reopened:  # a new sweep, or its run is gone from the store: a new parent run
        from pipeline.mlflow_log import start_sweep

        # flat params, tags (git commit, user, overrides, note); see pipeline/mlflow_log.py
        start_sweep(tracker, conf, plan, run_id, out_dir, project_root, extra_tags=commits)
        if group is not None:  # nested under the multirun's parent run
            from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

            tracker.set_tags({MLFLOW_PARENT_RUN_ID: group.parent_for(tracker)})
    state["mlflow_run_id"], state["tracking_uri"] = tracker.parent_id, tracker.uri
    if reopened and commits:  # after the run id is recorded: a store failing here loses tracking only
        tracker.set_tags(commits)
    return tracker


def _tracking_document(state: dict) -> str:
    """The archive's ``tracking.json``: the MLflow run and whether tracking held (``ok``,
    ``off``, or ``lost: <reason>``) when the archive was written."""
    return json.dumps({k: state.get(k) for k in ("tracking", "tracking_uri", "mlflow_run_id")}, indent=1)


#: the run-length parameters: a point's identity only where they are an axis
RUN_LENGTH = ("events", "time")


def _warn_missed_precision(frame: pl.DataFrame, target) -> None:
    """One warning line if simulations ended above the ``run.precision`` target (capped)."""
    if target is None or "rel_halfwidth" not in frame.columns or "runs" not in frame.columns:
        return
    sims = frame.filter(pl.col("runs").is_not_null())
    missed = sims.filter(pl.col("rel_halfwidth").is_null() | (pl.col("rel_halfwidth") > target))
    if missed.height:
        worst = missed["rel_halfwidth"].max()
        log.warning("%d of %d simulations missed run.precision=%g (relative 95%% half-width up to "
                    "%s; column rel_halfwidth): raise run.precision_cap or the events/time",
                    missed.height, sims.height, target, "n/a" if worst is None else f"{worst:.3g}")


def metric_of(analysis: dict) -> str:
    return next((f.get("metric") for f in analysis.get("fits", []) if f.get("metric")), "mean_response")


def _param_text(v) -> str:
    """A parameter's value as the console prints it (a float by ``%g``)."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def analysis_params(plan: Plan) -> list[str]:
    """The parameter columns that define a point (run length only where it is an axis; list
    parameters such as service_rates are left out: a list is not a group key, and a sweep that
    varies one does so through a variant, whose name is a column)."""
    return [p for p in plan.param_columns
            if (p not in RUN_LENGTH or p in plan.varying) and plan.param_types.get(p) is not list]


#: the per-point table, in the run folder, when it is too long or too wide for the console
def analysis_context(conf: dict) -> dict:
    """What an extra analysis may read of the sweep's own definitions (plain data, as the run's
    config.yaml has them): ``params``, ``variants`` and ``limit_path``. An analysis declares a
    ``context`` keyword to get it (the rule for d as the sweep wrote it, for one)."""
    def plain(v):
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else (
            [plain(x) for x in v] if isinstance(v, (list, tuple)) else v)
    return {key: plain(conf.get(key) or {}) for key in ("params", "variants", "limit_path")}


SUMMARY_TABLE = "summary.txt"
#: what the console shows of the per-point table: more rows or wider lines go to the file
CONSOLE_ROWS, CONSOLE_WIDTH = 40, 200


def _in(path, folder: Path | None) -> str:
    """``path`` relative to ``folder`` where it lies inside it, else as given."""
    if path is None:
        return "-"
    try:
        return str(Path(path).relative_to(folder)) if folder is not None else str(path)
    except ValueError:
        return str(path)


def _n_arms(summary: pl.DataFrame, arm_params: list[str]) -> int:
    """The simulated arms of the per-point summary: (policy, engine, arm parameters), limit
    engines' rows left out."""
    from analysis.aggregate import LIMIT_ENGINES

    sims = summary.filter(~pl.col("engine").is_in(list(LIMIT_ENGINES))) if "engine" in summary.columns else summary
    keys = [c for c in ("policy", "engine", *arm_params) if c in sims.columns]
    return sims.select(keys).unique().height if keys and sims.height else 0


def print_summary(analysis: dict, plan: Plan, table_file: Path | None = None,
                  folder: Path | None = None) -> Path | None:
    """A small table: each point's estimate with its 95% CI next to the mean-field value (to
    ``table_file`` instead when it has more than :data:`CONSOLE_ROWS` rows or lines wider than
    :data:`CONSOLE_WIDTH`: named in one line, or, with ``folder`` given, left for the caller
    to name; the file is returned); then the sweep's own verdicts (an analysis's
    ``console_lines`` where it has them: its answer on one screen, else its ``verdict_lines``)
    and the generic check of the gap to the mean field (collapsed to counts of every arm when
    the sweep has its own). Paths inside ``folder`` print relative to it."""
    summary = pl.read_parquet(analysis["summary"])
    if summary.height == 0:
        print("no successful results")
        return None
    # the shared mean-field engine's rows (sim.engines.MEANFIELD) are shown as a column instead
    mean_field = MEANFIELD.name
    if "mean_response_mf" in summary.columns and (summary["engine"] != mean_field).any():
        summary = summary.filter(pl.col("engine") != mean_field)
    shown = [p for p in analysis["params"] if p in plan.varying] or [
        p for p in analysis["params"] if p not in RUN_LENGTH]
    cols = ["policy", *shown, "engine", "n_rep", "mean_response", "mean_response_hw"]
    cols += [c for c in ("mean_response_mf", "mean_response_gap", "prob_wait", "mean_queue") if c in summary.columns]
    table = summary.select([c for c in cols if c in summary.columns]).rename(
        {"mean_response_hw": "ci95_halfwidth", "mean_response_mf": mean_field, "mean_response_gap": "gap"},
        strict=False,
    )
    # adapt to the sweep: no column that is empty throughout (e.g. no mean field), and parameter
    # columns whose values are all whole numbers printed as integers
    table = table.select([c for c in table.columns if table[c].null_count() < table.height])
    for c in shown:
        if c in table.columns and table[c].dtype == pl.Float64:
            vals = table[c].drop_nulls()
            if vals.len() and (vals == vals.round(0)).all() and vals.abs().max() < 2 ** 53:
                table = table.with_columns(pl.col(c).cast(pl.Int64))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True, float_precision=4,
                   tbl_width_chars=10_000, tbl_hide_column_data_types=True):
        text = str(table)
    too_wide = max(map(len, text.splitlines())) > CONSOLE_WIDTH
    written = None
    if table_file is not None and (table.height > CONSOLE_ROWS or too_wide):
        table_file.write_text(text + "\n")
        written = table_file
        if folder is None:
            print(f"per-point table ({table.height} rows, {table.width} columns: mean response with its "
                  f"95% CI half-width beside the mean field): {table_file}")
    else:
        print(text)
    # the model's own verdicts first (what the sweep is about), then the generic check
    extras = (analysis.get("extra") or {}).items()
    screen = [line for _, extra in extras for line in extra.get("console_lines") or []]
    own = [(name, line) for name, extra in extras if not extra.get("console_lines")
           for line in extra.get("verdict_lines", [])]
    for limit, limit_fits in (analysis.get("limit_fits") or {}).items():
        for f in limit_fits:
            arm = " ".join(f"{p}={_param_text(f[p])}" for p in analysis.get("arm_params", [])
                           if p in f and f[p] is not None and p not in ("policy", "engine"))
            own.append((limit, f"{f['policy']} [{f['engine']}] {arm}: N * gap of {metric_of(analysis)} "
                               f"against the refined mean field's V: {f['verdict']}"
                               + (f" ({f['note']})" if f.get("note") else "")))
    if screen:
        print()
        for line in screen:
            print(line)
    if own:
        print("\nverdicts of the sweep's own analysis (" + ", ".join(dict.fromkeys(n for n, _ in own))
              + "; its report says how each is judged):")
        for _, line in own:
            print(f"  {line}")
    generic = []  # one line per (policy, engine, arm): the engine is part of the arm
    for fit in analysis.get("fits", []):
        arm = " ".join(f"{p}={fit[p]:g}" if isinstance(fit.get(p), float) else f"{p}={fit.get(p)}"
                       for p in analysis.get("arm_params", []) if fit.get(p) is not None)
        line = (f"{fit.get('policy')} [{fit.get('engine')}] {arm}".rstrip()
                + f": {fit.get('verdict')}")
        if line not in generic:
            generic.append(line)
    if generic and (own or screen):  # the sweep's own verdicts answer it: the generic check in one line
        counts: dict[str, int] = {}
        for line in generic:  # "policy [engine] arm: verdict (detail)"
            word = line.split("]", 1)[1].split(": ", 1)[1].split(" (")[0]
            counts[word] = counts.get(word, 0) + 1
        # every arm counted: an arm without mean-field values at its points has no gap to fit
        n_arms = max(_n_arms(summary, list(analysis.get("arm_params") or [])), len(generic))
        parts = [f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        if n_arms > len(generic):
            parts.append(f"{n_arms - len(generic)} no mean field")
        # the metric and the rule are in the generic report, one line per arm
        print(f"{'' if screen else chr(10)}generic gap check ({_in(analysis.get('report'), folder)}): "
              f"{n_arms} arm{'' if n_arms == 1 else 's'}, " + ", ".join(parts))
    elif generic:
        print(f"\nverdicts: the gap of {metric_of(analysis)} to the mean field as N grows:")
        for line in generic:
            print(f"  {line}")
    return written
