"""Toy models written into a temporary folder at test time and loaded the way out-of-tree models
are (a package on ``sys.path`` named by a sweep's ``models:``; docs/extending.md): an engine of a
new name gets its kind from its declaration (issue 37, item 1)."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import sim
from pipeline.errors import ConfigError
from pipeline.plan import make_plan, seed_for
from pipeline.run import to_plain
from tests.helpers import REPO, compose, registry_restored, write_package

#: N independent M/M/1 queues behind random routing, with an engine of a new name and a limit
TOY_INIT = '''
"""Toy: N servers, each job to a uniformly chosen one; Poisson arrivals of rate lam * mu per
server and Exp(mu) service make every queue M/M/1: E[T] = 1 / (mu (1 - lam))."""
from sim.core.declare import Engine, Entry, Model, Param


def events_per_time(task):
    return 2.0 * task["n_servers"] * task["lam"] * task["mu"]  # arrivals and departures


def check_task(task):
    if not 0.0 < task["lam"] < 1.0:
        raise ValueError(f"lam={task['lam']!r} must satisfy 0 < lam < 1")
    if not task["mu"] > 0:
        raise ValueError(f"mu={task['mu']!r} must be > 0")


MODEL = Model(
    name="NAME",
    title="toy: independent M/M/1 queues behind random routing",
    entries=(Entry("gillespie", "POLICY", "NAME.engine:simulate", ("mu",)),
             Entry("closed_form", "POLICY", "NAME.engine:exact", ("mu",))),
    params={"mu": Param("float", "service rate of every server")},
    results={},
    main_estimate="mean_response",
    events_per_time=events_per_time,
    check_task=check_task,
    labels={"POLICY": "random (toy)"},
    engine_decls=(Engine("gillespie", "KIND", "Gillespie simulation"),
                  Engine("closed_form", "limit", "closed form"),),
)
'''

TOY_ENGINE = '''
"""The toy's engines: Lindley's recursion for one queue (by symmetry, any server's), and E[T]."""
import numpy as np


def simulate(task):
    rng = np.random.default_rng(task["seed"])
    n, lam, mu = int(task["events"]) // 2, task["lam"], task["mu"]
    gaps = rng.exponential(1.0 / (lam * mu), n)
    service = rng.exponential(1.0 / mu, n)
    wait = np.empty(n)
    w = 0.0
    for i in range(n):
        wait[i] = w
        w = max(0.0, w + service[i] - gaps[i])
    response = (wait + service)[n // 10:]
    means = np.array([b.mean() for b in np.array_split(response, 20)])
    return {"mean_response": float(means.mean()),
            "mean_response_se": float(means.std(ddof=1) / np.sqrt(means.size)),
            "n_jobs": int(response.size), "events_run": 2 * n, "sim_time": float(gaps.sum()),
            "ci_method": "batch means (20 batches), first 10% cut"}


def exact(task):
    return {"mean_response": 1.0 / (task["mu"] * (1.0 - task["lam"])), "ci_method": "closed form"}
'''


def toy_files(name: str, kind: str = "stochastic", policy: str = "toy_random") -> dict[str, str]:
    init = TOY_INIT.replace("NAME", name).replace("KIND", kind).replace("POLICY", policy)
    return {"__init__.py": init, "engine.py": TOY_ENGINE}


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
