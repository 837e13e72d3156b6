"""Trajectories against the mean-field ODE: the fluid limit on a finite horizon as N grows.

Reads the ``trajectory`` engine's rows (docs/transients.md) and, when the sweep has them, the
``meanfield`` rows of the same points (the fixed point, for the settling times). An *arm* is a
policy with its parameters other than N (``lam``, ``r``, ``d``, ``time``; the ``variant`` column
only names a parameter set and is not part of an arm). Per arm and N, over the R replications:

- the mean path of each recorded ``s_i(t)`` (and JIQ's ``p0(t)``) with a 95% band,
  ``t(0.975, R - 1) * sd / sqrt(R)`` pointwise in t;
- (a) the sup-distance of each path to the ODE, ``traj_sup_dist`` (max over the grid and the
  recorded levels): its mean with a t-interval, fitted against N by
  :func:`analysis.fit.wls_loglog` on every N (expected slope -1/2: the fluctuations of a path
  are of order N^-1/2, uniformly on [0, T]);
- (b) the distance of the *mean* path, ``D(N) = max_{t, i} |mean_i(t) - ode_i(t)|`` (expected
  ~ 1/N, the bias of the finite system, until it sinks below the noise of the mean). Its SE is
  the pointwise SE at the maximising (t, i); an N counts as significant when ``D > 4 SE`` there
  and the rate is fitted on the significant N only, by :func:`analysis.fit.gap_rate_verdict`
  (at least 4 significant N to fit; else
  ``consistent`` when the rest are within 4 SE). The maximum over about grid x levels
  correlated points makes the noise floor of D a few SE, not one: the 4 SE rule is meant to be
  conservative there.
- settling: with a meanfield row for the arm, the first grid time after which the ODE stays
  within 1% of the fixed point (``p0`` for JIQ, ``s_2`` for the others), and the simulated mean
  and its running time average over [0, t] at a few t: what a run of length t from empty reads.

Partial centralization (``central``) has no central state of its own; its rows carry the path's
longest queue ``traj_top`` and the fluid model's regime ``m(t)`` (``traj_ode_top``): the report
tabulates their mean gap per N, and its trajectory panels show s_1, s_3 and s_5 (its invariant
support is a handful of levels and the sliding mode acts at the top one).

Writes ``trajectories_<arm>.png`` (s_1, s_2 and p0 against t -- s_1, s_3, s_5 for central --
mean with band beside the ODE, one panel per N), ``sup_distance.png`` ((a) and (b) against N with the fits and N^-1/2, 1/N
references), ``settling.png`` (the settled fraction against t per arm) and ``report.md``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from analysis import declared, style
from analysis.fit import MIN_FIT_POINTS, SIGNIFICANT_Z, gap_rate_verdict, wls_loglog
from analysis.fmt import num as _fmt

__all__ = ["analyze_transients", "arm_summaries", "SETTLE_TOL", "ARM_PARAMS"]

#: the parameters (other than N) that make an arm, when they are columns of the frame
ARM_PARAMS = ("lam", "r", "d", "k", "p", "time", "init")
#: relative distance to the fixed point under which the ODE counts as settled
SETTLE_TOL = 0.01
#: times (fractions of the horizon) at which the report reads the paths
READ_FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)


def _arm_keys(df: pl.DataFrame) -> list[str]:
    """The columns of an arm; the engine among them where the rows come from more than the
    ``trajectory`` engine (a ``population_trajectory`` arm is its own arm)."""
    keys = ["policy"] + [k for k in ARM_PARAMS if k in df.columns]
    return (["engine"] + keys) if set(df["engine"].unique().to_list()) != {"trajectory"} else keys


def _engine(arm: dict) -> str:
    return arm.get("engine") or "trajectory"


def _arm_label(arm: dict) -> str:
    """``power-of-d, λ = 0.9, d = 2, T = 40``: the parameters the trajectory entry of the arm's
    policy uses (its declared entry, :mod:`analysis.declared`), in a fixed order."""
    parts = [style.policy_name(arm["policy"], engine="trajectory")]
    if _engine(arm) != "trajectory":
        parts[0] += f" ({_engine(arm)})"
    used = declared.entry(_engine(arm), arm["policy"], arm.get("model")).params
    for k in ("lam", "r", "d", "k", "p", "time"):
        v = arm.get(k)
        if v is None or k not in used:
            continue
        sym = {"lam": "\u03bb", "time": "T"}.get(k, k)
        parts.append(f"{sym} = {_fmt(v)}")
    return ", ".join(parts)


def _slug(arm: dict) -> str:
    s = "_".join(f"{k}{_fmt(v)}" for k, v in arm.items() if v is not None)
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in s)


def _mean_band(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over axis 0, its SE and the 95% t half-width."""
    n = a.shape[0]
    m = a.mean(axis=0)
    se = a.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.full(m.shape, np.nan)
    q = float(stats.t.ppf(0.975, n - 1)) if n > 1 else float("nan")
    return m, se, q * se


