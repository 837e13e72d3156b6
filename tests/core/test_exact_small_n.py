"""The exact small-N chain of tests/exact_small_n.py (the truth of benchmarks/se_coverage.py):
right where a closed form exists, and met by the engines' long runs within 4 standard errors."""
import pytest

import sim
from tests.exact_small_n import extrapolated, generator, solve


@pytest.mark.parametrize("lam", [0.5, 0.8])
@pytest.mark.parametrize("policy", ["jsq", "pod"])
def test_one_server_is_mm1(policy, lam):
    ex = solve(1, lam, "jsq" if policy == "pod" else policy, d=1, cap=200)
    assert ex.mass_at_cap < 1e-15
    assert ex.mean_response == pytest.approx(1.0 / (1.0 - lam), rel=1e-9)


def test_two_servers_pod_is_random_free_choice():
    # d = N = 2: power-of-2 samples both servers, so it is JSQ
    a, b = solve(2, 0.7, "pod", d=2, cap=60), solve(2, 0.7, "jsq", cap=60)
    assert a.mean_response == pytest.approx(b.mean_response, rel=1e-12)


@pytest.mark.parametrize("policy", ["jsq", "pod"])
def test_level_reduction_is_the_sparse_lu(policy):
    """The level-by-level solve against scipy's sparse LU of the whole chain (small enough)."""
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    Q, states = generator(4, 0.85, policy, 2, 9)
    A = sp.csc_matrix(Q.T)[1:, 1:]
    pi = np.concatenate(([1.0], spla.spsolve(A, -np.asarray(Q[0, 1:].todense()).ravel())))
    pi /= pi.sum()
    jobs = np.array([sum(s) for s in states], dtype=np.float64)
    assert solve(4, 0.85, policy, cap=9).mean_response == pytest.approx(float(pi @ jobs) / (4 * 0.85), rel=1e-12)


@pytest.mark.parametrize("policy", ["jsq", "pod"])
def test_extrapolation_over_caps_meets_a_chain_with_negligible_cap(policy):
    """Six caps whose last has 1e-3 of the mass at the cap: the fitted limit is within its bound of
    the cap-36 chain (mass at the cap below 1e-10), and at least 10 times closer than the last
    truncated mean."""
    truth = solve(3, 0.8, policy, cap=36)
    assert truth.mass_at_cap < 1e-10
    ex = extrapolated(3, 0.8, policy, tuple(range(6, 12)))
    assert ex.mass_at_cap > 5e-4
    assert abs(ex.mean_response - truth.mean_response) <= ex.bound
    assert ex.bound <= (truth.mean_response - ex.means[-1]) / 10


def test_extrapolation_refuses_too_few_or_gapped_caps():
    with pytest.raises(ValueError, match="consecutive caps"):
        extrapolated(3, 0.8, "pod", (6, 7, 8, 9, 10))
    with pytest.raises(ValueError, match="consecutive caps"):
        extrapolated(3, 0.8, "pod", (6, 7, 8, 9, 10, 12))


def test_cap_is_negligible():
    a, b = solve(4, 0.7, "pod", cap=21), solve(4, 0.7, "pod", cap=25)
    assert b.mass_at_cap < 1e-12
    assert a.mean_response == pytest.approx(b.mean_response, rel=1e-9)


@pytest.mark.parametrize("engine", ["occupancy", "agent"])
@pytest.mark.parametrize("policy", ["jsq", "pod"])
def test_engine_long_run_within_4se(engine, policy):
    truth = solve(4, 0.7, policy, cap=25).mean_response
    task = {"engine": engine, "policy": policy, "n_servers": 4, "lam": 0.7, "time": 20_000.0,
            "seed": 7}
    if policy == "pod":
        task["d"] = 2
    task["events"] = sim.events_for_time(task)
    r = sim.run(task)
    assert abs(r["mean_response"] - truth) <= 4 * r["mean_response_se"]
