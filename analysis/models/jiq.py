"""Distributed Join-the-Idle-Queue (Wang, Feng & Cheng): response against load, tails, messages,
and the convergence of the simulations to the mean field as N grows.

Reads result frames only (the mean field is the ``meanfield`` engine's rows of the same sweep).
Per point (policy, engine and every parameter), replications are combined by
:func:`analysis.aggregate.aggregate` (t over replications); tails per level likewise.

What it writes (``outdir``):

- ``response_vs_load.png`` -- mean response time against the load, one panel per N, simulation
  with 95% intervals beside the mean-field curve (their Figures 4, 5, 8); the report's table
  gives each policy's value at lam = 0.98 beside the paper's reading and the maximum relative
  error of the simulation against the prediction per (policy, N) (their Figure 5: 3.4% at
  N = 1000).
- ``tails.png`` -- the tail s_i on a log axis, simulated and predicted (their Table II / Figure 7),
  with a table of relative errors per level.
- ``messages.png`` -- join, delete and probe messages per server per unit time against the load
  (their Figure 6 counts join and delete requests: deletes at most about 8% of them at lam = 0.9).
- ``convergence.png`` -- when N takes at least 4 values: the gap of the simulated p0, mean
  response and s_2 to the mean field against N, per arm, with the fitted power law.

Convergence verdict rule (also in docs/jiq.md), per arm and quantity: the gap at each N is
significant when ``|gap| > 4 SE`` (SE over replications). With at least 4 significant points,
``log|gap| = a + b log N`` is fitted by weighted least squares on them (:func:`analysis.fit.wls_loglog`):
``converges`` if the 95% interval of b lies below 0, ``not converging`` if it lies at or above 0,
else ``inconclusive``. With fewer than 4 significant points: ``consistent`` (the gap is within
4 SE from the N given on; an O(1/N) gap falls below the SE at large N, so no rate can be fitted)
-- or ``inconclusive`` when no point at all is within 4 SE.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.aggregate import aggregate, check_params
from analysis.fit import MIN_FIT_POINTS, SIGNIFICANT_Z, gap_rate_verdict

__all__ = ["analyze_jiq", "PAPER_FIG4", "convergence_table", "SIGNIFICANT_Z", "MIN_FIT_POINTS"]

#: the paper's Figure 4 at lam = 0.98, r = 10, d = 2 (read off the plot, as its text states)
PAPER_FIG4 = {"pod": 4.5, "jiq": 5.3, "jiq_pod": 2.6}
PAPER_FIG4_LAM = 0.98
#: the paper's Figure 6: deletes at most about this share of join + delete requests at lam = 0.9
PAPER_FIG6_DELETE_SHARE = 0.08

RATES = ("join_rate", "delete_rate", "probe_rate")
METRICS = ("mean_response", "p0", "mean_iqueue", *RATES)
_COLORS = list(style.PALETTE)


def _name(policy: str, row: dict | None = None) -> str:
    """The policy's declared label (analysis.style.policy_name) with its d and z: ``JIQ-Po3``,
    ``power-of-2``, ``JIQ-threshold (z=1)``."""
    name = style.policy_name(policy, None if row is None else row.get("model"),
                             None if row is None else row.get("engine"))
    if row is not None and row.get("d") is not None:
        name = style.with_d(name, row["d"])
    if row is not None and policy == "jiq_threshold" and row.get("z") is not None:
        name += f" (z={row['z']})"
    return name


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _pct(v, sign: bool = True) -> str:
    if v is None:
        return "-"
    return f"{100 * v:+.2f}%" if sign else f"{100 * v:.1f}%"


def _tail_stats(ok: pl.DataFrame, keys: list[str], levels: int) -> dict:
    """(point key) -> (mean tail, SE of the mean over replications or the run's SE) per level."""
    out = {}
    for grp in ok.partition_by(keys, as_dict=False, maintain_order=True):
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if not tails:
            continue
        m = min(levels, min(len(t) for t in tails))
        arr = np.array([t[:m] for t in tails], dtype=float)
        mean = arr.mean(axis=0)
        if arr.shape[0] >= 2:
            se = arr.std(axis=0, ddof=1) / math.sqrt(arr.shape[0])
        elif "tail_se" in grp.columns and grp["tail_se"][0] is not None:
            se = np.asarray(grp["tail_se"][0][:m], dtype=float)
        else:
            se = np.zeros(m)
        key = tuple(grp.row(0, named=True)[k] for k in keys)
        out[key] = (mean, se)
    return out


def convergence_table(agg: pl.DataFrame, tails: dict, keys: list[str], x: str = "n_servers") -> list[dict]:
    """Per arm (policy and every parameter but N) and quantity: gaps to the mean field, fit and
    verdict by the rule in the module docstring."""
    sims = agg.filter(pl.col("engine") != "meanfield")
    mf = agg.filter(pl.col("engine") == "meanfield")
    arm_keys = [k for k in keys if k not in ("engine", x)]
    rows = []
    for arm in sims.select(arm_keys + ["engine"]).unique(maintain_order=True).iter_rows(named=True):
        pts = sims.filter(*[pl.col(k).eq_missing(arm[k]) for k in arm_keys + ["engine"]]).sort(x)
        limit = mf.filter(*[pl.col(k).eq_missing(arm[k]) for k in arm_keys])
        if pts.height == 0 or limit.height == 0:
            continue
        lim = limit.row(0, named=True)
        lim_tail = tails.get(tuple(lim[k] for k in keys))
        for q in ("p0", "mean_response", "s_2"):
            ns, gaps, ses = [], [], []
            for p in pts.iter_rows(named=True):
                if q == "s_2":
                    t = tails.get(tuple(p[k] for k in keys))
                    if t is None or lim_tail is None or len(t[0]) < 2 or len(lim_tail[0]) < 2:
                        continue
                    est, se, truth = float(t[0][1]), float(t[1][1]), float(lim_tail[0][1])
                else:
                    est, se, truth = p[q], p[f"{q}_se"], lim[q]
                if est is None or se is None or truth is None:
                    continue
                ns.append(p[x]), gaps.append(est - truth), ses.append(se)
            if not ns:
                continue
            rows.append({**{k: arm[k] for k in arm_keys}, "engine": arm["engine"], "quantity": q,
                         **gap_rate_verdict(np.array(ns, float), np.array(gaps), np.array(ses))})
    return rows


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
                ax.plot(xs, y0 * xs ** c["slope"], "-", color=col, lw=1)
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


def analyze_jiq(frame, params, outdir, sweep_name: str = "") -> dict:
    """The JIQ analysis of a sweep's rows (see the module docstring): tables, plots, verdicts."""
    df = frame.collect() if isinstance(frame, pl.LazyFrame) else frame
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    # the run length is not part of a point here (meanfield rows have none; sweeps may derive
    # it from N): drop it, so that a simulated point meets its mean-field row
    params = [p for p in check_params(df, params) if p not in ("events", "time")]
    ok = df.filter(pl.col("status") == "ok") if "status" in df.columns else df
    keys = ["policy", "engine", *params]
    present = [m for m in METRICS if m in ok.columns]
    agg = aggregate(ok, params, metrics=present)
    max_level = max((len(t) for t in ok["tail"].to_list() if t is not None), default=0)
    tails = _tail_stats(ok, keys, max_level)
    lines = [f"# Distributed JIQ: {sweep_name}", ""]

    # --- mean response against load, the paper's Figure 4 values and Figure 5 relative errors
    sims = agg.filter(pl.col("engine") != "meanfield")
    mf = agg.filter(pl.col("engine") == "meanfield")
    on = [k for k in ["policy", *params] if k in agg.columns]
    cmp = sims.join(mf.select([*on, pl.col("mean_response").alias("mf")]), on=on, how="left",
                    nulls_equal=True)
    cmp = cmp.with_columns(((pl.col("mean_response") - pl.col("mf")) / pl.col("mf")).alias("rel_err"))
    lines += ["## Mean response time against the load", "",
              "| policy | engine | N | lam | simulated (95% CI) | mean field | relative error |",
              "|---|---|---|---|---|---|---|"]
    for r in cmp.sort(["policy", "engine", "n_servers", "lam"]).iter_rows(named=True):
        lines.append(f"| {_name(r['policy'], r)} | {r['engine']} | {r['n_servers']} | {_fmt(r['lam'])} | "
                     f"{r['mean_response']:.4f} +- {_fmt(r['mean_response_hw'])} | {_fmt(r['mf'])} | "
                     f"{_pct(r['rel_err'])} |")
    lines += ["", "Maximum relative error of the simulation against the mean field, per policy and N "
              "(the paper's Figure 5: 3.4% at N = 1000):", ""]
    for r in (cmp.filter(pl.col("rel_err").is_not_null())
              .group_by(["policy", "engine", "n_servers"], maintain_order=True)
              .agg(pl.col("rel_err").abs().max().alias("max_rel"),
                   pl.col("lam").sort_by(pl.col("rel_err").abs()).last().alias("at_lam"))
              .sort(["policy", "n_servers"]).iter_rows(named=True)):
        lines.append(f"- {_name(r['policy'])} [{r['engine']}], N = {r['n_servers']}: "
                     f"{100 * r['max_rel']:.2f}% (at lam = {r['at_lam']:g})")
    at98 = agg.filter((pl.col("lam") - PAPER_FIG4_LAM).abs() < 1e-9) if "lam" in agg.columns else agg.head(0)
    if at98.height and any(p in PAPER_FIG4 for p in at98["policy"].to_list()):
        lines += ["", f"At lam = {PAPER_FIG4_LAM} (the paper's Figure 4 reads, for r = 10 and d = 2: "
                  + ", ".join(f"{_name(p)} {v}" for p, v in PAPER_FIG4.items()) + "):", ""]
        for r in at98.filter(pl.col("policy").is_in(list(PAPER_FIG4))).sort(["policy", "engine"]).iter_rows(named=True):
            lines.append(f"- {_name(r['policy'], r)} [{r['engine']}, N = {r['n_servers']}, r = {_fmt(r.get('r'))}]: "
                         f"{r['mean_response']:.3f} (paper: {PAPER_FIG4[r['policy']]})")

    # --- tails: relative error per level (Table II)
    lines += ["", "## Tails: simulated against the mean field (relative error per level)", ""]
    for r in sims.sort(["policy", "n_servers", "lam"]).iter_rows(named=True):
        key = tuple(r[k] for k in keys)
        m = mf.filter(*[pl.col(k).eq_missing(r[k]) for k in on if k != "engine"])
        if key not in tails or m.height == 0:
            continue
        mkey = tuple(m.row(0, named=True)[k] for k in keys)
        if mkey not in tails:
            continue
        s, _ = tails[key]
        t = tails[mkey][0]
        cells = []
        for i in range(min(6, s.size, t.size)):
            if t[i] > 1e-6:
                cells.append(f"s_{i + 1} {s[i]:.4g} vs {t[i]:.4g} ({100 * (s[i] - t[i]) / t[i]:+.1f}%)")
        lines.append(f"- {_name(r['policy'], r)} [{r['engine']}] N = {r['n_servers']}, lam = {_fmt(r['lam'])}: "
                     + "; ".join(cells))

    # --- messages (Figure 6)
    if "delete_rate" in sims.columns and not sims["delete_rate"].is_null().all():
        lines += ["", "## Messages per server per unit time (one-way messages; a probe counts 2)", "",
                  "| policy | N | lam | join | delete | probe | deletes / (joins + deletes) |", "|---|---|---|---|---|---|---|"]
        for r in sims.filter(pl.col("join_rate").is_not_null()).sort(["policy", "n_servers", "lam"]).iter_rows(named=True):
            req = (r["join_rate"] or 0.0) + (r["delete_rate"] or 0.0)
            share = (r["delete_rate"] or 0.0) / req if req > 0 else None
            lines.append(f"| {_name(r['policy'], r)} | {r['n_servers']} | {_fmt(r['lam'])} | {_fmt(r['join_rate'])} | "
                         f"{_fmt(r['delete_rate'])} | {_fmt(r['probe_rate'])} | "
                         f"{_pct(share, sign=False)} |")
        lines += ["", f"(The paper's Figure 6: at lam = 0.9 deletes are at most about "
                  f"{100 * PAPER_FIG6_DELETE_SHARE:.0f}% of the requests under JIQ.)"]

    # --- convergence in N
    conv = convergence_table(agg, tails, keys) if agg["n_servers"].n_unique() >= MIN_FIT_POINTS else []
    if conv:
        lines += ["", "## Convergence to the mean field as N grows", "",
                  f"Rule: a gap is significant when |gap| > {SIGNIFICANT_Z:g} SE; with at least {MIN_FIT_POINTS} "
                  "significant points log|gap| is fitted on log N (docs/jiq.md).", "",
                  "| policy | engine | r | lam | quantity | significant / points | verdict | detail |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in conv:
            lines.append(f"| {_name(c['policy'], c)} | {c['engine']} | {_fmt(c.get('r'))} | {_fmt(c.get('lam'))} | "
                         f"{c['quantity']} | {c['n_significant']} / {len(c['n_values'])} | {c['verdict']} | {c['note']} |")

    plots = [p for p in (_plot_response(agg, keys, outdir), _plot_tails(agg, tails, keys, outdir, max_level),
                         _plot_messages(agg, outdir), _plot_convergence(conv, outdir)) if p is not None]
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    report = outdir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (outdir / "convergence.json").write_text(json.dumps(conv, indent=1, default=str))
    # (key, value, step, arm): MLflow puts each on the child runs of its arm (pipeline.mlflow_log)
    metrics = []
    for r in cmp.filter(pl.col("rel_err").is_not_null()).iter_rows(named=True):
        route = {k: r[k] for k in ("policy", "engine", "lam", "r", "d", "z", "variant")
                 if r.get(k) is not None}
        metrics.append(("jiq_rel_err", float(r["rel_err"]), int(r["n_servers"]), route))
    lines = []
    for c in conv:  # the console lines of the verdicts (pipeline.run prints them)
        parts = " ".join(f"{k}={style.short(c[k])}" for k in ("r", "lam", "d", "z") if c.get(k) is not None)
        lines.append(f"{c['policy']} [{c['engine']}] {parts}: gap of {c['quantity']} to the mean "
                     f"field as N grows: {c['verdict']}" + (f" ({c['note']})" if c.get("note") else ""))
    return {"report": report, "plots": plots, "metrics": metrics, "convergence": conv,
            "verdict_lines": lines}


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
ANALYSES = {"jiq": analyze_jiq}
