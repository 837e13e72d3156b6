"""The exact small-N chain of tests/exact_small_n.py (the truth of benchmarks/se_coverage.py):
right where a closed form exists, and met by the engines' long runs within 4 standard errors."""
import pytest

import sim
from tests.exact_small_n import solve


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
