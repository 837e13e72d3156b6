"""Heavy-traffic batch-filling / batch-sampling (sim/dispatch/meanfield/heavy_traffic.py) against
the exact recursions (large_batch, large_sampling) along the sub_halfin_whitt path, an
independent E[max of Gammas], and its own asymptotic form.

The exact batch-filling values at N = 10^2..10^30 are the fixture heavy_traffic_exact.json,
made by the commands it lists (tests/dispatch/make_heavy_traffic_exact.py: minutes a point at N >= 10^20);
``test_fixture_recomputes`` (slow) recomputes its N = 10^20 rows."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma
from sim.dispatch.meanfield import heavy_traffic as ht
from sim.dispatch.meanfield import large_batch as lb
from sim.dispatch.meanfield import large_sampling as ls
from tests.checks import assert_refused

FIXTURE = json.loads((Path(__file__).parent / "heavy_traffic_exact.json").read_text())
EXACT = {(r["c"], r["log10_n"]): r for r in FIXTURE["rows"]}

#: measured |heavy - exact| on the path from N = 10^10 (<= 5.7e-9, docs/analysis.md)
TOL_FROM_1E10 = 1e-7
#: the pure limit (Poisson(mu), no own-queue hits) from N = 10^10 (measured <= 1.0e-4)
TOL_LIMIT_FROM_1E10 = 1e-3


def test_path_point_in_floats():
    p = ht.path_point(6, 1)
    assert (p["k"], p["d"]) == (191, 13)
    assert ht.path_point(6, 4)["d"] == 49        # as tests/dispatch/test_large_batch_meanfield
    p = ht.path_point(100, 1)
    assert p["one_minus_lam"] == pytest.approx(1e-30, rel=1e-14)
    assert p["k"] == math.ceil((100 * math.log(10)) ** 2) == 53019
    assert isinstance(p["d"], int) and p["d"] > 10**28
    assert p["d"] == math.ceil(1.0 / (p["one_minus_lam"] * math.log(p["k"])))
    assert p["d"] * p["one_minus_lam"] * math.log(p["k"]) == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError):
        ht.path_point(5000, 1)                   # 1 - lam underflows


@pytest.mark.parametrize("c", [1, 4])
@pytest.mark.parametrize("log10_n", [10, 12, 15])
def test_batch_filling_agrees_with_the_exact_recursion(c, log10_n):
    p = ht.path_point(log10_n, c)
    exact = lb.queueing_ratio(1.0 - p["one_minus_lam"], p["k"], p["d"],
                              one_minus_lam=p["one_minus_lam"])
    heavy = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
    assert abs(heavy["queueing_ratio"] - exact["queueing_ratio"]) < TOL_FROM_1E10
    assert heavy["queueing_ratio"] == pytest.approx(EXACT[(c, log10_n)]["queueing_ratio"],
                                                    abs=TOL_FROM_1E10)
    assert heavy["s2"] == pytest.approx(exact["s"][1], rel=1e-9)
    assert exact["s"].size == 2                  # the recursion's s_3 is below 1e-20 too
    assert heavy["log_layer2_bound"] < -1e4
    limit = ht.limit_ratio(p["k"], heavy["mu"])
    assert abs(limit["queueing_ratio"] - exact["queueing_ratio"]) < TOL_LIMIT_FROM_1E10


@pytest.mark.parametrize("c", [1, 4])
@pytest.mark.parametrize("log10_n", [10, 12, 15])
def test_batch_sampling_agrees_with_the_exact_chain(c, log10_n):
    p = ht.path_point(log10_n, c)
    exact = ls.queueing_ratio(1.0 - p["one_minus_lam"], p["k"], p["d"])
    heavy = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"], policy="batch_sampling")
    assert abs(heavy["queueing_ratio"] - exact["queueing_ratio"]) < TOL_FROM_1E10
    assert heavy["mean_own_hits"] == 0.0


@pytest.mark.parametrize("c", [1, 4])
def test_gap_below_1e10_is_the_measured_one(c):
    # N = 10^2..10^9 (1 - lam not small): the gap measured in docs/analysis.md, largest at
    # N = 10^2 (1.6e-4, c = 1: jobs that reach layer 2) and falling with N
    gaps = []
    for x in range(2, 10):
        r = EXACT[(float(c), float(x))]
        h = ht.queueing_ratio(r["k"], r["d"], r["one_minus_lam"])
        gaps.append(abs(h["queueing_ratio"] - r["queueing_ratio"]))
    assert max(gaps) < 2e-4
    assert max(gaps[4:]) < 3e-6                  # from N = 10^6


@pytest.mark.slow
@pytest.mark.parametrize("c", [1, 4])
@pytest.mark.parametrize("log10_n", [20, 25, 30])
def test_agrees_with_the_exact_fixture_to_1e30(c, log10_n):
    r = EXACT[(float(c), float(log10_n))]
    p = ht.path_point(log10_n, c)
    assert (p["k"], p["d"]) == (r["k"], r["d"])
    heavy = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
    assert abs(heavy["queueing_ratio"] - r["queueing_ratio"]) < TOL_FROM_1E10
    assert abs(heavy["mean_response"] - r["mean_response"]) < TOL_FROM_1E10
    assert abs(ht.limit_ratio(p["k"], heavy["mu"])["queueing_ratio"]
               - r["queueing_ratio"]) < TOL_LIMIT_FROM_1E10


@pytest.mark.slow
@pytest.mark.parametrize("c", [1, 4])
def test_fixture_recomputes(c):
    r = EXACT[(float(c), 20.0)]                  # about a minute each on 2 loaded cores
    out = lb.queueing_ratio(1.0 - r["one_minus_lam"], r["k"], r["d"],
                            one_minus_lam=r["one_minus_lam"])
    assert out["queueing_ratio"] == pytest.approx(r["queueing_ratio"], rel=1e-12)


def _by_jobdelay(k, law, policy_pi=None):
    """E[T] averaged over (c0, pmf) with sim.core.jobdelay's quadrature (independent code)."""
    x0, pmf0 = law
    total = 0.0
    for c0, w in zip(x0.astype(int), pmf0):
        if w < 1e-18:
            continue
        counts = np.zeros(3, dtype=np.int64)
        counts[1] = min(c0, k)
        counts[2] = k - counts[1]
        total += w * expected_max_gamma(counts, GL_X, GL_W)
    return total


