"""Zero queueing delay for parallel jobs: the queueing ratio against N, per arm, with a verdict.

The metric (Weng & Wang) is the queueing ratio ``(E[T] - H_k) / H_k`` of a job's mean response
time over its inherent delay ``E[max of k Exp(1)] = H_k``. Zero asymptotic queueing delay means
it tends to 0 as N grows. Per arm (policy, engine and every parameter that does not change
along N, e.g. the variant giving the rule for d), replications are combined into a mean with a
95% interval (:func:`analysis.aggregate.aggregate`), and the ratio's trend in N is fitted.

Verdict rule (also in docs/analysis.md), per arm, with the points at every N of the arm:

1. ``vanishing`` if at the largest N the whole 95% interval of the ratio lies below
   ``RATIO_ZERO`` (0.001): zero queueing delay reached within the resolution of the run.
2. Otherwise fit ``log(ratio) = a + b log N`` by weighted least squares over the points with a
   positive ratio (weights from the delta method, covariance scaled by the residuals, t with
   n - 2 degrees of freedom; needs >= 3 points):
   ``vanishing`` if the 95% interval of b lies below 0 (the ratio falls as a power of N);
   ``not vanishing`` if it lies at or above 0 (flat or growing);
   ``inconclusive`` if it contains 0, or there are fewer than 3 usable points.

The rule is a statistical summary of the N range simulated, not a proof of a limit: a ratio
that falls like a small power over the range is called vanishing.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from analysis import style
from analysis.aggregate import aggregate, check_params
from analysis.fit import arm_columns, wls_loglog

RATIO_ZERO = 1e-3
METRICS = ("queueing_ratio", "mean_response", "drop_prob", "frac_within_h")
VANISHING, NOT_VANISHING, INCONCLUSIVE = "vanishing", "not vanishing", "inconclusive"


def _arm_key(row: dict, arm: list[str]) -> tuple:
    return (row["policy"], row["engine"], *(row[p] for p in arm))


def _label(row: dict, arm: list[str]) -> str:
    parts = [f"{p}={row[p]:.4g}" if isinstance(row[p], float) else f"{p}={row[p]}"
             for p in arm if row[p] is not None]
    return f"{row['policy']} [{row['engine']}] " + ", ".join(parts)


def verdict(points: pl.DataFrame, x: str = "n_servers") -> dict:
    """The verdict of one arm (rows sorted by x) by the rule in the module docstring."""
    pts = points.filter(pl.col("queueing_ratio").is_not_null()).sort(x)
    out = {"n_points": pts.height, "slope": None, "slope_lo": None, "slope_hi": None,
           "ratio_at_max_n": None, "ratio_hi_at_max_n": None, "verdict": INCONCLUSIVE, "note": ""}
    if pts.height == 0:
        out["note"] = "no successful points"
        return out
    last = pts.row(-1, named=True)
    hi = last["queueing_ratio_hi"] if last["queueing_ratio_hi"] is not None else last["queueing_ratio"]
    out["ratio_at_max_n"], out["ratio_hi_at_max_n"] = last["queueing_ratio"], hi
    if hi < RATIO_ZERO:
        out["verdict"] = VANISHING
        out["note"] = f"ratio < {RATIO_ZERO:g} (95% CI) at the largest {x}"
        return out
    usable = pts.filter((pl.col("queueing_ratio") > 0) & (pl.col("queueing_ratio_se") > 0))
    if usable.height < 3:
        out["note"] = f"{usable.height} point(s) with a positive ratio and an SE; the fit needs 3"
        return out
    fit = wls_loglog(usable[x].to_numpy(), usable["queueing_ratio"].to_numpy(),
                     usable["queueing_ratio_se"].to_numpy())
    out.update({k: fit[k] for k in ("slope", "slope_lo", "slope_hi")})
    if fit["slope_hi"] < 0:
        out["verdict"] = VANISHING
    elif fit["slope_lo"] >= 0:
        out["verdict"] = NOT_VANISHING
    else:
        out["note"] = "the slope's 95% CI contains 0"
    return out


def analyze_zero_queueing(frame: pl.DataFrame, params, outdir, sweep_name: str, x: str = "n_servers") -> dict:
    """Aggregate, fit and judge each arm; write plots, ``verdicts.json`` and ``report.md``."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = check_params(frame, params, x)
    sims = frame.filter(pl.col("engine") != "meanfield")
    if sims.height == 0 or "queueing_ratio" not in sims.columns:
        report = outdir / "report.md"
        report.write_text(f"# Sweep `{sweep_name}`: zero queueing delay\n\nNo simulation rows.\n")
        return {"report": report, "plots": [], "metrics": [], "verdicts": [], "verdict_lines": []}
    agg = aggregate(sims, params, metrics=METRICS)
    ok = agg.filter(pl.col("n_rep") >= 1)
    arm = arm_columns(ok, params, x) if ok.height else [p for p in params if p != x]
    arm = [p for p in arm if p != x]
    verdicts = []
    arms: dict[tuple, pl.DataFrame] = {}
    for row in ok.select(["policy", "engine", *arm]).unique().sort(["policy", "engine", *arm], nulls_last=True).to_dicts():
        cond = (pl.col("policy") == row["policy"]) & (pl.col("engine") == row["engine"])
        for p in arm:
            cond = cond & (pl.col(p).is_null() if row[p] is None else pl.col(p) == row[p])
        pts = ok.filter(cond).sort(x)
        arms[_arm_key(row, arm)] = pts
        v = verdict(pts, x)
        verdicts.append({**row, "label": _label(row, arm), **v})

    plots = _plots(arms, arm, outdir, x)
    summary = outdir / "summary.parquet"
    agg.write_parquet(summary)
    vpath = outdir / "verdicts.json"
    vpath.write_text(json.dumps(verdicts, indent=1, default=str) + "\n")
    report = _report(outdir, sweep_name, arms, arm, verdicts, plots, x)
    # (key, value, step, arm): MLflow puts each on the child runs of its arm (pipeline.mlflow_log)
    metrics = []
    for key, pts in arms.items():
        route = {c: pts[c][0] for c in ("policy", "engine") if c in pts.columns}
        route.update({c: k for c, k in zip(arm, key) if k is not None})
        for r in pts.iter_rows(named=True):
            if r["queueing_ratio"] is not None:
                metrics.append(("queueing_ratio", r["queueing_ratio"], int(r[x]), route))
    for v in verdicts:
        if v["slope"] is not None:
            route = {c: v[c] for c in ("policy", "engine", *arm) if v.get(c) is not None}
            metrics.append(("queueing_ratio_slope", v["slope"], 0, route))
    return {"report": report, "plots": plots, "metrics": metrics, "verdicts": verdicts,
            "summary": summary, "verdicts_json": vpath, "arm_params": arm,
            "verdict_lines": [_verdict_line(v) for v in verdicts]}


