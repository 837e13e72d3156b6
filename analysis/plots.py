"""PNG figures of a sweep: estimate vs N, |gap| vs N with the fitted power law, tails at the largest N.

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas directly (no
pyplot, no global backend switch), so this is safe in headless and multi-threaded drivers.
One figure per policy; inside it, one panel per arm (at most 12 panels a figure; more arms
continue in ``..._part2.png`` etc.). Labels, colours and axis rules come from
:mod:`analysis.style` (words with units, a colour-blind-safe palette, at most as many series in
a panel as it has colours, log axes whose labels never overlap, integer ticks on integer axes,
intervals that reach 0 on a log axis marked, tails cut at ``max_level`` marked).

When the scaling variable ``x`` takes one value only (a sweep over the load at fixed N), the
estimate figure is drawn against the parameter that does vary instead (file name
``<metric>_vs_<that parameter>_<policy>.png``): one point per panel tells a reader nothing.
"""
from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.aggregate import LIMIT_ENGINES, check_params
from analysis.fit import arm_columns, point_significant
from analysis.fmt import value as _fmt

__all__ = ["make_plots", "plot_estimates", "plot_gaps", "plot_tails", "arm_label", "REFINED_ENGINES"]

_PANELS_PER_FIGURE = 12
#: a fit whose reduced chi-square exceeds this misses its own points by several SEs (one power
#: law does not describe them): its legend entry gives the rate and the chi-square, and no line is
#: drawn (a line through points it misses would show a trend the points do not have)
POOR_FIT_CHI2 = 3.0
_TAIL_FLOOR = 1e-12  # tail levels below this in every curve are not drawn
#: run-length parameters: never the x axis of a figure in place of N
_RUN_LENGTH = frozenset({"events", "time", "T", "cap"})
#: variables drawn on a linear axis whatever their range (a load is read linearly)
_LINEAR_X = frozenset({"lam"})
#: engines whose rows are a corrected limit (the refined mean field, 1/N terms): not a simulated
#: series on the gap plot; :func:`_draw_refined` is where their line goes
REFINED_ENGINES: tuple[str, ...] = ("refined",)
#: how each limit engine's curve is drawn (the mean field dashed black; the refined mean field,
#: which depends on N, dotted grey with markers, so that the two are never confused)
_LIMIT_STYLE = {"meanfield": {"ls": "--", "color": "black"},
                "refined": {"ls": ":", "color": "0.4", "marker": "x", "ms": 4}}


def _limit_style(engine: str) -> dict:
    return _LIMIT_STYLE.get(engine, {"ls": "-.", "color": "0.3"})


def arm_label(row: dict, arm_params: Sequence[str]) -> str:
    """``"lam=0.9, d=2"`` for the arm parameters of ``row`` (``"all"`` without any)."""
    parts = [f"{p}={_fmt(row[p])}" for p in arm_params]
    return ", ".join(parts) if parts else "all"


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


def _split_params(arms: list[dict], arm_params: Sequence[str]) -> tuple[list[str], list[str]]:
    """(parameters that differ between the arms: panel titles, those that do not: the caption)."""
    varying, fixed = [], []
    for p in arm_params:
        (varying if len({a.get(p) for a in arms}) > 1 else fixed).append(p)
    return varying, fixed


def _caption(fig: Figure, row: dict, fixed: Sequence[str], prefix: str = "",
             engines: Sequence[str] = ()) -> None:
    text = style.param_text(row, fixed, engines)
    text = f"{prefix}{'; ' if prefix and text else ''}{'fixed: ' + text if text else ''}"
    if text:
        fig.suptitle("\n".join(textwrap.wrap(text, 150)), fontsize=8)


def _grid(n: int, width: float = 4.4, height: float = 3.4, ncols: int = 3):
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows + 0.6), dpi=110, layout="constrained")
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


