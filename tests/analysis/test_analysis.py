"""analysis/: intervals, comparison, fits and verdicts on synthetic frames (no simulation)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import polars as pl
import pytest
from scipy import stats

from analysis import analyze, arm_columns, compare_to_meanfield, count_tasks, fit_gap_rate, wls_loglog
from analysis.aggregate import METHOD_BATCH, METHOD_EXACT, METHOD_T, aggregate

PARAMS = ["n_servers", "lam", "d"]
NS = [10, 31, 100, 316, 1000, 3162, 10000, 31623, 100000]
MF_VALUE = 2.0
TAIL_MF = [0.9, 0.73, 0.48, 0.2, 0.04, 1e-3, 1e-6, 0.0]


def _row(engine, policy, n, lam, d, rep, value, se, status="ok", **extra):
    """One result row with the columns of docs/results-schema.md (values made up)."""
    return {
        "sweep": "synthetic", "run_id": "run0", "task_id": f"p{n}-{engine}-r{rep}",
        "point_id": 0, "replication": rep, "engine": engine, "policy": policy,
        "seed": 0 if engine == "meanfield" else 1000 + rep,
        "n_servers": n, "lam": lam, "d": d, "events": 10**6,
        "mean_response": value, "mean_response_se": se,
        "mean_wait": value - 1.0, "mean_wait_se": se,
        "prob_wait": 0.81, "prob_wait_se": se,
        "mean_queue": lam * value, "mean_queue_se": se,
        "tail": TAIL_MF if engine == "meanfield" else [min(1.0, t + 1e-3) for t in TAIL_MF],
        "messages_per_job": float(d or 0), "n_jobs": 0 if engine == "meanfield" else 10**5,
        "events_run": 0 if engine == "meanfield" else 10**6, "sim_time": 1e4, "warmup_time": 0.0,
        "ci_method": "closed form" if engine == "meanfield" else "batch means",
        "wall_time": 0.01, "status": status, "error": None if status == "ok" else "boom",
        **extra,
    }


def _sweep(rng, gap_fn, sd, reps=4, ns=NS, policy="pod", lam=0.9, d=2, mf=True, **extra):
    """Replications with estimate = MF_VALUE + gap_fn(N) + Normal(0, sd), plus mean-field rows."""
    rows = []
    for n in ns:
        if mf:
            rows.append(_row("meanfield", policy, n, lam, d, 0, MF_VALUE, None, **extra))
        for r in range(reps):
            v = MF_VALUE + gap_fn(n) + rng.normal(0.0, sd)
            rows.append(_row("agent", policy, n, lam, d, r, v, sd, **extra))
    return rows


def _frame(rows):
    return pl.DataFrame(rows, infer_schema_length=None)


# --- aggregation -----------------------------------------------------------------------------


def test_aggregate_one_obm_run_uses_its_t_quantile():
    # one run whose SE is overlapping batch means (se_method obm): t with OBM_DOF, not z
    from sim.core.output import OBM_DOF

    obm = "overlapping batch means, batch 90 of 900 windows after cut of the first 0.1, t with 13.5 dof"
    rows = [_row("agent", "pod", 10, 0.9, 2, 0, 2.0, 0.05, ci_method=obm),
            _row("agent", "pod", 20, 0.9, 2, 0, 2.1, 0.05)]
    agg = aggregate(_frame(rows), PARAMS)
    one = agg.filter(pl.col("n_servers") == 10).row(0, named=True)
    old = agg.filter(pl.col("n_servers") == 20).row(0, named=True)
    assert one["n_rep"] == 1 and one["ci_method"] == METHOD_BATCH
    assert math.isclose(one["mean_response_hw"], stats.t.ppf(0.975, OBM_DOF) * 0.05)
    assert math.isclose(old["mean_response_hw"], stats.norm.ppf(0.975) * 0.05)


def test_aggregate_intervals_by_method():
    rows = [_row("agent", "pod", 10, 0.9, 2, r, v, 0.1) for r, v in enumerate([2.0, 2.3, 2.6])]
    rows.append(_row("agent", "pod", 10, 0.9, 2, 3, 99.0, 0.1, status="error"))
    rows.append(_row("agent", "pod", 20, 0.9, 2, 0, 2.1, 0.05))  # one replication: batch means
    rows.append(_row("meanfield", "pod", 10, 0.9, 2, 0, 2.0, None))
    agg = aggregate(_frame(rows), PARAMS)
    assert agg.height == 3
    t3 = agg.filter((pl.col("engine") == "agent") & (pl.col("n_servers") == 10)).row(0, named=True)
    assert (t3["n_tasks"], t3["n_error"], t3["n_rep"], t3["ci_method"]) == (4, 1, 3, METHOD_T)
    se = np.std([2.0, 2.3, 2.6], ddof=1) / math.sqrt(3)
    assert math.isclose(t3["mean_response"], 2.3)
    assert math.isclose(t3["mean_response_se"], se)
    assert math.isclose(t3["mean_response_hw"], stats.t.ppf(0.975, 2) * se)
    assert math.isclose(t3["mean_response_hi"] - t3["mean_response_lo"], 2 * t3["mean_response_hw"])
    bm = agg.filter(pl.col("n_servers") == 20).row(0, named=True)
    assert bm["ci_method"] == METHOD_BATCH and bm["n_rep"] == 1
    assert math.isclose(bm["mean_response_hw"], stats.norm.ppf(0.975) * 0.05)
    ex = agg.filter(pl.col("engine") == "meanfield").row(0, named=True)
    assert ex["ci_method"] == METHOD_EXACT
    assert ex["mean_response_hw"] == 0.0 and ex["mean_response_lo"] == ex["mean_response_hi"] == 2.0
    # the tail is averaged level by level over the ok replications
    assert len(t3["tail"]) == len(TAIL_MF) and math.isclose(t3["tail"][0], 0.901)


def test_t_interval_coverage():
    """Over 2000 synthetic points the nominal 95% intervals cover the truth about 95% of the time."""
    rng = np.random.default_rng(20240601)
    truth, sd, n_points = 3.0, 0.5, 2000
    rows = []
    for g in range(n_points):
        for r, v in enumerate(rng.normal(truth, sd, size=4)):  # R = 4: t interval
            rows.append({"policy": "pod", "engine": "agent", "n_servers": g, "replication": r,
                         "mean_response": v, "mean_response_se": sd, "status": "ok"})
        # R = 1 with a known standard error: batch-means (normal) interval
        rows.append({"policy": "jsq", "engine": "agent", "n_servers": g, "replication": 0,
                     "mean_response": rng.normal(truth, sd), "mean_response_se": sd, "status": "ok"})
    agg = aggregate(pl.DataFrame(rows), ["n_servers"])
    tol = 4 * math.sqrt(0.95 * 0.05 / n_points)  # 4 binomial standard deviations
    for policy, method in (("pod", METHOD_T), ("jsq", METHOD_BATCH)):
        a = agg.filter(pl.col("policy") == policy)
        assert set(a["ci_method"].to_list()) == {method}
        cover = ((a["mean_response_lo"] <= truth) & (truth <= a["mean_response_hi"])).mean()
        assert abs(cover - 0.95) < tol, (policy, cover)


def test_params_are_checked():
    df = _frame(_sweep(np.random.default_rng(0), lambda n: 0.0, 0.01, ns=[10]))
    with pytest.raises(ValueError, match="not columns"):
        aggregate(df, ["n_servers", "beta"])
    with pytest.raises(ValueError, match="not point parameters"):
        aggregate(df, ["n_servers", "seed"])
    with pytest.raises(ValueError, match="x="):
        compare_to_meanfield(aggregate(df, ["lam"]), ["lam"], x="n_servers")


# --- comparison ------------------------------------------------------------------------------


def test_compare_ignores_meanfield_n_servers():
    rng = np.random.default_rng(1)
    rows = _sweep(rng, lambda n: 1.0 / n, 0.01, ns=[10, 100, 1000], mf=False)
    rows.append(_row("meanfield", "pod", 7, 0.9, 2, 0, MF_VALUE, None))  # its own N is irrelevant
    rows += _sweep(rng, lambda n: 0.0, 0.01, ns=[10, 100], policy="random", d=None, mf=False)
    rows.append(_row("meanfield", "random", 10, 0.9, None, 0, 10.0, None))  # null d joins null d
    cmp = compare_to_meanfield(aggregate(_frame(rows), PARAMS), PARAMS)
    assert cmp.height == 5 and set(cmp["engine"].to_list()) == {"agent"}
    pod = cmp.filter(pl.col("policy") == "pod")
    np.testing.assert_allclose(pod["mean_response_mf"].to_numpy(), MF_VALUE)
    np.testing.assert_allclose(pod["mean_response_gap"], pod["mean_response"] - MF_VALUE)
    np.testing.assert_allclose(pod["mean_response_gap_hw"], pod["mean_response_hw"])
    np.testing.assert_allclose(pod["mean_response_gap_hi"] - pod["mean_response_gap_lo"],
                               2 * pod["mean_response_hw"])
    np.testing.assert_allclose(pod["mean_response_rel_gap"], pod["mean_response_gap"] / MF_VALUE)
    rnd = cmp.filter(pl.col("policy") == "random")
    np.testing.assert_allclose(rnd["mean_response_mf"].to_numpy(), 10.0)
    assert rnd["tail_mf"].to_list()[0] == TAIL_MF


# --- fits and verdicts -----------------------------------------------------------------------


def _fits(rows, params=PARAMS):
    agg = aggregate(_frame(rows), params)
    return fit_gap_rate(compare_to_meanfield(agg, params), params)


def test_wls_recovers_exact_power_law():
    n = np.array([10.0, 100.0, 1000.0, 1e4])
    fit = wls_loglog(n, 5.0 / n, 0.01 * 5.0 / n)
    assert math.isclose(fit["slope"], -1.0, abs_tol=1e-12)
    assert math.isclose(fit["intercept"], math.log(5.0), abs_tol=1e-10)


def test_fit_recovers_rate_one_over_n():
    """gap = 5/N + noise of known SE, 4 replications: the slope CI covers -1 and it converges."""
    rng = np.random.default_rng(7)
    rows = []
    for arm in range(40):  # 40 independent sweeps in one frame, told apart by a parameter
        rows += _sweep(rng, lambda n: 5.0 / n, 0.002, arm_id=arm)
    fits = _fits(rows, PARAMS + ["arm_id"])
    assert fits.height == 40
    assert fits["n_significant"].min() >= 3
    converges = fits["verdict"].str.starts_with("falling")
    covers = (fits["slope_lo"] <= -1.0) & (fits["slope_hi"] >= -1.0)
    # nominal 95% of 40 arms is 38; 32 or fewer has probability 1e-3 (binomial)
    assert converges.sum() >= 33, fits.filter(~converges).select("n_significant", "slope", "note")
    assert covers.sum() >= 33
    one = fits.row(0, named=True)
    assert one["fit_method"].startswith("WLS") and one["sign"] == "+"
    # a trend over the fitted range, never a limit: the range and "undecided beyond" in the words
    assert re.fullmatch(r"falling \(N\^-\d\.\d\d over N = 10\^[\d.]+\.\.10\^[\d.]+; undecided beyond\)",
                        one["verdict"]), one["verdict"]
    assert "undecided" in one["note"] and "converges" not in one["verdict"]


def test_pure_noise_has_no_significant_gap():
    """True gap 0 (random routing): 'no significant gap' in about 95% of arms (Bonferroni)."""
    rng = np.random.default_rng(11)
    rows = []
    for arm in range(40):
        rows += _sweep(rng, lambda n: 0.0, 0.01, policy="random", d=1, arm_id=arm)
    fits = _fits(rows, PARAMS + ["arm_id"])
    no_gap = fits["verdict"] == "no significant gap"
    assert no_gap.sum() >= 33, fits["verdict"].value_counts()  # expect 38 of 40; <= 32: p ~ 1e-3
    assert fits.filter(no_gap)["slope"].null_count() == no_gap.sum()


def test_inconclusive_cases():
    rng = np.random.default_rng(3)
    # a gap that grows with N: significant everywhere, slope > 0
    grows = _fits(_sweep(rng, lambda n: 1e-3 * n**0.5, 1e-4, ns=[10, 100, 1000, 10000]))
    assert grows["verdict"][0] == "inconclusive" and grows["slope"][0] > 0
    # detected but only 2 significant points
    two = _fits(_sweep(rng, lambda n: 50.0 / n**2, 0.002, ns=[10, 30, 1000, 10000]))
    assert two["n_significant"][0] == 2 and two["verdict"][0] == "inconclusive"
    # gaps of both signs
    flip = _fits(_sweep(rng, lambda n: (1.0 if n < 100 else -1.0) * 5.0 / n, 1e-5, ns=[10, 31, 316, 1000]))
    assert flip["sign"][0] == "mixed" and flip["verdict"][0] == "inconclusive"


def test_arm_columns_factorial_and_derived():
    rng = np.random.default_rng(5)
    rows = []
    for lam in (0.5, 0.9):
        for d in (2, 3):
            rows += _sweep(rng, lambda n: 1.0 / n, 0.01, ns=[10, 100, 1000], lam=lam, d=d, reps=1)
    agg = aggregate(_frame(rows), PARAMS)
    assert arm_columns(agg, PARAMS) == ["lam", "d"]
    # lam = 1 - beta / sqrt(N): lam changes along an arm, beta labels it
    rows = []
    for beta in (1.0, 2.0):
        for n in (100, 400, 1600):
            rows += _sweep(rng, lambda n: 1.0 / n, 0.01, ns=[n], lam=1 - beta / math.sqrt(n), reps=1, beta=beta)
    params = ["n_servers", "beta", "lam", "d"]
    assert arm_columns(aggregate(_frame(rows), params), params) == ["beta", "d"]


# --- the whole analysis ----------------------------------------------------------------------


def _mixed_frame():
    rng = np.random.default_rng(2)
    rows = _sweep(rng, lambda n: 5.0 / n, 0.002, ns=NS[:6])
    rows += _sweep(rng, lambda n: 0.0, 0.02, ns=NS[:6], policy="random", d=1)
    rows += _sweep(rng, lambda n: 3.0 / math.sqrt(n), 0.01, ns=NS[:6], policy="jsq", lam=0.95)
    rows[5]["status"], rows[5]["error"] = "error", "worker died"
    return _frame(rows)


def test_analyze_writes_everything(tmp_path):
    df = _mixed_frame()
    out = analyze(df.lazy(), PARAMS, tmp_path, sweep_name="synthetic")
    assert out["n_tasks"] == df.height and out["n_failed"] == 1
    assert out["arm_params"] == ["lam", "d"]
    for key in ("summary", "report", "fits_json"):
        assert out[key].exists() and out[key].stat().st_size > 0
    assert len(out["plots"]) == 9  # 3 policies x (estimate, gap, tail)
    for p in out["plots"]:
        assert p.suffix == ".png" and p.stat().st_size > 1000
    summary = pl.read_parquet(out["summary"])
    assert {"mean_response_gap", "mean_response_lo", "ci_method", "n_error"} <= set(summary.columns)
    assert summary.height == aggregate(df, PARAMS).height
    json.dumps(out["fits"])  # plain values only
    verdicts = {f["policy"]: f["verdict"] for f in out["fits"]}
    assert verdicts["pod"].startswith("falling") and verdicts["jsq"].startswith("falling")
    assert verdicts["random"] == "no significant gap"
    text = out["report"].read_text()
    assert "synthetic" in text and "worker died" in text and "## Fits and verdicts" in text
    for p in out["plots"]:
        assert f"({p.name})" in text


def _edge_cases():
    df = _mixed_frame()
    return {
        "meanfield_only": (df.filter(pl.col("engine") == "meanfield"), "no comparison"),
        "agent_only": (df.filter(pl.col("engine") == "agent"), "no comparison"),
        "all_error": (df.with_columns(status=pl.lit("error"), error=pl.lit("x")), "no comparison"),
        "single_n": (df.filter(pl.col("n_servers") == 100), "no scaling fit"),
    }


@pytest.mark.parametrize("case", list(_edge_cases()))
def test_analyze_edge_frames(tmp_path, case):
    frame, note = _edge_cases()[case]
    out = analyze(frame, PARAMS, tmp_path, sweep_name=case)
    assert out["fits"] == []
    assert any(note in n for n in out["notes"]), out["notes"]
    assert out["report"].read_text().startswith(f"# Sweep `{case}`")
    assert pl.read_parquet(out["summary"]).height == aggregate(frame, PARAMS).height
    if case == "all_error":
        assert out["n_failed"] == out["n_tasks"] == frame.height and out["plots"] == []
    else:
        assert out["plots"]


def test_count_tasks():
    c = count_tasks(_mixed_frame())
    assert c["n_failed"] == 1 and c["errors"] == [{"error": "worker died", "count": 1}]
    assert sum(v["n_tasks"] for v in c["by_engine"].values()) == c["n_tasks"]


def test_a_run_length_that_varies_with_n_does_not_hide_the_mean_field():
    """jiq_mean_field sets events by a formula of N: the mean-field rows (events null) still
    match every simulated point."""
    import polars as pl

    from analysis.aggregate import compare_to_meanfield

    agg = pl.DataFrame({
        "policy": ["pod"] * 3, "engine": ["agent", "agent", "meanfield"],
        "n_servers": [100, 1000, 100], "events": [10**6, 10**7, None], "lam": [0.9] * 3,
        "n_rep": [2, 2, 1], "tail": [[0.9], [0.9], [0.9]],
        **{f"{m}{s}": [1.0, 1.0, 1.0] for m in ("mean_response", "mean_wait", "prob_wait", "mean_queue")
           for s in ("", "_se", "_hw", "_lo", "_hi")},
    })
    cmp = compare_to_meanfield(agg, ["n_servers", "events", "lam"])
    assert cmp.height == 2 and cmp["mean_response_mf"].null_count() == 0


def test_report_leaves_out_rows_without_the_metric(tmp_path):
    """A trajectory's path rows have no mean_response: the report says so instead of listing
    empty cells (their own analysis, analysis/transients.py, reports them)."""
    rng = np.random.default_rng(3)
    rows = _sweep(rng, lambda n: 1.0 / n, 0.01, ns=NS[:3])
    for n in NS[:3]:
        for r in range(2):
            row = _row("trajectory", "pod", n, 0.9, 2, r, 0.0, None)
            row.update({k: None for k in ("mean_response", "mean_response_se", "mean_wait",
                                          "mean_wait_se", "prob_wait", "prob_wait_se",
                                          "mean_queue", "mean_queue_se", "tail")})
            rows.append(row)
    out = analyze(_frame(rows).lazy(), PARAMS, tmp_path, sweep_name="paths")
    text = out["report"].read_text()
    table = text.split("## Estimates")[1].split("## Fits")[0]
    assert "by engine: trajectory: 3" in table, table
    assert "| trajectory |" not in table and "| agent |" in table
