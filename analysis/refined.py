"""Simulations against the refined mean field: the coefficient of the 1/N term, checked.

The refined engine (``sim.dispatch.refined``, docs/refined.md) gives, at each N, the mean field
plus its 1/N term, ``x* + V/N``. Where a sweep has simulated points, mean-field rows and refined
rows of the same point, this module puts them side by side:

- per point: the predicted coefficient ``V = N (refined - meanfield)``, the simulated one
  ``N * gap`` (``gap = simulation - meanfield``) with its SE ``N * se``, and the residual
  ``simulation - refined`` in standard errors;
- per arm (policy, engine and the arm's parameters): a weighted least-squares fit of
  ``N * gap = V_hat + c / N`` (the next term of the expansion, O(1/N^2) in the gap) on the points,
  with a t interval for ``V_hat`` (n - 2 degrees of freedom).

Verdict per arm (at least 3 N): ``agrees with the refined mean field`` when the predicted V lies
in the 95% interval of ``V_hat`` and the residual at the largest N is within 4 SE; ``differs from
the refined mean field`` when V lies outside the interval; ``inconclusive`` otherwise (V inside,
but the largest N off by more than 4 SE). ``from_n`` is the smallest N from which every residual
is within 4 SE (at small N the O(1/N^2) term dominates: docs/refined.md measured ``5.5 / N^2`` for
pod, d = 2, lam = 0.9).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import stats

__all__ = ["REFINED_ENGINE", "refined_points", "refined_fits", "AGREES", "DIFFERS", "INCONCLUSIVE"]

REFINED_ENGINE = "refined"
AGREES, DIFFERS, INCONCLUSIVE = ("agrees with the refined mean field",
                                 "differs from the refined mean field", "inconclusive")
#: a residual within this many standard errors counts as agreement at that N
Z_OK = 4.0


def refined_points(agg: pl.DataFrame, cmp: pl.DataFrame, params: Sequence[str],
                   x: str = "n_servers", metric: str = "mean_response") -> pl.DataFrame:
    """Simulated points (rows of ``cmp``, :func:`analysis.aggregate.compare_to_meanfield`) joined
    with the refined row of the same point; empty when the sweep has no refined rows."""
    if "engine" not in agg.columns or cmp.height == 0:
        return pl.DataFrame()
    keys = ["policy", *[p for p in params if p != "replacement"]]
    ref = agg.filter((pl.col("engine") == REFINED_ENGINE) & (pl.col("n_rep") >= 1))
    if "replacement" in ref.columns:  # the simulators sample without replacement
        ref = ref.filter(pl.col("replacement").is_null() | ~pl.col("replacement"))
    if ref.height == 0 or f"{metric}_mf" not in cmp.columns:
        return pl.DataFrame()
    # parameters the refined rows do not carry (the run length) are not join keys
    keys = [k for k in keys if k == "policy" or ref[k].null_count() < ref.height]
    ref = ref.select([*keys, pl.col(metric).alias(f"{metric}_rmf")]).unique(subset=keys, keep="first")
    pts = cmp.join(ref, on=keys, how="inner", nulls_equal=True)
    pts = pts.filter(pl.col(f"{metric}_mf").is_not_null() & pl.col(metric).is_not_null())
    n = pl.col(x).cast(pl.Float64)
    return pts.with_columns(
        ((pl.col(f"{metric}_rmf") - pl.col(f"{metric}_mf")) * n).alias("v_pred"),
        (pl.col(f"{metric}_gap") * n).alias("n_gap"),
        (pl.col(f"{metric}_se") * n).alias("n_gap_se"),
        (pl.col(metric) - pl.col(f"{metric}_rmf")).alias("residual"),
        pl.when(pl.col(f"{metric}_se") > 0)
        .then((pl.col(metric) - pl.col(f"{metric}_rmf")) / pl.col(f"{metric}_se"))
        .otherwise(None).alias("residual_z"),
    ).sort(["policy", "engine", *[k for k in keys if k not in ("policy", x)], x])


def _fit(ns, y, se) -> dict:
    """WLS of y = V + c / N; V with its t interval (n - 2 degrees of freedom)."""
    ns, y, se = (np.asarray(v, dtype=float) for v in (ns, y, se))
    w = 1.0 / se ** 2
    a = np.column_stack([np.ones_like(ns), 1.0 / ns])
    cov = np.linalg.inv(a.T @ (a * w[:, None]))
    coef = cov @ (a.T @ (w * y))
    dof = ns.size - 2
    resid = (y - a @ coef) / se
    red_chi2 = float(resid @ resid / dof) if dof > 0 else math.nan
    # standard errors from the given SEs, inflated by the scatter when it exceeds them
    scale = max(1.0, red_chi2) if math.isfinite(red_chi2) else 1.0
    v_se = math.sqrt(cov[0, 0] * scale)
    half = float(stats.t.ppf(0.975, dof)) * v_se if dof > 0 else math.inf
    return {"v_hat": float(coef[0]), "v_hat_se": v_se, "v_hat_lo": float(coef[0]) - half,
            "v_hat_hi": float(coef[0]) + half, "c_hat": float(coef[1]), "red_chi2": red_chi2}


def refined_fits(points: pl.DataFrame, arm_params: Sequence[str], x: str = "n_servers") -> list[dict]:
    """One plain dict per arm: the predicted V, the fitted V_hat with its interval, the
    residuals and the verdict (module docstring)."""
    if points.height == 0:
        return []
    group = ["policy", "engine", *[p for p in arm_params if p in points.columns and p not in ("policy", "engine")]]
    out = []
    for key, pts in points.group_by(group, maintain_order=True):
        pts = pts.filter(pl.col("n_gap_se").is_not_null() & (pl.col("n_gap_se") > 0)).sort(x)
        row = dict(zip(group, key))
        ns = pts[x].to_list()
        row.update({"n_values": ns, "v_pred": float(pts["v_pred"].mean()) if pts.height else None,
                    "n_gap": pts["n_gap"].to_list(), "n_gap_se": pts["n_gap_se"].to_list(),
                    "residual_z": pts["residual_z"].to_list()})
        z = [abs(v) if v is not None else math.inf for v in row["residual_z"]]
        ok_from = next((ns[i] for i in range(len(ns)) if all(zz <= Z_OK for zz in z[i:])), None)
        row["from_n"] = ok_from
        if pts.height < 3:
            row.update({"verdict": INCONCLUSIVE, "note": f"{pts.height} N with an SE; the fit needs 3"})
            out.append(row)
            continue
        fit = _fit(ns, pts["n_gap"].to_list(), pts["n_gap_se"].to_list())
        row.update(fit)
        inside = fit["v_hat_lo"] <= row["v_pred"] <= fit["v_hat_hi"]
        last_ok = z[-1] <= Z_OK
        row["verdict"] = AGREES if inside and last_ok else (DIFFERS if not inside else INCONCLUSIVE)
        row["note"] = (f"V = {row['v_pred']:.4g} predicted; N * gap fitted to V_hat + c/N: "
                       f"V_hat = {fit['v_hat']:.4g} [{fit['v_hat_lo']:.4g}, {fit['v_hat_hi']:.4g}]; "
                       + (f"residual within {Z_OK:g} SE from N = {ok_from}" if ok_from is not None
                          else f"residual above {Z_OK:g} SE at the largest N"))
        out.append(row)
    return out


def report_lines(fits: list[dict], metric: str, x: str = "n_servers") -> list[str]:
    """The report's section on the refined mean field (markdown lines)."""
    if not fits:
        return []
    lines = ["", f"## Against the refined mean field (x* + V/N) of {metric}", "",
             "V predicted = N (refined - mean field); V_hat from a weighted fit of N * gap = V_hat + c/N "
             "over the simulated N (t interval); residual = simulation - refined, in SE (rule in "
             "analysis/refined.py and docs/refined.md).", "",
             "| arm | N | N * gap (SE) | V predicted | V_hat [95% CI] | residual within 4 SE from N | verdict |",
             "|---|---|---|---|---|---|---|"]
    for f in fits:
        arm = " ".join(f"{k}={v}" for k, v in f.items()
                       if k in ("policy", "engine") or (k not in _FIT_KEYS and not isinstance(v, list)))
        cells = "; ".join(f"{n}: {g:.3g} ({s:.2g})" for n, g, s in zip(f["n_values"], f["n_gap"], f["n_gap_se"]))
        ci = (f"{f['v_hat']:.4g} [{f['v_hat_lo']:.4g}, {f['v_hat_hi']:.4g}]" if "v_hat" in f else "-")
        lines.append(f"| {arm} | {', '.join(str(n) for n in f['n_values'])} | {cells} | "
                     f"{f['v_pred']:.4g} | {ci} | {f['from_n'] if f['from_n'] is not None else '-'} | "
                     f"{f['verdict']} |")
    return lines


_FIT_KEYS = {"n_values", "v_pred", "n_gap", "n_gap_se", "residual_z", "from_n", "verdict", "note",
             "v_hat", "v_hat_se", "v_hat_lo", "v_hat_hi", "c_hat", "red_chi2"}