def _x_axis(ax, x: str, values, engines: Sequence[str]) -> None:
    """Log x for a positive variable over more than one value (integer-valued: plain integer
    labels); a single value gets a single tick; integer-valued linear axes integer ticks."""
    xs = np.asarray(values, dtype=float)
    xs = xs[np.isfinite(xs)]
    ax.set_xlabel(style.label(x, engines))
    if xs.size == 0:
        return
    uniq = np.unique(xs)
    if uniq.size == 1:
        ax.set_xticks(uniq)
        ax.set_xticklabels([_fmt(float(uniq[0])) if not style.is_integer_valued(uniq) else str(int(uniq[0]))])
        ax.set_xlim(uniq[0] * 0.9 if uniq[0] > 0 else uniq[0] - 1, uniq[0] * 1.1 if uniq[0] > 0 else uniq[0] + 1)
        return
    if x not in _LINEAR_X and xs.min() > 0 and xs.max() / xs.min() >= 8:
        style.log_axis(ax, "x", xs)
    elif uniq.size <= 6 and style.is_integer_valued(uniq) and x not in _LINEAR_X:
        ax.set_xticks(uniq)  # a few integers (N = 500, 1000) on a linear axis: a tick at each
        ax.set_xticklabels([str(int(v)) for v in uniq])
    elif style.is_integer_valued(xs):
        style.integer_axis(ax, "x")


def _plot_x(data: pl.DataFrame, params: Sequence[str], x: str, arm_params: Sequence[str]) -> str:
    """``x``, unless it has a single value in every arm and some arm parameter varies: then the
    parameter with the most values (an axis of the sweep)."""
    if x in data.columns and data[x].n_unique() > 1:
        return x
    best, n_best = x, 1
    for p in arm_params:
        if p in _RUN_LENGTH or p not in data.columns or not data[p].dtype.is_numeric():
            continue  # a run length derived from the load is not the axis of a sweep
        n = data[p].n_unique()
        if n > n_best or (n == n_best > 1 and p == "lam"):
            best, n_best = p, n
    return best


def _positive_spread(values) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and v.min() > 0 and v.max() / v.min() > 30


def _policies(agg: pl.DataFrame, data: pl.DataFrame, params, x: str, arm_params):
    """The policies of ``data`` (the rows of ``agg`` with the estimate drawn) that get figures,
    in order: yields ``(policy, its rows, xp, arm columns, arms, varying, fixed)``, where ``xp``
    is the x-axis drawn (``x``, or the arm parameter with the most values where ``x`` has a
    single one; the panels are then by the other arm parameters, one curve per value of
    ``xp``). A policy with limits only is passed over where the sweep simulates (a trajectory
    sweep simulates no such estimate: no figure of limits alone)."""
    simulated = agg.filter((pl.col("n_rep") >= 1) & ~pl.col("engine").is_in(list(LIMIT_ENGINES))).height > 0
    if arm_params is None:
        arm_params = arm_columns(data, params, x)
    xp = _plot_x(data, params, x, arm_params)
    if xp != x:
        arm_params = [p for p in arm_columns(data, params, xp) if p != x]
    for policy in sorted(data["policy"].unique().to_list()):
        pol = data.filter(pl.col("policy") == policy)
        if simulated and pol.filter(~pl.col("engine").is_in(list(LIMIT_ENGINES))).height == 0:
            continue
        all_arms = _arms(pol, arm_params)
        yield (policy, pol, xp, arm_params, all_arms, *_split_params(all_arms, arm_params))


