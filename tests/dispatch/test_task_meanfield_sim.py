"""The mean-field limits of pod_per_task and batch_sampling (sim/dispatch/meanfield/tasks.py)
against one long occupancy run at N = 10^4.

Allowances: the finite-N gap (simulation - mean field) measured at N = 10^4 by 8 runs of 10^7
events (seeds 2000-2007, k = 4, d = 2, lam = 0.9; docs/responses.md), plus 2 SE of that
measurement. batch_sampling: s_2 0.00091 +- 0.00056, s_3 0.00165 +- 0.00100, s_4 0.00166 +-
0.00057, E[T] 0.0059 +- 0.0029, p99 0.0113 +- 0.0045; pod_per_task: s_2 0.0010 +- 0.0009, s_3
0.000053 +- 0.00001, E[T] 0.0014 +- 0.0013, p99 0.0026 +- 0.0018. (At N = 10^3 the gaps are
about 5-10 times larger: a finite-N effect.)
"""
from __future__ import annotations

import pytest

import sim
from tests.helpers import assert_within_se

BASE = {"lam": 0.9, "d": 2, "k": 4}
CASES = {
    "batch_sampling": {"tail2": 0.00091 + 2 * 0.00056, "tail3": 0.00165 + 2 * 0.00100,
                       "tail4": 0.00166 + 2 * 0.00057, "mean_response": 0.0059 + 2 * 0.0029,
                       "response_p99": 0.0113 + 2 * 0.0045},
    "pod_per_task": {"tail2": 0.0010 + 2 * 0.0009, "tail3": 0.000053 + 2 * 0.00001,
                     "mean_response": 0.0014 + 2 * 0.0013, "response_p99": 0.0026 + 2 * 0.0018},
}


@pytest.mark.parametrize("policy", sorted(CASES))
def test_occupancy_at_n_1e4_agrees_with_the_mean_field(policy):
    mf = sim.run({"engine": "meanfield", "policy": policy, "n_servers": 10_000, **BASE,
                  "responses": True})
    run = sim.run({"engine": "occupancy", "policy": policy, "n_servers": 10_000, **BASE,
                   "events": 10_000_000, "seed": 7, "responses": True})
    for what, allowance in CASES[policy].items():
        if what.startswith("tail"):
            i = int(what[4:]) - 1
            est, se, truth = run["tail"][i], run["tail_se"][i], mf["tail"][i]
        else:
            est, se, truth = run[what], run[f"{what}_se"], mf[what]
        assert_within_se(est, truth, se, f"{policy} {what}", allowance=allowance)
