"""``python -m pipeline [+sweep=NAME] [key=value ...]``: run a sweep (see README.md).

``python -m pipeline -m +sweep=a,b [key=v1,v2 ...]`` runs several (pipeline.multirun): all are
planned first, then run under one Ray start and one MLflow parent run; the exit code is the
worst of theirs.

Exit codes: 0 done (also when the MLflow store failed mid-run: run.json and the archive's
tracking.json say ``lost: ...``); 1 some tasks failed (rows with ``status == "error"``; MLflow
run FAILED); 2 refused configuration, or an ``output_dir`` that exists (nothing started); 3 Ray could not be started or joined
(nothing written); 4 the MLflow store cannot be reached, read or written (checked before Ray
starts; nothing started or written); 5 the run folder could not be written (disk full, file
size limit, read-only or failing disk: run.json ``failed`` with the reason, rows so far kept,
``python -m pipeline.resume DIR`` continues); 130 interrupted by Ctrl-C or SIGTERM (MLflow run
KILLED, folder marked partial, ``python -m pipeline.resume DIR`` finishes it).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the typed schema with Hydra)
from pipeline.errors import ConfigError, OutputError, TrackingError

log = logging.getLogger("pipeline")


def _sigterm_as_interrupt(signum, frame):  # ``ray job stop`` and ``kill`` send SIGTERM
    raise KeyboardInterrupt


def run_cli(run) -> int:
    """Run ``run()`` (a sweep) and map its outcome to an exit code with one line of message."""
    from pipeline.execute import ClusterError
    from pipeline.run import EXIT_CLUSTER, EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_TASKS_FAILED, EXIT_TRACKING, Interrupted
    from pipeline.runfolder import close_log

    # the refusals and failures that end a run with one line: (error, its line, exit code), the
    # first that matches
    outcomes = ((ConfigError, "configuration error: %s", EXIT_CONFIG),
                (ClusterError, "cluster error: %s", EXIT_CLUSTER),
                (TrackingError, "tracking error: %s (or run without it: mlflow.enabled=false)", EXIT_TRACKING),
                (OutputError, "output error: %s", EXIT_OUTPUT),
                (Interrupted, "%s", EXIT_INTERRUPTED))
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt) if main_thread else None
    try:
        try:
            out = run()
        except tuple(error for error, _, _ in outcomes) as exc:
            _, line, code = next(o for o in outcomes if isinstance(exc, o[0]))
            log.error(line, exc)
            return code
        except KeyboardInterrupt:  # before any task started: nothing to resume
            log.error("interrupted before the sweep started")
            return EXIT_INTERRUPTED
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous)
        return EXIT_TASKS_FAILED if out["errors"] else 0
    finally:  # the run folder's log got the outcome's line too
        close_log()


#: set when Hydra has composed the config and called :func:`main`: an exception before that is
#: Hydra's own refusal of the input (misspelt key, wrong type, unknown or unreadable sweep file)
_started = False
#: Hydra prints its own refusals (exit 1, several lines, sometimes a traceback) unless this is set;
#: set it while composing so that the refusal reaches :func:`cli` (and unset it for the run)
_FULL_ERROR = "HYDRA_FULL_ERROR"
#: whether :func:`cli` set HYDRA_FULL_ERROR (rather than the user)
_ours = False


#: absolute, so that the console script ``lbsweep`` (module pipeline.__main__, not __main__)
#: finds the same configs as ``python -m pipeline``
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    global _started
    _started = True
    if _ours:
        os.environ.pop(_FULL_ERROR, None)  # from here on Hydra reports as usual
    from pipeline.multirun import current_group, finish
    from pipeline.run import EXIT_CLUSTER, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_TRACKING, run_sweep

    group = current_group()  # None unless Hydra runs several sweeps (-m)
    code = run_cli(lambda: run_sweep(cfg, group=group))
    if group is not None:
        group.codes.append(code)
        if code in (EXIT_INTERRUPTED, EXIT_CLUSTER, EXIT_TRACKING, EXIT_OUTPUT):  # stop the rest
            finish()
            sys.exit(code)
        return
    if code:
        sys.exit(code)


def cli() -> None:
    """:func:`main`, with Hydra's refusals of the input as one line and exit code 2 (README)."""
    global _ours
    from pipeline import multirun
    from pipeline.config import compose_error_message
    from pipeline.run import EXIT_CONFIG
    from pipeline.safe_yaml import check_sweep_files

    try:  # the sweep files named, as bounded YAML, before Hydra reads them (pipeline/safe_yaml.py)
        check_sweep_files(sys.argv[1:], Path(CONF_DIR))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    if multirun.is_multirun(sys.argv[1:]):  # plan every sweep before the first one starts
        try:
            multirun.validate(sys.argv[1:])
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
    user_full_error = os.environ.get(_FULL_ERROR)
    if not user_full_error:
        os.environ[_FULL_ERROR], _ours = "1", True
    try:
        main()
        worst = multirun.finish()
        if worst:
            sys.exit(worst)
    except SystemExit:
        multirun.finish()
        raise
    except Exception as exc:  # Hydra's refusal, or a failure of the run itself
        if _started:
            raise
        if user_full_error:  # asked for the full stack trace: show it too
            import traceback

            traceback.print_exc()
        print(f"configuration error: {compose_error_message(exc)}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    finally:
        if _ours:
            os.environ.pop(_FULL_ERROR, None)


if __name__ == "__main__":
    cli()