def plot_estimates(
    agg: pl.DataFrame,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
    rules: style.RuleStyles | None = None,
) -> list[Path]:
    """Per policy: ``metric`` vs ``x`` per arm; simulation with CI error bars, mean field dashed.

    If ``x`` has a single value (e.g. a sweep over the load at fixed N), the figure is drawn
    against the arm parameter with the most values instead (see the module docstring).
    A simulated series takes its rule's colour (``rules``, :func:`rule_styles`: the same in
    every figure of the run); two simulation engines in one panel differ by marker and line.
    """
    outdir = Path(outdir)
    data = agg.filter(pl.col("n_rep") >= 1).filter(pl.col(metric).is_not_null())
    if data.height == 0:
        return []
    engines_all = data["engine"].unique().to_list()
    paths = []
    for policy, pol, xp, arm_params, all_arms, varying, fixed in _policies(agg, data, params, x, arm_params):
        if rules is None:
            rules = rule_styles(data, arm_params)
        # one y scale for every panel of the policy: log when a load sweep spans decades
        log_y = xp != x and _positive_spread(pol[metric].to_numpy())
        for part, arms in _chunks(all_arms, _PANELS_PER_FIGURE):
            fig, axes = _grid(len(arms))
            for ax, arm in zip(axes, arms):
                sub = _match(pol, arm, arm_params).sort(xp)
                n_sim = 0
                for engine in sorted(sub["engine"].unique().to_list()):
                    e = sub.filter(pl.col("engine") == engine)
                    xs = e[xp].cast(pl.Float64).to_numpy()
                    ys = e[metric].to_numpy()
                    if engine in LIMIT_ENGINES:
                        kw = _limit_style(engine)
                        # a limit along a path (lam, k, d change with N): each point at that
                        # N's own parameters, and the label says so
                        moving = [c for c in params if c in e.columns and c not in (xp, x) and c not in _RUN_LENGTH
                                  and e[c].n_unique() > 1]
                        name = style.engine_name(engine)
                        if moving:  # one wording for every panel: one legend entry
                            name += f" at each {style.symbol(xp, engines_all)}'s own parameters (a path)"
                        if np.ptp(ys) <= 1e-12 * max(1.0, abs(ys[0])) and engine not in REFINED_ENGINES:
                            ax.axhline(ys[0], lw=1.2, label=name,
                                       **{k: v for k, v in kw.items() if k in ("ls", "color")})
                        else:
                            ax.plot(xs, ys, lw=1.2, label=name, **kw)
                        continue
                    c = _series_color(rules, arm, arm_params, n_sim, xp != x)
                    mk, ls = _ENGINE_MARKS[n_sim % len(_ENGINE_MARKS)]
                    n_sim += 1
                    lo = e[f"{metric}_lo"].fill_null(np.nan).to_numpy()
                    hi = e[f"{metric}_hi"].fill_null(np.nan).to_numpy()
                    yerr = np.nan_to_num(np.vstack([ys - lo, hi - ys]), nan=0.0)
                    ax.errorbar(xs, ys, yerr=yerr, fmt=f"{mk}{ls}", ms=4, capsize=3, color=c, label="_nolegend_")
                    # the figure's one legend in grey: the colour is each panel's rule
                    ax.plot([], [], f"{mk}{ls}", ms=4, color="0.3", label=f"{style.engine_name(engine)} (95% CI)")
                _x_axis(ax, xp, sub[xp].cast(pl.Float64).to_numpy(), engines_all)
                ys_all = sub[metric].to_numpy()
                if log_y:
                    # estimates over a load sweep span decades: log y; an interval reaching 0
                    # is drawn as an arrow to the bottom of the panel
                    style.log_axis(ax, "y", ys_all)
                    for j, engine in enumerate(sorted(e for e in sub["engine"].unique().to_list()
                                                      if e not in LIMIT_ENGINES)):
                        e = sub.filter((pl.col("engine") == engine) & (pl.col(f"{metric}_lo") <= 0))
                        if e.height:
                            style.mark_ci_to_zero(ax, e[xp].cast(pl.Float64).to_numpy(), e[metric].to_numpy(),
                                                  _series_color(rules, arm, arm_params, j, xp != x))
                            ax.plot([], [], **_zero_kw())
                title = style.policy_name(policy)
                if varying:
                    title += ": " + style.param_text(arm, varying, engines_all)
                ax.set_title(title, fontsize=9)
                ax.set_ylabel(style.label(metric, engines_all))
                ax.grid(True, which="major", alpha=0.3)
            style.figure_legend(fig, axes)
            _caption(fig, arms[0], fixed, engines=engines_all)
            paths.append(_save(fig, outdir, f"{metric}_vs_{_slug(xp)}_{_slug(policy)}", part))
    return paths


def _zero_kw() -> dict:
    h = style.ci_zero_handle()
    return {"color": h.get_color(), "lw": h.get_linewidth(), "ls": h.get_linestyle(),
            "marker": h.get_marker(), "ms": h.get_markersize(), "label": style.CI_ZERO_LABEL}


#: how the simulation engines of one panel differ when they share their rule's colour
_ENGINE_MARKS: tuple[tuple[str, str], ...] = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."))


