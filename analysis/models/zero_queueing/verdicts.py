"""The verdicts of the zero-queueing analysis: per arm (:func:`verdict`), along the limit path
(:func:`path_verdict`), the rule's hypotheses (:func:`hypotheses`, :func:`rule_class`), and
the verdicts in words (:func:`answer_lines`). The rule is in :mod:`analysis.models.zero_queueing`.
"""
from __future__ import annotations

import math
import re

import numpy as np
import polars as pl

from analysis import asymptotics, style
from analysis.fit import gap_rate_verdict
from analysis.fmt import interval as _interval
from analysis.fmt import sci as _sci
from analysis.models import zero_queueing_limit as limit_claims
from analysis.models.zero_queueing.fit import floor_fit, power_fit

RATIO_ZERO = 1e-3
#: floor significant: p of the boundary LR test below this (= the 95% interval of c0 excludes 0)
P_FLOOR = 0.025
#: a slope above -SLOPE_FLAT counts as flat (N^-0.05: the ratio halves when N grows 10^6-fold)
SLOPE_FLAT = 0.05
VANISHING, NOT_VANISHING, UNDECIDED = asymptotics.VANISHING, asymptotics.NOT_VANISHING, asymptotics.UNDECIDED
CONVERGES = asymptotics.CONVERGES
#: too few points for the rivals (4 with an SE), or none at all
INCONCLUSIVE = "inconclusive"
VERDICTS = (VANISHING, CONVERGES, NOT_VANISHING, UNDECIDED, INCONCLUSIVE)


def _f(v) -> float | None:
    """A plain float for the JSON (None for None, NaN or infinity)."""
    return None if v is None or not math.isfinite(float(v)) else float(v)


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


