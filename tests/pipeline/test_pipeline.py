"""End to end: the smoke sweep through Ray, Parquet, MLflow and the archive, then reproduce it."""
from __future__ import annotations

import io
import re
import tarfile

import polars as pl
import pytest

from analysis.models.zero_queueing.verdicts import RANGE_TESTS
from pipeline.archive import safe_extract
from pipeline.errors import ConfigError
from pipeline.execute import estimated_seconds, group_tasks
from pipeline.reproduce import reproduce
from pipeline.run import run_sweep, to_plain
from pipeline.store import FIXED_SCHEMA, read_results, rows_frame, schema_for, write_chunk
from tests.helpers import REPO, compose


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, ray_cluster):
    tmp = tmp_path_factory.mktemp("smoke")
    cfg = compose(["+sweep=smoke", f"output_dir={tmp / 'out'}",
                   f"mlflow.tracking_uri=sqlite:///{tmp / 'mlflow.db'}", "execution.progress=false"])
    return run_sweep(to_plain(cfg), quiet=True), tmp


def documented_columns() -> list[str]:
    text = (REPO / "docs" / "results-schema.md").read_text().split("## The row", 1)[1]
    cols = []
    for line in text.splitlines():
        m = re.match(r"\|\s*`([a-z][a-z0-9_]*)`\s*\|", line)  # the parameter row lists several names
        if m:
            cols.append(m.group(1))
    return cols


def test_schema_is_documented(smoke_run):
    out, _ = smoke_run
    frame = out["frame"]
    documented = documented_columns()
    assert set(documented) == set(FIXED_SCHEMA), "docs/results-schema.md and pipeline/store.py disagree"
    for col, dtype in FIXED_SCHEMA.items():
        assert frame.schema[col] == dtype, col
    for p in out["plan"].param_columns:
        assert p in frame.columns


def test_rows_in_chunk_files_one_row_per_task(smoke_run):
    out, _ = smoke_run
    files = list((out["output_dir"] / "results").glob("*.parquet"))
    plan = out["plan"]
    # rows are written in chunks (every 1000 rows or 5 s): a handful of files for 12 tasks
    assert 1 <= len(files) < len(plan.tasks) and all(f.name.startswith("chunk-") for f in files), files
    assert sum(pl.read_parquet(f).height for f in files) == len(plan.tasks)
    frame = out["frame"]
    assert frame.height == len(plan.tasks)
    assert (frame["status"] == "ok").all(), frame.filter(pl.col("status") != "ok")["error"].to_list()
    assert sorted(frame["task_id"].to_list()) == sorted(t["_meta"]["task_id"] for t in plan.tasks)
    agent = frame.filter(pl.col("engine") == "agent")
    assert (agent["mean_response_se"] > 0).all() and (agent["n_jobs"] > 0).all()
    assert agent["seed"].n_unique() == agent.height


def test_second_write_never_overwrites(tmp_path):
    schema = schema_for({"n_servers": int, "lam": float})
    row = {"task_id": "p00000-agent-r000", "n_servers": 3, "lam": 0.5, "status": "ok"}
    a = write_chunk(tmp_path, rows_frame([row], schema))
    b = write_chunk(tmp_path, rows_frame([row], schema))
    assert a != b and a.exists() and b.exists()
    assert pl.scan_parquet([str(a), str(b)]).collect().height == 2
    assert read_results(tmp_path).height == 1  # one row per task: the first written
    assert not list(tmp_path.glob(".*tmp"))


def test_analysis_outputs(smoke_run):
    out, _ = smoke_run
    an = out["analysis"]
    assert an["report"].exists() and an["report"].read_text().strip()
    assert an["plots"] and all(p.stat().st_size > 1000 for p in an["plots"])
    summary = pl.read_parquet(an["summary"])
    assert {"mean_response_mf", "mean_response_gap"} <= set(summary.columns)


def test_archive_contents_and_reproduce(smoke_run, tmp_path):
    out, _ = smoke_run
    with tarfile.open(out["archive"]) as tar:
        names = set(tar.getnames())
        results = [n for n in names if n.startswith("run/results/") and n.endswith(".parquet")]
        archived_rows = sum(pl.read_parquet(io.BytesIO(tar.extractfile(n).read())).height for n in results)
    for member in ("run/config.yaml", "run/tasks.json", "run/environment.json", "run/git.json",
                   "run/git.diff", "run/analysis/report.md"):
        assert member in names
    assert archived_rows == len(out["plan"].tasks)  # the chunk files, every row once
    rep = reproduce(out["archive"], tmp_path / "again", progress=False)
    assert rep["seeds_match"] and rep["env_match"]
    assert rep["bitwise"] == rep["rows"] == len(out["plan"].tasks)
    assert rep["ok"]


def _tar_with(tmp_path, name: str, kind=tarfile.REGTYPE) -> str:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        data = b"x"
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        if kind == tarfile.SYMTYPE:
            info.linkname = "/etc/passwd"
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


@pytest.mark.parametrize("name,kind,needle", [
    ("/tmp/abs.txt", tarfile.REGTYPE, "absolute"),
    ("run/../../escape.txt", tarfile.REGTYPE, "'..'"),
    ("run/link", tarfile.SYMTYPE, "links"),
])
def test_reproduce_refuses_unsafe_archives(tmp_path, name, kind, needle):
    archive = _tar_with(tmp_path, name, kind)
    with pytest.raises(ConfigError, match=needle):
        safe_extract(archive, tmp_path / "x")
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("*"))
    assert not (tmp_path.parent / "escape.txt").exists()


