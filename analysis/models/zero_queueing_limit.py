"""The headline's limit past the float range and its one-line answers.

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

Per-task power-of-(kd) (docs/analysis.md, "Per-task power-of-(kd) along the
path"): its mean field is a closed form at any ``1 - lam``, which the analysis evaluates in logs
(the model's theory ``per_task_ratio``) at the heavy-traffic rows' N (:func:`far_path`), past the
exact path's end, and the claim comes from the derived forms: vanishing like ``lam^(kd)`` on rules
with ``d (1 - lam) ln k`` bounded below, growing without bound like ``ln(1 / (1 - lam)) / (ln(kd)
H_k)`` with constant d. The batch policies with constant d (no heavy-traffic rows: jobs reach
layer 2) get the derived lower bound ``E[Q] / (lam H_k) - 1``, which grows without bound
(``batch_queue_bound``). Every other arm's limit (the exact path's extrapolation,
:func:`analysis.models.zero_queueing.verdicts.path_verdict`) is *undecided beyond* the path's end
(:func:`settle_limit`): nothing carries it further.
"""
from __future__ import annotations

import ast
import math

import numpy as np
import polars as pl

from analysis import declared
from analysis.fmt import positive as _positive
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
                       x: str = "n_servers", rule: str | None = None) -> dict:
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
    if "policy" in h.columns and h["policy"][0] == PER_TASK:
        out.update(_per_task_claim(h, rule))
        return out
    if top is not None and last["log10_n"] < math.log10(top) - 1e-6:
        out["heavy_note"] = (f"the heavy-traffic form holds only to N = 10^{last['log10_n']:g} on this arm "
                             f"(the path goes to 10^{math.log10(top):g}); no verdict from it")
        return out
    if ratio > bound * (1 + 1e-9):  # cannot happen in the form: a defect, said as such
        out["heavy_note"] = f"ratio {ratio:.4g} above the form's bound {bound:.4g}: not judged"
        return out
    out["heavy_verdict"] = "vanishing"
    out["limit_carried_by"] = "the heavy-traffic form (jobs on layers 0-1, bounded by k tasks at position 2)"
    out["heavy_note"] = (
        f"jobs end on layers 0-1 at every point from 10^{out['heavy_log10_min']:g} (P(layer 2) < 1e-12), so the "
        f"ratio is at most that of k tasks all at position 2 ({bound:.3g} at 10^{last['log10_n']:g}, k = {k}), "
        f"which falls like ln ln k / ln k to 0; the path's ratio there is {ratio:.3g} = "
        f"{ratio / rate:.3g} x ln ln k / ln k")
    return out


PER_TASK = "pod_per_task"
BATCH = ("batch_filling", "batch_sampling")
#: ``k d (1 - lam)`` (the idle queues a task samples) from which lam^(kd) is below e^-30 (1e-13)
IDLE_PROBES_MIN = 30.0


def _theory(name: str):
    return declared.theory("dispatch", name)