def heavy_traffic_shape(k) -> np.ndarray:
    """``ln ln k / ln k``: the heavy-traffic form of the batch policies' ratio along a path whose
    k grows (docs/analysis.md, "Batch-filling in heavy traffic"); nan where it is not positive
    (k < 3). The headline path's k is ``ceil(ln^2 N)``, with its integer steps."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.log(np.log(k)) / np.log(k)
    return np.where(np.isfinite(g) & (g > 0), g, np.nan)


#: the model's rivals' names (:func:`arm_rivals`)
HEAVY_RIVAL, PATH_RIVAL, PATH_GAP_RIVAL = "a lnln k/ln k", "limit path", "limit path + gap"


def arm_rivals(points: pl.DataFrame, path: pl.DataFrame | None, v: dict, x: str = "n_servers") -> list:
    """The model's own rivals for one arm's rival test (:func:`analysis.asymptotics.asymptotic_verdict`
    fits them beside its general ones), as values at the arm's N, so with the integer steps
    of k and d that the sweep's rounding makes:

    - ``a ln ln k / ln k`` at the arm's own k (to zero), where the arm has a k column that grows;
    - ``a`` times the limit path's ratio at the same N (``path``, the mean field along the
      sweep's formulas), in the class of the path's limit claim where something carries it
      (``limit_carried_by``: vanishing -> to zero, not vanishing -> with a level); a path whose
      limit is undecided is no rival;
    - the same path plus a finite-N gap that decays like a power, ``a path(N) + g (N/N_min)^b``
      (g of either sign, b <= -0.02), in the same class: finite systems sit above or below
      their limit at small N by more than the simulations' SEs (the control variate makes
      them 0.01% of the ratio), and the path alone then misfits there while the points follow
      it at large N."""
    out = []
    pts = points.filter(pl.col("queueing_ratio").is_not_null())
    if "k" in pts.columns and pts["k"].null_count() == 0 and pts["k"].n_unique() > 1:
        out.append(asymptotics.rival_from_points(
            HEAVY_RIVAL, "zero", "a ln ln k / ln k at the arm's own k", pts[x].to_numpy(),
            heavy_traffic_shape(pts["k"].to_numpy())))
    claim = v.get("path_verdict")
    if path is not None and path.height and v.get("limit_carried_by") and claim in (VANISHING, NOT_VANISHING):
        p = path.filter(pl.col("queueing_ratio").is_not_null())
        cls = "zero" if claim == VANISHING else "level"
        out.append(asymptotics.rival_from_points(
            PATH_RIVAL, cls, f"a x the limit path ({claim}: {v['limit_carried_by']})", p[x].to_numpy(),
            p["queueing_ratio"].to_numpy()))
        out.append(asymptotics.rival_plus_gap(
            PATH_GAP_RIVAL, cls, "a x the limit path + g N^b (a finite-N gap)", p[x].to_numpy(),
            p["queueing_ratio"].to_numpy()))
    return out


def verdict(points: pl.DataFrame, x: str = "n_servers", seed=0, n_boot: int = asymptotics.N_BOOT,
            rivals=()) -> dict:
    """The verdict of one arm by the rule in the module docstring.

    ``points``: one arm's aggregated rows; uses ``x``, ``queueing_ratio``, ``queueing_ratio_se``
    and ``queueing_ratio_lo``/``_hi`` (the point's 95% interval). ``seed`` (int or list of ints:
    :func:`analyze_zero_queueing` passes the arm's task seeds) seeds the bootstrap of
    :func:`analysis.asymptotics.asymptotic_verdict`; ``rivals``: the model's own rivals for it
    (:func:`arm_rivals`). Returns plain floats, strings or None.
    """
    pts = points.filter(pl.col("queueing_ratio").is_not_null()).sort(x)
    out = {"n_points": pts.height, "slope": None, "slope_lo": None, "slope_hi": None,
           "ratio_at_max_n": None, "ratio_lo_at_max_n": None, "ratio_hi_at_max_n": None,
           "tail_min_n": None, "tail_slope": None, "tail_slope_lo": None, "tail_slope_hi": None,
           "level": None, "level_lo": None, "level_hi": None, "lr_stat": None, "p_floor": None,
           "floor_exponent": None, "p_zero": None, "p_level": None, "statistic": None, "best_zero": None,
           "best_level": None, "rivals": [], "fragile": [], "loo": [], "unfragile_verdict": None,
           "verdict": INCONCLUSIVE, "note": "", "below_resolution": False}
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
        out.update(verdict=VANISHING, below_resolution=True)
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
    av = asymptotics.asymptotic_verdict(ns, rs, ses, seed=seed, n_boot=n_boot, rivals=rivals)
    out.update(verdict=av.outcome, note=av.note, level=_f(av.level), level_lo=_f(av.level_lo),
               level_hi=_f(av.level_hi), p_zero=_f(av.p_zero), p_level=_f(av.p_level),
               statistic=_f(av.statistic), best_zero=av.best_zero, best_level=av.best_level,
               rivals=av.rivals, fragile=av.fragile, loo=av.loo, unfragile_verdict=av.unfragile_outcome)
    return out


#: the rival test on the simulated points in the words of a range (``range_test``): which class of
#: rivals the points exclude, never a limit (docs/analysis.md, "Two claims, kept apart")
RANGE_LEVELS_OUT = "every level excluded"
RANGE_ZERO_OUT_LEVEL = "every decay to zero excluded, a level fits"
RANGE_ZERO_OUT_FLAT = "every decay to zero excluded, flat or rising fits"
RANGE_ALIKE = "rivals with and without a level fit alike"
RANGE_ONE_POINT = "one point decides"
RANGE_BELOW = f"below {RATIO_ZERO:g} on the upper half"
RANGE_TESTS = (RANGE_LEVELS_OUT, RANGE_ZERO_OUT_LEVEL, RANGE_ZERO_OUT_FLAT, RANGE_ALIKE, RANGE_ONE_POINT,
               RANGE_BELOW, INCONCLUSIVE)
#: the outcomes of :func:`analysis.asymptotics.asymptotic_verdict` in those words (its notes too)
_RANGE_OF = {CONVERGES: RANGE_ZERO_OUT_LEVEL, NOT_VANISHING: RANGE_ZERO_OUT_FLAT, VANISHING: RANGE_LEVELS_OUT,
             UNDECIDED: RANGE_ALIKE}


def range_test(v: dict) -> tuple[str, str]:
    """The rival test of one arm (the ``verdict`` and ``note`` of :func:`verdict`) in the words of
    the simulated range: which class of rivals the points exclude (:data:`RANGE_TESTS`), and the
    note with every outcome put so. A test that no single point may decide and that one point
    moves is :data:`RANGE_ONE_POINT`."""
    out, note = v.get("verdict"), v.get("note") or ""
    if v.get("below_resolution"):
        return RANGE_BELOW, note
    if out == UNDECIDED and v.get("unfragile_verdict"):
        word = RANGE_ONE_POINT
    else:
        word = _RANGE_OF.get(out, out)
    # the longest outcome first: "not vanishing" holds "vanishing"
    pattern = "|".join(re.escape(o) for o in sorted(_RANGE_OF, key=len, reverse=True))
    note = re.sub(rf"(?<![\w-])({pattern})(?![\w-])", lambda m: _RANGE_OF[m.group(1)], note)
    return word, note


def range_word(outcome: str | None) -> str | None:
    """One outcome of :func:`analysis.asymptotics.asymptotic_verdict` in the words of the range
    (the leave-one-out verdicts, the verdict on all points of a fragile test); None stays None."""
    return None if outcome is None else _RANGE_OF.get(outcome, outcome)


def range_class(word: str | None) -> str | None:
    """``zero`` where the points exclude every level, ``level`` where they exclude every decay to
    zero, else None."""
    if word in (RANGE_LEVELS_OUT, RANGE_BELOW):
        return "zero"
    if word in (RANGE_ZERO_OUT_LEVEL, RANGE_ZERO_OUT_FLAT):
        return "level"
    return None


def limit_class(v: dict) -> str | None:
    """The class of an arm's carried limit claim: ``zero`` (vanishing, zero at every N),
    ``level`` (not vanishing or growing), None where nothing carries one."""
    lim = v.get("limit") or ""
    if not v.get("limit_carrier") or lim.startswith("undecided"):
        return None
    if lim in (VANISHING, "zero at every N"):
        return "zero"
    return "level" if lim in (NOT_VANISHING, CONVERGES) else None


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
    hyps = [hypotheses(r) for r in points.sort(x).iter_rows(named=True) if r[x] >= 1e4]
    m = [h["rule"] for h in hyps if h is not None]
    if len(m) < 2:
        return "-"
    return "omega" if m[-1] / m[0] > 1.25 else "Theta"



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


def answer_lines(verdicts: list[dict]) -> list[str]:
    """The console's answer: per policy a heading, then one line per arm (the rule for d as a
    formula, what the simulations say, what the limit along the path says)."""
    out = []
    for policy in dict.fromkeys(v["policy"] for v in verdicts):
        # the unbuffered rules first (the arms come sorted by their parameters)
        group = sorted((v for v in verdicts if v["policy"] == policy), key=lambda v: v.get("b") is not None)
        out.append(f"{style.policy_name(policy)}, one line per rule for d:")
        out += ["  " + limit_claims.answer_line(v, _sim_text(v)) for v in group]
    return out


#: the console's lines are at most this wide (the answer on one screen)
CONSOLE_WIDTH = 120


def _trend_short(v: dict) -> str:
    """The simulations' trend over their range for the console (claims.trend): falling or rising
    with the power-law rate, flat, or below 1e-3; a buffered arm's drops beside it."""
    t = v.get("trend")
    if t in ("falling", "rising") and v.get("slope") is not None:
        text = f"{t} N^{v['slope']:.2f}"
    elif t == "zero":
        text = f"< {RATIO_ZERO:g}"
    else:
        text = str(t or "-")
    if v.get("trend_upper") not in (None, t):
        text += f"; top {v['trend_upper']}"
    if v.get("drop_at_max_n") is not None:
        text += f"; drops {v['drop_at_max_n']:.2g}"
    return text


