"""analysis.response_times draws the mean field from the sweep's meanfield rows when they carry
the response columns, and computes it only as a fallback."""
from __future__ import annotations

import polars as pl

import sim
from analysis.response_times import analyze_response_times


def _rows(policy_params: dict, with_mf_responses: bool, marker: float | None = None):
    rows = []
    for n in (50, 200):
        task = {"engine": "occupancy", "n_servers": n, **policy_params, "events": 100_000,
                "seed": n, "responses": True}
        rows.append({**task, **sim.run(task), "status": "ok", "replication": 0})
    mf_task = {"engine": "meanfield", "n_servers": 50, **policy_params}
    if with_mf_responses:
        mf_task["responses"] = True
    mf = sim.run(mf_task)
    if marker is not None:
        mf["response_p99"] = marker  # a value no computation gives: shows where it came from
    rows.append({**mf_task, **mf, "status": "ok", "replication": 0})
    return pl.DataFrame(rows, infer_schema_length=None)


def test_meanfield_values_come_from_the_rows(tmp_path):
    params = {"policy": "pod_per_task", "lam": 0.8, "d": 2, "k": 2}
    frame = _rows(params, True, marker=123.456)
    out = analyze_response_times(frame, ["n_servers", "lam", "d", "k"], tmp_path, "t")
    text = out["report"].read_text()
    assert "123.5" in text and "(computed) |" not in text
    assert any(p.name.startswith("ccdf_pod_per_task") for p in out["plots"])


def test_fallback_computes_where_no_row_has_the_columns(tmp_path):
    params = {"policy": "batch_sampling", "lam": 0.8, "d": 2, "k": 2}
    frame = _rows(params, False)
    out = analyze_response_times(frame, ["n_servers", "lam", "d", "k"], tmp_path, "t")
    text = out["report"].read_text()
    assert "(computed) |" in text
    from sim.dispatch.meanfield.tasks import response_law

    p99 = response_law("batch_sampling", 0.8, 2, 2).quantile(0.99)
    assert f"{p99:.4g}" in text
