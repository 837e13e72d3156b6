"""Does a sequence r(N) vanish as N -> infinity? Model selection between rival descriptions on a
finite range of N, calibrated by a parametric bootstrap at the arm's own N and SEs.

Over N = 10^2..10^7 a decay like ``1/ln N`` looks like a floor plus a power law, so no fixed
threshold on one fit can tell them apart. :func:`asymptotic_verdict` fits two classes of rivals
to the same points by weighted least squares (weights ``1/se^2``):

* **to zero** (:data:`ZERO_RIVALS`): ``a N^b`` (``b <= -0.02``), ``a / (ln N)^p``
  (``0.25 <= p <= 4``), ``a ln ln N / ln N`` and the heavy-traffic form ``a ln ln k / ln k`` with
  ``k = ceil(ln^2 N)`` (:func:`heavy_traffic_shape`; docs/analysis.md);
* **to a positive level or growing** (:data:`LEVEL_RIVALS`): ``c0 + a (N/N_min)^b``
  (``-3 <= b <= -0.01``), ``c0 + a / (ln N)^p``, and ``a N^b`` with ``0 <= b <= 2`` (flat or
  growing); ``c0, a >= 0``. A floor must be *material*: it must carry at least :data:`KAPPA` of
  the fitted value at the largest N (``c0 >= KAPPA (c0 + a g(N_max))``); otherwise a floor of 10^-9
  under a power law would be a floor.

The statistic is ``D = (RSS_zero - RSS_level) / s2``, the best rival of each class, with the
residual scale ``s2 = max(1, min RSS / (n - 3))``. It is calibrated twice by simulation: from the
best rival to zero (``p_zero = P(D* >= D)``) and from the best rival with a level
(``p_level = P(D* <= D)``), :data:`N_BOOT` draws each at the arm's N and SEs (times
``sqrt(s2)``), the same standard normal draws for both (common random numbers), seeded by the
caller. A class whose p is below :data:`ALPHA` is rejected:

* only the level class rejected: **vanishing**;
* only the zero class rejected: **converges to a positive level** when the best floor rival
  decays to its level significantly better than a constant (F(2, n - 3) at 95%), else **not
  vanishing** (flat or growing);
* neither: **undecided** (a floor and a decay to zero fit alike here);
* both: the class with the larger p, if it is at least :data:`ALPHA` / 5; else undecided.

No single point decides. The verdict is recomputed with each point left out (the rivals
refitted, the bootstrap on the first :data:`N_BOOT_LOO` of the same draws); ``fragile`` lists
the points whose removal changes it. If a removal moves it across (vanishing on one side,
converges / not vanishing on the other), the verdict is **undecided** and the note names the
point; if a *converges* loses its decay without some point (but keeps a level), it becomes *not
vanishing*; if a removal only leaves it undecided, the verdict stands and is marked fragile.

The level is reported with a 95% profile interval over every floor rival:
``{c0 >= 0: (RSS_profile(c0) - RSS_floor) / s2 <= F_0.95(1, n - 3)}`` (RSS_profile minimises
over a >= 0 and the exponent at fixed c0), when the verdict converges or the best rival with a
level is a floor.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

VANISHING, NOT_VANISHING, UNDECIDED = "vanishing", "not vanishing", "undecided"
CONVERGES = "converges to a positive level"
OUTCOMES = (VANISHING, CONVERGES, NOT_VANISHING, UNDECIDED)

#: size of each test (per class)
ALPHA = 0.025
#: a floor must carry at least this fraction of the fitted value at the largest N
KAPPA = 0.5
#: bootstrap draws per null class
N_BOOT = 199
#: the first draws of the same, for each leave-one-out verdict
N_BOOT_LOO = 99
#: fewest points for a verdict; leave-one-out needs one more
MIN_POINTS = 4
LEVEL = 0.95

_B_ZERO = -np.geomspace(3.0, 0.02, 60)
_P_LOG = np.geomspace(0.25, 4.0, 40)
_B_FLOOR = -np.geomspace(3.0, 0.01, 60)
_B_GROW = np.linspace(0.0, 2.0, 41)


def heavy_traffic_shape(n) -> np.ndarray:
    """``ln ln k / ln k`` with ``k = ceil(ln^2 N)``: the heavy-traffic form of the ratio along
    the batch-filling path (issue 35, item 2); nan where it is not positive (N < 8)."""
    n = np.asarray(n, dtype=float)
    k = np.ceil(np.log(n) ** 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.log(np.log(k)) / np.log(k)
    return np.where(np.isfinite(g) & (g > 0), g, np.nan)


def _lnln_over_ln(n):
    ln = np.log(np.asarray(n, dtype=float))
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.log(ln) / ln
    return np.where(np.isfinite(g) & (g > 0), g, np.nan)


@dataclass(frozen=True)
class Rival:
    """A family of descriptions: ``coef * shape(theta)`` (kind ``scale``) or ``c0 + a shape(theta)``
    (kind ``floor``), theta on a grid (one value for a fixed shape)."""
    name: str
    cls: str  # "zero" or "level"
    kind: str  # "scale" or "floor"
    theta_name: str | None
    grid: np.ndarray
    formula: str

    def shape_at(self, n: np.ndarray, theta) -> np.ndarray:
        """Shapes at ``theta`` (any array shape; ... x len(n)), normalised to 1 at the smallest N."""
        theta = np.asarray(theta, dtype=float)[..., None]
        if self.name in ("power to zero", "flat or growing", "floor + power"):
            return (n / n.min()) ** theta
        if self.name in ("a/(ln N)^p", "floor + a/(ln N)^p"):
            ln = np.log(n)
            return (ln / ln.min()) ** -theta
        g = _lnln_over_ln(n) if self.name == "a lnln N/ln N" else heavy_traffic_shape(n)
        return np.broadcast_to(g / g[np.argmin(n)], theta.shape[:-1] + n.shape)

    def shapes(self, n: np.ndarray) -> np.ndarray:
        """(K, n) shapes on the grid."""
        return self.shape_at(n, self.grid)


ZERO_RIVALS = (
    Rival("power to zero", "zero", "scale", "b", _B_ZERO, "a N^b"),
    Rival("a/(ln N)^p", "zero", "scale", "p", _P_LOG, "a/(ln N)^p"),
    Rival("a lnln N/ln N", "zero", "scale", None, np.array([np.nan]), "a ln ln N / ln N"),
    Rival("a lnln k/ln k", "zero", "scale", None, np.array([np.nan]),
          "a ln ln k / ln k, k = ceil(ln^2 N)"),
)
LEVEL_RIVALS = (
    Rival("floor + power", "level", "floor", "b", _B_FLOOR, "c0 + a N^b"),
    Rival("floor + a/(ln N)^p", "level", "floor", "p", _P_LOG, "c0 + a/(ln N)^p"),
    Rival("flat or growing", "level", "scale", "b", _B_GROW, "a N^b, b >= 0"),
)
RIVALS = ZERO_RIVALS + LEVEL_RIVALS


def _solve(kind: str, material: bool, S: np.ndarray, Y: np.ndarray, w: np.ndarray):
    """Weighted least squares of each row of ``Y`` (B, n) on each shape of ``S`` ((K, n), or
    (B, K, n) for shapes that differ by row): ``a g`` (kind ``scale``) or ``c0 + a g`` (kind
    ``floor``) with ``c0, a >= 0`` and, for a material floor, ``a g(N_max) <= rho c0``. The
    constrained optimum is the best feasible one among the unconstrained solution and the
    optima on the edges of the cone (closed forms). Returns (rss, c0, a), each (B, K)."""
    Yw = Y * w
    syy = np.einsum("bn,bn->b", Yw, Y)[:, None]
    if S.ndim == 2:
        syg = Yw @ S.T
        sgg = (S * S * w).sum(-1)[None, :]
        s1g = (S * w).sum(-1)[None, :]
        gmax = S[None, :, -1]
    else:
        syg = np.einsum("bn,bkn->bk", Yw, S)
        sgg = (S * S * w).sum(-1)
        s1g = (S * w).sum(-1)
        gmax = S[:, :, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "scale":
            a = np.maximum(0.0, syg / sgg)
            return syy - 2 * a * syg + a * a * sgg, np.zeros_like(a), a
        sy1 = Yw.sum(1)[:, None]
        s11 = w.sum()

        def rss_of(c, a):
            return syy - 2 * (c * sy1 + a * syg) + c * c * s11 + 2 * c * a * s1g + a * a * sgg

        det = s11 * sgg - s1g ** 2
        cu = (sgg * sy1 - s1g * syg) / det
        au = (s11 * syg - s1g * sy1) / det
        rho = (1.0 - KAPPA) / KAPPA
        feas = (cu >= 0) & (au >= 0) & np.isfinite(cu) & np.isfinite(au) & (det > 1e-12 * s11 * sgg)
        if material:
            feas &= au * gmax <= rho * cu * (1 + 1e-12)
        one = np.ones(syg.shape, bool)
        cands = [(np.where(feas, cu, 0.0), np.where(feas, au, 0.0), feas),
                 (np.broadcast_to(np.maximum(0.0, sy1 / s11), syg.shape), np.zeros(syg.shape), one)]
        if material:  # on the edge a g_max = rho c0: r = c0 (1 + rho g / g_max)
            t = rho / gmax
            ce = np.maximum(0.0, (sy1 + t * syg) / (s11 + 2 * t * s1g + t * t * sgg))
            cands.append((ce, t * ce, one))
        else:  # c0 = 0
            cands.append((np.zeros(syg.shape), np.maximum(0.0, syg / sgg), one))
        rss = np.full(syg.shape, np.inf)
        c0 = np.zeros(syg.shape)
        a = np.zeros(syg.shape)
        for c, aa, f in cands:
            val = np.where(f, rss_of(c, aa), np.inf)
            val = np.where(np.isfinite(val), val, np.inf)
            better = val < rss
            rss = np.where(better, val, rss)
            c0 = np.where(better, c, c0)
            a = np.where(better, aa, a)
    return rss, c0, a


_PARABOLA_STEPS = 3


def _fit(rival: Rival, n: np.ndarray, S: np.ndarray, Y: np.ndarray, w: np.ndarray, material: bool):
    """Best fit of one rival family to each row of ``Y`` (B, n): the grid of theta, then
    parabolic steps from the best grid point and its neighbours (never worse than the grid). Returns (rss (B,),
    theta (B,), coefficients (B, 2) as (c0, a))."""
    B = Y.shape[0]
    if not np.all(np.isfinite(S)):
        return np.full(B, np.inf), np.full(B, np.nan), np.zeros((B, 2))
    rss, c0, a = _solve(rival.kind, material, S, Y, w)
    j = np.argmin(rss, axis=1)
    rows = np.arange(B)
    best = (rss[rows, j], rival.grid[j], c0[rows, j], a[rows, j])
    K = rival.grid.size
    if K > 2:  # two parabolic steps from the grid's best point and its neighbours
        def at(th):
            r_, c_, a_ = _solve(rival.kind, material, rival.shape_at(n, th[:, None]), Y, w)
            return r_[:, 0], c_[:, 0], a_[:, 0]

        jj = np.clip(j, 1, K - 2)
        xs = np.stack([rival.grid[jj - 1], rival.grid[jj], rival.grid[jj + 1]], axis=1)
        fs = np.stack([rss[rows, jj - 1], rss[rows, jj], rss[rows, jj + 1]], axis=1)
        for _ in range(_PARABOLA_STEPS):
            x0, x1, x2 = xs.T
            f0, f1, f2 = np.where(np.isfinite(fs), fs, 1e300).T
            num = (x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)
            den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
            with np.errstate(invalid="ignore", divide="ignore"):
                v = x1 - 0.5 * num / den
            v = np.where(np.isfinite(v), np.clip(v, np.minimum(x0, x2), np.maximum(x0, x2)), x1)
            r_, c_, a_ = at(v)
            better = r_ < best[0]
            best = tuple(np.where(better, new, old) for new, old in zip((r_, v, c_, a_), best))
            # the next bracket: the vertex and its two neighbours among the four points
            X = np.column_stack([xs, v])
            F = np.column_stack([fs, r_])
            o = np.argsort(X, axis=1)
            X, F = np.take_along_axis(X, o, 1), np.take_along_axis(F, o, 1)
            k = np.clip(np.argmin(F, axis=1), 1, 2)
            idx = np.stack([k - 1, k, k + 1], axis=1)
            xs, fs = np.take_along_axis(X, idx, 1), np.take_along_axis(F, idx, 1)
    return np.maximum(best[0], 0.0), best[1], np.column_stack([best[2], best[3]])


_BY_NAME = {rv.name: rv for rv in RIVALS}


def _class_fits(n, shapes, Y, w, cls, material=True):
    """Per rival of a class: (rss, theta, coef); and the best rss over the class."""
    fits = {rv.name: _fit(rv, n, shapes[rv.name], Y, w, material and rv.kind == "floor")
            for rv in RIVALS if rv.cls == cls}
    best = np.min(np.stack([f[0] for f in fits.values()]), axis=0)
    return fits, best


def _mean_of(name, n, theta, coef):
    rv = _BY_NAME[name]
    th = 0.0 if rv.theta_name is None else theta
    return coef[0] + coef[1] * rv.shape_at(n, th)


def _statistic(n, shapes, Y, w):
    m = n.size
    zf, rz = _class_fits(n, shapes, Y, w, "zero")
    lf, rl = _class_fits(n, shapes, Y, w, "level")
    s2 = np.maximum(1.0, np.minimum(rz, rl) / max(m - 3, 1))
    return (rz - rl) / s2, zf, lf, s2


def _best(fits):
    name = min(fits, key=lambda k: fits[k][0][0])
    return name, fits[name]


def _decide(n, r, se, E, want_detail=False):
    """The outcome on points (n, r, se) with standard normal draws E (B, len(n))."""
    m = n.size
    w = se ** -2.0
    shapes = {rv.name: rv.shapes(n) for rv in RIVALS}
    D, zf, lf, s2 = _statistic(n, shapes, r[None, :], w)
    D, s2 = float(D[0]), float(s2[0])
    zname, (_, zt, zc) = _best(zf)
    lname, (_, lt, lc) = _best(lf)
    mu_z = _mean_of(zname, n, zt[0], zc[0])
    mu_l = _mean_of(lname, n, lt[0], lc[0])
    sd = se * math.sqrt(s2)
    Dz = _statistic(n, shapes, mu_z[None, :] + E * sd, w)[0]
    Dl = _statistic(n, shapes, mu_l[None, :] + E * sd, w)[0]
    B = E.shape[0]
    p_zero = (1 + int(np.sum(Dz >= D))) / (B + 1)
    p_level = (1 + int(np.sum(Dl <= D))) / (B + 1)
    rej_z, rej_l = p_zero < ALPHA, p_level < ALPHA
    # the kind of level: a decay to c0 > 0 significantly better than flat, or flat / growing
    flat_rss = float(_solve("floor", False, np.ones((1, m)), r[None, :], w)[0][0, 0])
    floor_name = min(("floor + power", "floor + a/(ln N)^p"), key=lambda k: lf[k][0][0])
    floor_rss, _, (fc0, fa) = lf[floor_name][0][0], None, lf[floor_name][2][0]
    f_stat = (flat_rss - floor_rss) / 2.0 / s2
    decays = bool(m > 3 and f_stat > float(stats.f.ppf(LEVEL, 2, max(m - 3, 1))) and fa > 0 and fc0 > 0)
    grows = lname == "flat or growing" and float(lt[0]) > 0 and lc[0][1] > 0
    positive = CONVERGES if (decays and not grows) else NOT_VANISHING
    if rej_l and not rej_z:
        outcome, why = VANISHING, "every material floor is rejected"
    elif rej_z and not rej_l:
        outcome, why = positive, "every decay to zero is rejected"
    elif not rej_z and not rej_l:
        outcome, why = UNDECIDED, "a floor and a decay to zero fit alike here"
    else:
        hi = max(p_zero, p_level)
        if hi < ALPHA / 5:
            outcome, why = UNDECIDED, "neither a floor nor a decay to zero fits"
        elif p_zero > p_level:
            outcome, why = VANISHING, "neither class fits well; the decay to zero less badly"
        else:
            outcome, why = positive, "neither class fits well; the level less badly"
    out = {"outcome": outcome, "why": why, "statistic": D, "p_zero": p_zero, "p_level": p_level,
           "scale": s2, "best_zero": zname, "best_level": lname, "floor_decays": decays}
    if want_detail:
        out["rivals"] = _describe(zf, lf, s2)
        out["_shapes"], out["_w"] = shapes, w
    return out


def _describe(zf, lf, s2):
    rows = []
    for rv in RIVALS:
        rss, th, c = (zf if rv.cls == "zero" else lf)[rv.name]
        rows.append({"name": rv.name, "formula": rv.formula, "class": rv.cls,
                     "chi2": float(rss[0]), "chi2_scaled": float(rss[0] / s2),
                     "c0": float(c[0][0]) if rv.kind == "floor" else None,
                     "a_at_min_n": float(c[0][1]), "theta_name": rv.theta_name,
                     "theta": None if rv.theta_name is None else float(th[0])})
    return rows


def _level_interval(n, r, w, shapes, s2):
    """The level c0 of the best floor rival (not forced material) and its 95% profile interval
    over every floor rival: (c0, lo, hi), hi None when the profile never leaves the region."""
    m = n.size
    floors = [Rival(rv.name, rv.cls, "scale", rv.theta_name, rv.grid, rv.formula)
              for rv in LEVEL_RIVALS if rv.kind == "floor"]
    top = float(np.max(np.abs(r))) * 1.5 + 1e-300

    def profile(c_grid):  # c0 fixed: r - c0 = a g with a >= 0, best over the floor shapes
        Y = r[None, :] - c_grid[:, None]
        return np.min(np.stack([_fit(rv, n, shapes[rv.name], Y, w, False)[0] for rv in floors]), axis=0)

    cs = np.linspace(0.0, top, 301)
    prof = profile(cs)
    i = int(np.argmin(prof))
    fine = np.linspace(cs[max(i - 1, 0)], cs[min(i + 1, cs.size - 1)], 41)
    pf = profile(fine)
    j = int(np.argmin(pf))
    c_hat, rss_hat = float(fine[j]), float(min(pf[j], prof[i]))
    crit = float(stats.f.ppf(LEVEL, 1, max(m - 3, 1)))
    inside = (prof - rss_hat) / s2 <= crit
    if not inside.any():
        return c_hat, c_hat, c_hat
    lo_i, hi_i = int(np.argmax(inside)), int(inside.size - 1 - np.argmax(inside[::-1]))

    def edge(a, b):  # the last value inside between grid values a (inside) and b (outside)
        g = np.linspace(a, b, 33)
        ins = (profile(g) - rss_hat) / s2 <= crit
        return float(g[np.flatnonzero(ins)[-1]]) if ins[0] else float(a)

    lo = 0.0 if lo_i == 0 else edge(cs[lo_i], cs[lo_i - 1])
    hi = None if hi_i == cs.size - 1 else edge(cs[hi_i], cs[hi_i + 1])
    return c_hat, min(lo, c_hat), None if hi is None else max(hi, c_hat)


@dataclass
class AsymptoticVerdict:
    """What :func:`asymptotic_verdict` found (plain values; :meth:`as_dict` for JSON)."""
    outcome: str
    note: str
    n_points: int
    statistic: float | None = None
    p_zero: float | None = None
    p_level: float | None = None
    scale: float | None = None
    best_zero: str | None = None
    best_level: str | None = None
    rivals: list = field(default_factory=list)
    level: float | None = None
    level_lo: float | None = None
    level_hi: float | None = None
    fragile: list = field(default_factory=list)
    unfragile_outcome: str | None = None
    loo: list = field(default_factory=list)
    n_boot: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def asymptotic_verdict(n, r, se, seed, n_boot: int = N_BOOT, leave_one_out: bool = True) -> AsymptoticVerdict:
    """The verdict on points ``r`` at ``n`` with standard errors ``se`` (rule in the module
    docstring). ``seed`` (an int or a sequence of ints) seeds the bootstrap: the same points and
    seed give the same verdict."""
    n, r, se = (np.asarray(v, dtype=float) for v in (n, r, se))
    order = np.argsort(n)
    n, r, se = n[order], r[order], se[order]
    m = n.size
    if m < MIN_POINTS:
        return AsymptoticVerdict(UNDECIDED, f"{m} point(s); the rivals need {MIN_POINTS}", m)
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    E = rng.standard_normal((n_boot, m))
    full = _decide(n, r, se, E, want_detail=True)
    v = AsymptoticVerdict(full["outcome"], "", m, full["statistic"], full["p_zero"], full["p_level"],
                          full["scale"], full["best_zero"], full["best_level"], full["rivals"], n_boot=n_boot)
    if full["best_level"] != "flat or growing" or full["outcome"] == CONVERGES:
        c, lo, hi = _level_interval(n, r, full["_w"], full["_shapes"], full["scale"])
        if c > 0:
            v.level, v.level_lo, v.level_hi = c, lo, hi
    if leave_one_out and m - 1 >= MIN_POINTS:
        for i in range(m):
            keep = np.arange(m) != i
            o = _decide(n[keep], r[keep], se[keep], E[:N_BOOT_LOO, keep])["outcome"]
            v.loo.append({"n": float(n[i]), "outcome": o})
    zero = next(x for x in full["rivals"] if x["name"] == full["best_zero"])
    lev = next(x for x in full["rivals"] if x["name"] == full["best_level"])
    ev = (f"best to zero {_rival_text(zero)}, best with a level {_rival_text(lev)}; "
          f"D = {full['statistic']:.3g}, p(zero) = {full['p_zero']:.2g}, p(level) = {full['p_level']:.2g}")
    v.fragile = [d["n"] for d in v.loo if d["outcome"] != full["outcome"]]
    side = {VANISHING: "zero", CONVERGES: "level", NOT_VANISHING: "level", UNDECIDED: None}
    flips = [d for d in v.loo if side[d["outcome"]] is not None and side[full["outcome"]] is not None
             and side[d["outcome"]] != side[full["outcome"]]]
    drop = lambda ds: ", ".join(f"{d['n']:.4g}" for d in ds)  # noqa: E731
    if flips:  # one point decides between zero and a level: no verdict
        v.outcome = UNDECIDED
        v.note = (f"fragile: {full['outcome']} on all points, but "
                  + "; ".join(f"{d['outcome']} without N = {d['n']:.4g}" for d in flips) + f"; {ev}")
    elif v.fragile and full["outcome"] == CONVERGES and all(
            d["outcome"] in (CONVERGES, NOT_VANISHING) for d in v.loo):
        v.outcome = NOT_VANISHING  # the decay to the level rests on one point; the level does not
        v.note = (f"fragile: a decay to the level is found on all points but not without N = "
                  f"{drop([d for d in v.loo if d['outcome'] != CONVERGES])}: not vanishing; {ev}")
    elif v.fragile:
        v.note = (f"{full['why']}, fragile: {' / '.join(sorted({d['outcome'] for d in v.loo if d['n'] in v.fragile}))} "
                  f"without N = {drop([d for d in v.loo if d['n'] in v.fragile])}: {ev}")
    else:
        v.note = f"{full['why']}: {ev}"
    if v.outcome != full["outcome"]:
        v.unfragile_outcome = full["outcome"]
    return v


def _rival_text(x: dict) -> str:
    bits = []
    if x["c0"] is not None:
        bits.append(f"c0 = {x['c0']:.3g}")
    if x["theta_name"] is not None:
        bits.append(f"{x['theta_name']} = {x['theta']:.3g}")
    bits.append(f"chi2 = {x['chi2']:.3g}")
    return f"{x['formula']} ({', '.join(bits)})"
