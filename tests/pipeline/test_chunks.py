"""Result rows in chunk files (pipeline/store.py): when the driver writes a chunk, that a failed
write leaves nothing, one row per task on reading, error rows set aside for ``--retry-failed``,
and run folders of both layouts (chunks, and one file per row as written before chunks) resumed
to the rows of an uninterrupted run."""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import uuid
from pathlib import Path

import polars as pl
import pytest

from pipeline import store
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose

SCHEMA = store.schema_for({"n_servers": int, "lam": float})


def row(i: int, status: str = "ok") -> dict:
    return {"task_id": f"p{i:05d}-agent-r000", "point_id": i, "n_servers": 10 + i, "lam": 0.5,
            "status": status, "error": "boom" if status == "error" else None}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def chunks(folder: Path) -> list[Path]:
    return sorted(folder.glob("chunk-*.parquet"))


def test_a_chunk_is_written_at_max_rows(tmp_path):
    w = store.ChunkWriter(tmp_path, SCHEMA, {"sweep": "s", "run_id": "r"}, max_rows=3, max_seconds=60,
                          clock=Clock())
    for i in range(7):
        w.add(row(i))
    assert [pl.read_parquet(f).height for f in chunks(tmp_path)] == [3, 3]
    w.flush()
    frames = [pl.read_parquet(f) for f in chunks(tmp_path)]
    assert [f.height for f in frames] == [3, 3, 1]  # names sort in the order of writing
    allrows = pl.concat(frames)
    assert allrows["task_id"].to_list() == [row(i)["task_id"] for i in range(7)]
    assert (allrows["sweep"] == "s").all() and (allrows["run_id"] == "r").all()
    assert dict(allrows.schema) == SCHEMA
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_a_chunk_is_written_when_its_oldest_row_is_max_seconds_old(tmp_path):
    clock = Clock()
    w = store.ChunkWriter(tmp_path, SCHEMA, max_rows=1000, max_seconds=5.0, clock=clock)
    w.add(row(0))
    clock.t = 3.0
    w.add(row(1))
    w.flush_if_due()
    assert not chunks(tmp_path)  # the oldest row is 3 s old
    clock.t = 5.0
    w.flush_if_due()  # the driver calls this while it waits for the workers
    assert [pl.read_parquet(f).height for f in chunks(tmp_path)] == [2]
    clock.t = 6.0
    w.add(row(2))  # the clock starts again with the next row
    clock.t = 10.9
    w.flush_if_due()
    assert len(chunks(tmp_path)) == 1
    clock.t = 11.0
    w.add(row(3))
    assert [pl.read_parquet(f).height for f in chunks(tmp_path)] == [2, 2]


def test_the_age_limit_grows_with_the_run_so_a_slow_run_writes_few_chunks(tmp_path):
    clock = Clock()
    w = store.ChunkWriter(tmp_path, SCHEMA, max_rows=1000, max_seconds=5.0, clock=clock)
    clock.t = 1000.0  # a row added now waits until its age is 5% of the writer's: t = 1052.6 s
    w.add(row(0))
    clock.t = 1052.5
    w.flush_if_due()
    assert not chunks(tmp_path)
    clock.t = 1052.7
    w.flush_if_due()
    assert len(chunks(tmp_path)) == 1
    # one row every second for an hour: the chunks grow with the log of the time, not 1 per 5 s
    for i in range(1, 3600):
        clock.t = 1050.0 + i
        w.add(row(i))
    w.flush()
    assert len(chunks(tmp_path)) <= 20 + 20 * math.log(4650 / 100) + 4, len(chunks(tmp_path))
    # max_seconds = 0 still writes a chunk per row, however old the writer
    per_row = tmp_path / "per_row"
    w = store.ChunkWriter(per_row, SCHEMA, max_rows=1000, max_seconds=0.0, clock=clock)
    clock.t = 10_000.0
    w.add(row(0))
    w.add(row(1))
    assert len(chunks(per_row)) == 2


def test_a_failed_write_leaves_no_file_and_drops_only_its_rows(tmp_path, monkeypatch):
    w = store.ChunkWriter(tmp_path, SCHEMA, max_rows=2, clock=Clock())
    real_replace = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    w.add(row(0))
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as exc:
        w.add(row(1))
    assert exc.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())  # neither a chunk nor its temporary file
    monkeypatch.setattr(os, "replace", real_replace)
    w.add(row(2))
    w.flush()
    assert store.read_results(tmp_path)["task_id"].to_list() == [row(2)["task_id"]]


def test_undocumented_column_is_refused():
    with pytest.raises(KeyError, match="undocumented columns"):
        store.rows_frame([{**row(0), "surprise": 1}], SCHEMA)


