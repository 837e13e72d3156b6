"""The general-law limits as declared entries of the dispatch model (docs/service.md, "Limits as
entries"), run as a sweep runs them, through ``sim.run``:

- ``meanfield`` under a law other than the exponential: random (M/G/1), pod (the cavity queue)
  and ll (the LL(d) workload fixed point, every law);
- ``population``, ``population_meanfield``, ``population_refined`` of pod under a phase-type law
  (sim.dispatch.phase_population).

Engines that should agree are checked against each other: the cavity queue against the phase
population's mean field (erlang, hyperexponential), the cavity queue at d = 1 against M/G/1,
the LL(d) fixed point against the general engine's simulation (4 SE plus the finite-N gap
measured below), the exponential through these entries bitwise as before.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import sim
from sim.testing import differences
from tests.helpers import assert_within_se

ERLANG2 = {"service": "erlang", "service_phases": 2}
HYPER4 = {"service": "hyperexponential", "service_scv": 4.0}
DETERMINISTIC = {"service": "deterministic"}


def _run(engine: str, policy: str, **values) -> dict:
    task = {"model": "dispatch", "engine": engine, "policy": policy, "n_servers": 1000, **values}
    sim.check_task(dict(task))  # as the plan checks every task
    return sim.run(task)


@pytest.mark.parametrize("law", [ERLANG2, HYPER4], ids=["erlang2", "hyperexponential4"])
def test_cavity_queue_equals_the_phase_population_mean_field(law):
    """Two derivations of SQ(d)'s limit for a phase-type law: the cavity queue by the age of the
    task in service (meanfield) and the drift of the populations over (length, phase)
    (population_meanfield). Measured: E[T] 3e-11 apart at lam 0.9, d 2 (docs/service.md)."""
    cav = _run("meanfield", "pod", lam=0.8, d=2, **law)
    pop = _run("population_meanfield", "pod", lam=0.8, d=2, **law)
    for key in ("mean_response", "mean_wait", "prob_wait", "mean_queue", "frac_within_h"):
        assert cav[key] == pytest.approx(pop[key], rel=1e-8, abs=1e-10), key
    assert np.allclose(cav["tail"], pop["tail"], rtol=0, atol=1e-9)
    assert cav["prob_wait"] == pytest.approx(0.8**2, rel=1e-9)  # u_1^d = lam^d for every law


@pytest.mark.parametrize("law", [DETERMINISTIC, {"service": "lognormal", "service_scv": 1.0},
                                 {"service": "bounded_pareto", "service_alpha": 1.5, "service_upper": 20.0}],
                         ids=["deterministic", "lognormal1", "pareto"])
def test_cavity_queue_at_one_choice_is_mg1(law):
    """pod with d = 1 is random routing: the cavity queue (meanfield pod) equals M/G/1, the
    Pollaczek-Khinchine mean of meanfield random, and the two rows' tails are one computation."""
    one = _run("meanfield", "pod", lam=0.9, d=1, **law)
    mg1 = _run("meanfield", "random", lam=0.9, **law)
    assert one["mean_response"] == pytest.approx(mg1["mean_response"], rel=1e-8)
    assert one["mean_queue"] == pytest.approx(mg1["mean_queue"], rel=1e-8)
    assert one["prob_wait"] == pytest.approx(mg1["prob_wait"], rel=1e-9) and mg1["prob_wait"] == 0.9
    assert one["tail"] == mg1["tail"]
    assert mg1["messages_per_job"] == 0.0 and one["messages_per_job"] == 2.0


def test_ll_limit_of_exponential_sizes_is_the_closed_form():
    """ll on meanfield has every law, the exponential too: E[W] = int F^d of Hellemans & Van
    Houdt's closed-form workload ccdf."""
    from sim.dispatch.meanfield.least_loaded import ll_exponential_ccdf

    row = _run("meanfield", "ll", lam=0.9, d=2)
    want = integrate.quad(lambda w: ll_exponential_ccdf(w, 0.9, 2) ** 2, 0, np.inf,
                          epsabs=1e-14, epsrel=1e-13)[0]
    assert row["mean_wait"] == pytest.approx(want, abs=1e-9)
    assert row["prob_wait"] == pytest.approx(0.81) and row["tail"] is None


#: N = 1000, lam = 0.9, d = 2, 2e6 jobs (about 2200 time units from empty): the simulation's
#: gap to the LL(d) limit over 20 seeds (500..519), measured on this tree: hyperexponential SCV 4
#: +0.0172 +- 0.0047 (one run's SE about 0.022), deterministic +0.0005 +- 0.0008 (SE about
#: 0.003). The allowance is the measured gap plus 2 of its SEs
LL_ALLOWANCE = {"hyperexponential": 0.0172 + 2 * 0.0047, "deterministic": 0.0005 + 2 * 0.0008}


