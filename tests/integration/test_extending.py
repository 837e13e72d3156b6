"""The door is open: a model package written outside the project at test time (the toy of
:func:`tests.helpers.toy_files`: Python engines, one policy, one parameter) runs through plan,
Ray (the loopback cluster, whose workers only see it because it is shipped), Parquet, analysis, MLflow and the archive. Its archive
reproduces without the package on the path only with ``--trust-archive-models`` (the archive's
copy is then imported and shipped to a local Ray cluster's workers); without the flag the
archive is data: refused while the package is not installed, and with it installed the
installed code runs, on the driver and the workers, never the archive's. Nothing outside the
temporary folder is edited (docs/extending.md)."""
from __future__ import annotations

import io
import tarfile
import textwrap

import polars as pl

from tests.helpers import assert_within_se, toy_files
from tests.integration.conftest import driver_env
from tests.integration.test_cluster import run_driver

TOY_SWEEP = '''
# @package _global_
name: toy
model: toy_mm1
models: [toy_mm1]
policies: [random]
engines: [agent]
replications: 2
axes:
  n_servers: [10, 100]
params:
  lam: 0.5
  mu: 2.0
  events: 20000
'''


def _write_toy(root):
    pkg, sweeps = root / "toy_mm1", root / "conf" / "sweep"
    pkg.mkdir(parents=True)
    sweeps.mkdir(parents=True)
    for name, text in toy_files("toy_mm1", policy="random").items():
        (pkg / name).write_text(textwrap.dedent(text).lstrip())
    (sweeps / "toy.yaml").write_text(textwrap.dedent(TOY_SWEEP).lstrip())
    return root