def rule_styles(rows: pl.DataFrame, arm_params: Sequence[str]) -> style.RuleStyles:
    """The colour of each rule (:func:`analysis.style.rule_of`) in every figure of a run, from
    its simulated rows (limits take the colour of the rule they belong to)."""
    sims = rows.filter(~pl.col("engine").is_in(list(LIMIT_ENGINES))) if "engine" in rows.columns else rows
    cols = [c for c in arm_params if c in sims.columns]
    return style.RuleStyles.from_rows(sims.select(list(dict.fromkeys(cols))).unique() if cols else sims.head(0), arm_params)


def _series_color(rules: style.RuleStyles | None, arm: dict, arm_params: Sequence[str], i: int,
                  own_axis: bool) -> str:
    """The rule's colour of a panel's series; where the x axis is itself a parameter of the arm
    (a load sweep drawn against lam) the panel is not one rule: the i-th palette colour."""
    if rules is None or own_axis:
        return style.color(i)
    return rules.color(style.rule_of(arm, arm_params))


def _draw_refined(ax, refined: pl.DataFrame, x: str, metric: str, mf_value: float | None,
                  color, first: bool) -> bool:
    """The refined mean field's predicted gap ``refined - meanfield`` (= V/N to first order,
    engine ``refined``, docs/refined.md) of one series, as a dotted line of its colour over the
    N where the sweep has refined rows. Returns whether a line was drawn."""
    if refined is None or refined.height == 0 or mf_value is None or metric not in refined.columns:
        return False
    r = refined.filter(pl.col(metric).is_not_null()).sort(x)
    if r.height < 2:
        return False
    xs = r[x].cast(pl.Float64).to_numpy()
    g = np.abs(r[metric].to_numpy() - mf_value)
    ax.plot(xs, g, ":", color=color, lw=1.6,
            label="refined mean field: predicted gap V/N (dotted)" if first else "_nolegend_")
    return True


