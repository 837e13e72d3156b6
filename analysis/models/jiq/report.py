"""Sections of the JIQ report (``report.md``): Table II, the orderings, Figure 7, the
Lu et al. comparison (with its figure).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.fmt import num as _fmt
from analysis.fmt import pct as _pct
from analysis.models.jiq.labels import POD, SQD, _name, takes_d, takes_z
from analysis.models.jiq.verdicts import crossovers, orderings

#: the paper's Table II as its text keeps it: the largest relative error of the prediction,
#: 3.3%, for JIQ at N = 500, at q_5 (the table's body, its r and its load are lost)
PAPER_TABLE2 = {"policy": "jiq", "n_servers": 500, "level": 5, "max_rel_err": 0.033}
#: the largest relative error is taken over the levels whose mean-field q_i is at least this:
#: below it a run of N = 500 servers sees less than one server in two there on average, and
#: the relative error of a probability of order 1e-7 (JIQ-Po2's q_5 at lam = 0.9) says nothing
Q_MIN_FOR_MAX = 1e-3
#: the heavy loads of Figure 7's comparison ("the lightest tail in the heavy workload region")
HEAVY_LAM = 0.9
#: Figure 7's three policies (d = 2, z = 1) and the levels compared
FIG7_POLICIES = ("jiq_pod", "jiq_threshold", "jiq_sqd")
FIG7_LEVELS = (2, 3, 4, 5)


def _q_report(qs: list[dict]) -> list[str]:
    """The report's Table II section: q_i per point (simulated with 95% CI, mean field, relative
    error), the largest relative error over q_0..q_5 per point, and the paper's 3.3% beside it."""
    if not qs:
        return []
    pts = {}
    for q in qs:
        pts.setdefault((q["policy"], q["n_servers"], q.get("lam"), q.get("r"), q.get("d")), []).append(q)
    n_lv = max(len(v) for v in pts.values())
    head = " | ".join(f"q_{i}" for i in range(n_lv))
    lines = ["", "## Table II as printed: q_i, the fraction of servers with exactly i tasks", "",
             "q_i = s_i - s_{i+1} (q_0 = 1 - s_1), from the `tail` column of each replication; "
             "simulated: mean over the replications, 95% t interval; mean field: the meanfield row. "
             "Relative error = (simulated - mean field) / mean field, with the 95% half-width of "
             "the simulated value over the mean-field value.", "",
             f"| policy | N | r | lam | source | {head} |", "|---|---|---|---|---|" + "---|" * n_lv]
    for (pol, n, lam, r, d), v in sorted(pts.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        name = _name(pol, {"d": d if takes_d(pol) else None})
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | simulated ({v[0]['n_rep']} runs) | "
                     + " | ".join(f"{q['sim']:.4g} +- {q['hw']:.2g}" for q in v) + " |")
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | mean field | "
                     + " | ".join(f"{q['mf']:.4g}" for q in v) + " |")
        lines.append(f"| {name} | {n} | {_fmt(r)} | {_fmt(lam)} | relative error | "
                     + " | ".join("-" if q["rel_err"] is None else
                                  f"{100 * q['rel_err']:+.2f}% +- {100 * q['rel_hw']:.2f}%" for q in v) + " |")
    top = PAPER_TABLE2["level"]
    lines += ["", f"Largest |relative error| over q_0..q_{top} per point (the paper's Table II: "
              f"{100 * PAPER_TABLE2['max_rel_err']:.1f}% at q_{top} for JIQ at N = "
              f"{PAPER_TABLE2['n_servers']}; its r and load are lost in the extraction), over the "
              f"levels whose mean-field q_i is at least {Q_MIN_FOR_MAX:g}:", "",
              "| policy | N | r | lam | largest |relative error| | at | its z = gap / SE | paper |",
              "|---|---|---|---|---|---|---|---|"]
    for (pol, n, lam, r, d), v in sorted(pts.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        cand = [q for q in v if q["level"] <= top and q["rel_err"] is not None and q["mf"] >= Q_MIN_FOR_MAX]
        if not cand:
            continue
        w = max(cand, key=lambda q: abs(q["rel_err"]))
        paper = (f"{100 * PAPER_TABLE2['max_rel_err']:.1f}% (q_{top})"
                 if pol == PAPER_TABLE2["policy"] and n == PAPER_TABLE2["n_servers"] else "-")
        lines.append(f"| {_name(pol, {'d': d if takes_d(pol) else None})} | {n} | {_fmt(r)} | {_fmt(lam)} | "
                     f"{100 * abs(w['rel_err']):.2f}% | q_{w['level']} | {_fmt(w['z'])} | {paper} |")
    return lines


def _ordering_report(agg: pl.DataFrame) -> tuple[list[str], dict]:
    """Figure 8 over the load axis: the ordering of the mean response per load from the mean
    field and from the simulations, the crossover loads, and where JIQ-Po2 is the shortest."""
    if "lam" not in agg.columns or agg["policy"].n_unique() < 3 or agg["lam"].n_unique() < 3:
        return [], {}
    res = {"mf": orderings(agg, sim=False), "sim": orderings(agg, sim=True)}
    lines = ["", "## Figure 8 over the load axis: the ordering of the mean response time", "",
             "Smallest first. Simulated: `~` where two neighbours differ by at most 1.96 SE of "
             "their difference (within the 95% CI of each other), `<` where the difference is "
             "significant.", ""]
    for kind, title in (("mf", "mean field (jiq, jiq_pod, jiq_sqd)"), ("sim", "simulated")):
        ords = res[kind]
        if not ords:
            continue
        lines += [f"### Ordering by load, {title}", ""]
        # consecutive loads with the same order (by point estimate) are one range
        run = [ords[0]]
        for o in ords[1:] + [None]:
            if o is not None and o["order"] == run[0]["order"] and (kind == "mf" or o["text"] == run[0]["text"]):
                run.append(o)
                continue
            rng = (f"lam = {run[0]['lam']:g}" if len(run) == 1 else f"lam = {run[0]['lam']:g} to {run[-1]['lam']:g}")
            lines.append(f"- {rng}: {run[0]['text']}")
            run = [o]
        cross = crossovers(ords, sim=(kind == "sim"))
        if cross:
            lines += ["", f"Crossover loads ({title}; linear interpolation of the difference between "
                      "the two grid loads):", ""]
            for c in cross:
                note = "" if c["significant"] else " (not resolved: within the CIs on one side)"
                lines.append(f"- {_name(c['below'])} below {_name(c['above'])} up to lam ~ {c['lam']:.3f} "
                             f"(between {c['between'][0]:g} and {c['between'][1]:g}), above it the reverse{note}")
        lines.append("")
    # the paper's claim: JIQ-Pod has the shortest mean response of the five
    if POD in agg["policy"].to_list():
        lines += ["### \"JIQ-Pod has the shortest response time of the five\" (Figure 8)", ""]
        for kind in ("mf", "sim"):
            holds = [o["lam"] for o in res[kind] if o["order"][0] == POD]
            fails = [(o["lam"], o["order"][0]) for o in res[kind] if o["order"][0] != POD]
            what = "mean field" if kind == "mf" else "simulated (point estimates)"
            if not res[kind]:
                continue
            lines.append(f"- {what}: JIQ-Po2 shortest at lam = {', '.join(f'{v:g}' for v in holds) or 'none'}; "
                         "not at " + (", ".join(f"{v:g} ({_name(p)})" for v, p in fails) or "none"))
        lines.append("")
    return lines, res


def _fig7_report(agg: pl.DataFrame) -> list[str]:
    """Figure 7's claim, "JIQ-Pod always has the lightest tail in the heavy workload region"
    (d = 2, z = 1): s_i for i = 2..5 of JIQ-Po2, JIQ-threshold and JIQ-SQ(2) at lam >= 0.9,
    simulated (95% CI) and from the mean field where it exists, with the lightest per level."""
    have = [p for p in FIG7_POLICIES if p in agg["policy"].to_list()]
    if len(have) < 2 or "lam" not in agg.columns:
        return []
    heavy = sorted(v for v in agg.filter(pl.col("lam") >= HEAVY_LAM - 1e-9)["lam"].unique().to_list())
    if not heavy:
        return []
    lines = ["", f"## Figure 7: the lightest tail at heavy load (lam >= {HEAVY_LAM:g}), s_i for i = "
             f"{FIG7_LEVELS[0]}..{FIG7_LEVELS[-1]}", "",
             "Simulated: mean tail over the replications, 95% t interval (per level); mean field in "
             "brackets where it exists. Lightest: the smallest simulated s_i (`~` when its 95% CI "
             "overlaps the runner-up's).", "",
             "| lam | i | " + " | ".join(_name(p, {"z": 1} if takes_z(p) else {"d": 2, "z": 1})
                                         for p in have) + " | lightest |", "|---|---|" + "---|" * (len(have) + 1)]
    sims, mf = agg.filter(pl.col("engine") != "meanfield"), agg.filter(pl.col("engine") == "meanfield")
    count, pod_wins = 0, 0
    for lam in heavy:
        vals = {}
        for p in have:
            s = sims.filter((pl.col("policy") == p) & ((pl.col("lam") - lam).abs() < 1e-9))
            m = mf.filter((pl.col("policy") == p) & ((pl.col("lam") - lam).abs() < 1e-9))
            if s.height == 0 or s["tail"][0] is None:
                continue
            row = s.row(0, named=True)
            vals[p] = (row["tail"], row.get("_tail_hw"), None if m.height == 0 else m["tail"][0])
        if len(vals) < 2:
            continue
        for i in FIG7_LEVELS:
            cells, est = [], {}
            for p in have:
                if p not in vals or len(vals[p][0]) < i:
                    cells.append("-")
                    continue
                t, hw, mt = vals[p]
                h = hw[i - 1] if hw is not None else float("nan")
                est[p] = (t[i - 1], h)
                cells.append(f"{t[i - 1]:.4g} +- {h:.2g}" + (f" [{mt[i - 1]:.4g}]" if mt is not None else ""))
            if len(est) < 2:
                continue
            order = sorted(est, key=lambda p: est[p][0])
            a, b = est[order[0]], est[order[1]]
            tied = a[0] + a[1] >= b[0] - b[1]
            count += 1
            pod_wins += order[0] == POD
            lines.append(f"| {lam:g} | {i} | " + " | ".join(cells) + f" | {_name(order[0])}"
                         + (f" ~ {_name(order[1])}" if tied else "") + " |")
    if count:
        lines += ["", f"JIQ-Po2 has the smallest simulated s_i in {pod_wins} of {count} (load, level) cells "
                  f"at lam >= {HEAVY_LAM:g}."]
    return lines


def _lu_report_and_plot(agg: pl.DataFrame, outdir: Path) -> tuple[list[str], Path | None]:
    """Figure 5's comparison: simulated mean response against the mean field and Lu et al.'s
    approximation (``lu_mean_response`` of the meanfield rows of jiq and jiq_sqd): a table of
    the relative errors against the simulation, and a figure (mean response on top, relative
    errors below, one column per policy the approximation covers)."""
    if "lu_mean_response" not in agg.columns or agg["lu_mean_response"].is_null().all() or "lam" not in agg.columns:
        return [], None
    mf = agg.filter((pl.col("engine") == "meanfield") & pl.col("lu_mean_response").is_not_null())
    sims = agg.filter(pl.col("engine") != "meanfield")
    # Lu's JIQ-Random approximates jiq_original (Lu's model) and jiq; JIQ-SQ(d) jiq_sqd
    compare = {"jiq": ["jiq", "jiq_original"], "jiq_sqd": ["jiq_sqd"]}
    panels = [p for p in compare if p in mf["policy"].to_list()]
    lines = ["", "## Figure 5: the mean field and Lu et al.'s approximation against the simulation", "",
             "Lu et al. (2011), reconstructed and not verified against the paper (sim/jiq/lu.py, "
             "docs/jiq.md): rho = fraction of non-empty I-queues from sum_i rho^((d^i-1)/(d-1)) = "
             "r (1 - lam) (d = 1: rho = r (1 - lam) / (1 + r (1 - lam))), T = 1 / (1 - lam (1 - rho)). "
             "Relative error = (prediction - simulated) / simulated.", "",
             "| simulated policy | N | lam | simulated (95% CI) | mean field | its error | Lu et al. | its error | Lu vs mean field |",
             "|---|---|---|---|---|---|---|---|---|"]
    data = {}
    for p in panels:
        m = mf.filter(pl.col("policy") == p).sort("lam")
        for sp in compare[p]:
            s = sims.filter(pl.col("policy") == sp).sort("lam")
            if s.height == 0:
                continue
            for r in s.iter_rows(named=True):
                mm = m.filter((pl.col("lam") - r["lam"]).abs() < 1e-9)
                if mm.height == 0:
                    continue
                t_mf, t_lu = mm["mean_response"][0], mm["lu_mean_response"][0]
                e_mf, e_lu = (t_mf - r["mean_response"]) / r["mean_response"], (t_lu - r["mean_response"]) / r["mean_response"]
                data.setdefault((p, sp), []).append((r["lam"], r["mean_response"], r["mean_response_hw"], t_mf, t_lu,
                                                     r["n_servers"]))
                lines.append(f"| {_name(sp, {'d': 2} if sp == SQD else None)} | {r['n_servers']} | {r['lam']:g} | "
                             f"{r['mean_response']:.4f} +- {_fmt(r['mean_response_hw'])} | {t_mf:.4f} | {_pct(e_mf)} | "
                             f"{t_lu:.4f} | {_pct(e_lu)} | {_pct((t_lu - t_mf) / t_mf)} |")
    if not data:
        return lines, None
    fig = Figure(figsize=(6.2 * len(panels), 8.0), layout="constrained")
    FigureCanvasAgg(fig)
    for j, p in enumerate(panels):
        top = fig.add_subplot(2, len(panels), j + 1)
        bot = fig.add_subplot(2, len(panels), len(panels) + j + 1, sharex=top)
        m = mf.filter(pl.col("policy") == p).sort("lam")
        pname = _name(p, {"d": 2} if p == SQD else None)
        top.plot(m["lam"], m["mean_response"], "-", color="black", lw=1.3, label=f"{pname}, mean field")
        top.plot(m["lam"], m["lu_mean_response"], "--", color="#D55E00", lw=1.5,
                 label="Lu et al. approximation (reconstructed)")
        ys = m["mean_response"].to_list() + m["lu_mean_response"].to_list()
        n_top = None
        for k, sp in enumerate(compare[p]):
            pts = data.get((p, sp))
            if not pts:
                continue
            # one N per figure, the largest (the report's table has every N)
            n_top = max(q[5] for q in pts)
            lam, t, hw, t_mf, t_lu, _ = (np.array(v, float) for v in zip(*[q for q in pts if q[5] == n_top]))
            c = ["#0072B2", "#009E73"][k % 2]
            lab = _name(sp, {"d": 2} if sp == SQD else None)
            top.errorbar(lam, t, yerr=hw, fmt=style.marker(k), ms=4, capsize=2, color=c, ls="none",
                         label=f"{lab}, simulated (95% CI)")
            # the bars: the simulated value's 95% half-width relative to it (the predictions are exact)
            bot.errorbar(lam, 100 * (t_mf - t) / t, yerr=100 * hw / t, fmt="-" + style.marker(k), color="black",
                         ms=3, lw=1, capsize=2, mfc=c, mec=c, label=f"mean field vs {lab} (95% CI)")
            bot.errorbar(lam, 100 * (t_lu - t) / t, yerr=100 * hw / t, fmt="--" + style.marker(k), color="#D55E00",
                         ms=3, lw=1, capsize=2, mfc=c, mec=c, label=f"Lu et al. vs {lab} (95% CI)")
            ys += t.tolist()
        style.log_axis(top, "y", ys)
        top.set_ylabel("mean response time (mean service times)")
        top.set_title(f"{pname}: simulated (N = {_fmt(n_top)}), mean field and Lu et al.", fontsize=10)
        top.grid(True, which="major", alpha=0.3)
        top.legend(fontsize=8, loc="upper left")
        bot.axhline(0.0, color="0.3", lw=0.8)
        bot.set_xlabel("load $\\lambda$ (arrival rate per server; service rate 1)")
        bot.set_ylabel("(prediction - simulated) / simulated, %")
        bot.grid(True, alpha=0.3)
        bot.legend(fontsize=8, loc="upper left")
    path = outdir / "lu_vs_load.png"
    fig.savefig(path, dpi=120)
    return lines, path
