"""The JIQ and LED analyses: their verdict rules on frames whose truth is known, and a tiny real
run of a shipped sweep of each, end to end without Ray or MLflow."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analysis.fit import CONSISTENT, CONVERGES, gap_rate_verdict
from analysis.models.led import INCONCLUSIVE, heavy_traffic_table
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose


def test_jiq_rule_fits_a_1_over_n_gap():
    rng = np.random.default_rng(3)
    ns = np.array([100, 200, 400, 1000, 2000, 10**4, 10**5, 10**6], float)
    se = np.full(ns.size, 2e-4)
    gaps = 2.0 / ns + rng.normal(0.0, se)  # beyond 4 SE up to N = 2000: five points to fit
    out = gap_rate_verdict(ns, gaps, se)
    assert out["verdict"] == CONVERGES
    assert out["slope_lo"] <= -1.0 <= out["slope_hi"]
    noise = gap_rate_verdict(ns, rng.normal(0.0, se), se)  # no gap at all: nothing to fit
    assert noise["verdict"] == CONSISTENT and noise["slope"] is None


def _ht_frame(ratios: dict) -> pl.DataFrame:
    rows = []
    for policy, pts in ratios.items():
        for eps, ratio, hw in pts:
            rows.append({"policy": policy, "engine": "slotted", "eps": eps, "ht_ratio": ratio,
                         "ht_ratio_hw": hw})
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
    extra = out["analysis"]["extra"]["led"]
    assert extra["report"].is_file() and extra["heavy_traffic"]
    assert all(p.stat().st_size > 10_000 for p in extra["plots"])
