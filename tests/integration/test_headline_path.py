"""The mean field along the headline sweep's path against the occupancy engine at the largest N
the default sweep simulates, N = 10^6 (control-variate estimate over 6 replications of 30 time
units; about a minute here). The fast suite does the same at N = 10^5
(tests/dispatch/test_zero_queueing_cv.py)."""
import pytest

from tests.dispatch.test_zero_queueing_cv import assert_on_path, path_d

N6 = 1_000_000
# d on the path, and the allowance: measured here (2026-12-03, 8 replications of 30 time units,
# control variate) simulated - mean field = c1 -0.00009 [95% CI -0.00013, -0.00005], c1_loglog
# -0.00051 [-0.00063, -0.00039], c4 -0.0028 [-0.0037, -0.0019], const2 +0.00002 [-0.00016,
# +0.00020]; the allowance is the measured gap's far end, rounded up. (single_task: +0.025, the
# mean field misses the finite-N convexity of that rule; docs/analysis.md.)
PATH6 = {"c1": (13, 0.00015), "c1_loglog": (32, 0.0007), "c4": (49, 0.004), "const2": (2, 0.0003)}


def test_rules_give_the_path_of_the_sweep():
    assert {arm: path_d(N6, arm) for arm in PATH6} == {arm: d for arm, (d, _) in PATH6.items()}


@pytest.mark.parametrize("arm", sorted(PATH6))
def test_occupancy_at_n_1e6_agrees_with_the_mean_field_on_the_path(arm):
    assert_on_path(N6, arm, PATH6[arm][1], seed=7000)
