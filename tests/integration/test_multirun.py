"""``python -m pipeline -m``: several sweeps planned first, run under one Ray start and nested
under one MLflow parent run; the exit code is the worst job's."""
from __future__ import annotations

import subprocess
import sys

import polars as pl
from mlflow.tracking import MlflowClient

from pipeline.multirun import MULTIRUN_TAG, job_overrides
from tests.integration.conftest import driver_env


def _multirun(tmp_path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m pipeline -m ARGS`` in ``tmp_path`` (its outputs/ is the multirun's)."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", *args,
         f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "execution.progress=false"],
        cwd=tmp_path, env=driver_env(), capture_output=True, text=True, timeout=timeout)


def test_job_overrides_are_hydras_combinations():
    jobs = job_overrides(["-m", "+sweep=smoke", "params.lam=0.5,0.9", "name=a,b"])
    assert jobs == [["+sweep=smoke", "params.lam=0.5", "name=a"], ["+sweep=smoke", "params.lam=0.5", "name=b"],
                    ["+sweep=smoke", "params.lam=0.9", "name=a"], ["+sweep=smoke", "params.lam=0.9", "name=b"]]


def test_two_sweeps_share_one_ray_start_and_one_mlflow_parent(tmp_path):
    proc = _multirun(tmp_path, "+sweep=smoke", "params.lam=0.5,0.7", "replications=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the pipeline's multirun folder, a folder per sweep in it, and Hydra's logs moved there
    (mr,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert sorted(f.name for f in (tmp_path / "outputs").iterdir()) == [".log", "multirun"]
    assert not any((tmp_path / "outputs" / ".log").iterdir())
    folders = sorted(mr.iterdir())
    assert [f.name for f in folders if f.is_dir()] == ["0-smoke", "1-smoke"]
    assert (mr / "multirun.yaml").is_file()
    for f in folders[:2]:
        assert "sweep 'smoke'" in (f / "__main__.log").read_text()
    frames = [pl.read_parquet(f / "results.parquet") for f in folders if f.is_dir()]
    assert sorted(frames[0]["lam"].unique().to_list() + frames[1]["lam"].unique().to_list()) == [0.5, 0.7]
    # one local Ray cluster for both: the simulations ran on the same Ray node
    nodes = {n for f in frames for n in f.filter(pl.col("engine") == "agent")["node"].to_list()}
    assert len(nodes) == 1 and "serial" not in nodes
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("lbsweep")
    runs = client.search_runs([exp.experiment_id])
    top = [r for r in runs if MULTIRUN_TAG in r.data.tags]
    assert len(top) == 1 and top[0].info.status == "FINISHED"
    assert top[0].data.tags[MULTIRUN_TAG] == str(mr.resolve())
    sweeps = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == top[0].info.run_id]
    assert len(sweeps) == 2 and all(r.info.status == "FINISHED" for r in sweeps)
    assert sorted(r.data.params["param.lam"] for r in sweeps) == ["0.5", "0.7"]
    # each sweep keeps its own children (one per arm, policy and engine)
    for s in sweeps:
        assert client.search_runs([exp.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{s.info.run_id}'")


def test_a_bad_later_job_is_refused_before_the_first_starts(tmp_path):
    proc = _multirun(tmp_path, "+sweep=smoke", "params.lam=0.5,1.5", timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "multirun job 1" in lines[0] and "lam=1.5" in lines[0], proc.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()