def far_path(row: dict, arm_heavy: pl.DataFrame, heavy: pl.DataFrame, exact: pl.DataFrame | None) -> pl.DataFrame:
    """The limit rows past the exact path for one arm: its own heavy-traffic rows (``arm_heavy``)
    if it has any; for pod_per_task, whose mean field is a closed form at any 1 - lam, the exact
    values in logs (theory ``per_task_ratio``) at the N of the run's heavy-traffic rows (any arm:
    ``k`` and ``one_minus_lam`` must be one value per N), with the d of the same variant's rows
    there, else the exact path's d where it is the same at every N (a constant rule; the cap d <=
    N/k does not bind from 10^10). An empty frame where neither applies."""
    if arm_heavy.height or row.get("policy") != PER_TASK or heavy.height == 0 or exact is None or exact.height == 0:
        return arm_heavy
    coords = heavy.group_by("log10_n").agg(pl.col("k").unique().alias("_k"),
                                           pl.col("one_minus_lam").unique().alias("_e")).sort("log10_n")
    if coords.height == 0 or (coords["_k"].list.len() != 1).any() or (coords["_e"].list.len() != 1).any():
        return arm_heavy.clear()
    d_of: dict[float, float] = {}
    if "variant" in heavy.columns and row.get("variant") is not None:
        for r in heavy.filter(pl.col("variant") == row["variant"]).iter_rows(named=True):
            if r.get("d_real") is not None:
                d_of[float(r["log10_n"])] = float(r["d_real"])
    ds = exact["d"].drop_nulls().unique() if "d" in exact.columns else pl.Series([])
    const_d = float(ds[0]) if len(ds) == 1 else None
    ratio = _theory("per_task_ratio")
    rows = []
    for r in coords.iter_rows(named=True):
        lx, k, eps = float(r["log10_n"]), int(r["_k"][0]), float(r["_e"][0])
        d = d_of.get(lx, const_d)
        if d is None or eps is None:
            continue
        d = min(d, math.floor(10.0 ** min(lx, 300.0) / k))
        res = ratio(k, d, eps)
        rows.append({"policy": PER_TASK, "engine": "meanfield (closed form in logs)", "log10_n": lx, "k": k,
                     "d_real": d, "one_minus_lam": eps, "queueing_ratio": float(res["queueing_ratio"]),
                     "mean_response": float(res["mean_response"])})
    return pl.DataFrame(rows) if rows else arm_heavy.clear()


def _per_task_claim(h: pl.DataFrame, rule: str | None) -> dict:
    """The limit of a pod_per_task arm from its rows to the path's end and the derived forms
    (docs/analysis.md, "Per-task power-of-(kd) along the path")."""
    form = _theory("per_task_form")
    forms = [form(int(r["k"]), float(r["d_real"]), float(r["one_minus_lam"])) for r in h.iter_rows(named=True)]
    last, end = h.row(-1, named=True), float(h["log10_n"][-1])
    probes = [f["idle_probes"] for f in forms]
    grow = [f["growing_form"] for f in forms]
    marks = ", ".join(f"{r['queueing_ratio']:.3g} at 10^{r['log10_n']:g}" for r in h.iter_rows(named=True)
                      if round(r["log10_n"]) in (15, 30, 100, 200, 300) and abs(r["log10_n"] - round(r["log10_n"])) < 1e-6)
    out: dict = {}
    if rule in ("Theta", "omega") and probes[-1] >= IDLE_PROBES_MIN and probes[-1] > probes[0]:
        out.update(heavy_verdict="vanishing", limit_carried_by="derived form lam^(kd)",
                   heavy_note=(f"derived: a job waits only when one of its tasks samples no idle queue, so the ratio is "
                               f"lam^(kd) (1 + O(k lam^(kd))) ~ e^-(k d (1 - lam)); k d (1 - lam) = {probes[-1]:.3g} at "
                               f"10^{end:g} and, with d (1 - lam) ln k bounded below ({rule} rule), at least c k / ln k "
                               f"-> infinity; closed form {last['queueing_ratio']:.3g} at 10^{end:g}"),
                   limit_text=(f"-> 0 like lam^(kd) = e^-(k d (1 - lam)) (derived; k d (1 - lam) = {probes[-1]:.3g} "
                               f"at 10^{end:g})"))
    elif rule == "constant" and all(b > a for a, b in zip(grow, grow[1:])):
        little = forms[-1]["little_bound"]
        out.update(heavy_verdict="not vanishing", limit_carried_by="derived form ln(1/(1-lam)) / (ln(kd) H_k)",
                   heavy_note=(f"derived: with d constant a task waits behind about x = ln(1/(1 - lam)) / ln(k d) "
                               f"tasks ({forms[-1]['levels_ahead']:.3g} at 10^{end:g}), and the ratio grows without "
                               f"bound like x / H_k ({grow[0]:.3g} at 10^{h['log10_n'][0]:g}, {grow[-1]:.3g} at "
                               f"10^{end:g}; 0.075 ln N / (ln ln N)^2 on lam = 1 - N^-0.3, k = ln^2 N, d = 2); exact "
                               f"mean field (closed form) {marks}; a task's mean sojourn alone gives ratio >= "
                               f"{little:.3g} at 10^{end:g}"),
                   limit_text=(f"grows without bound like ln(1/(1-lam)) / (ln(kd) H_k) (derived; closed form {marks})"))
    else:
        out.update(heavy_verdict="undecided", limit_carried_by=None,
                   heavy_note=(f"undecided beyond N = 10^{end:g}: the closed form reaches there ({marks}); no derived "
                               f"form applies to a rule of class {rule!r}"),
                   limit_text=f"undecided beyond N = 10^{end:g} ({marks})")
    return out


