"""Does a sequence r(N) vanish as N -> infinity? Model selection between rival descriptions on a
finite range of N, calibrated by a parametric bootstrap at the arm's own N and SEs.

Over N = 10^2..10^7 a decay like ``1/ln N`` looks like a floor plus a power law, and a sequence
that rises at logarithmic speed may turn after the largest N and vanish, so no fixed threshold
on one fit can tell them apart. :func:`asymptotic_verdict` fits two classes of rivals to the
same points by weighted least squares (weights ``1/se^2``):

* **to zero** (:data:`ZERO_RIVALS`): ``a N^b`` (``b <= -0.02``), ``a / (ln N)^p``
  (``0.25 <= p <= 4``), ``a ln ln N / ln N``, ``a / (ln ln N)^q`` (``0.25 <= q <= 4``), and two
  humps that vanish after a peak inside the range or beyond it (to N = 10^300): a Gaussian in
  ``ln ln N`` and ``a (ln N)^p N^-b``;
* **to a positive level or growing** (:data:`LEVEL_RIVALS`): ``c0 + a (N/N_min)^b``
  (``-3 <= b <= -0.01``), ``c0 + a / (ln N)^p``, ``c0 - a (N/N_min)^b`` (a level approached
  from below), ``c0`` plus the Gaussian hump, and ``a N^b`` with ``0 <= b <= 2`` (flat or
  growing); ``c0, a >= 0``. A floor must be *material*: it must carry at least :data:`KAPPA` of
  the fitted value at the largest N (``c0 >= KAPPA (c0 + a g(N_max))``); otherwise a floor of 10^-9
  under a power law would be a floor;
* the caller's own rivals (``rivals``), in either class: a model's forms and a limit path known
  to vanish, as values at the arm's N (:func:`rival_from_points`), steps of rounded parameters
  included. This module names no model's path.

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
point; so it is if leaving out the largest N alone leaves it undecided (the claim rests on the
last point); if a *converges* loses its decay without some point (but keeps a level), it becomes
*not vanishing*; if removing another point only leaves it undecided, the verdict stands and is
marked fragile.

The level is reported with a 95% profile interval over every floor rival:
``{c0 >= 0: (RSS_profile(c0) - RSS_floor) / s2 <= F_0.95(1, n - 3)}`` (RSS_profile minimises
over a >= 0 and the exponent at fixed c0), when the verdict converges or the best rival with a
level is a floor.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

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
#: the humps' peaks, in x = ln ln N: from N = 10 to N = 10^300 (in the range or far beyond it)
HUMP_PEAK_X = np.arange(math.log(math.log(10.0)), math.log(math.log(1e300)) + 1e-9, 0.15)
#: the widest hump to zero, in x = ln ln N: from its peak it falls to half while ln N grows
#: e^(1.18 w)-fold (5.9-fold at w = 1.5: from a peak at 10^20 to half of it by 10^117). A sequence
#: that rises and falls more slowly than that is taken for a level: over 10^2..10^7 (1.25 of x)
#: a wider hump peaking there is flat within a few percent, as a level is, and no range of N a
#: simulation reaches tells the two apart (docs/analysis.md, "What the humps' width assumes")
HUMP_WIDTH_MAX = 1.5
#: the humps' widths in x = ln ln N (10^2..10^7 spans 1.25 of x); the narrowest covers a few
#: half decades
HUMP_WIDTH = np.geomspace(0.15, HUMP_WIDTH_MAX, 8)
#: ``(ln N)^p N^-b``: rises like a power of ln N, peaks at ln N = p / b, falls like N^-b; its
#: width at the peak in x = ln ln N is 1 / sqrt(p), so p >= 1 / HUMP_WIDTH_MAX^2
RISE_P = np.geomspace(1.0 / HUMP_WIDTH_MAX ** 2, 16.0, 12)
FALL_B = np.geomspace(0.003, 1.0, 12)


def _grid2(n1: int, n2: int, step: int = 1) -> np.ndarray:
    """The positions of a two-parameter grid as complex numbers ``i + 1j * j`` (fractional
    positions between grid values come from the refinement, :func:`_fit`)."""
    return np.array([complex(i, j) for i in range(0, n1, step) for j in range(0, n2, step)])


def _along(axis: np.ndarray, pos, log: bool) -> np.ndarray:
    """The parameter at a (fractional) position on a grid axis, interpolated linearly (in the
    logarithm for a geometric axis)."""
    t = np.log(axis) if log else axis
    v = np.interp(np.asarray(pos, dtype=float), np.arange(axis.size), t)
    return np.exp(v) if log else v


def lnln(n) -> np.ndarray:
    """``ln ln N`` (nan for N <= e, where it is not positive)."""
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = np.log(np.log(n))
    return np.where(np.isfinite(x) & (x > 0), x, np.nan)


def _lnln_over_ln(n):
    ln = np.log(np.asarray(n, dtype=float))
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.log(ln) / ln
    return np.where(np.isfinite(g) & (g > 0), g, np.nan)


def _fixed(g):
    """A shape without a parameter: ``g(n)`` broadcast over any theta."""
    return lambda n, th: np.broadcast_to(g(n), np.shape(th) + n.shape)


def _power(n, th):
    return (n / n.min()) ** th[..., None]


def _inv_log(n, th):
    ln = np.log(n)
    return (ln / ln.min()) ** -th[..., None]


def _inv_loglog(n, th):
    x = lnln(n)
    return (x / x[np.argmin(n)]) ** -th[..., None]


def _log_hump(n, th):
    """``ln`` of the hump ``exp(-(x - x_p)^2 / (2 w^2))``, x = ln ln N, at grid positions ``th``."""
    th = np.asarray(th)
    xp = _along(HUMP_PEAK_X, th.real, False)[..., None]
    w = _along(HUMP_WIDTH, th.imag, True)[..., None]
    return -((lnln(n) - xp) ** 2) / (2.0 * w * w)


def _log_rise_fall(n, th):
    """``ln`` of ``(ln N)^p N^-b`` at grid positions ``th``."""
    th = np.asarray(th)
    p = _along(RISE_P, th.real, True)[..., None]
    b = _along(FALL_B, th.imag, True)[..., None]
    return p * np.log(np.log(n)) - b * np.log(n)


def _from_below(n, th):
    """``-(N/N_min)^b``: with ``c0 + a g``, a >= 0, a level approached from below."""
    return -((n / n.min()) ** th[..., None])


@dataclass(frozen=True)
class Rival:
    """A family of descriptions: ``a g(N; theta)`` (kind ``scale``), ``c0 + a g(N; theta)``
    (kind ``floor``) or ``a base(N) + g0 g(N; theta)`` (kind ``based``: a fixed shape such as a
    limit path, ``a >= 0``, plus a finite-N correction of either sign), theta on a grid (one nan
    for a fixed shape).

    ``fn(n, theta)`` gives the shapes at the points ``n`` (sorted) for an array of theta (shape
    ``theta.shape + n.shape``); ``log=True`` when it gives their logarithm (humps, which would
    underflow). ``norm``: each shape scaled to 1 at the smallest N (``min``) or to a largest
    absolute value of 1 over the points (``max``). ``refine``: the best grid value is refined
    by parabolic steps (a one-parameter grid in order); otherwise the grid is the fit."""
    name: str
    cls: str  # "zero" or "level"
    kind: str  # "scale", "floor" or "based"
    theta_name: str | None
    grid: np.ndarray
    formula: str
    fn: Callable = None
    norm: str = "min"
    refine: bool = True
    log: bool = False
    #: kind ``based``: the fixed shape ``base(n)`` (values at the points) beside ``g(N; theta)``
    base: Callable = None

    def shape_at(self, n: np.ndarray, theta) -> np.ndarray:
        """Shapes at ``theta`` (any array shape; ... x len(n)), normalised (``norm``)."""
        theta = np.asarray(theta)
        if not np.iscomplexobj(theta):
            theta = theta.astype(float)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            g = np.broadcast_to(np.asarray(self.fn(n, theta), dtype=float), theta.shape + n.shape)
            if self.log:  # exp(L - max L): 1 at its largest point, never all zero
                return np.exp(g - np.max(g, axis=-1, keepdims=True))
            if self.norm == "max":
                return g / np.max(np.abs(g), axis=-1, keepdims=True)
            if self.norm == "raw":
                return g
            return g / g[..., np.argmin(n)][..., None]

    def shapes(self, n: np.ndarray) -> np.ndarray:
        """(K, n) shapes on the grid."""
        return self.shape_at(n, self.grid)

    def theta_words(self, theta: float) -> dict:
        """The fitted parameter for the note and ``rivals``: ``{theta_name: value}`` (a hump:
        its peak as log10 N and its width in ln ln N)."""
        if self.theta_name is None or theta is None or not np.isfinite(theta):
            return {}
        if self.fn is _log_hump:
            xp, w = float(_along(HUMP_PEAK_X, theta.real, False)), float(_along(HUMP_WIDTH, theta.imag, True))
            return {"log10 N_peak": math.exp(xp) / math.log(10.0), "width": w}
        if self.fn is _log_rise_fall:
            p, b = float(_along(RISE_P, theta.real, True)), float(_along(FALL_B, theta.imag, True))
            return {"p": p, "b": b, "log10 N_peak": p / b / math.log(10.0)}
        return {self.theta_name: float(theta)}


def rival_from_points(name: str, cls: str, formula: str, n_points, values, kind: str = "scale") -> Rival:
    """A fixed shape known only at given N (a model's form at the arm's own k and d, or a limit
    path's values): ``a values(N)`` (or ``c0 + a values(N)``); nan, and so no fit, at an N it
    has no value for."""
    npts = np.asarray(n_points, dtype=float)
    vals = np.asarray(values, dtype=float)
    o = np.argsort(npts)
    npts, vals = npts[o], vals[o]

    def fn(n, th):
        i = np.clip(np.searchsorted(npts, n), 0, npts.size - 1)
        ok = np.isclose(npts[i], n, rtol=1e-9, atol=0.0)
        return np.broadcast_to(np.where(ok, vals[i], np.nan), np.shape(th) + n.shape)

    return Rival(name, cls, kind, None, np.array([np.nan]), formula, fn, norm="max", refine=False)


def _values_at(n_points, values) -> Callable:
    """``n -> values`` at the given N (nan at an N without a value)."""
    npts = np.asarray(n_points, dtype=float)
    vals = np.asarray(values, dtype=float)
    o = np.argsort(npts)
    npts, vals = npts[o], vals[o]

    def at(n):
        n = np.asarray(n, dtype=float)
        i = np.clip(np.searchsorted(npts, n), 0, npts.size - 1)
        return np.where(np.isclose(npts[i], n, rtol=1e-9, atol=0.0), vals[i], np.nan)

    return at


def rival_plus_gap(name: str, cls: str, formula: str, n_points, values) -> Rival:
    """A fixed shape known at given N (a limit path) plus a finite-N gap that decays like a
    power: ``a values(N) + g (N/N_min)^b``, ``a >= 0``, g of either sign, ``b`` on the grid of
    the powers to zero (``-3 <= b <= -0.02``). Its limit is the shape's: a path known to vanish
    with a gap that vanishes is a rival to zero, the simulations sitting above or below the
    path at small N as finite systems do."""
    return Rival(name, cls, "based", "b", _B_ZERO, formula, _power, base=_values_at(n_points, values))


_HUMP_GRID = _grid2(HUMP_PEAK_X.size, HUMP_WIDTH.size)
#: the floor + hump's coarser grid: every other peak and width
_FLOOR_HUMP_GRID = _grid2(HUMP_PEAK_X.size, HUMP_WIDTH.size, 2)
_RISE_FALL_GRID = _grid2(RISE_P.size, FALL_B.size)
_NONE = np.array([np.nan])
_HUMP = "a exp(-(ln ln N - ln ln N_p)^2 / (2 w^2))"

ZERO_RIVALS = (
    Rival("power to zero", "zero", "scale", "b", _B_ZERO, "a N^b", _power),
    Rival("a/(ln N)^p", "zero", "scale", "p", _P_LOG, "a/(ln N)^p", _inv_log),
    Rival("a lnln N/ln N", "zero", "scale", None, _NONE, "a ln ln N / ln N", _fixed(_lnln_over_ln)),
    Rival("a/(ln ln N)^q", "zero", "scale", "q", _P_LOG, "a/(ln ln N)^q", _inv_loglog),
    Rival("hump", "zero", "scale", "peak", _HUMP_GRID, _HUMP, _log_hump, refine=False, log=True),
    Rival("rise then fall", "zero", "scale", "peak", _RISE_FALL_GRID, "a (ln N)^p N^-b", _log_rise_fall,
          refine=False, log=True),
)
LEVEL_RIVALS = (
    Rival("floor + power", "level", "floor", "b", _B_FLOOR, "c0 + a N^b", _power),
    Rival("floor + a/(ln N)^p", "level", "floor", "p", _P_LOG, "c0 + a/(ln N)^p", _inv_log),
    Rival("floor - power", "level", "floor", "b", _B_FLOOR, "c0 - a N^b", _from_below, norm="raw"),
    Rival("floor + hump", "level", "floor", "peak", _FLOOR_HUMP_GRID, "c0 + " + _HUMP, _log_hump,
          refine=False, log=True),
    Rival("flat or growing", "level", "scale", "b", _B_GROW, "a N^b, b >= 0", _power),
)
#: the general rivals; a model adds its own (:func:`asymptotic_verdict`'s ``rivals``)
RIVALS = ZERO_RIVALS + LEVEL_RIVALS


def _solve_based(base: np.ndarray, S: np.ndarray, Y: np.ndarray, w: np.ndarray):
    """Weighted least squares of each row of ``Y`` (B, n) on ``a base + g s`` for each shape s of
    ``S`` ((K, n) or (B, K, n)), ``a >= 0`` and g free: the unconstrained solution where its a is
    not negative, else the edge a = 0. Returns (rss, a, g), each (B, K)."""
    Yw = Y * w
    syy = np.einsum("bn,bn->b", Yw, Y)[:, None]
    syb = (Yw @ base)[:, None]
    sbb = float(np.sum(w * base * base))
    if S.ndim == 2:
        sys_ = Yw @ S.T
        sss = (S * S * w).sum(-1)[None, :]
        sbs = (S * base * w).sum(-1)[None, :]
    else:
        sys_ = np.einsum("bn,bkn->bk", Yw, S)
        sss = (S * S * w).sum(-1)
        sbs = (S * base * w).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        det = sbb * sss - sbs ** 2
        au = (sss * syb - sbs * sys_) / det
        gu = (sbb * sys_ - sbs * syb) / det
        feas = (au >= 0) & np.isfinite(au) & np.isfinite(gu) & (det > 1e-12 * sbb * sss)
        a = np.where(feas, au, 0.0)
        g = np.where(feas, gu, sys_ / sss)
        rss = syy - 2 * (a * syb + g * sys_) + a * a * sbb + 2 * a * g * sbs + g * g * sss
    rss = np.where(np.isfinite(rss), rss, np.inf)
    return rss, np.broadcast_to(a, rss.shape).copy(), np.broadcast_to(g, rss.shape).copy()


def _solve(kind: str, material: bool, S: np.ndarray, Y: np.ndarray, w: np.ndarray, base=None):
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
    if kind == "based":
        return _solve_based(base, S, Y, w)
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
    theta (B,), coefficients (B, 2) as (c0, a); for kind ``based`` (a, g))."""
    B = Y.shape[0]
    base = None if rival.base is None else rival.base(n)
    if not np.all(np.isfinite(S)) or (base is not None and not np.all(np.isfinite(base))):
        return np.full(B, np.inf), np.full(B, np.nan), np.zeros((B, 2))
    rss, c0, a = _solve(rival.kind, material, S, Y, w, base)
    j = np.argmin(rss, axis=1)
    rows = np.arange(B)
    best = (rss[rows, j], rival.grid[j], c0[rows, j], a[rows, j])
    K = rival.grid.size
    if np.iscomplexobj(rival.grid):
        best = _refine2(rival, n, Y, w, material, rss, best)
    elif K > 2 and rival.refine:  # parabolic steps from the grid's best point and its neighbours
        def at(th):
            r_, c_, a_ = _solve(rival.kind, material, rival.shape_at(n, th[:, None]), Y, w, base)
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


_GN_STEPS = 4


def _loglin(rival: Rival, n):
    """A two-parameter hump's log-shape as ``t1 f1(N) + t2 f2(N)`` (linear in t): the basis
    (2, len(n)) and the maps between t and grid positions (clipped to the grid)."""
    if rival.fn is _log_hump:  # -(x - xp)^2 / (2 w^2) = (xp / w^2) x - x^2 / (2 w^2) + const
        x = lnln(n)

        def to_pos(t1, t2):
            with np.errstate(invalid="ignore", divide="ignore"):
                w2 = np.where(t2 > 0, 1.0 / (2.0 * t2), np.inf)
                xp = t1 * w2
            i = np.interp(xp, HUMP_PEAK_X, np.arange(HUMP_PEAK_X.size))
            j = np.interp(np.log(np.sqrt(w2)), np.log(HUMP_WIDTH), np.arange(HUMP_WIDTH.size))
            return i + 1j * j

        def from_pos(pos):
            xp, w = _along(HUMP_PEAK_X, pos.real, False), _along(HUMP_WIDTH, pos.imag, True)
            return xp / w ** 2, 1.0 / (2.0 * w ** 2)

        return np.stack([x, -x * x]), to_pos, from_pos
    # (ln N)^p N^-b
    def to_pos(t1, t2):
        i = np.interp(np.log(np.maximum(t1, 1e-300)), np.log(RISE_P), np.arange(RISE_P.size))
        j = np.interp(np.log(np.maximum(t2, 1e-300)), np.log(FALL_B), np.arange(FALL_B.size))
        return i + 1j * j

    def from_pos(pos):
        return _along(RISE_P, pos.real, True), _along(FALL_B, pos.imag, True)

    return np.stack([np.log(np.log(n)), -np.log(n)]), to_pos, from_pos


def _refine2(rival: Rival, n, Y, w, material, rss, best):
    """Two-parameter humps: from the best grid point, Gauss-Newton steps on the weighted least
    squares of ``a exp(t1 f1 + t2 f2)`` (plus ``c0`` for a floor), the log-shape being linear in
    t; the result mapped back onto the grid's range and refitted under the constraints of
    :func:`_solve`, kept only where it improves on the grid."""
    F, to_pos, from_pos = _loglin(rival, n)
    floor = rival.kind == "floor"
    t1, t2 = from_pos(best[1])
    L = t1[:, None] * F[0] + t2[:, None] * F[1]
    with np.errstate(divide="ignore"):
        c = np.log(np.maximum(best[3], 1e-300)) - L.max(axis=1)
    c0 = best[2].copy()
    ok = best[3] > 0
    theta = np.column_stack([c0, c, t1, t2]) if floor else np.column_stack([c, t1, t2])
    for _ in range(_GN_STEPS):
        if floor:
            c0, c, t1, t2 = theta.T
        else:
            c, t1, t2 = theta.T
        with np.errstate(over="ignore", invalid="ignore"):
            g = np.exp(c[:, None] + t1[:, None] * F[0] + t2[:, None] * F[1])
            mu = g + (c0[:, None] if floor else 0.0)
            J = np.stack(([np.ones_like(g)] if floor else []) + [g, g * F[0], g * F[1]], axis=2)  # (B, m, P)
            JW = J * w[None, :, None]
            A = np.einsum("bmp,bmq->bpq", JW, J)
            rhs = np.einsum("bmp,bm->bp", JW, Y - mu)
            A = A + 1e-9 * np.eye(A.shape[1]) * np.trace(A, axis1=1, axis2=2)[:, None, None]
            good = ok & np.all(np.isfinite(A), axis=(1, 2)) & np.all(np.isfinite(rhs), axis=1)
            step = np.zeros_like(theta)
            if good.any():
                step[good] = np.linalg.solve(A[good], rhs[good][..., None])[..., 0]
        theta = np.where(np.isfinite(step), theta + step, theta)
    t1, t2 = theta[:, -2], theta[:, -1]
    pos = to_pos(t1, t2)
    pos = np.where(np.isfinite(pos.real) & np.isfinite(pos.imag) & ok, pos, best[1])
    r_, c_, a_ = (x[:, 0] for x in _solve(rival.kind, material, rival.shape_at(n, pos[:, None]), Y, w))
    better = np.isfinite(r_) & (r_ < best[0])
    return (np.where(better, r_, best[0]), np.where(better, pos, best[1]),
            np.where(better, c_, best[2]), np.where(better, a_, best[3]))


def _class_fits(rivals, n, shapes, Y, w, cls, material=True):
    """Per rival of a class: (rss, theta, coef); and the best rss over the class."""
    fits = {rv.name: _fit(rv, n, shapes[rv.name], Y, w, material and rv.kind == "floor")
            for rv in rivals if rv.cls == cls}
    best = np.min(np.stack([f[0] for f in fits.values()]), axis=0)
    return fits, best


def _mean_of(rivals, name, n, theta, coef):
    rv = next(x for x in rivals if x.name == name)
    th = 0.0 if rv.theta_name is None else theta
    if rv.kind == "based":
        return coef[0] * rv.base(n) + coef[1] * rv.shape_at(n, th)
    return coef[0] + coef[1] * rv.shape_at(n, th)


def _statistic(rivals, n, shapes, Y, w):
    m = n.size
    zf, rz = _class_fits(rivals, n, shapes, Y, w, "zero")
    lf, rl = _class_fits(rivals, n, shapes, Y, w, "level")
    s2 = np.maximum(1.0, np.minimum(rz, rl) / max(m - 3, 1))
    return (rz - rl) / s2, zf, lf, s2


def _best(fits):
    name = min(fits, key=lambda k: fits[k][0][0])
    return name, fits[name]


def _decide(rivals, n, r, se, E, want_detail=False):
    """The outcome on points (n, r, se) with standard normal draws E (B, len(n))."""
    m = n.size
    w = se ** -2.0
    shapes = {rv.name: rv.shapes(n) for rv in rivals}
    D, zf, lf, s2 = _statistic(rivals, n, shapes, r[None, :], w)
    D, s2 = float(D[0]), float(s2[0])
    zname, (_, zt, zc) = _best(zf)
    lname, (_, lt, lc) = _best(lf)
    mu_z = _mean_of(rivals, zname, n, zt[0], zc[0])
    mu_l = _mean_of(rivals, lname, n, lt[0], lc[0])
    sd = se * math.sqrt(s2)
    Dz = _statistic(rivals, n, shapes, mu_z[None, :] + E * sd, w)[0]
    Dl = _statistic(rivals, n, shapes, mu_l[None, :] + E * sd, w)[0]
    B = E.shape[0]
    p_zero = (1 + int(np.sum(Dz >= D))) / (B + 1)
    p_level = (1 + int(np.sum(Dl <= D))) / (B + 1)
    rej_z, rej_l = p_zero < ALPHA, p_level < ALPHA
    # the kind of level: a decay to c0 > 0 significantly better than flat, or flat / growing
    flat_rss = float(_solve("floor", False, np.ones((1, m)), r[None, :], w)[0][0, 0])
    floor_name = min((rv.name for rv in rivals if rv.cls == "level" and rv.kind == "floor"),
                     key=lambda k: lf[k][0][0])
    floor_rss, _, (fc0, fa) = lf[floor_name][0][0], None, lf[floor_name][2][0]
    f_stat = (flat_rss - floor_rss) / 2.0 / s2
    decays = bool(m > 3 and f_stat > float(stats.f.ppf(LEVEL, 2, max(m - 3, 1))) and fa > 0 and fc0 > 0)
    # the best rival with a level rises without a floor (flat or growing, or a caller's growing
    # path): not a convergence to a level
    lkind = next(rv.kind for rv in rivals if rv.name == lname)
    grows = lkind in ("scale", "based") and mu_l[-1] > mu_l[0] * (1 + 1e-9) and (
        lc[0][1] > 0 if lkind == "scale" else lc[0][0] > 0)
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
        out["rivals"] = _describe(rivals, zf, lf, s2)
        out["_shapes"], out["_w"] = shapes, w
    return out


def _describe(rivals, zf, lf, s2):
    rows = []
    for rv in rivals:
        rss, th, c = (zf if rv.cls == "zero" else lf)[rv.name]
        words = rv.theta_words(th[0])
        based = rv.kind == "based"
        if based:  # a x the shape, plus the gap g at the smallest N
            words = {**words, "g": float(c[0][1])}
        rows.append({"name": rv.name, "formula": rv.formula, "class": rv.cls,
                     "chi2": float(rss[0]), "chi2_scaled": float(rss[0] / s2),
                     "c0": float(c[0][0]) if rv.kind == "floor" else None,
                     "a": float(c[0][0] if based else c[0][1]),
                     "a_at": ("the shape's own values" if based else
                              "smallest N" if rv.norm != "max" and not rv.log else "largest point"),
                     "theta_name": rv.theta_name,
                     "theta": words.get(rv.theta_name) if rv.theta_name in words else None,
                     "params": words})
    return rows


def _level_interval(rivals, n, r, w, shapes, s2):
    """The level c0 of the best floor rival (not forced material) and its 95% profile interval
    over every floor rival: (c0, lo, hi), hi None when the profile never leaves the region."""
    m = n.size
    floors = [replace(rv, kind="scale") for rv in rivals if rv.cls == "level" and rv.kind == "floor"]
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


def asymptotic_verdict(n, r, se, seed, n_boot: int = N_BOOT, leave_one_out: bool = True,
                       rivals: Sequence[Rival] = ()) -> AsymptoticVerdict:
    """The verdict on points ``r`` at ``n`` with standard errors ``se`` (rule in the module
    docstring). ``seed`` (an int or a sequence of ints) seeds the bootstrap: the same points and
    seed give the same verdict. ``rivals``: the caller's own rivals, fitted beside
    :data:`RIVALS` (a model's forms, a limit path known to vanish: :func:`rival_from_points`);
    a rival without a value at some point is not fitted."""
    allr = RIVALS + tuple(rivals)
    names = [rv.name for rv in allr]
    if len(set(names)) != len(names):
        raise ValueError(f"rival names must differ: {names}")
    n, r, se = (np.asarray(v, dtype=float) for v in (n, r, se))
    order = np.argsort(n)
    n, r, se = n[order], r[order], se[order]
    m = n.size
    if m < MIN_POINTS:
        return AsymptoticVerdict(UNDECIDED, f"{m} point(s); the rivals need {MIN_POINTS}", m)
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    E = rng.standard_normal((n_boot, m))
    full = _decide(allr, n, r, se, E, want_detail=True)
    v = AsymptoticVerdict(full["outcome"], "", m, full["statistic"], full["p_zero"], full["p_level"],
                          full["scale"], full["best_zero"], full["best_level"], full["rivals"], n_boot=n_boot)
    if full["best_level"] != "flat or growing" or full["outcome"] == CONVERGES:
        c, lo, hi = _level_interval(allr, n, r, full["_w"], full["_shapes"], full["scale"])
        if c > 0:
            v.level, v.level_lo, v.level_hi = c, lo, hi
    if leave_one_out and m - 1 >= MIN_POINTS:
        for i in range(m):
            keep = np.arange(m) != i
            o = _decide(allr, n[keep], r[keep], se[keep], E[:N_BOOT_LOO, keep])["outcome"]
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
    last = v.loo[-1] if v.loo else None  # the verdict without the largest N
    if flips:  # one point decides between zero and a level: no verdict
        v.outcome = UNDECIDED
        v.note = (f"fragile: {full['outcome']} on all points, but "
                  + "; ".join(f"{d['outcome']} without N = {d['n']:.4g}" for d in flips) + f"; {ev}")
    elif last is not None and full["outcome"] != UNDECIDED and last["outcome"] == UNDECIDED:
        # the largest N alone decides: a claim about the sequence beyond the range that rests on
        # its last point is no claim (a hump can turn there as well as a level can hold)
        v.outcome = UNDECIDED
        v.note = f"fragile: {full['outcome']} on all points, but undecided without the largest N = {last['n']:.4g}; {ev}"
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
    bits += [f"{k} = {v:.3g}" for k, v in (x.get("params") or {}).items()]
    bits.append(f"chi2 = {x['chi2']:.3g}")
    return f"{x['formula']} ({', '.join(bits)})"