def plot_gaps(
    cmp: pl.DataFrame,
    fits: pl.DataFrame | None,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
    refined: pl.DataFrame | None = None,
    rules: style.RuleStyles | None = None,
) -> list[Path]:
    """Per policy: ``|gap|`` vs ``x`` on log-log axes, one series per (engine, arm), fitted lines.

    Filled markers: significant points (``|gap| > 2 se`` and the 95% CI excludes 0: the points
    the fit uses); hollow: not significant. Error bars are the 95% CI of the gap; where the
    interval reaches 0 the lower bar is an arrow to the bottom of the panel. Each fitted line
    is drawn over the range of the points it was fitted on only (:func:`analysis.style.fitted_line`,
    never across the axis), with a reference slope 1/N (dashed black) beside it; no line where
    the significant gaps have both signs (not one power law), and the reduced chi-square in the
    legend where it is above :data:`POOR_FIT_CHI2`. At most
    ``style.MAX_SERIES`` series per panel: more are split into panels by an arm parameter.
    A series takes its rule's colour and marker (``rules``, :func:`rule_styles`); engines of one
    rule in a panel differ by marker.
    Rows of ``REFINED_ENGINES`` are not series; they go to :func:`_draw_refined`: those of
    ``refined`` (the aggregate's refined rows, as :func:`make_plots` passes them), else any in ``cmp``.
    """
    outdir = Path(outdir)
    gcol = f"{metric}_gap"
    if cmp.height == 0 or gcol not in cmp.columns:
        return []
    data = cmp.filter(pl.col(gcol).is_not_null() & (pl.col(gcol) != 0.0))
    if refined is None:
        refined = data.filter(pl.col("engine").is_in(list(REFINED_ENGINES)))
    data = data.filter(~pl.col("engine").is_in(list(REFINED_ENGINES)))
    if data.height == 0:
        return []
    if arm_params is None:
        arm_params = arm_columns(cmp, params, x)
    engines_all = data["engine"].unique().to_list()
    if rules is None:
        rules = rule_styles(data, arm_params)
    paths = []
    for policy in sorted(data["policy"].unique().to_list()):
        pol = data.filter(pl.col("policy") == policy)
        keys = ["engine", *arm_params]
        series = pol.select(keys).unique().sort(keys, nulls_last=True).to_dicts()
        varying, fixed = _split_params(series, keys)
        panels = style.split_series(series, [p for p in varying if p != "engine"])
        fig, axes = _grid(len(panels), width=7.6 if len(panels) > 1 else 9.0, height=4.2, ncols=2)
        fig.set_figheight(fig.get_figheight() + 0.25 * (len(series) + 4) / 2)  # room for the legend
        any_zero = False
        for ax, (held, group) in zip(axes, panels):
            shown = [p for p in varying if p not in held]
            xs_panel, g_panel = [], []
            refined_drawn = False
            n_engines = len({s["engine"] for s in group})
            for i, s in enumerate(group):
                sub = _match(pol, s, keys).sort(x)
                rule = style.rule_of(s, arm_params)
                color, mk = rules.color(rule), rules.marker(rule)
                if n_engines > 1:  # one rule drawn by several engines: the marker tells them apart
                    mk = _ENGINE_MARKS[sorted({g["engine"] for g in group}).index(s["engine"])][0]
                xs = sub[x].cast(pl.Float64).to_numpy()
                xd = style.dodge(xs, i, len(group)) if len(group) > 1 else xs  # drawn at
                g = np.abs(sub[gcol].to_numpy())
                se = sub[f"{metric}_gap_se"].fill_null(np.nan).to_numpy()
                hw_raw = sub[f"{metric}_gap_hw"].fill_null(np.nan).to_numpy()
                hw = np.nan_to_num(hw_raw, nan=0.0)
                sig = np.isfinite(se) & (se > 0) & point_significant(g, se, hw_raw)
                to_zero = hw >= g  # the 95% interval of |gap| reaches 0
                lower = np.where(to_zero, 0.0, hw)
                # the figure's one legend spans every panel: a series names its panel's values too
                named = [p for p in keys if p in held or p in shown] if len(panels) > 1 else shown
                label = style.param_text(s, named, engines_all) or style.engine_name(s["engine"])
                if "engine" not in shown and len(engines_all) > 1:
                    label = f"{style.engine_name(s['engine'])}: {label}"
                fit = None
                if fits is not None and fits.height and all(k in fits.columns for k in keys):
                    f = _match(fits.filter(pl.col("policy") == policy), s, keys)
                    if f.height and f["slope"][0] is not None:
                        fit = f.row(0, named=True)
                        if fit.get("sign") == "mixed":  # |gap| of both signs: not one power law
                            label += "; no fit line (significant gaps of both signs)"
                            fit = None
                        else:
                            label += f"; fit N^{fit['slope']:.2f} [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}]"
                            if (fit.get("red_chi2") or 0.0) > POOR_FIT_CHI2:
                                label += f", \u03c7\u00b2/dof {fit['red_chi2']:.3g}: no line (not one power law)"
                                fit = None
                ax.errorbar(xd, g, yerr=np.vstack([lower, hw]), fmt="none", ecolor=color, capsize=2, lw=0.8)
                # one legend entry per series: on its filled markers, or its hollow ones if none
                ax.plot(xd[sig], g[sig], mk, color=color, ms=5, ls="none",
                        label=label if sig.any() else "_nolegend_")
                ax.plot(xd[~sig], g[~sig], mk, mfc="none", color=color, ms=5, ls="none",
                        label=label if not sig.any() else "_nolegend_")
                if to_zero.any():
                    any_zero = True
                    style.mark_ci_to_zero(ax, xd[to_zero], g[to_zero], color)
                if fit is not None:  # over the N it was fitted on only
                    ax.plot(*style.fitted_line([fit["x_min"], fit["x_max"]], fit["intercept"], fit["slope"]),
                            "-", color=color, lw=1.2)
                if refined is not None and refined.height:
                    rkeys = [k for k in arm_params if k in refined.columns and k != "engine"]
                    mf = sub[f"{metric}_mf"].drop_nulls() if f"{metric}_mf" in sub.columns else None
                    drew = _draw_refined(ax, _match(refined.filter(pl.col("policy") == policy), s, rkeys),
                                         x, metric, float(mf[0]) if mf is not None and mf.len() else None,
                                         color, not refined_drawn)
                    refined_drawn = refined_drawn or drew
                xs_panel.extend(xs.tolist())
                g_panel.extend(g.tolist())
            xs_panel = np.asarray(xs_panel, float)
            style.reference_slope(ax, xs_panel, g_panel, -1.0, "reference slope 1/N" if x == "n_servers"
                                  else f"reference slope 1/{style.symbol(x, engines_all)}")
            if any_zero:
                ax.plot([], [], **_zero_kw())
            ax.plot([], [], "o", color="0.3", ms=5, label="filled: significant (fitted); hollow: not")
            if len(group) > 1:
                ax.plot([], [], " ", label="series offset slightly in x to stay visible")
            gvals = np.abs(pol[gcol].to_numpy())
            style.log_axis(ax, "y", np.concatenate([gvals, gvals + np.nan_to_num(
                pol[f"{metric}_gap_hw"].fill_null(0.0).to_numpy())]))
            if np.unique(xs_panel).size > 1 and xs_panel.min() > 0:
                style.log_axis(ax, "x", xs_panel)
            else:  # a single N: one tick at it
                _x_axis(ax, x, xs_panel, engines_all)
            ax.set_xlabel(style.label(x, engines_all))
            ax.set_ylabel(style.gap_label(metric, engines_all))
            title = f"{style.policy_name(policy)}: |gap| to the mean field"
            if held:
                title += f" ({style.param_text(held, list(held), engines_all)})"
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        # one legend below the panels: beside them it took half the figure's width
        style.figure_legend(fig, axes, ncol=2)
        _caption(fig, series[0], [p for p in fixed if p != "engine"],
                 prefix=style.engine_name(series[0]["engine"]) if "engine" in fixed else "",
                 engines=engines_all)
        paths.append(_save(fig, outdir, f"gap_{metric}_vs_{_slug(x)}_{_slug(policy)}", 0))
    return paths


