"""The fits of the zero-queueing analysis: M0 ``r = a N^b`` (:func:`power_fit`), M1's floor test
(:func:`floor_fit`) and the control-variate estimate of the ratio (:func:`control_variate`).
The rule they serve is in :mod:`analysis.models.zero_queueing`.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import optimize, stats

#: steepest decay of M1's power term (b = -3 moves only the first point of a 4-decade range)
FLOOR_B_MIN = -3.0
#: confidence level of every interval of the rule
LEVEL = 0.95

#: the exponent grid of M1 (refined by a bounded 1-D search around its best point)
_B_GRID = np.concatenate([-np.geomspace(-FLOOR_B_MIN, 1e-4, 240), [0.0]])


def power_fit(n, r, se, level: float = LEVEL) -> dict | None:
    """M0: ``r = a N^b`` by weighted least squares on the ratio (weights ``1/se**2``).

    ``a = exp(alpha)`` keeps it positive; b's interval is ``b +- t_{n-2} se(b)`` from the
    Jacobian covariance times ``s2 = max(1, RSS/(n-2))``. None with < 3 points or no fit.
    """
    n, r, se = (np.asarray(v, dtype=float) for v in (n, r, se))
    m = n.size
    if m < 3:
        return None
    u = np.log(n) - np.log(n).mean()

    def resid(p):
        return (r - np.exp(p[0] + p[1] * u)) / se

    starts = [np.array([math.log(max(np.average(r, weights=se**-2), 1e-300)), 0.0])]
    pos = r > 0
    if pos.sum() >= 2:
        b, a = np.polyfit(u[pos], np.log(r[pos]), 1, w=(r[pos] / se[pos]))
        starts.append(np.array([a, b]))
    best = None
    for x0 in starts:
        try:
            res = optimize.least_squares(resid, x0, method="lm")
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.all(np.isfinite(res.x)) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        return None
    dof = m - 2
    rss = float(2.0 * best.cost)
    s2 = max(1.0, rss / dof)
    try:
        cov = np.linalg.inv(best.jac.T @ best.jac) * s2
    except np.linalg.LinAlgError:
        return None
    slope_se = math.sqrt(max(cov[1, 1], 0.0))
    if not math.isfinite(slope_se):
        return None
    half = float(stats.t.ppf(0.5 + level / 2.0, dof)) * slope_se
    b = float(best.x[1])
    return {"slope": b, "slope_lo": b - half, "slope_hi": b + half, "rss": rss, "scale": s2, "dof": dof,
            "n_points": m}


def _profile_rss(c0: float, u: np.ndarray, r: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """``min over a >= 0, b in [FLOOR_B_MIN, 0]`` of the weighted RSS of ``c0 + a u^b``
    (a in closed form for each b; b on a grid, refined by a bounded search): (rss, a, b)."""
    y = r - c0

    def at(b):
        x = u ** b
        a = max(0.0, float(np.sum(w * y * x) / np.sum(w * x * x)))
        return float(np.sum(w * (y - a * x) ** 2)), a

    X = u[None, :] ** _B_GRID[:, None]
    A = np.maximum(0.0, (X * (w * y)).sum(1) / (X * X * w).sum(1))
    rss = ((y[None, :] - A[:, None] * X) ** 2 * w).sum(1)
    i = int(np.argmin(rss))
    best = (float(rss[i]), float(A[i]), float(_B_GRID[i]))
    lo, hi = _B_GRID[max(i - 1, 0)], _B_GRID[min(i + 1, _B_GRID.size - 1)]
    if hi > lo:
        res = optimize.minimize_scalar(lambda b: at(b)[0], bounds=(lo, hi), method="bounded")
        val, a = at(float(res.x))
        if val < best[0]:
            best = (val, a, float(res.x))
    return best


def floor_fit(n, r, se, level: float = LEVEL) -> dict | None:
    """M1: ``r = c0 + a (N/N_min)^b`` (``c0, a >= 0``, ``FLOOR_B_MIN <= b <= 0``) against its
    ``c0 = 0`` restriction, on the same points and weights; see the module docstring.

    (c0, a) by non-negative least squares for each b (scipy.optimize.nnls), b by a grid and a
    bounded search; the level's interval by inverting the profile (scipy.optimize.brentq).
    None with < 4 points.
    """
    n, r, se = (np.asarray(v, dtype=float) for v in (n, r, se))
    m = n.size
    if m < 4:
        return None
    u = n / n.min()
    w = se**-2
    sw = np.sqrt(w)

    def nnls_at(b):
        design = np.column_stack([np.ones(m), u ** b]) * sw[:, None]
        coef, norm = optimize.nnls(design, r * sw)
        return float(norm**2), coef

    rss_grid = np.array([nnls_at(b)[0] for b in _B_GRID])
    i = int(np.argmin(rss_grid))
    b1 = float(_B_GRID[i])
    rss1, (c0, a) = nnls_at(b1)
    lo, hi = _B_GRID[max(i - 1, 0)], _B_GRID[min(i + 1, _B_GRID.size - 1)]
    res = optimize.minimize_scalar(lambda b: nnls_at(b)[0], bounds=(lo, hi), method="bounded")
    val, coef = nnls_at(float(res.x))
    if val < rss1:
        rss1, (c0, a), b1 = val, coef, float(res.x)
    prof = _profile_rss(c0, u, r, w)
    if prof[0] < rss1:
        rss1, a, b1 = prof
    rss0, a0, b0 = _profile_rss(0.0, u, r, w)
    if rss0 < rss1:  # c0 = 0 is in M1: its best point then is M1's
        rss1, c0, a, b1 = rss0, 0.0, a0, b0
    dof = m - 3
    s2 = max(1.0, rss1 / dof)
    gain = rss0 - rss1
    stat = gain / s2 if gain > 1e-9 * rss0 else 0.0  # below that: rounding, M1 = M0
    p = 0.5 * float(stats.f.sf(stat, 1, dof)) if stat > 0 else 1.0
    crit = float(stats.f.ppf(level, 1, dof))

    def excess(c):
        return (_profile_rss(c, u, r, w)[0] - rss1) / s2 - crit

    c_lo = 0.0 if stat <= crit else float(optimize.brentq(excess, 0.0, c0, xtol=1e-12 + 1e-9 * c0))
    step = max(c0, float(np.max(np.abs(r))), float(np.max(se)), 1e-12)
    top = c0 + step
    for _ in range(60):
        if excess(top) > 0:
            break
        step *= 2.0
        top = c0 + step
    c_hi = float(optimize.brentq(excess, c0, top, xtol=1e-12 + 1e-9 * top)) if excess(top) > 0 else None
    return {"level": float(c0), "level_lo": c_lo, "level_hi": c_hi, "lr_stat": float(stat), "p_floor": p,
            "floor_amplitude": float(a), "floor_exponent": float(b1) if a > 0 else None,
            "floor_scale": float(s2), "dof": dof}


#: the estimates the control variate adjusts (the queueing ratio and E[T], which is H_k (1 + ratio))
CV_METRICS = ("queueing_ratio", "mean_response")
#: fewest replications for the control-variate estimate (its interval has R - 2 degrees of freedom)
CV_MIN_REP = 4
CV_METHOD = "t over R replications, control variate s_1 (mean lam)"


def cv_fit(y, c) -> dict | None:
    """The control-variate estimate of E[Y] from replications ``y`` with controls ``c`` of known
    mean 0: ``{"estimate", "se", "dof", "coef", "corr"}`` (rule in :func:`control_variate`), or
    None with fewer than 3 values or no spread in ``c``."""
    y, c = np.asarray(y, dtype=float), np.asarray(c, dtype=float)
    n = y.size
    if n < 3 or c.size != n or np.isnan(y).any() or np.isnan(c).any():
        return None
    cbar = c.mean()
    sxx = float(((c - cbar) ** 2).sum())
    if sxx <= 0.0:
        return None
    b = float(((c - cbar) * (y - y.mean())).sum() / sxx)
    rss = float(((y - y.mean() - b * (c - cbar)) ** 2).sum())
    syy = float(((y - y.mean()) ** 2).sum())
    return {"estimate": float(y.mean() - b * cbar), "se": math.sqrt(rss / (n - 2) * (1.0 / n + cbar ** 2 / sxx)),
            "dof": n - 2, "coef": b, "corr": b * math.sqrt(sxx / syy) if syy > 0 else None}


def control_variate(sims: pl.DataFrame, agg: pl.DataFrame, params, level: float = LEVEL) -> pl.DataFrame:
    """Control-variate estimates of :data:`CV_METRICS` over the replications of each point.

    At loads near 1 the ratio of a run is driven by the run's realised load: the time-average
    busy fraction ``s_1`` (``tail[0]``) of a run of 30 time units at N = 10^6 and lam = 0.984
    strays by +-0.003 from lam, 20% of 1 - lam, and the ratio moves with it (measured
    correlation 0.85-1.00 between runs, with the slope the mean field's d ratio / d lam).
    ``s_1`` has a known mean, lam (each server serves at rate 1 and no job is dropped), so per
    point the replications' ``Y_i`` are regressed on ``C_i = s_1,i - lam``; the estimate is the
    fit at ``C = 0``, ``Ybar - b Cbar``, its standard error ``s sqrt(1/R + Cbar^2 / Sxx)`` with
    ``s^2 = RSS / (R - 2)``, and the interval uses t with ``R - 2`` degrees of freedom
    (Lavenberg & Welch's control variate with an estimated coefficient; exact when Y is linear
    in C with normal residuals; a curvature ``g C^2`` biases it by about ``-2 g var(C) / R``,
    docs/analysis.md).

    Applied to simulated points with ``R >= CV_MIN_REP`` replications that all report ``s_1``
    and drop no job (with drops, the busy fraction's mean is not known); other points keep the
    plain mean. The plain estimate stays in ``<m>_raw``, ``<m>_raw_hw``; ``cv_corr`` is the
    correlation of Y and C over the replications, ``cv_coef`` the fitted slope b.
    """
    keys = ["policy", "engine", *params]
    out = agg.with_columns([pl.col(m).alias(f"{m}_raw") for m in CV_METRICS]
                           + [pl.col(f"{m}_hw").alias(f"{m}_raw_hw") for m in CV_METRICS]
                           + [pl.lit(None, dtype=pl.Float64).alias(c) for c in ("cv_corr", "cv_coef")])
    if not {"tail", "lam", *CV_METRICS} <= set(sims.columns) or sims.height == 0:
        return out
    ok = sims.filter(pl.col("status") == "ok") if "status" in sims.columns else sims
    drop = pl.col("drop_prob").fill_null(0.0) if "drop_prob" in ok.columns else pl.lit(0.0)
    ok = ok.with_columns((pl.col("tail").list.first() - pl.col("lam")).alias("_c"), drop.alias("_drop"))
    fits = []
    for _, g in ok.group_by(keys, maintain_order=True):
        c = g["_c"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        if c.size < CV_MIN_REP or (g["_drop"].to_numpy() > 0).any():
            continue
        row = {k: g[k][0] for k in keys}
        for m in CV_METRICS:
            f = cv_fit(g[m].cast(pl.Float64).fill_null(float("nan")).to_numpy(), c)
            if f is None:
                break
            row.update({m: f["estimate"], f"{m}_se": f["se"],
                        f"{m}_hw": float(stats.t.ppf(0.5 + level / 2.0, f["dof"])) * f["se"]})
            if m == CV_METRICS[0]:
                row.update(cv_coef=f["coef"], cv_corr=f["corr"])
        else:
            fits.append(row)
    if not fits:
        return out
    fit = pl.DataFrame(fits, infer_schema_length=None)
    fit = fit.rename({c: f"_cv_{c}" for c in fit.columns if c not in keys})
    for k in keys:  # align dtypes for the join (a parameter column may be all-integer here)
        fit = fit.with_columns(pl.col(k).cast(out.schema[k]))
    out = out.join(fit, on=keys, how="left", nulls_equal=True)
    has = pl.col(f"_cv_{CV_METRICS[0]}").is_not_null()
    cols = [pl.when(has).then(pl.lit(CV_METHOD)).otherwise(pl.col("ci_method")).alias("ci_method"),
            pl.coalesce("_cv_cv_corr", "cv_corr").alias("cv_corr"),
            pl.coalesce("_cv_cv_coef", "cv_coef").alias("cv_coef")]
    for m in CV_METRICS:
        for suffix in ("", "_se", "_hw"):
            cols.append(pl.when(has).then(pl.col(f"_cv_{m}{suffix}")).otherwise(pl.col(f"{m}{suffix}"))
                        .alias(f"{m}{suffix}"))
    out = out.with_columns(cols)
    out = out.with_columns([(pl.col(m) - pl.col(f"{m}_hw")).alias(f"{m}_lo") for m in CV_METRICS]
                           + [(pl.col(m) + pl.col(f"{m}_hw")).alias(f"{m}_hi") for m in CV_METRICS])
    return out.drop([c for c in out.columns if c.startswith("_cv_")])
