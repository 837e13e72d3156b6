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
from analysis.fmt import num as _fmt

__all__ = ["analyze_led", "analyze_led_heavy_traffic", "heavy_traffic_table", "intercept_fit", "instability_evidence"]

METRICS = ("mean_response", "mean_total_queue", "unused_service", "imbalance", "ht_ratio")
APPROACHES, NOT_APPROACHING, INCONCLUSIVE, UNSTABLE = (
    "falling toward 1", "not falling toward 1", "inconclusive", "unstable")
#: points (smallest eps) of the intercept fit of Theorem 2's consistency check
FIT_POINTS = 3
#: a drift flag on a run of fewer relaxation times than this is called a short run: the warm-up
#: that sim.led.slotted.suggested_slots allows (runs start empty)
SHORT_RUN = 20.0
REACHED, CONSISTENT, NOT_SHOWN, FEW = "reached", "consistent", "not shown", "too few points"
_COLORS = list(style.PALETTE)
_X_LABELS = {"lam": "load $\\rho = \\lambda_\\Sigma / \\mu_\\Sigma$ (arrivals over service capacity)",
             "p_hat": "update probability $\\hat p$ (Push, per dispatcher and slot)"}


def _panels(keys: list[dict], arm: list[str]) -> list[tuple[str, list[dict]]]:
    """The arms in groups of at most ``style.MAX_SERIES`` (one colour each), split by an arm
    column where one does it (:func:`analysis.style.split_series`): ``(title suffix, arms)``."""
    out = []
    # split by a setting shared by the policies first (p_hat, a variant), so that a panel sets
    # the policies side by side; by a policy's own parameter (d) or the policy last
    own = ("policy", "d")
    for fixed, g in style.split_series(keys, [a for a in arm if a not in own] + ["d", "policy"]):
        out.append((", ".join(f"{_SHORT.get(c, c)} = {_fmt(v)}" for c, v in fixed.items()
                              if v is not None), g))
    return out


def _title(text: str, fixed: str) -> str:
    return f"{text}; {fixed}" if fixed else text


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


#: arm columns that _label already shows (or that the variant's own columns spell out)
_IN_LABEL = ("policy", "update", "ties", "variant", "engine", "model")
_SHORT = {"p_hat": "p\u0302", "d_u": "d_u", "m_dispatchers": "M", "n_servers": "N",
          "lam": "\u03c1"}


def _varying(keys: list[dict]) -> list[str]:
    """The columns whose value differs between the arms ``keys`` (each a dict of arm values)."""
    cols = list(dict.fromkeys(c for k in keys for c in k))
    return [c for c in cols if len({repr(k.get(c)) for k in keys}) > 1]


def _series_label(row: dict, varying: list[str]) -> str:
    """:func:`_label` plus the arm columns that tell this arm from the others (``p_hat``,
    ``d_u``, ...), or the variant's name where nothing else does."""
    shown = set(_IN_LABEL)
    if row.get("d") is not None and _label(row) != _label({**row, "d": None}):
        shown.add("d")  # the name carries it (power-of-2)
    extra = [f"{_SHORT.get(c, c)}={_fmt(row.get(c))}" for c in varying
             if c not in shown and row.get(c) is not None]
    if not extra and "variant" in varying and row.get("variant"):
        extra = [str(row["variant"])]
    return _label(row) + (f" ({', '.join(extra)})" if extra else "")


def intercept_fit(eps, ratio, se, n_rep) -> tuple[float, float, float, float]:
    """Weighted least squares of ``ratio - 1 = a + b eps`` (weights ``1/se^2``): ``(a, a_hw,
    b, b_hw)`` with 95% half-widths from the SEs and the t quantile of ``min(n_rep) - 1``
    degrees of freedom (normal if ``n_rep`` is 1). NaN when the fit is not determined."""
    from scipy import stats

    x = np.asarray(eps, float)
    y = np.asarray(ratio, float) - 1.0
    s_ = np.asarray(se, float)
    nan = float("nan")
    if x.size < 2 or np.unique(x).size < 2 or not np.all(np.isfinite(s_)) or np.any(s_ <= 0):
        return nan, nan, nan, nan
    w = 1.0 / (s_ * s_)
    sw, sx, sy = w.sum(), (w * x).sum(), (w * y).sum()
    sxx, sxy = (w * x * x).sum(), (w * x * y).sum()
    det = sw * sxx - sx * sx
    a = (sxx * sy - sx * sxy) / det
    b = (sw * sxy - sx * sy) / det
    r = int(min(n_rep))
    q = float(stats.t.ppf(0.975, r - 1)) if r >= 2 else float(stats.norm.ppf(0.975))
    return float(a), q * math.sqrt(sxx / det), float(b), q * math.sqrt(sw / det)