def settle_limit(v: dict, exact: pl.DataFrame | None, heavy: pl.DataFrame, x: str = "n_servers") -> dict:
    """The limit claim of an arm that no heavy-traffic or closed-form rows carried to the path's
    end (``heavy_verdict`` None): the exact path's verdict is an extrapolation from its last
    decades, so it is replaced by what carries a claim past that end, or by *undecided beyond N
    = <its end>*. Carried: a fixed system (lam and d the same at every N: the mean field is its
    N -> infinity limit); a batch policy with constant d, growing without bound by the derived
    bound ``E[Q] / (lam H_k) - 1`` (theory ``batch_queue_bound``). Returns the fields to update."""
    if v.get("heavy_verdict") is not None or v.get("path_verdict") is None or v.get("path_n_max") is None:
        return {}
    end = math.log10(v["path_n_max"])
    rule = v.get("rule_class")
    if rule == "fixed":
        return {"limit_carried_by": "the mean field of a fixed system (lam and d do not change with N)"}
    if v.get("policy") in BATCH and rule == "constant" and exact is not None and _lam_to_one_k_polylog(exact, x):
        bound = _theory("batch_queue_bound")
        top = exact.sort(x).row(-1, named=True)
        d = float(top["d"])
        b_end = bound(int(top["k"]), d, 1.0 - float(top["lam"]), v["policy"])
        at_end = (float(top["mean_queue"]) / (float(top["lam"]) * b_end["h_k"]) - 1.0
                  if top.get("mean_queue") is not None else None)
        far = ""
        if heavy.height:
            c = heavy.sort("log10_n").row(-1, named=True)
            b = bound(int(c["k"]), d, float(c["one_minus_lam"]), v["policy"])
            far = f", {b['bound']:.3g} at 10^{c['log10_n']:g}"
        base = "d + 1" if declared.policy("dispatch", v["policy"]).fills else "d"
        note = (f"derived: grows without bound: ratio >= E[Q] / (lam H_k) - 1 (a job's last task ends no earlier "
                f"than the mean of its tasks) and, d constant, E[Q] >= sum_i (1 - (1 - lam) g_i)^+ ~ "
                f"ln(1/(1 - lam)) / ln({base}), which grows without bound as lam -> 1 while ln k does not keep up"
                + (f"; the bound with the exact E[Q] is {at_end:.3g} at 10^{end:g}" if at_end is not None else "")
                + f"; the derived bound {b_end['bound']:.3g} "
                  f"at 10^{end:g}{far} (its rate constant, not the bound's, is not derived)")
        return {"path_verdict": "not vanishing", "path_note": note, "path_level": None, "path_level_exponent": None,
                "limit_carried_by": "derived lower bound E[Q] / (lam H_k) - 1",
                "limit_text": f"grows without bound (derived lower bound E[Q] / (lam H_k) - 1{far})"}
    return {"path_verdict": "undecided", "path_level": None, "path_level_exponent": None, "limit_carried_by": None,
            "path_note": (f"undecided beyond N = 10^{end:g}: the exact path ends there and nothing carries a limit "
                          f"past it (its last decades: {v.get('path_verdict')}, {v.get('path_note')})"),
            "limit_text": f"undecided beyond N = 10^{end:g}"}


