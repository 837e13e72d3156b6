"""analysis.response_times on rows of real (short) simulations: figures, report, mean field."""
from __future__ import annotations

import polars as pl

import sim
from analysis.response_times import analyze_response_times


def test_quantile_and_ccdf_figures_from_recorded_rows(tmp_path):
    rows = []
    for n in (50, 200):
        for rep in range(2):
            task = {"engine": "occupancy", "policy": "pod", "n_servers": n, "lam": 0.8, "d": 2,
                    "events": 200_000, "seed": 10 * n + rep, "responses": True}
            rows.append({**task, **sim.run(task), "status": "ok", "replication": rep})
    rows.append({"engine": "meanfield", "policy": "pod", "n_servers": 50, "lam": 0.8, "d": 2,
                 "status": "ok", "replication": 0, **sim.run({"engine": "meanfield", "policy": "pod",
                                                               "n_servers": 50, "lam": 0.8, "d": 2})})
    frame = pl.DataFrame(rows, infer_schema_length=None)
    out = analyze_response_times(frame, ["n_servers", "lam", "d"], tmp_path, "t")
    names = {p.name for p in out["plots"]}
    assert "quantiles_vs_n_pod.png" in names and any(n.startswith("ccdf_pod") for n in names)
    assert all(p.stat().st_size > 10_000 for p in out["plots"])
    text = out["report"].read_text()
    assert "p99" in text and "mean field" in text
