"""Sections of the LED report (``report.md``): Theorem 2's line, the imbalance trends, message budgets.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from analysis.fmt import num as _fmt
from analysis.models.led.labels import _label
from analysis.models.led.verdicts import CONSISTENT, NOT_SHOWN


def _theorem_line(t: dict) -> str:
    """The Theorem 2 field of one arm, with the number behind it."""
    i = int(np.argmin(t["eps"]))
    at = f"eps = {t['eps'][i]:.3g}: ratio {t['ratio'][i]:.3f} +- {_fmt(t['ratio_hw'][i])}"
    if t["theorem"] in (CONSISTENT, NOT_SHOWN):
        return (f"{t['theorem']} (intercept {t['intercept']:.3f} +- {t['intercept_hw']:.3f} "
                f"through eps {', '.join(f'{e:.3g}' for e in t['fit_eps'])}; {at})")
    return f"{t['theorem']} ({at})"


def _trend_lines(trends: list[dict]) -> list[str]:
    if not trends:
        return []
    over = trends[0]["over"]
    what = ("the update probability p_hat" if over == "p_hat"
            else "the tilt (d - 1) / N of L-Pod(d)")
    lines = ["", f"## Queue imbalance against {what}", "",
             "E||Q - mean(Q)||_2 at slot starts; slope of log(imbalance) against log("
             f"{'p_hat' if over == 'p_hat' else '(d - 1) / N'}) by weighted least squares (95% CI).", "",
             "| arm | " + ("p_hat" if over == "p_hat" else "tilt") + ": imbalance | slope (95% CI) |",
             "|---|---|---|"]
    for t in trends:
        cells = "; ".join(f"{x:.3g}: {v:.4g}" for x, v in zip(t["x"], t["imbalance"]))
        lines.append(f"| {t['label']} | {cells} | {t['slope']:.3f} [{t['slope_lo']:.3f}, "
                     f"{t['slope_hi']:.3f}] |")
    return lines


def _budget_section(agg: pl.DataFrame, params: list[str]) -> list[str]:
    """Report lines: per point with a message budget, the budget, what was spent, p_hat used."""
    if "msg_budget_per_job" not in agg.columns:
        return []
    b = agg.filter(pl.col("msg_budget_per_job").is_not_null())
    if b.height == 0:
        return []
    show = [p for p in params if p in ("variant", "lam", "update", "d_u", "msg_budget",
                                       "msg_budget_pod_d")]
    lines = ["", "## Message budget: target against spent (one-way messages per arriving task)", "",
             "Spent: mean over replications (+- their standard deviation); p_hat used: mean "
             "(min..max) over replications. Pull's p_hat is calibrated by pilot runs per task, "
             "Push's set exactly; a p_hat of 0 or 1 is clipped (budget not reachable).", "",
             "| policy | " + " | ".join(show) + " | budget | spent | spent / budget | p_hat used |",
             "|---|" + "---|" * len(show) + "---|---|---|---|"]
    for r in b.sort(["policy", *params]).iter_rows(named=True):
        ratio = r["messages_per_job"] / r["msg_budget_per_job"] if r["msg_budget_per_job"] else None
        lines.append(f"| {_label(r)} | " + " | ".join(_fmt(r[p]) for p in show) +
                     f" | {r['msg_budget_per_job']:.4g} | {_fmt(r['messages_per_job'])} +- "
                     f"{_fmt(r['messages_per_job_sd'])} | {_fmt(ratio)} | {_fmt(r['p_hat_used'])} "
                     f"({_fmt(r['p_hat_used_min'])}..{_fmt(r['p_hat_used_max'])}) |")
    return lines
