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
    registry.param_of("flag").check("flag", True)
    registry.param_of("mode").check("mode", "b")
    with pytest.raises(ValueError, match="flag=1 must be true or false"):
        registry.param_of("flag").check("flag", 1)
    with pytest.raises(ValueError, match="mode='c' is not one of: a, b"):
        registry.param_of("mode").check("mode", "c")
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


def test_every_shipped_model_declares_itself():
    import importlib

    assert list(registry.MODELS)[:len(registry.SHIPPED)] == list(registry.SHIPPED)
    for name in registry.SHIPPED:
        decl = importlib.import_module(f"sim.{name}").MODEL
        assert isinstance(decl, registry.Model) and decl.name == name
        assert registry.MODELS[name] is decl
        assert all(e.model == name for e in decl.entries)
        assert set(decl.labels) >= set(decl.policies)
        assert decl.main_estimate in registry.RESULTS
        assert set(decl.responses) <= set(decl.engines)
    # entries are keyed by (model, engine, policy); the same policy name lives in two models
    assert registry.entry("agent", "pod").model == "dispatch"
    assert registry.entry("slotted", "pod").model == "led"
    assert registry.entry("slotted", "pod", "led").runner == "sim.led.slotted:run_task"
    with pytest.raises(ValueError, match="model='jiq' has no policy='pod' on engine='agent'"):
        registry.entry("agent", "pod", "jiq")


def test_a_clash_with_a_frozen_name_resolves_to_its_owner_and_a_new_clash_is_refused(monkeypatch):
    other = registry.Entry("agent", "pod", "elsewhere:run_task", ("d",), (), "other_model")
    monkeypatch.setitem(registry._BY_KEY, ("other_model", "agent", "pod"), other)
    assert registry.entry("agent", "pod").model == "dispatch"  # pod was dispatch's (and led's)
    # a policy name no shipped model declared: two later models need model:
    for m in ("model_a", "model_b"):
        monkeypatch.setitem(registry._BY_KEY, (m, "agent", "fresh"), registry.Entry("agent", "fresh", "x:y", (), (), m))
    monkeypatch.setitem(registry.ENGINE_POLICIES, "agent", registry.ENGINE_POLICIES["agent"] + ("fresh",))
    monkeypatch.setattr(registry, "POLICIES", registry.POLICIES + ["fresh"])
    with pytest.raises(ValueError) as err:
        registry.entry("agent", "fresh")
    assert str(err.value) == ("policy='fresh' on engine='agent' is declared by the models model_a, model_b: "
                              "name one with model= (model: model_b in the sweep file, or model=model_b "
                              "on the command line)")


def test_the_frozen_owners_are_todays_declarations():
    """Every (name, owner) of POLICY_OWNERS is declared by that shipped model, and each of its
    entries is what its (engine, policy) means without model: (no shipped command line needs one)."""
    for policy, owners in registry.POLICY_OWNERS.items():
        for m in owners:
            assert policy in registry.MODELS[m].policies, (policy, m)
    for e in registry.ENTRIES:
        if e.model in registry.POLICY_OWNERS.get(e.policy, ()):
            assert registry.entry(e.engine, e.policy) is e


@pytest.mark.parametrize("name,needle", [
    ("no_such_model_pkg", "model='no_such_model_pkg' cannot be imported"),
    ("json", "module json exports no MODEL"),
    ("not a name", "is not a model name"),
])
def test_load_model_refuses_what_is_not_a_model(name, needle):
    with pytest.raises(ValueError, match=needle):
        registry.load_model(name)


def test_a_declaration_is_checked_when_it_is_made_and_registered(monkeypatch):
    common = dict(title="t", params={"d": registry.Param("int", "d")}, results={},
                  main_estimate="mean_response", events_per_time=lambda t: 1.0,
                  check_task=lambda t: None)
    with pytest.raises(ValueError, match="no label for policies"):
        registry.Model(name="m1", entries=(registry.Entry("agent", "x", "a:b"),), labels={}, **common)
    with pytest.raises(ValueError, match="declares an \\(engine, policy\\) twice"):
        registry.Model(name="m2", entries=(registry.Entry("agent", "x", "a:b"),) * 2,
                       labels={"x": "x"}, **common)
    clash = registry.Model(name="m3", entries=(registry.Entry("agent", "x", "a:b", ("d",)),),
                           labels={"x": "x"}, **{**common, "params": {"d": registry.Param("float", "d")}})
    with pytest.raises(ValueError, match="parameter 'd' is a float but another model declares it a int"):
        registry._add(clash)
    undeclared = registry.Model(name="m4", entries=(registry.Entry("agent", "x", "a:b", ("q",)),),
                                labels={"x": "x"}, **common)
    with pytest.raises(ValueError, match="parameter 'q' is not declared in its params"):
        registry._add(undeclared)
    assert "m3" not in registry.MODELS and "m4" not in registry.MODELS


def test_tasks_and_rows_name_their_model():
    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    plan = make_plan(to_plain(compose(["+sweep=jiq", "output_dir=/nonexistent"])))
    models = {(t["engine"], t["policy"]): t["model"] for t in plan.tasks}
    assert models[("agent", "pod")] == "dispatch" and models[("agent", "jiq")] == "jiq"
    from pipeline.store import FIXED_SCHEMA
    from pipeline.worker import row_header

    assert "model" in FIXED_SCHEMA
    assert row_header(plan.tasks[0])["model"] == plan.tasks[0]["model"]


def test_a_sweep_naming_its_model_is_checked_against_it():
    from pipeline.errors import ConfigError
    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    plan = make_plan(to_plain(compose(["+sweep=smoke", "model=dispatch", "output_dir=/x"])))
    assert {t["model"] for t in plan.tasks} == {"dispatch"}
    with pytest.raises(ConfigError, match="model='led' has no policy='pod' on engine='agent'"):
        make_plan(to_plain(compose(["+sweep=smoke", "model=led", "output_dir=/x"])))
    with pytest.raises(ConfigError, match="model: model='nowhere_pkg' cannot be imported"):
        make_plan(to_plain(compose(["+sweep=smoke", "model=nowhere_pkg", "output_dir=/x"])))