@pytest.mark.parametrize("k,mu", [(30, 4.0), (200, 35.0), (1000, 150.0)])
def test_limit_is_the_expected_max_of_its_job_law(k, mu):
    out = ht.limit_ratio(k, mu)
    ref = _by_jobdelay(k, ht.level0_law(0.0, None, mu=mu))
    assert out["mean_response"] == pytest.approx(ref, rel=1e-11)
    assert out["queueing_ratio"] == pytest.approx((ref - out["h_k"]) / out["h_k"], rel=1e-9)


def test_batch_sampling_is_the_expected_max_of_its_job_law():
    # batch-sampling at a finite (k, d, eps): C_0 Binomial, no own-queue hits
    k, d, eps = 60, 7.0, 0.02
    out = ht.queueing_ratio(k, d, eps, policy="batch_sampling")
    ref = _by_jobdelay(k, ht.level0_law(k * d, eps))
    assert out["mean_response"] == pytest.approx(ref, rel=1e-11)


def test_own_queue_hits_lower_the_ratio_and_vanish_with_k_over_d():
    k, eps, mu = 500, 1e-3, 80.0
    d = mu / (k * eps)                           # 160: E[X] ~ k / d ~ 2.6
    bf = ht.queueing_ratio(k, d, eps)
    bs = ht.queueing_ratio(k, d, eps, policy="batch_sampling")
    assert 1.0 < bf["mean_own_hits"] < k / d
    # an own-queue hit takes a queue's Exp(1) out of the max (that queue ends at Gamma(2) like
    # the r others): batch-filling's ratio is below batch-sampling's
    assert bf["queueing_ratio"] < bs["queueing_ratio"]
    # the same mu with eps -> 0 (d -> infinity): both reach the limit
    lim = ht.limit_ratio(k, mu)["queueing_ratio"]
    for e in (1e-6, 1e-9, 1e-12):
        bf = ht.queueing_ratio(k, mu / (k * e), e)
        assert bf["mean_own_hits"] < 2 * k * k * e / mu
        assert abs(bf["queueing_ratio"] - lim) < 10 * k * k * e / mu


def test_reaches_1e100_and_beyond_falling():
    prev = {}
    for x in (30, 50, 100, 200, 300):
        for c in (1, 4):
            p = ht.path_point(x, c)
            out = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
            assert 0.15 < out["queueing_ratio"] < 0.27
            assert out["log_layer2_bound"] < -1e10
            if c in prev:
                assert out["queueing_ratio"] < prev[c]
            prev[c] = out["queueing_ratio"]
            # the two-term Gumbel form is within 1e-3 along the path
            assert abs(ht.asymptotic_ratio(p["k"], out["mu"]) - out["queueing_ratio"]) < 1e-3


def test_asymptotic_forms_converge_to_the_limit():
    errs_gumbel, errs_two = [], []
    for lk in (8.0, 12.0, 16.0, 20.0):
        k = int(round(math.exp(lk)))
        L = math.log(k)
        ll = math.log(L)
        mu = k / L                               # c = 1
        r = ht.limit_ratio(k, mu)["queueing_ratio"]
        errs_gumbel.append(abs(ht.asymptotic_ratio(k, mu) - r))
        two = ll / L + ((1 - np.euler_gamma) * ll + 1 + np.euler_gamma - 1.0) / L**2
        errs_two.append(abs(two - r))
        # ratio ln k / ln ln k -> 1
        assert abs(r / ht.leading_rate(k) - 1.0) < 2.0 / L
    assert errs_gumbel == sorted(errs_gumbel, reverse=True) and errs_gumbel[-1] < 2e-4
    assert errs_two == sorted(errs_two, reverse=True) and errs_two[-1] < 3e-3


