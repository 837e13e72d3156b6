"""The registry (sim/registry.py): one declaration of engines, policies, parameters and results."""
from __future__ import annotations

import pytest

import sim
from sim import registry
from sim.core.results import RESULT_KEYS
from tests.helpers import REPO, compose


def schema_doc() -> str:
    return (REPO / "docs" / "results-schema.md").read_text()


def test_every_parameter_and_result_is_documented():
    doc = schema_doc()
    for name in list(registry.PARAMS) + list(registry.RESULTS):
        assert f"`{name}`" in doc, name


def test_engines_return_declared_results():
    assert set(RESULT_KEYS) <= set(registry.RESULTS)
    from pipeline.store import FIXED_SCHEMA

    assert set(registry.RESULTS) <= set(FIXED_SCHEMA)


def test_every_runner_imports():
    import importlib

    for ent in registry.ENTRIES:
        module, _, func = ent.runner.partition(":")
        assert callable(getattr(importlib.import_module(module), func)), ent


def test_entry_lookup_messages():
    with pytest.raises(ValueError, match="engine='quantum' is unknown"):
        registry.entry("quantum", "pod")
    with pytest.raises(ValueError, match="policy='fastest' is unknown"):
        registry.entry("agent", "fastest")
    with pytest.raises(ValueError, match="policy='batch_sampling' is not served by engine='refined'"):
        registry.entry("refined", "batch_sampling")
    assert registry.entry("occupancy", "pod").required == ("d",)


BASE = {"engine": "agent", "policy": "pod", "n_servers": 10, "lam": 0.5, "d": 2, "events": 10**4,
        "seed": 1}


@pytest.mark.parametrize("change,needle", [
    ({"d": None}, "d is required by policy='pod'"),
    ({"d": 2.5}, "d=2.5 must be an integer"),
    ({"lam": float("nan")}, "lam=nan must be a finite number"),
    ({"lamda": 0.5}, "lamda=0.5 is not a task key"),
    ({"n_batches": 501}, "n_batches=501"),
    ({"events": 10}, "events=10"),
    ({"service_rates": [1.0] * 9}, "service_rates has 9 entries"),
    ({"service_rates": "fast"}, "service_rates='fast' must be a non-empty list"),
    ({"d": 11}, "d=11 must not exceed n_servers=10"),
])
def test_check_task_names_key_and_value(change, needle):
    task = {**BASE, **change}
    with pytest.raises(ValueError) as err:
        sim.check_task(task)
    assert needle in str(err.value)


def test_kinds_bool_and_choice(monkeypatch):
    monkeypatch.setitem(registry.PARAMS, "flag", registry.Param("bool", "a test flag"))
    monkeypatch.setitem(registry.PARAMS, "mode", registry.Param("choice", "a mode", ("a", "b")))
    registry._check_kind("flag", True)
    registry._check_kind("mode", "b")
    with pytest.raises(ValueError, match="flag=1 must be true or false"):
        registry._check_kind("flag", 1)
    with pytest.raises(ValueError, match="mode='c' is not one of: a, b"):
        registry._check_kind("mode", "c")
    with pytest.raises(ValueError, match="lists its choices"):
        registry.Param("choice", "no choices")


def test_unused_parameters_are_null_in_rows():
    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    plan = make_plan(to_plain(compose(["+sweep=centralization", "output_dir=/nonexistent"])))
    central = [t for t in plan.tasks if t["policy"] == "central"]
    assert central and all("d" not in t for t in central)  # the default d=2 is not a central parameter
    assert all(t["_meta"]["params"]["d"] is None for t in central)
    mf = [t for t in plan.tasks if t["engine"] == "meanfield"]
    assert mf and all(t["_meta"]["params"]["events"] is None and "events" not in t for t in mf)
    sims = [t for t in plan.tasks if t["engine"] != "meanfield"]
    assert all(t["_meta"]["params"]["events"] == t["events"] for t in sims)
