"""The one list of the analyses a sweep may ask for by name (``extra_analyses``).

Every sweep gets the standard mean-field comparison; these come on top of it. Each entry names
its function as ``"module:function"`` rather than importing it: the plan checks a sweep's names
against this list before anything runs, and the analyses load Polars and matplotlib, which
planning must not pay for (``tests/pipeline/test_analyses_declared.py`` plans in a fresh
process and looks at ``sys.modules``). :func:`analysis.model_analyses` imports the functions
when a run makes its analysis. A model kept outside the project declares its own analyses in
its declaration (:attr:`sim.core.declare.Model.analyses`): they live outside this package.

Each function takes ``(frame, params, outdir, sweep_name)`` and returns a dict with at least
``report`` (a Path), ``plots`` (a list of Paths) and ``verdict_lines`` (its console lines),
optionally ``metrics`` (``[(key, value, step, arm)]``) for MLflow and ``console_lines`` (its
answer on one screen, lines of at most 120 characters, printed by the pipeline in place of
``verdict_lines``, which the report keeps; docs/running.md).
"""
from __future__ import annotations

__all__ = ["ANALYSES"]

#: name -> "module:function": the general analyses first (they serve any model whose rows they
#: need), then those of the models' own questions (:mod:`analysis.models`), by name
ANALYSES: dict[str, str] = {
    "response_times": "analysis.response_times:analyze_response_times",
    "transients": "analysis.transients:analyze_transients",
    "centralization": "analysis.models.centralization:analyze_centralization",
    "jiq": "analysis.models.jiq:analyze_jiq",
    "led": "analysis.models.led:analyze_led",
    "led_heavy_traffic": "analysis.models.led:analyze_led_heavy_traffic",
    "zero_queueing": "analysis.models.zero_queueing:analyze_zero_queueing",
}
