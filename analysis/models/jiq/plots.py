"""The figures of the JIQ analysis (response, tails, messages, convergence, ordering).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.fit import MIN_FIT_POINTS, SIGNIFICANT_Z
from analysis.fmt import num as _fmt
from analysis.models.jiq.labels import POD, _name

_COLORS = list(style.PALETTE)


def _errorbar(ax, xs, ys, hws, color, log: bool = True, **kw) -> bool:
    """95% bars; on a log axis an interval reaching 0 gets an arrow to the bottom instead."""
    ys, hws = np.asarray(ys, float), np.asarray(hws, float)
    if log:
        return style.errorbar_log(ax, xs, ys, hws, color_=color, fmt="o", ms=4, capsize=2, **kw)
    ax.errorbar(xs, ys, yerr=np.where(np.isfinite(hws), hws, 0.0), fmt="o", ms=4, capsize=2, color=color, **kw)
    return False


def _plot_response(agg: pl.DataFrame, keys: list[str], outdir: Path) -> Path | None:
    sims = agg.filter(pl.col("engine") != "meanfield")
    if "lam" not in agg.columns or sims.height == 0 or sims["lam"].n_unique() < 3:
        return None  # a curve in the load needs 3 loads at least
    n_values = sorted(sims["n_servers"].unique().to_list())[-3:]  # the largest three N
    fig = Figure(figsize=(5.6 * len(n_values), 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes, zero = [], False
    for i, n in enumerate(n_values):
        ax = fig.add_subplot(1, len(n_values), i + 1)
        axes.append(ax)
        ys_all = []
        # at most style.MAX_SERIES policies (each a colour; the sweeps have at most five)
        for j, policy in enumerate(agg["policy"].unique(maintain_order=True).to_list()[: style.MAX_SERIES]):
            c = _COLORS[j % len(_COLORS)]
            s = sims.filter((pl.col("policy") == policy) & (pl.col("n_servers") == n)).sort("lam")
            if s.height:
                zero |= _errorbar(ax, s["lam"], s["mean_response"], s["mean_response_hw"], color=c,
                                  label=f"{_name(policy, s.row(0, named=True))}, simulated (95% CI)")
                ys_all += s["mean_response"].to_list()
            # the mean-field curve of the same arm (every parameter but the load)
            arm = s.row(0, named=True) if s.height else {}
            m = agg.filter(pl.col("engine") == "meanfield", pl.col("policy") == policy,
                           pl.col("n_servers") == n,
                           *[pl.col(k).eq_missing(arm[k]) for k in keys if k not in ("engine", "policy", "n_servers", "lam")]
                           ).sort("lam")
            if m.height:
                ax.plot(m["lam"], m["mean_response"], "-", color=c, lw=1.2,
                        label=f"{_name(policy, m.row(0, named=True))}, mean field")
        style.log_axis(ax, "y", [v for v in ys_all if v is not None] or None)
        ax.set_xlabel("load $\\lambda$ (arrival rate per server; service rate 1)")
        ax.set_ylabel("mean response time (mean service times)")
        ax.set_title(f"N = {n} servers")
        ax.grid(True, which="major", alpha=0.3)
    if zero:
        axes[0].add_line(style.ci_zero_handle())
    style.figure_legend(fig, axes, ncol=2 if len(axes) == 1 else 3)
    path = outdir / "response_vs_load.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_tails(agg: pl.DataFrame, tails: dict, keys: list[str], outdir: Path, max_level: int) -> Path | None:
    sims = agg.filter(pl.col("engine") != "meanfield")
    if sims.height == 0:
        return None
    lams = sorted(sims["lam"].unique().to_list())
    if len(lams) > 3:  # at most three loads: the lowest, a middle one and the highest
        lams = [lams[0], lams[len(lams) // 2], lams[-1]]
    n_max = sims["n_servers"].max()  # one N per panel: the largest (the report has every N)
    varies_r = "r" in sims.columns and sims["r"].drop_nulls().n_unique() > 1
    # at most style.MAX_SERIES series a panel: more go to further rows of panels
    per_lam = {lam: sims.filter((pl.col("lam") == lam) & (pl.col("n_servers") == n_max)) for lam in lams}
    n_rows = max(1, max(-(-r.height // style.MAX_SERIES) for r in per_lam.values()))
    fig = Figure(figsize=(6.4 * len(lams), 4.6 * n_rows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    for i, lam, part in [(i, lam, part) for i, lam in enumerate(lams) for part in range(n_rows)]:
        rows = per_lam[lam].slice(part * style.MAX_SERIES, style.MAX_SERIES)
        if rows.height == 0:
            continue
        ax = fig.add_subplot(n_rows, len(lams), part * len(lams) + i + 1)
        series, cut, zero = 0, 0, False
        for row in rows.iter_rows(named=True):
            key = tuple(row[k] for k in keys)
            if key not in tails:
                continue
            c = _COLORS[series % len(_COLORS)]
            series += 1
            mean, se = tails[key]
            lv = np.arange(1, mean.size + 1)
            pos = mean > 0
            label = _name(row["policy"], row) + (f", r = {_fmt(row['r'])}" if varies_r and row["r"] is not None else "")
            zero |= style.errorbar_log(ax, lv[pos], mean[pos], 1.96 * se[pos], color_=c, fmt="o", ms=3,
                                       capsize=2, label=label)
            if style.tail_is_cut(mean):
                cut = max(cut, mean.size)
            mrow = agg.filter(pl.col("engine") == "meanfield",
                              *[pl.col(k).eq_missing(row[k]) for k in keys if k != "engine"])
            if mrow.height:
                mkey = tuple(mrow.row(0, named=True)[k] for k in keys)
                if mkey in tails:
                    mt = tails[mkey][0]
                    lvm = np.arange(1, mt.size + 1)
                    ax.plot(lvm[mt > 1e-12], mt[mt > 1e-12], "-", color=c, lw=1)
        if cut:
            style.mark_max_level(ax, cut)
        ax.set_ylim(1e-6, 1.5)
        style.log_axis(ax, "y", [1e-6, 1.5])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail"))
        has_mf = (agg["engine"] == "meanfield").any()
        ax.set_title(f"$\\lambda$ = {lam:g}, N = {n_max}\n(points: simulated with 95% CI"
                     + (", lines: mean field)" if has_mf else "; no mean field in this sweep)"), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.legend_outside(ax)
    path = outdir / "tails.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_messages(agg: pl.DataFrame, outdir: Path) -> Path | None:
    sims = agg.filter(pl.col("engine") != "meanfield")
    if sims.height == 0 or "join_rate" not in sims.columns or sims["join_rate"].is_null().all():
        return None
    sims = sims.filter(pl.col("join_rate").is_not_null())
    if sims["lam"].n_unique() < 3:
        return None  # rates against the load need 3 loads at least (the report has the table)
    n = sims["n_servers"].max()
    sims = sims.filter(pl.col("n_servers") == n)
    if "r" in sims.columns and sims["r"].n_unique() > 1:
        sims = sims.filter(pl.col("r") == sims["r"].max())
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (rate, title) in enumerate([("join_rate", "join messages"), ("delete_rate", "delete messages"),
                                        ("probe_rate", "probe messages (2 per probe)")]):
        ax = fig.add_subplot(1, 3, i + 1)
        for j, policy in enumerate(sims["policy"].unique(maintain_order=True).to_list()[: style.MAX_SERIES]):
            s = sims.filter(pl.col("policy") == policy).sort("lam")
            _errorbar(ax, s["lam"], s[rate], s[f"{rate}_hw"], color=_COLORS[j % len(_COLORS)], log=False,
                      label=_name(policy, s.row(0, named=True)) + " (95% CI)")
            ax.plot(s["lam"], s[rate], "-", color=_COLORS[j % len(_COLORS)], lw=0.8)
        ax.set_xlabel("load $\\lambda$ (arrival rate per server; service rate 1)")
        ax.set_ylabel("messages per server per mean service time")
        ax.set_title(f"{title}, N = {n}")
        ax.grid(True, alpha=0.3)
    style.figure_legend(fig, fig.axes, ncol=5)
    path = outdir / "messages.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_convergence(conv: list[dict], outdir: Path) -> Path | None:
    conv = [c for c in conv if len(c["n_values"]) >= MIN_FIT_POINTS]
    if not conv:
        return None
    quantities = ["p0", "mean_response", "s_2"]
    # at most style.MAX_SERIES arms a panel: more go to further rows of panels
    n_rows = max(1, max(-(-len([c for c in conv if c["quantity"] == q]) // style.MAX_SERIES) for q in quantities))
    fig = Figure(figsize=(16, 5.0 * n_rows + 0.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = []
    for i, q, part in [(i, q, part) for i, q in enumerate(quantities) for part in range(n_rows)]:
        rows = [c for c in conv if c["quantity"] == q][part * style.MAX_SERIES:(part + 1) * style.MAX_SERIES]
        if not rows:
            continue
        ax = fig.add_subplot(n_rows, 3, part * 3 + i + 1)
        axes.append(ax)
        for j, c in enumerate(rows):
            col = _COLORS[j % len(_COLORS)]
            ns, g, se = np.array(c["n_values"], float), np.abs(c["gaps"]), np.array(c["gap_se"])
            sig = g > SIGNIFICANT_Z * se
            label = f"{_name(c['policy'], c)} r={_fmt(c.get('r'))} $\\lambda$={_fmt(c.get('lam'))}"
            mk = style.marker(j)
            ax.plot(ns[sig], g[sig], mk, color=col, ms=4, ls="none", label=label)
            ax.plot(ns[~sig], SIGNIFICANT_Z * se[~sig], "v", color=col, ms=4, mfc="none", ls="none")
            if c["slope"] is not None:
                xs = ns[sig]
                # the fitted line through the significant points' geometric centre
                y0 = math.exp(np.mean(np.log(g[sig])) - c["slope"] * np.mean(np.log(xs)))
                ax.plot(*style.fitted_line(xs, math.log(y0), c["slope"]), "-", color=col, lw=1)
        if rows:
            nmin, nmax = min(min(c["n_values"]) for c in rows), max(max(c["n_values"]) for c in rows)
            ref = np.array([nmin, nmax], float)
            top = max(max(np.abs(c["gaps"])) for c in rows)
            ax.plot(ref, top * ref[0] / ref, "k--", lw=1, label="reference slope 1/N")
        ax.plot([], [], "v", color="0.3", mfc="none", ls="none",
                label=f"open triangle: {SIGNIFICANT_Z:g} SE where the gap is not significant (an upper bound)")
        if any(c["slope"] is not None for c in rows):
            ax.plot([], [], "-", color="0.3", lw=1, label="solid line: fitted power law")
        style.log_axis(ax, "x", [v for c in rows for v in c["n_values"]])
        style.log_axis(ax, "y", [v for c in rows for v in np.abs(c["gaps"]).tolist() + (
            SIGNIFICANT_Z * np.array(c["gap_se"])).tolist() if v > 0])
        ax.set_xlabel("number of servers N")
        names = {"p0": "$|p_0 - p_0^{MF}|$ (fraction of I-queues)",
                 "mean_response": "|mean response time \u2212 mean field| (mean service times)",
                 "s_2": "$|s_2 - s_2^{MF}|$ (fraction of servers)"}
        titles = {"p0": "gap of $p_0$, the fraction of empty I-queues",
                  "mean_response": "gap of the mean response time",
                  "s_2": "gap of $s_2$, the fraction of servers with \u2265 2 tasks"}
        ax.set_ylabel(names[q])
        ax.set_title(titles[q], fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    style.figure_legend(fig, axes, ncol=3)
    path = outdir / "convergence.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_ordering(agg: pl.DataFrame, res: dict, outdir: Path) -> Path | None:
    """Each policy's mean response over JIQ-Po2's at the same load: mean-field curves (solid) and
    simulated points with 95% intervals (the ratio's interval from both SEs, to first order);
    a crossing of the line 1 is a crossover with JIQ-Po2."""
    if not res or not (res.get("mf") or res.get("sim")):
        return None
    fig = Figure(figsize=(9.5, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    pols = agg["policy"].unique(maintain_order=True).to_list()[: style.MAX_SERIES]
    for j, p in enumerate(pols):
        c = _COLORS[j % len(_COLORS)]
        mf = [o for o in res.get("mf", []) if p in o["values"] and POD in o["values"]]
        if mf:
            ax.plot([o["lam"] for o in mf], [o["values"][p] / o["values"][POD] for o in mf], "-",
                    color=c, lw=1.3, label=f"{_name(p, {'d': 2})}, mean field")
        sm = [o for o in res.get("sim", []) if p in o["values"] and POD in o["values"]]
        if sm and p != POD:
            xs = np.array([o["lam"] for o in sm])
            ratio = np.array([o["values"][p] / o["values"][POD] for o in sm])
            rel = np.array([math.hypot(o["se"][p] / o["values"][p], o["se"][POD] / o["values"][POD])
                            for o in sm])
            ax.errorbar(xs, ratio, yerr=1.96 * rel * ratio, fmt=style.marker(j), ms=4, capsize=2, color=c,
                        ls="none", label=f"{_name(p, {'d': 2})}, simulated (95% CI)")
    ax.axhline(1.0, color="0.2", lw=0.8, ls="--")
    ax.set_yscale("log")
    style.log_axis(ax, "y", [0.8, 4.0])
    ax.set_xlabel("load $\\lambda$ (arrival rate per server; service rate 1)")
    ax.set_ylabel("mean response time / JIQ-Po2's at the same load")
    n = agg["n_servers"].max() if "n_servers" in agg.columns else None
    ax.set_title(f"Mean response time relative to JIQ-Po2 (dashed line: equal), N = {n} simulated, r = "
                 f"{_fmt(agg['r'].max() if 'r' in agg.columns else None)}; below 1: faster than JIQ-Po2", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    style.legend_outside(ax)
    path = outdir / "ordering_vs_load.png"
    fig.savefig(path, dpi=120)
    return path
