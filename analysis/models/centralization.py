"""Partial centralization (Tsitsiklis & Xu): the paper's figures next to the simulations.

``analyze_centralization(frame, params, outdir, sweep_name)`` is registered as
``analysis.ANALYSES["centralization"]`` and called by the pipeline for sweeps that list it in
``extra_analyses``. It reads result rows only (never simulates); the theory values are the closed
forms of :mod:`sim.centralization` (pure numerics). Rules, written out in
``docs/centralization.md``:

* **Points.** Rows of policy ``central`` with ``status == "ok"`` are grouped by
  ``(engine, n_servers, lam, p)``. Estimate = mean over the R replications; standard error =
  the larger of sd/sqrt(R) and the runs' pooled batch-means SE sqrt(mean(se_r^2)/R), with a
  t(R-1) 95% interval (R >= 2); R = 1: the run's batch-means SE with 1.96. Per level of the tail:
  sd/sqrt(R) over the replications' tails (the rows carry no per-level batch SE).
* **(a) Figure 3.1.** Invariant tails for p = 0 and p = 0.05 at lam = 0.99 (where the p = 0.05
  tail ends at i* = 39, "reaches zero near 40"), and the simulated tails at the largest N of each
  engine for every load of the sweep that has both p values.
* **(b) Figure 3.2 and the slope verdict.** v_1 against 1/(1-lam) (log x) with the curves
  lam/(1-lam) (p = 0), the closed form for each p, and for lam >= 0.99 a line of the slope of
  Corollary 3, 1/log(1/(1-p)) per unit of log(1/(1-lam)), through the closed form at
  lam = 1 - 1e-4 (the corollary gives the leading term only; its O(1/p) offset is not drawn
  from it). For every simulation engine and p > 0, at the
  largest N, over the loads lam >= 0.9 (at least 3): v_1 = a + b log(1/(1-lam)) by weighted least
  squares (weights 1/se^2). ``b_fluid`` is the same fit (same loads and weights) of the
  closed-form v_1, ``b_pred = 1/log(1/(1-p))`` the asymptotic slope. v_1 is not a straight line in
  log(1/(1-lam)) at these loads, so the residuals of the line measure its curvature, not the
  noise; but WLS is linear, and b - b_fluid is exactly the slope of the same fit of
  (simulated - closed-form) v_1, whose residuals are noise: its 95% interval (covariance scaled by
  max(1, chi2/(n-2)), t(n-2)) is the interval of b - b_fluid, and b's interval is b plus that
  half-width. Verdict: "matches the fluid limit" if the interval of b - b_fluid holds 0, else
  "differs from the fluid limit"; and "asymptotic slope reached" if b's interval holds b_pred,
  else "below" / "above the asymptotic slope". At loads a simulation can reach,
  the closed form's own slope is still well below b_pred (it gets within 1% only near
  lam = 1 - 1e-6): the report gives b_fluid / b_pred so that "below" is read correctly.
* **(c) Table 3.1.** i*(p, lam) from the closed form on a fixed grid.
* **(d) Theorem 7.** Per arm (engine, lam, p) with at least two N, per point: the gaps
  g_i = sbar_i - s_i of the replication-mean tail to the invariant tail over the reported levels,
  with their SEs se_i; K = the number of *informative* levels: se_i > 0 and at least one station
  at or above the level on average, N max(sbar_i, s_i) >= 1 (below one station the time average
  is a handful of rare single-station excursions, its law across runs is very skewed, and a
  t-based SE from a few replications is meaningless: p = 0 arms, exact at every N, otherwise show
  "significant" gaps at deep levels). A level is *significant* when
  |g_i| > q se_i, q the two-sided 5% Bonferroni quantile over the K levels (t(R-1) at
  1 - 0.025/K; normal for one run with batch means). The distance D is the sup norm over the
  significant levels, max |g_i| (the largest gap told apart from 0; where the gaps are large this
  is the plain sup norm, where they are near the noise it does not pick up noise), with the SE of
  its level; a point with no significant level is not significant (and shows the plain sup,
  hollow). With >= 3 significant points log D = a + b log N is fitted on them by
  :func:`analysis.fit.wls_loglog`, its covariance scale chi2/(n-2) raised to at least 1 (as in
  the v_1 slope fit: a chance small chi2 from a handful of points must not narrow the interval).
  Verdict: "converges (rate N^b)" if the whole 95% interval of
  b is below 0; "no significant distance" if no point is significant; "distance detected at
  k N; too few for a rate" with k = 1 or 2 significant points; else "inconclusive" (red. chi2
  is shown: a curve that steepens with N is not one power law). The l1 distance
  sum_i |g_i| is reported for reference with its noise floor sqrt(2/pi) sum_i se_i (its value
  when every true gap is 0), not fitted: summing |noise| over levels biases it upwards wherever
  the gaps are small. The signed gap of v_1 (= sum_i g_i) is fitted with the project's rule
  (:func:`analysis.fit.point_significant`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from analysis import declared, style
from analysis.fit import point_significant, wls_loglog
from analysis.fmt import num as _f

# the closed forms of the invariant state the model declares for analysis (Model.theory)
invariant_tail = declared.theory("centralization", "invariant_tail")
invariant_mean_queue = declared.theory("centralization", "invariant_mean_queue")
predicted_slope = declared.theory("centralization", "predicted_slope")
relaxation_time = declared.theory("centralization", "relaxation_time")
top_level = declared.theory("centralization", "top_level")

__all__ = ["analyze_centralization", "point_table", "distance_table", "slope_table",
           "istar_table", "P_TABLE", "LAM_TABLE", "LAM_FIT_MIN"]

SIM_ENGINES = ("occupancy", "agent")
#: loads used by the v_1 slope fit (Corollary 3 is about lam -> 1)
LAM_FIT_MIN = 0.9
#: grid of Table 3.1 (i* from the closed form)
P_TABLE = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
LAM_TABLE = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999)
#: Figure 3.1: p = 0 against p = 0.05 at the load where the p = 0.05 tail ends near i = 40
FIG31_LAM, FIG31_P = 0.99, 0.05
#: runs shorter than this many fluid relaxation times are flagged in the report
MIN_RELAXATIONS = 20.0
_TAIL_FLOOR = 1e-7


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
            arm["sup_verdict"] = f"converges (rate N^{arm['sup_slope']:.2f})"
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
            arm["v1_verdict"] = f"converges (rate N^{arm['v1_slope']:.2f})"
        else:
            arm["v1_verdict"] = "inconclusive"
        arms.append(arm)
    return rows, arms


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


def istar_table(p_values=P_TABLE, lam_values=LAM_TABLE) -> list[list]:
    """Rows ``[p, i*(p, lam) for lam in lam_values]`` (0 where lam <= p)."""
    return [[p] + [top_level(lam, p) for lam in lam_values] for p in p_values]


def _degenerate(lam: float, p: float) -> bool:
    """s_{i*} = 0 exactly (the log in i* is an integer, e.g. lam = 1 - p with (1-p)/p integer):
    the central server has no spare capacity at the top level."""
    i = top_level(lam, p)
    if not 0 < i < math.inf:
        return False
    return bool(invariant_tail(lam, p, int(i))[int(i) - 1] < 1e-12)


def _istar_cell(lam: float, p: float) -> str:
    return f"{top_level(lam, p)}" + ("+" if _degenerate(lam, p) else "")


# ---------------------------------------------------------------------------------------------
# figures


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _pick_p(ps: set, target: float):
    for p in ps:
        if math.isclose(p, target, abs_tol=1e-12):
            return p
    return None


def plot_tails(points: list[dict], outdir: Path) -> Path:
    sims = [r for r in points if r["engine"] in SIM_ENGINES and r["tail"].size]
    lams = []
    for lam in sorted({r["lam"] for r in sims}):
        ps = {r["p"] for r in sims if r["lam"] == lam}
        if _pick_p(ps, 0.0) is not None or _pick_p(ps, FIG31_P) is not None:
            lams.append(lam)
    others = [lam for lam in lams if lam != FIG31_LAM][-3:]
    lams = [FIG31_LAM] + others
    cols = 1 if len(lams) == 1 else 2
    rows = -(-len(lams) // cols)
    fig = Figure(figsize=(6.4 * cols, 4.6 * rows + 0.8), layout="constrained")
    axes = [fig.add_subplot(rows, cols, k + 1) for k in range(len(lams))]
    colors = {0.0: style.color(0), FIG31_P: style.color(1)}
    any_zero = False
    for ax, lam in zip(axes, lams):
        k_max = 100
        cut_here = 0
        for p, marker in ((0.0, "*"), (FIG31_P, "D")):
            inv = invariant_tail(lam, p, k_max)
            i = np.arange(1, k_max + 1)
            keep = inv > _TAIL_FLOOR
            # the closed form is drawn for i <= k_max (it may go on above)
            ax.plot(i[keep], inv[keep], "-", color=colors[p], lw=0.8, marker=marker, ms=3,
                    label=f"invariant (closed form, i \u2264 {k_max}), p = {p:g}")
            for engine, mk in zip(SIM_ENGINES, ("o", "s")):
                cand = [r for r in sims if r["engine"] == engine and r["lam"] == lam
                        and math.isclose(r["p"], p, abs_tol=1e-12)]
                if not cand:
                    continue
                r = max(cand, key=lambda r: r["n_servers"])
                t, se = r["tail"], r["tail_se"]
                j = np.arange(1, t.size + 1)
                hw = np.nan_to_num(se * (stats.t.ppf(0.975, r["n_rep"] - 1) if r["n_rep"] > 1 else 1.96))
                # 95% bars where the interval stays above 0; where it reaches 0, the upper bar
                # and an arrow to the bottom of the panel (the log axis cannot show 0)
                shown = t > _TAIL_FLOOR
                zero = shown & (hw >= t)
                ax.errorbar(j[shown], t[shown], yerr=[np.where(zero, 0.0, hw)[shown], hw[shown]], fmt=mk,
                            ms=4, mfc="none", color=colors[p],
                            label=f"{engine} simulation, N = {r['n_servers']}, p = {p:g} (95% CI)")
                if zero.any():
                    any_zero = True
                    style.mark_ci_to_zero(ax, j[zero], t[zero], colors[p], lw=0.5)
                if style.tail_is_cut(t, _TAIL_FLOOR):
                    cut_here = max(cut_here, t.size)
        if cut_here:
            style.mark_max_level(ax, cut_here)
        ax.set_ylim(_TAIL_FLOOR, 1.5)
        style.log_axis(ax, "y", [_TAIL_FLOOR, 1.5])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail_central"))
        title = (f"\u03bb = {lam:g}" + (" (Figure 3.1)" if lam == FIG31_LAM else "")
                 + f"; p = {FIG31_P:g}: i* = {top_level(lam, FIG31_P)}")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    if any_zero:
        axes[0].add_line(style.ci_zero_handle())
    _figure_legend(fig, axes, ncol=2)
    return _save(fig, outdir / "central_tails.png")


def _figure_legend(fig: Figure, axes, ncol: int = 3) -> None:
    """One legend below the panels (never over the data), each label once."""
    seen: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=7,
                   ncol=ncol, frameon=False)


def plot_v1(points: list[dict], slopes: list[dict], outdir: Path) -> Path:
    fig = Figure(figsize=(12, 6.2), layout="constrained")
    ax, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    sims = [r for r in points if r["engine"] in SIM_ENGINES]
    ps = sorted({r["p"] for r in points} | {0.0, FIG31_P})
    grid = 1.0 - np.logspace(np.log10(0.5), -4, 300)
    x = 1.0 / (1.0 - grid)
    cmap = {p: c for p, c in zip(ps, ["black", *style.PALETTE])}
    for p in ps:
        c = cmap.get(p, "gray")
        v = [invariant_mean_queue(lam, p) for lam in grid]
        line = ":" if p == 0 else "-"
        label = "p = 0: \u03bb/(1 \u2212 \u03bb)" if p == 0 else f"p = {p:g}: invariant v\u2081 (closed form)"
        for a in (ax, ax2):
            a.plot(x, v, line, color=c, lw=1.3, label=label)
        if 0 < p < 1:
            # Corollary 3 gives the leading term only (v_1 / that term -> 1, with an O(1/p)
            # offset): drawn with the predicted slope, through the closed form at lam = 1 - 1e-4
            ref = invariant_mean_queue(1.0 - 1e-4, p)
            far = x >= 100.0
            asym = ref + (np.log(x[far]) - math.log(1e4)) * predicted_slope(p)
            for a in (ax, ax2):
                a.plot(x[far], asym, "--", color=c, lw=0.8, alpha=0.7,
                       label=f"p = {p:g}: asymptote, slope 1/log(1/(1\u2212p)) in log(1/(1\u2212\u03bb))")
        for engine, mk in zip(SIM_ENGINES, ("o", "s")):
            cand = [r for r in sims if r["engine"] == engine and r["p"] == p]
            if not cand:
                continue
            n_max = max(r["n_servers"] for r in cand)
            pts = sorted([r for r in cand if r["n_servers"] == n_max], key=lambda r: r["lam"])
            xs = [1.0 / (1.0 - r["lam"]) for r in pts]
            for a in (ax, ax2):
                a.errorbar(xs, [r["mean_queue"] for r in pts],
                           yerr=np.nan_to_num([r["mean_queue_hw"] for r in pts]), fmt=mk, ms=4,
                           mfc="none", color=c, label=f"{engine} simulation, N = {n_max}, p = {p:g} (95% CI)")
    style.log_axis(ax, "x", x)
    ax.set_ylim(0, 1.1 * max([invariant_mean_queue(grid[-1], p) for p in ps if p > 0] + [10.0]))
    ax.set_title("v\u2081 against the load (Figure 3.2)")
    style.log_axis(ax2, "x", x)
    style.log_axis(ax2, "y", [1e-2, 1e4])
    ax2.set_title("same, log y: p = 0 grows like 1/(1 \u2212 \u03bb), p > 0 like its log")
    for a in (ax, ax2):
        a.set_xlabel("1/(1 \u2212 \u03bb) (load \u03bb; log scale)")
        a.set_ylabel("v\u2081: mean queue length (tasks per station)")
        a.grid(True, which="major", alpha=0.3)
    _figure_legend(fig, [ax], ncol=3)
    return _save(fig, outdir / "central_v1_vs_load.png")


#: more (engine, lam, p) arms than this: the compact distance figure (one panel per engine and p)
_DISTANCE_PANELS_MAX = 12


def _plot_distance_compact(dist_rows: list[dict], arms: list[dict], outdir: Path) -> Path:
    """Many arms (e.g. a load sweep at two N): one panel per (engine, p), one series per load
    (at most ``style.MAX_SERIES`` a panel), the sup distance only (bars 2 se; an arrow where
    d - 2 se <= 0) with each arm's fitted line; the l1 and v_1 references are in the report."""
    groups: dict = {}
    for arm in arms:
        groups.setdefault((arm["engine"], arm["p"]), []).append(arm)
    panels = [(k, g[i:i + style.MAX_SERIES]) for k, g in sorted(groups.items())
              for i in range(0, len(g), style.MAX_SERIES)]
    cols = min(2, len(panels))
    nrows = -(-len(panels) // cols)
    fig = Figure(figsize=(7.4 * cols, 4.0 * nrows + 0.4), layout="constrained")
    for k, ((engine, p), group) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, k + 1)
        ns_all, d_all, zero_any = [], [], False
        for j, arm in enumerate(sorted(group, key=lambda a: a["lam"])):
            pts = sorted([r for r in dist_rows if (r["engine"], r["lam"], r["p"])
                          == (arm["engine"], arm["lam"], arm["p"])], key=lambda r: r["n_servers"])
            ns = style.dodge([r["n_servers"] for r in pts], j, len(group))
            d = np.array([r["sup"] for r in pts])
            se = np.nan_to_num(np.array([r["sup_se"] for r in pts]))
            sig = np.array([r["sup_significant"] for r in pts])
            c, mk = style.color(j), style.marker(j)
            zero_any |= style.errorbar_log(ax, ns, d, 2 * se, color_=c, fmt="none", capsize=2, lw=0.8)
            ax.plot(ns[sig], d[sig], mk, color=c, ms=5, ls="none",
                    label=f"\u03bb = {arm['lam']:g}" if sig.any() else "_nolegend_")
            ax.plot(ns[~sig], d[~sig], mk, mfc="none", color=c, ms=5, ls="none",
                    label=f"\u03bb = {arm['lam']:g}" if not sig.any() else "_nolegend_")
            if arm.get("sup_slope") is not None:
                xs = np.array(arm["sup_fit_n"], dtype=float)
                ax.plot(xs, np.exp(arm["sup_intercept"]) * xs ** arm["sup_slope"], "-", color=c, lw=1)
            ns_all += [r["n_servers"] for r in pts]
            d_all += d.tolist()
        style.reference_slope(ax, ns_all, d_all, -1.0, "reference slope 1/N")
        if zero_any:
            ax.add_line(style.ci_zero_handle())
        ax.plot([], [], "o", color="0.3", ms=5, ls="none",
                label="filled: sup over significant levels; hollow: plain sup (bars: 2 se)")
        style.log_axis(ax, "x", ns_all)
        style.log_axis(ax, "y", [v for v in d_all if v > 0] or None)
        ax.set_xlabel(style.label("n_servers"))
        ax.set_ylabel(style.label("distance"))
        ax.set_title(f"{engine} simulation, p = {p:g}: sup distance (l1 and v\u2081 gaps: report)", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax, fontsize=6.5)
    return _save(fig, outdir / "central_distance_vs_N.png")


