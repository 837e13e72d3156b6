"""PNG figures of a sweep: estimate vs N, |gap| vs N with the fitted power law, tails at the largest N.

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas directly (no
pyplot, no global backend switch), so this is safe in headless and multi-threaded drivers.
One figure per policy; inside it, one panel per arm (at most 12 panels a figure; more arms
continue in ``..._part2.png`` etc.).
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.aggregate import LIMIT_ENGINES, check_params
from analysis.fit import arm_columns, point_significant

__all__ = ["make_plots", "plot_estimates", "plot_gaps", "plot_tails", "arm_label"]

_PANELS_PER_FIGURE = 12
_TAIL_FLOOR = 1e-12  # tail levels below this in every curve are not drawn


def arm_label(row: dict, arm_params: Sequence[str]) -> str:
    """``"lam=0.9, d=2"`` for the arm parameters of ``row`` (``"all"`` without any)."""
    parts = [f"{p}={_fmt(row[p])}" for p in arm_params]
    return ", ".join(parts) if parts else "all"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s)).strip("_") or "x"


def _match(frame: pl.DataFrame, row: dict, cols: Sequence[str]) -> pl.DataFrame:
    """Rows of ``frame`` equal to ``row`` on ``cols`` (null matches null)."""
    if not cols:
        return frame
    cond = pl.lit(True)
    for c in cols:
        v = row[c]
        cond = cond & (pl.col(c).is_null() if v is None else (pl.col(c) == v))
    return frame.filter(cond)


def _arms(frame: pl.DataFrame, arm_params: Sequence[str]) -> list[dict]:
    cols = ["policy", *arm_params]
    return frame.select(cols).unique().sort(cols, nulls_last=True).to_dicts()


def _grid(n: int):
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.4 * ncols, 3.4 * nrows), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes


def _chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield i // size, items[i : i + size]


def _save(fig: Figure, outdir: Path, stem: str, part: int) -> Path:
    name = f"{stem}.png" if part == 0 else f"{stem}_part{part + 1}.png"
    path = outdir / name
    fig.savefig(path)
    return path


def _x_label(x: str) -> str:
    return "N (servers)" if x == "n_servers" else x


def _use_log_x(ax, xs) -> None:
    xs = np.asarray(xs, dtype=float)
    xs = xs[np.isfinite(xs)]
    if xs.size and xs.min() > 0 and np.unique(xs).size > 1:
        ax.set_xscale("log")


def plot_estimates(
    agg: pl.DataFrame,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
) -> list[Path]:
    """Per policy: ``metric`` vs ``x`` per arm; simulation with CI error bars, mean field dashed."""
    outdir = Path(outdir)
    data = agg.filter(pl.col("n_rep") >= 1).filter(pl.col(metric).is_not_null())
    if data.height == 0:
        return []
    if arm_params is None:
        arm_params = arm_columns(data, params, x)
    paths = []
    for policy in sorted(data["policy"].unique().to_list()):
        pol = data.filter(pl.col("policy") == policy)
        for part, arms in _chunks(_arms(pol, arm_params), _PANELS_PER_FIGURE):
            fig, axes = _grid(len(arms))
            for ax, arm in zip(axes, arms):
                sub = _match(pol, arm, arm_params).sort(x)
                for engine in sorted(sub["engine"].unique().to_list()):
                    e = sub.filter(pl.col("engine") == engine)
                    xs = e[x].cast(pl.Float64).to_numpy()
                    ys = e[metric].to_numpy()
                    if engine in LIMIT_ENGINES:
                        if np.ptp(ys) <= 1e-12 * max(1.0, abs(ys[0])):
                            ax.axhline(ys[0], ls="--", color="k", lw=1.2, label=f"{engine} (N=inf)")
                        else:
                            ax.plot(xs, ys, ls="--", color="k", lw=1.2, label=f"{engine} (N=inf)")
                        continue
                    lo = e[f"{metric}_lo"].fill_null(np.nan).to_numpy()
                    hi = e[f"{metric}_hi"].fill_null(np.nan).to_numpy()
                    yerr = np.nan_to_num(np.vstack([ys - lo, hi - ys]), nan=0.0)
                    ax.errorbar(xs, ys, yerr=yerr, fmt="o-", ms=4, capsize=3, label=f"{engine} (95% CI)")
                _use_log_x(ax, sub[x].cast(pl.Float64).to_numpy())
                ax.set_title(f"{policy}: {arm_label(arm, arm_params)}", fontsize=9)
                ax.set_xlabel(_x_label(x))
                ax.set_ylabel(metric)
                ax.legend(fontsize=7)
            paths.append(_save(fig, outdir, f"{metric}_vs_{_slug(x)}_{_slug(policy)}", part))
    return paths


def plot_gaps(
    cmp: pl.DataFrame,
    fits: pl.DataFrame | None,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
) -> list[Path]:
    """Per policy: ``|gap|`` vs ``x`` on log-log axes, one series per (engine, arm), fitted lines.

    Filled markers: significant points (``|gap| > 2 se`` and the 95% CI excludes 0: the points
    the fit uses); hollow: not significant.  Error bars are the 95% CI of the gap (the lower bar clipped above 0).
    """
    outdir = Path(outdir)
    gcol = f"{metric}_gap"
    if cmp.height == 0 or gcol not in cmp.columns:
        return []
    data = cmp.filter(pl.col(gcol).is_not_null() & (pl.col(gcol) != 0.0))
    if data.height == 0:
        return []
    if arm_params is None:
        arm_params = arm_columns(cmp, params, x)
    paths = []
    for policy in sorted(data["policy"].unique().to_list()):
        pol = data.filter(pl.col("policy") == policy)
        fig, axes = _grid(1)
        ax = axes[0]
        keys = ["engine", *arm_params]
        series = pol.select(keys).unique().sort(keys, nulls_last=True).to_dicts()
        for i, s in enumerate(series):
            sub = _match(pol, s, keys).sort(x)
            color = f"C{i % 10}"
            xs = sub[x].cast(pl.Float64).to_numpy()
            g = np.abs(sub[gcol].to_numpy())
            se = sub[f"{metric}_gap_se"].fill_null(np.nan).to_numpy()
            hw_raw = sub[f"{metric}_gap_hw"].fill_null(np.nan).to_numpy()
            hw = np.nan_to_num(hw_raw, nan=0.0)
            sig = np.isfinite(se) & (se > 0) & point_significant(g, se, hw_raw)
            yerr = np.vstack([np.minimum(hw, 0.9 * g), hw])
            label = f"{s['engine']}: {arm_label(s, arm_params)}"
            fit = None
            if fits is not None and fits.height and all(k in fits.columns for k in keys):
                f = _match(fits.filter(pl.col("policy") == policy), s, keys)
                if f.height and f["slope"][0] is not None:
                    fit = f.row(0, named=True)
                    label += f"; b={fit['slope']:.2f} [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}]"
            ax.errorbar(xs, g, yerr=yerr, fmt="none", ecolor=color, capsize=2, lw=0.8)
            ax.plot(xs[sig], g[sig], "o", color=color, ms=5, label=label)
            ax.plot(xs[~sig], g[~sig], "o", mfc="none", color=color, ms=5)
            if fit is not None:
                xx = np.geomspace(fit["x_min"], fit["x_max"], 50)
                ax.plot(xx, np.exp(fit["intercept"]) * xx ** fit["slope"], "-", color=color, lw=1)
        ax.set_yscale("log")
        _use_log_x(ax, pol[x].cast(pl.Float64).to_numpy())
        ax.set_xlabel(_x_label(x))
        ax.set_ylabel(f"|{metric} - mean field|")
        ax.set_title(f"{policy}: |gap| to the mean field (filled: significant, fitted)", fontsize=9)
        ax.legend(fontsize=7)
        paths.append(_save(fig, outdir, f"gap_{metric}_vs_{_slug(x)}_{_slug(policy)}", 0))
    return paths


def plot_tails(
    agg: pl.DataFrame,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    arm_params: Sequence[str] | None = None,
) -> list[Path]:
    """Per policy and arm: the tail ``s_i`` at the largest ``x`` of each engine (log y)."""
    outdir = Path(outdir)
    data = agg.filter((pl.col("n_rep") >= 1) & pl.col("tail").is_not_null())
    if data.height == 0:
        return []
    if arm_params is None:
        arm_params = arm_columns(data, params, x)
    paths = []
    for policy in sorted(data["policy"].unique().to_list()):
        pol = data.filter(pl.col("policy") == policy)
        for part, arms in _chunks(_arms(pol, arm_params), _PANELS_PER_FIGURE):
            fig, axes = _grid(len(arms))
            for ax, arm in zip(axes, arms):
                sub = _match(pol, arm, arm_params)
                curves = []
                for engine in sorted(sub["engine"].unique().to_list()):
                    e = sub.filter(pl.col("engine") == engine).sort(x)
                    last = e.row(e.height - 1, named=True)
                    tail = np.asarray(last["tail"], dtype=float)
                    curves.append((engine, last[x], tail))
                top = max(
                    (int(np.nonzero(t > _TAIL_FLOOR)[0].max()) + 1 if np.any(t > _TAIL_FLOOR) else 1)
                    for _, _, t in curves
                )
                for engine, xv, tail in curves:
                    levels = np.arange(1, tail.size + 1)[:top]
                    t = tail[:top].copy()
                    t[t <= 0] = np.nan  # log axis
                    if engine in LIMIT_ENGINES:
                        ax.plot(levels, t, "k--", marker="s", mfc="none", ms=4, lw=1.2, label=f"{engine} (N=inf)")
                    else:
                        ax.plot(levels, t, "o-", ms=3, label=f"{engine} ({x}={_fmt(xv)})")
                ax.set_yscale("log")
                shown = np.concatenate([t[:top] for _, _, t in curves])
                shown = shown[np.isfinite(shown) & (shown > 0)]
                if shown.size:  # keep the axis readable: nothing below 1e-12 is drawn
                    ax.set_ylim(max(shown.min(), _TAIL_FLOOR) / 2, 1.5)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_xlabel("i (queue length)")
                ax.set_ylabel("s_i (fraction with >= i tasks)")
                ax.set_title(f"{policy}: {arm_label(arm, arm_params)}", fontsize=9)
                ax.legend(fontsize=7)
            paths.append(_save(fig, outdir, f"tail_{_slug(policy)}", part))
    return paths


def make_plots(
    agg: pl.DataFrame,
    cmp: pl.DataFrame,
    fits: pl.DataFrame | None,
    params: Sequence[str],
    outdir,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
) -> list[Path]:
    """Draw every figure into ``outdir`` (created if needed) and return the PNG paths.

    (a) ``<metric>_vs_<x>_<policy>.png``: estimate vs ``x`` per arm with 95% CIs, mean field
    dashed; (b) ``gap_<metric>_vs_<x>_<policy>.png``: ``|gap|`` vs ``x`` log-log with the
    fitted lines; (c) ``tail_<policy>.png``: ``s_i`` at the largest ``x``, simulation vs mean
    field.  Figures without data (e.g. no mean-field rows: no gap plot) are skipped.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = check_params(agg, params, x)
    if arm_params is None:
        arm_params = arm_columns(agg.filter(pl.col("n_rep") >= 1), params, x)
    paths = plot_estimates(agg, params, outdir, x=x, metric=metric, arm_params=arm_params)
    paths += plot_gaps(cmp, fits, params, outdir, x=x, metric=metric, arm_params=arm_params)
    paths += plot_tails(agg, params, outdir, x=x, arm_params=arm_params)
    return paths