def _point(rows: pl.DataFrame) -> dict:
    """The statistics of one (arm, N) from its replications' rows."""
    levels = int(rows["traj_levels"][0])
    t = np.asarray(rows["traj_time"][0], dtype=float)
    g = t.size
    paths = np.array([np.asarray(v, dtype=float).reshape(levels, g) for v in rows["traj_tail"]])
    ode = np.asarray(rows["traj_ode_tail"][0], dtype=float).reshape(levels, g)
    mean, se, hw = _mean_band(paths)
    out = {"t": t, "levels": levels, "paths": paths, "ode": ode, "mean": mean, "se": se, "hw": hw,
           "R": paths.shape[0]}
    sup = np.asarray(rows["traj_sup_dist"].to_list(), dtype=float)
    out["sup"], out["sup_se"], out["sup_hw"] = _mean_band(sup[:, None])
    out["sup"], out["sup_se"], out["sup_hw"] = (float(out["sup"][0]), float(out["sup_se"][0]),
                                                float(out["sup_hw"][0]))
    gap = mean - ode
    i, j = np.unravel_index(int(np.argmax(np.abs(gap))), gap.shape)
    out["bias"], out["bias_se"], out["bias_at"] = float(abs(gap[i, j])), float(se[i, j]), (int(i) + 1, float(t[j]))
    if "traj_p0" in rows.columns and rows["traj_p0"][0] is not None:
        p0 = np.array([np.asarray(v, dtype=float) for v in rows["traj_p0"]])
        out["p0_paths"] = p0
        out["p0_ode"] = np.asarray(rows["traj_ode_p0"][0], dtype=float)
        out["p0_mean"], out["p0_se"], out["p0_hw"] = _mean_band(p0)
        supp = np.asarray(rows["traj_sup_dist_p0"].to_list(), dtype=float)
        out["sup_p0"] = float(supp.mean())
    if "traj_top" in rows.columns and rows["traj_top"][0] is not None:
        top = np.array([np.asarray(v, dtype=float) for v in rows["traj_top"]])
        out["top_mean"], out["top_se"], out["top_hw"] = _mean_band(top)
        out["top_ode"] = np.asarray(rows["traj_ode_top"][0], dtype=float)
    return out


def arm_summaries(df: pl.DataFrame) -> list[dict]:
    """Per arm: its parameters, its points by N (see :func:`_point`) and the fitted rates."""
    traj = df.filter(pl.col("engine").is_in(list(declared.path_engines())) & pl.col("traj_sup_dist").is_not_null())
    if traj.height == 0:
        return []
    keys = _arm_keys(traj)
    mf = df.filter(pl.col("engine") == "meanfield")
    arms = []
    for arm in traj.select(keys).unique(maintain_order=True).iter_rows(named=True):
        rows = traj.filter(*[pl.col(k).eq_missing(arm[k]) for k in keys])
        pts = {}
        for n in sorted(rows["n_servers"].unique().to_list()):
            pts[int(n)] = _point(rows.filter(pl.col("n_servers") == n))
        ns = np.array(sorted(pts), dtype=float)
        res = {"arm": arm, "points": pts, "ns": ns}
        sup = np.array([pts[int(n)]["sup"] for n in ns])
        sup_se = np.array([pts[int(n)]["sup_se"] for n in ns])
        if ns.size >= 3 and np.all(sup_se > 0):
            res["fit_sup"] = wls_loglog(ns, sup, sup_se)
        bias = np.array([pts[int(n)]["bias"] for n in ns])
        bias_se = np.array([pts[int(n)]["bias_se"] for n in ns])
        res["bias_verdict"] = gap_rate_verdict(ns, bias, bias_se)
        # the fixed point of the arm (meanfield rows carry no `time`)
        mkeys = [k for k in keys if k not in ("time", "init", "engine")]
        m = mf.filter(*[pl.col(k).eq_missing(arm[k]) for k in mkeys if k in mf.columns]) if mf.height else mf
        if m.height:
            r0 = m.row(0, named=True)
            tail = r0.get("tail") or []
            if r0.get("p0") is not None:  # the JIQ mean field's empty I-queues
                res["fixed"] = ("p0", float(r0["p0"]))
            elif len(tail) >= 2:
                res["fixed"] = ("s_2", float(tail[1]))
        arms.append(res)
    return arms


