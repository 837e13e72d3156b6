"""One analysis module or package per model (or per question a model's sweeps ask), beside the general ones.

Each module here exports ``ANALYSES``, a dict from the name a sweep's ``extra_analyses`` uses to
a function ``(frame, params, outdir, sweep_name) -> dict`` (at least ``report``, ``plots``,
``metrics`` and ``verdict_lines``, the console lines of its verdicts). :data:`ANALYSES`
collects every module of this package; ``analysis.ANALYSES`` adds the general analyses and
those an out-of-tree model declares (docs/extending.md).

- :mod:`~analysis.models.zero_queueing`: the dispatch model's headline question (queueing ratio
  of k-task jobs as N grows);
- :mod:`~analysis.models.centralization`: partial centralization against its invariant state;
- :mod:`~analysis.models.jiq`: distributed JIQ against the paper and the mean field;
- :mod:`~analysis.models.led`: multiple dispatchers with local estimates.
"""
from __future__ import annotations

import importlib
import pkgutil

__all__ = ["ANALYSES"]

ANALYSES: dict = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name, _fn in getattr(_module, "ANALYSES", {}).items():
        if _name in ANALYSES:
            raise ValueError(f"analysis {_name!r} is served by two modules of analysis.models")
        ANALYSES[_name] = _fn