def plot_distance(dist_rows: list[dict], arms: list[dict], outdir: Path) -> Path | None:
    if not arms:
        return None
    if len(arms) > _DISTANCE_PANELS_MAX:
        return _plot_distance_compact(dist_rows, arms, outdir)
    n = len(arms)
    cols = min(3, n)
    nrows = -(-n // cols)
    fig = Figure(figsize=(4.8 * cols, 3.9 * nrows + 1.0), layout="constrained")
    axes = []
    for k, arm in enumerate(arms):
        ax = fig.add_subplot(nrows, cols, k + 1)
        axes.append(ax)
        pts = sorted([r for r in dist_rows if (r["engine"], r["lam"], r["p"])
                      == (arm["engine"], arm["lam"], arm["p"])], key=lambda r: r["n_servers"])
        ns = np.array([r["n_servers"] for r in pts], dtype=float)
        d = np.array([r["sup"] for r in pts])
        se = np.nan_to_num(np.array([r["sup_se"] for r in pts]))
        sig = np.array([r["sup_significant"] for r in pts])
        blue, orange = style.color(0), style.color(1)
        # bars: 2 se; where d - 2 se <= 0 the lower bar is an arrow to the bottom (log axis)
        zero = (2 * se >= d) & (d > 0)
        low = np.where(zero, 0.0, 2 * se)
        ax.errorbar(ns[sig], d[sig], yerr=[low[sig], 2 * se[sig]], fmt="o", color=blue,
                    label="sup over significant levels (bar: 2 se)")
        ax.errorbar(ns[~sig], d[~sig], yerr=[low[~sig], 2 * se[~sig]], fmt="o", mfc="none", color=blue,
                    label="plain sup, no level significant")
        if zero.any():
            style.mark_ci_to_zero(ax, ns[zero], d[zero], blue)
            ax.add_line(style.ci_zero_handle())
        ax.plot(ns, [r["l1"] for r in pts], "s", mfc="none", color="0.45", ms=4, label="l1 distance (reference)")
        ax.plot(ns, [r["l1_floor"] for r in pts], ":", color="0.45", label="l1 noise floor")
        g = np.abs([r["v1_gap"] for r in pts])
        ax.plot(ns, g, "^", mfc="none", color=orange, ms=4, label="|v\u2081 gap| (tasks per station)")
        if arm.get("sup_slope") is not None:
            xs = np.array(arm["sup_fit_n"], dtype=float)
            ax.plot(xs, np.exp(arm["sup_intercept"]) * xs ** arm["sup_slope"], "-", color=blue,
                    label=f"fit N^{arm['sup_slope']:.2f} [{arm['sup_slope_lo']:.2f}, {arm['sup_slope_hi']:.2f}]")
        style.reference_slope(ax, ns, d, -1.0, "reference slope 1/N")
        style.log_axis(ax, "x", ns)
        vals = np.concatenate([d, d + 2 * se, g, [r["l1"] for r in pts]])
        style.log_axis(ax, "y", vals[np.isfinite(vals) & (vals > 0)])
        ax.set_xlabel(style.label("n_servers"))
        ax.set_ylabel(style.label("distance"))
        ax.set_title(f"{arm['engine']} simulation, \u03bb = {arm['lam']:g}, p = {arm['p']:g}", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        # the fitted line's label differs per panel: a legend in the panel for it alone
        fit_lines = [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels()) if lab.startswith("fit N^")]
        if fit_lines:
            ax.legend(*zip(*fit_lines), fontsize=6, loc="lower left")
    seen: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith(("_", "fit N^")) and lab not in seen:
                seen[lab] = h
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=7, ncol=3, frameon=False)
    return _save(fig, outdir / "central_distance_vs_N.png")


