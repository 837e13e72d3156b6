"""Multiple dispatchers with local estimates (LED, Zhou, Shroff & Wierman): response against the
load, the heavy-traffic ratio eps E[sum Q] / zeta against eps, messages, unstable points.

Reads result frames only. Rows with ``status == "unstable"`` (the slotted engine's drift test,
docs/led.md) are not averaged: they are listed, and plotted as crosses at the top of the panel.
Per point (policy, variant and every parameter), replications are combined by
:func:`analysis.aggregate.aggregate` (t over replications).

Heavy-traffic verdict rule (also in docs/led.md), per arm (policy, variant and every parameter
but the load), with the points sorted by eps: let ``g = |ratio - 1|``. ``falling toward 1`` if the
upper 95% bound of g at the smallest eps is below half of g at the largest eps (the distance to 1
at least halved over the eps range) or the 95% interval of the ratio at the smallest eps
contains 1 while it did not at the largest; ``not falling toward 1`` if the lower 95% bound of g at
the smallest eps is at least half of g at the largest eps; else ``inconclusive``. An arm with an
unstable point at the smallest eps is ``unstable``. The ratio may approach 1 from below, hence
the distance, not a log-fit of ratio - 1. Beside the verdict the table says whether 1 is inside
the 95% interval at the smallest eps (reached, at that precision, or not), and gives at each eps
``K = E[Q_Sigma(t+1) U_Sigma(t)] / eps`` (``mean_qu / eps``; E[U_Sigma] = eps): by the exact
identity eps E[sum Q] = zeta + eps^2/2 - E[U^2]/2 + E[Q(t+1) U(t)], ratio - 1 is essentially
``K eps / zeta``, so a K that stays flat as eps falls means the distance falls linearly in eps.

Message budget (rows with ``msg_budget_per_job``, docs/led.md): the target beside the budget
actually spent (``messages_per_job``) and the ``p_hat_used`` per point, in the report and as
dashed lines in the messages plot.
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
from analysis.fit import arm_columns

__all__ = ["analyze_led", "heavy_traffic_table"]

METRICS = ("mean_response", "mean_total_queue", "unused_service", "imbalance", "ht_ratio")
APPROACHES, NOT_APPROACHING, INCONCLUSIVE, UNSTABLE = (
    "falling toward 1", "not falling toward 1", "inconclusive", "unstable")
_COLORS = list(style.PALETTE)
_X_LABELS = {"lam": "load $\\rho = \\lambda_\\Sigma / \\mu_\\Sigma$ (arrivals over service capacity)",
             "p_hat": "update probability $\\hat p$ (Push, per dispatcher and slot)"}


def _panels(keys: list[dict], arm: list[str]) -> list[list[dict]]:
    """The arms in groups of at most ``style.MAX_SERIES`` (one colour each), split by an arm
    column where one does it (:func:`analysis.style.split_series`)."""
    return [g for _, g in style.split_series(keys, [a for a in arm if a != "policy"] + ["policy"])]


def _axes(n: int, width: float = 8.5, height: float = 4.8):
    fig = Figure(figsize=(width, height * n + 0.3), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(n, 1, i + 1) for i in range(n)]


def _label(row: dict) -> str:
    name = style.policy_name(row["policy"], row.get("model") or "led")
    if row.get("policy", "").startswith("l_") and row.get("update"):
        name += "-" + row["update"].capitalize()
    if row.get("d") is not None:
        name = style.with_d(name, row["d"])
    if row.get("ties"):  # jsq, pod: the tie rule (sim.led.model.TIES)
        name += f" ({row['ties']} ties)"
    return name


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def heavy_traffic_table(agg: pl.DataFrame, unstable: pl.DataFrame, arm: list[str]) -> list[dict]:
    """Per arm: the ratio at each eps and the verdict by the rule in the module docstring."""
    rows = []
    if "ht_ratio" not in agg.columns:
        return rows
    for key in agg.select(arm).unique(maintain_order=True).iter_rows(named=True):
        pts = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()],
                         pl.col("ht_ratio").is_not_null()).sort("eps")
        uns = unstable.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()]) if unstable.height else unstable
        if pts.height < 2:
            continue
        small, large = pts.row(0, named=True), pts.row(-1, named=True)
        g_small, g_large = abs(small["ht_ratio"] - 1), abs(large["ht_ratio"] - 1)
        hw = small["ht_ratio_hw"] if small["ht_ratio_hw"] is not None else float("nan")
        hw_large = large["ht_ratio_hw"] if large["ht_ratio_hw"] is not None else float("nan")
        hi = g_small + hw
        lo = max(0.0, g_small - hw) if abs(small["ht_ratio"] - 1) > hw else 0.0
        contains_small = abs(small["ht_ratio"] - 1) <= hw
        contains_large = abs(large["ht_ratio"] - 1) <= hw_large
        eps_min_unstable = uns.height and uns["eps"].min() <= small["eps"]
        if eps_min_unstable:
            verdict = UNSTABLE
        elif hi < 0.5 * g_large or (contains_small and not contains_large):
            verdict = APPROACHES
        elif lo >= 0.5 * g_large:
            verdict = NOT_APPROACHING
        else:
            verdict = INCONCLUSIVE
        k_qu = ([q / e if q is not None and e else None
                 for q, e in zip(pts["mean_qu"].to_list(), pts["eps"].to_list())]
                if "mean_qu" in pts.columns else [None] * pts.height)
        rows.append({**key, "label": _label({**key, **small}), "eps": pts["eps"].to_list(),
                     "ratio": pts["ht_ratio"].to_list(), "ratio_hw": pts["ht_ratio_hw"].to_list(),
                     "distance_at_min_eps": g_small, "distance_hw": hw, "distance_at_max_eps": g_large,
                     "one_in_ci_at_min_eps": bool(contains_small), "k_qu": k_qu,
                     "verdict": verdict})
    return rows


def _one_baseline_run(agg: pl.DataFrame) -> pl.DataFrame:
    """The baselines ignore the LED update variants, so their rows repeat per variant: plots
    keep, per baseline and tie rule (``ties``, where a sweep varies it), the first variant's
    (the report's table has every row)."""
    if "variant" not in agg.columns or agg["variant"].n_unique() < 2:
        return agg
    keys = ["policy"] + (["ties"] if "ties" in agg.columns else [])
    first = (agg.filter(~pl.col("policy").str.starts_with("l_"))
             .group_by(keys, maintain_order=True).agg(pl.col("variant").first().alias("_first")))
    return (agg.join(first, on=keys, how="left", nulls_equal=True)
            .filter(pl.col("policy").str.starts_with("l_") | (pl.col("variant") == pl.col("_first")))
            .drop("_first"))


def _plot_response(agg, unstable, arm, x, outdir) -> Path | None:
    agg = _one_baseline_run(agg)
    if agg.height == 0 or agg[x].n_unique() < 3:
        return None
    panels = _panels(agg.select(arm).unique(maintain_order=True).rows(named=True), arm)
    fig, axes = _axes(len(panels))
    top = float(agg["mean_response"].max()) * 2
    for ax, keys in zip(axes, panels):
        zero, crosses = False, False
        for j, key in enumerate(keys):
            c = _COLORS[j]
            s = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()]).sort(x)
            extra = f", $\\rho$={key['lam']:g}" if x != "lam" and key.get("lam") is not None else ""
            zero |= style.errorbar_log(ax, s[x].to_numpy(), s["mean_response"].to_numpy(),
                                       np.asarray(s["mean_response_hw"].to_list(), float), color_=c,
                                       fmt=style.marker(j) + "-", ms=4, capsize=2,
                                       label=_label({**key, **s.row(0, named=True)}) + extra)
            if unstable.height:
                u = unstable.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()])
                if u.height:
                    crosses = True
                    ax.plot(u[x].unique().to_list(), [top] * u[x].n_unique(), "x", color=c, ms=8)
        if crosses:
            ax.plot([], [], "x", color="0.3", ms=8, ls="none", label="unstable run (not averaged)")
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.log_axis(ax, "y", agg["mean_response"].drop_nulls().to_list() + ([top] if unstable.height else []))
        if x == "p_hat":
            style.log_axis(ax, "x", agg[x].drop_nulls().to_list())
        ax.set_xlabel(_X_LABELS[x])
        ax.set_ylabel("mean response time (slots)")
        ax.set_title("mean response time (95% CI over replications)", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    path = outdir / f"response_vs_{x}.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_ratio(table: list[dict], outdir) -> Path | None:
    table = [t for t in table if len(t["eps"]) >= 3]
    if not table:
        return None
    groups = [table[i:i + style.MAX_SERIES] for i in range(0, len(table), style.MAX_SERIES)]
    fig, axes = _axes(len(groups))
    for ax, group in zip(axes, groups):
        zero = False
        for j, t in enumerate(group):
            zero |= style.errorbar_log(ax, t["eps"], t["ratio"], np.asarray(t["ratio_hw"], float),
                                       color_=_COLORS[j], fmt=style.marker(j) + "-", ms=4, capsize=2,
                                       label=f"{t['label']}: {t['verdict']}")
        ax.axhline(1.0, color="k", ls="--", lw=1, label="heavy-traffic limit 1")
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.log_axis(ax, "x", [e for t in group for e in t["eps"]])
        style.log_axis(ax, "y", [r for t in group for r in t["ratio"] if r is not None and r > 0] + [1.0])
        ax.set_xlabel("$\\epsilon = \\mu_\\Sigma - \\lambda_\\Sigma$ (spare capacity, tasks per slot)")
        ax.set_ylabel("heavy-traffic ratio $\\epsilon\\, E[\\sum_n Q_n] / \\zeta$")
        ax.set_title("heavy-traffic ratio against $\\epsilon$ (95% CI over replications)", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    path = outdir / "ht_ratio_vs_eps.png"
    fig.savefig(path, dpi=120)
    return path


def _plot_messages(agg, arm, x, outdir) -> Path | None:
    agg = _one_baseline_run(agg)
    if agg.height == 0 or agg[x].n_unique() < 2:
        return None
    panels = _panels(agg.select(arm).unique(maintain_order=True).rows(named=True), arm)
    fig, axes = _axes(len(panels))
    for ax, keys in zip(axes, panels):
        vals = []
        for j, key in enumerate(keys):
            s = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()],
                           pl.col("messages_per_job") > 0).sort(x)
            if s.height:
                ax.plot(s[x], s["messages_per_job"], style.marker(j) + "-", ms=4, color=_COLORS[j],
                        label=_label({**key, **s.row(0, named=True)}) + " (spent)")
                vals += s["messages_per_job"].to_list()
                b = s.filter(pl.col("msg_budget_per_job").is_not_null())
                if b.height:
                    ax.plot(b[x], b["msg_budget_per_job"], "--", lw=1.2, color=_COLORS[j],
                            label=_label({**key, **b.row(0, named=True)}) + " budget")
                    vals += b["msg_budget_per_job"].to_list()
        style.log_axis(ax, "y", vals or None)
        if x == "p_hat":
            style.log_axis(ax, "x", agg[x].drop_nulls().to_list())
        ax.set_xlabel(_X_LABELS.get(x, style.label(x, ["slotted"])))
        ax.set_ylabel("one-way messages per arriving task")
        ax.set_title("messages per arrival: spent (solid), budget (dashed); 0 not shown", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    path = outdir / "messages.png"
    fig.savefig(path, dpi=120)
    return path


def _budget_section(agg: pl.DataFrame, params: list[str]) -> list[str]:
    """Report lines: per point with a message budget, the budget, what was spent, p_hat used."""
    if "msg_budget_per_job" not in agg.columns:
        return []
    b = agg.filter(pl.col("msg_budget_per_job").is_not_null())
    if b.height == 0:
        return []
    show = [p for p in params if p in ("variant", "lam", "update", "d_u", "msg_budget",
                                       "msg_budget_pod_d")]
    lines = ["", "## Message budget: target against spent (one-way messages per arriving task)", "",
             "Spent: mean over replications (+- their standard deviation); p_hat used: mean "
             "(min..max) over replications. Pull's p_hat is calibrated by pilot runs per task, "
             "Push's set exactly; a p_hat of 0 or 1 is clipped (budget not reachable).", "",
             "| policy | " + " | ".join(show) + " | budget | spent | spent / budget | p_hat used |",
             "|---|" + "---|" * len(show) + "---|---|---|---|"]
    for r in b.sort(["policy", *params]).iter_rows(named=True):
        ratio = r["messages_per_job"] / r["msg_budget_per_job"] if r["msg_budget_per_job"] else None
        lines.append(f"| {_label(r)} | " + " | ".join(_fmt(r[p]) for p in show) +
                     f" | {r['msg_budget_per_job']:.4g} | {_fmt(r['messages_per_job'])} +- "
                     f"{_fmt(r['messages_per_job_sd'])} | {_fmt(ratio)} | {_fmt(r['p_hat_used'])} "
                     f"({_fmt(r['p_hat_used_min'])}..{_fmt(r['p_hat_used_max'])}) |")
    return lines


def analyze_led(frame, params, outdir, sweep_name: str = "") -> dict:
    """The LED analysis of a sweep's rows: tables, plots and the heavy-traffic verdicts."""
    df = frame.collect() if isinstance(frame, pl.LazyFrame) else frame
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = [p for p in check_params(df, params) if p not in ("events", "time") and df.schema[p] != pl.List(pl.Float64)]
    lines = [f"# LED (multiple dispatchers, local estimates): {sweep_name}", ""]
    unstable = df.filter(pl.col("status") == "unstable") if "status" in df.columns else df.head(0)
    ok = df.filter(pl.col("status") == "ok") if "status" in df.columns else df
    present = [m for m in METRICS if m in ok.columns]
    agg = aggregate(ok, params, metrics=present)
    opt = [c for c in ("mean_qu", "msg_budget_per_job", "p_hat_used") if c in ok.columns]
    extra = ok.group_by(["policy", "engine", *params], maintain_order=True).agg(
        pl.col("eps").first(), pl.col("zeta").first(), pl.col("messages_per_job").mean(),
        pl.col("messages_per_job").std(ddof=1).alias("messages_per_job_sd"),
        *[pl.col(c).mean() for c in opt],
        *[pl.col(c).min().alias(f"{c}_min") for c in opt if c == "p_hat_used"],
        *[pl.col(c).max().alias(f"{c}_max") for c in opt if c == "p_hat_used"])
    for c in ("mean_qu", "msg_budget_per_job", "p_hat_used", "p_hat_used_min", "p_hat_used_max"):
        if c not in extra.columns:
            extra = extra.with_columns(pl.lit(None, dtype=pl.Float64).alias(c))
    agg = agg.join(extra, on=["policy", "engine", *params], how="left", nulls_equal=True)
    # the curve variable: p_hat where it is an axis, else the load; an arm is one curve in it
    # (arm_columns leaves out the parameters that are functions of x, such as a d_u formula)
    x = "p_hat" if "p_hat" in params and ok["p_hat"].drop_nulls().n_unique() > 1 else "lam"
    arm = ["policy", *arm_columns(ok, params, x)] if ok.height else ["policy"]

    lines += ["## Points", "", "| policy | " + " | ".join(p for p in params) +
              " | E[T] (95% CI) | E[sum Q] | eps E[sum Q]/zeta | E[sum U] (eps) | imbalance | messages/arrival"
              " (budget) | p_hat used |",
              "|---|" + "---|" * len(params) + "---|---|---|---|---|---|---|"]
    for r in agg.sort(["policy", *params]).iter_rows(named=True):
        lines.append(f"| {_label(r)} | " + " | ".join(_fmt(r[p]) for p in params) +
                     f" | {r['mean_response']:.4g} +- {_fmt(r['mean_response_hw'])} | {_fmt(r['mean_total_queue'])} | "
                     f"{_fmt(r['ht_ratio'])} +- {_fmt(r['ht_ratio_hw'])} | {_fmt(r['unused_service'])} ({_fmt(r['eps'])}) | "
                     f"{_fmt(r['imbalance'])} | {_fmt(r['messages_per_job'])}"
                     + (f" ({_fmt(r['msg_budget_per_job'])})" if r["msg_budget_per_job"] is not None else "")
                     + f" | {_fmt(r['p_hat_used'])} |")
    lines += _budget_section(agg, params)
    if unstable.height:
        lines += ["", "## Unstable points (not averaged)", ""]
        for r in (unstable.group_by(["policy", *params], maintain_order=True).len()
                  .sort(["policy", *params]).iter_rows(named=True)):
            lines.append(f"- {_label(r)}: " + ", ".join(f"{p}={_fmt(r[p])}" for p in params) +
                         f" ({r['len']} replication(s) unstable)")
    table = heavy_traffic_table(_one_baseline_run(agg), unstable, arm) if x == "lam" else []
    if table and agg["lam"].max() >= 0.98:
        lines += ["", "## Heavy-traffic ratio eps E[sum Q] / zeta as eps -> 0", "",
                  "Rule (docs/led.md): the distance |ratio - 1| and its 95% CI at the smallest eps "
                  "against the distance at the largest eps.", "",
                  "K = E[Q_Sigma(t+1) U_Sigma(t)] / eps: ratio - 1 is essentially K eps / zeta (exact "
                  "identity), so a flat K means a distance falling linearly in eps.", "",
                  "| arm | eps | ratio (95% CI) | K at each eps | |ratio - 1| at smallest eps (95% CI) "
                  "| 1 in the CI there | at largest eps | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in table:
            cells = "; ".join(f"{e:.3g}: {r:.3f} +- {_fmt(h)}" for e, r, h in zip(t["eps"], t["ratio"], t["ratio_hw"]))
            ks = ", ".join(f"{k:.0f}" if k is not None else "-" for k in t["k_qu"])
            lines.append(f"| {t['label']} | {_fmt(min(t['eps']))}..{_fmt(max(t['eps']))} | {cells} | {ks} | "
                         f"{t['distance_at_min_eps']:.3f} +- {_fmt(t['distance_hw'])} | "
                         f"{'yes' if t['one_in_ci_at_min_eps'] else 'no'} | "
                         f"{t['distance_at_max_eps']:.3f} | {t['verdict']} |")
    plots = [p for p in (_plot_response(agg, unstable, arm, x, outdir),
                         _plot_ratio(table, outdir) if table else None,
                         _plot_messages(agg, arm, x, outdir)) if p is not None]
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    report = outdir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (outdir / "heavy_traffic.json").write_text(json.dumps(table, indent=1, default=str))
    # (key, value, step, arm): on the child runs of each arm (pipeline.mlflow_log)
    metrics = [("led_ht_ratio_first_eps", float(t["ratio"][0]), 0,
                {c: t[c] for c in arm if t.get(c) is not None}) for t in table]
    lines = [f"{t['label']}: heavy-traffic ratio eps E[sum Q] / zeta -> 1 as eps -> 0: {t['verdict']}"
             for t in table]  # the console lines of the verdicts (pipeline.run prints them)
    return {"report": report, "plots": plots, "metrics": metrics, "heavy_traffic": table,
            "verdict_lines": lines}


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
ANALYSES = {"led": analyze_led}
