"""What every simulator shares at its edges: number checks and result rows.

A simulator's public ``simulate`` validates its run settings through
:class:`sim.core.skeleton.Run` (the model's own parameters it checks itself), and its
``run_task`` ends with :func:`result_row`, which
turns a result NamedTuple into the plain-typed row that ``sim.run`` returns, so that every
engine's row types agree (docs/results-schema.md).
"""
from __future__ import annotations

import collections
import math
import sys

import numpy as np

__all__ = ["is_int", "is_number", "is_integral", "RESULT_KEYS", "SIM_FIELDS", "OPTIONAL_SIM_FIELDS",
           "simulation_result", "result_row", "simulation_row", "exact_row"]

RESULT_KEYS: tuple[str, ...] = (
    "mean_response", "mean_response_se", "mean_wait", "mean_wait_se", "prob_wait", "prob_wait_se",
    "mean_queue", "mean_queue_se", "tail", "tail_se", "queueing_ratio", "queueing_ratio_se", "drop_prob",
    "drop_prob_se", "frac_within_h", "messages_per_job", "n_jobs", "events_run", "sim_time",
    "warmup_time", "ci_method",
)


def is_int(x) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_number(x) -> bool:
    """A real number (Python or numpy), not a bool."""
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, (bool, np.bool_)))


def check_real(name: str, v, ok, must: str, *, not_number: str | None = None) -> float:
    """``float(v)`` for a finite real number ``v`` (not a bool) with ``ok(float(v))``; else
    ``ValueError`` "``name=v`` must be ``must``" (``not_number`` in place of ``must`` where
    ``v`` is not a number, if given)."""
    if not is_number(v):
        raise ValueError(f"{name}={v!r} must be {not_number or must}")
    f = float(v)
    if not (math.isfinite(f) and ok(f)):
        raise ValueError(f"{name}={v!r} must be {must}")
    return f


def is_integral(x) -> bool:
    """An integer, or a finite integer-valued float (YAML formulas give floats)."""
    return is_int(x) or (is_number(x) and math.isfinite(float(x)) and float(x).is_integer())


#: the fields every simulator's result has (:func:`simulation_result`), with their meaning
SIM_FIELDS: dict[str, str] = {
    "mean_response": "mean response time of a job (arrival to the end of its last task)",
    "mean_response_se": "its batch-means standard error (so every ``*_se``)",
    "mean_queue": "time-average tasks per server, in service included",
    "mean_queue_se": "",
    "tail": "``tail[i-1] = s_i``, time-average fraction of servers with >= i tasks, i = 1..max_level",
    "tail_se": "",
    "n_jobs": "jobs whose response was measured after the warm-up cut",
    "events_run": "events simulated, warm-up included",
    "sim_time": "simulated time, warm-up included",
    "warmup_time": "simulated time cut as warm-up",
    "warmup_windows": "windows cut by MSER-5",
    "n_windows": "windows of the run",
    "n_batches": "batches of batch means",
    "ci_method": "how the standard errors were made (:func:`sim.core.output.ci_label`)",
}
#: the fields a simulator's result may have, None (empty) unless its engine sets them
OPTIONAL_SIM_FIELDS: dict[str, str] = {
    "mean_wait": "mean wait of a task before its service starts",
    "mean_wait_se": "",
    "prob_wait": "fraction of jobs that wait",
    "prob_wait_se": "",
    "queueing_ratio": "(mean_response - H_k) / H_k",
    "queueing_ratio_se": "",
    "drop_prob": "dropped / arriving jobs",
    "drop_prob_se": "",
    "frac_within_h": "fraction of jobs with every task at position <= h",
    "frac_within_h_se": "",
    "messages_per_job": "one-way messages per job",
    "messages_per_job_se": "",
    "responses": "response-time distribution (:class:`sim.core.responses.ResponseSummary`), when recorded",
}


