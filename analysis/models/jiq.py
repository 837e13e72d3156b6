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
from scipy import stats

from analysis import style
from analysis.aggregate import aggregate, check_params
from analysis.fit import MIN_FIT_POINTS, SIGNIFICANT_Z, gap_rate_verdict
from analysis.fmt import num as _fmt
from analysis.fmt import pct as _pct

__all__ = ["analyze_jiq", "PAPER_FIG4", "PAPER_TABLE2", "convergence_table", "q_table", "orderings",
           "crossovers", "SIGNIFICANT_Z", "MIN_FIT_POINTS"]

#: the paper's Figure 4 at lam = 0.98, r = 10, d = 2 (read off the plot, as its text states)
PAPER_FIG4 = {"pod": 4.5, "jiq": 5.3, "jiq_pod": 2.6}
PAPER_FIG4_LAM = 0.98
#: the paper's Figure 6: deletes at most about this share of join + delete requests at lam = 0.9
PAPER_FIG6_DELETE_SHARE = 0.08
#: the paper's Table II as its text keeps it: the largest relative error of the prediction,
#: 3.3%, for JIQ at N = 500, at q_5 (the table's body, its r and its load are lost)
PAPER_TABLE2 = {"policy": "jiq", "n_servers": 500, "level": 5, "max_rel_err": 0.033}
#: q_0..Q_LEVELS_MAX are tabulated (Table II quotes q_5)
Q_LEVELS_MAX = 6
#: the largest relative error is taken over the levels whose mean-field q_i is at least this:
#: below it a run of N = 500 servers sees less than one server in two there on average, and
#: the relative error of a probability of order 1e-7 (JIQ-Po2's q_5 at lam = 0.9) says nothing
Q_MIN_FOR_MAX = 1e-3
#: the heavy loads of Figure 7's comparison ("the lightest tail in the heavy workload region")
HEAVY_LAM = 0.9
#: Figure 7's three policies (d = 2, z = 1) and the levels compared
FIG7_POLICIES = ("jiq_pod", "jiq_threshold", "jiq_sqd")
FIG7_LEVELS = (2, 3, 4, 5)

RATES = ("join_rate", "delete_rate", "probe_rate")
METRICS = ("mean_response", "p0", "mean_iqueue", *RATES, "lu_mean_response")
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


def q_table(ok: pl.DataFrame, keys: list[str], on: list[str], levels: int = Q_LEVELS_MAX) -> list[dict]:
    """Table II as printed: q_i = s_i - s_{i+1} (q_0 = 1 - s_1), the fraction of servers with
    exactly i tasks, per simulated point beside the mean field row of the same arm.

    The simulated q_i is the mean over replications of each replication's own q_i (the
    difference is taken inside a run, where s_i and s_{i+1} are strongly correlated, so the SE
    is that of the difference); the interval is t with R - 1 degrees of freedom. Returns one dict
    per point and level: ``sim, se, hw, mf, rel_err = (sim - mf) / mf, rel_hw = hw / mf,
    z = (sim - mf) / se``."""
    sims = ok.filter(pl.col("engine") != "meanfield")
    mfs = ok.filter(pl.col("engine") == "meanfield")
    out = []
    for grp in sims.partition_by(keys, as_dict=False, maintain_order=True):
        row = grp.row(0, named=True)
        lim = mfs.filter(*[pl.col(k).eq_missing(row[k]) for k in on if k != "engine" and k in mfs.columns])
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if lim.height == 0 or not tails or lim["tail"][0] is None:
            continue
        m = min(levels + 1, min(len(t) for t in tails), len(lim["tail"][0]))
        # q_i from s_0 = 1, s_1, ..., s_m (the last tabulated q needs s_{i+1})
        s_sim = np.array([[1.0, *t[:m]] for t in tails], dtype=float)
        s_mf = np.array([1.0, *lim["tail"][0][:m]], dtype=float)
        q_sim = s_sim[:, :-1] - s_sim[:, 1:]
        q_mf = s_mf[:-1] - s_mf[1:]
        r = q_sim.shape[0]
        mean = q_sim.mean(axis=0)
        se = q_sim.std(axis=0, ddof=1) / math.sqrt(r) if r >= 2 else np.full(mean.size, np.nan)
        tq = stats.t.ppf(0.975, r - 1) if r >= 2 else np.nan
        for i in range(mean.size):
            mf = float(q_mf[i])
            rel = (mean[i] - mf) / mf if mf > 0 else None
            out.append({**{k: row[k] for k in keys}, "level": i, "n_rep": r, "sim": float(mean[i]),
                        "se": float(se[i]), "hw": float(tq * se[i]), "mf": mf, "rel_err": rel,
                        "rel_hw": float(tq * se[i] / mf) if mf > 0 else None,
                        "z": float((mean[i] - mf) / se[i]) if se[i] > 0 else None})
    return out


