"""The figures of the centralization analysis (tails, v_1, distance against N, i*).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from analysis import style
from analysis.models.centralization.fit import SIM_ENGINES
from analysis.models.centralization.theory import (
    FIG31_LAM,
    FIG31_P,
    LAM_TABLE,
    _istar_cell,
    invariant_mean_queue,
    invariant_tail,
    predicted_slope,
    top_level,
)

_TAIL_FLOOR = 1e-7


# ---------------------------------------------------------------------------------------------
# figures


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _pick_p(ps: set, target: float):
    for p in ps:
        if math.isclose(p, target, abs_tol=1e-12):
            return p
    return None


def plot_tails(points: list[dict], outdir: Path) -> Path:
    sims = [r for r in points if r["engine"] in SIM_ENGINES and r["tail"].size]
    lams = []
    for lam in sorted({r["lam"] for r in sims}):
        ps = {r["p"] for r in sims if r["lam"] == lam}
        if _pick_p(ps, 0.0) is not None or _pick_p(ps, FIG31_P) is not None:
            lams.append(lam)
    others = [lam for lam in lams if lam != FIG31_LAM][-3:]
    lams = [FIG31_LAM] + others
    cols = 1 if len(lams) == 1 else 2
    rows = -(-len(lams) // cols)
    fig = Figure(figsize=(6.4 * cols, 4.6 * rows + 0.8), layout="constrained")
    axes = [fig.add_subplot(rows, cols, k + 1) for k in range(len(lams))]
    colors = {0.0: style.color(0), FIG31_P: style.color(1)}
    any_zero = False
    for ax, lam in zip(axes, lams):
        k_max = 100
        cut_here = 0
        for p, marker in ((0.0, "*"), (FIG31_P, "D")):
            inv = invariant_tail(lam, p, k_max)
            i = np.arange(1, k_max + 1)
            keep = inv > _TAIL_FLOOR
            # the closed form is drawn for i <= k_max (it may go on above)
            ax.plot(i[keep], inv[keep], "-", color=colors[p], lw=0.8, marker=marker, ms=3,
                    label=f"invariant (closed form, i \u2264 {k_max}), p = {p:g}")
            for engine, mk in zip(SIM_ENGINES, ("o", "s")):
                cand = [r for r in sims if r["engine"] == engine and r["lam"] == lam
                        and math.isclose(r["p"], p, abs_tol=1e-12)]
                if not cand:
                    continue
                r = max(cand, key=lambda r: r["n_servers"])
                t, se = r["tail"], r["tail_se"]
                j = np.arange(1, t.size + 1)
                hw = np.nan_to_num(se * (stats.t.ppf(0.975, r["n_rep"] - 1) if r["n_rep"] > 1 else 1.96))
                # 95% bars where the interval stays above 0; where it reaches 0, the upper bar
                # and an arrow to the bottom of the panel (the log axis cannot show 0)
                shown = t > _TAIL_FLOOR
                zero = shown & (hw >= t)
                ax.errorbar(j[shown], t[shown], yerr=[np.where(zero, 0.0, hw)[shown], hw[shown]], fmt=mk,
                            ms=4, mfc="none", color=colors[p],
                            label=f"{engine} simulation, N = {r['n_servers']}, p = {p:g} (95% CI)")
                if zero.any():
                    any_zero = True
                    style.mark_ci_to_zero(ax, j[zero], t[zero], colors[p], lw=0.5)
                if style.tail_is_cut(t, _TAIL_FLOOR):
                    cut_here = max(cut_here, t.size)
        if cut_here:
            style.mark_max_level(ax, cut_here)
        ax.set_ylim(_TAIL_FLOOR, 1.5)
        style.log_axis(ax, "y", [_TAIL_FLOOR, 1.5])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail_central"))
        title = (f"\u03bb = {lam:g}" + (" (Figure 3.1)" if lam == FIG31_LAM else "")
                 + f"; p = {FIG31_P:g}: i* = {top_level(lam, FIG31_P)}")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    if any_zero:
        axes[0].add_line(style.ci_zero_handle())
    _figure_legend(fig, axes, ncol=2)
    return _save(fig, outdir / "central_tails.png")


def _figure_legend(fig: Figure, axes, ncol: int = 3) -> None:
    """One legend below the panels (never over the data), each label once."""
    seen: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=7,
                   ncol=ncol, frameon=False)


def plot_v1(points: list[dict], slopes: list[dict], outdir: Path) -> Path:
    fig = Figure(figsize=(12, 6.2), layout="constrained")
    ax, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    sims = [r for r in points if r["engine"] in SIM_ENGINES]
    ps = sorted({r["p"] for r in points} | {0.0, FIG31_P})
    grid = 1.0 - np.logspace(np.log10(0.5), -4, 300)
    x = 1.0 / (1.0 - grid)
    cmap = {p: c for p, c in zip(ps, ["black", *style.PALETTE])}
    for p in ps:
        c = cmap.get(p, "gray")
        v = [invariant_mean_queue(lam, p) for lam in grid]
        line = ":" if p == 0 else "-"
        label = "p = 0: \u03bb/(1 \u2212 \u03bb)" if p == 0 else f"p = {p:g}: invariant v\u2081 (closed form)"
        for a in (ax, ax2):
            a.plot(x, v, line, color=c, lw=1.3, label=label)
        if 0 < p < 1:
            # Corollary 3 gives the leading term only (v_1 / that term -> 1, with an O(1/p)
            # offset): drawn with the predicted slope, through the closed form at lam = 1 - 1e-4
            ref = invariant_mean_queue(1.0 - 1e-4, p)
            far = x >= 100.0
            asym = ref + (np.log(x[far]) - math.log(1e4)) * predicted_slope(p)
            for a in (ax, ax2):
                a.plot(x[far], asym, "--", color=c, lw=0.8, alpha=0.7,
                       label=f"p = {p:g}: asymptote, slope 1/log(1/(1\u2212p)) in log(1/(1\u2212\u03bb))")
        for engine, mk in zip(SIM_ENGINES, ("o", "s")):
            cand = [r for r in sims if r["engine"] == engine and r["p"] == p]
            if not cand:
                continue
            n_max = max(r["n_servers"] for r in cand)
            pts = sorted([r for r in cand if r["n_servers"] == n_max], key=lambda r: r["lam"])
            xs = [1.0 / (1.0 - r["lam"]) for r in pts]
            for a in (ax, ax2):
                a.errorbar(xs, [r["mean_queue"] for r in pts],
                           yerr=np.nan_to_num([r["mean_queue_hw"] for r in pts]), fmt=mk, ms=4,
                           mfc="none", color=c, label=f"{engine} simulation, N = {n_max}, p = {p:g} (95% CI)")
    style.log_axis(ax, "x", x)
    ax.set_ylim(0, 1.1 * max([invariant_mean_queue(grid[-1], p) for p in ps if p > 0] + [10.0]))
    ax.set_title("v\u2081 against the load (Figure 3.2)")
    style.log_axis(ax2, "x", x)
    style.log_axis(ax2, "y", [1e-2, 1e4])
    ax2.set_title("same, log y: p = 0 grows like 1/(1 \u2212 \u03bb), p > 0 like its log")
    for a in (ax, ax2):
        a.set_xlabel("1/(1 \u2212 \u03bb) (load \u03bb; log scale)")
        a.set_ylabel("v\u2081: mean queue length (tasks per station)")
        a.grid(True, which="major", alpha=0.3)
    _figure_legend(fig, [ax], ncol=3)
    return _save(fig, outdir / "central_v1_vs_load.png")


#: more (engine, lam, p) arms than this: the compact distance figure (one panel per engine and p)
_DISTANCE_PANELS_MAX = 12


def _plot_distance_compact(dist_rows: list[dict], arms: list[dict], outdir: Path) -> Path:
    """Many arms (e.g. a load sweep at two N): one panel per (engine, p), one series per load
    (at most ``style.MAX_SERIES`` a panel), the sup distance only (bars 2 se; an arrow where
    d - 2 se <= 0) with each arm's fitted line; the l1 and v_1 references are in the report."""
    groups: dict = {}
    for arm in arms:
        groups.setdefault((arm["engine"], arm["p"]), []).append(arm)
    panels = [(k, g[i:i + style.MAX_SERIES]) for k, g in sorted(groups.items())
              for i in range(0, len(g), style.MAX_SERIES)]
    cols = min(2, len(panels))
    nrows = -(-len(panels) // cols)
    fig = Figure(figsize=(7.4 * cols, 4.0 * nrows + 0.4), layout="constrained")
    for k, ((engine, p), group) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, k + 1)
        ns_all, d_all, zero_any = [], [], False
        for j, arm in enumerate(sorted(group, key=lambda a: a["lam"])):
            pts = sorted([r for r in dist_rows if (r["engine"], r["lam"], r["p"])
                          == (arm["engine"], arm["lam"], arm["p"])], key=lambda r: r["n_servers"])
            ns = style.dodge([r["n_servers"] for r in pts], j, len(group))
            d = np.array([r["sup"] for r in pts])
            se = np.nan_to_num(np.array([r["sup_se"] for r in pts]))
            sig = np.array([r["sup_significant"] for r in pts])
            c, mk = style.color(j), style.marker(j)
            zero_any |= style.errorbar_log(ax, ns, d, 2 * se, color_=c, fmt="none", capsize=2, lw=0.8)
            ax.plot(ns[sig], d[sig], mk, color=c, ms=5, ls="none",
                    label=f"\u03bb = {arm['lam']:g}" if sig.any() else "_nolegend_")
            ax.plot(ns[~sig], d[~sig], mk, mfc="none", color=c, ms=5, ls="none",
                    label=f"\u03bb = {arm['lam']:g}" if not sig.any() else "_nolegend_")
            if arm.get("sup_slope") is not None:
                ax.plot(*style.fitted_line(arm["sup_fit_n"], arm["sup_intercept"], arm["sup_slope"]), "-",
                        color=c, lw=1)
            ns_all += [r["n_servers"] for r in pts]
            d_all += d.tolist()
        style.reference_slope(ax, ns_all, d_all, -1.0, "reference slope 1/N")
        if zero_any:
            ax.add_line(style.ci_zero_handle())
        ax.plot([], [], "o", color="0.3", ms=5, ls="none",
                label="filled: sup over significant levels; hollow: plain sup (bars: 2 se)")
        style.log_axis(ax, "x", ns_all)
        style.log_axis(ax, "y", [v for v in d_all if v > 0] or None)
        ax.set_xlabel(style.label("n_servers"))
        ax.set_ylabel(style.label("distance"))
        ax.set_title(f"{engine} simulation, p = {p:g}: sup distance (l1 and v\u2081 gaps: report)", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax, fontsize=6.5)
    return _save(fig, outdir / "central_distance_vs_N.png")


