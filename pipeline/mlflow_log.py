"""What a finished sweep sends to MLflow (driver only), built from the analysis outputs."""
from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from pipeline.plan import Plan
from pipeline.tracking import SweepTracker, metric_key

#: summary columns logged per engine in each point's child run
POINT_METRICS = ("mean_response", "mean_response_lo", "mean_response_hi", "mean_wait", "prob_wait",
                 "mean_queue", "mean_response_gap", "mean_response_rel_gap")


def _num(v) -> float | None:
    if v is None or isinstance(v, (str, list, bool)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _label(values: dict) -> str:
    return "_".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in values.items())


def log_sweep(tracker: SweepTracker, plan: Plan, analysis: dict, artifacts: list[Path],
              elapsed: float, errors: int) -> None:
    summary = pl.read_parquet(analysis["summary"])
    params = [p for p in analysis.get("params", plan.param_columns) if p in summary.columns]
    arm_params = [p for p in analysis.get("arm_params", []) if p in summary.columns]
    step_by_n = "n_servers" in plan.varying
    rows = {}
    for r in summary.iter_rows(named=True):
        rows[(r["policy"], r["engine"], tuple(r[p] for p in params))] = r

    points, parent = [], []
    for point in plan.points:
        key = tuple(point.values.get(p) for p in params)
        step = int(point.values["n_servers"]) if step_by_n else 0
        metrics = []
        for (policy, engine, k), r in rows.items():
            if policy != point.policy or k != key:
                continue
            for m in POINT_METRICS:
                v = _num(r.get(m))
                if v is not None:
                    metrics.append((metric_key(engine, m), v, step))
                    if engine != "meanfield" and m in ("mean_response", "mean_response_gap"):
                        arm = _label({p: point.values[p] for p in arm_params})
                        parent.append((metric_key(m, f"{point.policy}_{arm}".rstrip("_")), v, step))
        points.append({"name": point.label(), "params": {"policy": point.policy, **point.values},
                       "metrics": metrics})
    tracker.log_points(points)

    for fit in analysis.get("fits", []):
        arm = _label({p: fit[p] for p in arm_params if p in fit})
        base = f"{fit.get('policy')}_{arm}".rstrip("_")
        for m in ("slope", "slope_lo", "slope_hi"):
            v = _num(fit.get(m))
            if v is not None:
                parent.append((metric_key(f"fit_{m}", base), v, 0))
    for extra in (analysis.get("extra") or {}).values():
        parent += [(metric_key(k), v, step) for k, v, step in extra.get("metrics", [])
                   if _num(v) is not None]
    parent += [("wall_time_s", elapsed, 0), ("failed_tasks", float(errors), 0),
               ("tasks", float(len(plan.tasks)), 0)]
    tracker.log_metrics(parent)
    tracker.log_artifacts([a for a in artifacts if a.is_file()])
    for a in artifacts:
        if a.is_dir():
            tracker.log_artifacts([a], subdir=a.name)