def plot_istar(table: list[list], outdir: Path) -> Path:
    fig = Figure(figsize=(1.0 + 0.85 * len(LAM_TABLE), 0.5 + 0.35 * (len(table) + 1)))
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    cells = [[f"{r[0]:g}"] + [_istar_cell(lam, r[0]) for lam in LAM_TABLE] for r in table]
    tab = ax.table(cellText=cells, colLabels=["p \\ \u03bb"] + [f"{lam:g}" for lam in LAM_TABLE],
                   loc="center", cellLoc="center")
    tab.scale(1, 1.3)
    ax.set_title("i*(p, lam) = floor(log_{lam/(1-p)} (p/(1-lam))) (Table 3.1, closed form)\n"
                 "+: degenerate, s_{i*} = 0 (central server without spare capacity at the top)",
                 fontsize=9)
    return _save(fig, outdir / "central_istar_table.png")


# ---------------------------------------------------------------------------------------------
# the report and the entry point


def analyze_centralization(frame, params, outdir, sweep_name: str) -> dict:
    """Figures, tables and verdicts of the partial-centralization sweep (module docstring).

    Returns ``{"report": Path, "plots": [Path, ...], "metrics": [(key, value, step)],
    "slopes": [...], "distance_arms": [...], "notes": [...]}`` (plain values only).
    """
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    for col in ("engine", "policy", "n_servers", "lam", "p", "tail", "mean_queue"):
        if col not in frame.columns:
            raise ValueError(f"the frame has no {col!r} column (a partial-centralization sweep has)")
    points = point_table(frame)
    if not points:
        notes.append("no successful rows of policy 'central'")
    dist_rows, arms = distance_table(points)
    slopes = slope_table(points)
    table = istar_table()

    plots = [plot_tails(points, outdir), plot_v1(points, slopes, outdir)]
    p_dist = plot_distance(dist_rows, arms, outdir)
    if p_dist is not None:
        plots.append(p_dist)
    else:
        notes.append("no arm with two or more N: no distance-vs-N figure")
    plots.append(plot_istar(table, outdir))
    if not any("lams" in s and len(s.get("lams", [])) >= 3 for s in slopes):
        notes.append(f"fewer than 3 simulated loads lam >= {LAM_FIT_MIN} per p: no v_1 slope fit "
                     "(see conf/sweep/centralization_load.yaml)")
    # p = 0 is left out: its runs start in the exact stationary law (i.i.d. geometric queues),
    # so a short run is unbiased there, only noisier
    short = sorted({(r["lam"], r["p"]) for r in dist_rows if r["p"] > 0
                    and math.isfinite(r["sim_time"]) and r["sim_time"] < MIN_RELAXATIONS * r["tau"]})
    for lam, p in short:
        ns = sorted({r["n_servers"] for r in dist_rows if (r["lam"], r["p"]) == (lam, p)
                     and r["sim_time"] < MIN_RELAXATIONS * r["tau"]})
        notes.append(f"lam={lam:g}, p={p:g}: runs at N={ns} are shorter than {MIN_RELAXATIONS:g} "
                     f"fluid relaxation times ({relaxation_time(lam, p):.0f}); started from the "
                     "invariant state, their estimates lean towards it")

    # ---- metrics for MLflow
    # (key, value, step, arm): MLflow puts each on the child runs of its arm (pipeline.mlflow_log)
    metrics: list[tuple] = []
    for r in dist_rows:
        route = {"policy": "central", "engine": r["engine"], "lam": r["lam"], "p": r["p"]}
        metrics.append(("central_sup_dist", r["sup"], r["n_servers"], route))
        metrics.append(("central_l1_dist", r["l1"], r["n_servers"], route))
    for a in arms:
        route = {"policy": "central", "engine": a["engine"], "lam": a["lam"], "p": a["p"]}
        for k in ("sup_slope", "sup_slope_lo", "sup_slope_hi", "v1_slope", "v1_slope_lo", "v1_slope_hi"):
            if a.get(k) is not None:
                metrics.append((f"central_{k}", float(a[k]), 0, route))
    for s in slopes:  # per (engine, p): on each of its children (one per load when lam is an axis)
        route = {"policy": "central", "engine": s["engine"], "p": s["p"]}
        for k in ("b", "b_lo", "b_hi", "b_fluid", "b_pred"):
            if s.get(k) is not None:
                metrics.append((f"central_v1_slope_{k}", float(s[k]), 0, route))

    report = _write_report(outdir, sweep_name, points, dist_rows, arms, slopes, table, plots, notes)
    return {"report": report, "plots": plots, "metrics": metrics,
            "slopes": [{k: v for k, v in s.items()} for s in slopes],
            "distance_arms": arms, "notes": notes, "verdict_lines": _verdict_lines(arms, slopes)}


