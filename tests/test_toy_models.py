"""Toy models written into a temporary folder at test time and loaded the way out-of-tree models
are (a package on ``sys.path`` named by a sweep's ``models:``; docs/extending.md), or placed
under a copy of ``sim/``: an engine of a new name gets its kind from its declaration (issue 37,
item 1); a policy named like an existing one changes no shipped command line (item 2); the
contract check ``sim.testing.check_model`` passes on a toy and fails on each kind of broken one
(item 5)."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import sim
from pipeline.errors import ConfigError
from pipeline.plan import make_plan, seed_for
from pipeline.run import to_plain
from tests.helpers import REPO, TOY_ENGINE, compose, registry_restored, toy_files, write_package


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """``toy(name, **kw)`` writes a toy package on ``sys.path``; the registry is restored after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def make(name: str, **kw) -> Path:
        names.append(name)
        return write_package(tmp_path, name, toy_files(name, **kw))

    with registry_restored("toy_ssa", "toy_bad", "toy_clash"):
        yield make


def _toy_sweep(name: str, **extra) -> dict:
    cfg = to_plain(compose(["+sweep=smoke", "output_dir=/nonexistent"]))
    cfg.update({"models": [name], "model": name, "engines": ["gillespie", "closed_form"],
                "policies": ["toy_random"], "replications": 2, "axes": {"n_servers": [10, 100]},
                "params": {"lam": 0.5, "mu": 2.0, "events": 4000000, "time": 500.0}, **extra})
    return cfg


def test_an_engine_of_a_new_name_gets_seeds_and_events_from_its_declaration(toy):
    toy("toy_ssa")
    plan = make_plan(_toy_sweep("toy_ssa"))
    from sim import registry

    assert "gillespie" in registry.STOCHASTIC_ENGINES and "closed_form" in registry.LIMIT_ENGINES
    sims = [t for t in plan.tasks if t["engine"] == "gillespie"]
    limits = [t for t in plan.tasks if t["engine"] == "closed_form"]
    assert len(sims) == 4 and len(limits) == 2  # two replications a point; one limit row
    for t in sims:
        assert t["events"] == math.ceil(500.0 * 2.0 * t["n_servers"] * 0.5 * 2.0) and t["time"] == 500.0
        meta = t["_meta"]
        assert t["seed"] == seed_for(plan.root_seed, meta["point_id"], "gillespie", meta["replication"]) > 0
    assert len({t["seed"] for t in sims}) == 4
    for t in limits:
        assert t["seed"] == 0 and "events" not in t and "time" not in t
    sim_task = {k: v for k, v in sims[0].items() if k != "_meta"}
    row = sim.run(sim_task)  # a stochastic row: its precision columns are filled
    assert row["runs"] == 1 and row["rel_halfwidth"] > 0
    exact = sim.run({k: v for k, v in limits[0].items() if k != "_meta"})
    assert "runs" not in exact and exact["mean_response"] == 1.0


def test_the_same_toy_as_a_limit_kind_gets_no_seed(toy):
    toy("toy_ssa", kind="limit")
    with pytest.raises(ConfigError, match="params.time=500.0: no task of this sweep uses it"):
        make_plan(_toy_sweep("toy_ssa"))  # a limit takes no run length
    plan = make_plan(_toy_sweep("toy_ssa", params={"lam": 0.5, "mu": 2.0}))
    assert len(plan.tasks) == 4 and all(t["seed"] == 0 and "events" not in t for t in plan.tasks)


def test_an_unknown_engine_kind_is_refused_in_one_line(toy):
    from sim.core.declare import Engine

    with pytest.raises(ValueError) as err:
        Engine("gillespie", "quantum", "a label")
    assert str(err.value) == "engine 'gillespie': kind='quantum' is unknown; valid kinds: stochastic, limit"
    toy("toy_bad", kind="quantum")
    with pytest.raises(ConfigError) as err:
        make_plan(_toy_sweep("toy_bad"))
    assert str(err.value).count("\n") == 0 and "kind='quantum' is unknown" in str(err.value)