def _verdict_line(v: dict) -> str:
    """The console line of one arm's verdict (pipeline.run prints it)."""
    slope = "" if v.get("slope") is None else (
        f" (slope {v['slope']:.2f} [{v['slope_lo']:.2f}, {v['slope_hi']:.2f}])")
    return f"{v['label']}: queueing ratio as N grows: {v['verdict']}{slope}"


def _key_label(key: tuple, arm: list[str], skip: int, drop: frozenset = frozenset()) -> str:
    """``c1, \u03b1 = 0.3, c = 1`` for an arm key, without its first ``skip`` parts and without
    the names in ``drop`` (those that are the same in every arm: the panel's title has them)."""
    names = ["policy", "engine", *arm]
    parts = []
    for n, v in list(zip(names, key))[skip:]:
        if v is None or n in drop:
            continue
        if n == "engine":
            parts.append(style.engine_name(v))
        elif n in ("policy", "variant"):
            parts.append(str(v))
        else:
            parts.append(f"{style.symbol(n)} = {v:g}" if isinstance(v, float) else f"{style.symbol(n)} = {v}")
    return ", ".join(parts)


def _constant(keys: list[tuple], arm: list[str]) -> frozenset:
    """The names (engine and arm parameters) whose value is the same in every arm key."""
    names = ["policy", "engine", *arm]
    return frozenset(n for i, n in enumerate(names) if i > 0 and len({k[i] for k in keys}) == 1)