def simulation_result(name: str, doc: str, fields: dict[str, str] | None = None) -> type:
    """The result type (a NamedTuple) of a simulator: the fields of :data:`SIM_FIELDS`, the
    engine's own ``fields`` (name -> meaning), then the rest of :data:`OPTIONAL_SIM_FIELDS`,
    which default to None (empty), so that an engine fills only what it has. A name of the two
    tables in ``fields`` gives the field's meaning in this engine ("" keeps the common one) and
    makes an optional field required. The meanings go into the
    type's docstring."""
    common = {**SIM_FIELDS, **OPTIONAL_SIM_FIELDS}
    required = dict(SIM_FIELDS)
    for key, meaning in (fields or {}).items():
        required[key] = meaning or common.get(key, "")
    optional = {k: v for k, v in OPTIONAL_SIM_FIELDS.items() if k not in required}
    cls = collections.namedtuple(name, [*required, *optional], defaults=(None,) * len(optional))
    lines = [f"- ``{k}``: {v}" for k, v in {**required, **optional}.items() if v]
    cls.__doc__ = doc + "\n\nFields (those not named here: the standard error of the one before):\n\n" + "\n".join(lines)
    cls.__module__ = _caller_module()
    return cls


def _caller_module() -> str:
    return sys._getframe(2).f_globals.get("__name__", __name__)


def result_row(res, **override) -> dict:
    """The :data:`RESULT_KEYS` of a result (a NamedTuple with those fields) as plain Python
    values, in order: ints stay ints, arrays become lists of floats, NaN and None become None
    for optional keys; ``override`` replaces fields the engine does not have or defines
    differently. Every simulator's ``run_task`` ends here, so the row types agree."""
    out = {}
    for key in RESULT_KEYS:
        v = override[key] if key in override else getattr(res, key)
        if v is None:
            out[key] = None
        elif key in ("tail", "tail_se"):
            out[key] = [float(x) for x in v]
        elif key == "ci_method":
            out[key] = str(v)
        elif key in ("n_jobs", "events_run"):
            out[key] = int(v)
        else:
            v = float(v)
            out[key] = None if (math.isnan(v) and key == "frac_within_h") else v
    return out


def simulation_row(res, extra: tuple[str, ...] = (), **override) -> dict:
    """A simulator's row: :func:`result_row` of its result, then each of its own columns
    ``extra`` not already there (a float), then the response-time columns of the distribution
    it recorded (a ``responses`` field that is not None; docs/responses.md). The end of every
    simulator's ``run_task``."""
    row = result_row(res, **override)
    for key in extra:
        if key not in row:
            row[key] = float(getattr(res, key))
    dist = getattr(res, "responses", None)
    if dist is not None:
        row.update(dist.row())
    return row


#: the estimates of :data:`RESULT_KEYS` that carry a standard error
_ESTIMATES = ("mean_response", "mean_wait", "prob_wait", "mean_queue", "tail", "queueing_ratio",
              "drop_prob")


def exact_row(**values) -> dict:
    """The :data:`RESULT_KEYS` row of an exact (mean-field, refined) engine: ``values`` gives
    every estimate, ``frac_within_h``, ``messages_per_job`` and ``ci_method``; the standard errors
    are None and the run counters 0 unless ``values`` sets them (a Monte Carlo part: its SE and
    sample size). Typed as :func:`result_row` types a simulator's row."""
    row = {f"{k}_se": None for k in _ESTIMATES}
    row.update(n_jobs=0, events_run=0, sim_time=0.0, warmup_time=0.0)
    row.update(values)
    missing = [k for k in RESULT_KEYS if k not in row]
    if missing:
        raise KeyError(f"exact_row: no value for {', '.join(missing)}")
    extra = [k for k in row if k not in RESULT_KEYS]
    if extra:
        raise KeyError(f"exact_row: {', '.join(extra)} are not result keys (add them after)")
    return result_row(None, **row)
