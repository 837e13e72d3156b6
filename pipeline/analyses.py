"""The names a sweep's ``extra_analyses`` may use, from declarations: checked at plan time
without importing :mod:`analysis` (nor matplotlib).

Every model declares its own analyses (:attr:`sim.core.declare.Model.analyses`, name ->
``"module:function"``); the general analyses, which serve any model whose rows they need,
are listed here. ``analysis.model_analyses()`` imports the functions when a run makes its
analysis; a test checks that the two agree name for name and function for function.
"""
from __future__ import annotations

from sim import registry

__all__ = ["GENERAL_ANALYSES", "declared_analyses"]

#: the general analyses (``analysis.ANALYSES`` beside the models' own): name -> "module:function"
GENERAL_ANALYSES = {
    "response_times": "analysis.response_times:analyze_response_times",
    "transients": "analysis.transients:analyze_transients",
}


def declared_analyses() -> dict[str, str]:
    """Every analysis name a sweep may ask for: the general ones, then those of every
    registered model (an out-of-tree model loaded by the sweep's ``models:`` included)."""
    own: dict[str, str] = {}
    for decl in registry.MODELS.values():
        for name, ref in decl.analyses.items():
            own.setdefault(name, ref)
    # the models' own in name order, as analysis.models lists its modules
    return {**GENERAL_ANALYSES, **{n: own[n] for n in sorted(own) if n not in GENERAL_ANALYSES}}
