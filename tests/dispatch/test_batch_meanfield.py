"""Mean field of batch-filling: reduces to power-of-d, conserves work, unique fixed point."""
import numpy as np
import pytest

from sim.dispatch.meanfield import batch_filling as bm
from sim.dispatch.meanfield.pod import fixed_point as pod_fixed_point
from sim.dispatch.meanfield.pod import pod_mean_response


@pytest.mark.parametrize("lam,d", [(0.7, 2), (0.9, 2), (0.9, 3)])
def test_k1_is_power_of_d(lam, d):
    s = bm.fixed_point(lam, 1, d)
    assert np.max(np.abs(s - pod_fixed_point(lam, d, s.size))) < 1e-8
    out = bm.run_task({"lam": lam, "k": 1, "d": d})
    assert out["mean_response"] == pytest.approx(pod_mean_response(lam, d), abs=1e-8)
    assert out["prob_wait"] == pytest.approx(lam**d, abs=1e-8)


@pytest.mark.parametrize("k,d", [(4, 2), pytest.param(16, 2, marks=pytest.mark.slow)])  # k = 16: 5 s
def test_arrivals_carry_lam_and_little(k, d):
    lam = 0.9
    s = bm.fixed_point(lam, k, d)
    flows, _, _ = bm._layer_flows(s, k, d, 0)
    assert flows.sum() == pytest.approx(k, abs=1e-9)  # every task raises exactly one queue
    assert np.max(np.abs(bm.drift(s, lam, k, d))) < 1e-10
    out = bm.run_task({"lam": lam, "k": k, "d": d})
    # Little per task: tasks per server = lam * (1 + mean wait)
    assert out["mean_queue"] == pytest.approx(lam * (1.0 + out["mean_wait"]), rel=1e-8)
    # E[T] exact (no Monte Carlo): the mean of the exact small-kd signature mixture
    assert out["mean_response_se"] is None and out["n_jobs"] == 0
    assert out["mean_response"] == pytest.approx(bm.response_law(lam, k, d).mean(), rel=1e-9)
    assert out["queueing_ratio"] > 0


def test_ode_from_different_starts_reaches_the_fixed_point():
    lam, k, d = 0.85, 4, 2
    s = bm.fixed_point(lam, k, d)
    for s0 in (np.zeros(s.size), np.r_[np.ones(6), np.zeros(s.size - 6)]):
        _, ys = bm.solve_ode(lam, k, d, 400.0, s0=s0, levels=s.size)
        assert np.max(np.abs(ys[-1] - s)) < 1e-7


@pytest.mark.slow  # 9-14 s: the largest k and d of the file
def test_more_probes_less_delay():
    r = [bm.run_task({"lam": 0.9, "k": 8, "d": d})["queueing_ratio"] for d in (1, 2, 4)]
    assert r[0] > r[1] > r[2] > 0


def test_bad_input():
    with pytest.raises(ValueError, match="lam"):
        bm.fixed_point(1.0, 2, 2)
    with pytest.raises(ValueError, match="k="):
        bm.fixed_point(0.5, 0, 2)
