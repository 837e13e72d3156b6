"""The simulated response-time distribution approaches the mean-field law as N grows: pod,
d = 2, lam = 0.9, occupancy engine, the 99th percentile.

Measured (16 runs of 2*10^7 events per N, seeds 1000-1015; docs/responses.md): simulation -
mean field of p99 = 0.1211 +- 0.0021 at N = 100, 0.0102 +- 0.0022 at N = 10^3, -0.0017 +-
0.0023 at N = 10^4 (about 1/N). The allowances below are those gaps plus 2 SE.
"""
from __future__ import annotations

from tests.checks import assert_p99_approaches_the_mean_field

POD = {"policy": "pod", "lam": 0.9, "d": 2}
#: N -> (measured gap, its SE), p99
GAPS = {100: (0.1211, 0.0021), 1000: (0.0102, 0.0022)}


def test_pod_p99_approaches_the_mean_field():
    # at N = 100 the finite-N gap is resolved (more than 4 SE above the limit); at N = 10^3 it
    # is within the (ten times smaller) measured allowance
    assert_p99_approaches_the_mean_field(POD, {100: 20_000_000, 1000: 2_000_000}, GAPS)
