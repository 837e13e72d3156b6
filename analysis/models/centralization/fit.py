"""The per-point table and the fits of the centralization analysis: intervals, the distance to
the invariant state against N, and the slope of v_1 against log 1/(1 - lam).
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import stats

from analysis.fit import point_significant, wls_loglog
from analysis.fmt import n_span, n_value
from analysis.models.centralization.theory import invariant_mean_queue, invariant_tail, predicted_slope, relaxation_time

SIM_ENGINES = ("occupancy", "agent")
#: loads used by the v_1 slope fit (Corollary 3 is about lam -> 1)
LAM_FIT_MIN = 0.9
#: runs shorter than this many fluid relaxation times are flagged in the report
MIN_RELAXATIONS = 20.0


# ---------------------------------------------------------------------------------------------
# tables


def _ci(values: np.ndarray, batch_se) -> tuple[float, float, float]:
    """(mean, se, half-width) of the replication mean.

    R >= 2: se = the larger of sd/sqrt(R) and the pooled batch-means SE of the runs,
    sqrt(mean(se_r^2)/R) (when the rows have one); t(R-1) interval. With R = 4 the replication
    SE has 3 degrees of freedom and now and then comes out several times too small (a point that
    then dominates a weighted fit); the batch-means SE is too small when batches are correlated;
    the larger of the two is the safer. R = 1: the run's batch-means SE, 1.96.
    """
    values = np.asarray(values, dtype=np.float64)
    r = values.size
    mean = float(values.mean())
    bse = np.asarray([] if batch_se is None else batch_se, dtype=np.float64)
    bse = bse[np.isfinite(bse)]
    pooled = float(math.sqrt(np.mean(bse**2) / r)) if bse.size == r and r > 0 else math.nan
    if r >= 2:
        se = float(values.std(ddof=1) / math.sqrt(r))
        if math.isfinite(pooled):
            se = max(se, pooled)
        return mean, se, float(stats.t.ppf(0.975, r - 1) * se)
    if math.isfinite(pooled):
        return mean, pooled, 1.96 * pooled
    return mean, math.nan, math.nan


def point_table(frame: pl.DataFrame) -> list[dict]:
    """One dict per (engine, n_servers, lam, p) of successful ``central`` rows: estimates with
    SEs and half-widths, the replications' tails (matrix), the mean tail and its per-level SE."""
    df = frame
    if "status" in df.columns:
        df = df.filter(pl.col("status") == "ok")
    df = df.filter(pl.col("policy") == "central")
    keys = ["engine", "n_servers", "lam", "p"]
    out = []
    if df.height == 0:
        return out
    for (engine, n, lam, p), g in df.group_by(keys, maintain_order=True):
        g = g.sort("replication") if "replication" in g.columns else g
        tails = [list(t) for t in g["tail"].to_list() if t is not None]
        width = min((len(t) for t in tails), default=0)
        mat = np.array([t[:width] for t in tails], dtype=np.float64).reshape(len(tails), width)
        exact = engine not in SIM_ENGINES
        row = {"engine": engine, "n_servers": int(n), "lam": float(lam), "p": float(p),
               "n_rep": int(g.height), "tails": mat}
        for m in ("mean_queue", "mean_response", "prob_wait"):
            vals = g[m].to_numpy().astype(np.float64)
            bse = (g[f"{m}_se"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
                   if f"{m}_se" in g.columns else None)
            mean, se, hw = _ci(vals, None if exact else bse)
            if exact:
                se, hw = 0.0, 0.0
            row[m], row[f"{m}_se"], row[f"{m}_hw"] = mean, se, hw
        row["tail"] = mat.mean(axis=0) if mat.size else np.zeros(0)
        if exact:
            row["tail_se"] = np.zeros(width)
        elif mat.shape[0] >= 2:
            row["tail_se"] = mat.std(axis=0, ddof=1) / math.sqrt(mat.shape[0])
        else:
            row["tail_se"] = np.full(width, math.nan)
        row["sim_time"] = float(g["sim_time"].mean()) if "sim_time" in g.columns else math.nan
        row["tau"] = relaxation_time(row["lam"], row["p"])
        out.append(row)
    return out


def _distance(row: dict) -> dict:
    """Sup / l1 distance of a point's mean tail to the invariant tail (module docstring)."""
    tail, se = row["tail"], row["tail_se"]
    k = tail.size
    inv = invariant_tail(row["lam"], row["p"], max(k, 1))[:k]
    gap = tail - inv
    absg = np.abs(gap)
    # a level is informative if its SE is positive and, on average, at least one station is at
    # or above it (N max(sbar_i, s_i) >= 1): below that the time average is made of a few rare
    # excursions of single stations, its law across runs is very skewed (replications from 0
    # to 6x the invariant value were measured at p = 0, lam = 0.8, N = 100, level 49) and a
    # t-based SE from a few replications means nothing
    informative = np.isfinite(se) & (se > 0) & (row["n_servers"] * np.maximum(tail, inv) >= 1.0)
    k_inf = int(informative.sum())
    r = row["n_rep"]
    tail_p = 1 - 0.025 / max(k_inf, 1)
    q = float(stats.t.ppf(tail_p, r - 1) if r >= 2 else stats.norm.ppf(tail_p))
    with np.errstate(invalid="ignore"):
        sig_levels = informative & (absg > q * np.where(informative, se, np.inf))
    if sig_levels.any():
        arg = int(np.argmax(np.where(sig_levels, absg, -1.0)))
    else:
        arg = int(np.argmax(absg)) if k else 0
    v1_gap = row["mean_queue"] - invariant_mean_queue(row["lam"], row["p"])
    return {"sup": float(absg[arg]) if k else 0.0, "sup_se": float(se[arg]) if k else math.nan,
            "sup_level": arg + 1, "sup_q": q, "sup_all": float(absg.max()) if k else 0.0,
            "sup_significant": bool(sig_levels.any()),
            "n_levels_significant": int(sig_levels.sum()), "n_levels_informative": k_inf,
            "l1": float(absg.sum()), "l1_floor": float(math.sqrt(2.0 / math.pi) * np.nansum(se)),
            "v1_gap": v1_gap, "v1_gap_se": row["mean_queue_se"], "v1_gap_hw": row["mean_queue_hw"]}


def distance_table(points: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per simulated point its distances (:func:`_distance`); per arm (engine, lam, p) with at
    least two N the fits and verdicts of the sup distance and of the v_1 gap."""
    rows = []
    for r in points:
        if r["engine"] in SIM_ENGINES and r["tail"].size:
            rows.append({**{k: r[k] for k in ("engine", "n_servers", "lam", "p", "n_rep",
                                              "sim_time", "tau")}, **_distance(r)})
    arms = []
    keys = sorted({(r["engine"], r["lam"], r["p"]) for r in rows})
    for engine, lam, p in keys:
        pts = sorted([r for r in rows if (r["engine"], r["lam"], r["p"]) == (engine, lam, p)],
                     key=lambda r: r["n_servers"])
        if len({r["n_servers"] for r in pts}) < 2:
            continue
        arm = {"engine": engine, "lam": lam, "p": p, "n_points": len(pts),
               "n_min": pts[0]["n_servers"], "n_max": pts[-1]["n_servers"]}
        sig = [r for r in pts if r["sup_significant"] and math.isfinite(r["sup_se"])
               and r["sup_se"] > 0]
        arm["sup_n_significant"] = len(sig)
        arm.update(_fit(sig, "sup", "sup_se", "sup"))
        if not sig:
            arm["sup_verdict"] = "no significant distance"
        elif len(sig) < 3:
            arm["sup_verdict"] = f"distance detected at {len(sig)} N; too few for a rate (need 3)"
        elif arm.get("sup_slope_hi") is not None and arm["sup_slope_hi"] < 0:
            arm["sup_verdict"] = _falling(arm, "sup")
        else:
            arm["sup_verdict"] = "inconclusive"
        # v_1 gap, the project's significance rule
        gaps = np.array([r["v1_gap"] for r in pts])
        ses = np.array([r["v1_gap_se"] for r in pts])
        hws = np.array([r["v1_gap_hw"] for r in pts])
        mask = point_significant(gaps, ses, hws)
        sig = [r for r, m in zip(pts, mask) if m]
        signs = {math.copysign(1.0, r["v1_gap"]) for r in sig}
        arm["v1_n_significant"] = len(sig)
        arm.update(_fit([{**r, "v1_abs": abs(r["v1_gap"])} for r in sig], "v1_abs", "v1_gap_se", "v1"))
        if not sig:
            arm["v1_verdict"] = "no significant gap"
        elif len(sig) < 3:
            arm["v1_verdict"] = f"gap detected at {len(sig)} N; too few for a rate (need 3)"
        elif len(signs) == 1 and arm.get("v1_slope_hi") is not None and arm["v1_slope_hi"] < 0:
            arm["v1_verdict"] = _falling(arm, "v1")
        else:
            arm["v1_verdict"] = "inconclusive"
        arms.append(arm)
    return rows, arms


def _falling(arm: dict, prefix: str) -> str:
    """A distance that falls over the fitted N, in the words of a range: the rate with its 95%
    interval over the N it was fitted on; whether it vanishes is undecided beyond the arm's
    largest N (the invariant state is the N -> infinity limit, but nothing here carries the
    simulations' distance to it past the range)."""
    ns = arm[f"{prefix}_fit_n"]
    return (f"falling like N^{arm[f'{prefix}_slope']:.2f} [{arm[f'{prefix}_slope_lo']:.2f}, "
            f"{arm[f'{prefix}_slope_hi']:.2f}] over {n_span(min(ns), max(ns))}; "
            f"undecided beyond N = {n_value(arm['n_max'])}")


def _fit(pts: list[dict], value: str, se: str, prefix: str) -> dict:
    out = {f"{prefix}_{k}": None for k in ("slope", "slope_lo", "slope_hi", "intercept", "red_chi2")}
    if len(pts) >= 3:
        f = wls_loglog([r["n_servers"] for r in pts], [r[value] for r in pts], [r[se] for r in pts])
        if f["red_chi2"] < 1.0:
            # wls_loglog scales the covariance by chi2/(n-2) even when that is below 1; with a
            # handful of points a small chi2 by chance would then make the interval too narrow:
            # here the scale is max(1, chi2/(n-2)), as in the v_1 slope fit
            widen = 1.0 / math.sqrt(max(f["red_chi2"], 1e-300))
            half = (f["slope_hi"] - f["slope"]) * widen
            f = {**f, "slope_se": f["slope_se"] * widen, "slope_lo": f["slope"] - half,
                 "slope_hi": f["slope"] + half}
        out.update({f"{prefix}_{k}": f[k] for k in ("slope", "slope_lo", "slope_hi", "intercept",
                                                     "red_chi2")})
        out[f"{prefix}_fit_n"] = [r["n_servers"] for r in pts]
    return out


def _wls_line(x, y, se) -> dict:
    """y = a + b x by WLS, weights 1/se^2, covariance scaled by max(1, chi2/(n-2)), t(n-2) CI."""
    x, y, se = (np.asarray(v, dtype=np.float64) for v in (x, y, se))
    n = x.size
    X = np.column_stack([np.ones(n), x])
    w = 1.0 / se**2
    A = (X.T * w) @ X
    coef = np.linalg.solve(A, (X.T * w) @ y)
    resid = y - X @ coef
    red = float(np.sum(w * resid**2) / (n - 2)) if n > 2 else math.nan
    cov = np.linalg.inv(A) * max(1.0, red if math.isfinite(red) else 1.0)
    b_se = float(math.sqrt(cov[1, 1]))
    half = float(stats.t.ppf(0.975, n - 2)) * b_se if n > 2 else math.inf
    return {"a": float(coef[0]), "b": float(coef[1]), "b_se": b_se, "b_lo": float(coef[1]) - half,
            "b_hi": float(coef[1]) + half, "red_chi2": red, "n": int(n)}


def slope_table(points: list[dict]) -> list[dict]:
    """Per simulation engine and p > 0: the v_1 growth against log(1/(1-lam)) at the largest N
    over the loads lam >= LAM_FIT_MIN (module docstring), with b_fluid, b_pred and verdicts."""
    out = []
    sims = [r for r in points if r["engine"] in SIM_ENGINES]
    for engine in sorted({r["engine"] for r in sims}):
        for p in sorted({r["p"] for r in sims if r["engine"] == engine and r["p"] > 0}):
            cand = [r for r in sims if r["engine"] == engine and r["p"] == p]
            n_max = max(r["n_servers"] for r in cand)
            pts = sorted([r for r in cand if r["n_servers"] == n_max and r["lam"] >= LAM_FIT_MIN - 1e-12
                          and r["lam"] > p], key=lambda r: r["lam"])
            row = {"engine": engine, "p": p, "n_servers": n_max, "lams": [r["lam"] for r in pts],
                   "b_pred": predicted_slope(p) if p < 1 else None}
            ok = [r for r in pts if math.isfinite(r["mean_queue_se"]) and r["mean_queue_se"] > 0]
            if len(ok) < 3 or p >= 1:
                row["verdict"] = (f"not enough loads: {len(ok)} with lam >= {LAM_FIT_MIN} and a "
                                  "standard error (need 3)")
                out.append(row)
                continue
            x = [math.log(1.0 / (1.0 - r["lam"])) for r in ok]
            se = [r["mean_queue_se"] for r in ok]
            sim_v = np.array([r["mean_queue"] for r in ok])
            fluid_v = np.array([invariant_mean_queue(r["lam"], p) for r in ok])
            fit = _wls_line(x, sim_v, se)
            fluid = _wls_line(x, fluid_v, se)
            # WLS is linear: b - b_fluid is the slope of the same fit of sim - fluid, whose
            # residuals are noise (plus any finite-N effect), not the curvature of v_1 in x
            diff = _wls_line(x, sim_v - fluid_v, se)
            half = diff["b_hi"] - diff["b"]
            row.update({"a": fit["a"], "b": fit["b"], "b_se": diff["b_se"], "b_lo": fit["b"] - half,
                        "b_hi": fit["b"] + half, "n": fit["n"], "red_chi2": diff["red_chi2"],
                        "line_red_chi2": fit["red_chi2"], "b_minus_fluid": diff["b"],
                        "b_minus_fluid_lo": diff["b_lo"], "b_minus_fluid_hi": diff["b_hi"]})
            row["b_fluid"] = fluid["b"]
            row["lams"] = [r["lam"] for r in ok]
            b_pred = row["b_pred"]
            fluid_ok = diff["b_lo"] <= 0.0 <= diff["b_hi"]
            if fit["b_lo"] <= b_pred <= fit["b_hi"]:
                asym = "asymptotic slope reached"
            elif fit["b_hi"] < b_pred:
                asym = "below the asymptotic slope"
            else:
                asym = "above the asymptotic slope"
            row["fluid_match"] = fluid_ok
            row["verdict"] = ("matches the fluid limit" if fluid_ok else "differs from the fluid limit") \
                + f"; {asym} (fluid curve itself: b_fluid/b_pred = {fluid['b'] / b_pred:.2f})"
            out.append(row)
    return out
