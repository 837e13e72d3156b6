"""``python -m pipeline.reproduce ARCHIVE``: rerun an archived sweep on this machine and compare.

Extraction. The archive is opened by :func:`pipeline.archive.safe_extract`: every member header
is read first, and the archive is refused (exit 2) if a member has an absolute path, ``..``, is a
link or special file or appears twice, or if the members number more than ``--max-members``
(default 200000) or declare more than ``--max-bytes`` uncompressed bytes (default 2 GiB); all of
this before anything is written. The bytes written while extracting are counted too. A
truncated, corrupt or non-tar file is a one-line ``error: ...`` and exit 2. The archive is
extracted into a temporary folder (``lbsweep-reproduce-*`` under ``$TMPDIR``) that is removed
when the command ends, also on errors, Ctrl-C, SIGTERM and SIGHUP (exit 130; only SIGKILL
leaves it).

Where the rerun goes. The rerun is a run folder of its own (about the size of the original run:
92 MB for the headline). By default it is written inside that temporary folder and removed with
it: nothing is left next to the archive or anywhere else. ``--keep`` keeps it, in
``$TMPDIR/lbsweep-rerun-*/rerun``, and prints that path; ``--out DIR`` writes it to ``DIR``
(which must not exist) and keeps it.

What it trusts. Nothing in the archive is code to run. Its ``config.yaml`` is read as bounded
plain data (:mod:`pipeline.safe_yaml`: at most 1 MiB, aliases counted as the copies they
expand to, nesting and tags of YAML's plain types only, no ``${...}`` interpolation: the
pipeline writes it resolved); its Parquet files are read before the rerun starts, and one that
cannot be read makes the archive unusable. No folder of the archive is put on ``sys.path``.
The out-of-tree models its config names (``models``, ``model``; docs/extending.md) must be
installed on this machine, and that installed code runs; the archive's own copy under
``run/models/`` is ignored. ``--trust-archive-models`` runs the archive's copy instead: only
the top-level packages the config names, each imported from its own folder by an
``importlib`` spec and shipped from there to the Ray workers; a name that is a
standard-library module or importable here anyway is refused (it would shadow that module),
and no other file of ``run/models/`` is ever imported. Model names that are standard-library
modules are refused in both modes.

Where it runs. Locally, whatever the archive says: the archived ``execution`` section is not
used except its ``backend`` (``--backend`` overrides it); the rest is this machine's defaults
(:class:`pipeline.config.ExecutionConfig`). So the archived ``address`` is dropped, and
``RAY_ADDRESS`` is hidden from the rerun too: an archive someone shares must not send work to,
or take results from, a cluster of their choosing. Only ``--address ADDR`` joins a cluster. The
archived ``num_cpus`` (the CPUs of the machine the run was made on), authentication mode,
timeouts and grouping are machine-specific as well; the local cluster gets ``--num-cpus`` or all
cores. None of these settings changes a result: every task's seed is fixed by the plan. MLflow
tracking is off for the rerun. (Ray is started by :func:`pipeline.execute.connect`; a Ray
session the calling process already holds is reused, which the command line never has.)

Standard errors. An archive whose config has no ``run.se_method`` (made before the setting
existed) is rerun with ``se_method: batch_means``, the method its simulations used, not with the
``obm`` default of new runs; the rerun's tasks carry that key, which the archived tasks lack, so
it is left out of their comparison (those tasks only).

What is compared, after the tasks are planned again from the archived config:

* ``tasks.json``: every task with its seed (the seeds must come out identical);
* the result rows (``results/*.parquet``), matched by ``task_id``: every column of the union of
  both frames' columns (a column on one side only, a different dtype, a missing or extra row are
  mismatches), except :data:`EXCLUDED_COLUMNS`: ``wall_time`` (how long a task took), ``node``
  (the cluster node it ran on), ``run_id`` (a fresh id per run) and ``code_commit`` (the commit
  that computed the row; absent from rows written before it was recorded): they describe the
  run, not its results;
* every file under the archive's ``run/analysis/`` against the rerun's ``analysis/`` (a file on
  one side only is a mismatch): Parquet frames cell by cell by the same rules (rows matched by
  ``task_id`` where there is one, otherwise by position, since the analysis sorts its output);
  JSON structurally (keys in :data:`EXCLUDED_COLUMNS` or matching the timing rule skipped);
  other text files (``report.md``) line by line, except timing lines, found by the rule below;
  PNG images pixel by pixel after dropping their metadata chunks (``tEXt``, ``zTXt``, ``iTXt``,
  ``tIME``: matplotlib writes its version there), and only when the environment matches and
  matplotlib is the same version (another renderer draws other pixels from the same numbers);
  otherwise they are listed as not compared.

The timing rule (:data:`TIMING`). In text and JSON strings the archived run's output folder and
the rerun's are first replaced by ``<output_dir>`` (absolute paths differ by construction).
Then a line is a timing line, left out on both sides, if it contains ``wall time``/``wall-time``/
``wall_time``/``wall clock``/``wallclock``, ``elapsed``, an ISO date (``2026-12-01``) or a clock
time (``11:42:07``). That is the contract for report writers: a line that reports how long
something took, or when, says so with one of these; everything else in a report is compared.
The shipped analyses write no such line today; their only timing is the ``wall_time`` column of
``summary.parquet`` (a sum over tasks), excluded with the column.

Numbers are compared bitwise where the environment (Python, machine, and the packages in
:data:`pipeline.archive.KEY_PACKAGES`) matches, otherwise to a relative tolerance ``--rtol``.
Text lines are compared exactly in both cases. Every mismatch is named (file, task id or row,
column or line, archived and rerun values, floats by ``repr``: full precision); the first
:data:`SHOWN` are printed and the rest counted. Exit code 0 when everything matches
(REPRODUCED), 1 otherwise (NOT REPRODUCED), 2 for an unusable archive or option (damaged,
oversized or unsafe YAML, unreadable Parquet, models not installed or refused), always as one
line ``error: ...``, 3 when Ray could not be started or joined, 130 when interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import fnmatch
import hashlib
import json
import logging
import math
import os
import re
import signal
import struct
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.archive import MAX_BYTES, MAX_MEMBERS, PREFIX, environment, safe_extract
from pipeline.errors import ConfigError, OutputError
from pipeline.runfolder import check_not_link
from pipeline.store import read_results
from pipeline.tracking import environ_restored

log = logging.getLogger("pipeline.reproduce")

#: columns (and JSON keys) that describe a run rather than its results
EXCLUDED_COLUMNS = frozenset({"wall_time", "node", "run_id", "code_commit"})
#: a line (or JSON key or string) carrying a timing, a date or a clock time; see the module doc
TIMING = re.compile(r"wall[ _-]?(?:time|clock)|elapsed|(?<!\d)\d{4}-\d{2}-\d{2}(?!\d)"
                    r"|(?<!\d)\d{1,2}:\d{2}:\d{2}(?!\d)", re.IGNORECASE)
#: the token that stands for either run's output folder in compared text
OUTPUT_DIR = "<output_dir>"
#: mismatches printed; the rest are counted
SHOWN = 20
#: PNG chunks that carry metadata, not pixels
PNG_METADATA = frozenset({b"tEXt", b"zTXt", b"iTXt", b"tIME"})
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: columns that name a row of an analysis frame in messages (with the analysis parameters)
LABEL_COLUMNS = ("policy", "engine", "variant")


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


# ----------------------------------------------------------------------------------- values

def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


#: the default ``--rtol`` where bits may differ: the loosest tolerance the golden rows grant a
#: field across CPUs (the refined mean field's linear solves, tests/golden/test_golden.py)
DEFAULT_RTOL = 1e-6
#: where bits may differ, numbers this close in absolute value also agree: a limit's tail at
#: 1e-15 moves by more than rtol relative across CPUs, and means nothing at that size
ATOL = 1e-12


def _floats_same(a: float, b: float, rtol: float, exact: bool) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if exact:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return math.isclose(a, b, rel_tol=rtol, abs_tol=ATOL)


def cell_difference(a: Any, b: Any, rtol: float, exact: bool) -> tuple[str, Any, Any] | None:
    """None if ``a`` and ``b`` agree (bitwise if ``exact``, else to ``rtol``); otherwise the first
    difference as (where inside the cell, e.g. ``[3]`` of a list, archived part, rerun part)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return " length", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            d = cell_difference(x, y, rtol, exact)
            if d is not None:
                return f"[{i}]{d[0]}", d[1], d[2]
        return None
    if isinstance(a, dict) and isinstance(b, dict):  # a Polars struct
        for k in list(a) + [k for k in b if k not in a]:
            d = cell_difference(a.get(k, ABSENT), b.get(k, ABSENT), rtol, exact)
            if d is not None:
                return f".{k}{d[0]}", d[1], d[2]
        return None
    if _is_number(a) and _is_number(b) and (isinstance(a, float) or isinstance(b, float)):
        return None if _floats_same(float(a), float(b), rtol, exact) else ("", a, b)
    if type(a) is not type(b) or a != b:
        return "", a, b
    return None


