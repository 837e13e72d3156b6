"""MLflow as its users compare sweeps: two small sweeps that differ in lam, read back through
MLflow's client (search, metric histories by step = N, tags, parameters, the experiment kind).

The sweeps run serially (no Ray) with short runs; the module takes about 20 s, half of it
MLflow creating its SQLite store.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from pipeline.run import to_plain
from tests.helpers import REPO, compose, smoke_sweeps_in_one_store

LAMS = (0.8, 0.9)


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory):
    """The smoke sweep (agent, occupancy and mean field) at lam = 0.8 and 0.9, one store."""
    return smoke_sweeps_in_one_store(tmp_path_factory.mktemp("mlf"), LAMS,
                                     ["engines=[agent,occupancy,meanfield]"])


@pytest.fixture(scope="module")
def client(two_sweeps):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=two_sweeps[1])


def _children(client, parent_id, extra=""):
    exp = client.get_run(parent_id).info.experiment_id
    flt = f"tags.mlflow.parentRunId = '{parent_id}'" + (f" and {extra}" if extra else "")
    return client.search_runs([exp], filter_string=flt, max_results=1000)


def test_one_search_finds_both_sweeps_and_their_metrics_overlay(two_sweeps, client):
    outs, _ = two_sweeps
    exp = client.get_run(outs[0.8]["mlflow_run_id"]).info.experiment_id
    parents = {lam: outs[lam]["mlflow_run_id"] for lam in LAMS}
    found = client.search_runs([exp], filter_string="params.engine = 'agent' and params.d = '2'")
    by_parent = {r.data.tags["mlflow.parentRunId"]: r for r in found}
    assert set(by_parent) == set(parents.values())  # one arm of each sweep
    for lam, pid in parents.items():
        run = by_parent[pid]
        assert run.data.params["lam"] == str(lam)
        assert run.data.tags["sweep"] == "smoke"
        hist = client.get_metric_history(run.info.run_id, "mean_response")
        assert sorted(m.step for m in hist) == [20, 200]  # overlay by step = N, same key
    only = client.search_runs([exp], filter_string="params.lam = '0.9'")
    assert only and {r.data.tags["mlflow.parentRunId"] for r in only} == {parents[0.9]}


def test_children_one_per_arm_policy_engine(two_sweeps, client):
    outs, _ = two_sweeps
    out = outs[0.8]
    kids = _children(client, out["mlflow_run_id"])
    keys = sorted((r.data.params["engine"], r.data.params["d"]) for r in kids)
    assert keys == sorted((e, d) for e in ("agent", "meanfield", "occupancy") for d in ("1", "2"))
    for r in kids:
        assert "n_servers" not in r.data.params  # N is the step, not part of the arm
        assert r.data.params["policy"] == "pod"
        assert r.data.tags["run_id"] == out["run_id"]
        if r.data.params["engine"] == "meanfield":
            assert "events" not in r.data.params  # the mean field does not use the run length
        else:
            assert r.data.params["events"] == "20000"
        # two engines never share a key: each engine's values are in its own run, one per step
        for key in ("mean_response", "mean_response_lo", "mean_response_hi"):
            hist = client.get_metric_history(r.info.run_id, key)
            assert sorted(m.step for m in hist) == [20, 200], (r.data.params, key)
    agent = [r for r in kids if r.data.params["engine"] == "agent"]
    assert all("mean_response_gap" in r.data.metrics and "mean_response_mf" in r.data.metrics for r in agent)
    fits = {(f["engine"], str(f["d"])): f for f in out["analysis"]["fits"]}
    for r in kids:
        f = fits.get((r.data.params["engine"], r.data.params["d"]))
        if f is not None:
            assert r.data.tags["verdict"] == f["verdict"]
            assert r.data.tags["verdict_quantity"] == "gap of mean_response to the mean field"


def test_parent_params_are_flat_and_only_what_applies(two_sweeps, client):
    outs, _ = two_sweeps
    parent = client.get_run(outs[0.9]["mlflow_run_id"])
    p = parent.data.params
    assert parent.info.status == "FINISHED"
    assert p["sweep"] == "smoke" and p["engines"] == "agent,occupancy,meanfield" and p["policies"] == "pod"
    assert p["axis.n_servers"] == "[20, 200]" and p["axis.d"] == "[1, 2]"
    assert p["param.lam"] == "0.9" and p["param.events"] == "20000"
    # the defaults an axis overrides (conf/config.yaml: n_servers 1000, d 2) are not shown
    assert "param.n_servers" not in p and "param.d" not in p
    assert "axes" not in p and "params" not in p  # no JSON blobs
    assert p["overrides"] == " ".join(outs[0.9]["overrides"])
    assert p["run.n_batches"] == "20"


def test_parent_tags_users_rely_on(two_sweeps, client):
    outs, _ = two_sweeps
    out = outs[0.8]
    tags = client.get_run(out["mlflow_run_id"]).data.tags
    assert tags["mlflow.user"] and tags["mlflow.user"] != "unknown"
    assert tags["sweep"] == "smoke" and tags["run_id"] == out["run_id"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    if head.returncode == 0:
        assert tags["mlflow.source.git.commit"] == head.stdout.strip()
    first = out["analysis"]["report"].read_text().strip().splitlines()[0]
    assert first in tags["mlflow.note.content"]
    assert tags["overrides"] == " ".join(out["overrides"])
    assert tags["command"].startswith("python -m pipeline +sweep=smoke")
    arts = {a.path for a in client.list_artifacts(out["mlflow_run_id"])}
    assert {"results.parquet", "config.yaml", "archive.tar.gz", "analysis", "overrides.txt"} <= arts
    # the children carry the user and the commit too (the compare view shows them)
    kid = _children(client, out["mlflow_run_id"])[0]
    assert kid.data.tags["mlflow.user"] == tags["mlflow.user"]
    assert kid.data.tags.get("mlflow.source.git.commit") == tags.get("mlflow.source.git.commit")


def test_progress_metrics_logged_as_tasks_finish(two_sweeps, client):
    outs, _ = two_sweeps
    out = outs[0.8]
    n = len(out["plan"].tasks)
    done = client.get_metric_history(out["mlflow_run_id"], "tasks_done")
    assert sorted(m.step for m in done) == list(range(1, n + 1))
    assert [m.value for m in sorted(done, key=lambda m: m.step)] == list(range(1, n + 1))
    agent = client.get_metric_history(out["mlflow_run_id"], "task/agent/mean_response")
    assert len(agent) == sum(t["engine"] == "agent" for t in out["plan"].tasks)


def test_experiment_opens_as_model_training(two_sweeps, client):
    outs, _ = two_sweeps
    exp = client.get_experiment(client.get_run(outs[0.8]["mlflow_run_id"]).info.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_log_task_is_batched(two_sweeps, tmp_path, monkeypatch):
    """Thousands of finished tasks cost a few calls to the store, not one each (the sweeps'
    store is reused: creating a SQLite store costs MLflow about 10 s)."""
    from pipeline import tracking

    tr = tracking.SweepTracker(two_sweeps[1], "batching", tmp_path)
    tr.start("b", {"sweep": "b"}, {"sweep": "b"})
    calls = []
    real = tr.client.log_batch
    monkeypatch.setattr(tr.client, "log_batch", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    monkeypatch.setattr(tracking, "FLUSH_SECONDS", 3600.0)
    for i in range(2000):
        tr.log_task({"status": "error" if i % 100 == 0 else "ok", "engine": "agent", "mean_response": 1.0 + i})
    tr.end()
    assert len(calls) <= 8, len(calls)  # 2000 rows x 3 metrics, <= 900 items a call, plus the end
    hist = tr.client.get_metric_history(tr.parent_id, "tasks_done")
    assert len(hist) == 2000
    assert tr.client.get_run(tr.parent_id).data.metrics["tasks_failed"] == 20


def test_resumed_run_continues_progress_steps(two_sweeps, tmp_path):
    from pipeline.tracking import SweepTracker

    tr = SweepTracker(two_sweeps[1], "resume", tmp_path)
    pid = tr.start("r", {"sweep": "r"}, {"sweep": "r"})
    for _ in range(3):
        tr.log_task({"status": "ok", "engine": "agent", "mean_response": 1.0})
    tr.end("KILLED")
    again = SweepTracker(two_sweeps[1], "resume", tmp_path)
    assert again.reopen(pid)
    again.log_task({"status": "error", "engine": "agent"})
    again.end()
    hist = again.client.get_metric_history(pid, "tasks_done")
    assert sorted(m.step for m in hist) == [1, 2, 3, 4]
    assert again.client.get_run(pid).data.metrics["tasks_failed"] == 1
    assert again.client.get_run(pid).data.tags["mlflow.user"] == again.common_tags["mlflow.user"]


@pytest.mark.parametrize("sweep", ["sub_halfin_whitt_gap", "sub_halfin_whitt"])
def test_extra_analysis_metrics_land_on_their_own_child_runs(sweep, tmp_path):
    """Every per-arm metric of the zero-queueing analysis (the simulated ratio per N, the limit's
    along the path, slopes, levels) matches exactly one child run of its own engine, built from
    the sweep's real plan; rows are made up (no simulation), one per task."""
    import numpy as np
    import polars as pl

    from analysis.models.zero_queueing import analyze_zero_queueing
    from pipeline.mlflow_log import _matches, build_children
    from pipeline.plan import make_plan

    plan = make_plan(to_plain(compose([f"+sweep={sweep}", f"output_dir={tmp_path}"])))
    rng = np.random.default_rng(0)
    rows = []
    for t in plan.tasks:
        meta = t["_meta"]
        ratio = 0.1 + 0.01 * rng.normal() if t["engine"] not in ("meanfield", "heavy_traffic") else 0.1
        rows.append({**{p: meta["params"].get(p) for p in plan.param_columns},
                     "policy": t["policy"], "engine": t["engine"], "status": "ok",
                     "replication": meta["replication"], "task_id": meta["task_id"],
                     "queueing_ratio": ratio, "queueing_ratio_se": 0.01, "mean_response": 5.0 * (1 + ratio),
                     "mean_response_se": 0.05, "drop_prob": 0.0, "tail": [t.get("lam", 0.99), 0.1]})
    params = [p for p in plan.param_columns if p not in ("events",)]
    out = analyze_zero_queueing(pl.DataFrame(rows, infer_schema_length=None), params, tmp_path / "zq", sweep)
    children = build_children(plan, {"params": None}, pl.DataFrame(), {})
    assert out["metrics"]
    for name, _, step, route in out["metrics"]:
        hits = [c["name"] for c in children if _matches(c, route)]
        assert len(hits) == 1 and route["engine"] in hits[0], (name, step, route, hits)


