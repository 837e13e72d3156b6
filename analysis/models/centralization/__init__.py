"""Partial centralization (Tsitsiklis & Xu): the paper's figures next to the simulations.

``analyze_centralization(frame, params, outdir, sweep_name)`` is listed in ``analysis.catalog``
as ``centralization`` and called by the pipeline for sweeps that list it in
``extra_analyses``. It reads result rows only (never simulates); the theory values are the closed
forms the model declares for analysis (``Model.theory``: pure numerics, read through
:mod:`analysis.declared`). Rules, written out in
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
  Verdict: "falling like N^b [lo, hi] over N = a..c; undecided beyond N = <largest N>" if the
  whole 95% interval of b is below 0 (a trend over the fitted N: nothing carries the distance's
  limit past the range); "no significant distance" if no point is significant; "distance detected at
  k N; too few for a rate" with k = 1 or 2 significant points; else "inconclusive" (red. chi2
  is shown: a curve that steepens with N is not one power law). The l1 distance
  sum_i |g_i| is reported for reference with its noise floor sqrt(2/pi) sum_i se_i (its value
  when every true gap is 0), not fitted: summing |noise| over levels biases it upwards wherever
  the gaps are small. The signed gap of v_1 (= sum_i g_i) is fitted with the project's rule
  (:func:`analysis.fit.point_significant`).

The package is split by role: :mod:`.theory` (the declared closed forms, the i* table),
:mod:`.fit` (points, distances, slopes), :mod:`.plots` and :mod:`.report`; this module runs
them (:func:`analyze_centralization`) and keeps every name the single module had.
"""
from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from analysis.models.centralization.fit import (  # noqa: F401
    LAM_FIT_MIN,
    MIN_RELAXATIONS,
    SIM_ENGINES,
    _ci,
    _distance,
    _fit,
    _wls_line,
    distance_table,
    point_table,
    slope_table,
)
from analysis.models.centralization.plots import (  # noqa: F401
    _DISTANCE_PANELS_MAX,
    _TAIL_FLOOR,
    _figure_legend,
    _pick_p,
    _plot_distance_compact,
    _save,
    plot_distance,
    plot_istar,
    plot_tails,
    plot_v1,
)
from analysis.models.centralization.report import _verdict_lines, _write_report
from analysis.models.centralization.theory import (  # noqa: F401
    FIG31_LAM,
    FIG31_P,
    LAM_TABLE,
    P_TABLE,
    _degenerate,
    _istar_cell,
    invariant_mean_queue,
    invariant_tail,
    istar_table,
    predicted_slope,
    relaxation_time,
    top_level,
)

__all__ = ["analyze_centralization", "point_table", "distance_table", "slope_table",
           "istar_table", "P_TABLE", "LAM_TABLE", "LAM_FIT_MIN"]


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


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
