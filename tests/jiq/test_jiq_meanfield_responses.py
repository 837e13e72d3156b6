"""JIQ meanfield rows with the response columns, and the simulated response-time distribution
approaching the mean-field law as N grows (jiq, r = 10, lam = 0.9, occupancy engine, p99).

Measured (16 runs of 2*10^7 events per N, seeds 1000-1015; docs/responses.md): simulation -
mean field of p99 = 0.4054 +- 0.0059 at N = 100, 0.0375 +- 0.0028 at N = 10^3 (about 1/N).
The allowances below are those gaps plus 2 SE.
"""
from __future__ import annotations

import pytest

import sim
from sim.jiq.meanfield import response_law
from tests.checks import assert_p99_approaches_the_mean_field

JIQ = {"policy": "jiq", "lam": 0.9, "r": 10.0}
GAPS = {100: (0.4054, 0.0059), 1000: (0.0375, 0.0028)}


@pytest.mark.parametrize("policy,d", [("jiq", None), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_meanfield_row_quantiles_are_the_law(policy, d):
    task = {"engine": "meanfield", "policy": policy, "n_servers": 1000, "lam": 0.9, "r": 10.0}
    if d is not None:
        task["d"] = d
    row = sim.run({**task, "responses": True})
    law = response_law(policy, 0.9, 10.0, 1 if d is None else d)
    for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        assert row[f"response_{name}"] == pytest.approx(law.quantile(q), rel=1e-9)
        assert row[f"response_{name}_se"] is None
    assert law.mean() == pytest.approx(row["mean_response"], rel=1e-10)


def test_jiq_p99_approaches_the_mean_field():
    assert_p99_approaches_the_mean_field(JIQ, {100: 20_000_000, 1000: 4_000_000}, GAPS)