def heavy_traffic_table(agg: pl.DataFrame, unstable: pl.DataFrame, arm: list[str]) -> list[dict]:
    """Per arm: the ratio at each eps and the verdict by the rule in the module docstring."""
    rows = []
    if "ht_ratio" not in agg.columns:
        return rows
    keys = agg.select(arm).unique(maintain_order=True).rows(named=True)
    varying = _varying(keys)
    for key in keys:
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
        fit_pts = pts.head(FIT_POINTS)
        a = a_hw = b = b_hw = float("nan")
        if eps_min_unstable:
            theorem = UNSTABLE
        elif contains_small:
            theorem = REACHED
        elif pts.height < FIT_POINTS:
            theorem = FEW
        else:
            a, a_hw, b, b_hw = intercept_fit(fit_pts["eps"], fit_pts["ht_ratio"],
                                             fit_pts["ht_ratio_se"], fit_pts["n_rep"])
            theorem = CONSISTENT if abs(a) <= a_hw else NOT_SHOWN
        k_qu = ([q / e if q is not None and e else None
                 for q, e in zip(pts["mean_qu"].to_list(), pts["eps"].to_list())]
                if "mean_qu" in pts.columns else [None] * pts.height)
        rows.append({**key, "label": _series_label({**small, **key}, varying),
                     "eps": pts["eps"].to_list(),
                     "ratio": pts["ht_ratio"].to_list(), "ratio_hw": pts["ht_ratio_hw"].to_list(),
                     "distance_at_min_eps": g_small, "distance_hw": hw, "distance_at_max_eps": g_large,
                     "one_in_ci_at_min_eps": bool(contains_small), "k_qu": k_qu,
                     "verdict": verdict, "theorem": theorem, "intercept": a,
                     "intercept_hw": a_hw, "slope": b, "slope_hw": b_hw,
                     "fit_eps": fit_pts["eps"].to_list()})
    return rows


def _theorem_line(t: dict) -> str:
    """The Theorem 2 field of one arm, with the number behind it."""
    i = int(np.argmin(t["eps"]))
    at = f"eps = {t['eps'][i]:.3g}: ratio {t['ratio'][i]:.3f} +- {_fmt(t['ratio_hw'][i])}"
    if t["theorem"] in (CONSISTENT, NOT_SHOWN):
        return (f"{t['theorem']} (intercept {t['intercept']:.3f} +- {t['intercept_hw']:.3f} "
                f"through eps {', '.join(f'{e:.3g}' for e in t['fit_eps'])}; {at})")
    return f"{t['theorem']} ({at})"


