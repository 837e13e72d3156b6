"""What runs inside a Ray task (or in-process with the serial backend).

Imports only the standard library and ``sim`` (and Ray's runtime context, inside a Ray task):
workers on a cluster need nothing else.
Compiled kernels are imported inside the task, never passed in (see docs/architecture.md).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path


def tree_digest(root: Path) -> str:
    """A digest of every ``.py`` file below ``root`` (relative path and bytes)."""
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


#: cache folders of other versions of sim/ kept beside the current one (the most recently used)
KEEP_CACHES = 3


def configure_numba(num_threads: int = 1) -> None:
    """Numba settings for a worker: its thread count and a node-local writable cache.

    The cache folder is ``~/.cache/lbsweep/numba/<digest of sim/>`` (``XDG_CACHE_HOME``
    honoured): numba keys a cached kernel on its own file's time stamp only, so a kernel
    whose file is unchanged but whose inlined helpers in another file changed would load
    stale code from a shared folder. A new version of ``sim/`` gets a folder of its own;
    the :data:`KEEP_CACHES` most recently used others are kept, older ones removed. A
    ``NUMBA_CACHE_DIR`` set by the user is used as it is."""
    os.environ["NUMBA_NUM_THREADS"] = str(num_threads)
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    spec = importlib.util.find_spec("sim")
    digest = tree_digest(Path(list(spec.submodule_search_locations)[0]))
    root = os.path.join(base, "lbsweep", "numba")
    path = os.path.join(root, digest)
    try:
        os.makedirs(path, exist_ok=True)
        os.utime(path)
        probe = tempfile.NamedTemporaryFile(dir=path)
        probe.close()
        _prune(Path(root), keep=Path(path))
    except OSError:
        path = os.path.join(tempfile.gettempdir(), "lbsweep-numba-cache", digest)
        os.makedirs(path, exist_ok=True)
    os.environ["NUMBA_CACHE_DIR"] = path
    if "numba" in sys.modules:  # numba read its config at import: kernels decorated from now on
        import numba  # use the folder too

        numba.config.CACHE_DIR = path


def _prune(root: Path, keep: Path) -> None:
    """Remove the cache folders of other versions but the :data:`KEEP_CACHES` most recent."""
    others = sorted((p for p in root.iterdir() if p.is_dir() and p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_CACHES:]:
        shutil.rmtree(old, ignore_errors=True)


def row_header(task: dict) -> dict:
    """The identifying columns of a task's row, and its parameters."""
    meta = task["_meta"]
    return {"task_id": meta["task_id"], "point_id": meta["point_id"], "replication": meta["replication"],
            "model": task.get("model"), "engine": task["engine"], "policy": task["policy"], "seed": task.get("seed", 0),
            **meta["params"], "status": "ok", "error": None, "node": "serial"}


def run_one(task: dict) -> dict:
    """Run one task; return its meta, its inputs and its estimates (or the error) as one row."""
    import sim

    inputs = {k: v for k, v in task.items() if k != "_meta"}
    row = row_header(task)
    try:
        row.update(sim.run(inputs))
    except Exception as exc:  # a failing task becomes an error row; the sweep goes on
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
    return row


#: a row's key (removed by the driver before the row is stored) saying that its task was the
#: first of its kind (engine, policy, variant) in this process: its time includes loading or
#: compiling that kind's kernels, which the progress bar must not take for the kind's cost
FIRST_OF_KIND = "_first_of_kind"
_kinds_seen: set = set()


def run_timed(task: dict) -> dict:
    """:func:`run_one`, its row marked with :data:`FIRST_OF_KIND`."""
    kind = (task["engine"], task["policy"], task["_meta"]["params"].get("variant"))
    first = kind not in _kinds_seen
    _kinds_seen.add(kind)
    return {**run_one(task), FIRST_OF_KIND: first}


def ray_node() -> str:
    """The Ray node ID (hex, as ``ray list nodes`` shows it) of the worker running this."""
    import ray

    return ray.get_runtime_context().get_node_id()


#: a worker sends its finished rows back when this many wait, or when a task ends this many
#: seconds or more after the previous batch went, whichever comes first, and at the end of its group
BATCH_ROWS, BATCH_SECONDS = 1000, 1.0


def run_chunk(tasks: list[dict], batch_rows: int = BATCH_ROWS, batch_seconds: float = BATCH_SECONDS):
    """Run a group of tasks one after another (one Ray streaming generator task), yielding
    their rows in batches (lists of rows): one Ray object per batch rather than per task, and a
    batch at least every ``batch_seconds`` while tasks keep ending (a task longer than that
    sends its row as it ends), so that the driver sees the sweep progress. Rows name the node."""
    import time

    configure_numba(1)
    node = ray_node()
    batch: list[dict] = []
    last = time.monotonic()
    for t in tasks:
        batch.append({**run_timed(t), "node": node})
        now = time.monotonic()
        if len(batch) >= batch_rows or now - last >= batch_seconds:
            yield batch
            batch, last = [], now
    if batch:
        yield batch
