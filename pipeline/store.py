"""Result rows on disk: one uniquely named Parquet file per task, read back as one frame.

The columns are documented in docs/results-schema.md; :data:`FIXED_SCHEMA` is the source of
truth for their types (parameter columns are added per sweep).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import polars as pl

FIXED_SCHEMA: dict[str, pl.DataType] = {
    "sweep": pl.String,
    "run_id": pl.String,
    "task_id": pl.String,
    "point_id": pl.Int64,
    "replication": pl.Int64,
    "engine": pl.String,
    "policy": pl.String,
    "seed": pl.Int64,
    "mean_response": pl.Float64,
    "mean_response_se": pl.Float64,
    "mean_wait": pl.Float64,
    "mean_wait_se": pl.Float64,
    "prob_wait": pl.Float64,
    "prob_wait_se": pl.Float64,
    "mean_queue": pl.Float64,
    "mean_queue_se": pl.Float64,
    "tail": pl.List(pl.Float64),
    "queueing_ratio": pl.Float64,
    "queueing_ratio_se": pl.Float64,
    "drop_prob": pl.Float64,
    "drop_prob_se": pl.Float64,
    "frac_within_h": pl.Float64,
    "messages_per_job": pl.Float64,
    "n_jobs": pl.Int64,
    "events_run": pl.Int64,
    "sim_time": pl.Float64,
    "warmup_time": pl.Float64,
    "ci_method": pl.String,
    "wall_time": pl.Float64,
    "status": pl.String,
    "error": pl.String,
}
#: the estimate columns (compared by pipeline.reproduce)
ESTIMATE_COLUMNS = [
    "mean_response", "mean_response_se", "mean_wait", "mean_wait_se", "prob_wait", "prob_wait_se",
    "mean_queue", "mean_queue_se", "tail", "queueing_ratio", "queueing_ratio_se", "drop_prob",
    "drop_prob_se", "frac_within_h", "messages_per_job", "n_jobs", "events_run", "sim_time",
    "warmup_time",
]


def schema_for(param_types: dict[str, type]) -> dict[str, pl.DataType]:
    schema = dict(FIXED_SCHEMA)
    for name, kind in param_types.items():
        schema[name] = pl.Int64 if kind is int else pl.String if kind is str else pl.Float64
    return schema


def row_frame(row: dict, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """One row with the documented types; unknown keys are refused."""
    extra = set(row) - set(schema)
    if extra:
        raise KeyError(f"result row has undocumented columns: {sorted(extra)}")
    return pl.DataFrame([{k: row.get(k) for k in schema}], schema=schema)


def write_row(results_dir: Path, row: dict, schema: dict[str, pl.DataType]) -> Path:
    """Write one row atomically to a new, uniquely named file; never overwrite an existing one."""
    results_dir.mkdir(parents=True, exist_ok=True)
    final = results_dir / f"{row['task_id']}-{uuid.uuid4().hex[:12]}.parquet"
    tmp = results_dir / f".{final.name}.tmp"
    row_frame(row, schema).write_parquet(tmp)
    try:
        os.link(tmp, final)  # fails if ``final`` exists: a second write never replaces a first
    finally:
        tmp.unlink()
    return final


def read_results(results_dir: Path) -> pl.DataFrame:
    """All rows of a run as one frame, sorted by task id."""
    files = sorted(Path(results_dir).glob("*.parquet"))
    if not files:
        return pl.DataFrame(schema=FIXED_SCHEMA)
    return pl.scan_parquet([str(f) for f in files]).collect().sort("task_id")
