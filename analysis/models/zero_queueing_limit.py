"""The headline's limit past the float range and its one-line answers (issue 35, items 2 and 4).

:mod:`analysis.models.zero_queueing` judges the simulations and the exact mean field along the
path; this module adds what the ``heavy_traffic`` engine's rows say (the batch policies' mean
field as 1 - lam -> 0, to N = 10^300: ``log10_n`` in place of ``n_servers``), the rule for d as
the sweep wrote it (from the run's configuration, never evaluated: parsed and printed), and the
figure of the whole path against the asymptotic rate.

The verdict of the limit along the path where heavy-traffic rows reach the path's end
(:func:`heavy_path_verdict`; docs/analysis.md, "Batch-filling in heavy traffic"): every
heavy-traffic row is a point where jobs end on layers 0-1 (the engine refuses a point where the
bound on reaching layer 2 is above 1e-12), so a job's tasks all start at position 1 or 2 and its
ratio is at most that of k tasks all at position 2, ``(E[max of k Gamma(2, 1)] - H_k) / H_k``,
which falls like ``ln ln k / ln k`` to 0. The verdict is then *vanishing*, with the rate: it is a
property of the limit along the path that the numbers illustrate, not a fit to them.
"""
from __future__ import annotations

import ast
import math

import numpy as np
import polars as pl

from analysis import declared
from analysis.fmt import pow10 as _sci10

HEAVY_ENGINE = "heavy_traffic"
#: the heavy-traffic rows' own coordinates (N, the load and d past the Int64 and float ranges):
#: never arm parameters
PATH_COORDS = ("log10_n", "one_minus_lam", "d_real")
#: the sweep's auxiliary variable that caps d (sampling k d distinct queues needs k d <= N)
CAP_NAMES = ("d_cap",)


def log10_n(frame: pl.DataFrame, x: str = "n_servers") -> pl.Expr:
    """``log10 N`` of each row: ``log10_n`` where the row has it (heavy-traffic rows), else
    ``log10(x)``."""
    expr = pl.col(x).cast(pl.Float64).log10()
    if "log10_n" in frame.columns:
        expr = pl.coalesce(pl.col("log10_n"), expr)
    return expr


