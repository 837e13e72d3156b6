"""Mean field of distributed JIQ (sim.jiq.meanfield): two independent routes, identities, limits."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad

from sim.jiq.meanfield import (
    POLICIES,
    drift,
    drift_jacobian,
    fixed_point,
    fixed_point_ode,
    initial_state,
    large_r_limit,
    p0_root,
    root_function,
    run_task,
    server_chain_stationary,
    solve_ode,
)


def _pad(a: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate((a, np.zeros(n - a.size)))


def _dprime(policy: str, d: int) -> int:
    return d if policy == "jiq_pod" else 1


# ---------------------------------------------------------------------------------------------
# the two routes agree


@pytest.mark.parametrize("policy, lam, r, d", [
    ("jiq", 0.98, 10, 1), ("jiq_pod", 0.98, 10, 2), ("jiq_sqd", 0.98, 10, 2),
    ("jiq", 0.9, 1, 1), ("jiq_pod", 0.5, 1, 3), ("jiq_sqd", 0.9, 1, 3),
    ("jiq_pod", 0.7, 0.3, 2), ("jiq", 0.9, 50, 1), ("jiq_sqd", 0.5, 10, 2),
])
def test_root_and_ode_routes_agree(policy, lam, r, d):
    a = fixed_point(policy, lam, r, d)
    o = fixed_point_ode(policy, lam, r, d)
    b = o.point
    assert o.residual <= 1e-12
    assert o.ode_gap < 1e-6  # the ODE from empty itself got to the point Newton polished
    assert abs(a.p0 - b.p0) <= 1e-8 * a.p0
    assert np.max(np.abs(a.tail - b.tail)) <= 1e-8
    assert abs(a.mean_response - b.mean_response) <= 1e-8
    assert abs(a.mean_queue - b.mean_queue) <= 1e-8
    n = max(a.iqueue_pmf.size, b.iqueue_pmf.size)
    assert np.max(np.abs(_pad(a.iqueue_pmf, n) - _pad(b.iqueue_pmf, n))) <= 1e-8
    assert abs(a.mean_iqueue - b.mean_iqueue) <= 1e-8
    for name in ("join_rate", "delete_rate", "probe_rate", "messages_per_job"):
        assert abs(getattr(a, name) - getattr(b, name)) <= 1e-8, name


def test_other_empty_start_reaches_the_same_point():
    # sizes 3 and 4 (mean 3.5) instead of Poisson(3.5): same attractor
    a = fixed_point("jiq_sqd", 0.8, 3.5, 2)
    b = fixed_point_ode("jiq_sqd", 0.8, 3.5, 2, start="balanced").point
    assert abs(a.p0 - b.p0) <= 1e-10
    assert abs(a.mean_response - b.mean_response) <= 1e-10


def test_ode_trajectory_and_start():
    x0 = initial_state(2.0, 40, 30)
    assert np.all(x0[:40] == 0.0)  # all servers idle
    assert abs(np.sum(x0[40:]) - 2.0) < 1e-12  # ... and all listed: mean I-queue = r
    sol = solve_ode("jiq", 0.7, 2.0, levels=40, iqueue_levels=30, t_end=400.0)
    assert sol.success
    assert np.all(np.diff(sol.tail[:, 0]) >= -1e-9)  # s_1 fills up from 0 towards lam
    assert abs(sol.tail[-1, 0] - 0.7) < 1e-6
    assert abs(sol.p0[-1] - p0_root("jiq", 0.7, 2.0)) < 1e-6


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 3), ("jiq_sqd", 3)])
def test_jacobian_is_the_derivative_of_the_drift(policy, d):
    rng = np.random.default_rng(5)
    L, K = 7, 6
    x = np.concatenate((np.sort(rng.random(L))[::-1], np.sort(rng.random(K))[::-1]))
    J = drift_jacobian(x, policy, 0.8, 3.0, d, L, K).toarray()
    h = 1e-6
    Jn = np.empty_like(J)
    for k in range(L + K):
        e = np.zeros(L + K)
        e[k] = h
        Jn[:, k] = (drift(x + e, policy, 0.8, 3.0, d, L, K) - drift(x - e, policy, 0.8, 3.0, d, L, K)) / (2 * h)
    assert np.max(np.abs(J - Jn)) < 1e-7


# ---------------------------------------------------------------------------------------------
# the derivation


@pytest.mark.parametrize(
    "policy, lam, r, d",
    [("jiq", 0.9, 10, 1), ("jiq_pod", 0.9, 10, 2), ("jiq_sqd", 0.9, 10, 2), ("jiq_sqd", 0.7, 3.5, 3)],
)
def test_one_server_chain_has_the_stationary_law_of_the_closure(policy, lam, r, d):
    # the per-server chain (paper's rates for jiq) has pi(i) = s_i - s_{i+1}, pi(0, j) = j p_j / r
    busy, idle = server_chain_stationary(policy, lam, r, d, levels=100)
    fp = fixed_point(policy, lam, r, d, max_level=101)
    assert np.max(np.abs(busy - (fp.tail[:-1] - fp.tail[1:]))) < 1e-12
    j = np.arange(1, idle.size + 1)
    p = _pad(fp.iqueue_pmf, idle.size + 1)[1:]
    assert np.max(np.abs(idle - j * p / r)) < 1e-12


@pytest.mark.parametrize("lam, r", [(0.5, 10), (0.98, 10), (0.9, 1), (0.3, 0.5)])
def test_paper_integral_form_of_the_normalisation(lam, r):
    # p0 (1 + e^a a^-c int_0^a t^(r/p0) e^-t dt) = 1, a = r (1/p0 - lam), c = r/p0 (appendix)
    p0 = p0_root("jiq", lam, r)
    a, c = r * (1.0 / p0 - lam), r / p0
    h = quad(lambda t: math.exp(c * math.log(t) - t - c * math.log(a) + a) if t > 0 else 0.0,
             0.0, a, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    assert abs(p0 * (1.0 + h) - 1.0) < 1e-12


def test_colleague_product_formula_for_pod_normalises():
    lam, r, d = 0.8, 4.0, 2
    p0 = p0_root("jiq_pod", lam, r, d)
    alpha = (1 - lam**d) / (1 - lam)
    c, a = r / (p0 * alpha), r * (1 - p0 * lam**d) / (p0 * alpha)
    p = p0 * np.cumprod(np.concatenate(([1.0], a / (c + np.arange(1, 400)))))
    assert abs(p.sum() - 1.0) < 1e-13
    assert np.allclose(p[:50], fixed_point("jiq_pod", lam, r, d).iqueue_pmf[:50], rtol=1e-12, atol=0)


@pytest.mark.parametrize("policy, d", [("jiq_pod", 1), ("jiq_sqd", 1)])
def test_d1_variants_are_jiq(policy, d):
    for lam, r in [(0.5, 10), (0.98, 10), (0.9, 1)]:
        a, b = fixed_point("jiq", lam, r), fixed_point(policy, lam, r, d)
        assert abs(a.p0 - b.p0) <= 1e-13
        assert np.max(np.abs(a.tail - b.tail)) <= 1e-13
        assert abs(a.mean_response - b.mean_response) <= 1e-12
        n = max(a.iqueue_pmf.size, b.iqueue_pmf.size)
        assert np.max(np.abs(_pad(a.iqueue_pmf, n) - _pad(b.iqueue_pmf, n))) <= 1e-13
        assert abs(a.join_rate - b.join_rate) <= 1e-13
        assert abs(a.delete_rate - b.delete_rate) <= 1e-13
        # only the messages differ: a literal Po(1)/SQ(1) still sends its one probe
        expected = 2 * lam * b.p0 if policy == "jiq_pod" else 2 * b.join_rate
        assert abs(b.probe_rate - expected) <= 1e-13
        assert a.probe_rate == 0.0


# ---------------------------------------------------------------------------------------------
# identities


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2), ("jiq_pod", 3), ("jiq_sqd", 3)])
def test_identities(policy, d):
    dp = _dprime(policy, d)
    for lam in (0.001, 0.3, 0.9, 0.999):
        for r in (0.01, 1.0, 10.0, 1000.0):
            fp = fixed_point(policy, lam, r, d, max_level=8)
            s1, p0 = fp.tail[0], fp.p0
            assert s1 == pytest.approx(lam, rel=1e-15)  # work conservation
            assert fp.iqueue_pmf.sum() == pytest.approx(1.0, abs=1e-13)
            # the listed servers are exactly the idle ones: sum_j j p_j = r (1 - s_1)
            assert fp.mean_iqueue == pytest.approx(r * (1.0 - s1), rel=1e-11)
            assert fp.mean_response == pytest.approx(fp.mean_queue / lam, rel=1e-12)  # Little
            if dp == 1:
                assert fp.mean_response == pytest.approx(1.0 / (1.0 - lam * p0), rel=1e-12)
            # servers becoming idle = servers becoming busy (direct + blind-to-idle)
            assert fp.join_rate == pytest.approx(lam * (1 - p0) + fp.delete_rate, rel=1e-12)
            assert fp.join_rate == pytest.approx(lam * (1 - p0 * lam**dp), rel=1e-12)
            msgs = (fp.join_rate + fp.delete_rate + fp.probe_rate) / lam
            assert fp.messages_per_job == pytest.approx(msgs, rel=1e-14)
            assert np.all(np.diff(fp.tail) <= 0.0)


def test_tail_closed_forms():
    lam, r = 0.9, 10
    p0 = p0_root("jiq", lam, r)
    i = np.arange(1, 11)
    assert np.allclose(fixed_point("jiq", lam, r, max_level=10).tail, p0 ** (i - 1) * lam**i, rtol=1e-13)
    p0 = p0_root("jiq_pod", lam, r, 2)
    expected = p0 ** (2.0 ** (i - 1) - 1) * lam ** (2.0**i - 1)
    assert np.allclose(fixed_point("jiq_pod", lam, r, 2, max_level=10).tail, expected, rtol=1e-12, atol=1e-300)


def test_p0_root_is_the_unique_sign_change():
    for policy, d, lam, r in [("jiq", 1, 0.9, 10), ("jiq_pod", 2, 0.5, 100), ("jiq_sqd", 2, 0.9, 10),
                              ("jiq_sqd", 3, 0.5, 30)]:
        x0 = p0_root(policy, lam, r, d, log=True)
        xs = np.concatenate((np.linspace(2 * x0 - 1, x0, 15, endpoint=False),
                             np.linspace(x0, 0, 16)[1:]))
        f = np.array([root_function(policy, lam, r, x, d) for x in xs])
        assert np.all(np.diff(f) > 0)
        assert np.all(f[xs < x0] < 0) and np.all(f[xs > x0] > 0)
        assert abs(root_function(policy, lam, r, x0, d)) < 1e-12


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_monotone_in_lam_and_r(policy, d):
    # more load: more empty I-queues and slower; more servers per scheduler: fewer and faster
    lams = np.array([0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.99])
    rs = np.array([0.05, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0])
    fps = [[fixed_point(policy, lam, r, d, max_level=2) for r in rs] for lam in lams]
    p0 = np.array([[fp.p0 for fp in row] for row in fps])
    T = np.array([[fp.mean_response for fp in row] for row in fps])
    assert np.all((p0 > 0) & (p0 < 1))
    assert np.all(np.diff(p0, axis=0) > 0) and np.all(np.diff(p0, axis=1) < 0)
    # T - 1 can be below the resolution of a double (jiq_sqd, large r): T is then exactly 1.0
    assert np.all(np.diff(T, axis=0) >= 0) and np.all(np.diff(T, axis=1) <= 0)
    assert np.all(np.diff(T[:, :3], axis=0) > 0) and np.all(np.diff(T[-3:], axis=1) < 0)


# ---------------------------------------------------------------------------------------------
# limits


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2)])
@pytest.mark.parametrize("lam", [0.5, 0.9])
def test_large_r_p0_is_kappa_over_r(policy, d, lam):
    kappa = large_r_limit(policy, lam, d)
    # kappa by quadrature too: int_0^inf exp(-lam^d' y - alpha y^2 / (2 kappa)) dy = 1
    dp = _dprime(policy, d)
    alpha = (1 - lam**dp) / (1 - lam)
    assert quad(lambda y: math.exp(-(lam**dp) * y - alpha * y * y / (2 * kappa)), 0, np.inf,
                epsrel=1e-12)[0] == pytest.approx(1.0, rel=1e-10)
    err = {r: r * p0_root(policy, lam, r, d) / kappa - 1.0 for r in (300.0, 3000.0)}
    assert abs(err[3000.0]) < 5e-3
    # O(1/r) convergence: r * err settles
    assert abs(err[3000.0] * 3000.0 / (err[300.0] * 300.0) - 1.0) < 0.1
    assert fixed_point(policy, lam, 3000.0, d).mean_response - 1.0 < 5e-3


def test_large_r_sqd_p0_decays_exponentially():
    for d in (2, 3):
        for lam in (0.5, 0.9):
            x = {r: p0_root("jiq_sqd", lam, r, d, log=True) for r in (100.0, 300.0, 1000.0)}
            assert x[100.0] > x[300.0] > x[1000.0]
            # log p0 = -r (1 - lam) log d - C + o(1): the relative gap times r settles
            gap = {r: -x[r] / (r * (1 - lam) * math.log(d)) - 1.0 for r in (300.0, 1000.0)}
            assert 0 < gap[1000.0] < 0.02
            assert gap[1000.0] * 1000.0 == pytest.approx(gap[300.0] * 300.0, rel=0.01)
    with pytest.raises(ValueError, match="jiq_sqd"):
        large_r_limit("jiq_sqd", 0.5, 2)


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_light_load_response_tends_to_one(policy, d):
    Ts = [fixed_point(policy, lam, 10, d).mean_response for lam in (1e-2, 1e-4, 1e-6)]
    for lam, T in zip((1e-2, 1e-4, 1e-6), Ts):
        assert 1.0 < T <= 1.0 + lam / (1 - lam)
    assert Ts[-1] - 1.0 < 1e-6


# ---------------------------------------------------------------------------------------------
# the paper's Figure 4 point (r = 10, lam = 0.98), pinned


def test_figure4_point():
    jiq = fixed_point("jiq", 0.98, 10)
    pod = fixed_point("jiq_pod", 0.98, 10, 2)
    assert jiq.p0 == pytest.approx(0.831074922217, rel=1e-11)
    assert jiq.mean_response == pytest.approx(5.38948236252, rel=1e-11)
    assert pod.p0 == pytest.approx(0.829515840614, rel=1e-11)
    assert pod.mean_response == pytest.approx(2.53988864764, rel=1e-11)
    # the paper reads about 5.3 and 2.6 off its plot
    assert abs(jiq.mean_response - 5.3) < 0.2 and abs(pod.mean_response - 2.6) < 0.1


# ---------------------------------------------------------------------------------------------
# engine entry point and input checks


def test_run_task_plain_values():
    out = run_task({"engine": "meanfield", "policy": "jiq_pod", "n_servers": 1000, "lam": 0.9,
                    "r": 10, "d": 2, "max_level": 5})
    fp = fixed_point("jiq_pod", 0.9, 10, 2, max_level=5)
    assert out["mean_response"] == fp.mean_response
    assert out["mean_wait"] == pytest.approx(fp.mean_response - 1.0)
    assert out["prob_wait"] == pytest.approx(fp.p0 * 0.9**2)
    assert out["tail"] == [float(v) for v in fp.tail] and len(out["tail"]) == 5
    assert out["p0"] == fp.p0 and out["mean_iqueue"] == pytest.approx(1.0)
    for key in ("mean_response", "mean_wait", "prob_wait", "mean_queue", "tail", "p0",
                "mean_iqueue", "join_rate", "delete_rate", "probe_rate"):
        assert out[key + "_se"] is None
    assert (out["n_jobs"], out["events_run"], out["sim_time"], out["warmup_time"]) == (0, 0, 0.0, 0.0)
    assert "mean field" in out["ci_method"]
    for v in out.values():
        assert v is None or type(v) in (float, int, str, list)
    assert all(type(v) is float for v in out["tail"])
    jiq = run_task({"engine": "meanfield", "policy": "jiq", "n_servers": 100, "lam": 0.9, "r": 10})
    assert jiq["prob_wait"] == pytest.approx(jiq["p0"] * 0.9)
    assert len(jiq["tail"]) == 64 and jiq["probe_rate"] == 0.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: fixed_point("jiq", 0.5, 0), "r=0 must be a number > 0"),
        (lambda: fixed_point("jiq", 0.5, -2.0), "r=-2.0 must be a number > 0"),
        (lambda: fixed_point("jiq", 0.5, float("inf")), "r=inf must be a finite number"),
        (lambda: fixed_point("jiq", 1.0, 10), r"lam=1.0 must be a number in \(0, 1\)"),
        (lambda: fixed_point("jiq", 0, 10), r"lam=0 must be a number in \(0, 1\)"),
        (lambda: fixed_point("jiq", "0.5", 10), "lam='0.5' must be a finite number"),
        (lambda: fixed_point("jiq", True, 10), "lam=True must be a finite number"),
        (lambda: fixed_point("jiq_pod", 0.5, 10, 0), "d=0 must be an integer >= 1"),
        (lambda: fixed_point("jiq_pod", 0.5, 10, 1.5), "d=1.5 must be an integer$"),
        (lambda: fixed_point("jsq", 0.5, 10), "policy='jsq' must be one of jiq, jiq_pod, jiq_sqd"),
        (lambda: fixed_point("jiq", 0.5, 10, max_level=0), "max_level=0 must be an integer >= 1"),
        (lambda: p0_root("jiq", 0.5, None), "r=None must be a finite number"),
        (lambda: solve_ode("jiq", 0.5, 10, t_end=-1.0), "t_end=-1.0 must be > 0"),
        (lambda: solve_ode("jiq", 0.5, 10, start="full"), "start='full' must be 'poisson' or 'balanced'"),
        (lambda: run_task({"engine": "agent", "policy": "jiq", "n_servers": 10, "lam": 0.5, "r": 1}),
         "engine='agent' must be 'meanfield'"),
        (lambda: run_task({"engine": "meanfield", "policy": "jiq_pod", "n_servers": 10, "lam": 0.5, "r": 1}),
         "d=None must be given for policy='jiq_pod'"),
        (lambda: run_task({"engine": "meanfield", "policy": "jiq", "n_servers": 0, "lam": 0.5, "r": 1}),
         "n_servers=0 must be an integer >= 1"),
    ],
)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_policies_listed():
    assert POLICIES == ("jiq", "jiq_pod", "jiq_sqd")
