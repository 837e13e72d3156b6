"""Scaling-law fits of the gap to the mean-field limit, and the verdict rule.

The rule, stated once (also in ``docs/analysis.md``):

* An *arm* is one curve in ``x`` (usually ``N = n_servers``): fixed engine, policy and arm
  parameters (:func:`arm_columns`).
* A point of the arm is *usable* if its gap and the gap's standard error ``se`` are finite and
  ``se > 0``.  Its reference distribution for ``gap/se`` is Student t with ``R - 1`` degrees of
  freedom when the interval came from ``R >= 2`` replications, standard normal otherwise
  (batch means).
* A usable point is *significant* (used in the fit) if ``|gap| > 2 se`` **and** its own 95%
  interval excludes 0 (``|gap| > hw``).  With few replications the t quantile exceeds 2
  (3.18 for R = 4), and ``2 se`` alone would flag about 14% of exactly-zero gaps.
* *Gap detected* (family-wise, Bonferroni over the ``m`` usable points of the arm): some point
  has a two-sided p-value of ``gap/se`` below ``0.05 / m``.  This is what separates a true zero
  gap from noise: with 9 points and per-point 5% tests an exact limit (random routing) would
  show at least one "significant" point 37% of the time.
* With at least 3 significant points, ``log|gap| = a + b log x`` is fitted to them by weighted
  least squares, weights ``1/se(log|gap|)**2`` with the delta method ``se(log|gap|) =
  se(gap)/|gap|``.  The covariance of ``(a, b)`` is the WLS covariance scaled by the residual
  variance ``chi2/(n - 2)``; the 95% interval of ``b`` is ``b +- t_{0.975, n-2} * se(b)`` (WLS
  with unknown scale; with 3-4 points it is wide on purpose).
* Verdict, first match wins:
    1. ``"no significant gap"``: no gap detected and fewer than 3 significant points
       (e.g. random routing, where the finite-N system equals the limit exactly);
    2. ``"falling (N^b over N = 10^a..10^c; undecided beyond)"``: >= 3 significant points, all
       of one sign, and the whole 95% interval of ``b`` below 0. It is a trend of the gap over
       the fitted range, not a limit: nothing here carries it past the largest N, so whether
       the gap vanishes beyond it is undecided (docs/analysis.md, "Two claims, kept apart");
    3. ``"inconclusive"``: everything else (a gap detected but fewer than 3 significant
       points, significant gaps of both signs, or an interval of ``b`` reaching 0 or above);
       the ``note`` column says which.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import stats

from analysis.aggregate import check_params
from analysis.fmt import n_span, n_value

__all__ = [
    "gap_rate_verdict",
    "SIGNIFICANT_Z",
    "MIN_FIT_POINTS",
    "VERDICT_FALLING",
    "VERDICT_NO_GAP",
    "VERDICT_INCONCLUSIVE",
    "FIT_METHOD",
    "arm_columns",
    "point_significant",
    "gap_p_values",
    "wls_loglog",
    "fit_gap_rate",
]

VERDICT_FALLING = "falling"
VERDICT_NO_GAP = "no significant gap"
VERDICT_INCONCLUSIVE = "inconclusive"
FIT_METHOD = "WLS of log|gap| on log x, delta-method weights, residual-scaled covariance, t(n-2)"

#: a point is significant when |gap| > SIGNIFICANCE * se(gap) (and its 95% CI excludes 0)
SIGNIFICANCE = 2.0
MIN_POINTS = 3
#: family-wise level of the "gap detected" test (Bonferroni over the points of an arm)
FAMILY_ALPHA = 0.05
_MAX_SEARCH = 12  # subsets searched by arm_columns: 2**12


def arm_columns(frame: pl.DataFrame, params: Sequence[str], x: str = "n_servers") -> list[str]:
    """The parameter columns that label an arm (one curve in ``x``), found from the data.

    The simplest choice, every parameter except ``x``, splits a sweep whose other columns are
    *derived from* ``x`` (for example ``lam = 1 - beta * N**-0.5``) into one-point arms.  So:
    among the subsets ``K`` of ``params - {x}`` such that ``(engine, policy, K, x)`` identifies
    every row of ``frame``, take one giving the fewest arms, then add back every parameter that
    is constant within each of those arms.  Parameters that change along an arm (functions of
    ``x``) are thereby left out; for a full factorial grid the result is ``params - {x}``.  If no
    subset identifies the rows (a varying column is missing from ``params``), or there are more
    than 12 candidate columns, ``params - {x}`` is returned.
    """
    params = check_params(frame, params, x)
    others = [p for p in params if p != x]
    if frame.height == 0 or len(others) > _MAX_SEARCH:
        return others
    base = [c for c in ("engine", "policy") if c in frame.columns]
    n_rows = frame.height
    best, best_arms = None, None
    for size in range(len(others) + 1):
        for subset in itertools.combinations(others, size):
            ident = [*base, *subset, x]
            if frame.select(ident).unique().height != n_rows:
                continue
            n_arms = frame.select([*base, *subset]).unique().height
            if best_arms is None or n_arms < best_arms:
                best, best_arms = list(subset), n_arms
    if best is None:
        return others
    group = [*base, *best]
    keep = []
    for p in others:
        if p in best:
            keep.append(p)
            continue
        varies = frame.group_by(group).agg(pl.col(p).n_unique().alias("_n"))["_n"].max()
        if varies == 1:
            keep.append(p)
    return keep


def wls_loglog(x, gap, se, level: float = 0.95) -> dict:
    """Fit ``log|gap| = a + b log x`` by WLS with delta-method weights; see the module docstring.

    Needs >= 3 points with ``gap != 0`` and ``se > 0``.  Returns a dict with ``intercept, slope,
    slope_se, slope_lo, slope_hi, dof, red_chi2``.
    """
    x = np.asarray(x, dtype=float)
    gap = np.abs(np.asarray(gap, dtype=float))
    se = np.asarray(se, dtype=float)
    n = x.size
    if n < 3:
        raise ValueError(f"need at least 3 points, got {n}")
    X = np.column_stack([np.ones(n), np.log(x)])
    y = np.log(gap)
    w = (gap / se) ** 2  # 1 / se(log|gap|)**2
    XtW = X.T * w
    A = XtW @ X
    coef = np.linalg.solve(A, XtW @ y)
    resid = y - X @ coef
    dof = n - 2
    red_chi2 = float(np.sum(w * resid**2) / dof)
    cov = np.linalg.inv(A) * red_chi2
    slope_se = float(math.sqrt(max(cov[1, 1], 0.0)))
    half = float(stats.t.ppf(0.5 + level / 2.0, dof)) * slope_se
    slope = float(coef[1])
    return {
        "intercept": float(coef[0]),
        "slope": slope,
        "slope_se": slope_se,
        "slope_lo": slope - half,
        "slope_hi": slope + half,
        "dof": dof,
        "red_chi2": red_chi2,
    }


def point_significant(gap, se, hw) -> np.ndarray:
    """``|gap| > 2 se`` and ``|gap| > hw`` (the point's 95% interval excludes 0; NaN hw: 2 se only)."""
    gap, se, hw = (np.asarray(a, dtype=float) for a in (gap, se, hw))
    with np.errstate(invalid="ignore"):
        bound = np.fmax(SIGNIFICANCE * se, hw)  # fmax ignores a NaN half-width
        return np.abs(gap) > bound


def gap_p_values(gap, se, n_rep) -> np.ndarray:
    """Two-sided p-values of ``gap/se``: t with ``R - 1`` dof for ``R >= 2``, normal for ``R = 1``."""
    gap, se, n_rep = (np.asarray(a, dtype=float) for a in (gap, se, n_rep))
    z = np.abs(gap) / se
    p_t = 2.0 * stats.t.sf(z, np.maximum(n_rep - 1.0, 1.0))
    p_n = 2.0 * stats.norm.sf(z)
    return np.where(n_rep >= 2, p_t, p_n)


def _sign_label(signs: set) -> str | None:
    if not signs:
        return None
    if signs == {1.0}:
        return "+"
    if signs == {-1.0}:
        return "-"
    return "mixed"


def _x_symbol(x: str) -> str:
    return "N" if x == "n_servers" else x


def _x_text(v: float, x: str) -> str:
    """A value of ``x`` in words: N as a power of ten, anything else as a number."""
    from analysis.fmt import sci

    return sci(v) if x == "n_servers" and v > 0 else f"{v:g}"


def fit_gap_rate(
    cmp: pl.DataFrame,
    params: Sequence[str],
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] | None = None,
    level: float = 0.95,
) -> pl.DataFrame:
    """Fit the rate at which the gap to the mean field closes, per arm, and give a verdict.

    ``cmp`` is the output of :func:`analysis.aggregate.compare_to_meanfield`; the gap of
    ``metric`` is used (``<metric>_gap`` and ``<metric>_gap_se``).  Arms are ``engine, policy``
    and ``arm_params`` (default :func:`arm_columns`).  The fit and verdict rules are in the
    module docstring and ``docs/analysis.md``.

    Returns one row per arm: ``engine, policy, *arm_params, metric, n_points, n_usable,
    n_significant, gap_detected, min_p_value`` (smallest unadjusted p-value), ``sign`` (of the
    significant gaps: ``+``, ``-``, ``mixed`` or null), ``intercept, slope, slope_se,
    slope_lo, slope_hi, dof, red_chi2, x_min, x_max`` (range of the fitted points),
    ``verdict, note, fit_method``.  Numbers are
    null when there was no fit.  Empty (height 0) when ``cmp`` has no gaps or ``x`` takes fewer
    than two values.
    """
    params = check_params(cmp, params, x)
    gcol, scol = f"{metric}_gap", f"{metric}_gap_se"
    if arm_params is None:
        arm_params = arm_columns(cmp, params, x) if cmp.height else [p for p in params if p != x]
    arm_params = list(arm_params)
    keys = ["engine", "policy", *arm_params]
    have = cmp.filter(pl.col(gcol).is_not_null()) if gcol in cmp.columns else cmp.head(0)
    if have.height == 0 or have[x].n_unique() < 2:
        return _empty_fits(cmp, keys)
    sym = _x_symbol(x)
    rows = []
    for _, g in have.sort(x).group_by(keys, maintain_order=True):
        first = g.row(0, named=True)
        row = {k: first[k] for k in keys}
        xs = g[x].cast(pl.Float64).to_numpy()
        gap = g[gcol].cast(pl.Float64).to_numpy()
        se = g[scol].cast(pl.Float64).fill_null(np.nan).to_numpy()
        hw = g[f"{metric}_gap_hw"].cast(pl.Float64).fill_null(np.nan).to_numpy() \
            if f"{metric}_gap_hw" in g.columns else np.full(g.height, np.nan)
        n_rep = g["n_rep"].cast(pl.Float64).fill_null(1.0).to_numpy() \
            if "n_rep" in g.columns else np.ones(g.height)
        usable = np.isfinite(gap) & np.isfinite(se) & (se > 0) & np.isfinite(xs) & (xs > 0)
        sig = usable & point_significant(gap, se, hw)
        m = int(usable.sum())
        pvals = gap_p_values(gap[usable], se[usable], n_rep[usable])
        detected = bool(m and np.min(pvals) < FAMILY_ALPHA / m)
        signs = set(np.sign(gap[sig]).tolist())
        n_sig = int(sig.sum())
        row.update(
            metric=metric, n_points=int(g.height), n_usable=m, n_significant=n_sig,
            gap_detected=detected, min_p_value=float(np.min(pvals)) if m else None,
            sign=_sign_label(signs),
            intercept=None, slope=None, slope_se=None, slope_lo=None, slope_hi=None,
            dof=None, red_chi2=None, x_min=None, x_max=None,
        )
        if n_sig >= MIN_POINTS and np.unique(xs[sig]).size >= 2:
            fit = wls_loglog(xs[sig], gap[sig], se[sig], level=level)
            row.update(fit, x_min=float(xs[sig].min()), x_max=float(xs[sig].max()))
        if not detected and n_sig < MIN_POINTS:
            row["verdict"] = VERDICT_NO_GAP
            if m == 0:
                row["note"] = "no point has a positive standard error"
            else:
                row["note"] = (
                    f"no point significant after Bonferroni over {m} points"
                    + (f" ({n_sig} significant alone)" if n_sig else "")
                )
        elif n_sig < MIN_POINTS:
            row["verdict"] = VERDICT_INCONCLUSIVE
            row["note"] = f"gap detected but only {n_sig} significant point(s); the fit needs {MIN_POINTS}"
        elif len(signs) > 1:
            row["verdict"] = VERDICT_INCONCLUSIVE
            row["note"] = "significant gaps of both signs: not a single power law"
        elif row["slope"] is None:
            row["verdict"] = VERDICT_INCONCLUSIVE
            row["note"] = f"the significant points share one value of {x}: nothing to fit"
        elif row["slope_hi"] < 0.0:
            lo, hi = _x_text(row["x_min"], x), _x_text(row["x_max"], x)
            row["verdict"] = f"{VERDICT_FALLING} ({sym}^{row['slope']:.2f} over {sym} = {lo}..{hi}; undecided beyond)"
            row["note"] = (f"a trend of the gap over the fitted range; its limit beyond {sym} = {hi} is undecided "
                           "(nothing carries it past the range)")
        else:
            row["verdict"] = VERDICT_INCONCLUSIVE
            row["note"] = (
                f"{level:.0%} interval of the slope "
                f"[{row['slope_lo']:.3g}, {row['slope_hi']:.3g}] does not lie below 0"
            )
        row["fit_method"] = FIT_METHOD
        rows.append(row)
    schema = _fit_schema(cmp, keys)
    return pl.DataFrame(rows, schema=schema)