def _lam_to_one_k_polylog(exact: pl.DataFrame, x: str) -> bool:
    """What the batch policies' derived growth needs of the path, checked on its rows: 1 - lam
    falls like a power of N (log-log slope below -0.05 over the first and the second half alike),
    and ``ln k / ln(1 / (1 - lam))`` falls (ln k does not keep up with ln(1 / (1 - lam)))."""
    if not {"lam", "k"} <= set(exact.columns):
        return False
    p = exact.filter(pl.col("lam").is_not_null() & (pl.col("lam") < 1.0) & pl.col("k").is_not_null()).sort(x)
    if p.height < 4:
        return False
    ln_n = np.log(p[x].to_numpy().astype(float))
    ln_e = np.log1p(-p["lam"].to_numpy().astype(float))
    half = p.height // 2
    slopes = [(ln_e[j] - ln_e[i]) / (ln_n[j] - ln_n[i]) for i, j in ((0, half), (half, p.height - 1))]
    ratio = np.log(p["k"].to_numpy().astype(float)) / -ln_e
    return max(slopes) < -0.05 and ratio[-1] < ratio[half] < ratio[0]


#: the decades at which the report gives the limit along the path (where the path has them)
MARK_DECADES = (15, 100, 300)


def path_marks(exact: pl.DataFrame | None, heavy: pl.DataFrame | None, x: str = "n_servers") -> dict:
    """The limit along one arm's whole path (the exact mean field, then the heavy-traffic rows
    past its end): ``path_marks`` ({decade: ratio} at :data:`MARK_DECADES` where the path has a
    point there, the exact value where both have one) and ``path_peak`` ({"log10_n", "ratio"}:
    the path's largest ratio where it lies strictly inside the path, a rise that turns; None
    otherwise). Only the path's own points: a peak between two of them is not interpolated."""
    pts: dict[float, float] = {}
    if heavy is not None and heavy.height:
        for r in heavy.iter_rows(named=True):
            q = r["queueing_ratio"]
            if q is not None and math.isfinite(q):
                pts[round(float(r["log10_n"]), 6)] = float(q)
    if exact is not None and exact.height:
        for r in exact.iter_rows(named=True):
            q = r["queueing_ratio"]
            if q is not None and math.isfinite(q) and r[x] is not None:
                pts[round(math.log10(float(r[x])), 6)] = float(q)
    if not pts:
        return {}
    xs = sorted(pts)
    marks = {m: pts[float(m)] for m in MARK_DECADES if float(m) in pts}
    i = max(range(len(xs)), key=lambda j: pts[xs[j]])
    peak = {"log10_n": xs[i], "ratio": pts[xs[i]]} if 0 < i < len(xs) - 1 else None
    return {"path_marks": marks, "path_peak": peak}


def reading(verdicts: list[dict]) -> str | None:
    """The sentence that reconciles simulations and limit, from the run's numbers: which rules
    d = Theta(1/((1-lam) ln k)) (``rule_class`` Theta, the c/((1-lam) ln k) rules) the limit along
    the path carries to the heavy-traffic form, what it says of them and at what rate, and how
    far the simulations sit from the mean field at the largest N they share (relative gap,
    |sim - limit| / limit), the rules that sample as many idle queues as they have tasks
    (``d (1 - lam) > RHO_LIKE``) apart. None where no Theta rule has a heavy-traffic verdict."""
    # a rule whose d (1 - lam) reaches RHO_LIKE is the single-task kind (a path too short to
    # tell omega from Theta may call it Theta): said apart, below
    # the batch policies' heavy-traffic paths only (pod_per_task's closed-form path falls like
    # lam^(kd), far below its simulations: said in its own line, not in this sentence)
    theta = [v for v in verdicts if v.get("rule_class") == "Theta" and _heavy_form(v)
             and v["heavy_rho_at_max"] <= RHO_LIKE]
    if not theta:
        return None
    words = {v["heavy_verdict"] for v in theta}
    if words == {"vanishing"}:
        head = ("every c/((1-lam) ln k) rule reaches zero queueing delay in the mean-field limit, but only like "
                "ln ln k / ln k: no simulation can show it")
    else:
        head = "the c/((1-lam) ln k) rules' limit along the path: " + ", ".join(sorted(words))

    def rel(v):
        g = (v.get("gaps") or [None])[-1]
        if g is None or not g.get("limit"):
            return None
        return g["n"], (g["sim"] - g["limit"]) / g["limit"]

    near = [r for r in map(rel, theta) if r is not None]
    if not near:
        return f"{head}."
    n = max(x for x, _ in near)
    tail = f". To {_sci10(math.log10(n))} the simulations sit within {_pct(max(abs(r) for _, r in near))} of the mean field on those rules"
    fast = {}
    for v in verdicts:
        if _heavy_form(v) and v["heavy_rho_at_max"] > RHO_LIKE and rel(v) is not None:
            fast.setdefault(v.get("variant") or v["label"], []).append(rel(v)[1])
    extra = []
    for name, rs in fast.items():
        lo, hi = min(rs), max(rs)
        way = "above" if lo > 0 else "below" if hi < 0 else "off"
        size = _pct(max(abs(lo), abs(hi)))
        extra.append(f"{name} {size} {way} it" + (", a finite-N excess" if way == "above" else ""))
    return f"{head}{tail}" + (f" ({'; '.join(extra)})" if extra else "") + "."