# ---- MLflow's start-up in a thread while Ray starts (pipeline.tracking.StoreStart)

def _schema(db) -> dict:
    """What makes a SQLite store MLflow's: its tables and indexes, its schema version, and the
    experiments (their times aside). A statement's lines are compared as a set: MLflow's own
    migrations (Alembic's batch mode on SQLite) write a table's constraints in an order that
    changes from one process to the next."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        master = [(kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                  for kind, name, table, sql in
                  con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")]
        return {"master": master,
                "version": con.execute("SELECT version_num FROM alembic_version").fetchall(),
                "experiments": con.execute("SELECT experiment_id, name, artifact_location, lifecycle_stage "
                                           "FROM experiments ORDER BY experiment_id").fetchall()}
    finally:
        con.close()


def test_a_store_started_in_a_thread_is_the_store_mlflow_makes_and_lands_only_when_installed(tmp_path):
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import StoreStart, SweepTracker

    own = tmp_path / "own" / "mlflow.db"
    own.parent.mkdir()
    MlflowClient(tracking_uri=f"sqlite:///{own}").search_experiments()  # MLflow makes it itself
    db = tmp_path / "mlflow.db"
    started = StoreStart(f"sqlite:///{db}", tmp_path)
    started._thread.join()
    assert started.error is None and started.built is not None
    assert not db.exists() and list(tmp_path.iterdir()) == [own.parent]  # nothing where the run writes
    built_in = Path(started._tmp)
    tracker = SweepTracker(f"sqlite:///{db}", "thread", tmp_path, started=started)
    assert db.is_file() and not built_in.exists()
    assert not list(tmp_path.glob(".mlflow.db.*"))
    assert _schema(db) == {**_schema(own), "experiments": _schema(own)["experiments"] + [
        (int(tracker.experiment_id), "thread", (tmp_path / "mlartifacts").resolve().as_uri(), "active")]}
    tracker.start("t", {"a": 1}, {"b": "2"})
    tracker.end()


def test_a_discarded_store_start_leaves_nothing(tmp_path):
    from pipeline.tracking import StoreStart

    started = StoreStart(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    started.discard()  # while the thread builds (its import alone takes seconds)
    started._thread.join()
    assert list(tmp_path.iterdir()) == []
    assert started._tmp is None or not Path(started._tmp).exists()


def test_a_store_made_meanwhile_is_used_not_replaced(two_sweeps, tmp_path):
    import shutil

    from pipeline.tracking import StoreStart, SweepTracker

    db = tmp_path / "mlflow.db"
    started = StoreStart(f"sqlite:///{db}", tmp_path)
    started._thread.join()
    shutil.copyfile(two_sweeps[1][len("sqlite:///"):], db)  # another sweep made the store meanwhile
    inode = db.stat().st_ino
    tracker = SweepTracker(f"sqlite:///{db}", "lbsweep", tmp_path, started=started)
    assert db.stat().st_ino == inode and not list(tmp_path.glob(".mlflow.db.*"))
    assert len(tracker.client.search_runs([tracker.experiment_id])) > 0  # the sweeps' runs are there


def test_when_ray_fails_to_start_the_store_started_meanwhile_leaves_nothing(tmp_path, monkeypatch):
    import pipeline.run
    import pipeline.tracking
    from pipeline.run import run_sweep

    made = []

    class Recorded(pipeline.tracking.StoreStart):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    def no_ray(*a, **k):
        time.sleep(0.5)
        raise RuntimeError("Ray did not start")

    monkeypatch.setattr(pipeline.tracking, "StoreStart", Recorded)
    monkeypatch.setattr(pipeline.run, "connect", no_ray)
    cfg = to_plain(compose(["+sweep=smoke", f"output_dir={tmp_path / 'out'}", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                            "execution.progress=false"]))
    with pytest.raises(RuntimeError, match="Ray did not start"):
        run_sweep(cfg, quiet=True)
    assert len(made) == 1
    made[0]._thread.join()
    assert list(tmp_path.iterdir()) == []
    assert made[0]._tmp is None or not Path(made[0]._tmp).exists()


def test_child_runs_send_their_metrics_in_batches_within_mlflows_limits(two_sweeps, tmp_path, monkeypatch):
    """A child run of 2500 points x 3 metrics costs ceil(7500 / 1000) metric calls, each within
    MLflow's limits, and no call per value; its history keeps every point."""
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH

    from pipeline import tracking

    assert (tracking.BATCH_METRICS, tracking.BATCH_PARAMS_TAGS) == (MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH)
    tr = tracking.SweepTracker(two_sweeps[1], "child_batches", tmp_path)
    tr.start("p", {"sweep": "p"}, {"sweep": "p"})
    sizes = []
    real = tr.client.log_batch
    monkeypatch.setattr(tr.client, "log_batch", lambda run_id, metrics=(), params=(), tags=(), **k: (
        sizes.append((len(metrics), len(params), len(tags))), real(run_id, metrics=metrics, params=params, tags=tags, **k))[1])
    monkeypatch.setattr(tr.client, "log_metric", lambda *a, **k: pytest.fail("a metric logged alone"))
    metrics = [(key, float(n), n) for n in range(20, 2520) for key in ("mean_response", "mean_wait", "prob_wait")]
    params = {f"p{i}": i for i in range(150)}
    (cid,) = tr.log_children([{"name": "arm", "params": params, "tags": {"arm": "x"}, "metrics": metrics}])
    metric_calls = [m for m, _, _ in sizes if m]
    assert metric_calls == [1000] * 7 + [500]
    assert all(m <= 1000 and p <= 100 and t <= 100 for m, p, t in sizes)
    assert sum(p for _, p, _ in sizes) == 150
    assert len(tr.client.get_metric_history(cid, "mean_wait")) == 2500