def instability_evidence(unstable: pl.DataFrame, df: pl.DataFrame, params: list[str]) -> list[str]:
    """Report lines: per point with unstable replications, the evidence (queue cap or drift
    test, with its p-value and fitted rise) and the run's length in relaxation times."""
    if not unstable.height:
        return []
    has = all(c in unstable.columns for c in ("unstable_by", "drift_p", "drift_rise",
                                              "relaxation_slots"))
    lines = ["", "## Unstable points (not averaged)", "",
             "Evidence per replication: `cap` = sum Q passed the run's `queue_cap` (default 100 N "
             "(1 + zeta/eps), a hundred times the level of mu-weighted random routing; the run "
             "stopped there): an unstable policy, or a stable one whose level is above the cap "
             "(stale L-JSQ on many servers is; docs/led.md), which only a run with a larger "
             "`queue_cap` tells apart; `drift` = the batch "
             "means of sum Q grow (one-sided p < 1e-4 and a fitted rise above 20% of the mean). "
             "The run's length is in relaxation times 2 zeta / eps^2 (state-space collapse; a "
             "policy without it relaxes more slowly). A drift flag on a run shorter than "
             f"{SHORT_RUN:.0f} relaxation times (the warm-up of suggested_slots) is a short run; "
             "on a longer run it says that sum Q was not steady within the run, which an unstable "
             "policy and one relaxing far more slowly than 2 zeta / eps^2 both give.", ""]
    growth = has and all(c in unstable.columns for c in ("unused_service", "eps"))
    if has:
        lines += ["Growth: E[sum_n U_n] - eps, the rate at which sum Q rose (tasks per slot; 0 in "
                  "steady state, by E[Q(t+1) - Q(t)] = lam_Sigma - mu_Sigma + E[U]). A transient "
                  "from empty rises too: what tells instability is a growth that persists in a "
                  "run several times longer (docs/led.md).", "",
                  "| policy | point | unstable / runs | evidence | growth per slot | run (slots) | "
                  "run / relaxation time | reading |", "|---|---|---|---|---|---|---|---|"]
    keys = ["policy", *params]
    n_runs = df.group_by(keys, maintain_order=True).len().rename({"len": "_runs"})
    pts = unstable.group_by(keys, maintain_order=True).agg(
        pl.len().alias("_n"), *([pl.col(c) for c in ("unstable_by", "drift_p", "drift_rise",
                                                       "relaxation_slots", "events_run")]
                                if has else []),
        *([(pl.col("unused_service") - pl.col("eps")).mean().alias("_growth")] if growth else []))
    pts = pts.join(n_runs, on=keys, how="left", nulls_equal=True).sort(keys)
    for r in pts.iter_rows(named=True):
        point = ", ".join(f"{p}={_fmt(r[p])}" for p in params)
        if not has:
            lines.append(f"- {_label(r)}: {point} ({r['_n']} replication(s) unstable)")
            continue
        ev, reading = [], set()
        runs = [e / x if x else float("nan") for e, x in zip(r["events_run"], r["relaxation_slots"])]
        for by, p, rise, rel in zip(r["unstable_by"], r["drift_p"], r["drift_rise"], runs):
            if by == "cap":
                ev.append("cap")
                reading.add("cap passed: unstable or above the cap")
            else:
                ev.append(f"drift p={p:.1e} rise {100 * rise:.0f}%")
                reading.add("drift in a short run" if rel < SHORT_RUN else "growing (drift test)")
        g = _fmt(r.get("_growth")) if growth else "-"
        lines.append(f"| {_label(r)} | {point} | {r['_n']} / {r['_runs']} | {'; '.join(ev)} | {g} | "
                     f"{max(r['events_run']):.3g} | {min(runs):.3g} | {'; '.join(sorted(reading))} |")
    return lines


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
    all_keys = agg.select(arm).unique(maintain_order=True).rows(named=True)
    varying = _varying(all_keys)
    panels = _panels(all_keys, arm)
    fig, axes = _axes(len(panels))
    top = float(agg["mean_response"].max()) * 2
    for ax, (fixed, keys) in zip(axes, panels):
        zero, crosses = False, False
        for j, key in enumerate(keys):
            c = _COLORS[j]
            s = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()]).sort(x)
            zero |= style.errorbar_log(ax, s[x].to_numpy(), s["mean_response"].to_numpy(),
                                       np.asarray(s["mean_response_hw"].to_list(), float), color_=c,
                                       fmt=style.marker(j) + "-", ms=4, capsize=2,
                                       label=_series_label({**s.row(0, named=True), **key},
                                                           varying))
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
        ax.set_title(_title("mean response time (95% CI over replications)", fixed), fontsize=10)
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
                                       label=f"{t['label']}: {t['verdict']}; Theorem 2 "
                                             f"{t['theorem']}")
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
    all_keys = agg.select(arm).unique(maintain_order=True).rows(named=True)
    varying = _varying(all_keys)
    panels = _panels(all_keys, arm)
    fig, axes = _axes(len(panels))
    for ax, (fixed, keys) in zip(axes, panels):
        vals = []
        for j, key in enumerate(keys):
            s = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()],
                           pl.col("messages_per_job") > 0).sort(x)
            if s.height:
                ax.plot(s[x], s["messages_per_job"], style.marker(j) + "-", ms=4, color=_COLORS[j],
                        label=_series_label({**s.row(0, named=True), **key}, varying) + " (spent)")
                vals += s["messages_per_job"].to_list()
                b = s.filter(pl.col("msg_budget_per_job").is_not_null())
                if b.height:
                    ax.plot(b[x], b["msg_budget_per_job"], "--", lw=1.2, color=_COLORS[j],
                            label=_series_label({**b.row(0, named=True), **key}, varying)
                            + " budget")
                    vals += b["msg_budget_per_job"].to_list()
        style.log_axis(ax, "y", vals or None)
        if x == "p_hat":
            style.log_axis(ax, "x", agg[x].drop_nulls().to_list())
        ax.set_xlabel(_X_LABELS.get(x, style.label(x, ["slotted"])))
        ax.set_ylabel("one-way messages per arriving task")
        ax.set_title(_title("messages per arrival: spent (solid), budget (dashed); 0 not shown",
                            fixed), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    path = outdir / "messages.png"
    fig.savefig(path, dpi=120)
    return path


def imbalance_trend(agg: pl.DataFrame, arm: list[str], over: str) -> list[dict]:
    """Per arm with at least 3 points in ``over`` (``p_hat``, or L-Pod's ``d`` as the tilt
    (d - 1) / N): the log-log slope of ``imbalance`` against it by
    :func:`analysis.fit.wls_loglog` (delta-method weights from the replications' SEs, 95% t
    interval with the residual scale). ``over`` is taken out of the arm."""
    from analysis.fit import wls_loglog

    if over not in agg.columns or "imbalance" not in agg.columns:
        return []
    group = [c for c in arm if c != over]
    keys = agg.select(group).unique(maintain_order=True).rows(named=True)
    varying = _varying(keys)
    out = []
    for key in keys:
        pts = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()],
                         pl.col(over).is_not_null(), pl.col("imbalance") > 0,
                         pl.col("imbalance_se") > 0).sort(over)
        if pts[over].n_unique() < 3:
            continue
        xs = pts[over].to_numpy().astype(float)
        if over == "d":  # the tilt toward the sampled shortest estimate, (d - 1) / N
            xs = (xs - 1.0) / pts["n_servers"].to_numpy().astype(float)
        fit = wls_loglog(xs, pts["imbalance"].to_numpy(), pts["imbalance_se"].to_numpy())
        out.append({**key, "label": _series_label({**pts.row(0, named=True), **key}, varying),
                    "over": over, "x": xs.tolist(), "imbalance": pts["imbalance"].to_list(),
                    "slope": fit["slope"], "slope_lo": fit["slope_lo"], "slope_hi": fit["slope_hi"]})
    return out


