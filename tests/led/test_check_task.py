"""Bad input of the LED model: one clear message each, before any compute.

Every line of :data:`BAD` is a change to a valid task and the message it must raise (a value
outside its parameter's declared domain: the message generated from the declaration), from
:func:`sim.led.check_task` (what the plan calls) and from :func:`sim.led.slotted.run_task`
(which validates before compiling or allocating anything).
"""
from __future__ import annotations

import re

import pytest

from sim.led import check_task
from sim.led.slotted import run_task, simulate

BASE = dict(engine="slotted", policy="l_jsq", n_servers=4, lam=0.9, m_dispatchers=2,
            update="push", p_hat=0.5, d_u=2, d=2, count_own=False, arrival_dist="poisson",
            service_dist="poisson", service_rates=[1.0, 1.0, 2.0, 2.0], dispatch_weights=None,
            events=2**12, seed=0, n_batches=20)

BAD = [
    (dict(p_hat=1.5), "p_hat=1.5 must be a number in [0, 1]"),
    (dict(p_hat=-0.1), "p_hat=-0.1 must be a number in [0, 1]"),
    (dict(d_u=5), "d_u=5 must not exceed n_servers=4"),
    (dict(d_u=0), "d_u=0 must be an integer >= 1"),
    (dict(policy="l_pod", d=5), "d=5 must not exceed n_servers=4"),
    (dict(policy="pod", d=7), "d=7 must not exceed n_servers=4"),
    (dict(policy="l_pod", d=0), "d=0 must be an integer >= 1"),
    (dict(lam=1.0), "lam=1.0 must be a number in [0, 1)"),
    (dict(lam=1.2), "lam=1.2 must be a number in [0, 1)"),
    (dict(lam=-0.2), "lam=-0.2 must be a number in [0, 1)"),
    (dict(arrival_dist="bernoulli"), "arrival_dist='bernoulli' cannot carry the mean lam_m[0]"),
    (dict(arrival_dist="binomial", arrival_n=2), "arrival_dist='binomial' with arrival_n=2 "
                                                 "cannot carry the mean lam_m[0]"),
    (dict(arrival_dist="binomial"), "arrival_n=None: the binomial arrival law needs"),
    (dict(service_dist="bernoulli"), "service_dist='bernoulli' cannot carry the mean "
                                     "service_rates[2]=2.0"),
    (dict(service_dist="binomial", service_n=1), "service_dist='binomial' with service_n=1 "
                                                 "cannot carry the mean service_rates[2]"),
    (dict(arrival_dist="pareto"), "arrival_dist='pareto' is unknown"),
    (dict(service_dist="exponential"), "service_dist='exponential' is unknown"),
    (dict(arrival_dist="geometric"), "arrival_dist='geometric' is unknown"),
    (dict(service_rates=[1.0, -1.0, 2.0, 2.0]), "service_rates[1]=-1.0 must be a number > 0"),
    (dict(service_rates=[1.0, 2.0, 2.0]), "service_rates has 3 entries; it needs one per "
                                          "server (n_servers) (4)"),
    (dict(m_dispatchers=0), "m_dispatchers=0 must be an integer in [1, 2**31)"),
    (dict(dispatch_weights=[1.0, 0.0]), "dispatch_weights[1]=0.0 must be a number > 0"),
    (dict(dispatch_weights=[1.0, -2.0]), "dispatch_weights[1]=-2.0 must be a number > 0"),
    (dict(dispatch_weights=[1.0, 1.0, 1.0]), "dispatch_weights has 3 entries; it needs one per "
                                             "dispatcher (m_dispatchers) (2)"),
    (dict(update="sync"), "update='sync' is unknown; valid: push, pull"),
    (dict(policy="lsq"), "policy='lsq' is unknown to the slotted engine"),
    (dict(count_own="yes"), "count_own='yes' must be true or false"),
    (dict(policy="jsq", ties="first"), "ties='first' is unknown; valid: independent, shared"),
    (dict(policy="pod", ties=1), "ties=1 is unknown; valid: independent, shared"),
    # message budgets (instead of p_hat)
    (dict(msg_budget=0.3), "msg_budget=0.3 and p_hat=0.5 are both given: the message budget "
                           "sets p_hat"),
    (dict(p_hat=None, msg_budget=-0.3), "msg_budget=-0.3 must be a number >= 0"),
    (dict(p_hat=None, update="pull", msg_budget=float("inf")), "msg_budget=inf must be a finite"),
    (dict(p_hat=None, msg_budget=0.3, msg_budget_pod_d=2), "msg_budget=0.3 and "
                                                           "msg_budget_pod_d=2 are both given"),
    (dict(p_hat=None, msg_budget_pod_d=5), "msg_budget_pod_d=5 must be an integer in [1, "
                                           "n_servers=4]"),
    (dict(p_hat=None, update="pull", msg_budget_pod_d=0), "msg_budget_pod_d=0 must be an "
                                                          "integer >= 1"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_input_is_refused_with_one_clear_message(change, message):
    task = {**BASE, **change}
    with pytest.raises(ValueError, match=re.escape(message)):
        check_task(task)
    with pytest.raises(ValueError, match=re.escape(message)):
        run_task(task)


def test_the_base_task_is_valid():
    check_task(BASE)


def test_parameters_a_policy_does_not_use_are_not_checked():
    # d belongs to l_pod/pod; p_hat, d_u, update to the LED policies (null in other rows)
    check_task({**BASE, "policy": "jsq", "p_hat": 7.0, "d_u": 99, "update": "sync"})
    check_task({**BASE, "d": 99})


def test_run_settings_are_checked_before_compute():
    with pytest.raises(ValueError, match=re.escape("events=5 must be an integer >= n_windows")):
        simulate([1.0, 2.0], 0.5, "jsq", 1, events=5)
    with pytest.raises(ValueError, match=re.escape("n_servers")):
        simulate(None, 0.5, "jsq", 1)
