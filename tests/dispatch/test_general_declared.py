"""The service law as a declared parameter of the dispatch model and the general-size engine as
its declared ``general`` engine (issue 47 items 4-5 of the wiring): the law's keys declared once,
their refusals in one line naming key and value, the exponential engines' refusal naming the
engine to use, and the runner handing the task's law to the simulators unchanged."""
from __future__ import annotations

import math

import pytest

import sim
from sim import registry
from sim.core.service import LAWS, service_law
from sim.core.service_keys import SERVICE_KEYS, SERVICE_PARAMS
from sim.dispatch import MODEL, general, general_jobs
from sim.testing import differences

BASE = {"model": "dispatch", "engine": "general", "n_servers": 40, "lam": 0.7, "seed": 7,
        "events": 4000}
BATCH = {**BASE, "policy": "batch_filling", "k": 2, "d": 2}


def test_the_law_is_declared_once():
    assert SERVICE_PARAMS["service"].choices == tuple(LAWS)
    assert [cls.code for cls in LAWS.values()] == list(range(len(LAWS)))
    for key in SERVICE_KEYS:
        assert MODEL.params[key] is SERVICE_PARAMS[key] and registry.PARAMS[key] is SERVICE_PARAMS[key]
    general_entries = {e.policy for e in MODEL.entries if e.engine == "general"}
    assert general_entries == {"random", "jsq", "pod", "ll", "jiq", "batch_filling", "batch_sampling",
                               "pod_per_task", "ll_filling"}
    assert all(set(SERVICE_KEYS) <= set(e.optional) for e in MODEL.entries if e.engine == "general")


@pytest.mark.parametrize("extra,message", [
    ({"service": "weibull"}, "service='weibull' is not one of: exponential, deterministic, erlang"),
    ({"service": "hyperexponential", "service_scv": 0.5},
     "service_scv=0.5 must be a finite number >= 1 for service='hyperexponential'"),
    ({"service": "hyperexponential"}, "service='hyperexponential' needs service_scv"),
    ({"service": "erlang", "service_phases": 0}, "service_phases=0 must be an integer in [1, 1000]"),
    ({"service": "erlang", "service_phases": 2.5}, "service_phases=2.5 must be an integer"),
    ({"service": "erlang", "service_phases": 3, "service_scv": 4.0},
     "service_scv=4.0 is not a parameter of service='erlang' (it takes service_phases)"),
    ({"service": "lognormal", "service_scv": 101.0},
     "service_scv=101.0 must be a number in (0, 100] for service='lognormal'"),
    ({"service": "lognormal", "service_scv": -1.0}, "service_scv=-1.0 must be a number > 0"),
    ({"service": "bounded_pareto", "service_alpha": 1.5, "service_upper": 1.0},
     "service_upper=1.0 must be a number in (1, 1000000000000]"),
    ({"service": "bounded_pareto", "service_alpha": 0.01, "service_upper": 1e12},
     "service_alpha=0.01 with service_upper=1e+12: no lower bound above 1e-304 gives mean 1"),
    ({"service_scv": 4.0}, "service_scv=4.0 is not a parameter of service='exponential'"),
])
def test_a_bad_law_is_refused_in_one_line_naming_key_and_value(extra, message):
    with pytest.raises(ValueError) as err:
        sim.check_task({**BATCH, **extra})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("engine,policy,extra", [
    ("agent", "pod", {"d": 2}), ("occupancy", "batch_filling", {"k": 2, "d": 2}),
    ("refined", "pod", {"d": 2}), ("meanfield", "batch_filling", {"k": 2, "d": 2}),
])
def test_exponential_engines_refuse_another_law_and_name_the_general_engine(engine, policy, extra):
    """(meanfield and the population engines model laws for some policies:
    tests/dispatch/test_law_limits.py; the refusal then names the policy.)"""
    task = {**BASE, "engine": engine, "policy": policy, **extra, "service": "deterministic"}
    with pytest.raises(ValueError, match=r"^service='deterministic': engine='\w+' has exponential "
                                         r"sizes only( for policy='\w+')?; engine=general draws"):
        sim.check_task(task)
    sim.check_task({**task, "service": "exponential"})  # the exponential law is theirs


def test_an_exponential_task_is_the_same_with_or_without_the_service_key():
    task = {**BATCH, "init": "empty"}
    a, b = sim.run(dict(task)), sim.run({**task, "service": "exponential"})
    assert not differences(a, b)


def test_the_runner_hands_the_task_law_to_the_simulators():
    """A task's row is bitwise the row of the simulator called with the law it names."""
    law = service_law("hyperexponential", service_scv=4.0)
    row = sim.run({**BATCH, "service": "hyperexponential", "service_scv": 4.0})
    res = general_jobs.simulate(40, 0.7, "batch_filling", k=2, d=2, jobs=4000, service=law, seed=7)
    assert row["mean_response"] == res.mean_response and row["queueing_ratio"] == res.queueing_ratio
    assert row["n_jobs"] == res.n_jobs and row["frac_within_h"] == 1.0 - res.prob_wait
    law = service_law("lognormal", service_scv=2.0)
    row = sim.run({**BASE, "policy": "ll", "d": 2, "service": "lognormal", "service_scv": 2.0})
    res = general.simulate(40, 0.7, "ll", d=2, jobs=4000, service=law, seed=7)
    assert row["mean_response"] == res.mean_response and row["queueing_ratio"] == res.mean_response - 1.0
    assert row["messages_per_job"] == 4.0


def test_random_dispatch_with_k_tasks_runs_on_the_jobs_engine():
    row = sim.run({**BASE, "policy": "random", "k": 3, "service": "deterministic"})
    res = general_jobs.simulate(40, 0.7, "random", k=3, jobs=4000, service=service_law("deterministic"), seed=7)
    assert row["mean_response"] == res.mean_response and row["queueing_ratio"] == res.queueing_ratio


def test_no_response_law_without_exponential_sizes_or_a_mean_field():
    params = {"lam": 0.8, "d": 2}
    assert MODEL.response_law("pod", params) is not None
    assert MODEL.response_law("pod", {**params, "service": "exponential"}) is not None
    assert MODEL.response_law("pod", {**params, "service": "erlang", "service_phases": 2}) is None
    assert MODEL.response_law("ll", params) is None and MODEL.response_law("jiq", {"lam": 0.8}) is None


@pytest.mark.parametrize("extra", [{}, {"service": "bounded_pareto", "service_alpha": 1.5, "service_upper": 1e3}])
def test_planner_costs_of_a_general_task(extra):
    for task in ({**BATCH, **extra}, {**BASE, "policy": "jsq", **extra}):
        assert MODEL.events_per_time(task) == pytest.approx(task["n_servers"] * 0.7 / task.get("k", 1))
        cost, mem = MODEL.event_cost(task), MODEL.memory_bytes(task)
        assert math.isfinite(cost) and cost > 1.0 and math.isfinite(mem) and mem > 40 * 16 * 8
    heavy = MODEL.memory_bytes({**BATCH, "n_servers": 10**5, **extra})
    assert heavy > 10**5 * 16 * 8  # a ring of at least 16 floats per server


def test_responses_are_refused_on_the_general_engine():
    with pytest.raises(ValueError, match="^responses: engine=general records no response-time"):
        sim.run({**BATCH, "responses": True})
