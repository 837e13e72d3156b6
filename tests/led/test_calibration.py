"""Message budgets of the LED policies (sim.led.model, sim.led.slotted.calibrate_pull).

Pull's p_hat is calibrated by pilot runs; the main run then spends the budget up to two
independent errors: the main run's own (its batch-means SE, ``messages_per_job_se``) and the
pilot's, through the p_hat it chose (``calib_se``: the SE of the last pilot's messages per task;
the fixed-point step sets the pilot's own estimate I + p B exactly to the budget, so an error of
the pilot's estimate becomes the same error of the spent budget). Assertions are
``|spent - budget| <= Z * sqrt(se_main^2 + se_pilot^2)``, with no finite-run allowance: over 16
seeds (100..115, 2**18 slots) of three of the reachable cases below, the z-scores
``(spent - budget) / sqrt(se_main^2 + se_pilot^2)`` had means -0.27, 0.00, 0.06 and standard
deviations 0.56, 0.77, 0.95 (max |z| 2.02): no bias beyond the SEs. With the main run's SE
alone their standard deviations were 2.1 to 2.8: the pilot's error dominates and must be in the
tolerance. Seeds are fixed: every test is deterministic.
"""
from __future__ import annotations

import math

import pytest

from sim.led.model import model_spec, pod_budget_per_job, push_p_hat_for_budget
from sim.led.slotted import calibrate_pull, pilot_slots, run_task, simulate
from tests.helpers import Z

RATES = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]  # mu_Sigma = 12, M = 3 below
# the geometry of led_heterogeneous, scaled down: many arrivals per dispatcher and slot, so
# Power-of-2's budget (4 per decision) is below what Pull spends at p_hat = 1
HET = [1.0] * 10 + [3.0] * 10  # mu_Sigma = 40, M = 2


def spent_tolerance(res) -> float:
    return Z * math.hypot(res.messages_per_job_se, res.calib_se)


@pytest.mark.parametrize("rates, m, lam, policy, budget", [
    (RATES, 3, 0.9, "l_jsq", dict(msg_budget=0.3)),
    (RATES, 3, 0.6, "l_jba", dict(msg_budget=0.3)),
    (HET, 2, 0.9, "l_jsq", dict(msg_budget_pod_d=2)),
    (HET, 2, 0.7, "l_jba", dict(msg_budget_pod_d=2)),
])
def test_calibrated_pull_spends_the_budget(rates, m, lam, policy, budget):
    res = simulate(rates, lam, policy, m, update="pull", events=2**18, seed=21, **budget)
    assert res.status == "ok"
    assert 0.0 < res.p_hat_used < 1.0, res.calibration
    target = budget.get("msg_budget")
    if target is None:
        target = pod_budget_per_job(2, model_spec(len(rates), lam, policy, m,
                                                  service_rates=rates))
    assert res.msg_budget_per_job == pytest.approx(target, rel=1e-12)
    # Pull spends the idle reports plus p_hat times the busy ones, exactly
    assert res.messages_per_job == pytest.approx(
        res.reports_idle + res.p_hat_used * res.reports_busy, rel=0.01)
    assert abs(res.messages_per_job - target) <= spent_tolerance(res), (
        res.messages_per_job, target, res.messages_per_job_se, res.calib_se, res.calibration)
    assert res.calib_slots >= pilot_slots(2**18)


def test_budget_above_full_pull_clips_p_hat_to_one():
    # Power-of-1's budget at load 0.3 (1.16 per task) is above what Pull spends with every
    # report sent (0.64): one pilot at p_hat = 1 suffices, and the row spends less than the budget
    res = simulate(RATES, 0.3, "l_jsq", 3, update="pull", msg_budget_pod_d=1, events=2**17,
                   seed=22)
    assert res.p_hat_used == 1.0
    assert res.calibration.endswith("clipped to 1") and res.calib_slots == pilot_slots(2**17)
    assert res.messages_per_job < res.msg_budget_per_job - Z * res.messages_per_job_se


def test_budget_below_the_idle_reports_clips_p_hat_to_zero():
    # at load 0.3 the mandatory idle reports alone cost about 0.38 per task: 0.3 is unreachable
    res = simulate(RATES, 0.3, "l_jba", 3, update="pull", msg_budget=0.3, events=2**17, seed=23)
    assert res.p_hat_used == 0.0
    assert res.calibration.endswith("clipped to 0")
    assert res.messages_per_job == pytest.approx(res.reports_idle, rel=1e-12)  # only mandatory
    assert res.messages_per_job > 0.3 + Z * res.messages_per_job_se


def test_the_same_seed_gives_the_same_p_hat():
    task = dict(engine="slotted", policy="l_jba", n_servers=20, lam=0.9, m_dispatchers=2,
                update="pull", msg_budget_pod_d=2, service_rates=HET, events=2**15, seed=31)
    a, b = run_task(task), run_task(task)
    assert a == b
    assert 0.0 < a["p_hat_used"] < 1.0
    assert a["calib_slots"] > 0 and a["msg_budget_per_job"] > 0
    c = run_task({**task, "seed": 32})
    assert c["p_hat_used"] != a["p_hat_used"]  # the pilots follow the task's seed
    spec = model_spec(20, 0.9, "l_jba", 2, update="pull", msg_budget_pod_d=2, service_rates=HET)
    cal = calibrate_pull(spec, 2**15, 31)
    assert cal.p_hat == a["p_hat_used"] and cal.slots == a["calib_slots"]
    assert cal.p_hat == calibrate_pull(spec, 2**15, 31).p_hat


def test_push_budget_is_exact():
    # Power-of-d's budget with d_u servers per update: p_hat = d / d_u, with no pilot
    for d_u, p in ((2, 1.0), (4, 0.5), (1, 1.0)):
        res = simulate(HET, 0.9, "l_jsq", 2, update="push", d_u=d_u, msg_budget_pod_d=2,
                       events=2**14, seed=24)
        assert res.p_hat_used == p and res.calib_slots == 0
    spec = model_spec(6, 0.8, "l_jba", 3, update="push", d_u=3, service_rates=RATES)
    res = simulate(RATES, 0.8, "l_jba", 3, update="push", d_u=3, msg_budget=0.5, events=2**14,
                   seed=25)
    assert res.p_hat_used == push_p_hat_for_budget(0.5, spec)
    row = run_task(dict(engine="slotted", policy="l_jsq", n_servers=6, lam=0.8,
                        m_dispatchers=3, update="push", d_u=3, p_hat=0.4, service_rates=RATES,
                        events=2**12, seed=1))
    assert row["p_hat_used"] == 0.4 and row["msg_budget_per_job"] is None
    assert row["calib_slots"] is None
    base = run_task(dict(engine="slotted", policy="jsq", n_servers=6, lam=0.8, m_dispatchers=3,
                         service_rates=RATES, events=2**12, seed=1))
    assert base["p_hat_used"] is None  # baselines have no p_hat


def test_pod_budget_formula():
    # 2d per decision, one decision per dispatcher and slot with arrivals
    spec = model_spec(6, 0.8, "pod", 3, service_rates=RATES)
    res = simulate(RATES, 0.8, "pod", 3, d=2, events=2**15, seed=9)
    p0 = math.exp(-spec.lam_m[0])
    assert pod_budget_per_job(2, spec) == pytest.approx(4 * 3 * (1 - p0) / spec.lam_sigma)
    assert res.messages_per_job == pytest.approx(pod_budget_per_job(2, spec),
                                                 abs=Z * res.messages_per_job_se)