def _path_short(v: dict) -> str:
    """The simulations against the limit path at the largest N they share (claims.follows)."""
    if v.get("rel_gap") is None:
        return "-" if not v.get("gaps") else "limit < 1e-3"
    from analysis.models.zero_queueing.claims import _pct

    if v.get("follows"):  # its 95% interval within +-5%: the interval is in the report
        return f"on it ({_pct(v['rel_gap'])})"
    lo, hi = v.get("rel_gap_lo"), v.get("rel_gap_hi")
    band = "" if lo is None or hi is None else f" +-{_pct((hi - lo) / 2, sign=False)}"
    return f"{_pct(v['rel_gap'])}{band}"


#: the console's words for what carries a limit claim (claims.limit_claim's ``limit_carrier``)
_CARRIER_SHORT = (("the heavy-traffic form", "heavy-traffic form"), ("derived form lam^(kd)", "derived: like lam^(kd)"),
                  ("derived form ln(1/(1-lam))", "derived form"),
                  ("derived lower bound", "derived bound"), ("the mean field of a fixed system", "fixed system"),
                  ("b = 1", "b = 1"))


def _limit_short(v: dict) -> str:
    """The limit claim for the console, with what carries it in a few words."""
    claim, carrier = v.get("limit") or "-", v.get("limit_carrier") or ""
    short = next((w for prefix, w in _CARRIER_SHORT if carrier.startswith(prefix)), None)
    if claim == "not vanishing" and short and short.startswith("derived"):
        claim = "grows without bound"
    return f"{claim} ({short})" if short else claim


