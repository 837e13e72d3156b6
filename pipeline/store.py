"""Result rows on disk: one uniquely named Parquet file per task, read back as one frame with
one row per task.

The columns are documented in docs/results-schema.md; :data:`FIXED_SCHEMA` gives their types:
the result columns and their kinds come from :data:`sim.registry.RESULTS`, the parameter
columns are added per sweep from :data:`sim.registry.PARAMS` (:func:`schema_for`).
"""
from __future__ import annotations

import io
import logging
import os
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


def row_frame(row: dict, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """One row with the documented types; unknown keys are refused."""
    extra = set(row) - set(schema)
    if extra:
        raise KeyError(f"result row has undocumented columns: {sorted(extra)}")
    return pl.DataFrame([{k: row.get(k) for k in schema}], schema=schema)


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


def write_row(results_dir: Path, row: dict, schema: dict[str, pl.DataType]) -> Path:
    """Write one row atomically to a new, uniquely named file; never overwrite an existing one.
    A write that fails (a full disk: ``OSError`` with its errno) leaves no file behind."""
    results_dir.mkdir(parents=True, exist_ok=True)
    final = results_dir / f"{row['task_id']}-{uuid.uuid4().hex[:12]}.parquet"
    tmp = results_dir / f".{final.name}.tmp"
    data = _parquet_bytes(row_frame(row, schema))
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.link(tmp, final)  # fails if ``final`` exists: a second write never replaces a first
    finally:
        tmp.unlink(missing_ok=True)
    return final


def read_results(results_dir: Path) -> pl.DataFrame:
    """All rows of a run as one frame, sorted by task id, one row per task
    (:func:`one_row_per_task`). Files of two schemas (rows written before a column was added,
    next to rows of a resume by newer code) are read together, the missing column null."""
    files = [str(f) for f in sorted(Path(results_dir).glob("*.parquet"))]
    if not files:
        return pl.DataFrame(schema=FIXED_SCHEMA)
    try:
        frame = pl.scan_parquet(files).collect()
    except (pl.exceptions.SchemaError, pl.exceptions.ColumnNotFoundError):
        frame = pl.concat([pl.scan_parquet(f) for f in files], how="diagonal_relaxed").collect()
    return one_row_per_task(frame).sort("task_id")


def one_row_per_task(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with at most one row per ``task_id``: of several rows of one task (written by two
    writers of one folder, which the folder's lock now prevents, or by a copy), the first in the
    frame's order (files by name) is kept, and a warning counts the rows dropped."""
    if "task_id" not in frame.columns or frame["task_id"].n_unique() == frame.height:
        return frame
    kept = frame.unique(subset="task_id", keep="first", maintain_order=True)
    dup = frame.filter(pl.col("task_id").is_duplicated())["task_id"].unique().sort()
    log.warning("%d rows dropped: tasks with more than one row (%d tasks, first %s); one row per "
                "task kept", frame.height - kept.height, dup.len(), dup[0])
    return kept
