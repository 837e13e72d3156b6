"""The fits of the LED analysis: the intercept of the heavy-traffic ratio at eps -> 0
(:func:`intercept_fit`) and the trend of the queue imbalance (:func:`imbalance_trend`).
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl

from analysis.models.led.labels import _series_label, _varying


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
