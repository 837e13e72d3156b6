"""The zero-queueing analysis on synthetic frames whose truth is known (no simulation)."""
import numpy as np
import polars as pl

from analysis.models.zero_queueing import NOT_VANISHING, VANISHING, analyze_zero_queueing

NS = [100, 1000, 10_000, 100_000]


def frame(truth, variant, rel_noise=0.02, reps=4, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for n in NS:
        for r in range(reps):
            t = truth(n)
            v = t + rng.normal(0, rel_noise * max(t, 1e-4))
            rows.append({"task_id": f"{variant}-{n}-{r}", "engine": "occupancy", "policy": "batch_filling",
                         "variant": variant, "n_servers": n, "k": int(np.ceil(np.log(n) ** 2)),
                         "d": 3, "lam": 1 - n ** -0.3, "status": "ok", "replication": r,
                         "queueing_ratio": v, "queueing_ratio_se": rel_noise * max(t, 1e-4),
                         "mean_response": 4.0 * (1 + v), "mean_response_se": 0.01,
                         "drop_prob": 0.0, "drop_prob_se": 0.0, "frac_within_h": 0.9,
                         "tail": [0.8, 0.1, 0.0]})
    return rows


def test_verdicts_on_known_trends(tmp_path):
    rows = (frame(lambda n: 3.0 * n ** -0.5, "falls")
            + frame(lambda n: 0.02 * n ** 0.3, "grows", seed=1)
            + frame(lambda n: 0.0, "zero", seed=2))
    df = pl.DataFrame(rows)
    out = analyze_zero_queueing(df, ["n_servers", "variant", "k", "d", "lam"], tmp_path, "t")
    by = {v["variant"]: v for v in out["verdicts"]}
    assert by["falls"]["verdict"] == VANISHING
    assert by["falls"]["slope_lo"] < -0.5 < by["falls"]["slope_hi"]
    assert by["grows"]["verdict"] == NOT_VANISHING
    assert by["zero"]["verdict"] == VANISHING
    assert out["report"].exists() and "vanishing" in out["report"].read_text()
    assert all(p.stat().st_size > 1000 for p in out["plots"])
    assert any(k == "queueing_ratio" and step == 100_000 and arm.get("policy")
               for k, _, step, arm in out["metrics"])
    # arms are labelled by what does not change along N (variant), not by k, d, lam
    assert out["arm_params"] == ["variant", "d"]


def test_too_few_points_is_inconclusive(tmp_path):
    rows = [r for r in frame(lambda n: 0.5, "flat") if r["n_servers"] in (100, 1000)]
    out = analyze_zero_queueing(pl.DataFrame(rows), ["n_servers", "variant", "k", "d", "lam"], tmp_path, "t")
    assert out["verdicts"][0]["verdict"] == "inconclusive"
