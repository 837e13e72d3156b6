"""One run, one folder: the pipeline makes each run's folder itself, exclusively.

Hydra's own run folder (where its ``__main__.log`` starts) is ``outputs/.log/<time>_<name>_<pid>``
(``conf/config.yaml``): unique per process, so that refused inputs, dry runs (``plan=true``) and
runs that never got to start leave their log there and nothing under ``outputs/<name>/``.

Once the plan is validated (and Ray is up), :func:`new_run_folder` makes
``outputs/<name>/<date>_<time>`` with an exclusive ``mkdir``; if another run took that name in
the same second it takes ``<date>_<time>-2``, ``-3``, ... instead, so that two sweeps started
together never share a folder (the "already holds results" check alone raced: both passed it).
An explicit ``output_dir=DIR`` is made exclusively too (:func:`create_exclusive`): a folder
that exists is refused (exit code 2), with the resume command as the hint when it is a run
folder; only ``python -m pipeline.resume DIR`` reuses a folder.

:func:`attach_log` then moves the log into the run folder: the lines so far are copied to
``<run folder>/__main__.log``, which gets every later line, and Hydra's file in ``outputs/.log/``
is removed with its folder. So ``outputs/.log/`` keeps the logs of what made no run folder.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from pipeline.errors import ConfigError

#: the folder of run folders, relative to the working folder (as Hydra's folders are)
OUTPUTS = "outputs"
#: Hydra's log folders, under :data:`OUTPUTS` (conf/config.yaml's hydra.run.dir, hydra.sweep.dir)
LOG_DIR = ".log"
#: the name of a run folder's log (Hydra's name for the log of ``python -m pipeline``)
LOG_NAME = "__main__.log"
#: suffixes tried after a taken name, before giving up
MAX_SUFFIX = 1000
STAMP_FORMAT = "%Y-%m-%d_%H-%M-%S"

log = logging.getLogger("pipeline")


def stamp() -> str:
    """The date and time of a new run folder's name, to the second."""
    return time.strftime(STAMP_FORMAT)


def new_run_folder(parent: Path, name: str) -> Path:
    """``parent/name``, or ``parent/name-2``, ``-3``, ... if taken, made with an exclusive mkdir
    (an atomic claim: a concurrent run gets another name)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, MAX_SUFFIX + 1):
        folder = parent / (name if k == 1 else f"{name}-{k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder.resolve()
    raise ConfigError(f"{parent / name}: that name and {MAX_SUFFIX - 1} suffixes are taken")


def refusal(folder: Path) -> str:
    """The one-line refusal of ``output_dir=folder`` when ``folder`` exists."""
    if (folder / "run.json").is_file() or (folder / "config.yaml").is_file():
        return (f"output_dir={str(folder)!r} is a run folder: give a new folder, or resume that run "
                f"with python -m pipeline.resume {folder}")
    return f"output_dir={str(folder)!r} exists: give a new folder (a run folder is made, never reused)"


def check_new(folder: Path) -> None:
    """ConfigError if ``folder`` exists (checked before Ray starts; :func:`create_exclusive`
    decides)."""
    if os.path.lexists(folder):
        raise ConfigError(refusal(folder))


def create_exclusive(folder: Path) -> Path:
    """Make ``folder`` (and its parents), failing with ConfigError if it exists."""
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
    except FileExistsError:
        raise ConfigError(refusal(folder)) from None
    except OSError as exc:
        raise ConfigError(f"output_dir={str(folder)!r}: cannot be made ({exc.strerror})") from None
    return folder.resolve()


# ---------------------------------------------------------------------------- the run's log

#: the handler writing to the current run folder's log (one at a time per process)
_handler: logging.FileHandler | None = None

_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default job log format


def _hydra_file_handlers() -> list[logging.FileHandler]:
    """The root logger's file handlers that Hydra set up in its run folder (none outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    from omegaconf import OmegaConf

    where = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", throw_on_missing=False)
    if not where:  # a config set by hand (tests), not a running Hydra job
        return []
    hydra_dir = Path(where).resolve()
    return [h for h in logging.getLogger().handlers
            if isinstance(h, logging.FileHandler) and h is not _handler
            and Path(h.baseFilename).resolve().parent == hydra_dir]


def attach_log(folder: Path) -> Path:
    """Log into ``folder``/__main__.log from now on (appending: a resumed run continues its log).

    Under Hydra, the lines its log file holds so far are copied there first, and that file (with
    its folder under ``outputs/.log/``, once empty) is removed. Replaces the log of a previous run
    of this process; :func:`close_log` ends it."""
    global _handler
    close_log()
    target = Path(folder) / LOG_NAME
    hydra = _hydra_file_handlers()
    level, formatter = logging.NOTSET, logging.Formatter(_FORMAT)
    for h in hydra:
        h.flush()
        level, formatter = h.level, h.formatter or formatter
        src = Path(h.baseFilename)
        if src.is_file():
            with open(src, "rb") as a, open(target, "ab") as b:
                shutil.copyfileobj(a, b)
    handler = logging.FileHandler(target, mode="a", encoding="utf-8")
    handler.setLevel(level)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    _handler = handler
    for h in hydra:
        root.removeHandler(h)
        h.close()
        src = Path(h.baseFilename)
        src.unlink(missing_ok=True)
        try:
            src.parent.rmdir()  # Hydra's folder in outputs/.log/, when nothing else is in it
        except OSError:
            pass
    return target


def close_log() -> None:
    """Stop logging into the current run folder (the end of a run of :func:`pipeline.__main__.run_cli`)."""
    global _handler
    if _handler is not None:
        logging.getLogger().removeHandler(_handler)
        _handler.close()
        _handler = None