def test_toy_model_out_of_tree_through_cluster_mlflow_and_archive(cluster, tmp_path):
    ext = _write_toy(tmp_path / "ext")
    env = driver_env({"PYTHONPATH": str(ext)}, cluster=cluster)  # the driver's path only
    base = ["--config-dir", str(ext / "conf"), "+sweep=toy", "execution.progress=false"]

    # a policy two models declare on one engine is refused until the sweep names the model
    res = run_driver([*base, "model=null", "plan=true"], env, timeout=300)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert ("policy='random' on engine='agent' is declared by the models dispatch, toy_mm1: "
            "name one with model=") in res.stdout + res.stderr

    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    res = run_driver([*base, f"output_dir={out}", f"mlflow.tracking_uri=sqlite:///{db}",
                      f"execution.address={cluster.gcs_address}"], env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = pl.read_parquet(out / "results.parquet")
    assert frame.height == 4 and set(frame["model"]) == {"toy_mm1"} and set(frame["status"]) == {"ok"}
    assert frame["node"].n_unique() >= 1 and frame["d"].null_count() == 4  # d: not the toy's
    for r in frame.iter_rows(named=True):  # E[T] = 1 / (mu (1 - lam)) at every N
        assert_within_se(r["mean_response"], 1.0 / (r["mu"] * (1.0 - r["lam"])), r["mean_response_se"],
                         f"toy E[T] at N = {r['n_servers']}")
    summary = pl.read_parquet(out / "analysis" / "summary.parquet")
    assert sorted(summary["n_servers"].to_list()) == [10, 100] and set(summary["n_rep"]) == {2}
    assert (out / "analysis" / "mean_response_vs_n_servers_random.png").stat().st_size > 10_000
    with tarfile.open(out / "archive.tar.gz") as tar:
        names = tar.getnames()
    assert "run/models/toy_mm1/engine.py" in names and "run/models/toy_mm1/__init__.py" in names
    assert not any("__pycache__" in n for n in names)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("lbsweep")
    runs = client.search_runs([exp.experiment_id], "tags.sweep = 'toy'")
    children = [r for r in runs if r.data.params.get("policy") == "random"]
    assert children and all("mean_response" in r.data.metrics for r in children)

    # the package nowhere on the path: the archive is data, so it is refused in one line ...
    env = {k: v for k, v in driver_env().items() if k != "PYTHONPATH"}
    archive = str(out / "archive.tar.gz")
    res = run_driver(["--no-progress", archive, "--out", str(tmp_path / "re0")], env,
                     module="pipeline.reproduce", timeout=300)
    assert res.returncode == 2 and not res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "'toy_mm1' is not installed" in res.stderr, res.stderr
    # ... and reruns from its own copy (driver and the local cluster's workers) when trusted
    res = run_driver(["--no-progress", "--trust-archive-models", archive, "--out", str(tmp_path / "re")],
                     env, module="pipeline.reproduce")
    assert res.returncode == 0 and "REPRODUCED" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert "local Ray cluster" in res.stdout, res.stdout

    # installed, not trusted: the installed code runs everywhere, never the archive's copy
    marker = tmp_path / "archived_copy_ran.txt"
    altered = tmp_path / "altered.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(altered, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name == "run/models/toy_mm1/engine.py":
                data += f"\nopen({str(marker)!r}, 'a').write('ran')\n".encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    res = run_driver(["--no-progress", str(altered), "--out", str(tmp_path / "re2")],
                     driver_env({"PYTHONPATH": str(ext)}), module="pipeline.reproduce")
    assert res.returncode == 0 and "REPRODUCED" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert not marker.exists(), "the archive's copy of the model ran"


def test_two_class_transitions_example_converges_through_cluster_mlflow_and_archive(cluster, tmp_path):
    """Issue 38, item 5: docs/examples/pod2 (power-of-d on two classes of servers, declared only
    by its transitions) runs its shipped convergence sweep on the loopback Ray cluster, with
    MLflow, and the run's analysis finds the gap to the mean field vanishing at a rate whose
    interval holds 1/N (the refined expansion of the same declaration gives -0.87 / N); the
    archive reproduces bitwise."""
    import json

    from tests.helpers import REPO

    examples = REPO / "docs" / "examples"
    env = driver_env({"PYTHONPATH": str(examples)}, cluster=cluster)
    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    res = run_driver(["--config-dir", str(examples / "conf"), "+sweep=pod2_convergence",
                      "execution.progress=false", f"output_dir={out}",
                      f"mlflow.tracking_uri=sqlite:///{db}", f"execution.address={cluster.gcs_address}"],
                     env, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = pl.read_parquet(out / "results.parquet")
    assert frame.height == 35 and set(frame["status"]) == {"ok"}
    assert set(frame["engine"]) == {"population", "population_meanfield"}
    assert frame.filter(pl.col("engine") == "population")["drop_prob"].max() == 0.0
    fits = [f for f in json.loads((out / "analysis" / "fits.json").read_text())
            if f["engine"] == "population"]
    assert len(fits) == 1 and fits[0]["verdict"].startswith("falling"), fits
    assert fits[0]["n_significant"] >= 5 and fits[0]["slope_lo"] < -1.0 < fits[0]["slope_hi"], fits
    assert "falling (N^-" in res.stdout and "undecided beyond" in res.stdout
    assert (out / "analysis" / "gap_mean_response_vs_n_servers_pod2.png").stat().st_size > 10_000

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("lbsweep")
    runs = client.search_runs([exp.experiment_id], "tags.sweep = 'pod2_convergence'")
    sims = [r for r in runs if r.data.params.get("engine") == "population"]
    assert len(sims) == 1 and sims[0].data.tags["verdict"].startswith("falling"), \
        [r.data.tags for r in runs]
    assert len(sims[0].data.metrics) > 0 and "mean_response_gap" in sims[0].data.metrics

    # the archive carries the package; with it on the path the archive reproduces, every row bitwise
    with tarfile.open(out / "archive.tar.gz") as tar:
        assert "run/models/pod2/transitions.py" in tar.getnames()
    res = run_driver(["--no-progress", "--backend", "serial", str(out / "archive.tar.gz"),
                      "--out", str(tmp_path / "re")],
                     driver_env({"PYTHONPATH": str(examples)}), module="pipeline.reproduce", timeout=900)
    assert res.returncode == 0 and res.stdout.rstrip().endswith("REPRODUCED"), \
        res.stdout[-3000:] + res.stderr[-2000:]
    assert "35/35 bitwise identical" in res.stdout, res.stdout[-2000:]
