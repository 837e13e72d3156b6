"""The JIQ and LED analyses: their verdict rules on frames whose truth is known, and a tiny real
run of a shipped sweep of each, end to end without Ray or MLflow."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analysis.fit import CONSISTENT, FALLING, gap_rate_verdict
from analysis.models import led
from analysis.models.led import INCONCLUSIVE, heavy_traffic_table, imbalance_trend, intercept_fit
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose


def test_jiq_rule_fits_a_1_over_n_gap():
    rng = np.random.default_rng(3)
    ns = np.array([100, 200, 400, 1000, 2000, 10**4, 10**5, 10**6], float)
    se = np.full(ns.size, 2e-4)
    gaps = 2.0 / ns + rng.normal(0.0, se)  # beyond 4 SE up to N = 2000: five points to fit
    out = gap_rate_verdict(ns, gaps, se)
    assert out["verdict"] == FALLING
    assert out["slope_lo"] <= -1.0 <= out["slope_hi"]
    # a trend over the fitted N, never a limit: the note says over which N, and undecided beyond
    assert "over N = 100..2000" in out["note"] and out["note"].endswith("undecided beyond N = 10^6")
    assert "converg" not in out["note"] + out["verdict"]
    noise = gap_rate_verdict(ns, rng.normal(0.0, se), se)  # no gap at all: nothing to fit
    assert noise["verdict"] == CONSISTENT and noise["slope"] is None


def _ht_frame(ratios: dict) -> pl.DataFrame:
    rows = []
    for policy, pts in ratios.items():
        for eps, ratio, hw in pts:
            rows.append({"policy": policy, "engine": "slotted", "eps": eps, "ht_ratio": ratio,
                         "ht_ratio_hw": hw, "ht_ratio_se": hw / 3.182, "n_rep": 4})
    return pl.DataFrame(rows)


def test_led_rule_judges_the_distance_to_one():
    agg = _ht_frame({
        "l_jsq": [(1.5, 3.0, 0.1), (0.75, 2.0, 0.1), (0.15, 1.2, 0.1)],   # 2.0 -> 0.2: falls
        "weighted_random": [(1.5, 30.0, 1.0), (0.15, 40.0, 1.0)],        # grows: does not
        "l_jba": [(1.5, 1.3, 0.1), (0.15, 1.25, 0.2)],                   # flat within the CI
    })
    verdicts = {t["policy"]: t["verdict"] for t in heavy_traffic_table(agg, agg.head(0), ["policy"])}
    assert verdicts == {"l_jsq": "falling toward 1", "weighted_random": "not falling toward 1",
                        "l_jba": INCONCLUSIVE}


def test_intercept_fit_recovers_a_line():
    eps = np.array([0.05, 0.1, 0.2])
    a, a_hw, b, b_hw = intercept_fit(eps, 1.0 + 0.3 + 8.0 * eps, [0.01] * 3, [4] * 3)
    assert a == pytest.approx(0.3) and b == pytest.approx(8.0)
    # the half-widths are t(3 dof) times the WLS standard errors of equal-SE points
    x = eps - eps.mean()
    assert b_hw == pytest.approx(3.182 * 0.01 / np.sqrt((x * x).sum()), rel=1e-3)
    assert a_hw == pytest.approx(3.182 * 0.01 * np.sqrt(1 / 3 + eps.mean() ** 2 / (x * x).sum()),
                                 rel=1e-3)


def test_theorem2_rule_names_how_it_holds():
    rng = np.random.default_rng(8)
    eps = [0.05, 0.1, 0.2, 0.5, 1.0]
    se = 0.02

    def pts(f):
        return [(e, f(e) + rng.normal(0, se), se * 3.182) for e in eps]

    agg = _ht_frame({
        "l_jsq": pts(lambda e: 1.0 + 10.0 * e),          # ratio - 1 linear through 0: K flat
        "l_jba": pts(lambda e: 1.6 + 10.0 * e),          # a floor at 1.6: not the theorem's
        "l_pod": [(0.05, 1.02, 0.05), (0.1, 1.4, 0.05), (0.2, 2.1, 0.05)],  # 1 in the CI
    })
    by = {t["policy"]: t for t in heavy_traffic_table(agg, agg.head(0), ["policy"])}
    assert by["l_jsq"]["theorem"] == led.CONSISTENT
    assert abs(by["l_jsq"]["intercept"]) <= by["l_jsq"]["intercept_hw"]
    assert by["l_jsq"]["fit_eps"] == [0.05, 0.1, 0.2]
    assert by["l_jba"]["theorem"] == led.NOT_SHOWN
    assert by["l_jba"]["intercept"] == pytest.approx(0.6, abs=0.1)
    assert by["l_pod"]["theorem"] == led.REACHED


def test_imbalance_trend_fits_the_power_of_p_hat_and_of_the_tilt():
    rng = np.random.default_rng(5)
    rows = []
    for d in (2, 5, 100):
        for p in (0.01, 0.03, 0.1, 0.3, 1.0):
            tilt = (d - 1) / 100
            v = 20.0 * p ** -0.5 * tilt ** -0.25
            rows.append({"policy": "l_pod", "d": d, "lam": 0.95, "p_hat": p, "n_servers": 100,
                         "imbalance": v * (1 + rng.normal(0, 0.01)), "imbalance_se": 0.01 * v})
    agg = pl.DataFrame(rows)
    by_p = imbalance_trend(agg, ["policy", "d", "lam"], "p_hat")
    assert len(by_p) == 3
    for t in by_p:
        # 1% noise on 5 points: the slope within 0.02 of -0.5 (a 95% CI misses 1 time in 20)
        assert t["slope"] == pytest.approx(-0.5, abs=0.02)
        assert t["slope_lo"] < t["slope"] < t["slope_hi"] and t["slope_hi"] - t["slope_lo"] < 0.1
    by_d = imbalance_trend(agg, ["policy", "d", "lam", "p_hat"], "d")
    assert len(by_d) == 5 and by_d[0]["x"] == pytest.approx([0.01, 0.04, 0.99])
    for t in by_d:
        assert t["slope"] == pytest.approx(-0.25, abs=0.02)


def test_instability_evidence_names_the_test_and_the_run():
    rows = [{"policy": "jiq", "lam": 0.95, "status": "unstable", "unstable_by": "cap",
             "drift_p": None, "drift_rise": None, "relaxation_slots": 4.0, "events_run": 3000},
            {"policy": "l_jsq", "lam": 0.95, "status": "unstable", "unstable_by": "drift",
             "drift_p": 1e-6, "drift_rise": 0.5, "relaxation_slots": 8.0, "events_run": 400000,
             "unused_service": 5.25, "eps": 5.0},
            {"policy": "l_jsq", "lam": 0.95, "status": "ok", "unstable_by": None,
             "drift_p": 0.3, "drift_rise": 0.01, "relaxation_slots": 8.0, "events_run": 400000},
            {"policy": "l_jba", "lam": 0.99, "status": "unstable", "unstable_by": "drift",
             "drift_p": 1e-5, "drift_rise": 0.3, "relaxation_slots": 1e4, "events_run": 10**5}]
    df = pl.DataFrame(rows)
    lines = led.instability_evidence(df.filter(pl.col("status") == "unstable"), df, ["lam"])
    table = [ln for ln in lines if ln.startswith("| ") and "policy" not in ln]
    assert len(table) == 3
    jiq = next(ln for ln in table if ln.startswith("| JIQ"))
    assert "| 1 / 1 | cap |" in jiq and "cap passed: unstable or above the cap" in jiq
    ljsq = next(ln for ln in table if ln.startswith("| L-JSQ"))
    assert "1 / 2" in ljsq and "p=1.0e-06 rise 50%" in ljsq and "| 5e+04 |" in ljsq
    assert "| 0.25 | 4e+05 |" in ljsq  # growth E[U] - eps per slot, then the run length
    assert "growing (drift test)" in ljsq
    assert "drift in a short run" in next(ln for ln in table if ln.startswith("| L-JBA"))


def _tiny(tmp_path, sweep, overrides):
    cfg = compose([f"+sweep={sweep}", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
                   "execution.backend=serial", "execution.progress=false", "replications=2",
                   *overrides])
    out = run_sweep(to_plain(cfg), quiet=True)
    assert out["errors"] == 0
    return out


@pytest.mark.integration  # a shipped sweep end to end through the pipeline
def test_jiq_sweep_tiny_real_run(tmp_path):
    out = _tiny(tmp_path, "jiq", ["axes.lam=[0.5,0.8,0.9]", "params.T=300"])
    extra = out["analysis"]["extra"]["jiq"]
    text = extra["report"].read_text()
    assert "| JIQ-Po2 | agent | 1000 | 0.9 |" in text and "Maximum relative error" in text
    # the ordering of the policies by load and Lu et al.'s approximation come with the meanfield rows
    assert [p.name for p in extra["plots"]] == ["response_vs_load.png", "tails.png", "messages.png",
                                                "ordering_vs_load.png", "lu_vs_load.png"]
    assert all(p.stat().st_size > 10_000 for p in extra["plots"])


@pytest.mark.integration  # a shipped sweep end to end through the pipeline
def test_led_sweep_tiny_real_run(tmp_path):
    out = _tiny(tmp_path, "led_heavy_traffic", ["axes.lam=[0.9,0.95,0.98]", "params.events=20000",
                                                "policies=[l_jsq,weighted_random]"])
    frame = out["frame"]
    assert set(frame["status"].unique()) <= {"ok", "unstable"}
    assert frame.filter(pl.col("engine") == "slotted")["service_rates"][0].to_list() == [1.0] * 5 + [2.0] * 5
    extra = out["analysis"]["extra"]["led_heavy_traffic"]
    assert extra["report"].is_file() and extra["heavy_traffic"]
    assert all(p.stat().st_size > 10_000 for p in extra["plots"])
