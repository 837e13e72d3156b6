"""A sweep with a non-exponential service law end to end: the smoke grid on the general-size
engine with hyperexponential sizes (SCV 4), through Ray, Parquet, MLflow and the archive, then
reproduced bitwise. The law and its parameter are columns of the rows, parameters of the MLflow
runs and keys of the archived config (docs/service.md, "Declared")."""
from __future__ import annotations

import io
import tarfile

import polars as pl
import pytest
import yaml

from pipeline.reproduce import reproduce
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose

LAW = ["+params.service=hyperexponential", "+params.service_scv=4"]


@pytest.fixture(scope="module")
def service_run(tmp_path_factory, ray_cluster):
    tmp = tmp_path_factory.mktemp("service")
    cfg = compose(["+sweep=smoke", "engines=[general]", *LAW, "params.events=20000",
                   f"output_dir={tmp / 'out'}", f"mlflow.tracking_uri=sqlite:///{tmp / 'mlflow.db'}",
                   "execution.progress=false"])
    return run_sweep(to_plain(cfg), quiet=True), tmp


def test_the_law_is_a_column_of_every_row(service_run):
    out, _ = service_run
    frame = out["frame"]
    assert frame.height == 8 and (frame["status"] == "ok").all()
    assert set(frame["engine"]) == {"general"}
    assert frame["service"].to_list() == ["hyperexponential"] * 8
    assert frame["service_scv"].to_list() == [4.0] * 8
    assert frame.schema["service"] == pl.String and frame.schema["service_scv"] == pl.Float64
    # single-task jobs: the ratio is E[T] - 1 (one size of mean 1 is the inherent delay)
    assert (frame["queueing_ratio"] - (frame["mean_response"] - 1.0)).abs().max() < 1e-12


def test_the_law_is_an_mlflow_parameter(service_run):
    from mlflow.tracking import MlflowClient

    out, tmp = service_run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    parent = client.get_run(out["mlflow_run_id"])
    assert parent.data.params["param.service"] == "hyperexponential"
    assert parent.data.params["param.service_scv"] == "4"
    kids = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{out['mlflow_run_id']}'")
    assert kids and all(r.data.params["service"] == "hyperexponential" and r.data.params["service_scv"] == "4.0"
                        for r in kids)


def test_the_archive_holds_the_law_and_reproduces_bitwise(service_run, tmp_path):
    out, _ = service_run
    with tarfile.open(out["archive"]) as tar:
        config = yaml.safe_load(tar.extractfile("run/config.yaml").read())
        frames = [pl.read_parquet(io.BytesIO(tar.extractfile(n).read())) for n in tar.getnames()
                  if n.startswith("run/results/") and n.endswith(".parquet")]
    assert config["params"]["service"] == "hyperexponential" and config["params"]["service_scv"] == 4
    assert set(pl.concat(frames)["service"]) == {"hyperexponential"}
    rep = reproduce(out["archive"], tmp_path / "again", progress=False)
    assert rep["seeds_match"] and rep["bitwise"] == rep["rows"] == 8 and rep["ok"]


def test_service_limits_meets_each_law_with_its_limit():
    """The shipped sweep service_limits plans, for every law and N, the general engine's
    simulations beside one meanfield task of the same law (the cavity queue for pod, the LL(d)
    fixed point for ll), whose row carries the law so that the analysis pairs them."""
    from pipeline.plan import make_plan

    plan = make_plan(to_plain(compose(["+sweep=service_limits", "output_dir=/nonexistent"])))
    limits = [t for t in plan.tasks if t["engine"] == "meanfield"]
    sims = [t for t in plan.tasks if t["engine"] == "general"]
    assert len(limits) == 2 * 5 * 3 and len(sims) == 4 * len(limits)
    keys = ("policy", "n_servers", "service", "service_scv", "service_phases", "service_alpha",
            "service_upper", "d", "lam")
    limit_points = {tuple(t.get(k) for k in keys) for t in limits}
    assert {tuple(t.get(k) for k in keys) for t in sims} == limit_points
    assert {t["service"] for t in limits} == {"exponential", "deterministic", "erlang",
                                              "hyperexponential", "bounded_pareto"}
    for t in limits:  # the row's parameters: the law's columns as the simulations' rows have them
        meta = t["_meta"]["params"]
        assert meta["service"] == t["service"] and meta.get("time") is None


def test_a_limit_that_does_not_model_the_law_is_refused_before_compute():
    """batch_filling's mean field has exponential sizes: beside a simulation under another law
    it would be compared as its limit, so the plan refuses it, naming the law and the engine."""
    from pipeline.config import ConfigError
    from pipeline.plan import make_plan

    cfg = to_plain(compose(["+sweep=service_limits", "output_dir=/nonexistent",
                            "policies=[batch_filling]", "+params.k=2"]))
    with pytest.raises(ConfigError, match="service=deterministic is simulated but engine=meanfield"):
        make_plan(cfg)