def _q_report(qs: list[dict]) -> list[str]:
    """The report's Table II section: q_i per point (simulated with 95% CI, mean field, relative
    error), the largest relative error over q_0..q_5 per point, and the paper's 3.3% beside it."""
    if not qs:
        return []
    pts = {}
    for q in qs:
        pts.setdefault((q["policy"], q["n_servers"], q.get("lam"), q.get("r"), q.get("d")), []).append(q)
    n_lv = max(len(v) for v in pts.values())
    head = " | ".join(f"q_{i}" for i in range(n_lv))
    lines = ["", "## Table II as printed: q_i, the fraction of servers with exactly i tasks", "",
             "q_i = s_i - s_{i+1} (q_0 = 1 - s_1), from the `tail` column of each replication; "
             "simulated: mean over the replications, 95% t interval; mean field: the meanfield row. "
             "Relative error = (simulated - mean field) / mean field, with the 95% half-width of "
             "the simulated value over the mean-field value.", "",
             f"| policy | N | r | lam | source | {head} |", "|---|---|---|---|---|" + "---|" * n_lv]
    for (pol, n, lam, r, d), v in sorted(pts.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        name = _name(pol, {"d": d if pol != "jiq" else None})
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | simulated ({v[0]['n_rep']} runs) | "
                     + " | ".join(f"{q['sim']:.4g} +- {q['hw']:.2g}" for q in v) + " |")
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | mean field | "
                     + " | ".join(f"{q['mf']:.4g}" for q in v) + " |")
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | relative error | "
                     + " | ".join("-" if q["rel_err"] is None else
                                  f"{100 * q['rel_err']:+.2f}% +- {100 * q['rel_hw']:.2f}%" for q in v) + " |")
    top = PAPER_TABLE2["level"]
    lines += ["", f"Largest |relative error| over q_0..q_{top} per point (the paper's Table II: "
              f"{100 * PAPER_TABLE2['max_rel_err']:.1f}% at q_{top} for JIQ at N = "
              f"{PAPER_TABLE2['n_servers']}; its r and load are lost in the extraction), over the "
              f"levels whose mean-field q_i is at least {Q_MIN_FOR_MAX:g}:", "",
              "| policy | N | r | lam | largest |relative error| | at | its z = gap / SE | paper |",
              "|---|---|---|---|---|---|---|---|"]
    for (pol, n, lam, r, d), v in sorted(pts.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        cand = [q for q in v if q["level"] <= top and q["rel_err"] is not None and q["mf"] >= Q_MIN_FOR_MAX]
        if not cand:
            continue
        w = max(cand, key=lambda q: abs(q["rel_err"]))
        paper = (f"{100 * PAPER_TABLE2['max_rel_err']:.1f}% (q_{top})"
                 if pol == PAPER_TABLE2["policy"] and n == PAPER_TABLE2["n_servers"] else "-")
        lines.append(f"| {_name(pol, {'d': d if pol != 'jiq' else None})} | {n} | {_fmt(r)} | {_fmt(lam)} | "
                     f"{100 * abs(w['rel_err']):.2f}% | q_{w['level']} | {_fmt(w['z'])} | {paper} |")
    return lines


def orderings(agg: pl.DataFrame, sim: bool, metric: str = "mean_response") -> list[dict]:
    """Per load (and every other parameter), the policies sorted by ``metric`` (smallest first).
    ``sim``: the simulated points (adjacent policies whose difference is within 1.96 of its SE,
    sqrt(se_a^2 + se_b^2), are marked as tied, ``~``), else the meanfield rows (exact)."""
    part = agg.filter((pl.col("engine") != "meanfield") if sim else (pl.col("engine") == "meanfield"))
    part = part.filter(pl.col(metric).is_not_null())
    if part.height == 0:
        return []
    others = [c for c in ("n_servers", "r", "d", "z") if c in part.columns]
    out = []
    for grp in part.partition_by(["lam"], as_dict=False, maintain_order=True):
        rows = sorted(grp.iter_rows(named=True), key=lambda r: r[metric])
        text = _name(rows[0]["policy"], rows[0])
        for a, b in zip(rows, rows[1:]):
            se = math.hypot(a.get(f"{metric}_se") or 0.0, b.get(f"{metric}_se") or 0.0)
            tied = sim and b[metric] - a[metric] <= 1.96 * se
            text += (" ~ " if tied else " < ") + _name(b["policy"], b)
        out.append({"lam": rows[0]["lam"], "order": [r["policy"] for r in rows], "text": text,
                    "values": {r["policy"]: r[metric] for r in rows},
                    "se": {r["policy"]: r.get(f"{metric}_se") or 0.0 for r in rows},
                    **{c: rows[0].get(c) for c in others}})
    return sorted(out, key=lambda o: o["lam"])


def crossovers(ords: list[dict], sim: bool) -> list[dict]:
    """Loads where two policies change places: for each pair, between consecutive loads where the
    sign of their difference changes, the crossing by linear interpolation of the difference.
    With ``sim``, only sign changes significant on both sides (|difference| > 1.96 SE) count,
    and the others are listed as ``unresolved`` (the two are within their CIs there)."""
    out = []
    if len(ords) < 2:
        return out
    pols = sorted(set.intersection(*[set(o["values"]) for o in ords]))
    for i, a in enumerate(pols):
        for b in pols[i + 1:]:
            for o1, o2 in zip(ords, ords[1:]):
                d1 = o1["values"][a] - o1["values"][b]
                d2 = o2["values"][a] - o2["values"][b]
                if d1 == 0 or d2 == 0 or (d1 > 0) == (d2 > 0):
                    continue
                lam = o1["lam"] + (o2["lam"] - o1["lam"]) * d1 / (d1 - d2)
                sig = True
                if sim:
                    se1 = math.hypot(o1["se"][a], o1["se"][b])
                    se2 = math.hypot(o2["se"][a], o2["se"][b])
                    sig = abs(d1) > 1.96 * se1 and abs(d2) > 1.96 * se2
                low, high = (a, b) if d1 < 0 else (b, a)  # low is the smaller below the crossing
                out.append({"below": low, "above": high, "lam": lam, "between": (o1["lam"], o2["lam"]),
                            "significant": sig})
    return sorted(out, key=lambda c: c["lam"])


def _ordering_report(agg: pl.DataFrame) -> tuple[list[str], dict]:
    """Figure 8 over the load axis: the ordering of the mean response per load from the mean
    field and from the simulations, the crossover loads, and where JIQ-Po2 is the shortest."""
    if "lam" not in agg.columns or agg["policy"].n_unique() < 3 or agg["lam"].n_unique() < 3:
        return [], {}
    res = {"mf": orderings(agg, sim=False), "sim": orderings(agg, sim=True)}
    lines = ["", "## Figure 8 over the load axis: the ordering of the mean response time", "",
             "Smallest first. Simulated: `~` where two neighbours differ by at most 1.96 SE of "
             "their difference (within the 95% CI of each other), `<` where the difference is "
             "significant.", ""]
    for kind, title in (("mf", "mean field (jiq, jiq_pod, jiq_sqd)"), ("sim", "simulated")):
        ords = res[kind]
        if not ords:
            continue
        lines += [f"### Ordering by load, {title}", ""]
        # consecutive loads with the same order (by point estimate) are one range
        run = [ords[0]]
        for o in ords[1:] + [None]:
            if o is not None and o["order"] == run[0]["order"] and (kind == "mf" or o["text"] == run[0]["text"]):
                run.append(o)
                continue
            rng = (f"lam = {run[0]['lam']:g}" if len(run) == 1 else f"lam = {run[0]['lam']:g} to {run[-1]['lam']:g}")
            lines.append(f"- {rng}: {run[0]['text']}")
            run = [o]
        cross = crossovers(ords, sim=(kind == "sim"))
        if cross:
            lines += ["", f"Crossover loads ({title}; linear interpolation of the difference between "
                      "the two grid loads):", ""]
            for c in cross:
                note = "" if c["significant"] else " (not resolved: within the CIs on one side)"
                lines.append(f"- {_name(c['below'])} below {_name(c['above'])} up to lam ~ {c['lam']:.3f} "
                             f"(between {c['between'][0]:g} and {c['between'][1]:g}), above it the reverse{note}")
        lines.append("")
    # the paper's claim: JIQ-Pod has the shortest mean response of the five
    if "jiq_pod" in agg["policy"].to_list():
        lines += ["### \"JIQ-Pod has the shortest response time of the five\" (Figure 8)", ""]
        for kind in ("mf", "sim"):
            holds = [o["lam"] for o in res[kind] if o["order"][0] == "jiq_pod"]
            fails = [(o["lam"], o["order"][0]) for o in res[kind] if o["order"][0] != "jiq_pod"]
            what = "mean field" if kind == "mf" else "simulated (point estimates)"
            if not res[kind]:
                continue
            lines.append(f"- {what}: JIQ-Po2 shortest at lam = {', '.join(f'{v:g}' for v in holds) or 'none'}; "
                         "not at " + (", ".join(f"{v:g} ({_name(p)})" for v, p in fails) or "none"))
        lines.append("")
    return lines, res


def _fig7_report(agg: pl.DataFrame) -> list[str]:
    """Figure 7's claim, "JIQ-Pod always has the lightest tail in the heavy workload region"
    (d = 2, z = 1): s_i for i = 2..5 of JIQ-Po2, JIQ-threshold and JIQ-SQ(2) at lam >= 0.9,
    simulated (95% CI) and from the mean field where it exists, with the lightest per level."""
    have = [p for p in FIG7_POLICIES if p in agg["policy"].to_list()]
    if len(have) < 2 or "lam" not in agg.columns:
        return []
    heavy = sorted(v for v in agg.filter(pl.col("lam") >= HEAVY_LAM - 1e-9)["lam"].unique().to_list())
    if not heavy:
        return []
    lines = ["", f"## Figure 7: the lightest tail at heavy load (lam >= {HEAVY_LAM:g}), s_i for i = "
             f"{FIG7_LEVELS[0]}..{FIG7_LEVELS[-1]}", "",
             "Simulated: mean tail over the replications, 95% t interval (per level); mean field in "
             "brackets where it exists. Lightest: the smallest simulated s_i (`~` when its 95% CI "
             "overlaps the runner-up's).", "",
             "| lam | i | " + " | ".join(_name(p, {"d": 2, "z": 1} if p != "jiq_threshold" else {"z": 1})
                                         for p in have) + " | lightest |", "|---|---|" + "---|" * (len(have) + 1)]
    sims, mf = agg.filter(pl.col("engine") != "meanfield"), agg.filter(pl.col("engine") == "meanfield")
    count, pod_wins = 0, 0
    for lam in heavy:
        vals = {}
        for p in have:
            s = sims.filter((pl.col("policy") == p) & ((pl.col("lam") - lam).abs() < 1e-9))
            m = mf.filter((pl.col("policy") == p) & ((pl.col("lam") - lam).abs() < 1e-9))
            if s.height == 0 or s["tail"][0] is None:
                continue
            row = s.row(0, named=True)
            vals[p] = (row["tail"], row.get("_tail_hw"), None if m.height == 0 else m["tail"][0])
        if len(vals) < 2:
            continue
        for i in FIG7_LEVELS:
            cells, est = [], {}
            for p in have:
                if p not in vals or len(vals[p][0]) < i:
                    cells.append("-")
                    continue
                t, hw, mt = vals[p]
                h = hw[i - 1] if hw is not None else float("nan")
                est[p] = (t[i - 1], h)
                cells.append(f"{t[i - 1]:.4g} +- {h:.2g}" + (f" [{mt[i - 1]:.4g}]" if mt is not None else ""))
            if len(est) < 2:
                continue
            order = sorted(est, key=lambda p: est[p][0])
            a, b = est[order[0]], est[order[1]]
            tied = a[0] + a[1] >= b[0] - b[1]
            count += 1
            pod_wins += order[0] == "jiq_pod"
            lines.append(f"| {lam:g} | {i} | " + " | ".join(cells) + f" | {_name(order[0])}"
                         + (f" ~ {_name(order[1])}" if tied else "") + " |")
    if count:
        lines += ["", f"JIQ-Po2 has the smallest simulated s_i in {pod_wins} of {count} (load, level) cells "
                  f"at lam >= {HEAVY_LAM:g}."]
    return lines


def _tail_hw(ok: pl.DataFrame, agg: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``agg`` with a ``_tail_hw`` column: the 95% t half-width of the mean tail per level over
    the replications (null for meanfield rows and single runs)."""
    hws = {}
    for grp in ok.filter(pl.col("engine") != "meanfield").partition_by(keys, as_dict=False, maintain_order=True):
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if len(tails) < 2:
            continue
        m = min(len(t) for t in tails)
        arr = np.array([t[:m] for t in tails], dtype=float)
        hw = stats.t.ppf(0.975, arr.shape[0] - 1) * arr.std(axis=0, ddof=1) / math.sqrt(arr.shape[0])
        hws[tuple(grp.row(0, named=True)[k] for k in keys)] = [float(v) for v in hw]
    col = [hws.get(tuple(r[k] for k in keys)) for r in agg.iter_rows(named=True)]
    return agg.with_columns(pl.Series("_tail_hw", col, dtype=pl.List(pl.Float64)))


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
        mf = [o for o in res.get("mf", []) if p in o["values"] and "jiq_pod" in o["values"]]
        if mf:
            ax.plot([o["lam"] for o in mf], [o["values"][p] / o["values"]["jiq_pod"] for o in mf], "-",
                    color=c, lw=1.3, label=f"{_name(p, {'d': 2})}, mean field")
        sm = [o for o in res.get("sim", []) if p in o["values"] and "jiq_pod" in o["values"]]
        if sm and p != "jiq_pod":
            xs = np.array([o["lam"] for o in sm])
            ratio = np.array([o["values"][p] / o["values"]["jiq_pod"] for o in sm])
            rel = np.array([math.hypot(o["se"][p] / o["values"][p], o["se"]["jiq_pod"] / o["values"]["jiq_pod"])
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


def _lu_report_and_plot(agg: pl.DataFrame, outdir: Path) -> tuple[list[str], Path | None]:
    """Figure 5's comparison: simulated mean response against the mean field and Lu et al.'s
    approximation (``lu_mean_response`` of the meanfield rows of jiq and jiq_sqd): a table of
    the relative errors against the simulation, and a figure (mean response on top, relative
    errors below, one column per policy the approximation covers)."""
    if "lu_mean_response" not in agg.columns or agg["lu_mean_response"].is_null().all() or "lam" not in agg.columns:
        return [], None
    mf = agg.filter((pl.col("engine") == "meanfield") & pl.col("lu_mean_response").is_not_null())
    sims = agg.filter(pl.col("engine") != "meanfield")
    # Lu's JIQ-Random approximates jiq_original (Lu's model) and jiq; JIQ-SQ(d) jiq_sqd
    compare = {"jiq": ["jiq", "jiq_original"], "jiq_sqd": ["jiq_sqd"]}
    panels = [p for p in compare if p in mf["policy"].to_list()]
    lines = ["", "## Figure 5: the mean field and Lu et al.'s approximation against the simulation", "",
             "Lu et al. (2011), reconstructed and not verified against the paper (sim/jiq/lu.py, "
             "docs/jiq.md): rho = fraction of non-empty I-queues from sum_i rho^((d^i-1)/(d-1)) = "
             "r (1 - lam) (d = 1: rho = r (1 - lam) / (1 + r (1 - lam))), T = 1 / (1 - lam (1 - rho)). "
             "Relative error = (prediction - simulated) / simulated.", "",
             "| simulated policy | N | lam | simulated (95% CI) | mean field | its error | Lu et al. | its error | Lu vs mean field |",
             "|---|---|---|---|---|---|---|---|---|"]
    data = {}
    for p in panels:
        m = mf.filter(pl.col("policy") == p).sort("lam")
        for sp in compare[p]:
            s = sims.filter(pl.col("policy") == sp).sort("lam")
            if s.height == 0:
                continue
            for r in s.iter_rows(named=True):
                mm = m.filter((pl.col("lam") - r["lam"]).abs() < 1e-9)
                if mm.height == 0:
                    continue
                t_mf, t_lu = mm["mean_response"][0], mm["lu_mean_response"][0]
                e_mf, e_lu = (t_mf - r["mean_response"]) / r["mean_response"], (t_lu - r["mean_response"]) / r["mean_response"]
                data.setdefault((p, sp), []).append((r["lam"], r["mean_response"], r["mean_response_hw"], t_mf, t_lu,
                                                     r["n_servers"]))
                lines.append(f"| {_name(sp, {'d': 2} if sp == 'jiq_sqd' else None)} | {r['n_servers']} | {r['lam']:g} | "
                             f"{r['mean_response']:.4f} +- {_fmt(r['mean_response_hw'])} | {t_mf:.4f} | {_pct(e_mf)} | "
                             f"{t_lu:.4f} | {_pct(e_lu)} | {_pct((t_lu - t_mf) / t_mf)} |")
    if not data:
        return lines, None
    fig = Figure(figsize=(6.2 * len(panels), 8.0), layout="constrained")
    FigureCanvasAgg(fig)
    for j, p in enumerate(panels):
        top = fig.add_subplot(2, len(panels), j + 1)
        bot = fig.add_subplot(2, len(panels), len(panels) + j + 1, sharex=top)
        m = mf.filter(pl.col("policy") == p).sort("lam")
        pname = _name(p, {"d": 2} if p == "jiq_sqd" else None)
        top.plot(m["lam"], m["mean_response"], "-", color="black", lw=1.3, label=f"{pname}, mean field")
        top.plot(m["lam"], m["lu_mean_response"], "--", color="#D55E00", lw=1.5,
                 label="Lu et al. approximation (reconstructed)")
        ys = m["mean_response"].to_list() + m["lu_mean_response"].to_list()
        n_top = None
        for k, sp in enumerate(compare[p]):
            pts = data.get((p, sp))
            if not pts:
                continue
            # one N per figure, the largest (the report's table has every N)
            n_top = max(q[5] for q in pts)
            lam, t, hw, t_mf, t_lu, _ = (np.array(v, float) for v in zip(*[q for q in pts if q[5] == n_top]))
            c = ["#0072B2", "#009E73"][k % 2]
            lab = _name(sp, {"d": 2} if sp == "jiq_sqd" else None)
            top.errorbar(lam, t, yerr=hw, fmt=style.marker(k), ms=4, capsize=2, color=c, ls="none",
                         label=f"{lab}, simulated (95% CI)")
            # the bars: the simulated value's 95% half-width relative to it (the predictions are exact)
            bot.errorbar(lam, 100 * (t_mf - t) / t, yerr=100 * hw / t, fmt="-" + style.marker(k), color="black",
                         ms=3, lw=1, capsize=2, mfc=c, mec=c, label=f"mean field vs {lab} (95% CI)")
            bot.errorbar(lam, 100 * (t_lu - t) / t, yerr=100 * hw / t, fmt="--" + style.marker(k), color="#D55E00",
                         ms=3, lw=1, capsize=2, mfc=c, mec=c, label=f"Lu et al. vs {lab} (95% CI)")
            ys += t.tolist()
        style.log_axis(top, "y", ys)
        top.set_ylabel("mean response time (mean service times)")
        top.set_title(f"{pname}: simulated (N = {_fmt(n_top)}), mean field and Lu et al.", fontsize=10)
        top.grid(True, which="major", alpha=0.3)
        top.legend(fontsize=8, loc="upper left")
        bot.axhline(0.0, color="0.3", lw=0.8)
        bot.set_xlabel("load $\\lambda$ (arrival rate per server; service rate 1)")
        bot.set_ylabel("(prediction - simulated) / simulated, %")
        bot.grid(True, alpha=0.3)
        bot.legend(fontsize=8, loc="upper left")
    path = outdir / "lu_vs_load.png"
    fig.savefig(path, dpi=120)
    return lines, path


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

    # --- Table II as printed (q_i), Figures 8 and 7 over the load axis, Figure 5 with Lu et al.
    lines += _q_report(q_table(ok, keys, on))
    order_lines, order_res = _ordering_report(agg)
    lines += order_lines
    lines += _fig7_report(_tail_hw(ok, agg, keys))
    lu_lines, lu_plot = _lu_report_and_plot(agg, outdir)
    lines += lu_lines

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
                         _plot_messages(agg, outdir), _plot_convergence(conv, outdir),
                         _plot_ordering(agg, order_res, outdir), lu_plot) if p is not None]
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
