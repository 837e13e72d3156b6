"""Statistics of sweep results: confidence intervals, mean-field overlays, scaling fits, verdicts.

Reads Polars frames with the row schema of ``docs/results-schema.md``; never runs a simulation.
The rules (aggregation, interval methods, the fit and the verdict) are in ``docs/analysis.md``.

    from analysis import analyze
    out = analyze(pl.scan_parquet("run/results/*.parquet"), ["n_servers", "lam", "d"],
                  "run/analysis", sweep_name="pod_limit")
"""
from __future__ import annotations

import importlib

from analysis.catalog import ANALYSES as CATALOG

#: the package's entry points, imported on first use (PEP 562): importing a light submodule
#: such as :mod:`analysis.catalog` (the plan does) loads neither Polars nor matplotlib
_EXPORTS = {
    "METRICS": "analysis.aggregate", "compare_to_meanfield": "analysis.aggregate",
    "arm_columns": "analysis.fit", "fit_gap_rate": "analysis.fit", "wls_loglog": "analysis.fit",
    "make_plots": "analysis.plots", "count_tasks": "analysis.report",
    "write_report": "analysis.report", "analyze": "analysis.summary",
    "summarize": "analysis.summary",
}


def _load(ref: str):
    module, _, func = ref.partition(":")
    return getattr(importlib.import_module(module), func)


def model_analyses() -> dict:
    """Every analysis a sweep can ask for, imported: those of :data:`analysis.catalog.ANALYSES`
    in its order, then those the registered models declare that it does not list (a model kept
    outside the project, :attr:`sim.core.declare.Model.analyses`, read through
    :mod:`analysis.declared`). The plan checks the same names without importing them
    (``pipeline/analyses.py``)."""
    from analysis.declared import models

    refs = dict(CATALOG)
    for decl in models().values():
        for name, ref in sorted(decl.analyses.items()):
            refs.setdefault(name, ref)
    return {name: _load(ref) for name, ref in refs.items()}


def __getattr__(name: str):
    if name == "ANALYSES":
        return model_analyses()
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


__all__ = ["ANALYSES", "CATALOG", "model_analyses", *_EXPORTS]
