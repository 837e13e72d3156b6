"""The run settings of a task: one object, its defaults and its checks, defined here once.

A task (the plain dict :func:`sim.run` takes; docs/results-schema.md) carries, besides the
model's parameters and its run length (``events`` / ``time``), the settings of how it runs:
its seed, the start of a simulation, the batches of its batch means, the tail levels and the
position threshold it reports, whether it records response times, the trajectory grid and a
precision target. :class:`RunSettings` holds them; :meth:`RunSettings.from_task` reads them
from a task dict (the keys below, every one optional: an old archive's ``tasks.json`` runs as
it did), the registry checks a task's settings through it before any compute, every engine
reads its settings from it instead of restating a default, and the pipeline's run config
(``run:`` in a sweep, ``pipeline/config.py``) takes its defaults from it.

=====================  ===============  ===================================================
task key               default          meaning
=====================  ===============  ===================================================
``seed``               0                the run's seed (``numpy.random.SeedSequence``);
                                        the plan gives every stochastic task its own
``init``               ``meanfield``    a simulation's start: drawn from the mean-field fixed
                                        point, or all queues ``empty`` (the trajectory
                                        engines' own default, :data:`sim.core.trajectory.
                                        TRAJECTORY_DEFAULTS`)
``n_batches``          20               batches of batch means after the MSER-5 cut
                                        (2 .. :data:`N_BATCHES_MAX`)
``max_level``          64               tail fractions ``s_1..s_max_level`` reported
``h``                  1                the position threshold of ``frac_within_h``
                                        (``run.position_threshold`` in a sweep)
``responses``          false            record response-time distributions
``grid``               200              trajectory: points of the time grid, ends included
``precision``          null             a target relative 95% half-width of the main estimate
``precision_cap``      16               the longest run a precision target may ask for, as a
                                        multiple of the given length
``precision_estimate`` null             the estimate ``precision`` controls (null: the
                                        model's main estimate)
``se_method``          ``obm``          a simulation's standard errors: ``obm`` (overlapping
                                        batch means, with a run-length check) or
                                        ``batch_means`` (``n_batches`` batches: every run
                                        before this setting; the plan selects it for an
                                        archive whose config lacks it); sim.core.output
=====================  ===============  ===================================================

Nothing here knows a model or an engine.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields

import numpy as np

from sim.core.results import is_int, is_integral, is_number

__all__ = ["RunSettings", "DEFAULTS", "SETTING_KEYS", "INIT_CHOICES", "N_WINDOWS", "N_BATCHES_MAX",
           "PRECISION_CAP_MAX", "SE_METHOD_CHOICES", "check_run_args", "as_int", "task_int"]

#: initial states of a simulation: drawn from the mean-field fixed point, or all queues empty
INIT_CHOICES = ("meanfield", "empty")
#: fine windows a simulation's run is split into for the warm-up cut and batching (at least
#: this many, fewer than twice as many: :func:`sim.core.windows.window_bounds`)
N_WINDOWS = 1000
#: most batches of batch means: two windows per batch at least
N_BATCHES_MAX = N_WINDOWS // 2
#: the longest run a precision target may ask for, as a multiple of the given length
PRECISION_CAP_MAX = 10**6


def as_int(x):
    """An integer-valued float (YAML formulas and JSON give floats) as an int; any other value
    as it is, for the check that follows to name."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def task_int(task: dict, key: str, default=None):
    """``task[key]`` (``default`` where absent) through :func:`as_int`."""
    return as_int(task.get(key, default))


def _int_setting(key: str, lo: int, hi: int | None = None, why: str = ""):
    def check(v, strict: bool = False):
        ok = (is_int(v) if strict else is_integral(v)) and v >= lo and (hi is None or v <= hi)
        if not ok:
            rng = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
            if key == "seed":
                rng = "a non-negative integer"
            raise ValueError(f"{key}={v!r} must be {rng}{why}")
        return int(v)
    return check


def _check_init(v, strict: bool = False):
    if v not in INIT_CHOICES:
        raise ValueError(f"init={v!r} is unknown; valid: {', '.join(INIT_CHOICES)}")
    return v


def _check_responses(v, strict: bool = False):
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError(f"responses={v!r} must be true or false")
    return bool(v)


#: standard-error methods (:data:`sim.core.output.SE_METHODS`; listed here, where the settings
#: are checked, as :data:`INIT_CHOICES` is)
SE_METHOD_CHOICES = ("obm", "batch_means")


def _check_se_method(v, strict: bool = False):
    if v not in SE_METHOD_CHOICES:
        raise ValueError(f"se_method={v!r} is unknown; valid: {', '.join(SE_METHOD_CHOICES)}")
    return v


def _check_precision(v, strict: bool = False):
    if v is not None and not (is_number(v) and 0 < v < 1):
        raise ValueError(f"precision={v!r} must be a number in (0, 1): the target relative "
                         "95% half-width of the main estimate")
    return v


