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

Verdict rule of the gap as N grows (also in docs/jiq.md; :func:`analysis.fit.gap_rate_verdict`), per
arm and quantity: the gap at each N is significant when ``|gap| > 4 SE`` (SE over replications).
With at least 4 significant points, ``log|gap| = a + b log N`` is fitted by weighted least squares
on them (:func:`analysis.fit.wls_loglog`): ``falling`` if the 95% interval of b lies below 0, ``not
falling`` if it lies at or above 0, else ``inconclusive``; the note gives the rate "over N =
a..b" and says that the gap's limit is undecided beyond the largest N (a trend over the range,
never a limit claim: nothing here carries it further). With fewer than 4 significant points: ``consistent`` (the gap is within
4 SE from the N given on; an O(1/N) gap falls below the SE at large N, so no rate can be fitted)
-- or ``inconclusive`` when no point at all is within 4 SE.

The package is split by role: :mod:`.labels`, :mod:`.fit` (tails, convergence, the q_i
table), :mod:`.verdicts` (orderings, crossovers), :mod:`.plots` and :mod:`.report`; this module
runs them (:func:`analyze_jiq`) and keeps every name the single module had.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from analysis import style
from analysis.aggregate import aggregate, check_params
from analysis.fit import MIN_FIT_POINTS, SIGNIFICANT_Z
from analysis.fmt import num as _fmt
from analysis.fmt import pct as _pct
from analysis.models.jiq.fit import (
    Q_LEVELS_MAX,  # noqa: F401
    _tail_hw,
    _tail_stats,
    convergence_table,
    q_table,
)
from analysis.models.jiq.labels import _name
from analysis.models.jiq.plots import _COLORS, _errorbar, _plot_convergence, _plot_messages, _plot_ordering, _plot_response, _plot_tails  # noqa: F401
from analysis.models.jiq.report import (  # noqa: F401
    FIG7_LEVELS,
    FIG7_POLICIES,
    HEAVY_LAM,
    PAPER_TABLE2,
    Q_MIN_FOR_MAX,
    _fig7_report,
    _lu_report_and_plot,
    _ordering_report,
    _q_report,
)
from analysis.models.jiq.verdicts import crossovers, orderings  # noqa: F401

__all__ = ["analyze_jiq", "PAPER_FIG4", "PAPER_TABLE2", "convergence_table", "q_table", "orderings",
           "crossovers", "SIGNIFICANT_Z", "MIN_FIT_POINTS"]

#: the paper's Figure 4 at lam = 0.98, r = 10, d = 2 (read off the plot, as its text states)
PAPER_FIG4 = {"pod": 4.5, "jiq": 5.3, "jiq_pod": 2.6}
PAPER_FIG4_LAM = 0.98
#: the paper's Figure 6: deletes at most about this share of join + delete requests at lam = 0.9
PAPER_FIG6_DELETE_SHARE = 0.08

RATES = ("join_rate", "delete_rate", "probe_rate")
METRICS = ("mean_response", "p0", "mean_iqueue", *RATES, "lu_mean_response")


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
