"""The one call the pipeline makes: aggregate, compare, fit, plot, report, write ``summary.parquet``."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from analysis.aggregate import METRICS, aggregate, check_params, compare_to_meanfield
from analysis.fit import arm_columns, fit_gap_rate
from analysis.plots import make_plots
from analysis.refined import REFINED_ENGINE, refined_fits, refined_points, report_lines
from analysis.report import count_tasks, write_report

__all__ = ["summarize", "analyze"]


def summarize(agg: pl.DataFrame, cmp: pl.DataFrame, params: Sequence[str]) -> pl.DataFrame:
    """``agg`` (every engine) with the comparison columns of ``cmp`` joined on (policy, engine, params).

    Mean-field rows and simulation rows without a mean-field counterpart get nulls there.
    """
    keys = ["policy", "engine", *params]
    extra = [c for c in cmp.columns if c not in agg.columns]
    if not extra:
        return agg
    return agg.join(cmp.select([*keys, *extra]), on=keys, how="left", nulls_equal=True, maintain_order="left")


def _plain(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def analyze(
    df,
    params: Sequence[str],
    outdir,
    sweep_name: str,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
) -> dict:
    """Analyse one sweep's result frame and write its artefacts into ``outdir``.

    ``df``: the rows of ``docs/results-schema.md`` (a ``pl.DataFrame`` or ``pl.LazyFrame``);
    ``params``: the parameter columns of the sweep, given explicitly; ``x``: the scaling
    variable; ``metric``: the estimate whose gap is fitted; ``arm_params``: the columns that
    label an arm (default :func:`analysis.fit.arm_columns`).

    Writes ``summary.parquet`` (:func:`summarize`: aggregate + comparison, one row per
    (policy, engine, point)), ``fits.json``, the PNG figures and ``report.md``.  Returns::

        {"summary": Path, "report": Path, "fits_json": Path, "plots": [Path, ...],
         "fits": [dict, ...],          # one plain dict per arm (fit_gap_rate rows; NaN -> None)
         "n_tasks": int, "n_failed": int, "counts": dict (count_tasks),
         "arm_params": [str, ...], "notes": [str, ...],
         "limit_fits": {engine: [dict, ...]}}  # N * gap against an N-dependent limit's 1/N term
    """
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    params = check_params(df, params, x)
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} must be one of {METRICS}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []

    counts = count_tasks(df)
    if x in df.columns and df[x].null_count():
        # rows off the x axis (the heavy_traffic engine's N past the Int64 column is log10_n):
        # the sweep's own analysis reads them; so are the parameters only they set
        off = df.filter(pl.col(x).is_null())
        df = df.filter(pl.col(x).is_not_null())
        engines = ", ".join(sorted(off["engine"].unique().to_list())) if "engine" in off.columns else "?"
        notes.append(f"{off.height} rows without `{x}` (engine {engines}) are left to the sweep's own analysis")
        params = [p for p in params if p == x or df.height == 0 or df[p].null_count() < df.height
                  or off[p].null_count() == off.height]
    agg = aggregate(df, params)
    cmp = compare_to_meanfield(agg, params, x=x)
    ok_points = agg.filter(pl.col("n_rep") >= 1)
    if arm_params is None:
        arm_params = arm_columns(ok_points, params, x)
    arm_params = list(arm_params)

    has_gap = cmp.height > 0 and cmp[f"{metric}_gap"].is_not_null().any()
    if cmp.height == 0:
        notes.append("no successful simulation rows: no comparison with the mean field")
    elif not has_gap:
        notes.append("no mean-field rows match the simulation points: no comparison")
    if has_gap and cmp.filter(pl.col(f"{metric}_gap").is_not_null())[x].n_unique() < 2:
        notes.append(f"`{x}` takes a single value: no scaling fit")
    fits = fit_gap_rate(cmp, params, x=x, metric=metric, arm_params=arm_params)

    summary = summarize(agg, cmp, params)
    summary_path = outdir / "summary.parquet"
    summary.write_parquet(summary_path)
    fit_dicts = [{k: _plain(v) for k, v in row.items()} for row in fits.to_dicts()]
    fits_path = outdir / "fits.json"
    fits_path.write_text(json.dumps(fit_dicts, indent=2, default=str) + "\n")

    # simulations against the refined mean field x* + V/N, where the sweep has refined rows
    rpoints = refined_points(agg, cmp, params, x=x, metric=metric)
    rfits = refined_fits(rpoints, arm_params, x=x)
    if rfits:
        (outdir / "refined.json").write_text(json.dumps(rfits, indent=2, default=str) + "\n")

    plots = make_plots(agg, cmp, fits, params, outdir, x=x, metric=metric, arm_params=arm_params)
    report = write_report(
        outdir, sweep_name=sweep_name, counts=counts, summary=summary, fits=fits, params=params,
        x=x, metric=metric, arm_params=arm_params, plots=plots, notes=notes,
    )
    if rfits:
        with open(report, "a") as fh:
            fh.write("\n".join(report_lines(rfits, metric, x)) + "\n")
    return {
        "summary": summary_path,
        "report": report,
        "fits_json": fits_path,
        "plots": plots,
        "fits": fit_dicts,
        "n_tasks": counts["n_tasks"],
        "n_failed": counts["n_failed"],
        "counts": counts,
        "arm_params": arm_params,
        "notes": notes,
        # the fits of N * gap against the N-dependent limit's 1/N term, by that limit's engine
        "limit_fits": {REFINED_ENGINE: [{k: _plain(v) for k, v in f.items()} for f in rfits]},
    }
