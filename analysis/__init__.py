"""Statistics of sweep results: confidence intervals, mean-field overlays, scaling fits, verdicts.

Reads Polars frames with the row schema of ``docs/results-schema.md``; never runs a simulation.
The rules (aggregation, interval methods, the fit and the verdict) are in ``docs/analysis.md``.

    from analysis import analyze
    out = analyze(pl.scan_parquet("run/results/*.parquet"), ["n_servers", "lam", "d"],
                  "run/analysis", sweep_name="pod_limit")
"""
from __future__ import annotations

from analysis import models as _models
from analysis import response_times as _response_times
from analysis import transients as _transients
from analysis.aggregate import METRICS, aggregate, compare_to_meanfield
from analysis.fit import arm_columns, fit_gap_rate, wls_loglog
from analysis.plots import make_plots
from analysis.report import count_tasks, write_report
from analysis.summary import analyze, summarize

#: analyses a sweep can ask for by name (config key ``extra_analyses``), beside the standard
#: mean-field comparison that every sweep gets: the general ones (response times, transients),
#: every module of :mod:`analysis.models`, and those an out-of-tree model declares
#: (:func:`model_analyses`). Each takes ``(frame, params, outdir, sweep_name)`` and returns a
#: dict with at least ``report`` (a Path), ``plots`` (a list of Paths) and ``verdict_lines``
#: (its console lines), optionally ``metrics`` ([(key, value, step, arm)]) for MLflow and
#: ``console_lines`` (its answer on one screen, lines of at most 120 characters, printed by the
#: pipeline in place of ``verdict_lines``, which the report keeps; docs/running.md).
ANALYSES: dict = {**_response_times.ANALYSES, **_transients.ANALYSES, **_models.ANALYSES}


def model_analyses() -> dict:
    """:data:`ANALYSES` with the analyses the registered models declare
    (:attr:`sim.core.declare.Model.analyses`, ``"module:function"``, read through
    :mod:`analysis.declared`), imported here. The plan checks the same names without importing
    analysis (``pipeline/analyses.py``)."""
    import importlib

    from analysis.declared import models

    for decl in models().values():
        for name, ref in decl.analyses.items():
            if name not in ANALYSES:
                module, _, func = ref.partition(":")
                ANALYSES[name] = getattr(importlib.import_module(module), func)
    return ANALYSES


__all__ = [
    "ANALYSES",
    "model_analyses",
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
