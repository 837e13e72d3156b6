"""The verdicts of the LED analysis: the heavy-traffic rule per arm (:func:`heavy_traffic_table`,
rule in :mod:`analysis.models.led`) and the evidence of unstable points
(:func:`instability_evidence`).
"""
from __future__ import annotations

import polars as pl

from analysis.fmt import num as _fmt
from analysis.models.led.fit import intercept_fit
from analysis.models.led.labels import _label, _series_label, _varying

APPROACHES, NOT_APPROACHING, INCONCLUSIVE, UNSTABLE = (
    "falling toward 1", "not falling toward 1", "inconclusive", "unstable")
#: points (smallest eps) of the intercept fit of Theorem 2's consistency check
FIT_POINTS = 3
#: a drift flag on a run of fewer relaxation times than this is called a short run: the warm-up
#: that sim.led.slotted.suggested_slots allows (runs start empty)
SHORT_RUN = 20.0
REACHED, CONSISTENT, NOT_SHOWN, FEW = "reached", "consistent", "not shown", "too few points"


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
