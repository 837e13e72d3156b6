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

import fcntl
import logging
import os
import shutil
import socket
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


def check_not_link(folder: Path | str, key: str = "output_dir") -> None:
    """ConfigError if ``folder`` itself is a symbolic link, dangling or not (checked on the path
    as given, before anything resolves it)."""
    path = Path(folder)
    if path.is_symlink():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise ConfigError(f"{key}={str(folder)!r} is a symbolic link (to {target!r}): a run folder "
                          "is never reached through a link; give a real path")


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


# ---------------------------------------------------------------------- one writer per folder

#: the lock file of a run folder (it holds the process id of the run or resume that writes it)
LOCK_NAME = "run.lock"
#: seconds a refused writer waits for the holder to have written its process id
HOLDER_WAIT = 2.0


class FolderLock:
    """An exclusive lock on a run folder, held until :meth:`release` or the process's end."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd is None:
            return
        try:  # an empty file: no holder is named once the lock is free
            os.ftruncate(self.fd, 0)
        except OSError:
            pass
        os.close(self.fd)  # releases the flock
        self.fd = None

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(path: Path) -> str:
    """Who holds ``path``'s lock, as its file says: ``process PID on HOST (what, since when)``.
    Waits up to :data:`HOLDER_WAIT` s for a holder that has just taken the lock to write it (and
    past the stale id of an earlier holder on this host whose process is gone)."""
    deadline = time.monotonic() + HOLDER_WAIT
    while True:
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            text = ""
        fields = dict(f.split("=", 1) for f in text.split() if "=" in f)
        pid, host = fields.get("pid", ""), fields.get("host", "")
        if pid.isdigit() and not (host == socket.gethostname() and not _alive(int(pid))):
            return (f"process {pid} on host {host or '?'} ({fields.get('command', '?')} since "
                    f"{fields.get('since', '?')})")
        if time.monotonic() > deadline:
            return f"another process (pid not recorded{': ' + text[:80] if text else ''})"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def lock_folder(folder: Path, command: str) -> FolderLock:
    """Take the exclusive lock of the run folder ``folder`` for this process (``command``,
    ``run`` or ``resume``, is written beside the process id); ConfigError naming the holder's
    process id if another process holds it.

    ``flock`` on ``<folder>/run.lock``: released by the operating system when the process ends,
    however it ends; the descriptor is not inherited by child processes (Ray's), so only this
    process holds it. On a network filesystem the lock is as good as its ``flock`` (NFSv4 maps
    it to a byte-range lock that every client sees)."""
    path = Path(folder) / LOCK_NAME
    try:  # O_NOFOLLOW: a link planted in the folder is not followed
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(f"output_dir={str(folder)!r}: cannot open its lock file {LOCK_NAME} "
                          f"({exc.strerror or type(exc).__name__})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(f"output_dir={str(folder)!r} is being written by {_holder(path)}: one run "
                          f"or resume writes a run folder at a time; wait for it to end") from None
    except OSError as exc:
        os.close(fd)
        raise ConfigError(f"output_dir={str(folder)!r}: cannot lock {LOCK_NAME} "
                          f"({exc.strerror or type(exc).__name__})") from None
    record = (f"pid={os.getpid()} host={socket.gethostname()} command={command} "
              f"since={time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    return FolderLock(fd, path)


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
