"""The figures of the zero-queueing analysis (ratio, gap and d against N, the limit path).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from analysis import declared, style
from analysis.fmt import sci as _sci
from analysis.models.zero_queueing.arms import _constant, _fixed_text, _key_label
from analysis.models.zero_queueing.verdicts import _gaps

#: ratios at or below this are drawn as zero on the log axes: a buffered arm's admitted jobs
#: never wait (its ratio is rounding noise, ~1e-16), and per-task power-of-(kd) reaches 1e-293
#: on the path, which would crush every other curve
PLOT_RATIO_MIN = 1e-12


#: what power-of-d per task's mean field is, for the figure that shows it far below the simulations
PER_TASK_NOTE = ("mean field of power-of-d per task: a job's tasks independent, each waits only if all\n"
                 "of its k d samples are busy (about lam^(k d): 3e-6 at N = 100 for c1, 1e-74 at 10^15)")


def _plots(arms: dict, arm: list[str], outdir: Path, x: str, limit_paths: dict | None = None,
           rules: dict | None = None) -> list[Path]:
    limit_paths = limit_paths or {}
    rules = rules or {k: (_key_label(k, arm, skip=1) or "all", i) for i, k in enumerate(arms)}
    paths = []
    # 1. ratio vs N per arm (log-log), one figure per policy; at most style.MAX_SERIES arms a panel
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels = [keys[i:i + style.MAX_SERIES] for i in range(0, len(keys), style.MAX_SERIES)]
        fig = Figure(figsize=(9.5, 4.2 * len(panels) + 1.4), layout="constrained")
        FigureCanvasAgg(fig)
        axes_r = []
        for r, group in enumerate(panels):
            ax = fig.add_subplot(len(panels), 1, r + 1)
            hidden, reach0 = 0, False
            xs_all = []
            for i, key in enumerate(group):
                pts = arms[key]
                label, ci = rules[key]
                n_zero = pts.filter(pl.col("queueing_ratio") <= PLOT_RATIO_MIN).height
                pts = pts.filter(pl.col("queueing_ratio") > PLOT_RATIO_MIN)
                if pts.height == 0:  # a loss system's admitted jobs never wait: say so, not drop it
                    if n_zero:
                        ax.plot([], [], marker=style.marker(ci), ls="none", color=style.color(ci),
                                label=f"{label}:\n  ratio 0 at every N (off the log axis; drops in the report)")
                    continue
                hidden += n_zero
                xs = pts[x].to_numpy().astype(float)
                xd = style.dodge(xs, i, len(group)) if len(group) > 1 else xs
                y = pts["queueing_ratio"].to_numpy()
                lo = np.maximum(y - pts["queueing_ratio_lo"].fill_null(0).to_numpy(), 0)
                hi = np.maximum(pts["queueing_ratio_hi"].fill_null(0).to_numpy() - y, 0)
                zero = lo >= y  # the 95% interval reaches 0: an arrow, not a clipped bar
                c = style.color(ci)
                ax.errorbar(xd, y, yerr=[np.where(zero, 0.0, lo), hi], marker=style.marker(ci), ms=5,
                            capsize=3, color=c, label=label)
                if zero.any():
                    reach0 = True
                    style.mark_ci_to_zero(ax, xd[zero], y[zero], c)
                xs_all.extend(xs.tolist())
                lp = limit_paths.get(key)
                if lp is not None:
                    lp = lp.filter(pl.col("queueing_ratio") > PLOT_RATIO_MIN)
                    ax.plot(lp[x].to_numpy(), lp["queueing_ratio"].to_numpy(), ls="--", lw=1.3, color=c)
                    xs_all.extend(lp[x].to_list())
            if any(limit_paths.get(k) is not None for k in group):
                ax.plot([], [], ls="--", color="0.3", label="mean field along the same path (dashed)")
                if policy == declared.policy_where("dispatch", k_task=True, batch=False):  # per task
                    ax.plot([], [], " ", label=PER_TASK_NOTE)
            if reach0:
                ax.add_line(style.ci_zero_handle())
            if hidden:
                ax.plot([], [], " ", label=f"{hidden} point(s) with ratio <= {PLOT_RATIO_MIN:g} not shown (log axis)")
            if len(group) > 1:
                ax.plot([], [], " ", label="series offset slightly in N to stay visible")
            style.log_axis(ax, "x", xs_all or None)
            ys = np.concatenate([arms[k]["queueing_ratio"].drop_nulls().to_numpy() for k in group]
                                + [limit_paths[k]["queueing_ratio"].drop_nulls().to_numpy() for k in group if k in limit_paths]
                                or [np.array([])])
            style.log_axis(ax, "y", ys[ys > PLOT_RATIO_MIN] if ys.size else None)
            ax.set_xlabel(style.label(x))
            # a sweep that names a service law: the inherent delay is the law's E[max of k sizes]
            ax.set_ylabel("queueing ratio (E[T] \u2212 E[T*]) / E[T*]" if "service" in arm
                          else style.label("queueing_ratio"))
            ax.set_title(f"{style.policy_name(policy)}: queueing ratio vs N (simulations: 95% CI)\n"
                         + _fixed_text(group[0], arm, same).strip(), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            axes_r.append(ax)
        # below the panels, not beside them: the long rule labels took half the width
        style.figure_legend(fig, axes_r, ncol=2)
        p = outdir / f"ratio_vs_n_{policy}.png"
        fig.savefig(p, dpi=110)
        paths.append(p)
    # 1b. the gap simulation - limit at the simulated N, one panel per policy
    gap_policies = sorted({k[0] for k in arms if k in limit_paths})
    if gap_policies:
        fig = Figure(figsize=(9.5, 3.4 * len(gap_policies) + 1.2), layout="constrained")
        FigureCanvasAgg(fig)
        axes_g = []
        for r, policy in enumerate(gap_policies):
            ax = fig.add_subplot(len(gap_policies), 1, r + 1)
            keys = [k for k in arms if k[0] == policy and k in limit_paths][:style.MAX_SERIES]
            same = _constant(keys, arm)
            xs_all = []
            for i, key in enumerate(keys):
                g = _gaps(arms[key], limit_paths[key], x)["gaps"]
                if not g:
                    continue
                label, ci = rules[key]
                xs = np.array([p["n"] for p in g], dtype=float)
                xd = style.dodge(xs, i, len(keys)) if len(keys) > 1 else xs
                y = np.array([p["gap"] for p in g])
                lo = np.array([p["gap"] - p["lo"] if p["lo"] is not None else 0.0 for p in g])
                hi = np.array([p["hi"] - p["gap"] if p["hi"] is not None else 0.0 for p in g])
                ax.errorbar(xd, y, yerr=[lo, hi], marker=style.marker(ci), ms=4, capsize=3, color=style.color(ci),
                            label=label)
                xs_all.extend(xs.tolist())
            ax.axhline(0.0, color="0.4", lw=0.8)
            style.log_axis(ax, "x", xs_all or None)
            ax.set_xlabel(style.label(x))
            ax.set_ylabel("simulated - mean-field ratio")
            ax.set_title(f"{style.policy_name(policy)}: gap of the queueing ratio to the mean field (95% CI)\n"
                         + (_fixed_text(keys[0], arm, same).strip() if keys else ""), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            axes_g.append(ax)
        style.figure_legend(fig, axes_g, ncol=2)  # one legend below: the rules are the same in every panel
        p = outdir / "gap_vs_n.png"
        fig.savefig(p, dpi=110)
        paths.append(p)
    # 2. d vs N per arm
    fig = Figure(figsize=(9.0, 5.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    seen: list[str] = []
    ds, ns = [], []
    same = _constant(list(arms), arm)
    drawn: list[tuple[str, dict]] = []  # (label, {N: d}) of the rules drawn so far
    coincide = []
    # rules with a limit path (the longest lines) first, so that a twin is drawn over them
    for key, pts in sorted(arms.items(), key=lambda kv: kv[0] not in limit_paths):
        pts = limit_paths.get(key, pts)  # the whole path where there is one
        lab, ci = rules[key]
        if lab in seen or "d" not in pts.columns or len(seen) >= style.MAX_SERIES:
            continue
        seen.append(lab)
        xs, dv = pts[x].to_numpy(), pts["d"].to_numpy()
        here = dict(zip(xs.tolist(), dv.tolist()))
        # a rule whose d equals another's at each of its N (c = 4 with a buffer: the same
        # formula) would hide under it: drawn on top, hollow and dashed, and said so
        twin = next((other for other, od in drawn if all(od.get(n) == v for n, v in here.items())), None)
        kw = {"marker": style.marker(ci), "color": style.color(ci), "label": lab}
        if twin is not None:
            name = twin.split(":")[0]
            kw.update(ls="--", mfc="none", ms=9, mew=1.5, zorder=3,
                      label=f"{lab}\n  (its d is {name}'s at every N: the same formula; drawn hollow on top)")
            coincide.append((lab.split(":")[0], name))
        ax.plot(xs, dv, **kw)
        drawn.append((lab, here))
        ds.extend(pts["d"].drop_nulls().to_list())
        ns.extend(pts[x].to_list())
    style.log_axis(ax, "x", ns or None)
    style.log_axis(ax, "y", ds or None)
    if ds and style.is_integer_valued(ds) and max(ds) / max(min(ds), 1) < 100:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}" if v >= 1 else ""))
    ax.set_xlabel(style.label(x))
    ax.set_ylabel(style.label("d"))
    ax.set_title("probe overhead d vs N per rule (the same for every policy)"
                 + (_fixed_text(next(iter(arms)), arm, same - {"engine"}) if arms else "")
                 + "".join(f"\n{a} has the d of {b} (one formula; it differs elsewhere, e.g. a buffer)"
                           for a, b in coincide), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    style.figure_legend(fig, [ax], ncol=2)
    p = outdir / "d_vs_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    # 3. tails at the largest N per arm: one panel per policy and group of MAX_SERIES arms
    panels = []
    for policy in sorted({k[0] for k in arms}):
        keys = [k for k in arms if k[0] == policy]
        same = _constant(keys, arm)
        panels += [(policy, keys[i:i + style.MAX_SERIES], same) for i in range(0, len(keys), style.MAX_SERIES)]
    fig = Figure(figsize=(9.5, 3.6 * len(panels) + 1.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes_t = []
    for r, (policy, keys, same) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, r + 1)
        cut = 0
        for i, key in enumerate(keys):
            last = arms[key].row(-1, named=True)
            tail = np.asarray(last.get("tail") or [], dtype=float)
            keep = tail > 1e-12
            if keep.any():
                lv = np.arange(1, tail.size + 1)
                lab, ci = rules[key]
                lab += f" (N = {_sci(last[x])})"
                kw = {"marker": style.marker(ci), "ms": 3, "color": style.color(ci)}
                if keep.sum() == 1:  # one level (a buffer b = 1): a point among the others' first points
                    b = dict(zip(arm, key[2:])).get("b")
                    why = f"buffer b = {b}: no server holds {int(b) + 1} tasks" if b is not None else "one level"
                    kw.update(ms=10, mfc="none", mew=1.6, zorder=3)
                    lab += f"\n  ({why}; $s_1$ only, the large hollow marker)"
                ax.plot(lv[keep], tail[keep], label=lab, **kw)
                if style.tail_is_cut(tail, 1e-12):
                    cut = max(cut, tail.size)
        if cut:
            style.mark_max_level(ax, cut)
        style.log_axis(ax, "y", [1e-12, 1.0])
        style.integer_axis(ax, "x")
        ax.set_xlabel(style.label("level"))
        ax.set_ylabel(style.label("tail"))
        ax.set_title(f"{style.policy_name(policy)}: tail at the largest N" + _fixed_text(keys[0], arm, same),
                     fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        axes_t.append(ax)
    style.figure_legend(fig, axes_t, ncol=2)
    p = outdir / "tail_at_max_n.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    return paths
