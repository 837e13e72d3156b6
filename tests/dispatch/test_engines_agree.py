"""Engines that should agree, tested against each other on k-task jobs.

The agent engine (one entry per server, delays measured directly) and the occupancy engine
(counts per queue length, delays by Rao-Blackwell from positions) simulate the same model;
the batch-filling mean field is their N -> infinity limit. Each comparison uses independent
replications (their spread gives the standard errors, honest even when a single run is short
compared with the relaxation time) and asserts |difference| <= 4 combined standard errors.
"""
import numpy as np
import pytest

from sim.dispatch import agent_jobs, occupancy
from sim.dispatch.meanfield import batch_filling
from tests.helpers import assert_engines_agree

REPS = 8


def reps(mod, n, lam, policy, k, d, b=None, events=2_000_000):
    out = [mod.simulate(n, lam, policy, k=k, d=d, b=b, events=events, seed=1000 + s) for s in range(REPS)]
    return out


def mean_se(results, key):
    v = np.array([getattr(r, key) for r in results], dtype=float)
    return v.mean(), v.std(ddof=1) / np.sqrt(v.size)


def assert_agree(a, b, key):
    (ma, sa), (mb, sb) = mean_se(a, key), mean_se(b, key)
    assert_engines_agree(ma, sa, mb, sb, key)


@pytest.mark.parametrize("policy,k,n,lam", [
    ("batch_filling", 1, 500, 0.9),
    ("batch_filling", 4, 1000, 0.9),
    ("batch_filling", 16, 2000, 0.9),
    ("batch_sampling", 4, 1000, 0.9),
    ("pod_per_task", 4, 500, 0.9),
    # random routing at a lighter load: at 0.9 its deep, varied positions make every job's
    # E[max Gamma] a fresh quadrature (minutes of CPU)
    ("random", 4, 500, 0.6),
    ("jsq", 4, 300, 0.9),
])
def test_agent_and_occupancy_agree(policy, k, n, lam):
    d = 2
    a = reps(agent_jobs, n, lam, policy, k, d)
    o = reps(occupancy, n, lam, policy, k, d)
    for key in ("queueing_ratio", "mean_queue", "prob_wait", "mean_wait"):
        assert_agree(a, o, key)


def test_agent_and_occupancy_agree_with_a_buffer():
    a = reps(agent_jobs, 400, 0.95, "batch_filling", 4, 2, b=3)
    o = reps(occupancy, 400, 0.95, "batch_filling", 4, 2, b=3)
    for key in ("drop_prob", "queueing_ratio", "mean_queue"):
        assert_agree(a, o, key)
    assert mean_se(a, "drop_prob")[0] > 0.001


@pytest.mark.parametrize("k,d,lam", [(2, 1, 0.7), (4, 2, 0.9),
                                     pytest.param(16, 2, 0.8, marks=pytest.mark.slow)])  # 5 s
def test_occupancy_at_large_n_meets_the_batch_filling_mean_field(k, d, lam):
    # sampling k*d of N = 10^5 without replacement vs i.i.d. in the limit: an O(kd/N) bias,
    # far below the standard errors here
    mf = batch_filling.run_task({"lam": lam, "k": k, "d": d})
    o = reps(occupancy, 100_000, lam, "batch_filling", k, d, events=3_000_000)
    for key in ("queueing_ratio", "mean_queue", "prob_wait", "mean_wait"):  # the mean field is exact
        m, se = mean_se(o, key)
        assert abs(m - mf[key]) <= 4 * se, (key, m, se, mf[key])
    tail = np.mean([r.tail for r in o], axis=0)
    tail_se = np.std([r.tail for r in o], axis=0, ddof=1) / np.sqrt(REPS)
    ref = np.array(mf["tail"])
    assert np.all(np.abs(tail - ref)[:6] <= 4 * tail_se[:6] + 1e-9)