# ------------------------------------------------------------------------------- comparison

class Comparison:
    """Collects named mismatches between the archived run and the rerun."""

    def __init__(self, rtol: float, exact: bool, old_dirs: list[str], new_dirs: list[str],
                 ignore_columns: frozenset = frozenset(), ignore_files: tuple[str, ...] = ()):
        self.rtol, self.exact = rtol, exact
        #: columns and JSON keys left out besides EXCLUDED_COLUMNS (--ignore-columns)
        self.excluded = EXCLUDED_COLUMNS | frozenset(ignore_columns)
        #: analysis files (glob patterns of their path under analysis/) left out (--ignore-files)
        self.ignore_files = tuple(ignore_files)
        self.files_ignored: list[str] = []
        # longest first, so that a path is replaced before a prefix of it
        self.old_dirs = sorted({d for d in old_dirs if d}, key=len, reverse=True)
        self.new_dirs = sorted({d for d in new_dirs if d}, key=len, reverse=True)
        self.mismatches: list[tuple[str, str, str, Any, Any]] = []
        self.timing_lines: dict[str, list[int]] = {}
        self.files: list[str] = []
        self.images_skipped: list[str] = []

    def add(self, file: str, where: str, column: str, archived: Any, rerun: Any) -> None:
        self.mismatches.append((file, where, column, archived, rerun))

    def differ(self, a: Any, b: Any) -> tuple[str, Any, Any] | None:
        return cell_difference(a, b, self.rtol, self.exact)

    def _normalize(self, text: str, dirs: list[str]) -> str:
        for d in dirs:
            text = text.replace(d, OUTPUT_DIR)
        return text

    # frames
    def frames(self, old: pl.DataFrame, new: pl.DataFrame, file: str, key: str | None = "task_id",
               label_columns: tuple[str, ...] = ()) -> dict:
        """Cell by cell over the union of columns (less the excluded ones)."""
        columns = [c for c in old.columns] + [c for c in new.columns if c not in old.columns]
        columns = [c for c in columns if c not in self.excluded]
        common = []
        for c in columns:
            if c not in old.columns or c not in new.columns:
                self.add(file, "every row", c, ABSENT if c not in old.columns else f"<column {old.schema[c]}>",
                         ABSENT if c not in new.columns else f"<column {new.schema[c]}>")
            elif old.schema[c] != new.schema[c]:
                self.add(file, "schema", c, f"<dtype {old.schema[c]}>", f"<dtype {new.schema[c]}>")
            else:
                common.append(c)
        keyed = key is not None and key in old.columns and key in new.columns
        old_rows = self._rows(old, key if keyed else None, file)
        new_rows = self._rows(new, key if keyed else None, file)
        labels = [c for c in (*LABEL_COLUMNS, *label_columns) if c in old.columns]

        def label(k, row) -> str:
            if keyed:
                return f"{key}={k}"
            named = ", ".join(f"{c}={row[c]!r}" for c in dict.fromkeys(labels))
            return f"row {k}" + (f" ({named})" if named else "")

        missing = [k for k in old_rows if k not in new_rows]
        extra = [k for k in new_rows if k not in old_rows]
        for k in missing:
            self.add(file, label(k, old_rows[k]), "(row)", "<present>", ABSENT)
        for k in extra:
            self.add(file, label(k, new_rows[k]), "(row)", ABSENT, "<present>")
        bitwise = close = 0
        rows = 0
        for k, o in old_rows.items():
            if k not in new_rows:
                continue
            n = new_rows[k]
            rows += 1
            bit_row = close_row = True
            for c in common:
                a, b = o[c], n[c]
                bit = cell_difference(a, b, self.rtol, True)
                near = bit if bit is None else cell_difference(a, b, self.rtol, False)
                bit_row &= bit is None
                close_row &= near is None
                d = bit if self.exact else near
                if d is not None:
                    self.add(file, label(k, o), c + d[0], d[1], d[2])
            bitwise += bit_row
            close += close_row
        return {"rows": len(old_rows), "bitwise": bitwise, "close": close,
                "missing": sorted(map(str, missing)), "extra": sorted(map(str, extra))}

    def _rows(self, frame: pl.DataFrame, key: str | None, file: str) -> dict:
        rows: dict = {}
        for i, r in enumerate(frame.iter_rows(named=True)):
            k = i if key is None else r[key]
            if k in rows:
                self.add(file, f"{key}={k}", "(row)", "<duplicate row>", "")
                continue
            rows[k] = r
        return rows

    # text
    def _lines(self, text: str, dirs: list[str], file: str, record: bool) -> list[tuple[int, str]]:
        out = []
        for i, line in enumerate(text.splitlines(), 1):
            line = self._normalize(line, dirs)
            if TIMING.search(line):
                if record:
                    self.timing_lines.setdefault(file, []).append(i)
                continue
            out.append((i, line))
        return out

    def text(self, old: str, new: str, file: str) -> None:
        a = self._lines(old, self.old_dirs, file, record=True)
        b = self._lines(new, self.new_dirs, file, record=False)
        sm = difflib.SequenceMatcher(None, [x for _, x in a], [x for _, x in b], autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            for k in range(max(i2 - i1, j2 - j1)):
                old_line = a[i1 + k] if i1 + k < i2 else None
                new_line = b[j1 + k] if j1 + k < j2 else None
                where = f"line {old_line[0]}" if old_line else f"rerun line {new_line[0]}"
                self.add(file, where, "", old_line[1] if old_line else ABSENT,
                         new_line[1] if new_line else ABSENT)

    # JSON
    def json(self, old: Any, new: Any, file: str, path: str = "$") -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for k in list(old) + [k for k in new if k not in old]:
                if k in self.excluded or TIMING.search(str(k)):
                    continue
                self.json(old.get(k, ABSENT), new.get(k, ABSENT), file, f"{path}.{k}")
            return
        if isinstance(old, list) and isinstance(new, list):
            if len(old) != len(new):
                self.add(file, path, "length", len(old), len(new))
            for i, (x, y) in enumerate(zip(old, new)):
                self.json(x, y, file, f"{path}[{i}]")
            return
        if isinstance(old, str) and isinstance(new, str):
            old, new = self._normalize(old, self.old_dirs), self._normalize(new, self.new_dirs)
            if TIMING.search(old) and TIMING.search(new):
                return
        d = self.differ(old, new)
        if d is not None:
            self.add(file, path + d[0], "", d[1], d[2])

    # analysis folders
    def folders(self, old_root: Path, new_root: Path, prefix: str, label_columns: tuple[str, ...],
                images: str | None) -> None:
        """Every file under either folder; ``images`` is None to compare PNGs, else why not."""
        def files(root: Path) -> set[str]:
            return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()

        old_files, new_files = files(old_root), files(new_root)
        for rel in sorted(old_files | new_files):
            file = f"{prefix}/{rel}"
            if any(fnmatch.fnmatchcase(rel, pat) for pat in self.ignore_files):
                self.files_ignored.append(file)
                continue
            if rel not in new_files or rel not in old_files:
                self.add(file, "file", "", "<present>" if rel in old_files else ABSENT,
                         "<present>" if rel in new_files else ABSENT)
                continue
            self.files.append(file)
            old_path, new_path = old_root / rel, new_root / rel
            suffix = Path(rel).suffix.lower()
            if suffix == ".parquet":
                self.frames(pl.read_parquet(old_path), pl.read_parquet(new_path), file, key="task_id",
                            label_columns=label_columns)
            elif suffix == ".png":
                if images is not None:
                    self.images_skipped.append(file)
                    continue
                self.image(old_path.read_bytes(), new_path.read_bytes(), file)
            else:
                old_bytes, new_bytes = old_path.read_bytes(), new_path.read_bytes()
                try:
                    old_text, new_text = old_bytes.decode(), new_bytes.decode()
                except UnicodeDecodeError:
                    if old_bytes != new_bytes:
                        self.add(file, "bytes", "", _digest(old_bytes), _digest(new_bytes))
                    continue
                if suffix == ".json":
                    try:
                        self.json(json.loads(old_text), json.loads(new_text), file)
                        continue
                    except json.JSONDecodeError:
                        pass  # compared as text
                self.text(old_text, new_text, file)

    def image(self, old: bytes, new: bytes, file: str) -> None:
        a, b = png_pixels(old), png_pixels(new)
        if a is None or b is None:
            a, b = old, new  # not a PNG we can read: bytes
        if a != b:
            self.add(file, "pixels", "", _digest(a), _digest(b))


def _digest(data: bytes) -> str:
    return f"<{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}>"


def png_pixels(data: bytes) -> bytes | None:
    """The critical chunks of a PNG with the image data decompressed (metadata chunks dropped),
    or None if ``data`` is not a well-formed PNG."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    out, idat, i = [], [], len(PNG_SIGNATURE)
    try:
        while i < len(data):
            (n,) = struct.unpack(">I", data[i:i + 4])
            kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
            i += 12 + n
            if kind == b"IDAT":
                idat.append(body)
            elif kind not in PNG_METADATA and kind != b"IEND":
                out.append(kind + body)
        return b"".join(out) + zlib.decompress(b"".join(idat))
    except (struct.error, zlib.error):
        return None


def cpu_differences(archived: dict | None, current: dict | None) -> list[str]:
    """What differs between two CPUs as :func:`pipeline.archive.cpu` records them (numba's
    target and features, numpy's SIMD extensions, overrides): last bits may differ, so the
    comparison goes to ``--rtol``. An archive that records no CPU (made before it did) counts
    as another CPU: nothing shows that its bits can match."""
    if not isinstance(archived, dict):
        return [f"cpu not recorded in the archive -> {(current or {}).get('model') or 'this CPU'}"]
    current = current or {}
    keys = ("llvm_target", "llvm_features", "numpy_simd", "overrides")
    if all(archived.get(k) == current.get(k) for k in keys):
        return []
    what = [k for k in keys if archived.get(k) != current.get(k)]

    def name(c: dict) -> str:
        return f"{c.get('model') or '?'} ({c.get('llvm_target') or '?'})"
    return [f"cpu {name(archived)} -> {name(current)} ({', '.join(what)} differ)"]


def env_differences(archived: dict, current: dict) -> list[str]:
    diffs = []
    if archived.get("python") != current.get("python"):
        diffs.append(f"python {archived.get('python')} -> {current.get('python')}")
    if archived.get("machine") != current.get("machine"):
        diffs.append(f"machine {archived.get('machine')} -> {current.get('machine')}")
    diffs += cpu_differences(archived.get("cpu"), current.get("cpu"))
    for pkg, v in (archived.get("key_packages") or {}).items():
        w = current["key_packages"].get(pkg)
        if v != w:
            diffs.append(f"{pkg} {v} -> {w}")
    return diffs


def compare(old: pl.DataFrame, new: pl.DataFrame, rtol: float, exact: bool = True) -> dict:
    """The result rows alone (see :meth:`Comparison.frames`), with the mismatches."""
    c = Comparison(rtol, exact, [], [])
    out = c.frames(old, new, "results")
    return {**out, "mismatches": c.mismatches}


# ---------------------------------------------------------------------------- the rerun

#: the SE method of archives made before ``run.se_method`` existed
LEGACY_SE_METHOD = "batch_means"
#: a private mark of such a config (popped before the rerun is planned)
LEGACY_SE_KEY = "_legacy_se_method"


def _legacy_se_method(loaded: dict) -> bool:
    """An archive made before ``run.se_method`` existed: its config's ``run`` section lacks it.
    Its simulations made their standard errors by ``batch_means`` (``n_batches`` batches), so
    the rerun is planned with that method, and its tasks, which the plan gives an explicit
    ``se_method``, are compared without the key the archived tasks never had."""
    run = loaded.get("run")
    return not (isinstance(run, dict) and "se_method" in run)


def _read_run(run: Path, archive: Path) -> tuple[dict, dict, dict, dict]:
    """The archived config without its ``execution`` section (merged over the schema: missing
    keys get their defaults, unknown ones are refused), that section, the tasks document and the
    environment."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from pipeline import safe_yaml
    from pipeline.config import Config

    where = f"archive={str(archive)!r}"
    try:
        # bounded (size, alias expansion, depth), plain data only, no interpolation
        text = safe_yaml.load(run / "config.yaml", f"{PREFIX}/config.yaml", interpolations=False)
        loaded = OmegaConf.to_container(text, resolve=True)
        if not isinstance(loaded, dict):
            raise ConfigError(f"{where}: {PREFIX}/config.yaml is not a mapping")
        archived_exec = loaded.pop("execution", None) or {}
        legacy_se = _legacy_se_method(loaded)
        cfg = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(Config), loaded), resolve=True)
    except ConfigError as exc:
        if str(exc).startswith(where):
            raise
        raise ConfigError(f"{where}: {exc}") from None
    except (OmegaConfBaseException, ValueError, OSError) as exc:
        raise ConfigError(f"{where}: {PREFIX}/config.yaml is not a usable config "
                          f"({' '.join(str(exc).split())})") from None
    docs = []
    for name in ("tasks.json", "environment.json"):
        try:
            docs.append(json.loads((run / name).read_text()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{where}: {PREFIX}/{name} is missing or not JSON ({type(exc).__name__})") from None
    if not isinstance(docs[0], dict) or not isinstance(docs[0].get("tasks"), list):
        raise ConfigError(f"{where}: {PREFIX}/tasks.json has no task list")
    if not isinstance(docs[1], dict):
        raise ConfigError(f"{where}: {PREFIX}/environment.json is not an object")
    if legacy_se:
        cfg["run"]["se_method"] = LEGACY_SE_METHOD
        cfg[LEGACY_SE_KEY] = True
    return cfg, dict(archived_exec), docs[0], docs[1]


def _read_archived_results(run: Path, archive: Path) -> pl.DataFrame:
    """The archived result rows, and every archived analysis frame read once: a file that is not
    readable Parquet makes the archive unusable (ConfigError naming it), before any compute."""
    where = f"archive={str(archive)!r}"

    def read(path: Path) -> pl.DataFrame:
        try:
            return pl.read_parquet(path)
        except BaseException as exc:  # polars' errors, and a panic of its reader (a BaseException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"{where}: {path.relative_to(run.parent).as_posix()} is not readable "
                              f"Parquet ({type(exc).__name__}: {first[:200]})") from None

    for p in sorted((run / "analysis").rglob("*.parquet")):
        if p.is_file():
            read(p)
    try:
        return read_results(run / "results")
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        for p in sorted((run / "results").glob("*.parquet")):
            read(p)  # names the first damaged file
        # each file reads alone, but not together (their schemas differ)
        raise ConfigError(f"{where}: {PREFIX}/results cannot be read as one frame "
                          f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


def local_execution(archived: dict, backend: str | None, address: str | None,
                    num_cpus: int | None, progress: bool) -> dict:
    """The rerun's ``execution`` section: this machine's defaults (:class:`ExecutionConfig`), the
    archived backend unless ``backend`` is given, and only the explicit ``address``/``num_cpus``.
    The archived address, CPU count, authentication, timeouts and grouping describe the machine
    the run was made on; none of them changes a result (seeds are fixed by the plan)."""
    from pipeline.config import ExecutionConfig

    ex = dataclasses.asdict(ExecutionConfig())
    ex["backend"] = backend or ("ray" if address else archived.get("backend") or ex["backend"])
    if address and ex["backend"] != "ray":
        raise ConfigError(f"--address={address!r} needs the ray backend (not --backend {ex['backend']})")
    ex.update(address=address, num_cpus=num_cpus, progress=progress)
    ignored = {k: v for k, v in archived.items()
               if k not in ("backend", "progress") and v is not None and v != ex.get(k)}
    if ignored:
        log.info("archived execution settings not used (this machine's instead): %s",
                 ", ".join(f"{k}={v}" for k, v in ignored.items()))
    return ex


@contextlib.contextmanager
def _ray_environment(address: str | None) -> Iterator[None]:
    """Hide ``RAY_ADDRESS`` for the rerun (an explicit ``address`` goes through the config), and
    set Ray's auth mode for a local cluster as :mod:`pipeline` does when Ray is not imported yet."""
    with environ_restored("RAY_ADDRESS", "RAY_AUTH_MODE") as saved:
        if saved["RAY_ADDRESS"] is not None:
            log.info("RAY_ADDRESS=%s is ignored by reproduce (use --address to join a cluster)",
                     saved["RAY_ADDRESS"])
        os.environ.pop("RAY_ADDRESS", None)
        if address is None and "ray" not in sys.modules:
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        yield


def reproduce(archive: Path, out_dir: Path | None = None, backend: str | None = None,
              rtol: float = DEFAULT_RTOL, progress: bool = True, *, address: str | None = None,
              num_cpus: int | None = None, max_bytes: int = MAX_BYTES,
              max_members: int = MAX_MEMBERS, ignore_columns: tuple[str, ...] = (),
              ignore_files: tuple[str, ...] = (), trust_archive_models: bool = False,
              keep: bool = False) -> dict:
    """Rerun the archived sweep locally (or on ``address``) and compare; see the module doc.

    The rerun is written to ``out_dir`` (which must not exist; kept), or else to a temporary
    folder: inside the extraction folder, removed with it, or with ``keep`` to
    ``$TMPDIR/lbsweep-rerun-*/rerun``, kept. ``kept`` in the result says whether
    ``output_dir`` still exists when this returns.

    ``ignore_columns`` (result and analysis columns, JSON keys) and ``ignore_files`` (glob
    patterns of paths under ``analysis/``) name expected differences, such as a column a newer
    version adds: they are left out of the comparison and listed in the report.
    ``trust_archive_models``: import the out-of-tree model packages the config names from the
    archive (:func:`pipeline.models.trust_archived`) instead of using installed ones."""
    from pipeline.run import analysis_params, run_sweep

    archive = Path(archive)
    if not archive.is_file():
        raise ConfigError(f"archive={str(archive)!r} does not exist")
    from pipeline import models

    trusted: list[str] = []
    kept_parent: Path | None = None  # the temporary folder made for a kept rerun
    kept = out_dir is not None or keep
    with tempfile.TemporaryDirectory(prefix="lbsweep-reproduce-") as tmp:
        try:
            run = safe_extract(archive, Path(tmp), max_bytes=max_bytes, max_members=max_members)
            cfg, archived_exec, archived_doc, archived_env = _read_run(run, archive)
            archived_rows = _read_archived_results(run, archive)
            # the archive's models are data: nothing of it goes on sys.path; its models are those
            # installed here, or with trust_archive_models its own packages, named and nothing else
            names = models.out_of_tree(cfg)
            try:
                if trust_archive_models:
                    trusted = models.trust_archived(run, names)
                else:
                    models.check_installed(names, run)
            except ConfigError as exc:
                raise ConfigError(f"archive={str(archive)!r}: {exc}") from None
            legacy_se = bool(cfg.pop(LEGACY_SE_KEY, False))
            archived_out = cfg.get("output_dir")
            if out_dir is None and keep:  # a folder of its own, kept (run_sweep makes rerun/)
                kept_parent = Path(tempfile.mkdtemp(prefix="lbsweep-rerun-"))
                out_dir = kept_parent / "rerun"
            elif out_dir is None:  # removed with the extraction folder, on every exit
                out_dir = Path(tmp) / "rerun"
            check_not_link(out_dir, "--out")  # before resolve(), which would follow it
            out_dir = Path(out_dir).resolve()
            cfg["output_dir"] = str(out_dir)
            cfg["mlflow"]["enabled"] = False
            ex = cfg["execution"] = local_execution(archived_exec, backend, address, num_cpus, progress)
            execution = {"backend": ex["backend"], "address": address,
                         "num_cpus": (num_cpus or os.cpu_count()) if ex["backend"] == "ray" and not address else None}
            with _ray_environment(address):
                result = run_sweep(cfg, quiet=True, archived=True)

            new_doc = json.loads((out_dir / "tasks.json").read_text())
            if legacy_se:  # the archive predates run.se_method: its tasks never carried the key
                for t in new_doc.get("tasks", []):
                    if t.get("se_method") == LEGACY_SE_METHOD:
                        del t["se_method"]
            seeds_match = [(t["_meta"]["task_id"], t["seed"]) for t in archived_doc["tasks"]] == \
                          [(t["_meta"]["task_id"], t["seed"]) for t in new_doc["tasks"]]
            diffs = env_differences(archived_env, environment())
            env_match = not diffs
            images = None
            old_mpl = (archived_env.get("packages") or {}).get("matplotlib")
            new_mpl = environment()["packages"].get("matplotlib")
            if not env_match:
                images = "the environment differs"
            elif old_mpl != new_mpl:
                images = f"matplotlib {old_mpl} -> {new_mpl}"

            c = Comparison(rtol, env_match, [str(archived_out or "")], [str(out_dir), str(result["output_dir"])],
                           frozenset(ignore_columns), tuple(ignore_files))
            c.json(archived_doc, new_doc, "tasks.json")
            rows = c.frames(archived_rows, result["frame"], "results")
            c.folders(run / "analysis", out_dir / "analysis", "analysis",
                      tuple(analysis_params(result["plan"])), images)
        except BaseException:
            if kept_parent is not None and not out_dir.exists():  # nothing was written: no trace
                kept_parent.rmdir()
            raise
        finally:
            models.forget(trusted)
    ok = seeds_match and not c.mismatches
    return {"ok": ok, "seeds_match": seeds_match, "env_match": env_match, "env_differences": diffs,
            "output_dir": out_dir, "kept": kept, "execution": execution, **rows, "mismatches": c.mismatches,
            "analysis_files": c.files, "images_skipped": c.images_skipped, "images_reason": images,
            "timing_lines": c.timing_lines, "rtol": rtol, "columns_ignored": sorted(ignore_columns),
            "files_ignored": c.files_ignored}


# ---------------------------------------------------------------------------- command line

def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 2G, 500M, 1000000)")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index(m.group(2).lower() or "_"))


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline.reproduce",
        description="Rerun an archived sweep on this machine and compare every result column and "
                    "analysis output with the archive (exit 0: REPRODUCED, 1: NOT REPRODUCED, "
                    "2: unusable archive, 3: Ray could not be started, 5: the rerun's folder "
                    "could not be written, 130: interrupted). The archive is data: no code in it "
                    "runs unless --trust-archive-models is given.",
        epilog="The rerun is local: of the archive's execution section only the backend is used "
               "(not its address, num_cpus, auth, timeouts or grouping), and the RAY_ADDRESS "
               "environment variable is ignored; --address joins a cluster. "
               "Compared: tasks and seeds, every result column except wall_time, node, run_id and "
               "code_commit, "
               "every file under analysis/ (timing lines of text files left out; images only "
               "when the environment matches). See the module docstring of pipeline/reproduce.py.")
    ap.add_argument("archive", type=Path, help="a run's archive.tar.gz")
    ap.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="write the rerun's run folder to DIR, which must not exist, and keep it "
                         "(default: a temporary folder, removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the rerun's folder (without --out: $TMPDIR/lbsweep-rerun-*/rerun) "
                         "and print where it is")
    ap.add_argument("--backend", choices=["ray", "serial"], default=None,
                    help="override the archived execution backend")
    ap.add_argument("--address", default=None, metavar="ADDR",
                    help="run on this Ray cluster (e.g. auto, host:6379) instead of locally; "
                         "without it the archived address and RAY_ADDRESS are ignored")
    ap.add_argument("--num-cpus", type=_positive_int, default=None, metavar="N",
                    help="CPUs of the local Ray cluster (default: all cores of this machine; the "
                         "archived value is not used)")
    ap.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                    help="relative tolerance used when the environment (packages, Python or CPU) differs "
                         f"(default {DEFAULT_RTOL:g}; numbers within {ATOL:g} absolute also agree)")
    ap.add_argument("--max-bytes", type=_size, default=MAX_BYTES, metavar="SIZE",
                    help="refuse an archive whose members declare more uncompressed bytes than "
                         "this (default 2G; suffixes K, M, G, T are powers of 1024)")
    ap.add_argument("--max-members", type=_positive_int, default=MAX_MEMBERS, metavar="N",
                    help=f"refuse an archive with more members than this (default {MAX_MEMBERS})")
    ap.add_argument("--ignore-columns", default="", metavar="COLS",
                    help="comma-separated columns (of the rows and the analysis frames; also "
                         "keys of tasks.json and other JSON) to leave out: expected differences, "
                         "e.g. a column a newer version adds (listed in the output)")
    ap.add_argument("--ignore-files", action="append", default=[], metavar="GLOB",
                    help="analysis files to leave out, as a glob of their path under analysis/ "
                         "(e.g. '*.png', 'jiq/report.md'); repeatable; listed in the output")
    ap.add_argument("--trust-archive-models", action="store_true",
                    help="run the archive's own out-of-tree model code: import the model packages "
                         "its config names from the archive's run/models/ (nothing else of it; a "
                         "name that is a standard-library or installed module is refused). "
                         "Without it the archive is data and its models must be installed here")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def _cluster_errors() -> tuple[type[BaseException], ...]:
    """Ray could not be started or joined (exit code 3, as for ``python -m pipeline``)."""
    from pipeline import execute

    err = getattr(execute, "ClusterError", None)
    return (err,) if err else ()