def test_an_engine_no_model_declares_is_refused(toy):
    pkg = toy("toy_bad")
    init = pkg / "__init__.py"
    init.write_text(init.read_text().replace('Engine("gillespie", "stochastic", "Gillespie simulation"),', ""))
    with pytest.raises(ValueError, match="engine 'gillespie' is not declared; add Engine"):
        sim.registry.load_model("toy_bad")
    pkg2 = toy("toy_clash")
    init = pkg2 / "__init__.py"
    init.write_text(init.read_text().replace('Engine("closed_form", "limit"', 'Engine("meanfield", "stochastic"')
                    .replace('Entry("closed_form"', 'Entry("meanfield"'))
    with pytest.raises(ValueError, match="engine 'meanfield' is declared as .* but another model declares it"):
        sim.registry.load_model("toy_clash")
    assert "toy_bad" not in sim.registry.MODELS and "toy_clash" not in sim.registry.MODELS


def test_no_literal_list_of_engine_names_in_core():
    """The engines and their kinds are the models' declarations; ``sim/core`` names none (the
    word ``meanfield`` in ``INIT_CHOICES`` is a start, not an engine)."""
    from sim.registry import DECLARED_ENGINES

    found = []
    for path in sorted((REPO / "sim" / "core").glob("*.py")):
        tree = ast.parse(path.read_text())
        allowed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INIT_CHOICES" for t in node.targets):
                allowed.add(id(node.value))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and id(node) not in allowed:
                elts = node.keys if isinstance(node, ast.Dict) else node.elts
                names = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in DECLARED_ENGINES]
                if names:
                    found.append(f"{path.name}:{node.lineno}: {names}")
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in DECLARED_ENGINES
                                                     for c in node.comparators):
                found.append(f"{path.name}:{node.lineno}: compares with an engine name")
    assert not found, found


#: a toy placed under sim/ (as a shipped model would be), with a policy named ``random`` on the
#: dispatch model's engine and on engines of its own; no parameter of its own (mu = 1)
TOY_UNDER_SIM = {
    "__init__.py": '''
        """Toy: N M/M/1 queues behind random routing, E[T] = 1 / (1 - lam)."""
        from sim.core.declare import Engine, Entry, Model


        def check_task(task):
            if not 0.0 < task["lam"] < 1.0:
                raise ValueError(f"lam={task['lam']!r} must satisfy 0 < lam < 1")


        _E = "sim.toyrandom.engine"
        _EX = {"n_servers": 10, "lam": 0.5}
        MODEL = Model(
            name="toyrandom",
            title="toy: independent M/M/1 queues behind random routing",
            entries=(Entry("agent", "random", f"{_E}:run_task", example={**_EX, "events": 40000}),
                     Entry("ssa", "random", f"{_E}:run_task", example={**_EX, "events": 40000}),
                     Entry("mm1_formula", "random", f"{_E}:exact", example=_EX)),
            params={},
            results={},
            main_estimate="mean_response",
            events_per_time=lambda task: 2.0 * task["n_servers"] * task["lam"],
            check_task=check_task,
            labels={"random": "random (toy)"},
            engine_decls=(Engine("ssa", "stochastic", "stochastic simulation"),
                          Engine("mm1_formula", "limit", "M/M/1 formula")),
        )
    ''',
    "engine.py": TOY_ENGINE,
}

PROBE = """
import json, sim, sim.registry as r
from sim.testing import check_model
from tests.helpers import plan_digests
check_model(r.MODELS["toyrandom"])  # the contract holds for the toy too
print(json.dumps({"sim": sim.__file__, "shipped": r.SHIPPED, "digests": plan_digests(),
                  "agent_random": r.entry("agent", "random").model,
                  "toy": r.entry("agent", "random", "toyrandom").runner,
                  "own_engine": r.entry("ssa", "random").model}))
"""


