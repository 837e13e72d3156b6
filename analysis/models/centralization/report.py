"""The verdict lines and the report (``report.md``) of the centralization analysis.
"""
from __future__ import annotations

import math
from pathlib import Path

from analysis import style
from analysis.fmt import num as _f
from analysis.models.centralization.fit import LAM_FIT_MIN, SIM_ENGINES
from analysis.models.centralization.theory import FIG31_LAM, FIG31_P, LAM_TABLE, _istar_cell, invariant_mean_queue, invariant_tail, top_level


def _verdict_lines(arms: list[dict], slopes: list[dict]) -> list[str]:
    """The console lines of the verdicts (pipeline.run prints them): per arm the distance of
    the tails and of v_1 to the invariant state, per (engine, p) the slope of v_1 where the
    sweep has the loads to fit it."""
    lines = []
    for a in arms:
        arm = f"central [{a['engine']}] lam={style.short(a['lam'])} p={style.short(a['p'])}"
        lines.append(f"{arm}: sup distance of the simulated tails to the invariant state: {a['sup_verdict']}")
        lines.append(f"{arm}: gap of v_1 (mean queue) to the invariant state: {a['v1_verdict']}")
    for s in slopes:
        if str(s.get("verdict", "")).startswith("not enough loads"):
            continue
        lines.append(f"central [{s['engine']}] p={style.short(s['p'])}: slope of v_1 against log 1/(1 - lam): "
                     f"{s['verdict']}")
    return lines