def rule_text(variant, context: dict | None) -> str | None:
    """The rule for d of one variant as the sweep wrote it, constants of the variant put in
    (``c = 1``) and a cap ``min(..., d_cap)`` left out (said once, in the report): ``d =
    ceil(1 / ((1 - lam) * log(k)))``. None without a context or a d. The formula is parsed
    with :mod:`ast` and printed, never evaluated."""
    if not context:
        return None
    params = dict(context.get("params") or {})
    params.update(((context.get("variants") or {}).get(variant) or {}) if variant is not None else {})
    d = params.get("d")
    if d is None:
        return None
    if not isinstance(d, str):
        return f"d = {d:g}" if isinstance(d, float) else f"d = {d}"
    try:
        tree = ast.parse(d, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return f"d = {d}"
    if (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "min"
            and len(tree.args) == 2):
        caps = [a for a in tree.args if isinstance(a, ast.Name) and a.id in CAP_NAMES]
        if len(caps) == 1:
            tree = next(a for a in tree.args if a is not caps[0])

    class _Constants(ast.NodeTransformer):
        def visit_Name(self, node):
            v = params.get(node.id)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return ast.copy_location(ast.Constant(v), node)
            return node

    return "d = " + ast.unparse(_Constants().visit(tree))


def _heavy_traffic():
    """The heavy-traffic form of the dispatch model's mean field, as the model declares it for
    analysis (``Model.theory``): ``limit_ratio(k, mu)`` and ``leading_rate(k)``."""
    return declared.theory("dispatch", "limit_ratio"), declared.theory("dispatch", "leading_rate")


def _bound_and_rate(k: int) -> tuple[float, float]:
    """The ratio with all k tasks at position 2 (the heavy-traffic form's upper bound) and the
    leading rate ``ln ln k / ln k``."""
    limit_ratio, leading_rate = _heavy_traffic()
    return float(limit_ratio(k, 0.0)["queueing_ratio"]), float(leading_rate(k))


def heavy_path_verdict(heavy: pl.DataFrame, exact: pl.DataFrame | None, top: float | None,
                       x: str = "n_servers") -> dict:
    """The verdict of the limit along the path from one arm's heavy-traffic rows (``log10_n``,
    ``k``, ``d_real``, ``one_minus_lam``, ``queueing_ratio``) and its exact mean-field rows
    (``exact``, on ``x``): module docstring. ``top`` is the path's last ``log10_n`` (the sweep's
    ``limit_path.heavy_traffic.n_servers_max``); an arm whose heavy-traffic rows stop before it
    (the form stopped holding) gets no verdict from here (``heavy_verdict`` None).

    Returns ``heavy_points``, ``heavy_log10_min``/``_max``, ``heavy_ratio_at_max``,
    ``heavy_bound_at_max`` (all tasks at position 2), ``heavy_rate_at_max`` (ln ln k / ln k),
    ``heavy_ratio_over_rate`` (the path's ratio over that rate at its end), ``heavy_rho_at_max``
    (``d (1 - lam)``: the idle queues a job samples per task), ``heavy_marks`` (the ratio at
    10^30, 10^100, 10^200, 10^300 where the path has them), ``heavy_overlap`` (the largest
    ``|heavy - exact|`` where both exist, and at which N), ``heavy_verdict``, ``heavy_note``."""
    h = heavy.filter(pl.col("queueing_ratio").is_not_null() & pl.col("queueing_ratio").is_finite()).sort("log10_n")
    out = {"heavy_points": h.height, "heavy_verdict": None, "heavy_note": ""}
    if h.height == 0:
        return out
    last = h.row(-1, named=True)
    k = int(last["k"])
    bound, rate = _bound_and_rate(k)
    ratio = float(last["queueing_ratio"])
    marks = {}
    for m in (30, 100, 200, 300):
        hit = h.filter((pl.col("log10_n") - m).abs() < 1e-6)
        if hit.height:
            marks[m] = float(hit["queueing_ratio"][0])
    out.update(heavy_log10_min=float(h["log10_n"][0]), heavy_log10_max=float(last["log10_n"]),
               heavy_ratio_at_max=ratio, heavy_bound_at_max=bound, heavy_rate_at_max=rate,
               heavy_ratio_over_rate=ratio / rate, heavy_k_at_max=k,
               heavy_rho_at_max=float(last["d_real"]) * float(last["one_minus_lam"]), heavy_marks=marks)
    if exact is not None and exact.height:
        both = exact.with_columns(_x10=pl.col(x).cast(pl.Float64).log10()).join(
            h.select(pl.col("log10_n").alias("_h10"), pl.col("queueing_ratio").alias("_h")), how="cross")
        both = both.filter((pl.col("_x10") - pl.col("_h10")).abs() < 1e-9)
        if both.height:
            gaps = (both["queueing_ratio"] - both["_h"]).abs().to_numpy()
            i = int(np.argmax(gaps))
            out["heavy_overlap"] = {"gap_max": float(gaps[i]), "at_log10_n": float(both["_x10"][i]),
                                    "n_points": both.height}
    if top is not None and last["log10_n"] < math.log10(top) - 1e-6:
        out["heavy_note"] = (f"the heavy-traffic form holds only to N = 10^{last['log10_n']:g} on this arm "
                             f"(the path goes to 10^{math.log10(top):g}); no verdict from it")
        return out
    if ratio > bound * (1 + 1e-9):  # cannot happen in the form: a defect, said as such
        out["heavy_note"] = f"ratio {ratio:.4g} above the form's bound {bound:.4g}: not judged"
        return out
    out["heavy_verdict"] = "vanishing"
    out["heavy_note"] = (
        f"jobs end on layers 0-1 at every point from 10^{out['heavy_log10_min']:g} (P(layer 2) < 1e-12), so the "
        f"ratio is at most that of k tasks all at position 2 ({bound:.3g} at 10^{last['log10_n']:g}, k = {k}), "
        f"which falls like ln ln k / ln k to 0; the path's ratio there is {ratio:.3g} = "
        f"{ratio / rate:.3g} x ln ln k / ln k")
    return out


def answer_line(v: dict, sim_text: str | None = None) -> str:
    """One rule's answer in one line: the rule as a formula, the simulations' calibrated
    verdict (to which N; ``sim_text``, the verdict with its evidence, else the verdict alone),
    the mean field along the path (its values at 10^100 and at its end), the asymptotic form
    and the verdict of the limit."""
    rule = v.get("rule_text") or v.get("label")
    if v.get("rule_text") and v.get("b") is not None:
        rule += f", buffer b = {v['b']}"
    head = f"{v.get('variant') or v['label']}: {rule}" if v.get("rule_text") else rule
    n_sim = v.get("n_max")
    sim = sim_text or v.get("verdict")
    if v.get("ratio_at_max_n") is not None and n_sim:
        sim += f", ratio {fmt_ratio(v['ratio_at_max_n'])} at {_sci10(math.log10(n_sim))}"
    parts = [head, f"simulated to N = {_sci10(math.log10(n_sim)) if n_sim else '-'}: {sim}"]
    if v.get("heavy_verdict") is not None:
        marks = v.get("heavy_marks") or {}
        vals = ", ".join(f"{r:.4g} at 10^{m}" for m, r in sorted(marks.items()) if m in (100, 300))
        parts.append(f"mean field along the path to N = {_sci10(v['heavy_log10_max'])}: {vals}; "
                     f"{rate_text(v)}: limit {v['heavy_verdict']}")
    elif v.get("path_verdict") is not None and v.get("path_n_max") is not None:
        parts.append(f"mean field along the path to N = {_sci10(math.log10(v['path_n_max']))}: "
                     f"{v['path_ratio_at_max']:.3g} there, limit {v['path_verdict']}")
    if v.get("drop_at_max_n") is not None:
        parts.append(f"jobs dropped {v['drop_at_max_n']:.3g} at the largest N")
    return " | ".join(parts)


#: ``d (1 - lam)`` up to which the limit is said to fall like ln ln k / ln k (the form's rate for
#: a fixed d (1 - lam) < 1; the single-task rule has d (1 - lam) = 1 and falls faster)
RHO_LIKE = 0.9


def rate_text(v: dict) -> str:
    """How the limit falls at the path's end: like ln ln k / ln k while a job samples fewer idle
    queues than it has tasks (``d (1 - lam) <= RHO_LIKE``; docs/analysis.md), faster otherwise."""
    rho, q = v["heavy_rho_at_max"], v["heavy_ratio_over_rate"]
    if rho <= RHO_LIKE:
        return f"-> 0 like ln ln k / ln k ({q:.2f} x it at the end)"
    return (f"-> 0 faster than ln ln k / ln k ({q:.2g} x it at the end; d (1 - lam) = {rho:.3g}: a job samples "
            "as many idle queues as it has tasks)")


#: a simulated ratio below this is 0 to rounding (E[T] and H_k agree to about 1e-15 relative)
RATIO_ROUNDING = 1e-12


def fmt_ratio(r) -> str:
    """A simulated ratio for a sentence: ``0`` when it is zero to rounding (a loss system whose
    admitted jobs never wait computes 4e-15 from E[T] - H_k), else 3-4 significant digits."""
    if r is None or (isinstance(r, float) and math.isnan(r)):
        return "-"
    if abs(r) < RATIO_ROUNDING:
        return "0"
    return f"{r:.4g}" if abs(r) >= 0.01 else f"{r:.3g}"


#: panel (b) of ``limit_path.png`` holds the arms whose limit ends within this factor of the rate
#: ln ln k / ln k at the path's end (the c / ((1 - lam) ln k) rules, which go like it and overlap
#: in panel (a)); an arm far below it (the single-task rule) stays in panel (a) only
RATE_BAND = 5.0


def _log10n_axis(ax, x_top: float) -> None:
    """log10 N on a log axis: the simulations' decades (10^2..10^7) stay visible beside 10^300."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ticks = [t for t in (2, 3, 5, 7, 10, 15, 30, 100, 300) if t <= x_top * 1.001]
    ax.set_xticks(ticks, [f"$10^{{{t}}}$" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(1.8, x_top * 1.08)


def _rate_of(rows: pl.DataFrame, log10n: np.ndarray, leading_rate) -> np.ndarray:
    """ln ln k / ln k at each row: its own k where it has one, else k = ceil(ln^2 N)."""
    if "k" in rows.columns and rows["k"].null_count() == 0:
        ks = rows["k"].to_numpy().astype(float)
    else:
        ks = np.ceil((np.asarray(log10n, dtype=float) * math.log(10.0)) ** 2)
    return np.array([float(leading_rate(int(k))) for k in ks])


def plot_limit_path(arms: dict, paths: dict, heavies: dict, verdicts: list[dict], rules: dict, outdir,
                    x: str = "n_servers"):
    """``limit_path.png``: per policy with heavy-traffic rows, two panels against log10 N.

    (a) the queueing ratio from the simulations (95% CI) through the exact mean field (dashed)
    to the heavy-traffic limit (solid) at N = 10^300, against the leading rate ln ln k / ln k
    and the form's bound (all k tasks at position 2), k = ceil(ln^2 N) as on the path; (b) the
    same divided by ln ln k / ln k (linear axis), for the arms whose limit ends within a factor
    :data:`RATE_BAND` of the rate: the rules that overlap in (a) past 10^15 drawn apart, each
    flattening to its constant if it goes like the rate. One legend below both panels."""
    from pathlib import Path

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from analysis import style

    limit_ratio, leading_rate = _heavy_traffic()

    policies = [p for p in dict.fromkeys(k[0] for k in arms) if any(h[0] == p for h in heavies)]
    fig = Figure(figsize=(15.0, 4.6 * len(policies) + 1.6), layout="constrained")
    FigureCanvasAgg(fig)
    x_top = max(float(h["log10_n"].max()) for h in heavies.values())
    ref_x = np.linspace(2.0, x_top, 60)
    ref_k = np.ceil((ref_x * math.log(10.0)) ** 2)
    rate = np.array([leading_rate(k) for k in ref_k])
    bound_x = np.linspace(2.0, x_top, 25)
    bound = np.array([limit_ratio(int(np.ceil((v * math.log(10.0)) ** 2)), 0.0)["queueing_ratio"] for v in bound_x])
    bound_rate = np.array([leading_rate(int(np.ceil((v * math.log(10.0)) ** 2))) for v in bound_x])
    axes = []
    for r, policy in enumerate(policies):
        ax = fig.add_subplot(len(policies), 2, 2 * r + 1)
        bx = fig.add_subplot(len(policies), 2, 2 * r + 2)
        axes += [ax, bx]
        ys, bys = [rate, bound], [np.ones(1), bound / bound_rate]
        buffered = {k for k, v in zip(arms, verdicts) if v.get("b") is not None}
        left_out = []
        for key in sorted((k for k in arms if k[0] == policy), key=lambda k: k in buffered):
            label, ci = rules[key]
            c = style.color(ci)
            hv = heavies.get(key)
            hv = hv.filter(pl.col("queueing_ratio") > RATIO_ROUNDING) if hv is not None else None
            # panel (b): an arm whose limit ends near the rate (its ratio over the rate at the end)
            in_b = hv is not None and hv.height > 0 and 1.0 / RATE_BAND <= float(
                hv["queueing_ratio"][-1] / _rate_of(hv.tail(1), hv["log10_n"].tail(1).to_numpy(), leading_rate)[0]
            ) <= RATE_BAND
            if not in_b and (paths.get(key) is not None or (hv is not None and hv.height)):
                left_out.append(label.split(":")[0])
            pts = arms[key].filter(pl.col("queueing_ratio") > RATIO_ROUNDING)
            shown = False
            if pts.height:
                xs = np.log10(pts[x].to_numpy().astype(float))
                y = pts["queueing_ratio"].to_numpy()
                lo = np.clip(y - pts["queueing_ratio_lo"].fill_null(0).to_numpy(), 0, None)
                hi = np.clip(pts["queueing_ratio_hi"].fill_null(0).to_numpy() - y, 0, None)
                ax.errorbar(xs, y, yerr=[np.minimum(lo, 0.9 * y), hi], ls="none", marker=style.marker(ci), ms=4,
                            capsize=2, color=c, label=label)
                shown = True
                ys.append(y)
                if in_b:
                    rt = _rate_of(pts, xs, leading_rate)
                    bx.errorbar(xs, y / rt, yerr=[lo / rt, hi / rt], ls="none", marker=style.marker(ci), ms=4,
                                capsize=2, color=c)
                    bys.append(y / rt)
            ex = paths.get(key)
            if ex is not None:
                ex = ex.filter(pl.col("queueing_ratio") > RATIO_ROUNDING)
                exs = np.log10(ex[x].to_numpy().astype(float))
                ax.plot(exs, ex["queueing_ratio"].to_numpy(), ls="--", lw=1.3, color=c, label=None if shown else label)
                shown = True
                ys.append(ex["queueing_ratio"].to_numpy())
                if in_b:
                    yb = ex["queueing_ratio"].to_numpy() / _rate_of(ex, exs, leading_rate)
                    bx.plot(exs, yb, ls="--", lw=1.3, color=c)
                    bys.append(yb)
            if not shown and arms[key].height:  # a loss system's admitted jobs never wait
                ax.plot([], [], ls="none", marker=style.marker(ci), color=c,
                        label=f"{label}:\n  ratio 0 at every N (off the log axis), no limit on the path")
            if hv is not None:
                hx = hv["log10_n"].to_numpy()
                ax.plot(hx, hv["queueing_ratio"].to_numpy(), ls="-", lw=1.8, color=c, label=None if shown else label)
                ys.append(hv["queueing_ratio"].to_numpy())
                if in_b:
                    yb = hv["queueing_ratio"].to_numpy() / _rate_of(hv, hx, leading_rate)
                    bx.plot(hx, yb, ls="-", lw=1.8, color=c)
                    bys.append(yb)
        ax.plot(ref_x, rate, ls=":", lw=1.6, color="black", label="ln ln k / ln k (the rate), k = ceil(ln^2 N)")
        ax.plot(bound_x, bound, ls="-.", lw=1.0, color="0.45",
                label="all k tasks at position 2 (the heavy-traffic form's bound)")
        ax.plot([], [], ls="--", color="0.3", label="exact mean field (dashed)")
        ax.plot([], [], ls="-", lw=1.8, color="0.3", label="heavy-traffic mean field (solid)")
        ax.plot([], [], ls="none", marker="o", color="0.3", label="simulations, 95% CI (markers)")
        bx.axhline(1.0, ls=":", lw=1.6, color="black")
        bx.plot(bound_x, bound / bound_rate, ls="-.", lw=1.0, color="0.45")
        allv = np.concatenate([np.asarray(v, dtype=float) for v in ys])
        allv = allv[allv > RATIO_ROUNDING]
        style.log_axis(ax, "y", allv if allv.size else None)
        ball = np.concatenate([np.asarray(v, dtype=float) for v in bys])
        ball = ball[np.isfinite(ball)]
        if ball.size:
            lo_b, hi_b = float(ball.min()), float(ball.max())
            pad = 0.06 * (hi_b - lo_b or 1.0)
            bx.set_ylim(max(0.0, lo_b - pad), hi_b + pad)
        for a in (ax, bx):
            _log10n_axis(a, x_top)
            a.set_xlabel("N (log of log N scale; k = ceil(ln^2 N): 22 at 10^2, 53,019 at 10^100, "
                         "477,171 at 10^300)", fontsize=8)
            a.grid(True, which="major", alpha=0.3)
        ax.set_ylabel(style.label("queueing_ratio"))
        bx.set_ylabel("queueing ratio / (ln ln k / ln k)")
        name = style.policy_name(policy)
        ax.set_title(f"(a) {name}: queueing ratio along the path to N = 10^{x_top:g}", fontsize=10)
        note = f"\nleft out (not within {RATE_BAND:g}x of the rate at the path's end, see (a)): {', '.join(left_out)}" \
            if left_out else ""
        bx.set_title(f"(b) {name}: the same divided by ln ln k / ln k (dotted: 1){note}", fontsize=9)
    style.figure_legend(fig, axes, ncol=3)
    p = Path(outdir) / "limit_path.png"
    fig.savefig(p, dpi=110)
    return p
