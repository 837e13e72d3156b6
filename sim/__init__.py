"""Numerical engines for load-balancing systems.

Pure numerics: numpy, numba and scipy only (never Ray, Hydra, MLflow or Polars).

The one entry point the pipeline uses is :func:`run`, which takes a *task* -- a plain dict
of values -- and returns a plain dict of estimates. The task and result keys are documented
in ``docs/results-schema.md``; :mod:`sim.registry` declares which engine serves which policy of
which model, with which parameters. Layout: ``sim/core/`` holds the model-free machinery,
and each model is one package (``sim/dispatch/``, ``sim/centralization/``, ...) with one runner
per engine (docs/architecture.md).
"""
from __future__ import annotations

import importlib
import time

from sim.registry import ENGINE_POLICIES, ENGINES, POLICIES, check_task, entry

__all__ = ["run", "check_task", "ENGINES", "POLICIES", "ENGINE_POLICIES"]


def run(task: dict) -> dict:
    """Run one task and return its estimates as a plain dict (see docs/results-schema.md).

    The task is checked first (:func:`sim.registry.check_task`); a bad task raises
    ``ValueError`` naming the offending key and value.
    """
    check_task(task)
    t0 = time.perf_counter()
    module, _, func = entry(task["engine"], task["policy"]).runner.partition(":")
    out = getattr(importlib.import_module(module), func)(task)
    out["wall_time"] = time.perf_counter() - t0
    return out
