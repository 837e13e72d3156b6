"""The report (``report.md``) of the zero-queueing analysis.
"""
from __future__ import annotations

from pathlib import Path

from analysis import asymptotics
from analysis.fmt import interval as _interval
from analysis.fmt import num_nan as _num
from analysis.fmt import positive as _positive
from analysis.fmt import pow10 as _sci10
from analysis.fmt import sci as _sci
from analysis.models import zero_queueing_limit as limit_claims
from analysis.models.zero_queueing.fit import CV_METHOD, CV_MIN_REP
from analysis.models.zero_queueing.verdicts import (
    RANGE_ALIKE,
    RANGE_BELOW,
    RANGE_LEVELS_OUT,
    RANGE_ONE_POINT,
    RANGE_ZERO_OUT_FLAT,
    RANGE_ZERO_OUT_LEVEL,
    RATIO_ZERO,
    _drop_text,
    answer_lines,
    hypotheses,
)

#: what each class of rule means for the two theorems (docs/analysis.md)
RULE_COVERAGE = {
    "fixed": "lam and d fixed while N grows: one system, no rule of N (the theorems need lam -> 1)",
    "constant": "constant d: Theorem 3-4's lower bound (d = e^o(log N / log k)): no zero queueing",
    "Theta": "d = Theta(1/((1-lam) log k)): the boundary, covered by neither theorem",
    "omega": "d = omega(1/((1-lam) log k)): Theorem 2's rule (zero queueing, under its hypotheses)",
    "-": "-",
}


