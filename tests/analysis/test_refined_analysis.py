"""analysis.refined: simulations against the refined mean field x* + V/N."""
from __future__ import annotations

import numpy as np
import polars as pl

from analysis.refined import AGREES, DIFFERS, refined_fits, refined_points

NS = [10, 20, 40, 80, 160, 320]
X_STAR, V = 2.6, 3.0


def _frames(v_sim: float, c: float = 5.0, se_rel: float = 0.002, seed: int = 0):
    rng = np.random.default_rng(seed)
    agg_rows, cmp_rows = [], []
    for n in NS:
        agg_rows.append({"policy": "pod", "engine": "refined", "n_servers": n, "lam": 0.9,
                         "n_rep": 1, "mean_response": X_STAR + V / n})
        agg_rows.append({"policy": "pod", "engine": "meanfield", "n_servers": n, "lam": 0.9,
                         "n_rep": 1, "mean_response": X_STAR})
        se = se_rel * X_STAR
        value = X_STAR + v_sim / n + c / n**2 + rng.normal(0, se)
        cmp_rows.append({"policy": "pod", "engine": "occupancy", "n_servers": n, "lam": 0.9, "n_rep": 4,
                         "mean_response": value, "mean_response_se": se, "mean_response_mf": X_STAR,
                         "mean_response_gap": value - X_STAR})
    return pl.DataFrame(agg_rows), pl.DataFrame(cmp_rows)


def test_a_simulation_on_the_refined_line_agrees():
    agg, cmp = _frames(V)
    pts = refined_points(agg, cmp, ["n_servers", "lam"])
    assert pts.height == len(NS)
    assert np.allclose(pts["v_pred"].to_numpy(), V)
    (fit,) = refined_fits(pts, ["lam"])
    assert fit["verdict"] == AGREES, fit
    assert fit["v_hat_lo"] <= V <= fit["v_hat_hi"]


def test_a_coefficient_twice_the_prediction_differs():
    agg, cmp = _frames(2 * V)
    (fit,) = refined_fits(refined_points(agg, cmp, ["n_servers", "lam"]), ["lam"])
    assert fit["verdict"] == DIFFERS, fit
    assert fit["v_hat_lo"] > V


def test_no_refined_rows_no_comparison():
    agg, cmp = _frames(V)
    assert refined_points(agg.filter(pl.col("engine") != "refined"), cmp, ["n_servers", "lam"]).height == 0