def console_lines(verdicts: list[dict], width: int = CONSOLE_WIDTH) -> list[str]:
    """The console's answer on one screen: a header, one line per policy and rule (the policy
    named on its first line; the rule by its variant name, as a formula in the report), each
    with the simulated queueing ratio at the largest N, its trend over the simulated range, how
    it sits against the limit path at the largest N they share, and the limit claim with what
    carries it; then the reading (:func:`limit_claims.reading`), wrapped. Lines are at most ``width``
    characters (the limit column is cut with "..." past it: the report has it whole)."""
    if not verdicts:
        return []
    n_sim = max((v["n_max"] for v in verdicts if v.get("n_max")), default=None)
    n_lo = min((v["n_min"] for v in verdicts if v.get("n_min")), default=None)
    at = _sci(n_sim) if n_sim else "-"
    rows = []
    for policy in dict.fromkeys(v["policy"] for v in verdicts):
        group = sorted((v for v in verdicts if v["policy"] == policy), key=lambda v: v.get("b") is not None)
        for i, v in enumerate(group):
            ratio = "-" if v.get("ratio_at_max_n") is None else limit_claims.fmt_ratio(v["ratio_at_max_n"])
            if v.get("n_max") and v["n_max"] != n_sim:
                ratio += f" ({_sci(v['n_max'])})"
            rows.append((policy if i == 0 else "", str(v.get("variant") or v["label"]), ratio,
                         _trend_short(v), _path_short(v), _limit_short(v)))
    span = f"{_sci(n_lo)}..{at}" if n_lo else at
    head = ("policy", "rule", f"at {at}", f"trend {span}", "vs limit path", "limit as N -> inf (carried by)")
    w = [max(len(c[j]) for c in [head, *rows]) for j in range(5)]
    lines = []
    for c in [head, *rows]:
        line = f"{c[0]:<{w[0]}}  {c[1]:<{w[1]}}  {c[2]:>{w[2]}}  {c[3]:<{w[3]}}  {c[4]:<{w[4]}}  {c[5]}".rstrip()
        lines.append(line if len(line) <= width else line[:width - 3] + "...")
    text = limit_claims.reading(verdicts)
    if text:
        import textwrap

        lines += textwrap.wrap(f"Reading: {text}", width=width, break_on_hyphens=False)
    return lines


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
    ci = "" if lo is None or hi is None else f" {_interval(lo, hi)}"
    return f"; jobs dropped: {v['drop_at_min_n']:.3g} at the smallest N, {v['drop_at_max_n']:.3g}{ci} at the largest"


#: a fragile verdict names at most this many points in a line (the report's table names all)
FRAGILE_NAMED = 3


def _fragile_text(points: list) -> str:
    """``fragile without N = 10^3.5, 10^7``; past :data:`FRAGILE_NAMED` points, their count."""
    if len(points) > FRAGILE_NAMED:
        return f"fragile: leaving out any one of {len(points)} of its points moves it (named in the report)"
    return "fragile without N = " + ", ".join(_sci(n) for n in points)


def _sim_text(v: dict) -> str:
    """The rival test on the simulated points in the words of the range (:func:`range_test`) with
    its evidence: for a level that fits, the level and its 95% CI; the best rivals of each class
    and both p; the points whose removal moves it. Where the points exclude the class of the
    arm's carried limit, the text says that the limit is carried past the range and the points
    are not (no line claims a limit the tool's own limit contradicts)."""
    formula = {x["name"]: x["formula"] for x in v.get("rivals") or []}
    word = v.get("range_test")
    rivals = ""
    if v.get("best_zero") is not None:
        rivals = (f"{formula[v['best_level']]} vs {formula[v['best_zero']]}: "
                  f"p(zero) = {v['p_zero']:.2g}, p(level) = {v['p_level']:.2g}")
    if word == RANGE_ZERO_OUT_LEVEL and v.get("level") is not None:
        extra = f" (level {v['level']:.3g} {_interval(v['level_lo'], v.get('level_hi'))}; {rivals})"
    elif word in (RANGE_ALIKE, RANGE_ONE_POINT) and rivals:
        why = _fragile_text(v["fragile"]) if word == RANGE_ONE_POINT else "fit alike"
        extra = f" ({why}; {rivals})"
    elif rivals:
        extra = f" ({rivals})"
    else:
        extra = ""
    if v.get("fragile") and word not in (RANGE_ALIKE, RANGE_ONE_POINT):
        extra += f" [{_fragile_text(v['fragile'])}]"
    rc, lc = range_class(word), limit_class(v)
    if rc is not None and lc is not None and rc != lc:
        end = _sci(v["n_max"]) if v.get("n_max") else "the largest N"
        extra += (f"; these points describe N up to {end} only, the limit below is "
                  f"{v.get('limit')}, carried past it by {v.get('limit_carrier')}")
    return f"{word}{extra}"
