"""Statistics of sweep results: confidence intervals, mean-field overlays, scaling fits, verdicts.

Reads Polars frames with the row schema of ``docs/results-schema.md``; never runs a simulation.
The rules (aggregation, interval methods, the fit and the verdict) are in ``docs/analysis.md``.

    from analysis import analyze
    out = analyze(pl.scan_parquet("run/results/*.parquet"), ["n_servers", "lam", "d"],
                  "run/analysis", sweep_name="pod_limit")
"""
from __future__ import annotations

from analysis.aggregate import METRICS, aggregate, compare_to_meanfield
from analysis.fit import arm_columns, fit_gap_rate, wls_loglog
from analysis.plots import make_plots
from analysis.report import count_tasks, write_report
from analysis.summary import analyze, summarize

#: analyses a sweep can ask for by name (config key ``extra_analyses``), beside the standard
#: mean-field comparison that every sweep gets. Each takes ``(frame, params, outdir, sweep_name)``
#: and returns a dict with at least ``report`` (a Path) and ``plots`` (a list of Paths), and
#: optionally ``metrics`` ([(key, value, step)]) for MLflow.
ANALYSES: dict = {}

from analysis.centralization import analyze_centralization  # noqa: E402  (needs ANALYSES defined)

ANALYSES["centralization"] = analyze_centralization

from analysis.zero_queueing import analyze_zero_queueing  # noqa: E402

ANALYSES["zero_queueing"] = analyze_zero_queueing

from analysis.jiq import analyze_jiq  # noqa: E402

ANALYSES["jiq"] = analyze_jiq

from analysis.led import analyze_led  # noqa: E402

ANALYSES["led"] = analyze_led

from analysis.response_times import analyze_response_times  # noqa: E402

ANALYSES["response_times"] = analyze_response_times

from analysis.transients import analyze_transients  # noqa: E402

ANALYSES["transients"] = analyze_transients

__all__ = [
    "ANALYSES",
    "METRICS",
    "aggregate",
    "compare_to_meanfield",
    "arm_columns",
    "fit_gap_rate",
    "wls_loglog",
    "make_plots",
    "count_tasks",
    "write_report",
    "summarize",
    "analyze",
]