def _write_report(outdir, sweep_name, points, dist_rows, arms, slopes, table, plots, notes) -> Path:
    L = [f"# Partial centralization: {sweep_name}", ""]
    L += ["Theory: Tsitsiklis & Xu, closed-form invariant state (Theorem 2), Corollary 3, "
          "Theorem 7. Rules: docs/centralization.md.", ""]
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]

    L += ["## (a) Figure 3.1: invariant tails", ""]
    i31 = top_level(FIG31_LAM, FIG31_P)
    L += [f"At lam = {FIG31_LAM:g}, p = {FIG31_P:g} the invariant tail is positive up to "
          f"i* = {i31} and 0 from i = {i31 + 1} on (the paper: \"reaches zero at around i = 40\"); "
          f"at p = 0 it is lam^i (s_40 = {FIG31_LAM ** 40:.3f}).", ""]
    rows = []
    for r in sorted(points, key=lambda r: (r["lam"], r["p"], r["engine"], r["n_servers"])):
        if r["engine"] not in SIM_ENGINES or not r["tail"].size:
            continue
        if not (math.isclose(r["p"], 0.0) or math.isclose(r["p"], FIG31_P)):
            continue
        cand = [q for q in points if (q["engine"], q["lam"], q["p"]) == (r["engine"], r["lam"], r["p"])]
        if r["n_servers"] != max(q["n_servers"] for q in cand):
            continue
        inv = invariant_tail(r["lam"], r["p"], r["tail"].size)
        lv = [i for i in (1, 5, 10, 20, 40) if i <= r["tail"].size]
        rows.append(f"| {r['engine']} | {r['n_servers']} | {r['lam']:g} | {r['p']:g} | "
                    + " | ".join(f"{r['tail'][i - 1]:.4g} ({inv[i - 1]:.4g})" for i in lv) + " |")
    if rows:
        L += ["Simulated s_i at the largest N (invariant in parentheses), levels 1, 5, 10, 20, 40:", "",
              "| engine | N | lam | p | s_i ... |", "|---|---|---|---|---|"] + rows + [""]

    L += ["## (b) Figure 3.2: v_1 against the load, and the slope verdict", ""]
    L += [f"Fit over lam >= {LAM_FIT_MIN} at the largest N: v_1 = a + b log(1/(1-lam)) (WLS). "
          "b_fluid: same fit of the closed form; its interval is that of b - b_fluid, the same fit "
          "of (simulated - closed-form) v_1; b_pred = 1/log(1/(1-p)) (Corollary 3).", "",
          "| engine | p | N | loads | b | 95% CI | b - b_fluid [95% CI] | red. chi2 (sim - fluid) | "
          "b_fluid | b_pred | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in slopes:
        L.append(f"| {s['engine']} | {s['p']:g} | {s['n_servers']} | {', '.join(f'{x:g}' for x in s.get('lams', []))} | "
                 f"{_f(s.get('b'))} | [{_f(s.get('b_lo'))}, {_f(s.get('b_hi'))}] | "
                 f"{_f(s.get('b_minus_fluid'), 3)} [{_f(s.get('b_minus_fluid_lo'), 3)}, {_f(s.get('b_minus_fluid_hi'), 3)}] | "
                 f"{_f(s.get('red_chi2'), 3)} | {_f(s.get('b_fluid'))} | {_f(s.get('b_pred'))} | {s['verdict']} |")
    L += [""]
    vrows = []
    for r in sorted(points, key=lambda r: (r["p"], r["lam"], r["engine"], r["n_servers"])):
        if r["engine"] in SIM_ENGINES:
            vrows.append(f"| {r['engine']} | {r['n_servers']} | {r['lam']:g} | {r['p']:g} | {r['n_rep']} | "
                         f"{r['mean_queue']:.4g} +- {_f(r['mean_queue_hw'], 2)} | "
                         f"{invariant_mean_queue(r['lam'], r['p']):.4g} | {_f(r['sim_time'] / r['tau'], 3)} |")
    if vrows:
        L += ["Every simulated point (v_1 with 95% CI, invariant v_1, run length in fluid relaxation times):", "",
              "| engine | N | lam | p | R | v_1 | invariant | T / tau |", "|---|---|---|---|---|---|---|---|"]
        L += vrows + [""]

    L += ["## (c) Table 3.1: i*(p, lam)", "",
          "| p \\ lam | " + " | ".join(f"{lam:g}" for lam in LAM_TABLE) + " |",
          "|---" * (len(LAM_TABLE) + 1) + "|"]
    L += ["| " + " | ".join([f"{row[0]:g}"] + [_istar_cell(lam, row[0]) for lam in LAM_TABLE]) + " |"
          for row in table]
    L += ["", "+ = degenerate: s_{i*} = 0 exactly (here lam = 1 - p, (1-p)/p an integer), so the "
          "invariant support ends at i* - 1 and the central server has no spare capacity there "
          "(lam s_{i*-1} = p).", ""]

    L += ["## (d) Theorem 7: distance to the invariant state as N grows", ""]
    if arms:
        L += ["| engine | lam | p | N range | D significant | D rate b [95% CI] | red. chi2 | sup verdict | "
              "v_1 gap significant | v_1 gap rate [95% CI] | v_1 verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for a in arms:
            sup = (f"{a['sup_slope']:.3f} [{a['sup_slope_lo']:.3f}, {a['sup_slope_hi']:.3f}]"
                   if a.get("sup_slope") is not None else "-")
            v1 = (f"{a['v1_slope']:.3f} [{a['v1_slope_lo']:.3f}, {a['v1_slope_hi']:.3f}]"
                  if a.get("v1_slope") is not None else "-")
            L.append(f"| {a['engine']} | {a['lam']:g} | {a['p']:g} | {a['n_min']}..{a['n_max']} | "
                     f"{a['sup_n_significant']}/{a['n_points']} | {sup} | {_f(a.get('sup_red_chi2'), 3)} | "
                     f"{a['sup_verdict']} | {a['v1_n_significant']}/{a['n_points']} | {v1} | {a['v1_verdict']} |")
        L += ["", "| engine | lam | p | N | R | T / tau | D (level) | se | levels significant / informative | plain sup | l1 | l1 noise floor | v_1 gap +- 95% |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(dist_rows, key=lambda r: (r["engine"], r["lam"], r["p"], r["n_servers"])):
            L.append(f"| {r['engine']} | {r['lam']:g} | {r['p']:g} | {r['n_servers']} | {r['n_rep']} | "
                     f"{_f(r['sim_time'] / r['tau'], 3)} | {r['sup']:.3g} ({r['sup_level']}){' *' if r['sup_significant'] else ''} | "
                     f"{_f(r['sup_se'], 2)} | {r['n_levels_significant']}/{r['n_levels_informative']} | "
                     f"{r['sup_all']:.3g} | {r['l1']:.3g} | {r['l1_floor']:.2g} | "
                     f"{r['v1_gap']:.3g} +- {_f(r['v1_gap_hw'], 2)} |")
        L += ["", "(D: largest |gap| over the levels whose gap exceeds its Bonferroni bound; "
              "* = significant, used in the fit)", ""]
    else:
        L += ["No arm with two or more N in this sweep.", ""]
    L += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    path = outdir / "report.md"
    path.write_text("\n".join(L))
    return path