_FIT_NUMERIC = {
    "metric": pl.String, "n_points": pl.Int64, "n_usable": pl.Int64, "n_significant": pl.Int64,
    "gap_detected": pl.Boolean, "min_p_value": pl.Float64,
    "sign": pl.String, "intercept": pl.Float64, "slope": pl.Float64, "slope_se": pl.Float64,
    "slope_lo": pl.Float64, "slope_hi": pl.Float64, "dof": pl.Int64, "red_chi2": pl.Float64,
    "x_min": pl.Float64, "x_max": pl.Float64, "verdict": pl.String, "note": pl.String,
    "fit_method": pl.String,
}


def _fit_schema(cmp: pl.DataFrame, keys: list[str]) -> dict:
    schema = {k: cmp.schema[k] for k in keys}
    schema.update(_FIT_NUMERIC)
    return schema


def _empty_fits(cmp: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return pl.DataFrame(schema=_fit_schema(cmp, keys))


#: a gap is significant beyond this many standard errors (:func:`gap_rate_verdict`)
SIGNIFICANT_Z = 4.0
#: significant points a power-law fit of a gap needs
MIN_FIT_POINTS = 4
FALLING, NOT_FALLING, CONSISTENT, INCONCLUSIVE = ("falling", "not falling", "consistent", "inconclusive")


def gap_rate_verdict(ns, gaps, ses) -> dict:
    """The trend of a gap to a limit over the simulated N, from the points whose gap is
    significant (beyond :data:`SIGNIFICANT_Z` SE): a weighted log-log fit of |gap| on N over at
    least :data:`MIN_FIT_POINTS` of them (``falling``: the slope's 95% CI below 0; ``not
    falling``: at or above 0; else ``inconclusive``), or, with fewer, ``consistent`` (the others
    within the SE band) or ``inconclusive``. A trend over the fitted N, never a limit: the note
    says "over N = a..b" and that whether the gap vanishes is undecided beyond the largest N
    (nothing here carries it further). Returns the points, the fit and a note."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(gaps) / ses
    sig = (ses > 0) & (z > SIGNIFICANT_Z)
    out = {"n_values": [int(v) for v in ns], "gaps": [float(g) for g in gaps],
           "gap_se": [float(s) for s in ses], "n_significant": int(sig.sum()),
           "slope": None, "slope_lo": None, "slope_hi": None}
    if sig.sum() >= MIN_FIT_POINTS:
        fit = wls_loglog(ns[sig], gaps[sig], ses[sig])
        out.update({k: fit[k] for k in ("slope", "slope_lo", "slope_hi")})
        lo_n, hi_n = float(ns[sig].min()), float(ns[sig].max())
        # the gap's limit: nothing here carries it past the largest N simulated
        span, beyond = n_span(lo_n, hi_n), f"undecided beyond N = {n_value(float(np.max(ns)))}"
        if fit["slope_hi"] < 0:
            out["verdict"] = FALLING
            out["note"] = (f"gap ~ N^{fit['slope']:.2f} [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}] over {span}; "
                           f"{beyond}")
        elif fit["slope_lo"] >= 0:
            out["verdict"] = NOT_FALLING
            out["note"] = f"gap ~ N^{fit['slope']:.2f} over {span}: not shrinking there; {beyond}"
        else:
            out["verdict"] = INCONCLUSIVE
            out["note"] = f"the slope's 95% CI contains 0 over {span}"
        if (~sig).any():  # said before the limit's words, which end the note
            within = f"within {SIGNIFICANT_Z:g} SE at N = {', '.join(str(int(v)) for v in ns[~sig])}"
            out["note"] = out["note"].replace(f"; {beyond}", f"; {within}; {beyond}") if beyond in out["note"] \
                else f"{out['note']}; {within}"
        return out
    within = ns[~sig]
    if within.size == 0:
        out["verdict"] = INCONCLUSIVE
        out["note"] = f"only {int(sig.sum())} N with a gap, none within {SIGNIFICANT_Z:g} SE; need {MIN_FIT_POINTS} to fit"
    else:
        out["verdict"] = CONSISTENT
        out["note"] = (f"{int(sig.sum())} significant gap(s) (a fit needs {MIN_FIT_POINTS}); within "
                       f"{SIGNIFICANT_Z:g} SE of the mean field at N = {', '.join(str(int(v)) for v in within)}"
                       " (an O(1/N) gap falls below the SE at large N)")
    return out
