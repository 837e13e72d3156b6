"""The figures of the LED analysis (response, heavy-traffic ratio, messages, imbalance).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import style
from analysis.fmt import num as _fmt
from analysis.models.led.labels import _SHORT, _series_label, _varying

_COLORS = list(style.PALETTE)
_X_LABELS = {"lam": "load $\\rho = \\lambda_\\Sigma / \\mu_\\Sigma$ (arrivals over service capacity)",
             "p_hat": "update probability $\\hat p$ (Push, per dispatcher and slot)"}


def _panels(keys: list[dict], arm: list[str]) -> list[tuple[str, list[dict]]]:
    """The arms in groups of at most ``style.MAX_SERIES`` (one colour each), split by an arm
    column where one does it (:func:`analysis.style.split_series`): ``(title suffix, arms)``."""
    out = []
    # split by a setting shared by the policies first (p_hat, a variant), so that a panel sets
    # the policies side by side; by a policy's own parameter (d) or the policy last
    own = ("policy", "d")
    for fixed, g in style.split_series(keys, [a for a in arm if a not in own] + ["d", "policy"]):
        out.append((", ".join(f"{_SHORT.get(c, c)} = {_fmt(v)}" for c, v in fixed.items()
                              if v is not None), g))
    return out


def _title(text: str, fixed: str) -> str:
    return f"{text}; {fixed}" if fixed else text


def _axes(n: int, width: float = 8.5, height: float = 4.8):
    fig = Figure(figsize=(width, height * n + 0.3), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(n, 1, i + 1) for i in range(n)]


def _one_baseline_run(agg: pl.DataFrame) -> pl.DataFrame:
    """The baselines ignore the LED update variants, so their rows repeat per variant: plots
    keep, per baseline and tie rule (``ties``, where a sweep varies it), the first variant's
    (the report's table has every row)."""
    if "variant" not in agg.columns or agg["variant"].n_unique() < 2:
        return agg
    keys = ["policy"] + (["ties"] if "ties" in agg.columns else [])
    first = (agg.filter(~pl.col("policy").str.starts_with("l_"))
             .group_by(keys, maintain_order=True).agg(pl.col("variant").first().alias("_first")))
    return (agg.join(first, on=keys, how="left", nulls_equal=True)
            .filter(pl.col("policy").str.starts_with("l_") | (pl.col("variant") == pl.col("_first")))
            .drop("_first"))


def _arm_figure(agg, arm, x, min_x: int):
    """The figure of a plot of one curve per arm against ``x``: ``(agg with one baseline run,
    the varying arm columns, the panels, the figure, its axes)``, or None without rows or with
    fewer than ``min_x`` values of ``x``."""
    agg = _one_baseline_run(agg)
    if agg.height == 0 or agg[x].n_unique() < min_x:
        return None
    all_keys = agg.select(arm).unique(maintain_order=True).rows(named=True)
    panels = _panels(all_keys, arm)
    return (agg, _varying(all_keys), panels, *_axes(len(panels)))


def _of_arm(frame, key: dict, *conditions) -> pl.DataFrame:
    """The rows of ``frame`` of the arm ``key`` (nulls matching nulls) that meet ``conditions``."""
    return frame.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()], *conditions)


def _finish(ax, agg, x, xlabel: str, ylabel: str, title: str) -> None:
    """A panel's log x-axis (against ``p_hat``), labels, title, grid and legend."""
    if x == "p_hat":
        style.log_axis(ax, "x", agg[x].drop_nulls().to_list())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    style.legend_outside(ax)


def _save(fig, outdir, name: str) -> Path:
    path = outdir / name
    fig.savefig(path, dpi=120)
    return path


def _plot_response(agg, unstable, arm, x, outdir) -> Path | None:
    made = _arm_figure(agg, arm, x, 3)
    if made is None:
        return None
    agg, varying, panels, fig, axes = made
    top = float(agg["mean_response"].max()) * 2
    for ax, (fixed, keys) in zip(axes, panels):
        zero, crosses, shown = False, False, []
        for j, key in enumerate(keys):
            c = _COLORS[j]
            s = _of_arm(agg, key).sort(x)
            shown += s["mean_response"].drop_nulls().to_list()
            zero |= style.errorbar_log(ax, s[x].to_numpy(), s["mean_response"].to_numpy(),
                                       np.asarray(s["mean_response_hw"].to_list(), float), color_=c,
                                       fmt=style.marker(j) + "-", ms=4, capsize=2,
                                       label=_series_label({**s.row(0, named=True), **key},
                                                           varying))
            if unstable.height:
                u = _of_arm(unstable, key)
                if u.height:
                    crosses = True
                    ax.plot(u[x].unique().to_list(), [top] * u[x].n_unique(), "x", color=c, ms=8)
        if crosses:
            ax.plot([], [], "x", color="0.3", ms=8, ls="none", label="unstable run (not averaged)")
        if zero:
            ax.add_line(style.ci_zero_handle())
        # this panel's values: its own span sets the labels
        style.log_axis(ax, "y", shown + ([top] if crosses else []))
        _finish(ax, agg, x, _X_LABELS[x], "mean response time (slots)",
                _title("mean response time (95% CI over replications)", fixed))
    return _save(fig, outdir, f"response_vs_{x}.png")


