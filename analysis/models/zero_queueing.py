"""Zero queueing delay for parallel jobs: the queueing ratio against N, per arm, with a verdict.

The metric (Weng & Wang) is the queueing ratio ``(E[T] - H_k) / H_k`` of a job's mean response
time over its inherent delay ``E[max of k Exp(1)] = H_k``. Zero asymptotic queueing delay means
it tends to 0 as N grows. Per arm (policy, engine and every parameter that does not change
along N, e.g. the variant giving the rule for d), replications are combined into a mean with a
95% interval (:func:`analysis.aggregate.aggregate`), and the ratio's behaviour in N is judged.

Verdict rule (also in docs/analysis.md), per arm, over the points with a ratio and an SE > 0:

1. ``vanishing`` if the ratio's 95% interval lies below ``RATIO_ZERO`` (0.001) at every point of
   the upper half (the last ``max(3, ceil(n/2))`` points): zero queueing delay reached within
   the resolution of the run, on several points (one tiny last point decides nothing).
2. Otherwise, with 4 points or more, the rivals' verdict of :mod:`analysis.asymptotics`:
   descriptions to zero (``a N^b``, ``a/(ln N)^p``, ``a ln ln N / ln N``, the heavy-traffic
   ``a ln ln k / ln k`` with ``k = ceil(ln^2 N)``) against descriptions with a level (a floor
   plus a power or a logarithmic decay, flat, growing), calibrated by a parametric bootstrap
   at the arm's own N and SEs, seeded by the arm's task seeds (so ``reproduce`` gets the same
   report): ``vanishing``, ``converges to a positive level`` (with the level and its 95%
   interval), ``not vanishing`` (flat or growing), or ``undecided`` (the rivals fit alike, or
   one point left out moves the verdict across: ``fragile`` names it).
3. ``inconclusive`` with fewer than 4 such points.

Descriptions beside the verdict (not its rule): the slope b of M0 ``r = a N^b`` on all points
(``slope``) and on the upper half (``tail_slope``), 95% t intervals (:func:`power_fit`); and
M1's floor test (:func:`floor_fit`, ``p_floor``, ``lr_stat``, ``floor_exponent``): ``r = c0 + a
(N/N_min)^b`` against ``c0 = 0``, the boundary law ``1/2 chi2_0 + 1/2 F(1, n - 3)``. Every fit is
weighted least squares on the ratio itself (weights ``1/se**2``) with the residual scale ``s2 =
max(1, RSS / dof)``, which widens intervals when points scatter more than their SEs.

The rule is a statistical summary of the N range simulated, not a proof of a limit.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from scipy import optimize, stats

from analysis import asymptotics, style
from analysis.aggregate import LIMIT_ENGINES, aggregate, check_params
from analysis.fit import arm_columns, gap_rate_verdict
from analysis.fmt import num_nan as _num
from analysis.fmt import sci as _sci
from analysis.models import zero_queueing_limit as zql

RATIO_ZERO = 1e-3
#: floor significant: p of the boundary LR test below this (= the 95% interval of c0 excludes 0)
P_FLOOR = 0.025
#: a slope above -SLOPE_FLAT counts as flat (N^-0.05: the ratio halves when N grows 10^6-fold)
SLOPE_FLAT = 0.05
#: steepest decay of M1's power term (b = -3 moves only the first point of a 4-decade range)
FLOOR_B_MIN = -3.0
#: confidence level of every interval of the rule
LEVEL = 0.95
#: ratios at or below this are drawn as zero on the log axes: a buffered arm's admitted jobs
#: never wait (its ratio is rounding noise, ~1e-16), and per-task power-of-(kd) reaches 1e-293
#: on the path, which would crush every other curve
PLOT_RATIO_MIN = 1e-12
METRICS = ("queueing_ratio", "mean_response", "drop_prob", "frac_within_h")
VANISHING, NOT_VANISHING, UNDECIDED = asymptotics.VANISHING, asymptotics.NOT_VANISHING, asymptotics.UNDECIDED
CONVERGES = asymptotics.CONVERGES
#: too few points for the rivals (4 with an SE), or none at all
INCONCLUSIVE = "inconclusive"
VERDICTS = (VANISHING, CONVERGES, NOT_VANISHING, UNDECIDED, INCONCLUSIVE)

#: the exponent grid of M1 (refined by a bounded 1-D search around its best point)
_B_GRID = np.concatenate([-np.geomspace(-FLOOR_B_MIN, 1e-4, 240), [0.0]])


def _arm_key(row: dict, arm: list[str]) -> tuple:
    return (row["policy"], row["engine"], *(row[p] for p in arm))


def _label(row: dict, arm: list[str]) -> str:
    parts = [f"{p}={row[p]:.4g}" if isinstance(row[p], float) else f"{p}={row[p]}"
             for p in arm if row[p] is not None]
    return f"{row['policy']} [{row['engine']}] " + ", ".join(parts)


def _f(v) -> float | None:
    """A plain float for the JSON (None for None, NaN or infinity)."""
    return None if v is None or not math.isfinite(float(v)) else float(v)


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


def _tail_size(m: int) -> int:
    """The number of points in the upper half of an arm of ``m`` points."""
    return min(m, max(3, math.ceil(m / 2)))


def _resolution_reached(pts: pl.DataFrame) -> tuple[bool, int]:
    """Whether every point of the upper half (the last ``max(3, ceil(n/2))`` points) has its
    95% interval below :data:`RATIO_ZERO`: zero queueing delay reached within the run's
    resolution, on several points (one tiny last point decides nothing)."""
    k = _tail_size(pts.height)
    if pts.height < 3:
        return False, k
    top = pts.tail(k)
    hi = top["queueing_ratio_hi"] if "queueing_ratio_hi" in top.columns else None
    if hi is None or hi.null_count():
        se = top["queueing_ratio_se"].fill_null(0.0) if "queueing_ratio_se" in top.columns else 0.0
        hi = top["queueing_ratio"] + 1.96 * se
    return bool((hi < RATIO_ZERO).all()), k


def verdict(points: pl.DataFrame, x: str = "n_servers", seed=0, n_boot: int = asymptotics.N_BOOT) -> dict:
    """The verdict of one arm by the rule in the module docstring.

    ``points``: one arm's aggregated rows; uses ``x``, ``queueing_ratio``, ``queueing_ratio_se``
    and ``queueing_ratio_lo``/``_hi`` (the point's 95% interval). ``seed`` (int or list of ints:
    :func:`analyze_zero_queueing` passes the arm's task seeds) seeds the bootstrap of
    :func:`analysis.asymptotics.asymptotic_verdict`. Returns plain floats, strings or None.
    """
    pts = points.filter(pl.col("queueing_ratio").is_not_null()).sort(x)
    out = {"n_points": pts.height, "slope": None, "slope_lo": None, "slope_hi": None,
           "ratio_at_max_n": None, "ratio_lo_at_max_n": None, "ratio_hi_at_max_n": None,
           "tail_min_n": None, "tail_slope": None, "tail_slope_lo": None, "tail_slope_hi": None,
           "level": None, "level_lo": None, "level_hi": None, "lr_stat": None, "p_floor": None,
           "floor_exponent": None, "p_zero": None, "p_level": None, "statistic": None, "best_zero": None,
           "best_level": None, "rivals": [], "fragile": [], "loo": [], "unfragile_verdict": None,
           "verdict": INCONCLUSIVE, "note": ""}
    if pts.height == 0:
        out["note"] = "no successful points"
        return out
    last = pts.row(-1, named=True)
    r_last, se_last = last["queueing_ratio"], last.get("queueing_ratio_se")
    half = (1.96 * se_last) if se_last is not None else 0.0
    hi = last.get("queueing_ratio_hi")
    lo = last.get("queueing_ratio_lo")
    hi = r_last + half if hi is None else hi
    lo = r_last - half if lo is None else lo
    out.update(ratio_at_max_n=_f(r_last), ratio_lo_at_max_n=_f(lo), ratio_hi_at_max_n=_f(hi))
    reached, k_top = _resolution_reached(pts)
    if reached:
        out["verdict"] = VANISHING
        out["note"] = (f"ratio < {RATIO_ZERO:g} (95% CI) at each of the {k_top} largest {x} "
                       f"(from {pts[x][-k_top]:g})")
        return out
    usable = pts.filter(pl.col("queueing_ratio_se").is_not_null() & (pl.col("queueing_ratio_se") > 0)
                        & pl.col("queueing_ratio").is_finite() & pl.col("queueing_ratio_se").is_finite())
    m = usable.height
    if m < 3:
        out["note"] = f"{m} point(s) with a ratio and an SE; the fits need 3"
        return out
    ns, rs, ses = (usable[c].to_numpy().astype(float) for c in (x, "queueing_ratio", "queueing_ratio_se"))
    # descriptive fits: the power law's slope on all points and on the upper half, M1's floor test
    full = power_fit(ns, rs, ses)
    k = _tail_size(m)
    tail = full if k == m else power_fit(ns[-k:], rs[-k:], ses[-k:])
    floor = floor_fit(ns, rs, ses)
    if full is not None:
        out.update({key: _f(full[key]) for key in ("slope", "slope_lo", "slope_hi")})
    if tail is not None:
        out.update(tail_min_n=_f(ns[-k]), tail_slope=_f(tail["slope"]), tail_slope_lo=_f(tail["slope_lo"]),
                   tail_slope_hi=_f(tail["slope_hi"]))
    if floor is not None:
        out.update({key: _f(floor[key]) for key in ("lr_stat", "p_floor", "floor_exponent")})
    if m < asymptotics.MIN_POINTS:
        out["note"] = f"{m} points with a ratio and an SE; the rivals need {asymptotics.MIN_POINTS}"
        return out
    av = asymptotics.asymptotic_verdict(ns, rs, ses, seed=seed, n_boot=n_boot)
    out.update(verdict=av.outcome, note=av.note, level=_f(av.level), level_lo=_f(av.level_lo),
               level_hi=_f(av.level_hi), p_zero=_f(av.p_zero), p_level=_f(av.p_level),
               statistic=_f(av.statistic), best_zero=av.best_zero, best_level=av.best_level,
               rivals=av.rivals, fragile=av.fragile, loo=av.loo, unfragile_verdict=av.unfragile_outcome)
    return out


#: a path still rising towards an extrapolated level above this multiple of its last ratio is
#: called growing (not vanishing), not converging: the level is then far outside the path
PATH_RISE_LEVEL = 1.5
#: decades between the three points of the path's extrapolation (N_max / 100, N_max / 10, N_max)
PATH_STEP_DECADES = 1.0


def _nearest(ns: np.ndarray, target: float) -> int:
    return int(np.argmin(np.abs(np.log10(ns) - math.log10(target))))


def path_verdict(points: pl.DataFrame, x: str = "n_servers") -> dict:
    """The verdict of a limit path (exact values, no SE): the rule of docs/analysis.md, "The
    limit along the path".

    ``points``: one arm's rows of a limit engine along the sweep's path (``x`` and
    ``queueing_ratio``). Returns ``path_n_max``, ``path_ratio_at_max``, ``path_top_slope`` (the
    log-log slope over the last decade), ``path_level`` and ``path_level_exponent`` (the
    three-point extrapolation), ``path_verdict`` (one of :data:`VERDICTS`) and ``path_note``."""
    pts = points.filter(pl.col("queueing_ratio").is_not_null() & pl.col("queueing_ratio").is_finite()).sort(x)
    out = {"path_points": pts.height, "path_n_max": None, "path_ratio_at_max": None, "path_top_slope": None,
           "path_level": None, "path_level_exponent": None, "path_verdict": INCONCLUSIVE, "path_note": ""}
    if pts.height < 3:
        out["path_note"] = f"{pts.height} point(s) on the path; the rule needs 3"
        return out
    ns = pts[x].to_numpy().astype(float)
    rs = pts["queueing_ratio"].to_numpy().astype(float)
    top = ns[-1]
    out.update(path_n_max=float(top), path_ratio_at_max=float(rs[-1]))
    if rs[-1] < RATIO_ZERO:
        out.update(path_verdict=VANISHING, path_note=f"ratio < {RATIO_ZERO:g} at {x} = {top:.3g}")
        return out
    i1, i2 = _nearest(ns, top / 10 ** (2 * PATH_STEP_DECADES)), _nearest(ns, top / 10 ** PATH_STEP_DECADES)
    if not (i1 < i2 < ns.size - 1) or min(rs[i1], rs[i2]) <= 0:
        out["path_note"] = "the path is too short (it needs points a decade and two decades below its end)"
        return out
    span = math.log10(top / ns[i2])
    b_top = math.log(rs[-1] / rs[i2]) / math.log(top / ns[i2])
    out["path_top_slope"] = b_top
    r1, r2, r3 = rs[i1], rs[i2], rs[-1]
    q = (r3 - r2) / (r2 - r1) if r2 != r1 else math.inf
    if 0 < q < 1:  # r = c0 + a N^b through the three points: c0 (Aitken's delta-squared)
        level = r3 + (r3 - r2) * q / (1 - q)
        out.update(path_level=float(level), path_level_exponent=float(math.log10(q) / span))
    if b_top < -SLOPE_FLAT:
        out.update(path_verdict=VANISHING,
                   path_note=f"still falls like N^{b_top:.3f} over the last decade (faster than N^-{SLOPE_FLAT:g})")
    elif b_top > SLOPE_FLAT:
        out.update(path_verdict=NOT_VANISHING, path_note=f"grows like N^{b_top:.3f} over the last decade")
    elif out["path_level"] is not None and r3 > r2 and out["path_level"] > PATH_RISE_LEVEL * r3:
        out.update(path_verdict=NOT_VANISHING,
                   path_note=(f"still rises (N^{b_top:.3f} over the last decade), towards an extrapolated "
                              f"{out['path_level']:.3g}, beyond {PATH_RISE_LEVEL:g} x the ratio at the end"))
    elif out["path_level"] is not None and out["path_level"] > RATIO_ZERO:
        way = "falls" if r3 < r2 else "rises"
        out.update(path_verdict=CONVERGES,
                   path_note=(f"{way} ever more slowly (N^{b_top:.3f} over the last decade): extrapolated level "
                              f"{out['path_level']:.3g}, approached like N^{out['path_level_exponent']:.2f}"))
    elif out["path_level"] is not None:
        out.update(path_verdict=VANISHING,
                   path_note=f"slows, but towards an extrapolated level {out['path_level']:.2g} < {RATIO_ZERO:g}")
    else:
        trend = "grows" if r3 > r2 else "falls"
        out.update(path_verdict=NOT_VANISHING,
                   path_note=f"{trend} slower than N^-{SLOPE_FLAT:g} over the last decade, not decelerating "
                             f"(N^{b_top:.3f}); ratio {r3:.3g} at {x} = {top:.3g}")
    return out


def hypotheses(row: dict) -> dict | None:
    """The theorem's conditions at one point (Weng & Wang; docs/analysis.md), made concrete
    as numbers: ``k log^2 N / N^(1/2 - alpha)`` (Theorem 1 needs it -> 0), ``k / (log k log
    N)`` (needs it bounded below), ``d (1 - lam) log k`` (bounded: a Theta rule; -> infinity:
    an omega rule, Theorem 2's), the buffer ``b = min(N^alpha, N^(1/2 - alpha) / k)`` of
    Theorem 1, and Theorem 3's ``log k / sqrt(log N)`` and ``log d log k / log N`` (both -> 0
    for its lower bound). None without ``alpha``, ``k``, ``d`` and ``lam``."""
    n, k, d, lam, alpha = (row.get(c) for c in ("n_servers", "k", "d", "lam", "alpha"))
    if None in (n, k, d, lam, alpha) or k < 2 or n < 3:
        return None
    ln = math.log(n)
    lk = math.log(k)
    return {
        "alpha_ok": 0 < alpha < 0.5,
        "beta_ok": None if row.get("beta") is None else 0 < row["beta"] <= 1,
        "k_upper": k * ln ** 2 / n ** (0.5 - alpha),
        "k_lower": k / (lk * ln),
        "rule": d * (1.0 - lam) * lk,
        "buffer": min(n ** alpha, n ** (0.5 - alpha) / k),
        "lb_k": lk / math.sqrt(ln),
        "lb_d": math.log(d) * lk / ln if d >= 1 else None,
    }


def rule_class(points: pl.DataFrame, x: str = "n_servers") -> str:
    """``fixed``, ``constant``, ``Theta`` or ``omega``: how ``d (1 - lam) log k`` behaves along
    the points (the path where there is one): d and lam the same everywhere (one system whose N
    alone grows, not a rule of N); d the same everywhere; that product growing more than 1.25-fold
    over the points with N >= 10^4 (where the cap d <= N/k no longer binds; a Theta rule's ceiling
    moves it by a few percent, log log N and log k grow 1.6-fold from 10^4 to 10^15); else bounded."""
    if "d" not in points.columns or points.height == 0:
        return "-"
    ds = points["d"].drop_nulls()
    if ds.n_unique() == 1:
        lams = points["lam"].drop_nulls() if "lam" in points.columns else None
        return "fixed" if lams is not None and lams.n_unique() == 1 and points.height > 1 else "constant"
    hs = [hypotheses(r) for r in points.sort(x).iter_rows(named=True) if r[x] >= 1e4]
    m = [h["rule"] for h in hs if h is not None]
    if len(m) < 2:
        return "-"
    return "omega" if m[-1] / m[0] > 1.25 else "Theta"


#: parameters that set a simulation's run length, which limit rows do not have
RUN_LENGTH = ("time", "events")

#: what each class of rule means for the two theorems (docs/analysis.md)
RULE_COVERAGE = {
    "fixed": "lam and d fixed while N grows: one system, no rule of N (the theorems need lam -> 1)",
    "constant": "constant d: Theorem 3-4's lower bound (d = e^o(log N / log k)): no zero queueing",
    "Theta": "d = Theta(1/((1-lam) log k)): the boundary, covered by neither theorem",
    "omega": "d = omega(1/((1-lam) log k)): Theorem 2's rule (zero queueing, under its hypotheses)",
    "-": "-",
}



def _gaps(pts: pl.DataFrame, path: pl.DataFrame, x: str) -> dict:
    """The simulated ratio minus the limit's at the N where both exist: per point (``gaps``:
    N, gap, its 95% interval from the simulation's, the limit being exact) and how the gap
    behaves as N grows (:func:`analysis.fit.gap_rate_verdict` on the gaps and the
    simulations' SEs)."""
    both = pts.join(path.select([x, pl.col("queueing_ratio").alias("_lim")]), on=x, how="inner").sort(x)
    both = both.filter(pl.col("queueing_ratio").is_not_null())
    if both.height == 0:
        return {"gaps": [], "gap_verdict": None, "gap_note": "no N with both"}
    rows = []
    for r in both.iter_rows(named=True):
        g = r["queueing_ratio"] - r["_lim"]
        lo = None if r.get("queueing_ratio_lo") is None else r["queueing_ratio_lo"] - r["_lim"]
        hi = None if r.get("queueing_ratio_hi") is None else r["queueing_ratio_hi"] - r["_lim"]
        rows.append({"n": r[x], "sim": r["queueing_ratio"], "limit": r["_lim"], "gap": g, "lo": lo, "hi": hi,
                     "se": r.get("queueing_ratio_se")})
    ns = np.array([g["n"] for g in rows], dtype=float)
    gs = np.array([g["gap"] for g in rows], dtype=float)
    ses = np.array([np.nan if g["se"] is None else g["se"] for g in rows], dtype=float)
    rate = gap_rate_verdict(ns, gs, np.nan_to_num(ses, nan=0.0))
    return {"gaps": rows, "gap_verdict": rate.get("verdict"), "gap_note": rate.get("note", ""),
            "gap_slope": rate.get("slope"), "gap_slope_lo": rate.get("slope_lo"), "gap_slope_hi": rate.get("slope_hi")}


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


def _arm_seed(rows: pl.DataFrame) -> list[int]:
    """The bootstrap's seed for one arm: its tasks' seeds, sorted (the run's root seed reaches
    them through ``SeedSequence``, docs/results-schema.md), so that a rerun of the same sweep
    (``reproduce``) gets the same verdicts; [0] without a ``seed`` column."""
    if "seed" not in rows.columns:
        return [0]
    seeds = sorted(int(v) % 2**63 for v in rows["seed"].drop_nulls().to_list())
    return seeds or [0]


def analyze_zero_queueing(frame: pl.DataFrame, params, outdir, sweep_name: str, x: str = "n_servers",
                          context: dict | None = None) -> dict:
    """Aggregate, fit and judge each arm; write plots, ``verdicts.json`` and ``report.md``.

    ``context``: the sweep's own definitions (``params``, ``variants``, ``limit_path``, as the
    run's config.yaml has them; :func:`pipeline.run.analysis_context`), for the rule for d as a
    formula and the end of the heavy-traffic path. Rows of the ``heavy_traffic`` engine (no
    n_servers: ``log10_n``) carry the limit past the exact mean field
    (:mod:`analysis.models.zero_queueing_limit`)."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = check_params(frame, params, x)
    sims = frame.filter(~pl.col("engine").is_in(list(LIMIT_ENGINES)))
    if sims.height == 0 or "queueing_ratio" not in sims.columns:
        report = outdir / "report.md"
        report.write_text(f"# Sweep `{sweep_name}`: zero queueing delay\n\nNo simulation rows.\n")
        return {"report": report, "plots": [], "metrics": [], "verdicts": [], "verdict_lines": []}
    agg = control_variate(sims, aggregate(sims, params, metrics=METRICS), params)
    ok = agg.filter(pl.col("n_rep") >= 1)
    own = [p for p in params if p not in zql.PATH_COORDS]  # the heavy-traffic rows' coordinates
    arm = arm_columns(ok, own, x) if ok.height else [p for p in own if p != x]
    arm = [p for p in arm if p != x]
    heavy = frame.filter(pl.col("engine") == zql.HEAVY_ENGINE)
    top = (((context or {}).get("limit_path") or {}).get("heavy_traffic") or {}).get("n_servers_max")
    limits = frame.filter(pl.col("engine").is_in(list(LIMIT_ENGINES)) & (pl.col("engine") != zql.HEAVY_ENGINE))
    lim_agg = aggregate(limits, params, metrics=METRICS) if limits.height else None
    # a limit row meets an arm on every arm parameter but the run length (time, events), which
    # the limit takes none of: constant along an arm it is an arm parameter, null in limit rows.
    # Other parameters must match, null included (a buffered arm has no unbuffered limit)
    lim_arm = [p for p in arm if not (p in RUN_LENGTH and lim_agg is not None and p in lim_agg.columns
                                      and lim_agg[p].null_count() == lim_agg.height)]
    verdicts = []
    arms: dict[tuple, pl.DataFrame] = {}
    paths: dict[tuple, pl.DataFrame] = {}
    heavies: dict[tuple, pl.DataFrame] = {}
    for row in ok.select(["policy", "engine", *arm]).unique().sort(["policy", "engine", *arm], nulls_last=True).to_dicts():
        cond = (pl.col("policy") == row["policy"]) & (pl.col("engine") == row["engine"])
        lcond = pl.col("policy") == row["policy"]
        for p in arm:
            same = pl.col(p).is_null() if row[p] is None else pl.col(p) == row[p]
            cond = cond & same
            if p in lim_arm:
                lcond = lcond & same
        hcond = pl.col("policy") == row["policy"]
        for p in lim_arm:
            if p in heavy.columns and p not in RUN_LENGTH:
                hcond = hcond & (pl.col(p).is_null() if row[p] is None else pl.col(p) == row[p])
        pts = ok.filter(cond).sort(x)
        key = _arm_key(row, arm)
        arms[key] = pts
        v = {**row, "label": _label(row, arm), **verdict(pts, x, seed=_arm_seed(sims.filter(cond)))}
        v["rule_text"] = zql.rule_text(row.get("variant"), context)
        v.update(_drops(pts, x))
        v["n_max"] = pts[x].max() if pts.height else None
        path = None if lim_agg is None else lim_agg.filter(lcond & pl.col("queueing_ratio").is_not_null()).sort(x)
        if path is not None and path.height:
            v["path_engine"] = path["engine"][0]
            path = path.filter(pl.col("engine") == v["path_engine"])
            paths[key] = path
            v.update(path_verdict(path, x))
            v.update(_gaps(pts, path, x))
            v["rule_class"] = rule_class(path, x)
        else:
            v["rule_class"] = rule_class(pts, x)
        hrows = heavy.filter(hcond) if heavy.height else heavy
        if hrows.height:
            heavies[key] = hrows.sort("log10_n")
            v.update(zql.heavy_path_verdict(hrows, paths.get(key), top, x))
            if v.get("heavy_verdict") is not None:  # the limit's verdict comes from the form
                v.update(path_engine=f"{v.get('path_engine', 'meanfield')} + {zql.HEAVY_ENGINE}",
                         path_verdict=v["heavy_verdict"], path_note=v["heavy_note"],
                         path_n_max=10.0 ** v["heavy_log10_max"], path_ratio_at_max=v["heavy_ratio_at_max"],
                         path_level=None, path_level_exponent=None, path_top_slope=v.get("path_top_slope"))
        verdicts.append(v)

    rules = _rule_labels(arms, arm, verdicts)
    plots = _plots(arms, arm, outdir, x, paths, rules)
    if heavies:
        plots.append(zql.plot_limit_path(arms, paths, heavies, verdicts, rules, outdir, x))
    summary = outdir / "summary.parquet"
    agg.write_parquet(summary)
    vpath = outdir / "verdicts.json"
    vpath.write_text(json.dumps(verdicts, indent=1, default=str) + "\n")
    report = _report(outdir, sweep_name, arms, arm, verdicts, plots, x, paths, heavies)
    # (key, value, step, arm): MLflow puts each on the child runs of its arm (pipeline.mlflow_log)
    metrics = []
    for key, pts in arms.items():
        route = {c: pts[c][0] for c in ("policy", "engine") if c in pts.columns}
        route.update({c: k for c, k in zip(arm, key[2:]) if k is not None})
        for r in pts.iter_rows(named=True):
            if r["queueing_ratio"] is not None:
                metrics.append(("queueing_ratio", r["queueing_ratio"], int(r[x]), route))
    for key, pts in paths.items():  # the limit along the path, on its own child runs
        route = {"policy": pts["policy"][0], "engine": pts["engine"][0]}
        route.update({c: k for c, k in zip(arm, key[2:]) if k is not None and c in lim_arm})
        for r in pts.iter_rows(named=True):
            metrics.append(("queueing_ratio", r["queueing_ratio"], int(r[x]), route))
    for v in verdicts:
        route = {c: v[c] for c in ("policy", "engine", *arm) if v.get(c) is not None}
        if v["slope"] is not None:
            metrics.append(("queueing_ratio_slope", v["slope"], 0, route))
        if v["verdict"] == CONVERGES:
            metrics.append(("queueing_ratio_level", v["level"], 0, route))
    return {"report": report, "plots": plots, "metrics": metrics, "verdicts": verdicts,
            "summary": summary, "verdicts_json": vpath, "arm_params": arm,
            "verdict_lines": answer_lines(verdicts)}


def answer_lines(verdicts: list[dict]) -> list[str]:
    """The console's answer: per policy a heading, then one line per arm (the rule for d as a
    formula, what the simulations say, what the limit along the path says)."""
    out = []
    for policy in dict.fromkeys(v["policy"] for v in verdicts):
        # the unbuffered rules first (the arms come sorted by their parameters)
        group = sorted((v for v in verdicts if v["policy"] == policy), key=lambda v: v.get("b") is not None)
        out.append(f"{style.policy_name(policy)}, one line per rule for d:")
        out += ["  " + zql.answer_line(v, _sim_text(v)) for v in group]
    return out


def _rule_labels(arms: dict, arm: list[str], verdicts: list[dict]) -> dict:
    """Per arm key: ``(legend label, colour index)``. The label names the rule for d as the
    sweep wrote it (``c1: d = ceil(1 / ((1 - lam) * log(k)))``, a buffer added), else the arm's
    parameters; the colour belongs to the rule (the arm without policy and engine), the same in
    every figure."""
    rule_keys = list(dict.fromkeys(k[2:] for k in arms))
    out = {}
    for key, v in zip(arms, verdicts):
        text = v.get("rule_text")
        label = _key_label(key, arm, skip=2, drop=frozenset(p for p in arm if p not in ("variant", "b")))
        if text:
            buffer = [f"b = {v['b']}"] if v.get("b") is not None else []
            name = v.get("variant")
            label = ", ".join(([f"{name}: {text}"] if name else [text]) + buffer)
        out[key] = (label or "all", rule_keys.index(key[2:]))
    return out


def _drops(pts: pl.DataFrame, x: str) -> dict:
    """The drop probability at the smallest and largest N of an arm with a finite buffer (its
    admitted jobs may all start at once, so its ratio alone says nothing of the jobs lost)."""
    if "drop_prob" not in pts.columns or not (pts["drop_prob"].fill_null(0.0) > 0).any():
        return {}
    first, last = pts.row(0, named=True), pts.row(pts.height - 1, named=True)
    return {"drop_at_min_n": first["drop_prob"], "drop_at_max_n": last["drop_prob"],
            "drop_lo_at_max_n": last.get("drop_prob_lo"), "drop_hi_at_max_n": last.get("drop_prob_hi")}


def _drop_text(v: dict) -> str:
    if v.get("drop_at_max_n") is None:
        return ""
    lo, hi = v.get("drop_lo_at_max_n"), v.get("drop_hi_at_max_n")
    ci = "" if lo is None or hi is None else f" [{lo:.3g}, {hi:.3g}]"
    return f"; jobs dropped: {v['drop_at_min_n']:.3g} at the smallest N, {v['drop_at_max_n']:.3g}{ci} at the largest"


#: a fragile verdict names at most this many points in a line (the report's table names all)
FRAGILE_NAMED = 3


def _fragile_text(points: list) -> str:
    """``fragile without N = 10^3.5, 10^7``; past :data:`FRAGILE_NAMED` points, their count."""
    if len(points) > FRAGILE_NAMED:
        return f"fragile: leaving out any one of {len(points)} of its points moves it (named in the report)"
    return "fragile without N = " + ", ".join(_sci(n) for n in points)


def _sim_text(v: dict) -> str:
    """The simulations' verdict of one arm with its evidence: the level and its 95% CI for a
    floor (and the rivals with their p-values), the rivals that fit alike for undecided, else the
    slope and its 95% CI (and the class of rivals rejected)."""
    formula = {rv.name: rv.formula for rv in asymptotics.RIVALS}
    rivals = ""
    if v.get("best_zero") is not None:
        rivals = (f"{formula[v['best_level']]} vs {formula[v['best_zero']]}: "
                  f"p(zero) = {v['p_zero']:.2g}, p(level) = {v['p_level']:.2g}")
    if v.get("verdict") == CONVERGES and v.get("level") is not None:
        hi = "-" if v.get("level_hi") is None else f"{v['level_hi']:.3g}"
        extra = f" (level {v['level']:.3g} [{v['level_lo']:.3g}, {hi}]; {rivals})"
    elif v.get("verdict") == UNDECIDED and rivals:
        why = (_fragile_text(v["fragile"])
               if v.get("unfragile_verdict") else "fit alike")
        extra = f" ({why}; {rivals})"
    elif v.get("slope") is not None:
        test = ""
        if v.get("p_zero") is not None and v.get("verdict") == VANISHING:
            test = f"; every floor rejected, p = {v['p_level']:.2g} ({formula[v['best_level']]})"
        elif v.get("p_zero") is not None and v.get("verdict") == NOT_VANISHING:
            test = f"; every decay to zero rejected, p = {v['p_zero']:.2g} ({formula[v['best_zero']]})"
        extra = f" (slope {v['slope']:.2f} [{v['slope_lo']:.2f}, {v['slope_hi']:.2f}]{test})"
    else:
        extra = ""
    if v.get("fragile") and v.get("verdict") != UNDECIDED:
        extra += f" [{_fragile_text(v['fragile'])}]"
    return f"{v['verdict']}{extra}"


def _key_label(key: tuple, arm: list[str], skip: int, drop: frozenset = frozenset()) -> str:
    """``c1, \u03b1 = 0.3, c = 1`` for an arm key, without its first ``skip`` parts and without
    the names in ``drop`` (those that are the same in every arm: the panel's title has them)."""
    names = ["policy", "engine", *arm]
    parts = []
    for n, v in list(zip(names, key))[skip:]:
        if v is None or n in drop:
            continue
        if n == "engine":
            parts.append(style.engine_name(v))
        elif n in ("policy", "variant"):
            parts.append(str(v))
        else:
            parts.append(f"{style.symbol(n)} = {v:g}" if isinstance(v, float) else f"{style.symbol(n)} = {v}")
    return ", ".join(parts)


def _constant(keys: list[tuple], arm: list[str]) -> frozenset:
    """The names (engine and arm parameters) whose value is the same in every arm key."""
    names = ["policy", "engine", *arm]
    return frozenset(n for i, n in enumerate(names) if i > 0 and len({k[i] for k in keys}) == 1)


def _fixed_text(key: tuple, arm: list[str], same: frozenset) -> str:
    """`` [occupancy simulation, \u03b1 = 0.3]``: the names in ``same`` (for a title)."""
    names = ["policy", "engine", *arm]
    text = _key_label(key, arm, skip=1, drop=frozenset(names) - same)
    return f" [{text}]" if text else ""


#: what power-of-d per task's mean field is, for the figure that shows it far below the simulations
PER_TASK_NOTE = ("mean field of power-of-d per task: a job's tasks independent, each waits only if all\n"
                 "of its k d samples are busy (about lam^(k d): 3e-6 at N = 100 for c1, 1e-74 at 10^15)")


def _plots(arms: dict, arm: list[str], outdir: Path, x: str, limit_paths: dict | None = None,
           rules: dict | None = None) -> list[Path]:
    limit_paths = limit_paths or {}
    rules = rules or {k: (_key_label(k, arm, skip=1) or "all", i) for i, k in enumerate(arms)}
    paths = []
    # 1. ratio vs N per arm (log-log), one figure per policy; at most style.MAX_SERIES arms a panel
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels = [keys[i:i + style.MAX_SERIES] for i in range(0, len(keys), style.MAX_SERIES)]
        fig = Figure(figsize=(9.5, 4.6 * len(panels)), layout="constrained")
        FigureCanvasAgg(fig)
        for r, group in enumerate(panels):
            ax = fig.add_subplot(len(panels), 1, r + 1)
            hidden, reach0 = 0, False
            xs_all = []
            for i, key in enumerate(group):
                pts = arms[key]
                label, ci = rules[key]
                n_zero = pts.filter(pl.col("queueing_ratio") <= PLOT_RATIO_MIN).height
                pts = pts.filter(pl.col("queueing_ratio") > PLOT_RATIO_MIN)
                if pts.height == 0:  # a loss system's admitted jobs never wait: say so, not drop it
                    if n_zero:
                        ax.plot([], [], marker=style.marker(ci), ls="none", color=style.color(ci),
                                label=f"{label}:\n  ratio 0 at every N (off the log axis; drops in the report)")
                    continue
                hidden += n_zero
                xs = pts[x].to_numpy().astype(float)
                xd = style.dodge(xs, i, len(group)) if len(group) > 1 else xs
                y = pts["queueing_ratio"].to_numpy()
                lo = np.maximum(y - pts["queueing_ratio_lo"].fill_null(0).to_numpy(), 0)
                hi = np.maximum(pts["queueing_ratio_hi"].fill_null(0).to_numpy() - y, 0)
                zero = lo >= y  # the 95% interval reaches 0: an arrow, not a clipped bar
                c = style.color(ci)
                ax.errorbar(xd, y, yerr=[np.where(zero, 0.0, lo), hi], marker=style.marker(ci), ms=5,
                            capsize=3, color=c, label=label)
                if zero.any():
                    reach0 = True
                    style.mark_ci_to_zero(ax, xd[zero], y[zero], c)
                xs_all.extend(xs.tolist())
                lp = limit_paths.get(key)
                if lp is not None:
                    lp = lp.filter(pl.col("queueing_ratio") > PLOT_RATIO_MIN)
                    ax.plot(lp[x].to_numpy(), lp["queueing_ratio"].to_numpy(), ls="--", lw=1.3, color=c)
                    xs_all.extend(lp[x].to_list())
            if any(limit_paths.get(k) is not None for k in group):
                ax.plot([], [], ls="--", color="0.3", label="mean field along the same path (dashed)")
                if policy == "pod_per_task":
                    ax.plot([], [], " ", label=PER_TASK_NOTE)
            if reach0:
                ax.add_line(style.ci_zero_handle())
            if hidden:
                ax.plot([], [], " ", label=f"{hidden} point(s) with ratio <= {PLOT_RATIO_MIN:g} not shown (log axis)")
            if len(group) > 1:
                ax.plot([], [], " ", label="series offset slightly in N to stay visible")
            style.log_axis(ax, "x", xs_all or None)
            ys = np.concatenate([arms[k]["queueing_ratio"].drop_nulls().to_numpy() for k in group]
                                + [limit_paths[k]["queueing_ratio"].drop_nulls().to_numpy() for k in group if k in limit_paths]
                                or [np.array([])])
            style.log_axis(ax, "y", ys[ys > PLOT_RATIO_MIN] if ys.size else None)
            ax.set_xlabel(style.label(x))
            ax.set_ylabel(style.label("queueing_ratio"))
            ax.set_title(f"{style.policy_name(policy)}: queueing ratio vs N (simulations: 95% CI)\n"
                         + _fixed_text(group[0], arm, same).strip(), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            style.legend_outside(ax)
        p = outdir / f"ratio_vs_n_{policy}.png"
        fig.savefig(p, dpi=110)
        paths.append(p)
    # 1b. the gap simulation - limit at the simulated N, one panel per policy
    gap_policies = sorted({k[0] for k in arms if k in limit_paths})
    if gap_policies:
        fig = Figure(figsize=(9.5, 3.8 * len(gap_policies)), layout="constrained")
        FigureCanvasAgg(fig)
        for r, policy in enumerate(gap_policies):
            ax = fig.add_subplot(len(gap_policies), 1, r + 1)
            keys = [k for k in arms if k[0] == policy and k in limit_paths][:style.MAX_SERIES]
            same = _constant(keys, arm)
            xs_all = []
            for i, key in enumerate(keys):
                g = _gaps(arms[key], limit_paths[key], x)["gaps"]
                if not g:
                    continue
                label, ci = rules[key]
                xs = np.array([p["n"] for p in g], dtype=float)
                xd = style.dodge(xs, i, len(keys)) if len(keys) > 1 else xs
                y = np.array([p["gap"] for p in g])
                lo = np.array([p["gap"] - p["lo"] if p["lo"] is not None else 0.0 for p in g])
                hi = np.array([p["hi"] - p["gap"] if p["hi"] is not None else 0.0 for p in g])
                ax.errorbar(xd, y, yerr=[lo, hi], marker=style.marker(ci), ms=4, capsize=3, color=style.color(ci),
                            label=label)
                xs_all.extend(xs.tolist())
            ax.axhline(0.0, color="0.4", lw=0.8)
            style.log_axis(ax, "x", xs_all or None)
            ax.set_xlabel(style.label(x))
            ax.set_ylabel("simulated - mean-field ratio")
            ax.set_title(f"{style.policy_name(policy)}: gap of the queueing ratio to the mean field (95% CI)\n"
                         + (_fixed_text(keys[0], arm, same).strip() if keys else ""), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            style.legend_outside(ax)
        p = outdir / "gap_vs_n.png"
        fig.savefig(p, dpi=110)
        paths.append(p)
    # 2. d vs N per arm
    fig = Figure(figsize=(9.0, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    seen: list[str] = []
    ds, ns = [], []
    same = _constant(list(arms), arm)
    for key, pts in arms.items():
        pts = limit_paths.get(key, pts)  # the whole path where there is one
        lab, ci = rules[key]
        if lab in seen or "d" not in pts.columns or len(seen) >= style.MAX_SERIES:
            continue
        seen.append(lab)
        ax.plot(pts[x].to_numpy(), pts["d"].to_numpy(), marker=style.marker(ci), color=style.color(ci), label=lab)
        ds.extend(pts["d"].drop_nulls().to_list())
        ns.extend(pts[x].to_list())
    style.log_axis(ax, "x", ns or None)
    style.log_axis(ax, "y", ds or None)
    if ds and style.is_integer_valued(ds) and max(ds) / max(min(ds), 1) < 100:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}" if v >= 1 else ""))
    ax.set_xlabel(style.label(x))
    ax.set_ylabel(style.label("d"))
    ax.set_title("probe overhead d vs N per rule (the same for every policy)"
                 + (_fixed_text(next(iter(arms)), arm, same - {"engine"}) if arms else ""), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    style.legend_outside(ax)
    p = outdir / "d_vs_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    # 3. tails at the largest N per arm: one panel per policy and group of MAX_SERIES arms
    panels = []
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels += [(policy, keys[i:i + style.MAX_SERIES], same) for i in range(0, len(keys), style.MAX_SERIES)]
    fig = Figure(figsize=(9.5, 4.2 * len(panels)), layout="constrained")
    FigureCanvasAgg(fig)
    for r, (policy, keys, same) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, r + 1)
        cut = 0
        for i, key in enumerate(keys):
            last = arms[key].row(-1, named=True)
            tail = np.asarray(last.get("tail") or [], dtype=float)
            keep = tail > 1e-12
            if keep.any():
                lv = np.arange(1, tail.size + 1)
                lab, ci = rules[key]
                lab += f" (N = {_sci(last[x])})"
                ax.plot(lv[keep], tail[keep], marker=style.marker(ci), ms=3, color=style.color(ci), label=lab)
                if style.tail_is_cut(tail, 1e-12):
                    cut = max(cut, tail.size)
        if cut:
            style.mark_max_level(ax, cut)
        style.log_axis(ax, "y", [1e-12, 1.0])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail"))
        ax.set_title(f"{style.policy_name(policy)}: tail at the largest N" + _fixed_text(keys[0], arm, same),
                     fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        style.legend_outside(ax)
    p = outdir / "tail_at_max_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    return paths


def _report(outdir, sweep_name, arms, arm, verdicts, plots, x, limit_paths=None, heavies=None) -> Path:
    limit_paths = limit_paths or {}
    heavies = heavies or {}
    lines = [f"# Sweep `{sweep_name}`: zero queueing delay for parallel jobs", "",
             "## The answer, one line per rule for d", "",
             "Each line: the rule as the sweep wrote it (a cap d <= N/k left out), the simulations' calibrated "
             "verdict and their ratio at the largest N, and the mean field along the same path: its values, "
             "and the verdict of the limit (below: how each is judged).", ""]
    for line in answer_lines(verdicts):
        lines.append(f"- {line.strip()}" if line.startswith("  ") else f"\n**{line}**\n")
    lines += ["", "## How the verdicts are judged", "",
             "Queueing ratio = (E[T] - H_k) / H_k. Verdict rule: `analysis/asymptotics.py` via "
             "`analysis/models/zero_queueing.py` (docs/analysis.md). Rivals are fitted by weighted least "
             "squares on the ratio (weights 1/se^2) to the same points: to zero (a N^b, a/(ln N)^p, "
             "a ln ln N / ln N, a ln ln k / ln k with k = ceil(ln^2 N)) and to a level (c0 + a N^b, "
             "c0 + a/(ln N)^p with a floor carrying at least half the last fitted value; a N^b with b >= 0). "
             "D = (chi2 of the best to zero - chi2 of the best with a level) / residual scale, calibrated by "
             "a parametric bootstrap from each best rival at the arm's N and SEs (seeded by the arm's task "
             f"seeds): p(zero) = P(D* >= D) from the rival to zero, p(level) = P(D* <= D) from the rival with "
             f"a level; a class is rejected below p = {asymptotics.ALPHA:g}. *vanishing*: only the level "
             f"rejected; *{CONVERGES}*: only zero rejected and the floor decays to its level (else *not "
             "vanishing*: flat or growing); *undecided*: neither rejected (the rivals fit alike), or one "
             "point left out moves the verdict across (fragile). Shortcut: *vanishing* if the ratio's 95% CI "
             f"is below {RATIO_ZERO:g} at every point of the upper half. *level*: c0 of the best floor with "
             "its 95% profile interval over every floor rival. *slope*: b of r = a N^b on all points; *upper "
             "half*: on the last half of the points (descriptions, not the rule).", "",
             "The limit along the path: where the sweep carries it past the exact mean field with the "
             "heavy-traffic engine (docs/analysis.md, 'Batch-filling in heavy traffic') to the path's end, jobs "
             "end on layers 0-1 at every point (the engine refuses a point where reaching layer 2 has a bound "
             "above 1e-12), so the ratio is at most that of k tasks all at position 2, (E[max of k Gamma(2,1)] "
             "- H_k) / H_k, which falls like ln ln k / ln k to 0: the limit is *vanishing*, at that rate. "
             "Elsewhere the exact path's own rule (its last decade's slope and a three-point extrapolation).", "",
             "## Verdicts", "",
             "| arm | points | ratio at largest N [95% CI] | slope [95% CI] | upper half: from N, slope [95% CI] "
             "| floor c0 [95% CI] | rivals: with a level vs to zero | p(zero), p(level) | verdict | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        slope = "-" if v["slope"] is None else f"{v['slope']:.3f} [{v['slope_lo']:.3f}, {v['slope_hi']:.3f}]"
        tail = "-" if v.get("tail_slope") is None else (
            f"{v['tail_min_n']:g}: {v['tail_slope']:.3f} [{v['tail_slope_lo']:.3f}, {v['tail_slope_hi']:.3f}]")
        level = "-" if v.get("level") is None else (
            f"{_num(v['level'])} [{_num(v['level_lo'])}, {_num(v['level_hi'])}]")
        formula = {rv.name: rv.formula for rv in asymptotics.RIVALS}
        rivals = "-" if v.get("best_zero") is None else f"{formula[v['best_level']]} vs {formula[v['best_zero']]}"
        ps = "-" if v.get("p_zero") is None else f"{v['p_zero']:.2g}, {v['p_level']:.2g}"
        ratio = (f"{zql.fmt_ratio(v['ratio_at_max_n'])} [{_num(v.get('ratio_lo_at_max_n'))}, "
                 f"{_num(v['ratio_hi_at_max_n'])}]")
        lines.append(f"| {v['label']} | {v['n_points']} | {ratio} | {slope} | {tail} | {level} | {rivals} | {ps} "
                     f"| **{v['verdict']}** | {v['note']}{_drop_text(v)} |")
    if any(v.get("path_verdict") is not None for v in verdicts):
        lines += ["", "## The answer per rule", "",
                  "What the simulations and the limit along the same path say (the rule for the path's "
                  "verdict is in docs/analysis.md: the log-log slope over its last decade, and where the fall "
                  "or rise slows geometrically, the level c0 of r = c0 + a N^b through the points at N_max/100, "
                  "N_max/10 and N_max). The gap is simulated minus limit at the N where both exist.", "",
                  "| arm | simulations: verdict | limit: ratio at largest N | limit: slope, last decade "
                  "| limit: level | limit: verdict | gap at largest simulated N [95% CI] | gap as N grows | rule for d |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for v in verdicts:
            if v.get("path_verdict") is None:
                continue
            g = (v.get("gaps") or [None])[-1]
            gap = "-" if g is None else f"{_num(g['gap'], 3)} [{_num(g['lo'], 3)}, {_num(g['hi'], 3)}] at {_sci(g['n'])}"
            trend = "-" if v.get("gap_verdict") is None else f"{v['gap_verdict']}: {v.get('gap_note') or ''}"
            lines.append(
                f"| {v['label']} | {v['verdict']} | {_num(v['path_ratio_at_max'])} at "
                f"{'-' if v.get('path_n_max') is None else _sci(v['path_n_max'])} "
                f"| {_num(v['path_top_slope'], 3)} | {_num(v['path_level'])} | **{v['path_verdict']}** ({v['path_note']}) "
                f"| {gap} | {trend} | {v['rule_class']}: {RULE_COVERAGE.get(v['rule_class'], '')} |")
    lines += ["", "## The theorem's hypotheses per point", "",
              "Weng & Wang, Theorems 1-2 (zero queueing under batch-filling): alpha < 1/2, beta <= 1, "
              "k = o(N^(1/2-alpha) / log^2 N) [column *k log^2 N / N^(1/2-alpha)*, must tend to 0], "
              "k / log k = Omega(log N) [*k / (log k log N)*, bounded below], d = omega(1/((1-lam) log k)) "
              "[*d (1-lam) log k*, must grow], buffer b = min(N^alpha, N^(1/2-alpha) / k) with dropped jobs "
              "[*theorem's b*; below 1 the theorem's system cannot hold a task]. Theorems 3-4 (no zero "
              "queueing): k = e^o(sqrt(log N)) [*log k / sqrt(log N)*, tends to 0] and d = e^o(log N / log k) "
              "[*log d log k / log N*, tends to 0]. Rows: the simulated N, and the limit path beyond.", ""]
    for v, (key, pts) in zip(verdicts, arms.items()):
        rows = limit_paths.get(key, pts)
        hs = [(r, hypotheses(r)) for r in rows.iter_rows(named=True)]
        if not any(h is not None for _, h in hs):
            continue
        lines += [f"### {v['label']} (rule for d: {v['rule_class']})", "",
                  "| N | k | d | alpha < 1/2 | beta <= 1 | k log^2 N / N^(1/2-alpha) | k / (log k log N) "
                  "| d (1-lam) log k | theorem's b | log k / sqrt(log N) | log d log k / log N |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, h in hs:
            if h is None:
                continue
            yn = {True: "yes", False: "no", None: "-"}
            lines.append(f"| {_sci(r[x])} | {r['k']} | {r['d']} | {yn[h['alpha_ok']]} | {yn[h['beta_ok']]} "
                         f"| {_num(h['k_upper'], 3)} | {_num(h['k_lower'], 3)} | {_num(h['rule'], 3)} "
                         f"| {_num(h['buffer'], 3)} | {_num(h['lb_k'], 3)} | {_num(h['lb_d'], 3)} |")
        lines.append("")
    lines += ["", "## Points", "",
              f"Simulated ratios with {CV_MIN_REP} or more replications and no dropped job are control-variate "
              "estimates: each replication's ratio regressed on its busy fraction s_1, whose mean is lam, and "
              "read at s_1 = lam (interval: t with R - 2 dof; docs/analysis.md). The plain mean of the "
              "replications and the correlation are given beside it.", ""]
    for key, pts in arms.items():
        lines += [f"### {', '.join(str(k) for k in key if k is not None)}", "",
                  "| N | k | d | lam | R | queueing ratio +- CI | plain mean +- CI | corr(ratio, s_1) | E[T] "
                  "| drop prob | frac within h |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in pts.iter_rows(named=True):
            cv = r.get("ci_method") == CV_METHOD
            plain = f"{_num(r.get('queueing_ratio_raw'))} +- {_num(r.get('queueing_ratio_raw_hw'), 2)}" if cv else "same"
            lines.append(
                f"| {r[x]} | {r.get('k', '-')} | {r.get('d', '-')} | {_num(r.get('lam'), 6)} | {r['n_rep']} "
                f"| {zql.fmt_ratio(r['queueing_ratio'])} +- {_num(r['queueing_ratio_hw'], 2)} | {plain} "
                f"| {_num(r.get('cv_corr'), 3) if cv else '-'} | {_num(r['mean_response'])} "
                f"| {_num(r['drop_prob'])} | {_num(r['frac_within_h'])} |")
        lim = limit_paths.get(key)
        if lim is not None:
            lines += ["", f"Limit ({lim['engine'][0]}) along the same path:", "",
                      "| N | k | d | lam | queueing ratio | E[T] | frac within h |", "|---|---|---|---|---|---|---|"]
            for r in lim.iter_rows(named=True):
                lines.append(f"| {_sci(r[x])} | {r.get('k', '-')} | {r.get('d', '-')} | {_num(r.get('lam'), 8)} "
                             f"| {_num(r['queueing_ratio'], 5)} | {_num(r['mean_response'], 6)} | {_num(r['frac_within_h'])} |")
        lines.append("")
    if heavies:
        lines += ["## The heavy-traffic limit along the path", "",
                  "Rows of the heavy_traffic engine (N = 10^log10_n; 1 - lam and d from the sweep's formulas in "
                  "high precision). *ratio / rate*: the ratio over ln ln k / ln k. *bound*: all k tasks at "
                  "position 2. Where it overlaps the exact mean field (N <= 10^15) the two are compared.", ""]
        for key, v in zip(arms, verdicts):
            hv = heavies.get(key)
            if hv is None:
                continue
            ov = v.get("heavy_overlap")
            ov_text = ("" if ov is None else f" Largest |heavy-traffic - exact| over {ov['n_points']} common N: "
                       f"{ov['gap_max']:.2g} (at 10^{ov['at_log10_n']:g}).")
            lines += [f"### {v['label']}", "", f"{v.get('heavy_note') or ''}.{ov_text}", "",
                      "| N | k | d | 1 - lam | d (1 - lam) | queueing ratio | ratio / rate | E[T] |",
                      "|---|---|---|---|---|---|---|---|"]
            leading_rate = zql._heavy_traffic()[1]
            for r in hv.iter_rows(named=True):
                q = r["queueing_ratio"]
                lines.append(f"| 10^{r['log10_n']:g} | {r['k']} | {r['d_real']:.6g} | {r['one_minus_lam']:.4g} "
                             f"| {r['d_real'] * r['one_minus_lam']:.4g} | {_num(q, 5)} "
                             f"| {_num(q / leading_rate(r['k']), 4)} | {_num(r['mean_response'], 6)} |")
            lines.append("")
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    path = outdir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
ANALYSES = {"zero_queueing": analyze_zero_queueing}