def _series(pt: dict, what: str):
    """(simulated mean, 95% half-width, ODE) of ``p0`` or ``s_i``."""
    if what == "p0":
        return pt["p0_mean"], pt["p0_hw"], pt["p0_ode"]
    i = int(what.split("_")[1]) - 1
    return pt["mean"][i], pt["hw"][i], pt["ode"][i]


def _settle_time(t: np.ndarray, y: np.ndarray, target: float, tol: float = SETTLE_TOL):
    """First grid time after which ``|y - target| <= tol * |target|`` to the end; None if never."""
    ok = np.abs(y - target) <= tol * abs(target)
    if not ok[-1]:
        return None
    bad = np.nonzero(~ok)[0]
    return float(t[0]) if bad.size == 0 else float(t[bad[-1] + 1])


def _running_mean(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Time average of ``y`` over [0, t_j] (trapezoid on the grid)."""
    area = np.concatenate(([0.0], np.cumsum(0.5 * (y[1:] + y[:-1]) * np.diff(t))))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = area / t
    out[0] = y[0]
    return out


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120)
    return path


def _plot_trajectories(arm: dict, outdir: Path) -> Path:
    pts = arm["points"]
    ns = sorted(pts)
    ncol = min(4, len(ns))
    nrow = math.ceil(len(ns) / ncol)
    fig = Figure(figsize=(3.9 * ncol, 3.2 * nrow + 0.9), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    jiq = "p0_mean" in pts[ns[0]]
    central = "top_mean" in pts[ns[0]]  # rows with a fluid model's top level (centralization)
    if central:
        what = [f"s_{i}" for i in (1, 3, 5) if i <= pts[ns[0]]["levels"]]
    else:
        what = ["s_1", "s_2"] + (["p0"] if jiq else [])
    sub = str.maketrans("0123456789", "\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089")
    unit = "stations" if central else "servers"
    names = {w: f"s{w[2:].translate(sub)} ({unit} with \u2265 {w[2:]} task{'s' if w != 's_1' else ''})"
             for w in what if w.startswith("s_")}
    names["p0"] = "p\u2080 (empty I-queues)"
    for ax, n in zip(axes, ns):
        pt = pts[n]
        t = pt["t"]
        for c, w in enumerate(what):
            m, hw, ode = _series(pt, w)
            col = style.PALETTE[c]
            ax.fill_between(t, m - hw, m + hw, color=col, alpha=0.3, lw=0)
            ax.plot(t, m, color=col, lw=1.2, label=f"simulated mean {names[w]}, 95% band")
            ax.plot(t, ode, color=style.LIMIT_COLOR, ls="--", lw=0.9,
                    label=(("fluid model" if central else "mean-field ODE") + " from the same start")
                    if c == 0 else None)
        path = pt["paths"][0][0]
        ax.plot(t, path, color="0.55", lw=0.5, label="one replication's s\u2081 (a single path)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"N = {n} ({pt['R']} replications)", fontsize=9)
        ax.set_xlabel("time t (mean service times)")
        ax.set_ylabel("fraction")
    for ax in axes[len(ns):]:
        ax.set_visible(False)
    handles, labels = [], []
    for h, lab in zip(*axes[0].get_legend_handles_labels()):
        if lab and not lab.startswith("_") and lab not in labels:
            handles.append(h), labels.append(lab)
    fig.legend(handles, labels, loc="outside lower center", fontsize=7, ncol=3, frameon=False)
    fig.suptitle(f"Trajectories from {_fmt(arm['arm'].get('init') or 'empty')}: {_arm_label(arm['arm'])}",
                 fontsize=10)
    return _save(fig, outdir / f"trajectories_{_slug(arm['arm'])}.png")


def _plot_sup(arms: list[dict], outdir: Path) -> Path:
    """(a) and (b) against N: one row of two panels per group of up to ``MAX_SERIES // 2`` arms
    (each arm takes two legend entries per panel), so that every arm is drawn."""
    per = max(1, style.MAX_SERIES // 2)
    groups = [arms[i: i + per] for i in range(0, len(arms), per)]
    fig = Figure(figsize=(14.0, 6.0 * len(groups)), layout="constrained")  # legends below
    rows = fig.subplots(len(groups), 2, squeeze=False)
    for (ax_a, ax_b), group in zip(rows, groups):
        _sup_panels(ax_a, ax_b, group)
    return _save(fig, outdir / "sup_distance.png")


def _sup_panels(ax_a, ax_b, arms: list[dict]) -> None:
    all_n, all_a, all_b = [], [], []
    for c, arm in enumerate(arms):
        ns = arm["ns"]
        pts = arm["points"]
        col = style.color(c)
        lab = _arm_label(arm["arm"])
        xs = style.dodge(ns, c, len(arms))
        sup = np.array([pts[int(n)]["sup"] for n in ns])
        hw = np.array([pts[int(n)]["sup_hw"] for n in ns])
        style.errorbar_log(ax_a, xs, sup, hw, color_=col, fmt=style.marker(c), ms=4, capsize=2, label=lab)
        fit = arm.get("fit_sup")
        if fit is not None:
            ax_a.plot(*style.fitted_line(ns, fit["intercept"], fit["slope"]), color=col, lw=0.9,  # fitted on every N
                      label=f"fit: slope {fit['slope']:.2f} [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}]")
        bias = np.array([pts[int(n)]["bias"] for n in ns])
        bse = np.array([pts[int(n)]["bias_se"] for n in ns])
        sig = bias > SIGNIFICANT_Z * bse
        ax_b.plot(xs, bias, color=col, lw=0.6, alpha=0.6)
        ax_b.plot(xs[sig], bias[sig], style.marker(c), color=col, ms=5, ls="none",
                  label=f"{lab}: |gap| > {SIGNIFICANT_Z:g} SE")
        ax_b.plot(xs[~sig], bias[~sig], style.marker(c), mfc="none", color=col, ms=5, ls="none",
                  label=f"{lab}: within {SIGNIFICANT_Z:g} SE (noise)")
        ax_b.plot(xs, SIGNIFICANT_Z * bse, color=col, ls=":", lw=0.8)
        v = arm["bias_verdict"]
        if v.get("slope") is not None:
            keep = sig
            y0 = np.exp(np.mean(np.log(bias[keep]) - v["slope"] * np.log(ns[keep])))
            ax_b.plot(*style.fitted_line(ns[keep], np.log(y0), v["slope"]), color=col, lw=0.9)
        all_n += list(ns)
        all_a += list(sup)
        all_b += list(bias)
    style.reference_slope(ax_a, all_n, all_a, slope=-0.5, text="reference slope N^(-1/2)")
    style.reference_slope(ax_b, all_n, all_b, slope=-1.0, text="reference slope 1/N")
    ax_b.plot([], [], color="0.3", ls=":", lw=0.8, label=f"{SIGNIFICANT_Z:g} SE of the mean path (per arm)")
    for ax in (ax_a, ax_b):
        style.log_axis(ax, "x", all_n)
        style.log_axis(ax, "y")
        ax.set_xlabel(style.label("n_servers"))
        style.legend_below(ax, fontsize=6.5)  # beside the panels the legends took half the width
    ax_a.set_ylabel("sup over t and levels of |s_i(t) - ODE|, one path (mean, 95% CI)")
    ax_b.set_ylabel("sup over t and levels of |mean path - ODE|")
    ax_a.set_title("(a) distance of each path to the ODE", fontsize=9)
    ax_b.set_title("(b) distance of the mean path (the bias)", fontsize=9)


def _plot_settling(arms: list[dict], outdir: Path) -> Path | None:
    arms = [a for a in arms if "fixed" in a]
    if not arms:
        return None
    ncol = min(4, len(arms))  # rows of at most 4 panels: readable at any number of arms
    nrow = math.ceil(len(arms) / ncol)
    fig = Figure(figsize=(4.6 * ncol, 4.2 * nrow), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    for ax in axes[len(arms):]:
        ax.set_visible(False)
    for ax, arm in zip(axes, arms):
        what, target = arm["fixed"]
        w = "p0" if what == "p0" else "s_2"
        ns = sorted(arm["points"])
        for c, n in enumerate(ns[-min(len(ns), 3):]):
            pt = arm["points"][n]
            m, hw, ode = _series(pt, w)
            ax.fill_between(pt["t"], (m - hw) / target, (m + hw) / target, color=style.color(c), alpha=0.25, lw=0)
            ax.plot(pt["t"], m / target, color=style.color(c), lw=1.0, label=f"simulated mean, N = {n}")
        pt = arm["points"][ns[-1]]
        ode = _series(pt, w)[2]
        ax.plot(pt["t"], ode / target, color=style.LIMIT_COLOR, ls="--", lw=1.0, label="mean-field ODE")
        ax.plot(pt["t"], _running_mean(pt["t"], ode) / target, color="0.45", ls="-.", lw=1.0,
                label="ODE's time average over [0, t]")
        ax.axhline(1.0, color="0.6", lw=0.6)
        ax.axhspan(1 - SETTLE_TOL, 1 + SETTLE_TOL, color="0.85", alpha=0.6, lw=0,
                   label=f"within {100 * SETTLE_TOL:g}% of the fixed point")
        ax.set_ylim(0.0, 1.3)
        ax.set_xlabel("time t (mean service times)")
        qname = "p\u2080 (empty I-queues)" if w == "p0" else "s\u2082"
        ax.set_ylabel(f"{qname} / its fixed point")
        ax.set_title(_arm_label(arm["arm"]), fontsize=8)
        ax.legend(fontsize=6, loc="lower right", frameon=False)
    return _save(fig, outdir / "settling.png")


def analyze_transients(frame, params, outdir, sweep_name: str = "") -> dict:
    """The transients analysis (module docstring): tables, fits, verdicts, plots, report.md."""
    df = frame.collect() if isinstance(frame, pl.LazyFrame) else frame
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    ok = df.filter(pl.col("status") == "ok") if "status" in df.columns else df
    arms = arm_summaries(ok) if "traj_sup_dist" in ok.columns else []
    lines = [f"# Trajectories against the mean-field ODE: {sweep_name}", ""]
    plots: list[Path] = []
    metrics: list = []
    verdicts: list[str] = []  # one console line per fitted quantity (pipeline.run prints them)
    if not arms:
        lines.append("No trajectory rows with a complete path: nothing to analyse.")
        report = outdir / "report.md"
        report.write_text("\n".join(lines) + "\n")
        return {"report": report, "plots": plots, "metrics": metrics}
    lines += ["Per arm and N: R replications from the same start; the ODE from that start on the "
              "same grid. (a) mean over paths of sup_{t, i <= L} |s_i(t) - ode_i(t)| (95% t-interval), "
              "fitted on every N (expected slope -1/2); (b) D = sup |mean path - ODE| with the pointwise "
              f"SE at its argmax, significant when D > {SIGNIFICANT_Z:g} SE, fitted on the significant N "
              f"only (at least {MIN_FIT_POINTS}; expected slope -1).", ""]
    for k, arm in enumerate(arms):
        a = arm["arm"]
        lines += [f"## {_arm_label(a)}", ""]
        lines += ["| N | R | (a) mean sup-distance (95% CI) | (b) D = sup |mean - ODE| | SE at argmax | "
                  "argmax (level, t) | D / SE |" + (" mean sup-distance of p0 |" if "sup_p0" in next(iter(arm["points"].values())) else ""),
                  "|---|---|---|---|---|---|---|" + ("---|" if "sup_p0" in next(iter(arm["points"].values())) else "")]
        for n in sorted(arm["points"]):
            p = arm["points"][n]
            z = p["bias"] / p["bias_se"] if p["bias_se"] > 0 else float("inf")
            row = (f"| {n} | {p['R']} | {p['sup']:.4g} +- {p['sup_hw']:.2g} | {p['bias']:.3g} | "
                   f"{p['bias_se']:.2g} | (s_{p['bias_at'][0]}, {p['bias_at'][1]:.3g}) | {z:.1f} |")
            if "sup_p0" in p:
                row += f" {p['sup_p0']:.4g} |"
            lines.append(row)
        lines.append("")
        fit = arm.get("fit_sup")
        if fit is not None:
            has = fit["slope_lo"] <= -0.5 <= fit["slope_hi"]
            lines.append(f"- (a) sup-distance ~ N^{fit['slope']:.3f}, 95% CI [{fit['slope_lo']:.3f}, "
                         f"{fit['slope_hi']:.3f}] (reduced chi2 {fit['red_chi2']:.2f}): "
                         + ("consistent with N^-1/2." if has else "the interval excludes -1/2."))
            verdicts.append(f"{_arm_label(arm['arm'])} [{_engine(arm['arm'])}]: sup distance of a path to the ODE "
                            f"as N grows: N^{fit['slope']:.2f} [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}], "
                            + ("consistent with N^-1/2" if has else "the interval excludes -1/2"))
            metrics.append((f"transients_sup_slope_{k}", fit["slope"], 0))
        else:
            lines.append("- (a) fewer than 3 N: no fit.")
        v = arm["bias_verdict"]
        if v.get("slope") is not None:
            has = v["slope_lo"] <= -1.0 <= v["slope_hi"]
            lines.append(f"- (b) mean-path distance: {v['verdict']} -- {v['note']}; "
                         + ("consistent with 1/N." if has else "the interval excludes -1."))
            metrics.append((f"transients_bias_slope_{k}", v["slope"], 0))
        else:
            lines.append(f"- (b) mean-path distance: {v['verdict']} -- {v['note']}.")
        verdicts.append(f"{_arm_label(arm['arm'])} [{_engine(arm['arm'])}]: distance of the mean path to the ODE "
                        f"as N grows: {v['verdict']}"
                        + (f" (N^{v['slope']:.2f} [{v['slope_lo']:.2f}, {v['slope_hi']:.2f}])"
                           if v.get("slope") is not None else f" ({str(v['note']).split(';')[0]})"))
        if "fixed" in arm:
            what, target = arm["fixed"]
            w = "p0" if what == "p0" else "s_2"
            n_big = max(arm["points"])
            pt = arm["points"][n_big]
            m, hw, ode = _series(pt, w)
            ts = _settle_time(pt["t"], ode, target)
            tsim = _settle_time(pt["t"], m, target)
            run_ode = _running_mean(pt["t"], ode)
            run_sim = _running_mean(pt["t"], m)
            lines.append(f"- settling of {what} (fixed point {target:.4g}): the ODE stays within "
                         f"{100 * SETTLE_TOL:g}% from t = {_fmt(ts)}"
                         + ("" if ts is not None else f" (not by T = {pt['t'][-1]:g})")
                         + f"; the mean of the N = {n_big} paths from t = {_fmt(tsim)}.")
            cells = []
            for f in READ_FRACTIONS:
                j = int(round(f * (pt["t"].size - 1)))
                cells.append(f"t = {pt['t'][j]:.4g}: ODE {ode[j] / target:.3f}, simulated {m[j] / target:.3f} "
                             f"+- {hw[j] / target:.3f}, time average of the ODE over [0, t] "
                             f"{run_ode[j] / target:.3f} (simulated {run_sim[j] / target:.3f})")
            lines.append(f"- {what} / fixed point along the way (N = {n_big}): " + "; ".join(cells) + ".")
        first = next(iter(arm["points"].values()))
        if "top_mean" in first:
            cells = []
            for n in sorted(arm["points"]):
                p = arm["points"][n]
                gap = p["top_mean"] - p["top_ode"]
                late = slice(p["t"].size // 2, None)
                cells.append(f"N = {n}: {np.nanmean(gap[late]):+.3f} (largest {np.nanmax(np.abs(gap)):.2f})")
            lines.append("- central state: the path's longest queue minus the fluid model's top level "
                         "m(t), mean over the replications and the second half of [0, T]: "
                         + "; ".join(cells) + " (docs/transients.md: why it need not vanish).")
        lines.append("")
        plots.append(_plot_trajectories(arm, outdir))
    plots.append(_plot_sup(arms, outdir))
    settle = _plot_settling(arms, outdir)
    if settle is not None:
        plots.append(settle)
    lines += ["## Figures", ""] + [f"- `{p.name}`" for p in plots]
    report = outdir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return {"report": report, "plots": plots, "metrics": metrics, "verdict_lines": verdicts}


#: the analyses this module serves (``extra_analyses`` names; analysis collects them)
