"""The contract every (model, engine, policy) entry keeps, checked on its declared example.

As scipy.stats runs one test over every distribution of ``_distr_params.py``, :func:`check_model`
runs every entry of a model declaration (:class:`~sim.core.declare.Model`) on its
:attr:`~sim.core.declare.Entry.example` task, through :func:`sim.run` as the pipeline would:

- the example is a valid task, and its row holds only declared result columns
  (:data:`sim.registry.RESULTS`, plus ``wall_time`` and the ``status`` an engine may set),
  each of its declared kind or None;
- every standard error in the row is finite (a list: wherever its estimate is);
- a stochastic engine's row is bitwise the same for the same seed, and differs for another;
- where the model has a limit engine (``meanfield``, ``refined``, a model's own) for the same
  policy that models every parameter of the example, the simulation's main estimate is within
  4 standard errors of the limit's, plus the entry's measured ``example_allowance``.

An out-of-tree model gets the same check: ``sim.testing.check_model(MODEL)`` in its own tests
(docs/extending.md). Failures raise ``AssertionError`` naming the entry. Nothing here imports a
test framework.
"""
from __future__ import annotations

import math

__all__ = ["Z", "TIMING", "SEED", "exact", "differences", "example_task", "check_entry", "check_model"]

#: standard errors a simulation's main estimate may be from its limit
Z = 4.0
#: result fields that measure the machine, not the model
TIMING = ("wall_time",)
#: the seed of the examples' runs (and ``SEED + 1`` for the run that must differ)
SEED = 20260105


def exact(value):
    """A form of ``value`` equal to another's only if they are bitwise equal: floats by their
    hex form (which tells -0.0 from 0.0 and keeps nan equal to itself), ints and bools by type."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, (list, tuple)):
        return ("list", tuple(exact(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, exact(v)) for k, v in value.items())))
    return (type(value).__name__, value)


def differences(stored: dict, fresh: dict, skip: tuple[str, ...] = TIMING) -> list[str]:
    """One line per field of two rows that differs bitwise, is missing or is new (``skip`` aside)."""
    out = []
    for key in sorted((set(stored) | set(fresh)) - set(skip)):
        if key not in fresh:
            out.append(f"{key}: missing (stored {stored[key]!r})")
        elif key not in stored:
            out.append(f"{key}: new field {fresh[key]!r}")
        elif exact(stored[key]) != exact(fresh[key]):
            out.append(f"{key}: stored {stored[key]!r}, now {fresh[key]!r}")
    return out


def example_task(entry, seed: int = SEED) -> dict:
    """The task of ``entry``'s example, as the plan would make it (a stochastic engine's seed)."""
    if not entry.example:
        raise AssertionError(f"{_name(entry)}: declares no example task (Entry(..., example={{...}}))")
    return {"model": entry.model, "engine": entry.engine, "policy": entry.policy, **entry.example,
            "seed": seed if entry.stochastic else 0}


def _name(entry) -> str:
    return f"{entry.model}/{entry.engine}/{entry.policy}"


def _is_float(v) -> bool:
    return isinstance(v, float)


_KIND_CHECKS = {
    "float": _is_float,
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "floats": lambda v: isinstance(v, list) and all(_is_float(x) for x in v),
}


def _check_row(entry, row: dict) -> None:
    from sim.registry import RESULTS

    name = _name(entry)
    for key, value in row.items():
        if key == "status":  # the row's status, which an engine may set (slotted: "unstable")
            assert value in ("ok", "unstable"), f"{name}: status={value!r} is not ok or unstable"
            continue
        if key in TIMING:
            assert _is_float(value), f"{name}: {key}={value!r} is not a float"
            continue
        kind = RESULTS.get(key)
        assert kind is not None, f"{name}: result {key!r} is not a declared result column"
        assert value is None or _KIND_CHECKS[kind](value), f"{name}: {key}={value!r} is not of kind {kind}"
    for key, se in row.items():
        if not key.endswith("_se") or se is None:
            continue
        est = row.get(key[:-3])
        if isinstance(se, list):
            ests = est if isinstance(est, list) and len(est) == len(se) else [0.0] * len(se)
            bad = [i for i, (e, s) in enumerate(zip(ests, se)) if math.isfinite(e) and not math.isfinite(s)]
            assert not bad, f"{name}: {key} is not finite at {bad[:5]} (its estimate is)"
        else:
            assert math.isfinite(se) and se >= 0, f"{name}: {key}={se!r} is not a finite SE"


def _limits(entry, model) -> list:
    """The limit entries of the same model and policy that model every parameter of the example."""
    keys = {k for k, v in entry.example.items() if v is not None and k not in ("events", "time")}
    return [e for e in model.entries if not e.stochastic and e.policy == entry.policy and keys <= set(e.params)]


def check_entry(entry, model=None) -> dict:
    """Run the contract on one entry; returns its example's row. ``AssertionError`` naming the
    entry and what failed."""
    import sim
    from sim import registry

    model = model or registry.model(entry.model)
    name = _name(entry)
    task = example_task(entry)
    try:
        sim.check_task(dict(task))
    except ValueError as exc:
        raise AssertionError(f"{name}: its example is not a valid task: {exc}") from None
    row = sim.run(dict(task))
    _check_row(entry, row)
    if not entry.stochastic:
        return row
    again = sim.run(dict(task))
    diff = differences(row, again)
    assert not diff, f"{name}: the same seed gave another row: " + "; ".join(diff[:5])
    other = sim.run({**task, "seed": SEED + 1})
    assert differences(row, other), f"{name}: another seed gave the same row (is the seed used?)"
    key = model.main_estimate
    est, se = row.get(key), row.get(f"{key}_se")
    if est is None or se is None:
        return row  # no estimate to compare (a trajectory's rows are paths)
    for lim in _limits(entry, model):
        ltask = example_task(lim) | {k: v for k, v in entry.example.items() if k in lim.params}
        try:
            sim.check_task(dict(ltask))
        except ValueError:
            continue  # the limit does not model this example (docs of the model say why)
        value = sim.run(dict(ltask)).get(key)
        if value is None:
            continue
        allowance = float(entry.example_allowance.get(lim.engine, 0.0))
        gap = abs(est - value)
        assert math.isfinite(gap) and gap <= Z * se + allowance, (
            f"{name}: {key} {est:.6g} vs {lim.engine} {value:.6g}: gap {gap:.3g} > {Z:g} SE ({se:.3g})"
            + (f" + allowance {allowance:.3g}" if allowance else ""))
    return row


def check_model(model) -> None:
    """Run :func:`check_entry` on every entry of ``model`` (a :class:`~sim.core.declare.Model`;
    it must be registered: :func:`sim.registry.load_model`)."""
    from sim import registry

    registry.load_model(model.name)
    for entry in model.entries:
        check_entry(entry, model)
