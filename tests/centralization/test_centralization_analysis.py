"""analysis/centralization.py on synthetic frames, the sweep files, and a tiny real run."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis import ANALYSES
from analysis.fmt import n_value
from analysis.models.centralization import LAM_TABLE, P_TABLE, analyze_centralization, distance_table, istar_table, point_table, slope_table
from pipeline.plan import make_plan
from pipeline.run import run_sweep, to_plain
from sim.centralization.meanfield import fixed_point, invariant_mean_queue, predicted_slope, top_level
from tests.helpers import compose

NS = [100, 316, 1000, 3162, 10000, 31623, 100000]
K = 64


def _row(engine, n, lam, p, rep, tail, v1, v1_se=None):
    return {"sweep": "syn", "run_id": "r", "task_id": f"{engine}-{n}-{lam}-{p}-{rep}", "point_id": 0,
            "replication": rep, "engine": engine, "policy": "central", "seed": rep,
            "n_servers": n, "lam": lam, "d": 2, "p": p, "events": 10**6,
            "mean_response": v1 / lam, "mean_response_se": v1_se, "mean_wait": v1 / lam,
            "mean_wait_se": v1_se, "prob_wait": float(tail[0]), "prob_wait_se": v1_se,
            "mean_queue": v1, "mean_queue_se": v1_se, "tail": [float(x) for x in tail],
            "sim_time": 1e6, "warmup_time": 0.0, "ci_method": "syn", "wall_time": 0.1,
            "status": "ok", "error": None}


def _frame(rng, lam=0.9, ps=(0.0, 0.05), ns=NS, reps=4, noise=3e-4, gap_c=0.3, gap_b=-0.7,
           lams=None, slope_bias=0.0):
    """Synthetic sweep: replication tails = invariant + gap_c N**gap_b at the level above i*
    (p > 0) + Normal(0, noise) on the informative levels; v_1 = sum of the tail, optionally
    tilted by slope_bias * log(1/(1-lam))."""
    rows = []
    for lam_ in (lams or [lam]):
        for p in ps:
            inv = fixed_point(lam_, p, K)
            i_star = top_level(lam_, p)
            for n in ns:
                rows.append(_row("meanfield", n, lam_, p, 0, inv, invariant_mean_queue(lam_, p)))
                for r in range(reps):
                    t = inv.copy()
                    if p > 0:
                        t[i_star] += gap_c * n ** gap_b  # overflow level i* + 1
                        live = np.arange(K) <= i_star
                    else:
                        live = inv > 1e-6
                    t[live] += rng.normal(0, noise, live.sum())
                    v1 = float(t.sum()) + slope_bias * math.log(1 / (1 - lam_)) + rng.normal(0, noise)
                    rows.append(_row("occupancy", n, lam_, p, r, t, v1))
    nullable = {c: pl.Float64 for c in ("mean_response_se", "mean_wait_se", "prob_wait_se",
                                        "mean_queue_se")}
    return pl.DataFrame(rows, schema_overrides={"error": pl.String, **nullable})


def test_registered():
    assert ANALYSES["centralization"] is analyze_centralization


def test_istar_table():
    table = istar_table()
    assert [r[0] for r in table] == list(P_TABLE)
    j = LAM_TABLE.index(0.99)
    assert table[P_TABLE.index(0.05)][1 + j] == 39  # Figure 3.1
    assert all(table[i][1 + LAM_TABLE.index(0.5)] == 0 for i, p in enumerate(P_TABLE) if p >= 0.5)


def test_distance_fit_recovers_rate():
    rng = np.random.default_rng(1)
    # overflow gap 0.5 N^-0.7 (1.6e-4 at N = 10^5) against replication noise 1e-6
    df = _frame(rng, noise=1e-6, gap_c=0.5, gap_b=-0.7)
    rows, arms = distance_table(point_table(df))
    by_p = {a["p"]: a for a in arms}
    assert by_p[0.0]["sup_verdict"] == "no significant distance"
    a = by_p[0.05]
    # a trend over the fitted N, never a limit claim (issue 44): the range and "undecided beyond"
    assert a["sup_verdict"].startswith("falling like N^-0.") and " over N = " in a["sup_verdict"]
    assert a["sup_verdict"].endswith(f"undecided beyond N = {n_value(a['n_max'])}") and "converg" not in a["sup_verdict"]
    assert a["sup_slope_lo"] <= -0.7 <= a["sup_slope_hi"], a
    # the distance sits at the overflow level i* + 1 when it is significant
    sig = [r for r in rows if r["p"] == 0.05 and r["sup_significant"]]
    assert sig and all(r["sup_level"] == top_level(0.9, 0.05) + 1 for r in sig)


def test_slope_verdict_matches_fluid_and_flags_a_wrong_slope():
    rng = np.random.default_rng(2)
    lams = [0.9, 0.95, 0.98, 0.99, 0.995]
    good = slope_table(point_table(_frame(rng, ps=(0.05, 0.2), ns=[1000], lams=lams, noise=0.01)))
    assert len(good) == 2
    for s in good:
        assert s["verdict"].startswith("matches the fluid limit"), s
        assert "below the asymptotic slope" in s["verdict"]  # as the closed form at these loads
        assert s["b_fluid"] < s["b_pred"] == pytest.approx(predicted_slope(s["p"]))
    bad = slope_table(point_table(_frame(rng, ps=(0.05,), ns=[1000], lams=lams, noise=0.01,
                                         slope_bias=3.0)))
    assert bad[0]["verdict"].startswith("differs from the fluid limit")


def test_analysis_outputs(tmp_path):
    rng = np.random.default_rng(3)
    df = pl.concat([_frame(rng), _frame(rng, ps=(0.0, 0.05, 0.2), ns=[1000],
                                        lams=[0.9, 0.95, 0.99, 0.995])], how="vertical")
    df = pl.concat([df, df.head(1).with_columns(pl.lit("error").alias("status"),
                                                pl.lit("boom").alias("error"))])
    out = analyze_centralization(df.lazy(), ["n_servers", "lam", "d", "p"], tmp_path, "syn")
    assert out["report"].is_file()
    names = {p.name for p in out["plots"]}
    assert names == {"central_tails.png", "central_v1_vs_load.png", "central_distance_vs_N.png",
                     "central_istar_table.png"}
    assert all(p.stat().st_size > 10_000 for p in out["plots"])
    for key, value, step, arm in out["metrics"]:  # routed to the arm's child run in MLflow
        assert isinstance(key, str) and isinstance(value, float) and isinstance(step, int)
        assert math.isfinite(value)
        assert arm["policy"] == "central" and "engine" in arm and "p" in arm
        assert "lam" not in key and "_p0" not in key, key  # no arm values in the key
    text = out["report"].read_text()
    for part in ("(a) Figure 3.1", "(b) Figure 3.2", "(c) Table 3.1", "(d) Theorem 7", "i* = 39"):
        assert part in text


def test_analysis_of_an_empty_or_single_point_frame(tmp_path):
    rng = np.random.default_rng(4)
    df = _frame(rng, ps=(0.05,), ns=[1000], reps=1)
    out = analyze_centralization(df, ["n_servers", "lam", "d", "p"], tmp_path, "syn")
    assert any("no distance-vs-N" in n for n in out["notes"])
    out = analyze_centralization(df.head(0), ["n_servers", "lam", "d", "p"], tmp_path / "e", "syn")
    assert out["report"].is_file()


# ------------------------------------------------------------------------------------------
# the sweep files
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["centralization", "centralization_load"])
def test_sweeps_compose_and_validate(name):
    cfg = to_plain(compose([f"+sweep={name}", "output_dir=/nonexistent"]))
    plan = make_plan(cfg)
    assert cfg["extra_analyses"] == ["centralization"]
    assert {t["policy"] for t in plan.tasks} == {"central"}
    assert "meanfield" in {t["engine"] for t in plan.tasks}
    assert "occupancy" in {t["engine"] for t in plan.tasks}
    ns = {p.values["n_servers"] for p in plan.points}
    ps = {p.values["p"] for p in plan.points}
    assert {0.0, 0.05} <= ps
    if name == "centralization":
        assert min(ns) == 100 and max(ns) >= 100_000
    else:
        lams = {p.values["lam"] for p in plan.points}
        assert 0.99 in lams and len([x for x in lams if x >= 0.9]) >= 3
        assert cfg["run"]["max_level"] >= 40  # Figure 3.1 tail to i* + 1 = 40


def test_tiny_real_run(tmp_path):
    """The default sweep, shrunk (two N, one p, short runs), end to end without Ray or MLflow."""
    cfg = compose(["+sweep=centralization", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
                   "execution.backend=serial", "execution.progress=false", "replications=2",
                   "axes.n_servers=[200,2000]", "axes.p=[0.0,0.2]", "params.events=200000"])
    out = run_sweep(to_plain(cfg), quiet=True)
    assert out["errors"] == 0
    extra = out["analysis"]["extra"]["centralization"]
    assert extra["report"].is_file() and len(extra["plots"]) == 4
    assert {a["p"] for a in extra["distance_arms"]} == {0.0, 0.2}
