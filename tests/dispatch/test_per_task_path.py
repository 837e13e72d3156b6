"""Per-task power-of-(kd) past the exact path (sim/dispatch/meanfield/per_task_path.py): the
closed form in logs against the exact mean-field engine on the sub_halfin_whitt path to N = 10^15,
its derived forms to N = 10^300 (docs/analysis.md, "Per-task power-of-(kd) along the path"), and
the derived lower bound of the batch policies with constant d."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma
from sim.dispatch.meanfield import per_task_path as pt

#: measured |closed form in logs - meanfield engine| / ratio on the path, 10^2..10^15: <= 1.1e-9,
#: at ratios of 1e-293 (the engine's float lam moves a = -ln lam by ~3e-12 relative, times a D ~ 670);
#: <= 5e-14 where the ratio is above 1e-6
REL = 1e-8


def _path(x: float, rule: str) -> tuple[int, int, float]:
    """(k, d, 1 - lam) of the sub_halfin_whitt path at N = 10^x, d capped at floor(N / k)."""
    eps = 10.0 ** (-0.3 * x)
    k = math.ceil((x * math.log(10.0)) ** 2)
    lk = math.log(k)
    d = {"const2": 2, "c1": math.ceil(1 / (eps * lk)), "c4": math.ceil(4 / (eps * lk)),
         "loglog": math.ceil(math.log(x * math.log(10.0)) / (eps * lk)), "single": math.ceil(1 / eps)}[rule]
    return k, min(d, math.floor(10.0 ** x / k)) if x < 300 else d, eps


@pytest.mark.parametrize("rule", ["const2", "c1", "c4", "loglog", "single"])
@pytest.mark.parametrize("x", [2, 4, 7, 10, 15])
def test_agrees_with_the_exact_meanfield_engine_on_the_path(rule, x):
    import sim

    k, d, eps = _path(x, rule)
    got = pt.queueing_ratio(k, d, eps)
    ref = sim.run({"engine": "meanfield", "policy": "pod_per_task", "n_servers": 10**x, "lam": 1.0 - eps,
                   "k": k, "d": d})
    if ref["queueing_ratio"] == 0.0:      # below the float range in both
        assert got["queueing_ratio"] < 1e-300
        return
    assert got["queueing_ratio"] == pytest.approx(ref["queueing_ratio"], rel=REL)
    assert got["mean_queue"] == pytest.approx(ref["mean_queue"], rel=1e-12)
    # the engine forms (E[Q] - lam) / lam, which cancels to ~1e-16 absolute
    assert got["mean_wait"] == pytest.approx(ref["mean_wait"], rel=1e-8, abs=1e-15)


def test_engine_row_is_the_meanfield_row_at_1e10():
    import sim

    k, d, eps = _path(10, "const2")
    row = pt.run_task({"log10_n": 10.0, "k": k, "d_real": float(d), "one_minus_lam": eps})
    ref = sim.run({"engine": "meanfield", "policy": "pod_per_task", "n_servers": 10**10, "lam": 1.0 - eps,
                   "k": k, "d": d})
    for key in ("queueing_ratio", "mean_response", "mean_queue", "prob_wait", "frac_within_h"):
        assert row[key] == pytest.approx(ref[key], rel=1e-9), key
    assert np.allclose(row["tail"], ref["tail"], rtol=1e-12, atol=0)


def test_constant_d_grows_without_bound_past_1e15():
    """d = 2: 0.303 at 10^15 is no level; the closed form climbs a staircase (a level each time
    ln(1/(1 - lam)) / ln(2k) passes an integer) to about 2 at 10^300."""
    r = {x: pt.queueing_ratio(*_path(x, "const2"))["queueing_ratio"] for x in (15, 30, 100, 200, 300)}
    assert r[15] == pytest.approx(0.302847, abs=1e-6)
    assert r[30] > 0.5 and r[100] > 1.0 and r[300] > 2.0
    assert r[15] < r[30] < r[100] < r[200] < r[300]
    forms = [pt.asymptotic_form(*_path(x, "const2")) for x in (15, 100, 300)]
    assert forms[0]["growing_form"] < forms[1]["growing_form"] < forms[2]["growing_form"]
    # E[T] >= a task's mean sojourn: positive from about 10^270 on, and below the ratio
    assert forms[2]["little_bound"] > 0.1 and forms[2]["little_bound"] < r[300]


@pytest.mark.parametrize("x", [30, 100, 300])
def test_constant_d_sandwich(x):
    """Little's bound below; above, every task at position <= floor(x) + 2 (x = ln(1/a) / ln D)
    but with probability k W_{floor(x) + 2}, negligible: the ratio is x / H_k (1 + O(sqrt(ln k / x)))."""
    k, d, eps = _path(x, "const2")
    got = pt.queueing_ratio(k, d, eps)
    form = pt.asymptotic_form(k, d, eps)
    top = math.floor(form["levels_ahead"]) + 2
    assert got["levels"] <= top + 1
    lw = pt.log_wait_tail(k, d, eps)
    assert lw.size < top or math.log(k) + lw[top - 1] < -100    # P(some task at position > top)
    counts = np.zeros(top + 1, dtype=np.int64)
    counts[top] = k
    upper = expected_max_gamma(counts, GL_X, GL_W) / got["h_k"] - 1.0
    assert form["little_bound"] < got["queueing_ratio"] < upper


@pytest.mark.parametrize("rule", ["c1", "c4", "loglog"])
def test_theta_rules_vanish_like_lam_to_the_kd(rule):
    for x in (7, 10, 15):
        k, d, eps = _path(x, rule)
        got = pt.queueing_ratio(k, d, eps)
        w1 = math.exp(pt.log_wait_tail(k, d, eps)[0])
        assert got["queueing_ratio"] == pytest.approx(w1, rel=10 * k * w1 + 1e-9)
        form = pt.asymptotic_form(k, d, eps)
        assert form["vanishing_form"] == pytest.approx(w1, rel=1e-9) and form["idle_probes"] > 40
    k, d, eps = _path(300, rule)
    assert pt.asymptotic_form(k, d, eps)["idle_probes"] > 1e4 and pt.queueing_ratio(k, d, eps)["queueing_ratio"] == 0.0


def test_reaches_1e300_in_floats_fast():
    import time

    for rule in ("const2", "c1", "c4", "single"):
        k, d, eps = _path(300, rule)
        t0 = time.perf_counter()
        got = pt.queueing_ratio(k, d, eps)
        assert time.perf_counter() - t0 < 2.0
        assert math.isfinite(got["queueing_ratio"]) and got["tail"][0] == pytest.approx(1.0, abs=1e-80)


@pytest.mark.parametrize("policy", ["batch_sampling", "batch_filling"])
def test_batch_constant_d_lower_bound(policy):
    """ratio >= E[Q] / (lam H_k) - 1 >= the derived bound, on the exact mean field; the bound grows
    without bound along the path (12.8 at 10^300 for batch-filling, 20.8 for batch-sampling)."""
    import sim

    for x in (4, 8):
        k, d, eps = _path(x, "const2")
        ex = sim.run({"engine": "meanfield", "policy": policy, "n_servers": 10**x, "lam": 1.0 - eps, "k": k, "d": d})
        b = pt.batch_little_bound(k, d, eps, policy)
        assert b["queue_lower"] <= ex["mean_queue"] * (1 + 1e-12)
        assert b["bound"] <= ex["mean_queue"] / ((1.0 - eps) * b["h_k"]) - 1.0 < ex["queueing_ratio"]
    bounds = [pt.batch_little_bound(*_path(x, "const2"), policy)["bound"] for x in (15, 30, 100, 300)]
    assert bounds == sorted(bounds) and bounds[-1] > 12


def test_bad_input():
    for args in [(0, 2, 0.1), (5, 0.5, 0.1), (5, 2, 0.0), (5, 2, 1.0), (1, 1, 0.1), (5, math.inf, 0.1)]:
        with pytest.raises(ValueError):
            pt.queueing_ratio(*args)
    with pytest.raises(ValueError):
        pt.check_task({"log10_n": 10.0, "k": 531, "d_real": 2.0, "one_minus_lam": 1e-3, "b": 1})
    with pytest.raises(ValueError):
        pt.batch_little_bound(5, 2, 0.1, "pod")