def test_grouping_follows_the_cpus_and_balances_cost():
    tasks = [{"engine": "agent", "policy": "pod", "events": 2_000_000, "i": i} for i in range(25)] + \
        [{"engine": "meanfield", "i": 25 + i} for i in range(10)]
    for cpus in (1, 2, 8):
        groups = group_tasks(tasks, cpus=cpus, tasks_per_cpu=4, events_per_second=2e7)
        assert sorted(t["i"] for g in groups for t in g) == list(range(35))  # each task once
        assert 0.75 * cpus * 4 <= len(groups) <= cpus * 4 + 1  # about tasks_per_cpu per CPU
        costs = [sum(estimated_seconds(t, 2e7) for t in g) for g in groups]
        assert costs == sorted(costs, reverse=True)  # the most expensive first
        assert max(costs) <= 2 * sum(costs) / len(groups) + 0.1  # no group far above the mean
    # tiny sweeps spread over the CPUs too (one task per Ray task)
    tiny = [{"engine": "agent", "policy": "pod", "events": 1000}] * 6
    assert [len(g) for g in group_tasks(tiny, cpus=4, tasks_per_cpu=4, events_per_second=5e7)] == [1] * 6
    assert group_tasks([], cpus=2, tasks_per_cpu=4, events_per_second=5e7) == []


def test_grouping_spreads_tasks_of_one_kind_over_the_groups():
    # the plan lists the tasks of one (policy, variant, N) together; their estimates err alike,
    # so a group must not take a run of them (the last 24 here stand for 20-fold underestimates)
    tasks = [{"engine": "agent", "policy": "pod", "events": 1_000_000 * (1 + i % 7), "i": i} for i in range(96)]
    tasks += [{"engine": "agent", "policy": "pod", "events": 500_000, "i": 96 + i} for i in range(24)]
    groups = group_tasks(tasks, cpus=2, tasks_per_cpu=4, events_per_second=2e7)
    assert len(groups) == 8 and sorted(t["i"] for g in groups for t in g) == list(range(120))
    assert all(2 <= sum(t["i"] >= 96 for t in g) <= 4 for g in groups)  # 24 over 8 groups (by cutting: 1 or 2 groups)
    assert all([t["i"] for t in g] == sorted(t["i"] for t in g) for g in groups)  # plan order within


def test_rows_name_their_node(smoke_run):
    out, _ = smoke_run
    frame = out["frame"]
    assert frame["node"].null_count() == 0
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert set(frame["node"].unique()) <= alive


@pytest.mark.integration  # a shipped sweep end to end through the pipeline
def test_sub_halfin_whitt_runs_at_a_tiny_scale(tmp_path, ray_cluster):
    cfg = compose(["+sweep=sub_halfin_whitt", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
                   "execution.progress=false", "axes.n_servers=[50,100,200]", "params.time=800",
                   "replications=2"])
    out = run_sweep(to_plain(cfg), quiet=True)
    frame = out["frame"]
    assert (frame["status"] == "ok").all(), frame.filter(pl.col("status") != "ok")["error"].to_list()
    assert set(frame["variant"].unique()) == {"c1", "c4", "c4_buffer", "c1_loglog", "const2", "single_task"}
    assert (frame["queueing_ratio"] > -0.05).all()
    # the buffered arm (b = 1): admitted jobs never wait, the drops are its cost
    buffered = frame.filter(pl.col("variant") == "c4_buffer")
    assert (buffered["b"] == 1).all() and (buffered["queueing_ratio"].abs() < 1e-12).all()
    assert (buffered["drop_prob"] > 0).all()
    zq = out["analysis"]["extra"]["zero_queueing"]
    assert zq["report"].exists() and len(zq["verdicts"]) == 18
    assert all(v.get("drop_at_max_n") is not None for v in zq["verdicts"] if v["variant"] == "c4_buffer")
    assert all(v["range_test"] in RANGE_TESTS for v in zq["verdicts"])
    # the limit is claimed only where something carries it; the rest is undecided beyond the path
    assert all(v["limit_carrier"] or v["verdict"].startswith("undecided beyond") for v in zq["verdicts"])
    assert all(p.exists() for p in zq["plots"])
    # past the float range: the heavy-traffic limit to N = 10^300 (4 rules x 2 policies x 59 N),
    # its rows with log10_n and no n_servers, and the limit's verdict of each Theta rule from it
    heavy = frame.filter(pl.col("engine") == "heavy_traffic")
    assert heavy.height == 472 and heavy["n_servers"].null_count() == 472 and heavy["log10_n"].max() == 300.0
    assert set(heavy["variant"].unique()) == {"c1", "c4", "c1_loglog", "single_task"}
    by = {(v["policy"], v["variant"]): v for v in zq["verdicts"]}
    for rule in ("c1", "c4", "c1_loglog", "single_task"):
        assert by[("batch_filling", rule)]["path_verdict"] == "vanishing"
        assert by[("batch_filling", rule)]["path_n_max"] == 1e300
    assert any(p.name == "limit_path.png" for p in zq["plots"])
    assert any("c1: d = ceil(1 / ((1 - lam) * log(k)))" in line and "limit: **vanishing**, carried by the heavy-traffic form" in line
               for line in zq["verdict_lines"])