def plot_tails(
    agg: pl.DataFrame,
    params: Sequence[str],
    outdir: Path,
    x: str = "n_servers",
    arm_params: Sequence[str] | None = None,
    rules: style.RuleStyles | None = None,
) -> list[Path]:
    """Per policy and arm: the simulated tail ``s_i`` at the largest simulated ``x`` (log y),
    against the mean field at that simulation's own point (:func:`_limit_at`: the limit row
    with the same parameters, at the same ``x`` where the limit has rows along ``x``); a limit
    row with other parameters is drawn only with its own point in the label, never as the
    simulation's mean field.

    Levels are integers (integer ticks); a tail still positive at its last recorded level (the
    run's ``max_level``) is cut there, and a dotted line at that level says so. When ``x`` has
    a single value, the panel of an arm holds one curve per value of the varying parameter
    instead (a mean-field curve dashed in the colour of its simulated one), at most
    ``style.MAX_SERIES`` of them.
    """
    outdir = Path(outdir)
    data = agg.filter((pl.col("n_rep") >= 1) & pl.col("tail").is_not_null())
    engines_all = data["engine"].unique().to_list()
    if data.height == 0:
        return []
    paths = []
    for policy, pol, xp, arm_params, all_arms, varying, fixed in _policies(agg, data, params, x, arm_params):
        if xp != x:  # arms x chunks of at most MAX_SERIES values of xp
            values = sorted(pol[xp].drop_nulls().unique().to_list())
            n_chunks = -(-len(values) // style.MAX_SERIES)  # balanced: 9 values -> 5 + 4
            size = -(-len(values) // n_chunks) if values else 1
            chunks = [values[i:i + size] for i in range(0, len(values), size)]
            panels = [(arm, ch) for arm in all_arms for ch in chunks]
        else:
            panels = [(arm, None) for arm in all_arms]
        for part, group in _chunks(panels, _PANELS_PER_FIGURE):
            # a legend beside each panel when the curves are values of xp: wider panels
            fig, axes = _grid(len(group)) if xp == x else _grid(len(group), width=7.8, height=4.0, ncols=2)
            for ax, (arm, vals) in zip(axes, group):
                sub = _match(pol, arm, arm_params)
                curves = []  # (engine, value of x or xp, tail, colour index or None)
                limit_label: dict[str, str] = {}
                engines = sorted(sub["engine"].unique().to_list(), key=lambda e: (e in LIMIT_ENGINES, e))
                sim_last = None  # the simulated row the limits are drawn at
                for engine in engines:
                    e = sub.filter(pl.col("engine") == engine)
                    if vals is None:
                        if engine in LIMIT_ENGINES:
                            last, limit_label[engine] = _limit_at(e, sim_last, x, params, engines_all)
                        else:
                            last = e.sort(x).row(e.height - 1, named=True)
                            if sim_last is None or last[x] > sim_last[x]:
                                sim_last = last
                        curves.append((engine, last[x], np.asarray(last["tail"], dtype=float), None))
                    else:
                        for j, v in enumerate(vals):
                            r = e.filter(pl.col(xp) == v)
                            if r.height:
                                last = r.sort(x).row(r.height - 1, named=True)
                                curves.append((engine, v, np.asarray(last["tail"], dtype=float), j))
                if not curves:
                    ax.set_visible(False)
                    continue
                top = max(
                    (int(np.nonzero(t > _TAIL_FLOOR)[0].max()) + 1 if np.any(t > _TAIL_FLOOR) else 1)
                    for _, _, t, _ in curves
                )
                cut = 0
                n_sim = 0
                for engine, xv, tail, j in curves:
                    levels = np.arange(1, tail.size + 1)[:top]
                    t = tail[:top].copy()
                    t[t <= 0] = np.nan  # log axis
                    if tail.size <= top and style.tail_is_cut(tail, _TAIL_FLOOR):
                        cut = max(cut, tail.size)
                    limit = engine in LIMIT_ENGINES
                    # a tail of one level (a buffer of 1: no server holds 2 tasks) is a point: larger
                    ms = 7 if np.isfinite(t).sum() == 1 else None
                    if j is None:
                        if limit:
                            kw = {"marker": "s", "mfc": "none", "ms": ms or 4, **_limit_style(engine)}
                            ax.plot(levels, t, lw=1.2, label=limit_label.get(engine, style.engine_name(engine)), **kw)
                        else:
                            mk, ls = _ENGINE_MARKS[n_sim % len(_ENGINE_MARKS)]
                            ax.plot(levels, t, f"{mk}{ls}", color=_series_color(rules, arm, arm_params, n_sim, False),
                                    ms=ms or 3, label="_nolegend_")
                            # the figure's one legend: in grey (the colour is the panel's rule)
                            ax.plot([], [], f"{mk}{ls}", color="0.3", ms=3,
                                    label=f"{style.engine_name(engine)}, {style.symbol(x, engines_all)} = {_fmt(xv)}")
                            n_sim += 1
                    else:
                        lab = f"{style.symbol(xp, engines_all)} = {_fmt(xv)}"
                        if limit:
                            ls = _limit_style(engine)["ls"]
                            ax.plot(levels, t, ls=ls, color=style.color(j), lw=1.1, label=f"_{lab}")
                        else:
                            ax.plot(levels, t, f"{style.marker(j)}-", color=style.color(j), ms=3, label=lab)
                if vals is not None:
                    sims = sorted({c[0] for c in curves if c[0] not in LIMIT_ENGINES})
                    for eng in sorted({c[0] for c in curves if c[0] in LIMIT_ENGINES}):
                        ls = _limit_style(eng)["ls"]
                        ax.plot([], [], ls=ls, color="0.3",
                                label=("dashed: " if ls == "--" else "dotted: " if ls == ":" else "")
                                + style.engine_name(eng))
                    if sims:
                        ax.plot([], [], "o-", color="0.3", ms=3,
                                label="markers: " + ", ".join(style.engine_name(e) for e in sims))
                if cut:
                    style.mark_max_level(ax, cut)
                shown = np.concatenate([t[:top] for _, _, t, _ in curves])
                shown = shown[np.isfinite(shown) & (shown > 0)]
                if shown.size:  # keep the axis readable: nothing below 1e-12 is drawn
                    lo = max(shown.min(), _TAIL_FLOOR) / 2
                    ax.set_ylim(lo, 1.2)  # a fraction: no tick above 1 is labelled
                    style.log_axis(ax, "y", [lo, 1.0])
                else:
                    style.log_axis(ax, "y", [_TAIL_FLOOR, 1.0])
                style.integer_axis(ax, "x")
                if vals is None and not any(c[0] in LIMIT_ENGINES for c in curves) and any(
                        e in LIMIT_ENGINES for e in pol["engine"].unique().to_list()):
                    ax.text(0.03, 0.04, "no mean field at this point", transform=ax.transAxes, fontsize=7,
                            color="0.3")
                if top < 2:  # one level: an axis of two levels, not a sliver around 1
                    ax.set_xlim(0.5, 2.5)
                    ax.set_xticks([1, 2])
                    if any(t.size > 1 and np.all(t[1:] <= _TAIL_FLOOR) for _, _, t, _ in curves):
                        ax.text(0.97, 0.95, "$s_i$ = 0 for i ≥ 2\n(not on the log axis)", transform=ax.transAxes,
                                ha="right", va="top", fontsize=7, color="0.3")
                ax.set_xlabel(style.label("level"))
                ax.set_ylabel(style.label("tail"))
                title = style.policy_name(policy)
                if varying:
                    title += ": " + style.param_text(arm, varying, engines_all)
                ax.set_title(title, fontsize=9)
                ax.grid(True, which="major", alpha=0.3)
                if vals is not None:
                    style.legend_outside(ax)
            if xp == x:
                style.figure_legend(fig, axes, ncol=3)
            sx, sxp = style.symbol(x, engines_all), style.symbol(xp, engines_all)
            prefix = (f"tail at the largest simulated {sx}, the mean field at the same point" if xp == x
                      else f"tail at {sx} = {_fmt(pol[x][0])}, one curve per {sxp}"
                      if pol[x].n_unique() == 1 else f"tail at the largest {sx}")
            _caption(fig, group[0][0], fixed, prefix=prefix, engines=engines_all)
            paths.append(_save(fig, outdir, f"tail_{_slug(policy)}", part))
    return paths


def _limit_at(rows: pl.DataFrame, sim: dict | None, x: str, params: Sequence[str],
               engines: Sequence[str] = ()) -> tuple[dict, str]:
    """The limit row of one arm to draw beside the simulated row ``sim``, and its legend label.

    The limit at the simulation's own point: equal on every parameter both rows carry (but the
    run length), ``x`` included where the limit has a row there (a mean field along a path
    whose lam, k and d change with N has one at every simulated N). Where no row has the
    simulation's parameters, the limit's last row, labelled with the parameters that differ:
    it is another point, and the label says which."""
    name = style.engine_name(rows["engine"][0]) if rows.height else "limit"
    ordered = rows.sort(x, nulls_last=True)
    if sim is None:
        return ordered.row(ordered.height - 1, named=True), name
    cols = [c for c in params if c in rows.columns and c not in _RUN_LENGTH and c != x and sim.get(c) is not None
            and rows[c].null_count() < rows.height]
    same = _match(ordered, sim, cols)
    if same.height:
        here = same.filter(pl.col(x) == sim[x]) if x in same.columns and same[x].null_count() < same.height \
            else same.head(0)
        row = here.row(0, named=True) if here.height else same.row(same.height - 1, named=True)
        return row, f"{name} at the simulation's parameters"
    last = ordered.row(ordered.height - 1, named=True)
    other = [c for c in [x, *cols] if last.get(c) is not None and last.get(c) != sim.get(c)]
    return last, f"{name} at another point: {style.param_text(last, other, engines)} (not the simulation's)"


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
    dashed (against the varying parameter instead when ``x`` has one value); (b)
    ``gap_<metric>_vs_<x>_<policy>.png``: ``|gap|`` vs ``x`` log-log with the fitted lines and
    a reference slope 1/N; (c) ``tail_<policy>.png``: ``s_i`` at the largest ``x``, simulation
    vs mean field.  Figures without data (e.g. no mean-field rows: no gap plot) are skipped.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = check_params(agg, params, x)
    if arm_params is None:
        arm_params = arm_columns(agg.filter(pl.col("n_rep") >= 1), params, x)
    # one colour per rule in every figure of the run (the zero-queueing figures build theirs
    # from the same simulated rows: analysis.models.zero_queueing.arms)
    rules = rule_styles(agg.filter(pl.col("n_rep") >= 1), arm_params)
    paths = plot_estimates(agg, params, outdir, x=x, metric=metric, arm_params=arm_params, rules=rules)
    refined = agg.filter(pl.col("engine").is_in(list(REFINED_ENGINES))) if "engine" in agg.columns else None
    paths += plot_gaps(cmp, fits, params, outdir, x=x, metric=metric, arm_params=arm_params, refined=refined,
                       rules=rules)
    paths += plot_tails(agg, params, outdir, x=x, arm_params=arm_params, rules=rules)
    return paths
