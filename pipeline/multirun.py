"""``python -m pipeline -m +sweep=a,b ...``: several sweeps under one Ray start and one MLflow parent.

Hydra's multirun (its basic launcher) calls the app once per combination of the comma lists,
one after the other in this process. Three things make that a single run for the user:

- :func:`validate` plans every combination before the first one starts, so a bad value in the
  third sweep is refused (one line, exit code 2) before anything runs;
- :class:`Group` keeps one Ray session for all the jobs (a job whose ``execution`` settings
  differ gets a new one), instead of starting and stopping a cluster per sweep;
- each sweep's MLflow parent run is nested (``mlflow.parentRunId``) under one *multirun* run per
  tracking store and experiment, named after the multirun folder and tagged with the command
  line, which ends FINISHED, FAILED (some job failed) or KILLED;
- the sweeps' folders are ``outputs/multirun/<time>/<job>-<name>``, made by the pipeline as a
  single run's folder is (:mod:`pipeline.runfolder`): the multirun folder when its first sweep
  starts (``<time>-2``, ... if another multirun took the name), each sweep's exclusively. Hydra's
  own sweep folder (``outputs/.log/<time>_multirun_<pid>``) only holds its logs until they move
  (a sweep given ``output_dir`` goes there instead, which must not exist).

The process exits with the worst of the jobs' exit codes; an interruption (130) or a cluster
failure (3) stops the remaining jobs.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from pipeline.errors import ConfigError

log = logging.getLogger("pipeline")

MULTIRUN_FLAGS = ("-m", "--multirun")
#: the tag that marks a multirun's parent run (its value: the multirun folder)
MULTIRUN_TAG = "lbsweep.multirun"


def is_multirun(argv: list[str]) -> bool:
    return any(a in MULTIRUN_FLAGS for a in argv)


def job_overrides(argv: list[str]) -> list[list[str]]:
    """The override list of every job of ``argv``'s multirun, as Hydra's basic sweeper makes them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except Exception as exc:  # noqa: BLE001  (Hydra's grammar errors)
        from pipeline.config import compose_error_message

        raise ConfigError(compose_error_message(exc)) from exc
    batches = BasicSweeper.split_arguments(parsed, None)
    return [job for batch in batches for job in batch]


def validate(argv: list[str]) -> int:
    """Compose and plan every job of the multirun; ConfigError (naming the job) at the first
    refusal. Returns the number of jobs."""
    from pipeline.config import compose
    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    jobs = job_overrides(argv)
    for i, overrides in enumerate(jobs):
        try:
            conf = to_plain(compose([*overrides, "output_dir=/nonexistent/validation-only"]))
            make_plan(conf)
        except ConfigError as exc:
            raise ConfigError(f"multirun job {i} ({' '.join(overrides) or 'defaults'}): {exc}") from None
    return len(jobs)


def _session_key(exec_cfg: dict, py_modules=()) -> tuple:
    return (*(exec_cfg.get(k) for k in ("backend", "address", "auth", "num_cpus")), tuple(py_modules))


class Group:
    """What the jobs of one multirun share: the Ray session and the MLflow parent runs."""

    def __init__(self, sweep_dir: str, argv: list[str]):
        #: Hydra's sweep folder (its logs; conf/config.yaml's hydra.sweep.dir)
        self.sweep_dir = sweep_dir
        #: the multirun's folder of sweep folders, made by the first :meth:`job_folder`
        self.folder: Path | None = None
        self.command = " ".join(argv)
        self.codes: list[int] = []
        self.session = None
        self._session_key = None
        #: (tracking URI, experiment id) -> (client, run id)
        self._parents: dict[tuple[str, str], tuple[object, str]] = {}

    # ---- Ray
    def connect(self, exec_cfg: dict, py_modules=()):
        """The shared session, or a new one if this job's execution settings (or the
        out-of-tree models it ships) differ."""
        from pipeline.execute import connect

        key = _session_key(exec_cfg, py_modules)
        if self.session is not None and key == self._session_key:
            return self.session
        self.close_session()
        self.session = connect(exec_cfg, py_modules)
        self._session_key = key
        return self.session

    def close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    # ---- folders
    def job_folder(self, name: str) -> Path:
        """A new folder ``<job>-<name>`` in the multirun's folder (made on first use)."""
        from hydra.core.hydra_config import HydraConfig

        from pipeline.runfolder import OUTPUTS, create_exclusive, new_run_folder, stamp

        if self.folder is None:
            self.folder = new_run_folder(Path(OUTPUTS) / "multirun", stamp())
        num = HydraConfig.get().job.num if HydraConfig.initialized() else len(self.codes)
        return create_exclusive(self.folder / f"{num}-{name}")

    def _move_hydra_record(self) -> None:
        """Hydra's multirun.yaml into the multirun's folder, and its sweep folder away if empty."""
        if self.folder is None:
            return
        record = Path(self.sweep_dir) / "multirun.yaml"
        try:
            if record.is_file():
                record.replace(self.folder / record.name)
            Path(self.sweep_dir).rmdir()
        except OSError:
            pass  # a job's log stays there (one that made no folder): keep it

    # ---- MLflow
    def parent_for(self, tracker) -> str:
        """The multirun's parent run in ``tracker``'s store and experiment (made on first use)."""
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE, MLFLOW_USER

        from pipeline.tracking import MAX_KEY, MAX_TAG, clip, user_name

        key = (tracker.uri, tracker.experiment_id)
        if key not in self._parents:
            folder = str(self.folder or self.sweep_dir)  # Hydra's, if every sweep named its folder
            tags = {MLFLOW_USER: user_name(), MULTIRUN_TAG: folder,
                    "command": self.command, **tracker.common_tags,
                    MLFLOW_RUN_NOTE: f"multirun of lbsweep: `python -m pipeline {self.command}`; "
                                     f"one child run per sweep; folder {folder}"}
            run = tracker.client.create_run(
                tracker.experiment_id, run_name=f"multirun-{Path(folder).name}",
                tags={k[:MAX_KEY]: clip(v, MAX_TAG) for k, v in tags.items()})
            self._parents[key] = (tracker.client, run.info.run_id)
        return self._parents[key][1]

    def close(self) -> None:
        """End the MLflow parents (status from the worst job) and the Ray session."""
        from pipeline.run import EXIT_INTERRUPTED

        worst = max(self.codes, default=0)
        status = "KILLED" if worst == EXIT_INTERRUPTED else ("FAILED" if worst else "FINISHED")
        for client, run_id in self._parents.values():
            try:
                client.set_tag(run_id, "jobs", str(len(self.codes)))
                client.set_terminated(run_id, status, end_time=int(time.time() * 1000))
            except Exception as exc:  # noqa: BLE001  (results are on disk; say so and go on)
                log.warning("MLflow: could not end the multirun run %s (%s)", run_id, exc)
        self._parents.clear()
        self.close_session()
        self._move_hydra_record()


_group: Group | None = None


def current_group() -> Group | None:
    """The multirun group of this process when Hydra runs in multirun mode, else None."""
    global _group
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    sweep_dir = str(Path(HydraConfig.get().sweep.dir).resolve())
    if _group is None or _group.sweep_dir != sweep_dir:
        if _group is not None:
            _group.close()
        _group = Group(sweep_dir, sys.argv[1:])
    return _group


def finish() -> int | None:
    """Close the group (if a multirun ran); its worst exit code, or None."""
    global _group
    if _group is None:
        return None
    group, _group = _group, None
    group.close()
    return max(group.codes, default=0)