def _interrupted() -> tuple[type[BaseException], ...]:
    """What :func:`pipeline.run.run_sweep` raises when the rerun is interrupted."""
    from pipeline import run

    err = getattr(run, "Interrupted", None)
    return (err,) if err else ()


def _where(file: str, where: str, column: str) -> str:
    return f"{file} {where}" + (f" {column}" if column else "")


def _signal_as_interrupt(signum, frame):
    raise KeyboardInterrupt


#: signals that end the command as Ctrl-C does: the temporary folder is removed, exit 130
SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(message)s")
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _signal_as_interrupt) for s in SIGNALS} if main_thread else {}
    try:
        rep = reproduce(args.archive, args.out, args.backend, args.rtol, progress=not args.no_progress,
                        address=args.address, num_cpus=args.num_cpus, max_bytes=args.max_bytes,
                        max_members=args.max_members,
                        ignore_columns=tuple(c.strip() for c in args.ignore_columns.split(",") if c.strip()),
                        ignore_files=tuple(args.ignore_files),
                        trust_archive_models=args.trust_archive_models, keep=args.keep)
    except ConfigError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except _cluster_errors() as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    except (KeyboardInterrupt, *_interrupted()):
        print("error: interrupted", file=sys.stderr)
        return 130
    except OutputError as exc:  # the rerun's folder: disk full (as python -m pipeline)
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 5
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    ex = rep["execution"]
    where = (f"cluster {ex['address']}" if ex["address"] else
             f"local Ray cluster of {ex['num_cpus']} CPUs" if ex["backend"] == "ray" else "serial, in this process")
    mode = "bitwise" if rep["env_match"] else f"to rtol={rep['rtol']:g}"
    print(f"archive:      {args.archive}")
    if rep["kept"]:
        print(f"rerun:        {rep['output_dir']}  ({where}), kept")
    else:
        print(f"rerun:        in a temporary folder, removed (--keep or --out DIR keeps it)  ({where})")
    print(f"seeds:        {'identical' if rep['seeds_match'] else 'DIFFERENT'}")
    print(f"environment:  {'matches' if rep['env_match'] else 'differs: ' + '; '.join(rep['env_differences'])}"
          f"  (numbers compared {mode})")
    print(f"rows:         {rep['bitwise']}/{rep['rows']} bitwise identical, "
          f"{rep['close']}/{rep['rows']} within rtol={rep['rtol']:g}; every column compared but "
          f"{', '.join(sorted(EXCLUDED_COLUMNS | set(rep['columns_ignored'])))}")
    if rep["columns_ignored"]:
        print(f"ignored:      columns {', '.join(rep['columns_ignored'])} (--ignore-columns)")
    if rep["missing"] or rep["extra"]:
        print(f"missing rows: {rep['missing']}  extra rows: {rep['extra']}")
    compared = [f for f in rep["analysis_files"] if f not in rep["images_skipped"]]
    print(f"analysis:     {len(compared)} files compared: {', '.join(f.split('/', 1)[1] for f in compared)}")
    if rep["files_ignored"]:
        print(f"ignored:      {len(rep['files_ignored'])} analysis files (--ignore-files): "
              f"{', '.join(f.split('/', 1)[1] for f in rep['files_ignored'])}")
    if rep["images_skipped"]:
        print(f"not compared: {len(rep['images_skipped'])} images ({rep['images_reason']})")
    for file, lines in rep["timing_lines"].items():
        print(f"timing lines: {file} line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} left out")
    mism = rep["mismatches"]
    if mism:
        print(f"mismatches:   {len(mism)}")
        for file, wh, col, a, b in mism[:SHOWN]:
            print(f"  {_where(file, wh, col)}: archived {a!r}, rerun {b!r}")
        if len(mism) > SHOWN:
            print(f"  ... and {len(mism) - SHOWN} more")
    print("REPRODUCED" if rep["ok"] else "NOT REPRODUCED")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