def test_a_toy_under_sim_with_a_policy_named_random_changes_no_shipped_command_line(tmp_path):
    """Every ``conf/sweep/*.yaml`` plans identically (points, tasks, models, seeds) with a toy
    model under ``sim/`` that declares ``random`` on the agent engine; the toy's own engines
    resolve to it, ``model=toyrandom`` reaches its agent entry, and it keeps the contract.
    (With this toy in the real ``sim/``, the whole fast suite passed: 1631 tests.)"""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from tests.helpers import plan_digests

    shutil.copytree(REPO / "sim", tmp_path / "sim", ignore=shutil.ignore_patterns("__pycache__", "toyrandom"))
    write_package(tmp_path / "sim", "toyrandom", TOY_UNDER_SIM)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # sim from the working folder, before the install
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["sim"] == str(tmp_path / "sim" / "__init__.py") and "toyrandom" in seen["shipped"]
    assert seen["agent_random"] == "dispatch" and seen["own_engine"] == "toyrandom"
    assert seen["toy"] == "sim.toyrandom.engine:run_task"
    assert seen["digests"] == plan_digests()


def test_a_sweep_loading_a_clashing_model_must_name_its_model(toy):
    toy("toy_clash", policy="random")
    cfg = _toy_sweep("toy_clash", model=None, engines=["agent"], policies=["random"])
    with pytest.raises(ConfigError) as err:
        make_plan(cfg)
    serving = ", ".join(sim.registry.models_serving("agent", "random"))
    assert serving.startswith("dispatch, ") and serving.endswith("toy_clash")
    assert str(err.value) == (
        f"policies: policy='random' on engine='agent' is declared by the models {serving}: "
        "name one with model= (model: toy_clash in the sweep file, or model=toy_clash on the command line)")
    plan = make_plan({**cfg, "model": "toy_clash"})
    assert {t["model"] for t in plan.tasks} == {"toy_clash"} and len(plan.tasks) == 4
    # registered, but not loaded by this sweep: random on agent is still the dispatch model's
    smoke = to_plain(compose(["+sweep=smoke", "policies=[random]", "axes.d=[2]", "output_dir=/x"]))
    smoke["axes"].pop("d")
    assert {t["model"] for t in make_plan(smoke).tasks} == {"dispatch"}


def test_the_contract_check_passes_on_a_toy_model(toy):
    from sim import registry
    from sim.testing import check_model

    toy("toy_ssa")
    check_model(registry.load_model("toy_ssa"))


@pytest.mark.parametrize("breakage,needle", [
    ("seedless", "another seed gave the same row"),
    ("far_limit", r"mean_response 0.97\d+ vs closed_form 1.2: gap 0.2\d+ > 4 SE"),
    ("undeclared", "result 'my_estimate' is not a declared result column"),
    ("float_count", "n_jobs=18000.0 is not of kind int"),
    ("nan_se", "mean_response_se=nan is not a finite SE"),
    ("no_example", "declares no example task"),
])
def test_the_contract_check_fails_on_a_broken_toy(toy, monkeypatch, breakage, needle):
    import importlib
    from dataclasses import replace

    from sim import registry
    from sim.testing import check_model

    toy("toy_ssa")
    model = registry.load_model("toy_ssa")
    engine = importlib.import_module("toy_ssa.engine")
    simulate, exact = engine.run_task, engine.exact
    broken = {
        "seedless": lambda task: simulate({**task, "seed": 1}),
        "undeclared": lambda task: {**simulate(task), "my_estimate": 1.0},
        "float_count": lambda task: {**simulate(task), "n_jobs": float(simulate(task)["n_jobs"])},
        "nan_se": lambda task: {**simulate(task), "mean_response_se": float("nan")},
    }
    if breakage in broken:
        monkeypatch.setattr(engine, "run_task", broken[breakage])
    elif breakage == "far_limit":  # a limit 20% off: far beyond 4 SE of the simulation
        monkeypatch.setattr(engine, "exact", lambda task: {**exact(task), "mean_response": 1.2})
    else:
        model = replace(model, entries=tuple(replace(e, example={}) for e in model.entries))
    with pytest.raises(AssertionError, match=needle):
        check_model(model)
