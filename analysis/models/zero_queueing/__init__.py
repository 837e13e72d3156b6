"""Zero queueing delay for parallel jobs: the queueing ratio against N, per arm, with a verdict.

The metric (Weng & Wang) is the queueing ratio ``(E[T] - H_k) / H_k`` of a job's mean response
time over its inherent delay ``E[max of k Exp(1)] = H_k``. Zero asymptotic queueing delay means
it tends to 0 as N grows. Per arm (policy, engine and every parameter that does not change
along N, e.g. the variant giving the rule for d), replications are combined into a mean with a
95% interval (:func:`analysis.aggregate.aggregate`), and the ratio's behaviour in N is judged.

Two claims per arm, kept apart (:mod:`.claims`; docs/analysis.md, "Two claims, kept apart"):
what the simulations show over their range (``trend``, ``follows``: the trend and the relative
gap to the limit path) and the limit as N -> infinity (``verdict`` = ``limit``, with
``limit_carrier``), which only the limit path carries (the heavy-traffic form, a derived form or
bound), else *undecided beyond* the path's end or the largest simulated N.

The rival test on the simulated points (``range_test``, ``range_test_note``; a description of
the range in its words, which class of rivals the points exclude: ``verdicts.RANGE_TESTS``, never
a limit claim), per arm, over the points with a ratio and an SE > 0 (the outcomes below are
those of :func:`verdict`, which the analysis puts in those words, :func:`verdicts.range_test`):

1. ``vanishing`` if the ratio's 95% interval lies below ``RATIO_ZERO`` (0.001) at every point of
   the upper half (the last ``max(3, ceil(n/2))`` points): zero queueing delay reached within
   the resolution of the run, on several points (one tiny last point decides nothing).
2. Otherwise, with 4 points or more, the rivals' verdict of :mod:`analysis.asymptotics`:
   descriptions to zero (powers of N, ln N and ln ln N, humps that vanish after a peak inside
   or beyond the range, and the model's own: the heavy-traffic ``a ln ln k / ln k`` at the
   arm's own k and the arm's limit path where its limit is carried, :func:`verdicts.arm_rivals`)
   against descriptions with a level (a floor plus a power, a logarithmic decay or a hump, a
   level approached from below, flat, growing), calibrated by a parametric bootstrap
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

The package is split by role: :mod:`.fit` (M0, M1, the control variate), :mod:`.verdicts`
(the rules above, along the limit path, and their words), :mod:`.arms` (arm keys and labels),
:mod:`.plots` and :mod:`.report`; this module runs them (:func:`analyze_zero_queueing`) and
keeps every name the single module had (``analysis.zero_queueing`` re-exports it).
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from analysis.aggregate import LIMIT_ENGINES, aggregate, check_params
from analysis.fit import arm_columns
from analysis.models import zero_queueing_limit as limit_claims
from analysis.models.zero_queueing import claims
from analysis.models.zero_queueing.arms import _arm_key, _constant, _fixed_text, _key_label, _label, _rule_labels  # noqa: F401
from analysis.models.zero_queueing.fit import (  # noqa: F401
    _B_GRID,
    CV_METHOD,
    CV_METRICS,
    CV_MIN_REP,
    FLOOR_B_MIN,
    LEVEL,
    _profile_rss,
    control_variate,
    cv_fit,
    floor_fit,
    power_fit,
)
from analysis.models.zero_queueing.plots import PER_TASK_NOTE, PLOT_RATIO_MIN, _plots  # noqa: F401
from analysis.models.zero_queueing.report import (
    RULE_COVERAGE,  # noqa: F401
    _report,
)
from analysis.models.zero_queueing.verdicts import (  # noqa: F401
    CONVERGES,
    FRAGILE_NAMED,
    INCONCLUSIVE,
    NOT_VANISHING,
    P_FLOOR,
    PATH_RISE_LEVEL,
    PATH_STEP_DECADES,
    RATIO_ZERO,
    SLOPE_FLAT,
    UNDECIDED,
    VANISHING,
    VERDICTS,
    _drop_text,
    _drops,
    _f,
    _fragile_text,
    _gaps,
    _nearest,
    _resolution_reached,
    _sim_text,
    _tail_size,
    answer_lines,
    arm_rivals,
    console_lines,
    hypotheses,
    path_verdict,
    range_test,
    range_word,
    rule_class,
    verdict,
)

METRICS = ("queueing_ratio", "mean_response", "drop_prob", "frac_within_h")


#: parameters that set a simulation's run length, which limit rows do not have
RUN_LENGTH = ("time", "events")


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
    own = [p for p in params if p not in limit_claims.PATH_COORDS]  # the heavy-traffic rows' coordinates
    arm = arm_columns(ok, own, x) if ok.height else [p for p in own if p != x]
    arm = [p for p in arm if p != x]
    heavy = frame.filter(pl.col("engine") == limit_claims.HEAVY_ENGINE)
    top = (((context or {}).get("limit_path") or {}).get("heavy_traffic") or {}).get("n_servers_max")
    limits = frame.filter(pl.col("engine").is_in(list(LIMIT_ENGINES)) & (pl.col("engine") != limit_claims.HEAVY_ENGINE))
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
        v = {**row, "label": _label(row, arm)}
        v["rule_text"] = limit_claims.rule_text(row.get("variant"), context)
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
        if v.get("path_n_max") is not None:  # the exact path's end, kept when the heavy-traffic rows carry it on
            v.update(exact_n_max=v["path_n_max"], exact_ratio_at_max=v["path_ratio_at_max"])
        hrows = limit_claims.far_path(row, heavy.filter(hcond) if heavy.height else heavy, heavy, paths.get(key))
        if hrows.height:
            heavies[key] = hrows.sort("log10_n")
            v.update(limit_claims.heavy_path_verdict(hrows, paths.get(key), top, x, rule=v.get("rule_class")))
            if v.get("heavy_verdict") is not None:  # the limit's verdict comes from the form
                v.update(path_engine=f"{v.get('path_engine', 'meanfield')} + {limit_claims.HEAVY_ENGINE}",
                         path_verdict=v["heavy_verdict"], path_note=v["heavy_note"],
                         path_n_max=10.0 ** v["heavy_log10_max"], path_ratio_at_max=v["heavy_ratio_at_max"],
                         path_level=None, path_level_exponent=None, path_top_slope=v.get("path_top_slope"))
        v.update(limit_claims.settle_limit(v, paths.get(key), heavy, x))  # no limit extrapolated past the path's end
        v.update(limit_claims.path_marks(paths.get(key), heavies.get(key), x))
        # the rival test on the simulated points, with the model's own rivals: the heavy-traffic
        # form at the arm's own k, and the limit path where its limit claim is carried
        v.update(verdict(pts, x, seed=_arm_seed(sims.filter(cond)), rivals=arm_rivals(pts, paths.get(key), v, x)))
        # two claims kept apart (claims.py): the simulations' trend over their range and how they
        # follow the limit path; the limit claim is the path's, named with what carries it. The
        # rival test on the simulated points stays as ``range_test``, in the words of the range
        # (which class of rivals the points exclude): its hump rivals stop at a width, so it
        # carries no limit past the largest N
        v["n_min"] = pts[x].min() if pts.height else None
        v.update(claims.trend(v))
        v.update(claims.follows(v))
        v.update(claims.limit_claim(v))
        v["range_test"], v["range_test_note"] = range_test(v)
        v["unfragile_verdict"] = range_word(v.get("unfragile_verdict"))
        v["loo"] = [{**d, "outcome": range_word(d["outcome"])} for d in v.get("loo") or []]
        del v["verdict"], v["note"]
        v["verdict"] = v["limit"]
        verdicts.append(v)

    rules = _rule_labels(arms, arm, verdicts)
    plots = _plots(arms, arm, outdir, x, paths, rules)
    if heavies:
        plots.append(limit_claims.plot_limit_path(arms, paths, heavies, verdicts, rules, outdir, x))
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

    return {"report": report, "plots": plots, "metrics": metrics, "verdicts": verdicts,
            "summary": summary, "verdicts_json": vpath, "arm_params": arm,
            "verdict_lines": answer_lines(verdicts), "console_lines": console_lines(verdicts)}


#: the analyses this module serves (``extra_analyses`` names; analysis.models collects them)
