"""A short Markdown report of one sweep: counts, estimates vs mean field, fits, verdicts, figures."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from analysis.aggregate import LIMIT_ENGINES
from analysis.fmt import num as _num
from analysis.fmt import pm
from analysis.plots import arm_label

__all__ = ["count_tasks", "write_report"]

_MAX_ERRORS = 5


def count_tasks(df: pl.DataFrame) -> dict:
    """Tasks and failures of a raw result frame, overall and per engine, plus the commonest errors.

    Returns ``{"n_tasks", "n_failed", "by_engine": {engine: {"n_tasks", "n_failed"}},
    "errors": [{"error", "count"}, ...]}`` (at most 5 distinct error texts, commonest first).
    A frame without ``status`` counts as all ok.
    """
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    status = df["status"] if "status" in df.columns else pl.Series("status", ["ok"] * df.height)
    failed = (status != "ok").fill_null(True)
    out = {"n_tasks": int(df.height), "n_failed": int(failed.sum()), "by_engine": {}, "errors": []}
    if "engine" in df.columns:
        for engine in sorted(df["engine"].drop_nulls().unique().to_list()):
            mask = df["engine"] == engine
            out["by_engine"][engine] = {
                "n_tasks": int(mask.sum()),
                "n_failed": int((failed & mask).sum()),
            }
    if out["n_failed"] and "error" in df.columns:
        errs = (
            df.filter(failed)
            .with_columns(pl.col("error").fill_null("(no error text)").str.slice(0, 200))
            .group_by("error")
            .agg(pl.len().alias("count"))
            .sort(["count", "error"], descending=[True, False])
            .head(_MAX_ERRORS)
        )
        out["errors"] = [{"error": r["error"], "count": int(r["count"])} for r in errs.to_dicts()]
    return out


def _pm(v, hw) -> str:
    return pm(v, hw)  # no ± where the half-width is rounding noise (analysis.fmt.pm)


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return lines


def write_report(
    outdir,
    *,
    sweep_name: str,
    counts: dict,
    summary: pl.DataFrame,
    fits: pl.DataFrame | None,
    params: Sequence[str],
    x: str = "n_servers",
    metric: str = "mean_response",
    arm_params: Sequence[str] = (),
    plots: Sequence[Path] = (),
    notes: Sequence[str] = (),
) -> Path:
    """Write ``<outdir>/report.md`` and return its path.

    ``counts`` is :func:`count_tasks` of the raw frame; ``summary`` the aggregate with the
    comparison columns (:func:`analysis.summary.summarize`); ``fits`` the output of
    :func:`analysis.fit.fit_gap_rate` (or ``None``).  Figures are linked relative to ``outdir``.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    arm_params = list(arm_params)
    lines = [f"# Sweep `{sweep_name}`: analysis report", ""]
    by_engine = ", ".join(
        f"{e}: {c['n_tasks']} ({c['n_failed']} failed)" for e, c in counts.get("by_engine", {}).items()
    )
    lines.append(
        f"Tasks: **{counts['n_tasks']}**, failures: **{counts['n_failed']}**"
        + (f" (by engine: {by_engine})." if by_engine else ".")
    )
    lines.append("")
    lines.append(
        f"Parameters: {', '.join(f'`{p}`' for p in params)}; scaling variable `{x}`; "
        f"arms labelled by {', '.join(f'`{p}`' for p in arm_params) or 'policy only'}; "
        f"metric `{metric}`. Intervals are 95%; how each was computed is in the CI column "
        "(rules: `docs/analysis.md` of the project)."
    )
    for note in notes:
        lines += ["", f"Note: {note}"]
    if counts.get("errors"):
        lines += ["", "## Failures", ""]
        lines += _table(["error (first 200 chars)", "tasks"], [[e["error"], str(e["count"])] for e in counts["errors"]])

    lines += ["", f"## Estimates and gap to the mean field (`{metric}`)", ""]
    data = summary.filter(pl.col("n_rep") >= 1) if summary.height else summary
    if data.height and metric in data.columns:
        # rows without the metric (a trajectory's path rows) are not estimates of it: left out,
        # and said so, rather than tabulated as empty cells
        without = data.filter(pl.col(metric).is_null())
        data = data.filter(pl.col(metric).is_not_null())
        if without.height:
            by = ", ".join(f"{e}: {c}" for e, c in sorted(without.group_by("engine").len().rows()))
            lines += [f"Rows without a `{metric}` estimate are not tabulated here (by engine: {by}); "
                      "their model's own analysis reports them.", ""]
    if data.height == 0:
        lines.append("No successful task: nothing to tabulate." if not summary.height
                     else f"No row estimates `{metric}`: nothing to tabulate.")
    else:
        gap, mfc = f"{metric}_gap", f"{metric}_mf"
        arm_keys = ["policy", *arm_params]
        arms = data.select(arm_keys).unique().sort(arm_keys, nulls_last=True).to_dicts()
        for arm in arms:
            cond = pl.lit(True)
            for c in arm_keys:
                cond = cond & (pl.col(c).is_null() if arm[c] is None else (pl.col(c) == arm[c]))
            sub = data.filter(cond).sort([x, "engine"])
            sims = sub.filter(~pl.col("engine").is_in(list(LIMIT_ENGINES)))
            shown = sims if sims.height else sub  # mean-field rows only when nothing was simulated
            extra = [p for p in params if p not in arm_params and p != x]
            lines += [f"### {arm['policy']}: {arm_label(arm, arm_params)}", ""]
            header = [x, *extra, "engine", "R (failed)", "CI method", f"{metric} ± CI", "mean field", "gap ± CI", "rel. gap"]
            rows = []
            for r in shown.to_dicts():
                is_limit = r["engine"] in LIMIT_ENGINES
                failed = f" ({r['n_error']})" if r.get("n_error") else ""
                rows.append([
                    _num(r[x]), *[_num(r[p]) for p in extra], r["engine"], f"{r['n_rep']}{failed}",
                    r["ci_method"],
                    _pm(r[metric], r.get(f"{metric}_hw")),
                    _num(r[metric] if is_limit else r.get(mfc)),
                    "-" if is_limit else _pm(r.get(gap), r.get(f"{metric}_gap_hw")),
                    "-" if is_limit else _num(r.get(f"{metric}_rel_gap"), 3),
                ])
            lines += _table(header, rows)
            lines.append("")

    lines += ["## Fits and verdicts", ""]
    if fits is None or fits.height == 0:
        lines.append(f"No fit (needs simulation and mean-field rows, and `{x}` taking several values).")
    else:
        header = ["engine", "policy", "arm", "significant / usable", "slope b", "95% CI of b", "red. chi2", "verdict", "note"]
        rows = []
        for f in fits.to_dicts():
            ci = "-" if f["slope_lo"] is None else f"[{_num(f['slope_lo'], 3)}, {_num(f['slope_hi'], 3)}]"
            rows.append([
                f["engine"], f["policy"], arm_label(f, arm_params),
                f"{f['n_significant']} / {f['n_usable']}", _num(f["slope"], 3), ci,
                _num(f["red_chi2"], 3), f["verdict"], f["note"] or "",
            ])
        lines += _table(header, rows)
        lines += [
            "",
            "Fit: weighted least squares of log|gap| on log x over the significant points "
            "(|gap| > 2 se and the point's 95% CI excludes 0), weights (gap/se)^2 (delta method), "
            "residual-scaled covariance, t with n-2 dof. Verdict: *no significant gap* when no "
            "point is significant after a Bonferroni correction over the arm and fewer than 3 are "
            "significant alone; *converges* when >= 3 significant points share a sign and the whole "
            "95% interval of b is below 0; otherwise *inconclusive*.",
        ]

    lines += ["", "## Figures", ""]
    if not plots:
        lines.append("No figures.")
    for p in plots:
        rel = os.path.relpath(Path(p), outdir)
        lines += [f"![{Path(p).stem}]({rel})", ""]
    path = outdir / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