def _verdict_lines(arms: list[dict], slopes: list[dict]) -> list[str]:
    """The console lines of the verdicts (pipeline.run prints them): per arm the distance of
    the tails and of v_1 to the invariant state, per (engine, p) the slope of v_1 where the
    sweep has the loads to fit it."""
    lines = []
    for a in arms:
        arm = f"central [{a['engine']}] lam={style.short(a['lam'])} p={style.short(a['p'])}"
        lines.append(f"{arm}: sup distance of the simulated tails to the invariant state: {a['sup_verdict']}")
        lines.append(f"{arm}: gap of v_1 (mean queue) to the invariant state: {a['v1_verdict']}")
    for s in slopes:
        if str(s.get("verdict", "")).startswith("not enough loads"):
            continue
        lines.append(f"central [{s['engine']}] p={style.short(s['p'])}: slope of v_1 against log 1/(1 - lam): "
                     f"{s['verdict']}")
    return lines


def _write_report(outdir, sweep_name, points, dist_rows, arms, slopes, table, plots, notes) -> Path:
    L = [f"# Partial centralization: {sweep_name}", ""]
    L += ["Theory: Tsitsiklis & Xu, closed-form invariant state (Theorem 2), Corollary 3, "
          "Theorem 7. Rules: docs/centralization.md.", ""]
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]

    L += ["## (a) Figure 3.1: invariant tails", ""]
    i31 = top_level(FIG31_LAM, FIG31_P)
    L += [f"At lam = {FIG31_LAM:g}, p = {FIG31_P:g} the invariant tail is positive up to "
          f"i* = {i31} and 0 from i = {i31 + 1} on (the paper: \"reaches zero at around i = 40\"); "
          f"at p = 0 it is lam^i (s_40 = {FIG31_LAM ** 40:.3f}).", ""]
    rows = []
    for r in sorted(points, key=lambda r: (r["lam"], r["p"], r["engine"], r["n_servers"])):
        if r["engine"] not in SIM_ENGINES or not r["tail"].size:
            continue
        if not (math.isclose(r["p"], 0.0) or math.isclose(r["p"], FIG31_P)):
            continue
        cand = [q for q in points if (q["engine"], q["lam"], q["p"]) == (r["engine"], r["lam"], r["p"])]
        if r["n_servers"] != max(q["n_servers"] for q in cand):
            continue
        inv = invariant_tail(r["lam"], r["p"], r["tail"].size)
        lv = [i for i in (1, 5, 10, 20, 40) if i <= r["tail"].size]
        rows.append(f"| {r['engine']} | {r['n_servers']} | {r['lam']:g} | {r['p']:g} | "
                    + " | ".join(f"{r['tail'][i - 1]:.4g} ({inv[i - 1]:.4g})" for i in lv) + " |")
    if rows:
        L += ["Simulated s_i at the largest N (invariant in parentheses), levels 1, 5, 10, 20, 40:", "",
              "| engine | N | lam | p | s_i ... |", "|---|---|---|---|---|"] + rows + [""]

    L += ["## (b) Figure 3.2: v_1 against the load, and the slope verdict", ""]
    L += [f"Fit over lam >= {LAM_FIT_MIN} at the largest N: v_1 = a + b log(1/(1-lam)) (WLS). "
          "b_fluid: same fit of the closed form; its interval is that of b - b_fluid, the same fit "
          "of (simulated - closed-form) v_1; b_pred = 1/log(1/(1-p)) (Corollary 3).", "",
          "| engine | p | N | loads | b | 95% CI | b - b_fluid [95% CI] | red. chi2 (sim - fluid) | "
          "b_fluid | b_pred | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in slopes:
        L.append(f"| {s['engine']} | {s['p']:g} | {s['n_servers']} | {', '.join(f'{x:g}' for x in s.get('lams', []))} | "
                 f"{_f(s.get('b'))} | [{_f(s.get('b_lo'))}, {_f(s.get('b_hi'))}] | "
                 f"{_f(s.get('b_minus_fluid'), 3)} [{_f(s.get('b_minus_fluid_lo'), 3)}, {_f(s.get('b_minus_fluid_hi'), 3)}] | "
                 f"{_f(s.get('red_chi2'), 3)} | {_f(s.get('b_fluid'))} | {_f(s.get('b_pred'))} | {s['verdict']} |")
    L += [""]
    vrows = []
    for r in sorted(points, key=lambda r: (r["p"], r["lam"], r["engine"], r["n_servers"])):
        if r["engine"] in SIM_ENGINES:
            vrows.append(f"| {r['engine']} | {r['n_servers']} | {r['lam']:g} | {r['p']:g} | {r['n_rep']} | "
                         f"{r['mean_queue']:.4g} +- {_f(r['mean_queue_hw'], 2)} | "
                         f"{invariant_mean_queue(r['lam'], r['p']):.4g} | {_f(r['sim_time'] / r['tau'], 3)} |")
    if vrows:
        L += ["Every simulated point (v_1 with 95% CI, invariant v_1, run length in fluid relaxation times):", "",
              "| engine | N | lam | p | R | v_1 | invariant | T / tau |", "|---|---|---|---|---|---|---|---|"]
        L += vrows + [""]

    L += ["## (c) Table 3.1: i*(p, lam)", "",
          "| p \\ lam | " + " | ".join(f"{lam:g}" for lam in LAM_TABLE) + " |",
          "|---" * (len(LAM_TABLE) + 1) + "|"]
    L += ["| " + " | ".join([f"{row[0]:g}"] + [_istar_cell(lam, row[0]) for lam in LAM_TABLE]) + " |"
          for row in table]
    L += ["", "+ = degenerate: s_{i*} = 0 exactly (here lam = 1 - p, (1-p)/p an integer), so the "
          "invariant support ends at i* - 1 and the central server has no spare capacity there "
          "(lam s_{i*-1} = p).", ""]

    L += ["## (d) Theorem 7: distance to the invariant state as N grows", ""]
    if arms:
        L += ["| engine | lam | p | N range | D significant | D rate b [95% CI] | red. chi2 | sup verdict | "
              "v_1 gap significant | v_1 gap rate [95% CI] | v_1 verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for a in arms:
            sup = (f"{a['sup_slope']:.3f} [{a['sup_slope_lo']:.3f}, {a['sup_slope_hi']:.3f}]"
                   if a.get("sup_slope") is not None else "-")
            v1 = (f"{a['v1_slope']:.3f} [{a['v1_slope_lo']:.3f}, {a['v1_slope_hi']:.3f}]"
                  if a.get("v1_slope") is not None else "-")
            L.append(f"| {a['engine']} | {a['lam']:g} | {a['p']:g} | {a['n_min']}..{a['n_max']} | "
                     f"{a['sup_n_significant']}/{a['n_points']} | {sup} | {_f(a.get('sup_red_chi2'), 3)} | "
                     f"{a['sup_verdict']} | {a['v1_n_significant']}/{a['n_points']} | {v1} | {a['v1_verdict']} |")
        L += ["", "| engine | lam | p | N | R | T / tau | D (level) | se | levels significant / informative | plain sup | l1 | l1 noise floor | v_1 gap +- 95% |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(dist_rows, key=lambda r: (r["engine"], r["lam"], r["p"], r["n_servers"])):
            L.append(f"| {r['engine']} | {r['lam']:g} | {r['p']:g} | {r['n_servers']} | {r['n_rep']} | "
                     f"{_f(r['sim_time'] / r['tau'], 3)} | {r['sup']:.3g} ({r['sup_level']}){' *' if r['sup_significant'] else ''} | "
                     f"{_f(r['sup_se'], 2)} | {r['n_levels_significant']}/{r['n_levels_informative']} | "
                     f"{r['sup_all']:.3g} | {r['l1']:.3g} | {r['l1_floor']:.2g} | "
                     f"{r['v1_gap']:.3g} +- {_f(r['v1_gap_hw'], 2)} |")
        L += ["", "(D: largest |gap| over the levels whose gap exceeds its Bonferroni bound; "
              "* = significant, used in the fit)", ""]
    else:
        L += ["No arm with two or more N in this sweep.", ""]
    L += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    path = outdir / "report.md"
    path.write_text("\n".join(L))
    return path


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
ANALYSES = {"centralization": analyze_centralization}
