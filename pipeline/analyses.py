"""The names a sweep's ``extra_analyses`` may use: checked at plan time without importing the
analyses (nor Polars or matplotlib).

The analyses are listed once, in :data:`analysis.catalog.ANALYSES` (name -> ``"module:function"``);
a model kept outside the project adds its own in its declaration
(:attr:`sim.core.declare.Model.analyses`). ``analysis.model_analyses()`` imports the functions
when a run makes its analysis; a test checks that both agree name for name and function for
function.
"""
from __future__ import annotations

from analysis.catalog import ANALYSES
from sim import registry

__all__ = ["declared_analyses"]


def declared_analyses() -> dict[str, str]:
    """Every analysis name a sweep may ask for: the catalog's, then those the registered models
    declare that it does not list (an out-of-tree model loaded by the sweep's ``models:``), in
    the order :func:`analysis.model_analyses` makes them."""
    refs = dict(ANALYSES)
    for decl in registry.MODELS.values():
        for name, ref in sorted(decl.analyses.items()):
            refs.setdefault(name, ref)
    return refs
