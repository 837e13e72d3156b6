"""``run.json``: the run's state (``running``, ``finished``, ``failed``, ``interrupted``), kept
writable when the disk is full.

The file is written padded to :data:`RESERVED` bytes (JSON followed by spaces, which every JSON
reader accepts), so its blocks stay allocated. A state change is written to a new file and
renamed over the old one (atomic); when that cannot be written (``ENOSPC``, ``EDQUOT``,
``EFBIG``), the new state is written into the existing file's own bytes instead (``os.pwrite``
at offset 0, same length), which needs no new blocks on ordinary filesystems (ext4, xfs,
tmpfs; a copy-on-write filesystem such as btrfs or ZFS may still need some). So a run that
fills the disk still ends with ``run.json`` in a final state.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger("pipeline")

STATE_FILE = "run.json"
#: bytes kept allocated for run.json (a state is about 500 bytes; texts are clipped to fit)
RESERVED = 8192
#: longest free text (a failure's reason, the tracking state) kept in run.json
MAX_TEXT = 1000
#: errors that mean the run folder cannot take more bytes (or any write at all)
NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
OUTPUT_ERRNOS = NO_SPACE | {errno.EROFS, errno.EIO}
#: below this many free bytes the output folder's filesystem counts as full
FULL_BYTES = 1 << 20


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or "no detail"
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= limit else line[:limit - 4] + " ..."


def _encode(state: dict) -> bytes:
    state = {k: (v[:MAX_TEXT] if isinstance(v, str) else v) for k, v in state.items()}
    data = json.dumps(state, indent=1).encode()
    return data + b" " * (RESERVED - len(data) - 1) + b"\n" if len(data) < RESERVED else data + b"\n"


def write(out_dir: Path, state: dict) -> None:
    """Write ``state`` (stamped ``updated``) to ``out_dir/run.json``: a new file renamed over the
    old one, or, when the disk refuses new bytes, in place into the reserved bytes."""
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    data = _encode(state)
    path = Path(out_dir) / STATE_FILE
    tmp = Path(out_dir) / f".{STATE_FILE}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in NO_SPACE or not _rewrite_in_place(path, data):
            raise


def _rewrite_in_place(path: Path, data: bytes) -> bool:
    """``data`` over the first bytes of ``path``, the rest blanked; False if it does not fit."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if len(data) > size:
            return False
        data = data[:-1] + b" " * (size - len(data)) + b"\n"
        view, offset = memoryview(data), 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        return True
    finally:
        os.close(fd)


def finish(out_dir: Path, state: dict) -> bool:
    """:func:`write` on a path that must not raise (an exception is already on its way): one
    error line if even the reserved bytes cannot be written."""
    try:
        write(out_dir, state)
        return True
    except OSError as exc:
        log.error("could not record status %r in %s: %s", state.get("status"),
                  Path(out_dir) / STATE_FILE, one_line(exc))
        return False


def read(out_dir: Path) -> dict:
    return json.loads((Path(out_dir) / STATE_FILE).read_text())


def output_problem(exc: BaseException, out_dir: Path | None) -> str | None:
    """Why ``exc`` means the run folder cannot be written, or None: an ``OSError`` with one of
    :data:`OUTPUT_ERRNOS`, or any failure while the folder's filesystem has less than
    :data:`FULL_BYTES` free (some libraries report a short write without the errno)."""
    if isinstance(exc, OSError) and exc.errno in OUTPUT_ERRNOS:
        what = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
                errno.EFBIG: "file size limit reached", errno.EROFS: "read-only filesystem",
                errno.EIO: "input/output error"}[exc.errno]
        return f"{what} ({one_line(exc, 300)})"
    if out_dir is None:  # failed before the folder was made: only the errno can tell
        return None
    try:
        free = shutil.disk_usage(Path(out_dir)).free
    except OSError:
        return None
    if free < FULL_BYTES:
        return f"disk full ({free} bytes free; {one_line(exc, 300)})"
    return None