def _fixed_text(key: tuple, arm: list[str], same: frozenset) -> str:
    """`` [occupancy simulation, \u03b1 = 0.3]``: the names in ``same`` (for a title)."""
    names = ["policy", "engine", *arm]
    text = _key_label(key, arm, skip=1, drop=frozenset(names) - same)
    return f" [{text}]" if text else ""


def _plots(arms: dict, arm: list[str], outdir: Path, x: str) -> list[Path]:
    paths = []
    # 1. ratio vs N per arm (log-log), one figure per policy; at most style.MAX_SERIES arms a panel
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels = [keys[i:i + style.MAX_SERIES] for i in range(0, len(keys), style.MAX_SERIES)]
        fig = Figure(figsize=(9.5, 4.6 * len(panels)), layout="constrained")
        FigureCanvasAgg(fig)
        for r, group in enumerate(panels):
            ax = fig.add_subplot(len(panels), 1, r + 1)
            hidden, reach0 = 0, False
            xs_all = []
            for i, key in enumerate(group):
                pts = arms[key]
                hidden += pts.filter(pl.col("queueing_ratio") <= 0).height
                pts = pts.filter(pl.col("queueing_ratio") > 0)
                if pts.height == 0:
                    continue
                xs = pts[x].to_numpy().astype(float)
                xd = style.dodge(xs, i, len(group)) if len(group) > 1 else xs
                y = pts["queueing_ratio"].to_numpy()
                lo = np.maximum(y - pts["queueing_ratio_lo"].fill_null(0).to_numpy(), 0)
                hi = np.maximum(pts["queueing_ratio_hi"].fill_null(0).to_numpy() - y, 0)
                zero = lo >= y  # the 95% interval reaches 0: an arrow, not a clipped bar
                c = style.color(i)
                ax.errorbar(xd, y, yerr=[np.where(zero, 0.0, lo), hi], marker=style.marker(i), ms=5,
                            capsize=3, color=c, label=_key_label(key, arm, skip=1, drop=same) or "all")
                if zero.any():
                    reach0 = True
                    style.mark_ci_to_zero(ax, xd[zero], y[zero], c)
                xs_all.extend(xs.tolist())
            if reach0:
                ax.add_line(style.ci_zero_handle())
            if hidden:
                ax.plot([], [], " ", label=f"{hidden} point(s) with ratio <= 0 not shown (log axis)")
            if len(group) > 1:
                ax.plot([], [], " ", label="series offset slightly in N to stay visible")
            style.log_axis(ax, "x", xs_all or None)
            ys = np.concatenate([arms[k]["queueing_ratio"].drop_nulls().to_numpy() for k in group] or [np.array([])])
            style.log_axis(ax, "y", ys[ys > 0] if ys.size else None)
            ax.set_xlabel(style.label(x))
            ax.set_ylabel(style.label("queueing_ratio"))
            ax.set_title(f"{style.policy_name(policy)}: queueing ratio vs N (95% CI)"
                         + _fixed_text(group[0], arm, same), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            style.legend_outside(ax)
        p = outdir / f"ratio_vs_n_{policy}.png"
        fig.savefig(p, dpi=110)
        paths.append(p)
    # 2. d vs N per arm
    fig = Figure(figsize=(9.0, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    seen: list[str] = []
    ds, ns = [], []
    same = _constant(list(arms), arm)
    for key, pts in arms.items():
        lab = _key_label(key, arm, skip=2, drop=same) or "all"
        if lab in seen or "d" not in pts.columns or len(seen) >= style.MAX_SERIES:
            continue
        i = len(seen)
        seen.append(lab)
        ax.plot(pts[x].to_numpy(), pts["d"].to_numpy(), marker=style.marker(i), color=style.color(i), label=lab)
        ds.extend(pts["d"].drop_nulls().to_list())
        ns.extend(pts[x].to_list())
    style.log_axis(ax, "x", ns or None)
    style.log_axis(ax, "y", ds or None)
    if ds and style.is_integer_valued(ds) and max(ds) / max(min(ds), 1) < 100:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}" if v >= 1 else ""))
    ax.set_xlabel(style.label(x))
    ax.set_ylabel(style.label("d"))
    ax.set_title("probe overhead d vs N per rule (the same for every policy)"
                 + (_fixed_text(next(iter(arms)), arm, same - {"engine"}) if arms else ""), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    style.legend_outside(ax)
    p = outdir / "d_vs_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    # 3. tails at the largest N per arm: one panel per policy and group of MAX_SERIES arms
    panels = []
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels += [(policy, keys[i:i + style.MAX_SERIES], same) for i in range(0, len(keys), style.MAX_SERIES)]
    fig = Figure(figsize=(9.5, 4.2 * len(panels)), layout="constrained")
    FigureCanvasAgg(fig)
    for r, (policy, keys, same) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, r + 1)
        cut = 0
        for i, key in enumerate(keys):
            last = arms[key].row(-1, named=True)
            tail = np.asarray(last.get("tail") or [], dtype=float)
            keep = tail > 1e-12
            if keep.any():
                lv = np.arange(1, tail.size + 1)
                lab = (_key_label(key, arm, skip=1, drop=same) or "all") + f" (N = {last[x]})"
                ax.plot(lv[keep], tail[keep], marker=style.marker(i), ms=3, color=style.color(i), label=lab)
                if style.tail_is_cut(tail, 1e-12):
                    cut = max(cut, tail.size)
        if cut:
            style.mark_max_level(ax, cut)
        style.log_axis(ax, "y", [1e-12, 1.0])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail"))
        ax.set_title(f"{style.policy_name(policy)}: tail at the largest N" + _fixed_text(keys[0], arm, same),
                     fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    p = outdir / "tail_at_max_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    return paths


def _num(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}g}"


def _report(outdir, sweep_name, arms, arm, verdicts, plots, x) -> Path:
    lines = [f"# Sweep `{sweep_name}`: zero queueing delay for parallel jobs", "",
             "Queueing ratio = (E[T] - H_k) / H_k. Verdict rule: `analysis/zero_queueing.py` "
             "(docs/analysis.md): *vanishing* if the ratio's 95% CI at the largest N is below "
             f"{RATIO_ZERO:g}, or the fitted slope of log(ratio) on log N has a 95% CI below 0; "
             "*not vanishing* if that CI lies at or above 0; otherwise *inconclusive*.", "",
             "## Verdicts", "",
             "| arm | points | ratio at largest N (95% CI upper) | slope [95% CI] | verdict | note |",
             "|---|---|---|---|---|---|"]
    for v in verdicts:
        slope = "-" if v["slope"] is None else f"{v['slope']:.3f} [{v['slope_lo']:.3f}, {v['slope_hi']:.3f}]"
        lines.append(f"| {v['label']} | {v['n_points']} | {_num(v['ratio_at_max_n'])} ({_num(v['ratio_hi_at_max_n'])}) "
                     f"| {slope} | **{v['verdict']}** | {v['note']} |")
    lines += ["", "## Points", ""]
    for key, pts in arms.items():
        lines += [f"### {', '.join(str(k) for k in key if k is not None)}", "",
                  "| N | k | d | lam | R | queueing ratio +- CI | E[T] | drop prob | frac within h |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in pts.iter_rows(named=True):
            lines.append(
                f"| {r[x]} | {r.get('k', '-')} | {r.get('d', '-')} | {_num(r.get('lam'), 6)} | {r['n_rep']} "
                f"| {_num(r['queueing_ratio'])} +- {_num(r['queueing_ratio_hw'], 2)} | {_num(r['mean_response'])} "
                f"| {_num(r['drop_prob'])} | {_num(r['frac_within_h'])} |")
        lines.append("")
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    path = outdir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
ANALYSES = {"zero_queueing": analyze_zero_queueing}