def test_reading_keeps_one_row_per_task_and_the_first_written(tmp_path, caplog):
    store.write_chunk(tmp_path, store.rows_frame([row(0), row(1)], SCHEMA))
    store.write_chunk(tmp_path, store.rows_frame([{**row(1), "n_servers": 99}, row(2)], SCHEMA))
    frame = store.read_results(tmp_path)
    assert frame["task_id"].to_list() == [row(i)["task_id"] for i in range(3)]
    assert frame.filter(pl.col("point_id") == 1)["n_servers"].to_list() == [11]
    assert "1 rows dropped" in caplog.text
    assert store.done_task_ids(tmp_path) == {row(i)["task_id"] for i in range(3)}
    assert store.read_results(tmp_path / "none").height == 0 and store.done_task_ids(tmp_path / "none") == set()


def one_file_per_row(results: Path) -> None:
    """Rewrite a results folder in the layout of runs made before chunks: one file per row,
    named ``<task_id>-<12 hex>.parquet`` (pipeline/store.py's ``write_row`` then)."""
    frame = pl.scan_parquet(str(results / "*.parquet")).collect()
    for f in results.glob("*.parquet"):
        f.unlink()
    for i in range(frame.height):
        r = frame.slice(i, 1)
        r.write_parquet(results / f"{r['task_id'][0]}-{uuid.uuid4().hex[:12]}.parquet")


def test_error_rows_are_set_aside_from_chunks_and_from_old_files(tmp_path):
    chunked, old = tmp_path / "chunked", tmp_path / "old"
    store.write_chunk(chunked, store.rows_frame([row(0), row(1, "error"), row(2)], SCHEMA))
    store.write_chunk(chunked, store.rows_frame([row(3), row(4)], SCHEMA))
    shutil.copytree(chunked, old)
    one_file_per_row(old)
    for folder in (chunked, old):
        assert store.set_aside_failed(folder) == 1
        assert sorted(store.done_task_ids(folder)) == [row(i)["task_id"] for i in (0, 2, 3, 4)]
        failed = pl.read_parquet(folder / "failed" / "*.parquet")
        assert failed["task_id"].to_list() == [row(1)["task_id"]] and failed["error"].to_list() == ["boom"]
        assert store.set_aside_failed(folder) == 0
    assert len(list(chunked.glob("*.parquet"))) == 2  # the untouched chunk stays as it is


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, pl.DataFrame]:
    """An uninterrupted tiny sweep (smoke with short runs, serial, no MLflow): 12 tasks."""
    tmp = tmp_path_factory.mktemp("chunks")
    cfg = to_plain(compose(["+sweep=smoke", f"output_dir={tmp / 'ref'}", "mlflow.enabled=false",
                            "execution.progress=false", "execution.backend=serial", "params.events=20000",
                            "axes.n_servers=[20,40]"]))
    out = run_sweep(cfg, quiet=True)
    assert (out["frame"]["status"] == "ok").all() and out["frame"].height == 12
    return cfg, out["frame"]


#: what differs between two runs of one task: how long it took and the run's id
VOLATILE = ("wall_time", "run_id")


def assert_same_rows(a: pl.DataFrame, b: pl.DataFrame) -> None:
    cols = [c for c in a.columns if c not in VOLATILE]
    assert a.height == b.height and a["task_id"].n_unique() == a.height
    assert a.select(cols).sort("task_id").equals(b.select(cols).sort("task_id"))


@pytest.mark.parametrize("layout", ["chunks", "one file per row"])
def test_a_run_folder_with_rows_missing_resumes_to_the_rows_of_an_uninterrupted_run(
        reference, tmp_path, layout):
    """A killed run's folder (some rows on disk, run.json ``running``, PARTIAL): the resume runs
    exactly the tasks without a row. Also for a folder written before chunks (one file per
    row), which the resume reads and then adds chunks to."""
    cfg, ref = reference
    folder = tmp_path / "run"
    shutil.copytree(Path(cfg["output_dir"]), folder)
    results = folder / "results"
    for f in results.glob("*.parquet"):
        f.unlink()
    kept = ref.filter(pl.col("point_id") != 1)  # point 1's three tasks were lost to the kill
    store.write_chunk(results, kept)
    if layout == "one file per row":
        one_file_per_row(results)
    for name in ("results.parquet", "archive.tar.gz"):
        (folder / name).unlink()
    shutil.rmtree(folder / "analysis")
    (folder / "PARTIAL").write_text("killed\n")
    state = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**state, "status": "running"}))
    out = run_sweep({**cfg, "output_dir": str(folder)}, quiet=True, resume=True)
    assert out["ran"] == ref.height - kept.height == 3
    assert_same_rows(out["frame"], ref)
    assert_same_rows(pl.read_parquet(folder / "results.parquet"), ref)
    assert not (folder / "PARTIAL").exists()
    new = [f for f in results.glob("*.parquet") if f.name.startswith("chunk-")]
    assert sum(pl.read_parquet(f).height for f in new) == (3 if layout == "one file per row" else 12)