def test_quadrature_converged():
    p = ht.path_point(100, 1)
    out = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
    # the integral on 32-point panels (the module's 16-point rule swapped)
    x, w = np.polynomial.legendre.leggauss(32)
    saved = ht._GL_X, ht._GL_W
    try:
        ht._GL_X, ht._GL_W = 0.5 * (x + 1.0), 0.5 * w
        fine = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
    finally:
        ht._GL_X, ht._GL_W = saved
    assert fine["queueing_ratio"] == pytest.approx(out["queueing_ratio"], rel=1e-12)


def test_bad_input():
    assert_refused((lambda: ht.queueing_ratio(10, 2, 0.0), "one_minus_lam"),
                   (lambda: ht.queueing_ratio(2.5, 2, 0.1), "k="),
                   (lambda: ht.queueing_ratio(10, 0.5, 0.1), "d="),
                   (lambda: ht.queueing_ratio(10, 2, 0.1, policy="pod"), "policy"),
                   (lambda: ht.asymptotic_ratio(10, 10.0), "mu / k"))


# the engine ``heavy_traffic`` (sim.run): the row of the sweep's limit past 10^15


def _task(log10_n, c=1, policy="batch_filling", **kw):
    p = ht.path_point(log10_n, c)
    return {"engine": "heavy_traffic", "policy": policy, "log10_n": float(log10_n), "k": p["k"],
            "d_real": float(p["d"]), "one_minus_lam": p["one_minus_lam"], **kw}


@pytest.mark.parametrize("policy", ["batch_filling", "batch_sampling"])
def test_engine_row_agrees_with_the_exact_meanfield_engine_at_1e10(policy):
    import sim

    p = ht.path_point(10, 1)
    row = sim.run(_task(10, policy=policy))
    exact = sim.run({"engine": "meanfield", "policy": policy, "n_servers": 10**10,
                     "lam": 1.0 - p["one_minus_lam"], "k": p["k"], "d": p["d"]})
    assert abs(row["queueing_ratio"] - exact["queueing_ratio"]) < TOL_FROM_1E10
    assert row["mean_response"] == pytest.approx(exact["mean_response"], rel=1e-7)
    # the tail s_1 = lam, s_2, nothing above; Little's law over waiting tasks
    assert row["tail"][0] == pytest.approx(1.0 - p["one_minus_lam"], rel=1e-15) and row["tail"][2] == 0.0
    assert row["tail"][1] == pytest.approx(exact["tail"][1], rel=1e-8)
    assert row["mean_wait"] == pytest.approx(row["tail"][1] / row["tail"][0], rel=1e-15)
    assert row["mean_queue_se"] is None and row["n_jobs"] == 0


def test_engine_row_at_1e300_and_its_frac_within_h():
    import sim

    row = sim.run(_task(300))
    ref = ht.queueing_ratio(477171, ht.path_point(300, 1)["d"], 10.0 ** -90)
    assert row["queueing_ratio"] == ref["queueing_ratio"] and 0.15 < row["queueing_ratio"] < 0.25
    # h = 1: every task at position 1 iff the job samples k idle queues, P(C_0 >= k)
    fp = ht.fixed_point(477171, ht.path_point(300, 1)["d"], 10.0 ** -90)
    assert row["frac_within_h"] == pytest.approx(float(fp["pmf0"][fp["x0"] >= 477171].sum()), rel=1e-12)
    assert row["prob_wait"] == pytest.approx(1.0 - row["frac_within_h"], abs=1e-12)
    assert sim.run(_task(300, h=2))["frac_within_h"] == 1.0


@pytest.mark.parametrize("change, message", [
    ({"d_real": 2.0}, "jobs reach layer 2"),          # constant d at 10^10: k d (1 - lam) ~ 1
    ({"b": 1}, "b=1: the heavy-traffic limit has no finite buffer"),
    ({"log10_n": 301.0}, "log10_n=301.0 must be a number in (0, 300]"),
    ({"log10_n": 2.0}, "must not exceed N = 10^2"),
    ({"one_minus_lam": 1.0}, "one_minus_lam=1.0 must be a number in (0, 1)"),
])
def test_engine_refuses_points_where_the_form_does_not_hold(change, message):
    import sim

    with pytest.raises(ValueError) as exc:
        sim.check_task({**_task(10), **change})
    assert message in str(exc.value)
