"""Numerical engines for load-balancing systems.

Pure numerics: numpy, numba and scipy only (never Ray, Hydra, MLflow or Polars).

The one entry point the pipeline uses is :func:`run`, which takes a *task* -- a plain dict
of values -- and returns a plain dict of estimates.  The task and result keys are documented
in ``docs/results-schema.md``; :data:`ENGINE_POLICIES` says which engine serves which policy.
"""
from __future__ import annotations

import importlib
import time

from sim.registry import ENGINE_POLICIES, ENGINES, POLICIES, RUNNERS, check_task

__all__ = ["run", "check_task", "ENGINES", "POLICIES", "ENGINE_POLICIES"]


def run(task: dict) -> dict:
    """Run one task and return its estimates as a plain dict (see docs/results-schema.md).

    The task is checked first (:func:`sim.registry.check_task`); a bad task raises
    ``ValueError`` naming the offending key and value.
    """
    check_task(task)
    t0 = time.perf_counter()
    module, _, func = RUNNERS[(task["engine"], task["policy"])].partition(":")
    out = getattr(importlib.import_module(module), func)(task)
    out["wall_time"] = time.perf_counter() - t0
    return out
