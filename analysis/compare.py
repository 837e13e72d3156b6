"""One metric against one parameter (N by default) for several finished runs, side by side.

Reads result frames only (the runs' ``results.parquet``; ``pipeline.compare`` reads the files
and writes what this returns). Per run, the replications of each point are combined by
:func:`analysis.aggregate.aggregate` (t over replications, exact for limit engines), and each
arm (engine, policy and the run's parameters that label a curve in ``x``,
:func:`analysis.fit.arm_columns`) is one series labelled by the run and the arm. The figure has
one panel when the series fit its palette, else one panel per run; the table has one row per
(series, x) with the estimate, its 95% half-width and the replications behind it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.aggregate import aggregate
from analysis.fit import arm_columns

__all__ = ["Run", "compare_runs", "series_table"]


@dataclass(frozen=True)
class Run:
    """One finished run: its label, its rows and its parameter columns."""

    label: str
    frame: pl.DataFrame
    params: list[str]


def _arm_text(row: dict, cols: list[str]) -> str:
    name = style.policy_name(row["policy"], row.get("model"), row.get("engine"))
    if row.get("d") is not None and style.with_d(name, row["d"]) != name:
        name, cols = style.with_d(name, row["d"]), [c for c in cols if c != "d"]
    if row.get("engine"):
        name += f" [{style.engine_name(row['engine'])}]"
    rest = style.param_text(row, [c for c in cols if c not in ("policy", "engine", "model")])
    return f"{name} {rest}".strip()


def series_table(runs: list[Run], metric: str, x: str) -> pl.DataFrame:
    """One row per (run, arm, x): ``run, series, x, metric, metric_hw, n_rep``, sorted.

    ``ValueError`` naming the run if its rows lack ``metric`` or ``x``."""
    # parameters constant within each run but not across the runs (smoke at lam 0.8 and 0.9)
    # label the runs' series, beside the folder name
    consts = []
    for run in runs:
        df = run.frame
        keep = {}
        for p in run.params:
            if p in df.columns and p not in (x, "events", "time"):
                vals = df[p].drop_nulls().unique()
                if vals.len() == 1:
                    keep[p] = vals[0]
        consts.append(keep)
    differ = [p for p in dict.fromkeys(k for c in consts for k in c)
              if len({repr(c.get(p)) for c in consts}) > 1]
    parts = []
    for run, const in zip(runs, consts):
        df = run.frame
        tag = style.param_text(const, [p for p in differ if p in const])
        run_name = f"{run.label} ({tag})" if tag else run.label
        for col in (metric, x):
            if col not in df.columns:
                raise ValueError(f"{run.label}: no column {col!r} in its rows")
        # the run length is not what tells curves apart (null in limit rows)
        params = [p for p in run.params if p in df.columns and p not in (x, "events", "time")]
        ok = df.filter(pl.col("status") == "ok") if "status" in df.columns else df
        ok = ok.filter(pl.col(metric).is_not_null())
        if ok.height == 0:
            raise ValueError(f"{run.label}: no successful row has {metric!r}")
        agg = aggregate(ok, [*params, x], metrics=[metric])
        arm = arm_columns(ok, [*params, x], x)
        # the arm columns that tell this run's curves apart (the others are constant)
        shown = [c for c in arm if agg[c].n_unique() > 1]
        keys = ["policy", "engine", *arm]
        labels = agg.select(keys).unique(maintain_order=True).to_dicts()
        for key in labels:
            pts = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()]).sort(x)
            parts.append(pl.DataFrame({
                "run": [run.label] * pts.height,
                "series": [f"{run_name}: {_arm_text(key, shown)}"] * pts.height,
                "x": pts[x].cast(pl.Float64),
                metric: pts[metric].cast(pl.Float64),
                f"{metric}_hw": pts[f"{metric}_hw"].cast(pl.Float64),
                "n_rep": pts["n_rep"].cast(pl.Int64),
            }))
    return pl.concat(parts, how="vertical_relaxed")


def _wide(values) -> bool:
    v = [float(a) for a in values if a is not None and np.isfinite(a) and a > 0]
    return len(v) >= 2 and max(v) / min(v) >= 20


def compare_runs(runs: list[Run], metric: str, outdir, x: str = "n_servers") -> dict:
    """Write ``compare_<metric>.png``, ``compare_<metric>.csv`` and ``compare_<metric>.md``
    (the table, with the runs listed) into ``outdir``; return their paths and the table."""
    table = series_table(runs, metric, x)  # (bad input refused before anything is written)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    series = table["series"].unique(maintain_order=True).to_list()
    groups = ([("", series)] if len(series) <= style.MAX_SERIES else
              [(r.label, table.filter(pl.col("run") == r.label)["series"].unique(maintain_order=True)
                .to_list()) for r in runs])
    panels = []
    for title, group in groups:  # a run with more arms than colours gets several panels
        for i in range(0, len(group), style.MAX_SERIES):
            panels.append((title, group[i:i + style.MAX_SERIES]))
    fig = Figure(figsize=(9.0, 4.8 * len(panels) + 0.3), layout="constrained")
    FigureCanvasAgg(fig)
    log_x = _wide(table["x"].to_list())
    log_y = _wide(table[metric].to_list())
    engines = [e for r in runs for e in (r.frame["engine"].unique().to_list()
                                         if "engine" in r.frame.columns else [])]
    if len(panels) > 1:
        fig.suptitle(f"{metric} against {x}, 95% CI over replications; one panel per run",
                     fontsize=11)
    for n, (title, group) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, n + 1)
        zero = False
        for j, name in enumerate(group):
            s = table.filter(pl.col("series") == name).sort("x")
            xs, ys = s["x"].to_numpy(), s[metric].to_numpy()
            hw = np.asarray(s[f"{metric}_hw"].to_list(), dtype=float)
            if log_y:
                zero |= style.errorbar_log(ax, xs, ys, hw, color_=style.color(j),
                                           fmt=style.marker(j) + "-", ms=4, capsize=2, label=name)
            else:
                ax.errorbar(xs, ys, yerr=np.nan_to_num(hw), color=style.color(j),
                            fmt=style.marker(j) + "-", ms=4, capsize=2, label=name)
        if zero:
            ax.add_line(style.ci_zero_handle())
        if log_x:
            style.log_axis(ax, "x", table["x"].to_list())
        if log_y:
            style.log_axis(ax, "y", table[metric].to_list())
        ax.set_xlabel(style.label(x, engines))
        ax.set_ylabel(style.label(metric, engines))
        ax.set_title(title or f"{metric} against {x}, 95% CI over replications", fontsize=10)
        if log_x:  # the same range on every panel
            ax.set_xlim(table["x"].min() / 1.25, table["x"].max() * 1.25)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    png = outdir / f"compare_{metric}.png"
    fig.savefig(png, dpi=120)
    csv = outdir / f"compare_{metric}.csv"
    table.rename({"x": x}).write_csv(csv)
    md = outdir / f"compare_{metric}.md"
    lines = [f"# {metric} against {x}", "", "Runs:", ""]
    lines += [f"- {r.label}" for r in runs]
    lines += ["", f"| series | {x} | {metric} (95% CI) | replications |", "|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        hw = r[f"{metric}_hw"]
        ci = f" +- {hw:.4g}" if hw is not None and np.isfinite(hw) else ""
        lines.append(f"| {r['series']} | {r['x']:g} | {r[metric]:.6g}{ci} | {r['n_rep']} |")
    md.write_text("\n".join(lines) + "\n")
    return {"plot": png, "csv": csv, "table_md": md, "table": table}
