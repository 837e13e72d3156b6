"""Mean-field rows with the response columns (docs/responses.md), and the mean-field laws of
pod_per_task and batch_sampling (sim/dispatch/meanfield/tasks.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammainc

import sim
from sim.core.jobdelay import GL_W, GL_X, expected_max_gamma
from sim.core.responses import QUANTILE_NAMES, QUANTILES, RESPONSE_COLUMNS, RESPONSE_GRID
from sim.dispatch.meanfield import tasks as tm
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.meanfield.pod import response_law as pod_response_law
from tests.helpers import assert_within_se

MF_TASKS = [
    {"policy": "random", "lam": 0.8},
    {"policy": "jsq", "lam": 0.8},
    {"policy": "pod", "lam": 0.9, "d": 2},
    {"policy": "batch_filling", "lam": 0.7, "d": 2, "k": 1},
    # k > 1: E[T] by a seeded Monte Carlo of 40 000 jobs, run twice (about 10 s)
    pytest.param({"policy": "batch_filling", "lam": 0.7, "d": 2, "k": 3},
                 marks=pytest.mark.slow, id="batch_filling_k3"),
    {"policy": "pod_per_task", "lam": 0.9, "d": 2, "k": 4},
    {"policy": "batch_sampling", "lam": 0.9, "d": 2, "k": 4},
    {"policy": "jiq", "lam": 0.9, "r": 10.0},
    {"policy": "jiq_pod", "lam": 0.9, "r": 10.0, "d": 2},
]


def _run(task, **extra):
    return sim.run({"engine": "meanfield", "n_servers": 1000, **task, **extra})


@pytest.mark.parametrize("task", MF_TASKS, ids=lambda t: f"{t['policy']}_k{t.get('k', 1)}")
def test_responses_flag_adds_exact_columns_and_changes_nothing_else(task):
    off = _run(task)
    on = _run(task, responses=True)
    off.pop("wall_time"), on.pop("wall_time")
    assert not set(RESPONSE_COLUMNS) & set(off)
    assert set(on) == set(off) | set(RESPONSE_COLUMNS)
    for key, val in off.items():
        if key == "ci_method":
            assert on[key].startswith(val) and "response law exact" in on[key]
        else:
            assert on[key] == val, key  # the flag changes nothing else (the MC seed is fixed)
    for name in QUANTILE_NAMES:  # exact rows: SEs null, as every SE of a meanfield row
        assert on[f"response_{name}_se"] is None
        assert on[f"response_{name}"] > 0
    assert on["response_ccdf_se"] is None
    assert on["response_grid"] == [float(x) for x in RESPONSE_GRID]
    c = np.array(on["response_ccdf"])
    assert c.shape == RESPONSE_GRID.shape and np.all(np.diff(c) <= 1e-15)
    assert c[0] == pytest.approx(1.0, abs=1e-12)
    q = [on[f"response_{n}"] for n in QUANTILE_NAMES]
    assert q == sorted(q)
    # the quantiles are those of the CCDF the row holds (linear interpolation between grid
    # points: within the grid spacing)
    for qq, v in zip(QUANTILES, q):
        j = int(np.argmax(c <= 1 - qq))
        assert RESPONSE_GRID[j - 1] <= v <= RESPONSE_GRID[j]


def test_mm1_meanfield_row_is_exponential():
    lam = 0.8
    row = _run({"policy": "random", "lam": lam}, responses=True)
    for name, q in zip(QUANTILE_NAMES, QUANTILES):
        assert row[f"response_{name}"] == pytest.approx(-math.log(1 - q) / (1 - lam), rel=1e-9)
    # (the mixture drops positions of total mass below 1e-17: sim.dispatch.meanfield.pod.response_law)
    np.testing.assert_allclose(row["response_ccdf"], np.exp(-(1 - lam) * RESPONSE_GRID),
                               rtol=1e-9, atol=1e-16)


def test_pod_row_quantiles_are_the_mixture_quantiles():
    row = _run({"policy": "pod", "lam": 0.9, "d": 2}, responses=True)
    mix = pod_response_law("pod", 0.9, 2)
    for name, q in zip(QUANTILE_NAMES, QUANTILES):
        assert row[f"response_{name}"] == pytest.approx(mix.quantile(q), rel=1e-9)
    np.testing.assert_allclose(row["response_ccdf"], mix.ccdf(RESPONSE_GRID), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# pod_per_task


def test_pod_per_task_is_the_max_of_k_pod_kd_tasks():
    lam, k, d = 0.8, 3, 1
    law = tm.ppt_response_law(lam, k, d)
    base = pod_response_law("pod", lam, k * d)
    t = np.array([0.3, 1.0, 3.0, 8.0, 20.0])
    np.testing.assert_allclose(1 - law.ccdf(t), (1 - base.ccdf(t)) ** k, rtol=1e-12)
    # E[max] by the quadrature of the law against the exact sum over the multinomial
    # signatures of k i.i.d. task positions (expected_max_gamma per signature)
    w = base.weights / base.weights.sum()
    w = w[w > 1e-18]
    exact = 0.0
    npos = w.size
    for a in range(npos):
        for b in range(a, npos):
            for c in range(b, npos):
                pos = (a + 1, b + 1, c + 1)
                counts = np.zeros(npos + 2, np.int64)
                for p in pos:
                    counts[p] += 1
                mult = math.factorial(3) / np.prod([math.factorial(int(x)) for x in counts])
                exact += mult * w[a] * w[b] * w[c] * expected_max_gamma(counts, GL_X, GL_W)
    assert law.mean() == pytest.approx(exact, rel=1e-9)


def test_pod_per_task_row_and_k1():
    row = _run({"policy": "pod_per_task", "lam": 0.9, "d": 2, "k": 4}, responses=True)
    np.testing.assert_allclose(row["tail"], pod_fixed_point(0.9, 8, 64), rtol=1e-12)
    assert row["prob_wait"] == pytest.approx(1 - (1 - 0.9**8) ** 4)
    pod = _run({"policy": "pod", "lam": 0.9, "d": 2}, responses=True)
    one = _run({"policy": "pod_per_task", "lam": 0.9, "d": 2, "k": 1}, responses=True)
    for key in ("mean_response", "mean_wait", "mean_queue", "prob_wait", "frac_within_h",
                *(f"response_{n}" for n in QUANTILE_NAMES)):
        assert one[key] == pytest.approx(pod[key], rel=1e-9), key


# ---------------------------------------------------------------------------------------------
# batch_sampling


@pytest.mark.parametrize("k,d,lam", [(4, 2, 0.9), (3, 2, 0.7), (16, 2, 0.9)])
def test_batch_sampling_fixed_point_recursion_is_the_ode_fixed_point(k, d, lam):
    s = tm.bs_fixed_point(lam, k, d)
    s_ode = tm.bs_fixed_point_ode(lam, k, d)
    np.testing.assert_allclose(s_ode[: s.size], s, rtol=1e-9, atol=1e-15)
    assert np.max(np.abs(tm.bs_drift(s, lam, k, d)[:-1])) < 1e-14


@pytest.mark.parametrize("k,d,lam", [(4, 2, 0.9), (3, 2, 0.7)])
def test_batch_sampling_summed_program_equals_enumerated_signatures(k, d, lam):
    law = tm.bs_response_mixture(lam, k, d)
    mix = tm.bs_signature_mixture(lam, k, d)
    _, dropped = tm.bs_signature_law(tm.bs_fixed_point(lam, k, d), k, d)
    assert dropped < 1e-15
    t = np.array([0.5, 2.0, 5.0, 10.0, 20.0, 30.0])
    np.testing.assert_allclose(law.ccdf(t), mix.ccdf(t), rtol=1e-10)
    assert law.mean() == pytest.approx(mix.mean(), rel=1e-11)


def test_batch_sampling_special_cases():
    # k = 1: power-of-d
    pod = pod_response_law("pod", 0.9, 2)
    one = tm.bs_response_mixture(0.9, 1, 2)
    t = np.array([0.5, 3.0, 10.0, 25.0])
    np.testing.assert_allclose(one.ccdf(t), pod.ccdf(t), rtol=1e-10)
    # d = 1: the k tasks go to k distinct uniform queues: k independent M/M/1 queues
    lam, k = 0.7, 3
    law = tm.bs_response_mixture(lam, k, 1)
    np.testing.assert_allclose(1 - law.ccdf(t), (1 - np.exp(-(1 - lam) * t)) ** k, rtol=1e-10)
    assert law.mean() == pytest.approx((1 + 1 / 2 + 1 / 3) / (1 - lam), rel=1e-10)


def test_batch_sampling_law_against_monte_carlo_of_the_order_statistics():
    """Sample kd i.i.d. lengths from the fixed point, keep the k lowest (one task each, at
    length + 1) and average the conditional CCDF 1 - prod F_p(t): within 4 SE of the law."""
    lam, k, d = 0.9, 4, 2
    s = tm.bs_fixed_point(lam, k, d)
    rng = np.random.default_rng(12)
    n_jobs = 40_000
    u = rng.random((n_jobs, k * d))
    lengths = np.searchsorted(-s, -u, side="left")  # P(Q >= i) = s_i
    pos = np.sort(lengths, axis=1)[:, :k] + 1
    law = tm.bs_response_mixture(lam, k, d)
    for t in (2.0, 6.0, 12.0):
        cond = 1 - np.prod(gammainc(pos, t), axis=1)
        assert_within_se(cond.mean(), law.ccdf(t)[0], cond.std(ddof=1) / math.sqrt(n_jobs),
                         f"P(T > {t})")
    from sim.core.jobdelay import expected_job_delay
    sub = pos[:4000]
    vals = np.array([expected_job_delay(list(p)) for p in sub])
    assert_within_se(vals.mean(), law.mean(), vals.std(ddof=1) / math.sqrt(sub.shape[0]), "E[T]")


def test_batch_sampling_row():
    lam, k, d = 0.9, 4, 2
    row = _run({"policy": "batch_sampling", "lam": lam, "d": d, "k": k}, responses=True)
    s = tm.bs_fixed_point(lam, k, d)
    assert row["tail"][: s.size] == pytest.approx(list(s))
    assert row["mean_queue"] == pytest.approx(s.sum())
    # Little's law for the tasks: mean task response = 1 + mean wait = mean_queue / lam
    assert 1 + row["mean_wait"] == pytest.approx(row["mean_queue"] / lam)
    assert row["mean_response"] == pytest.approx(tm.bs_response_mixture(lam, k, d).mean())
    assert row["messages_per_job"] == 2 * k * d


def test_registry_pairs_the_new_meanfield_rows():
    from sim.registry import entry

    for policy in ("pod_per_task", "batch_sampling"):
        e = entry("meanfield", policy)
        assert e.required == ("d", "k") and e.runner == "sim.dispatch.meanfield:run_task"
