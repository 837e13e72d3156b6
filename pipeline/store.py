"""Result rows on disk: uniquely named Parquet chunk files of many rows, read back as one frame.

The driver buffers the rows that come back from the workers (:class:`ChunkWriter`) and writes
them as one chunk file when :data:`CHUNK_ROWS` rows are waiting or the oldest waiting row is
:data:`CHUNK_SECONDS` old, or :data:`CHUNK_AGE_FRACTION` of the writer's time so far if that is
longer, whichever comes first, and whatever is waiting when the run ends or is interrupted. A chunk is written to a temporary file and renamed into place
(``results/chunk-<time>-<random>.parquet``): a reader or a resume sees all of its rows or none,
and a killed driver loses at most the rows of its last max(5 s, 5% of its time so far), which a
resume runs again. The age limit that grows with the run keeps the number of chunks of a slow
run logarithmic in its length (about 20 + 20 ln(T / 100 s) over T seconds, plus one per
:data:`CHUNK_ROWS` rows) instead of one every 5 s.
A chunk's name is new every time, so a second write never replaces a first.

Runs written before chunks hold one file per row (``results/<task_id>-<random>.parquet``); they
are read the same way: every function here reads the rows (their ``task_id`` column) through
one lazy scan of ``results/*.parquet``, never file names and never one file after another.

The columns are documented in docs/results-schema.md; :data:`FIXED_SCHEMA` gives their types:
the result columns and their kinds come from :data:`sim.registry.RESULTS`, the parameter
columns are added per sweep from :data:`sim.registry.PARAMS` (:func:`schema_for`).
"""
from __future__ import annotations

import io
import logging
import os
import time
import uuid
from pathlib import Path

import polars as pl

from sim.registry import RESULTS

log = logging.getLogger("pipeline")

#: Polars type of each result kind (sim.registry.RESULTS)
RESULT_DTYPES: dict[str, pl.DataType] = {"float": pl.Float64, "int": pl.Int64, "str": pl.String,
                                         "floats": pl.List(pl.Float64)}

FIXED_SCHEMA: dict[str, pl.DataType] = {
    "sweep": pl.String,
    "run_id": pl.String,
    "task_id": pl.String,
    "point_id": pl.Int64,
    "replication": pl.Int64,
    "model": pl.String,
    "engine": pl.String,
    "policy": pl.String,
    "seed": pl.Int64,
    **{name: RESULT_DTYPES[kind] for name, kind in RESULTS.items()},
    "wall_time": pl.Float64,
    "node": pl.String,
    "code_commit": pl.String,
    "status": pl.String,
    "error": pl.String,
}
#: the estimate columns (compared by pipeline.reproduce)
ESTIMATE_COLUMNS = [name for name in RESULTS if name != "ci_method"]


#: Polars type of each Python type of a parameter column (pipeline.plan.KIND_TYPES)
PARAM_DTYPES: dict[type, pl.DataType] = {int: pl.Int64, float: pl.Float64, bool: pl.Boolean,
                                         str: pl.String, list: pl.List(pl.Float64)}


def schema_for(param_types: dict[str, type]) -> dict[str, pl.DataType]:
    schema = dict(FIXED_SCHEMA)
    for name, kind in param_types.items():
        schema[name] = PARAM_DTYPES[kind]
    return schema