def _plot_ratio(table: list[dict], outdir) -> Path | None:
    table = [t for t in table if len(t["eps"]) >= 3]
    if not table:
        return None
    groups = [table[i:i + style.MAX_SERIES] for i in range(0, len(table), style.MAX_SERIES)]
    fig, axes = _axes(len(groups))
    for ax, group in zip(axes, groups):
        zero = False
        for j, t in enumerate(group):
            zero |= style.errorbar_log(ax, t["eps"], t["ratio"], np.asarray(t["ratio_hw"], float),
                                       color_=_COLORS[j], fmt=style.marker(j) + "-", ms=4, capsize=2,
                                       label=f"{t['label']}: {t['verdict']}; Theorem 2 "
                                             f"{t['theorem']}")
        ax.axhline(1.0, color="k", ls="--", lw=1, label="heavy-traffic limit 1")
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.log_axis(ax, "x", [e for t in group for e in t["eps"]])
        style.log_axis(ax, "y", [r for t in group for r in t["ratio"] if r is not None and r > 0] + [1.0])
        _finish(ax, None, "eps", "$\\epsilon = \\mu_\\Sigma - \\lambda_\\Sigma$ (spare capacity, tasks per slot)",
                "heavy-traffic ratio $\\epsilon\\, E[\\sum_n Q_n] / \\zeta$",
                "heavy-traffic ratio against $\\epsilon$ (95% CI over replications)")
    return _save(fig, outdir, "ht_ratio_vs_eps.png")


def _plot_messages(agg, arm, x, outdir) -> Path | None:
    made = _arm_figure(agg, arm, x, 2)
    if made is None:
        return None
    agg, varying, panels, fig, axes = made
    for ax, (fixed, keys) in zip(axes, panels):
        vals = []
        for j, key in enumerate(keys):
            s = _of_arm(agg, key, pl.col("messages_per_job") > 0).sort(x)
            if s.height:
                ax.plot(s[x], s["messages_per_job"], style.marker(j) + "-", ms=4, color=_COLORS[j],
                        label=_series_label({**s.row(0, named=True), **key}, varying) + " (spent)")
                vals += s["messages_per_job"].to_list()
                b = s.filter(pl.col("msg_budget_per_job").is_not_null())
                if b.height:
                    ax.plot(b[x], b["msg_budget_per_job"], "--", lw=1.2, color=_COLORS[j],
                            label=_series_label({**b.row(0, named=True), **key}, varying)
                            + " budget")
                    vals += b["msg_budget_per_job"].to_list()
        style.log_axis(ax, "y", vals or None)
        _finish(ax, agg, x, _X_LABELS.get(x, style.label(x, ["slotted"])), "one-way messages per arriving task",
                _title("messages per arrival: spent (solid), budget (dashed); 0 not shown", fixed))
    return _save(fig, outdir, "messages.png")


def _plot_imbalance(agg, arm, x, outdir) -> Path | None:
    made = _arm_figure(agg, arm, x, 3) if "imbalance" in agg.columns else None
    if made is None:
        return None
    agg, varying, panels, fig, axes = made
    for ax, (fixed, keys) in zip(axes, panels):
        zero, shown = False, []
        for j, key in enumerate(keys):
            s = _of_arm(agg, key, pl.col("imbalance").is_not_null()).sort(x)
            if not s.height:
                continue
            shown += s["imbalance"].to_list()
            zero |= style.errorbar_log(ax, s[x].to_numpy(), s["imbalance"].to_numpy(),
                                       np.asarray(s["imbalance_hw"].to_list(), float),
                                       color_=_COLORS[j], fmt=style.marker(j) + "-", ms=4,
                                       capsize=2,
                                       label=_series_label({**s.row(0, named=True), **key},
                                                           varying))
        if zero:
            ax.add_line(style.ci_zero_handle())
        style.log_axis(ax, "y", shown)  # this panel's values: its own span sets the labels
        _finish(ax, agg, x, _X_LABELS[x], "imbalance $E\\,\\|Q - \\bar Q\\,\\mathbf{1}\\|_2$ (tasks)",
                _title("queue imbalance at slot starts (95% CI over replications)", fixed))
    return _save(fig, outdir, f"imbalance_vs_{x}.png")