def _trend_lines(trends: list[dict]) -> list[str]:
    if not trends:
        return []
    over = trends[0]["over"]
    what = ("the update probability p_hat" if over == "p_hat"
            else "the tilt (d - 1) / N of L-Pod(d)")
    lines = ["", f"## Queue imbalance against {what}", "",
             "E||Q - mean(Q)||_2 at slot starts; slope of log(imbalance) against log("
             f"{'p_hat' if over == 'p_hat' else '(d - 1) / N'}) by weighted least squares (95% CI).", "",
             "| arm | " + ("p_hat" if over == "p_hat" else "tilt") + ": imbalance | slope (95% CI) |",
             "|---|---|---|"]
    for t in trends:
        cells = "; ".join(f"{x:.3g}: {v:.4g}" for x, v in zip(t["x"], t["imbalance"]))
        lines.append(f"| {t['label']} | {cells} | {t['slope']:.3f} [{t['slope_lo']:.3f}, "
                     f"{t['slope_hi']:.3f}] |")
    return lines


def _plot_imbalance(agg, arm, x, outdir) -> Path | None:
    agg = _one_baseline_run(agg)
    if "imbalance" not in agg.columns or agg.height == 0 or agg[x].n_unique() < 3:
        return None
    all_keys = agg.select(arm).unique(maintain_order=True).rows(named=True)
    varying = _varying(all_keys)
    panels = _panels(all_keys, arm)
    fig, axes = _axes(len(panels))
    for ax, (fixed, keys) in zip(axes, panels):
        zero = False
        for j, key in enumerate(keys):
            s = agg.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()],
                           pl.col("imbalance").is_not_null()).sort(x)
            if not s.height:
                continue
            zero |= style.errorbar_log(ax, s[x].to_numpy(), s["imbalance"].to_numpy(),
                                       np.asarray(s["imbalance_hw"].to_list(), float),
                                       color_=_COLORS[j], fmt=style.marker(j) + "-", ms=4,
                                       capsize=2,
                                       label=_series_label({**s.row(0, named=True), **key},
                                                           varying))
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.log_axis(ax, "y", agg["imbalance"].drop_nulls().to_list())
        if x == "p_hat":
            style.log_axis(ax, "x", agg[x].drop_nulls().to_list())
        ax.set_xlabel(_X_LABELS[x])
        ax.set_ylabel("imbalance $E\\,\\|Q - \\bar Q\\,\\mathbf{1}\\|_2$ (tasks)")
        ax.set_title(_title("queue imbalance at slot starts (95% CI over replications)", fixed),
                     fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    path = outdir / f"imbalance_vs_{x}.png"
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
    if "d" in arm and agg.filter(pl.col("policy") == "l_pod")["d"].n_unique() >= 3:
        trends += imbalance_trend(agg.filter(pl.col("policy") == "l_pod"),
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
ANALYSES = {"led": analyze_led, "led_heavy_traffic": analyze_led_heavy_traffic}