def rows_frame(rows: list[dict], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Rows with the documented types (a column a row lacks is null); unknown keys are refused."""
    names = set(schema)
    for row in rows:
        if not names.issuperset(row):
            raise KeyError(f"result row has undocumented columns: {sorted(set(row) - names)}")
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema)


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """``frame`` as Parquet at ``path``, encoded in memory and then written by Python: a full
    disk or a file size limit is then an ``OSError`` with its errno (Polars writing a file
    itself reports it as a ComputeError, "Invalid thrift: transport error")."""
    data = _parquet_bytes(frame)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        Path(path).unlink(missing_ok=True)  # a truncated file is no result
        raise


#: a chunk is written when this many rows wait ...
CHUNK_ROWS = 1000
#: ... or when the oldest waiting row is this many seconds old, whichever comes first
CHUNK_SECONDS = 5.0
#: ... or this fraction of the writer's time so far, when that is longer than CHUNK_SECONDS
CHUNK_AGE_FRACTION = 0.05
CHUNK_PREFIX = "chunk-"


def write_chunk(results_dir: Path, frame: pl.DataFrame) -> Path:
    """Write ``frame`` as a new chunk file in ``results_dir``: encoded in memory, written to a
    hidden temporary file, then renamed into place, so that the chunk appears whole or not at
    all. Its name (write time in ns and 128 random bits) is new, so nothing is replaced. A write
    that fails (a full disk: ``OSError`` with its errno) leaves no file behind."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    final = results_dir / f"{CHUNK_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex}.parquet"
    tmp = results_dir / f".{final.name}.tmp"
    data = _parquet_bytes(frame)
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


class ChunkWriter:
    """Rows in, chunk files out: :meth:`add` buffers a row (``fixed`` columns added) and writes
    the buffer as one chunk when it holds ``max_rows`` rows or its oldest row is ``max_seconds``
    old (or :data:`CHUNK_AGE_FRACTION` of the writer's age, when longer); :meth:`flush_if_due` applies the same rule between rows (the driver calls it while it
    waits for the workers), :meth:`flush` writes what waits. If a write fails, its rows are
    dropped from the buffer (a resume runs their tasks again) and the error propagates."""

    def __init__(self, results_dir: Path, schema: dict[str, pl.DataType], fixed: dict | None = None,
                 max_rows: int | None = None, max_seconds: float | None = None, clock=time.monotonic):
        self.results_dir, self.schema, self.fixed = Path(results_dir), schema, dict(fixed or {})
        self.max_rows = int(CHUNK_ROWS if max_rows is None else max_rows)
        self.max_seconds = float(CHUNK_SECONDS if max_seconds is None else max_seconds)
        self.clock = clock
        self.started = clock()
        self.rows: list[dict] = []
        self.oldest: float | None = None
        self.chunks = 0
        self.rows_written = 0

    def add(self, row: dict) -> None:
        self.rows.append({**row, **self.fixed})
        if self.oldest is None:
            self.oldest = self.clock()
        self.flush_if_due()

    def flush_if_due(self) -> None:
        if not self.rows:
            return
        now = self.clock()
        # max_seconds = 0 asks for a chunk per row (tests that kill a run at a given row)
        grown = CHUNK_AGE_FRACTION * (now - self.started) if self.max_seconds > 0 else 0.0
        max_age = max(self.max_seconds, grown)
        if len(self.rows) >= self.max_rows or now - self.oldest >= max_age:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        rows, self.rows, self.oldest = self.rows, [], None
        write_chunk(self.results_dir, rows_frame(rows, self.schema))
        self.chunks += 1
        self.rows_written += len(rows)


def result_files(results_dir: Path) -> list[Path]:
    """The Parquet files directly in ``results_dir`` (chunks, or one file per row in runs written
    before chunks; ``results/failed/`` and temporary files are not among them), sorted by name:
    chunks in the order they were written. A listing of the folder; nothing is read."""
    results_dir = Path(results_dir)
    return sorted(results_dir.glob("*.parquet")) if results_dir.is_dir() else []


def collect_results(results_dir: Path, columns: list[str] | None = None,
                    file_column: str | None = None) -> pl.DataFrame | None:
    """The rows of every result file of ``results_dir`` (None if it has none) from one lazy
    scan; only ``columns`` if given; with ``file_column``, each row's file path in that column.
    Files of two schemas (rows written before a column was added, next to rows of a resume by
    newer code) are read together, the missing column null: the scan of each file, concatenated
    by column name, still one query."""
    files = [str(f) for f in result_files(results_dir)]
    if not files:
        return None

    def scan(paths: list[str]) -> pl.LazyFrame:
        lf = pl.scan_parquet(paths, include_file_paths=file_column)
        return lf.select([*columns, *([file_column] if file_column else [])]) if columns else lf

    try:
        return scan(files).collect()
    except (pl.exceptions.SchemaError, pl.exceptions.ColumnNotFoundError):
        return pl.concat([scan([f]) for f in files], how="diagonal_relaxed").collect()


def read_results(results_dir: Path) -> pl.DataFrame:
    """All rows of a run as one frame (:func:`collect_results`), sorted by task id, one row per
    task (:func:`one_row_per_task`)."""
    frame = collect_results(results_dir)
    if frame is None:
        return pl.DataFrame(schema=FIXED_SCHEMA)
    return one_row_per_task(frame).sort("task_id", maintain_order=True)


def one_row_per_task(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with at most one row per ``task_id``. Of several rows of one task (written by two
    writers of one folder, which the folder's lock now prevents, by a copy, or by a resume
    killed while ``--retry-failed`` rewrote a chunk, :func:`set_aside_failed`), a result is
    kept over an error row (``status == "error"``: a failed attempt, which a later attempt
    replaces, whatever the order of the files), and of equals the first in the frame's order
    (files by name: chunks in the order written); a warning counts the rows dropped. The kept
    rows stay in the frame's order."""
    if "task_id" not in frame.columns or frame["task_id"].n_unique() == frame.height:
        return frame
    failed = (pl.col("status") == "error").fill_null(False) if "status" in frame.columns else pl.lit(False)
    ranked = frame.with_row_index("_row").with_columns(failed.alias("_failed"))
    kept = (ranked.sort(["_failed", "_row"]).unique(subset="task_id", keep="first", maintain_order=True)
            .sort("_row"))
    dup = frame.filter(pl.col("task_id").is_duplicated())["task_id"].unique().sort()
    with_result = kept.filter(~pl.col("_failed"))["task_id"]
    errors = ranked.filter(pl.col("_failed") & pl.col("task_id").is_in(with_result.implode())).height
    log.warning("%d rows dropped: tasks with more than one row (%d tasks, first %s; %d of the dropped "
                "rows were errors of a task that has a result); one row per task kept",
                frame.height - kept.height, dup.len(), dup[0], errors)
    return kept.drop("_row", "_failed")


def done_task_ids(results_dir: Path) -> set[str]:
    """The task ids that have a row in ``results_dir`` (the ``task_id`` column of one scan)."""
    frame = collect_results(results_dir, columns=["task_id"])
    return set() if frame is None else set(frame["task_id"].to_list())


def set_aside_failed(results_dir: Path) -> int:
    """Move the error rows (``status == "error"``) of ``results_dir`` into one new chunk in
    ``results_dir/failed/`` and return how many there were. Each file that held one is replaced
    by a chunk of its other rows: the new files are written first and the old ones removed last,
    so that an interruption in between leaves a task's row twice (the first written is read,
    :func:`one_row_per_task`), never no row."""
    frame = collect_results(results_dir, file_column="_file")
    if frame is None:
        return 0
    failed = frame.filter(pl.col("status") == "error")
    if failed.height == 0:
        return 0
    touched = failed["_file"].unique().to_list()
    kept = frame.filter(pl.col("_file").is_in(touched) & (pl.col("status") != "error"))
    write_chunk(Path(results_dir) / "failed", failed.drop("_file"))
    if kept.height:
        write_chunk(results_dir, kept.drop("_file"))
    for f in touched:
        Path(f).unlink()
    return failed.height
