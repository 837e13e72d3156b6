"""Multiple dispatchers with local estimates (LED, Zhou, Shroff & Wierman): response against the
load, the queue imbalance, messages, unstable points with their evidence; and (analysis
``led_heavy_traffic``) the heavy-traffic ratio eps E[sum Q] / zeta against eps with its verdicts.

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

Theorem 2's claim, per arm (``theorem`` field; docs/led.md): ``reached`` if the 95% interval of
the ratio at the smallest eps contains 1; else ``consistent`` if the intercept of a weighted
least-squares line of ``ratio - 1`` against eps through the :data:`FIT_POINTS` smallest eps
(weights 1/SE^2 of the replications' means) has a 95% interval containing 0 (t quantile with
the replications' ``R - 1`` degrees of freedom, the smallest R of those points); else ``not
shown``; ``unstable`` as above; ``too few points`` below :data:`FIT_POINTS` stable points. This
is consistency with the theorem, not confirmation: a line through the last points extrapolates
a K that may still move.

Instability evidence (the slotted engine's ``unstable_by``, ``drift_p``, ``drift_rise`` and
``relaxation_slots``): per flagged point the report lists which test fired (the queue cap, or the
drift test with its p-value and fitted rise) and the run's length in relaxation times
``2 zeta / eps^2``; a drift flag on a run shorter than :data:`SHORT_RUN` relaxation times is
labelled a short run, not evidence of instability.

Message budget (rows with ``msg_budget_per_job``, docs/led.md): the target beside the budget
actually spent (``messages_per_job``) and the ``p_hat_used`` per point, in the report and as
dashed lines in the messages plot.

The package is split by role: :mod:`.labels` (arms and their labels), :mod:`.fit` (the
intercept and imbalance-trend fits), :mod:`.verdicts`, :mod:`.plots` and :mod:`.report`; this
module runs them (:func:`analyze_led`) and keeps every name the single module had.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from analysis import declared
from analysis.aggregate import aggregate, check_params
from analysis.fit import arm_columns
from analysis.fmt import num as _fmt
from analysis.models.led.fit import imbalance_trend, intercept_fit
from analysis.models.led.labels import _IN_LABEL, _SHORT, _label, _series_label, _varying  # noqa: F401
from analysis.models.led.plots import (  # noqa: F401
    _COLORS,
    _X_LABELS,
    _axes,
    _one_baseline_run,
    _panels,
    _plot_imbalance,
    _plot_messages,
    _plot_ratio,
    _plot_response,
    _title,
)
from analysis.models.led.report import _budget_section, _theorem_line, _trend_lines
from analysis.models.led.verdicts import (  # noqa: F401
    APPROACHES,
    CONSISTENT,
    FEW,
    FIT_POINTS,
    INCONCLUSIVE,
    NOT_APPROACHING,
    NOT_SHOWN,
    REACHED,
    SHORT_RUN,
    UNSTABLE,
    heavy_traffic_table,
    instability_evidence,
)

__all__ = ["analyze_led", "analyze_led_heavy_traffic", "heavy_traffic_table", "intercept_fit", "instability_evidence"]

METRICS = ("mean_response", "mean_total_queue", "unused_service", "imbalance", "ht_ratio")


def analyze_led(frame, params, outdir, sweep_name: str = "", heavy_traffic: bool = False) -> dict:
    """The LED analysis of a sweep's rows: tables and plots; with ``heavy_traffic`` (the
    ``led_heavy_traffic`` analysis) also the heavy-traffic ratio against eps and its verdicts."""
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
    # (the one with more values where both vary)
    n_p = ok["p_hat"].drop_nulls().n_unique() if "p_hat" in params else 0
    x = "p_hat" if n_p > 1 and n_p > ok["lam"].n_unique() else "lam"
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
    lines += instability_evidence(unstable, df, params)
    table = (heavy_traffic_table(_one_baseline_run(agg), unstable, arm)
             if heavy_traffic and x == "lam" else [])
    if table:
        lines += ["", "## Heavy-traffic ratio eps E[sum Q] / zeta as eps -> 0", "",
                  "Rule (docs/led.md): the distance |ratio - 1| and its 95% CI at the smallest eps "
                  "against the distance at the largest eps.", "",
                  "K = E[Q_Sigma(t+1) U_Sigma(t)] / eps: ratio - 1 is essentially K eps / zeta (exact "
                  "identity), so a flat K means a distance falling linearly in eps.", "",
                  "Theorem 2 (docs/led.md): `reached` if the ratio's 95% CI at the smallest eps "
                  f"contains 1; else `consistent` if a weighted line of ratio - 1 against eps "
                  f"through the {FIT_POINTS} smallest eps has an intercept whose 95% CI contains 0 "
                  "(consistency, not confirmation); else `not shown`.", "",
                  "| arm | eps | ratio (95% CI) | K at each eps | |ratio - 1| at smallest eps (95% CI) "
                  "| 1 in the CI there | at largest eps | verdict | intercept (95% CI) | Theorem 2 |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for t in table:
            cells = "; ".join(f"{e:.3g}: {r:.3f} +- {_fmt(h)}" for e, r, h in zip(t["eps"], t["ratio"], t["ratio_hw"]))
            ks = ", ".join(f"{k:.0f}" if k is not None else "-" for k in t["k_qu"])
            icpt = (f"{t['intercept']:.3f} +- {t['intercept_hw']:.3f}"
                    if math.isfinite(t["intercept"]) else "-")
            lines.append(f"| {t['label']} | {_fmt(min(t['eps']))}..{_fmt(max(t['eps']))} | {cells} | {ks} | "
                         f"{t['distance_at_min_eps']:.3f} +- {_fmt(t['distance_hw'])} | "
                         f"{'yes' if t['one_in_ci_at_min_eps'] else 'no'} | "
                         f"{t['distance_at_max_eps']:.3f} | {t['verdict']} | {icpt} | {t['theorem']} |")
    trends = imbalance_trend(agg, arm, "p_hat") if x == "p_hat" else []
    sampling_led = declared.policy_where("led", local=True, samples=True)  # L-Pod
    if "d" in arm and agg.filter(pl.col("policy") == sampling_led)["d"].n_unique() >= 3:
        trends += imbalance_trend(agg.filter(pl.col("policy") == sampling_led),
                                  list(dict.fromkeys([*arm, x])), "d")
    for over in dict.fromkeys(t["over"] for t in trends):
        lines += _trend_lines([t for t in trends if t["over"] == over])
    plots = [p for p in (_plot_response(agg, unstable, arm, x, outdir),
                         _plot_imbalance(agg, arm, x, outdir),
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
             f"; Theorem 2: {_theorem_line(t)}" for t in table]
    lines += [f"{t['label']}: imbalance ~ {'p_hat' if t['over'] == 'p_hat' else '((d-1)/N)'}"
              f"^{t['slope']:.2f} [{t['slope_lo']:.2f}, {t['slope_hi']:.2f}]" for t in trends]  # the console lines of the verdicts (pipeline.run prints them)
    return {"report": report, "plots": plots, "metrics": metrics, "heavy_traffic": table,
            "imbalance_trends": trends,
            "verdict_lines": lines}


def analyze_led_heavy_traffic(frame, params, outdir, sweep_name: str = "") -> dict:
    """The ``led_heavy_traffic`` analysis: :func:`analyze_led` with its heavy-traffic part."""
    return analyze_led(frame, params, outdir, sweep_name, heavy_traffic=True)


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