def _report(outdir, sweep_name, arms, arm, verdicts, plots, x, limit_paths=None, heavies=None) -> Path:
    limit_paths = limit_paths or {}
    heavies = heavies or {}
    lines = [f"# Sweep `{sweep_name}`: zero queueing delay for parallel jobs", "",
             "## The answer, one line per rule for d", "",
             "Each line keeps two claims apart. What the simulations show *over their range*: the trend of "
             "the ratio (a power-law rate with its 95% interval), its value at the largest N, and how it sits "
             "against the limit path at the largest N both have (the gap relative to the limit's ratio, 95% "
             "interval; *on the limit path* when that interval lies within +-5%). And the *limit* as N -> "
             "infinity, which only the limit path carries, named with what carries it (the heavy-traffic "
             "form, a derived form or bound); where nothing carries it past the path's end, *undecided beyond* "
             "that N. The rival test on the simulated points (below) describes the range in its words (which "
             "class of rivals the points exclude); it claims no limit: its humps that turn beyond the largest "
             "N stop at a width, and a sequence that turns more slowly is not among them.", ""]
    for line in answer_lines(verdicts):
        lines.append(f"- {line.strip()}" if line.startswith("  ") else f"\n**{line}**\n")
    text = limit_claims.reading(verdicts)
    if text:  # the sentence the console ends its answer with
        lines += ["", f"Reading: {text}"]
    # a sweep that names a service law (docs/service.md): the inherent delay is the law's
    ratio = ("Queueing ratio = (E[T] - E[T*]) / E[T*], E[T*] the mean of the largest of k task sizes "
             "of the arm's service law (H_k for exponential sizes; docs/service.md)." if "service" in arm
             else "Queueing ratio = (E[T] - H_k) / H_k.")
    lines += ["", "## How the rival test on the simulated points is judged (a description of the range, not a limit)", "",
             f"{ratio} Rule: `analysis/asymptotics.py` via "
             "`analysis/models/zero_queueing.py` (docs/analysis.md). Rivals are fitted by weighted least "
             "squares on the ratio (weights 1/se^2) to the same points: to zero (a N^b, a/(ln N)^p, "
             "a ln ln N / ln N, a/(ln ln N)^q, humps that vanish after a peak inside or beyond the range, at most "
             f"{asymptotics.HUMP_WIDTH_MAX:g} wide in ln ln N, and the model's own: a ln ln k / ln k at the arm's k, "
             "the limit path where its limit is carried, alone and plus a finite-N gap g N^b) and with a level "
             "(c0 + a N^b, c0 + a/(ln N)^p, c0 - a N^b, c0 + a hump, with a floor carrying at least half the "
             "last fitted value; a N^b with b >= 0). "
             "D = (chi2 of the best to zero - chi2 of the best with a level) / residual scale, calibrated by "
             "a parametric bootstrap from each best rival at the arm's N and SEs (seeded by the arm's task "
             f"seeds): p(zero) = P(D* >= D) from the rival to zero, p(level) = P(D* <= D) from the rival with "
             f"a level; a class is excluded below p = {asymptotics.ALPHA:g}. *{RANGE_LEVELS_OUT}*: only the "
             f"levels; *{RANGE_ZERO_OUT_LEVEL}*: only the decays to zero, and a floor decays to its level "
             f"(else *{RANGE_ZERO_OUT_FLAT}*); *{RANGE_ALIKE}*: neither excluded; *{RANGE_ONE_POINT}*: one "
             "point left out moves it across, or the largest N alone decides (fragile). Shortcut: "
             f"*{RANGE_BELOW}* if the ratio's 95% CI is below {RATIO_ZERO:g} at every point of the upper "
             "half. *level*: c0 of the best floor with its 95% profile interval over every floor rival. "
             "*slope*: b of r = a N^b on all points; *upper half*: on the last half of the points "
             "(descriptions, not the rule).", "",
             "The limit along the path: where the sweep carries it past the exact mean field with the "
             "heavy-traffic engine (docs/analysis.md, 'Batch-filling in heavy traffic') to the path's end, jobs "
             "end on layers 0-1 at every point (the engine refuses a point where reaching layer 2 has a bound "
             "above 1e-12), so the ratio is at most that of k tasks all at position 2, (E[max of k Gamma(2,1)] "
             "- H_k) / H_k, which falls like ln ln k / ln k to 0: the limit is *vanishing*, at that rate. "
             "Per-task power-of-(kd) by its closed form in logs to the same end and the derived forms; the batch "
             "policies with constant d by a derived lower bound; any other arm: *undecided beyond* the exact "
             "path's end (docs/analysis.md).", "",
             "## Rival test on the simulated points", "",
             "| arm | points | ratio at largest N [95% CI] | slope [95% CI] | upper half: from N, slope [95% CI] "
             "| floor c0 [95% CI] | rivals: with a level vs to zero | p(zero), p(level) | rival test (range only) | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        slope = "-" if v["slope"] is None else f"{v['slope']:.3f} [{v['slope_lo']:.3f}, {v['slope_hi']:.3f}]"
        tail = "-" if v.get("tail_slope") is None else (
            f"{v['tail_min_n']:g}: {v['tail_slope']:.3f} [{v['tail_slope_lo']:.3f}, {v['tail_slope_hi']:.3f}]")
        level = "-" if v.get("level") is None else f"{_num(v['level'])} {_interval(v['level_lo'], v['level_hi'], 4)}"
        formula = {x["name"]: x["formula"] for x in v.get("rivals") or []}
        rivals = "-" if v.get("best_zero") is None else f"{formula[v['best_level']]} vs {formula[v['best_zero']]}"
        ps = "-" if v.get("p_zero") is None else f"{v['p_zero']:.2g}, {v['p_level']:.2g}"
        # the interval to as many digits as show its width (a CI of +-0.00002 on 0.3293 is not [0.3293, 0.3293])
        # and none about a ratio that is 0 to rounding (a loss system's admitted jobs never wait)
        ratio = limit_claims.fmt_ratio(v['ratio_at_max_n'])
        if ratio not in ("0", "-"):
            ratio += f" {_interval(v.get('ratio_lo_at_max_n'), v['ratio_hi_at_max_n'], 4)}"
        lines.append(f"| {v['label']} | {v['n_points']} | {ratio} | {slope} | {tail} | {level} | {rivals} | {ps} "
                     f"| {v['range_test']} | {v['range_test_note']}{_drop_text(v)} |")
    if any(v.get("path_verdict") is not None for v in verdicts):
        lines += ["", "## The answer per rule", "",
                  "What the simulations and the limit along the same path say (the rule for the path's "
                  "verdict is in docs/analysis.md: the log-log slope over its last decade, and where the fall "
                  "or rise slows geometrically, the level c0 of r = c0 + a N^b through the points at N_max/100, "
                  "N_max/10 and N_max). The gap is simulated minus limit at the N where both exist.", "",
                  "| arm | simulations: trend over their range | limit: ratio at largest N | limit: at "
                  + ", ".join(f"10^{m}" for m in limit_claims.MARK_DECADES) + "; peak | limit: slope, last decade "
                  "| limit: level | limit: verdict | gap at largest simulated N [95% CI] | gap as N grows | rule for d |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v in verdicts:
            if v.get("path_verdict") is None:
                continue
            g = (v.get("gaps") or [None])[-1]
            gap = "-" if g is None else f"{_num(g['gap'], 3)} {_interval(g['lo'], g['hi'])} at {_sci(g['n'])}"
            trend = "-" if v.get("gap_verdict") is None else f"{v['gap_verdict']}: {v.get('gap_note') or ''}"
            marks = v.get("path_marks") or {}
            peak = v.get("path_peak")
            at = " / ".join(_positive(marks.get(m), 4) for m in limit_claims.MARK_DECADES) + (
                "" if peak is None else
                f"; peak {_positive(peak['ratio'], 4)} at {_sci10(peak['log10_n'])} (of the path's points)")
            lines.append(
                f"| {v['label']} | {v.get('trend_text') or '-'} | {_positive(v['path_ratio_at_max'], 4)} at "
                f"{'-' if v.get('path_n_max') is None else _sci(v['path_n_max'])} | {at} "
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
        hyps = [(r, hypotheses(r)) for r in rows.iter_rows(named=True)]
        if not any(h is not None for _, h in hyps):
            continue
        lines += [f"### {v['label']} (rule for d: {v['rule_class']})", "",
                  "| N | k | d | alpha < 1/2 | beta <= 1 | k log^2 N / N^(1/2-alpha) | k / (log k log N) "
                  "| d (1-lam) log k | theorem's b | log k / sqrt(log N) | log d log k / log N |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, h in hyps:
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
                f"| {limit_claims.fmt_ratio(r['queueing_ratio'])} +- {_num(r['queueing_ratio_hw'], 2)} | {plain} "
                f"| {_num(r.get('cv_corr'), 3) if cv else '-'} | {_num(r['mean_response'])} "
                f"| {_num(r['drop_prob'])} | {_num(r['frac_within_h'])} |")
        lim = limit_paths.get(key)
        if lim is not None:
            lines += ["", f"Limit ({lim['engine'][0]}) along the same path:", "",
                      "| N | k | d | lam | queueing ratio | E[T] | frac within h |", "|---|---|---|---|---|---|---|"]
            for r in lim.iter_rows(named=True):
                lines.append(f"| {_sci(r[x])} | {r.get('k', '-')} | {r.get('d', '-')} | {_num(r.get('lam'), 8)} "
                             f"| {_positive(r['queueing_ratio'], 5)} | {_num(r['mean_response'], 6)} | {_num(r['frac_within_h'])} |")
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
            leading_rate = limit_claims._heavy_traffic()[1]
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
