"""Mean-field engine: the ODE, its numeric fixed point and the closed forms must agree."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim.dispatch.meanfield import pod as mf

LAMS = (0.5, 0.9, 0.95)
DS = (1, 2, 3)
AGREE = 1e-8  # max abs difference over levels


def _initial_states(lam, d):
    """Empty, every server holding 3 tasks, and a heavy geometric tail above the fixed point."""
    yield "empty", None
    yield "all-3", np.ones(3)
    yield "geometric", 0.97 ** np.arange(1, 121)


@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("lam", LAMS)
def test_ode_converges_to_closed_form(lam, d):
    for name, s0 in _initial_states(lam, d):
        sol = mf.solve_pod_ode(lam, d, t_end=1e5, s0=s0)
        assert sol.success, sol.message
        assert sol.tail.shape == (len(sol.t), sol.levels)
        closed = mf.fixed_point(lam, d, sol.levels)
        err = np.max(np.abs(sol.tail[-1] - closed))
        assert err < AGREE, f"{name}: max |ode - closed form| = {err:.3g}"
        if s0 is None:
            # from the empty state the tail rises monotonically towards the fixed point from below
            assert np.all(sol.tail <= closed + 1e-9)
            assert np.all(np.diff(sol.tail[:, 0]) >= -1e-9)


@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("lam", LAMS)
def test_numeric_fixed_point_matches_closed_form(lam, d):
    fp = mf.pod_fixed_point_numeric(lam, d)
    assert fp.max_residual < 1e-13
    closed = mf.fixed_point(lam, d, fp.levels)
    assert np.max(np.abs(fp.tail - closed)) < AGREE


def test_rhs_and_jacobian_on_hand_built_state():
    lam, d = 0.7, 2
    s = np.array([0.8, 0.5, 0.1])
    f = mf.pod_ode_rhs(0.0, s, lam, d)
    expect = np.array([
        lam * (1 - 0.8**2) - (0.8 - 0.5),
        lam * (0.8**2 - 0.5**2) - (0.5 - 0.1),
        lam * (0.5**2 - 0.1**2) - (0.1 - 0.0),
    ])
    np.testing.assert_allclose(f, expect, rtol=0, atol=1e-15)
    # mass balance: d/dt (mean queue) = arrivals - busy servers, minus the (truncation) loss
    assert math.isclose(f.sum(), lam * (1 - s[-1] ** d) - s[0], abs_tol=1e-15)
    jac = mf.pod_ode_jacobian(0.0, s, lam, d).toarray()
    h = 1e-7
    num = np.column_stack([
        (mf.pod_ode_rhs(0.0, s + h * e, lam, d) - mf.pod_ode_rhs(0.0, s - h * e, lam, d)) / (2 * h)
        for e in np.eye(3)
    ])
    np.testing.assert_allclose(jac, num, atol=1e-8)


@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("lam", (0.3, 0.9, 0.99))
def test_truncation_level(lam, d):
    L = mf.truncation_level(lam, d)
    tail = mf.fixed_point(lam, d, L + 1)
    assert tail[L] <= 1e-16  # s_{L+1}: the first neglected level
    assert L == 1 or tail[L - 1] > 1e-16  # and L is the smallest such level


def test_closed_form_values_and_overflow_safety():
    np.testing.assert_allclose(mf.fixed_point(0.9, 1, 4), 0.9 ** np.arange(1, 5), rtol=1e-14)
    np.testing.assert_allclose(
        mf.fixed_point(0.9, 2, 4), [0.9, 0.9**3, 0.9**7, 0.9**15], rtol=1e-14
    )
    for d in (2, 3, 10, 1000):
        t = mf.fixed_point(0.99, d, 5000)  # d**5000 would overflow any float
        assert np.all(np.isfinite(t)) and t[-1] == 0.0 and np.all(np.diff(t) <= 0)
    assert np.all(mf.fixed_point(0.0, 2, 5) == 0.0)


def test_known_mean_responses():
    for lam in (0.0, 0.3, 0.9, 0.95):
        assert math.isclose(mf.pod_mean_response(lam, 1), 1 / (1 - lam), rel_tol=1e-13)
    # d = 2, lam = 0.9 by the direct series (1/lam) sum_i lam**(2**i - 1): exact integer exponents
    series = sum(0.9 ** (2**i - 1) for i in range(1, 80)) / 0.9
    assert math.isclose(mf.pod_mean_response(0.9, 2), series, rel_tol=1e-14)
    assert math.isclose(mf.pod_mean_response(0.9, 2), 2.614057377323876, rel_tol=1e-12)
    assert mf.pod_mean_response(0.0, 2) == 1.0
    assert mf.jsq_mean_response(0.95) == 1.0
    np.testing.assert_array_equal(mf.jsq_fixed_point_tail(0.7, 3), [0.7, 0.0, 0.0])


def test_bad_inputs_refused():
    with pytest.raises(ValueError, match="lam"):
        mf.pod_mean_response(1.0, 2)
    with pytest.raises(ValueError, match="d="):
        mf.fixed_point(0.5, 0, 3)
    with pytest.raises(ValueError, match="max_level"):
        mf.fixed_point(0.5, 2, 0)
    with pytest.raises(ValueError, match="non-increasing"):
        mf.solve_pod_ode(0.5, 2, 1.0, s0=[0.1, 0.5])


# --- run_task --------------------------------------------------------------------------------

RESULT_KEYS = {
    "mean_response": float, "mean_response_se": type(None),
    "mean_wait": float, "mean_wait_se": type(None),
    "prob_wait": float, "prob_wait_se": type(None),
    "mean_queue": float, "mean_queue_se": type(None),
    "tail": list, "tail_se": type(None), "queueing_ratio": float, "queueing_ratio_se": type(None), "drop_prob": float,
    "drop_prob_se": type(None), "frac_within_h": float,
    "messages_per_job": float, "n_jobs": int, "events_run": int,
    "sim_time": float, "warmup_time": float, "ci_method": str,
}


def _task(**kw):
    t = {"engine": "meanfield", "policy": "pod", "n_servers": 100, "lam": 0.9, "d": 2}
    t.update(kw)
    return t


def test_result_keys_are_documented():
    schema = (Path(__file__).resolve().parents[2] / "docs" / "results-schema.md").read_text()
    for key in RESULT_KEYS:
        assert f"`{key}`" in schema, key


@pytest.mark.parametrize("policy", ("pod", "random", "jsq"))
def test_run_task_keys_and_types(policy):
    out = mf.run_task(_task(policy=policy))
    assert set(out) == set(RESULT_KEYS)
    for key, typ in RESULT_KEYS.items():
        assert type(out[key]) is typ, (key, type(out[key]))
    assert len(out["tail"]) == 64 and all(type(v) is float for v in out["tail"])
    assert out["n_jobs"] == 0 and out["events_run"] == 0
    assert math.isclose(out["mean_wait"], out["mean_response"] - 1.0)
    long_tail = mf.run_task(_task(policy=policy, max_level=1000))["tail"]  # past 1e-16 at lam = 0.9
    assert math.isclose(out["mean_queue"], math.fsum(long_tail), rel_tol=1e-12)
    assert math.isclose(out["mean_queue"], 0.9 * out["mean_response"], rel_tol=1e-12)  # Little


def test_run_task_values():
    pod = mf.run_task(_task(max_level=10))
    assert len(pod["tail"]) == 10
    assert math.isclose(pod["prob_wait"], 0.81) and pod["messages_per_job"] == 4.0  # 2 per probe
    rnd = mf.run_task(_task(policy="random", d=5))  # d ignored: random routing is d = 1
    assert math.isclose(rnd["mean_response"], 10.0) and math.isclose(rnd["prob_wait"], 0.9)
    assert rnd["messages_per_job"] == 0.0
    jsq = mf.run_task(_task(policy="jsq", n_servers=250))
    assert jsq["mean_response"] == 1.0 and jsq["prob_wait"] == 0.0 and jsq["mean_wait"] == 0.0
    assert jsq["messages_per_job"] == 500.0 and jsq["tail"][:2] == [0.9, 0.0]


@pytest.mark.parametrize("policy", ("pod", "random", "jsq"))
def test_run_task_lam_zero(policy):
    out = mf.run_task(_task(policy=policy, lam=0.0))
    assert out["mean_response"] == 1.0 and out["mean_wait"] == 0.0
    assert out["prob_wait"] == 0.0 and out["mean_queue"] == 0.0
    assert all(v == 0.0 for v in out["tail"])
    fp = mf.pod_fixed_point_numeric(0.0, 2)
    assert np.all(fp.tail == 0.0)


def test_sim_run_dispatches_to_meanfield():
    import sim

    out = sim.run(_task())
    assert math.isclose(out["mean_response"], mf.pod_mean_response(0.9, 2))
    assert out["wall_time"] >= 0.0


@pytest.mark.parametrize("policy,h,expected", [
    ("pod", 1, 1 - 0.9**2), ("pod", 2, 1 - 0.9**(3 * 2)), ("random", 3, 1 - 0.9**3), ("jsq", 1, 1.0),
])
def test_frac_within_h(policy, h, expected):
    # pod: the job lands at position <= h unless all d sampled queues hold >= h tasks (s_h^d)
    out = mf.run_task(_task(policy=policy, h=h))
    assert out["frac_within_h"] == pytest.approx(expected, rel=1e-12)
    assert out["queueing_ratio"] == pytest.approx(out["mean_response"] - 1.0)