def _check_precision_cap(v, strict: bool = False):
    if not (is_number(v) and 1 <= v <= PRECISION_CAP_MAX):
        raise ValueError(f"precision_cap={v!r} must be a number in [1, 1e6]: the longest run "
                         "as a multiple of the given length")
    return v


def _check_precision_estimate(v, strict: bool = False):
    if v is not None and (not isinstance(v, str) or not v):
        raise ValueError(f"precision_estimate={v!r} must be null or the name of an estimate")
    return v


#: each setting's check, in the order a task's settings are checked: it returns the value
#: normalised (an integer-valued float as an int) or raises ``ValueError`` naming key and value
_CHECKS = {
    "init": _check_init,
    "n_batches": _int_setting("n_batches", 2, N_BATCHES_MAX),
    "seed": _int_setting("seed", 0),
    "max_level": _int_setting("max_level", 1),
    "h": _int_setting("h", 1),
    "responses": _check_responses,
    "grid": _int_setting("grid", 2, why=" (trajectory grid points from 0 to time, both included)"),
    "precision": _check_precision,
    "precision_estimate": _check_precision_estimate,
    "precision_cap": _check_precision_cap,
    "se_method": _check_se_method,
}


@dataclass(frozen=True)
class RunSettings:
    """The run settings of one task, checked when made (``ValueError`` naming key and value).

    ``RunSettings()`` holds the defaults (:data:`DEFAULTS`); :meth:`from_task` reads a task
    dict. Integer settings given as integer-valued floats are stored as ints."""

    seed: int = 0
    init: str = "meanfield"
    n_batches: int = 20
    max_level: int = 64
    h: int = 1
    precision: float | None = None
    precision_cap: float = 16
    precision_estimate: str | None = None
    se_method: str = "obm"
    responses: bool = False
    grid: int = 200

    def __post_init__(self):
        for key, check in _CHECKS.items():
            object.__setattr__(self, key, check(getattr(self, key)))

    @classmethod
    def from_task(cls, task: dict, *, required: tuple[str, ...] = (), **defaults) -> "RunSettings":
        """The settings of ``task``: each of :data:`SETTING_KEYS` it holds (not None), else the
        engine's own default given in ``defaults`` (the trajectory engines start ``empty``),
        else the default here. A key of ``required`` the task lacks is refused (the registry
        requires a stochastic task's seed); other keys of the task are not read."""
        unknown = sorted(set(defaults) - set(SETTING_KEYS))
        if unknown:
            raise TypeError(f"RunSettings.from_task: {', '.join(unknown)} are not run settings")
        values = {}
        for key in SETTING_KEYS:
            v = task.get(key)
            if v is None:
                if key in required:
                    _CHECKS[key](v)  # raises, naming the key
                if key not in defaults:
                    continue
                v = defaults[key]
            values[key] = v
        return cls(**values)

    def arguments(self, func) -> dict:
        """The settings ``func`` (an engine's ``simulate``) takes, by name, as keyword
        arguments: an engine's ``run_task`` passes ``**settings.arguments(simulate)`` beside the
        model's parameters instead of listing each setting again."""
        return {key: getattr(self, key) for key in _setting_parameters(func)}


@functools.lru_cache(maxsize=None)
def _setting_parameters(func) -> tuple[str, ...]:
    names = inspect.signature(func).parameters
    return tuple(key for key in SETTING_KEYS if key in names)


#: the task keys of the run settings, in the order of :class:`RunSettings`
SETTING_KEYS: tuple[str, ...] = tuple(f.name for f in fields(RunSettings))
#: the default of every run setting
DEFAULTS = RunSettings()


_NOT_GIVEN = object()


def check_run_args(*, events, seed, init, n_batches, max_level, n_windows,
                   h=_NOT_GIVEN, responses=_NOT_GIVEN, se_method=_NOT_GIVEN) -> None:
    """The checks a simulator's public ``simulate`` makes of its run arguments (integers
    strictly: no floats), with the run settings' own checks; ``ValueError`` names the key.
    ``h``, ``responses`` (true or false) and ``se_method`` are checked where given."""
    if not is_int(n_windows) or n_windows < 10:
        raise ValueError(f"n_windows={n_windows!r} must be an integer >= 10")
    if not is_int(events) or events < n_windows:
        raise ValueError(f"events={events!r} must be an integer >= n_windows={n_windows}")
    _CHECKS["seed"](seed, strict=True)
    _CHECKS["init"](init)
    if not is_int(n_batches) or not 2 <= n_batches <= n_windows // 2:
        raise ValueError(f"n_batches={n_batches!r} must be an integer in [2, {n_windows // 2}]")
    _CHECKS["max_level"](max_level, strict=True)
    if h is not _NOT_GIVEN:
        _CHECKS["h"](h, strict=True)
    if responses is not _NOT_GIVEN:
        _CHECKS["responses"](responses)
    if se_method is not _NOT_GIVEN:
        _CHECKS["se_method"](se_method)