def _heavy_form(v: dict) -> bool:
    """The arm's limit is carried by the heavy-traffic form (the batch policies' engine)."""
    return v.get("heavy_verdict") is not None and str(v.get("limit_carried_by") or "").startswith("the heavy-traffic form")


def _pct(r: float) -> str:
    """A relative gap as a percentage to 1-2 significant digits: 0.2%, 0.006%, 39%."""
    p = 100 * r
    return f"{p:.2g}%" if p < 10 else f"{p:.0f}%"


def answer_line(v: dict, sim_text: str | None = None) -> str:
    """One rule's answer in one line (the report's): the rule as a formula; what the simulations
    show over their range (the trend, the ratio at the largest N, and ``sim_text``, the rival
    test on the points, which claims no limit); how they sit against the limit path; the limit
    claim with what carries it, and the path's values (claims.py; module docstring)."""
    rule = v.get("rule_text") or v.get("label")
    if v.get("rule_text") and v.get("b") is not None:
        rule += f", buffer b = {v['b']}"
    head = f"{v.get('variant') or v['label']}: {rule}" if v.get("rule_text") else rule
    n_sim = v.get("n_max")
    sim = v.get("trend_text") or "-"
    if v.get("ratio_at_max_n") is not None and n_sim:
        sim += f", ratio {fmt_ratio(v['ratio_at_max_n'])} at {_sci10(math.log10(n_sim))}"
    if sim_text:
        sim += f" (rival test on these points: {sim_text})"
    parts = [head, f"simulated: {sim}", f"against the limit path: {v.get('follows_text') or '-'}"]
    limit = f"limit: **{v.get('limit') or '-'}**"
    if v.get("limit_carrier"):
        limit += f", carried by {v['limit_carrier']}"
    if v.get("limit_text"):
        limit += f"; {v['limit_text']}"
    elif v.get("heavy_verdict") is not None:
        marks = v.get("heavy_marks") or {}
        vals = ", ".join(f"{r:.4g} at 10^{m}" for m, r in sorted(marks.items()) if m in (100, 300))
        limit += f"; mean field along the path to N = {_sci10(v['heavy_log10_max'])}: {vals}; {rate_text(v)}"
    elif v.get("path_n_max") is not None:
        limit += f"; mean field {_positive(v['path_ratio_at_max'])} at N = {_sci10(math.log10(v['path_n_max']))}"
    parts.append(limit)
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
        ax.plot([], [], ls="-", lw=1.8, color="0.3",
                label="past the exact path (solid): the heavy-traffic mean field; per task: its closed form in logs")
        ax.plot([], [], ls="none", marker="o", color="0.3", label="simulations, 95% CI (markers)")
        if len(bys) > 2:
            bx.axhline(1.0, ls=":", lw=1.6, color="black")
            bx.plot(bound_x, bound / bound_rate, ls="-.", lw=1.0, color="0.45")
        else:  # no rule of this policy ends near the rate: an empty panel says so instead
            bx.text(0.5, 0.5, "no rule of this policy ends within "
                    f"{RATE_BAND:g}x of ln ln k / ln k:\nthe limits are in (a) and in the report", ha="center",
                    va="center", transform=bx.transAxes, fontsize=10, color="0.3")
            bx.set_yticks([])
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