@pytest.mark.parametrize("law", [HYPER4, DETERMINISTIC], ids=["hyperexponential4", "deterministic"])
def test_ll_limit_against_the_general_engine(law):
    limit = _run("meanfield", "ll", lam=0.9, d=2, **law)
    row = _run("general", "ll", lam=0.9, d=2, **law, events=2_000_000, seed=2026)
    assert_within_se(row["mean_response"], limit["mean_response"], row["mean_response_se"],
                     "E[T], N = 1000", allowance=LL_ALLOWANCE[law["service"]])
    assert_within_se(row["prob_wait"], limit["prob_wait"], row["prob_wait_se"], "P(wait), N = 1000")


@pytest.mark.parametrize("engine,policy,values", [
    ("meanfield", "pod", {"lam": 0.9, "d": 2}),
    ("meanfield", "random", {"lam": 0.9}),
    ("population_meanfield", "pod", {"lam": 0.9, "d": 2}),
])
def test_exponential_named_or_not_is_the_same_row(engine, policy, values):
    """``service: exponential`` on an engine that now takes the law's keys stays on the
    exponential code path: the row bitwise equal to the task without the key."""
    plain = _run(engine, policy, **values)
    named = _run(engine, policy, **values, service="exponential")
    assert not differences(plain, named)
    assert plain["ci_method"].startswith(("closed form", "mean field from the declared"))


def test_population_engines_run_the_phase_declaration():
    """population, population_meanfield and population_refined of pod with an erlang law are
    the phase-type population's runners, bitwise; the plan's time becomes events with every
    phase change an event (erlang 2: N lam (1 + 2) per unit of time)."""
    from sim.dispatch import events_per_time, phase_population

    task = {"model": "dispatch", "policy": "pod", "n_servers": 50, "lam": 0.8, "d": 2, **ERLANG2}
    sim_task = {**task, "engine": "population", "events": 200_000, "seed": 7}
    # sim.run adds the run's precision columns and its note on the run length to ci_method
    added = ("wall_time", "rel_halfwidth", "runs", "ci_method")
    assert not differences(sim.run(dict(sim_task)), phase_population.run_task(dict(sim_task)), added)
    lim = {**task, "engine": "population_refined"}
    assert not differences(sim.run(dict(lim)), phase_population.run_refined(dict(lim)))
    assert events_per_time({**sim_task, "time": 1.0}) == pytest.approx(50 * 0.8 * 3.0)
    hyper = {k: v for k, v in sim_task.items() if k != "service_phases"} | HYPER4
    assert events_per_time(hyper) == pytest.approx(50 * 0.8 * 2.0)


@pytest.mark.parametrize("task,message", [
    ({"engine": "meanfield", "policy": "batch_filling", "k": 2, "d": 2, **HYPER4},
     "service='hyperexponential': engine='meanfield' has exponential sizes only for policy='batch_filling'"),
    ({"engine": "meanfield", "policy": "random", "k": 2, **DETERMINISTIC},
     "k=2 with service='deterministic': engine='meanfield'"),
    ({"engine": "meanfield", "policy": "pod", "d": 2, "b": 5, **DETERMINISTIC},
     "b=5 with service='deterministic'"),
    ({"engine": "meanfield", "policy": "pod", "d": 2, "responses": True, **ERLANG2},
     "responses: engine='meanfield' has no response-time law under service='erlang'"),
    ({"engine": "meanfield", "policy": "ll", "d": 2, "lam": 0.0},
     "lam=0.0"),
    ({"engine": "meanfield", "policy": "ll", "d": 2, "service": "lognormal", "service_scv": 4.0},
     "service=lognormal (service_scv=4.0) at lam=0.9: the LL(d) workload fixed point would need "
     "more than 400000 grid points"),
    ({"engine": "population_meanfield", "policy": "pod", "d": 2, "service": "lognormal",
      "service_scv": 4.0}, "service='lognormal': engine='population_meanfield' models phase-type laws only"),
    ({"engine": "population", "policy": "pod", "d": 2, "events": 1000, "seed": 1, **DETERMINISTIC},
     "service='deterministic': engine='population' models phase-type laws only"),
    ({"engine": "population", "policy": "pod", "d": 2, "b": 5, "events": 1000, "seed": 1, **ERLANG2},
     "b=5 with service='erlang'"),
    ({"engine": "population_trajectory", "policy": "pod", "d": 2, "time": 1.0, "events": 1000,
      "seed": 1, **ERLANG2}, "service='erlang': engine='population_trajectory' has exponential sizes only"),
    ({"engine": "refined", "policy": "pod", "d": 2, **ERLANG2},
     "service='erlang': engine='refined' has exponential sizes only"),
])
def test_what_the_limits_do_not_model_is_refused_in_one_line(task, message):
    full = {"model": "dispatch", "n_servers": 100, "lam": 0.9, **task}
    with pytest.raises(ValueError) as err:
        sim.check_task(full)
    assert message in str(err.value) and "\n" not in str(err.value)