def plot_distance(dist_rows: list[dict], arms: list[dict], outdir: Path) -> Path | None:
    if not arms:
        return None
    if len(arms) > _DISTANCE_PANELS_MAX:
        return _plot_distance_compact(dist_rows, arms, outdir)
    n = len(arms)
    cols = min(3, n)
    nrows = -(-n // cols)
    fig = Figure(figsize=(4.8 * cols, 3.9 * nrows + 1.0), layout="constrained")
    axes = []
    for k, arm in enumerate(arms):
        ax = fig.add_subplot(nrows, cols, k + 1)
        axes.append(ax)
        pts = sorted([r for r in dist_rows if (r["engine"], r["lam"], r["p"])
                      == (arm["engine"], arm["lam"], arm["p"])], key=lambda r: r["n_servers"])
        ns = np.array([r["n_servers"] for r in pts], dtype=float)
        d = np.array([r["sup"] for r in pts])
        se = np.nan_to_num(np.array([r["sup_se"] for r in pts]))
        sig = np.array([r["sup_significant"] for r in pts])
        blue, orange = style.color(0), style.color(1)
        # bars: 2 se; where d - 2 se <= 0 the lower bar is an arrow to the bottom (log axis)
        zero = (2 * se >= d) & (d > 0)
        low = np.where(zero, 0.0, 2 * se)
        ax.errorbar(ns[sig], d[sig], yerr=[low[sig], 2 * se[sig]], fmt="o", color=blue,
                    label="sup over significant levels (bar: 2 se)")
        ax.errorbar(ns[~sig], d[~sig], yerr=[low[~sig], 2 * se[~sig]], fmt="o", mfc="none", color=blue,
                    label="plain sup, no level significant")
        if zero.any():
            style.mark_ci_to_zero(ax, ns[zero], d[zero], blue)
            ax.add_line(style.ci_zero_handle())
        ax.plot(ns, [r["l1"] for r in pts], "s", mfc="none", color="0.45", ms=4, label="l1 distance (reference)")
        ax.plot(ns, [r["l1_floor"] for r in pts], ":", color="0.45", label="l1 noise floor")
        g = np.abs([r["v1_gap"] for r in pts])
        ax.plot(ns, g, "^", mfc="none", color=orange, ms=4, label="|v\u2081 gap| (tasks per station)")
        if arm.get("sup_slope") is not None:
            ax.plot(*style.fitted_line(arm["sup_fit_n"], arm["sup_intercept"], arm["sup_slope"]), "-", color=blue,
                    label=f"fit N^{arm['sup_slope']:.2f} [{arm['sup_slope_lo']:.2f}, {arm['sup_slope_hi']:.2f}]")
        style.reference_slope(ax, ns, d, -1.0, "reference slope 1/N")
        style.log_axis(ax, "x", ns)
        vals = np.concatenate([d, d + 2 * se, g, [r["l1"] for r in pts]])
        style.log_axis(ax, "y", vals[np.isfinite(vals) & (vals > 0)])
        ax.set_xlabel(style.label("n_servers"))
        ax.set_ylabel(style.label("distance"))
        ax.set_title(f"{arm['engine']} simulation, \u03bb = {arm['lam']:g}, p = {arm['p']:g}", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        # the fitted line's label differs per panel: a legend in the panel for it alone
        fit_lines = [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels()) if lab.startswith("fit N^")]
        if fit_lines:
            ax.legend(*zip(*fit_lines), fontsize=6, loc="lower left")
    seen: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith(("_", "fit N^")) and lab not in seen:
                seen[lab] = h
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=7, ncol=3, frameon=False)
    return _save(fig, outdir / "central_distance_vs_N.png")


def plot_istar(table: list[list], outdir: Path) -> Path:
    fig = Figure(figsize=(1.0 + 0.85 * len(LAM_TABLE), 0.5 + 0.35 * (len(table) + 1)))
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    cells = [[f"{r[0]:g}"] + [_istar_cell(lam, r[0]) for lam in LAM_TABLE] for r in table]
    tab = ax.table(cellText=cells, colLabels=["p \\ \u03bb"] + [f"{lam:g}" for lam in LAM_TABLE],
                   loc="center", cellLoc="center")
    tab.scale(1, 1.3)
    ax.set_title("i*(p, lam) = floor(log_{lam/(1-p)} (p/(1-lam))) (Table 3.1, closed form)\n"
                 "+: degenerate, s_{i*} = 0 (central server without spare capacity at the top)",
                 fontsize=9)
    return _save(fig, outdir / "central_istar_table.png")
