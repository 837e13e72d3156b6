"""A simulator's result type and row (sim.core.results.simulation_result, simulation_row)."""
from __future__ import annotations

import numpy as np
import pytest

from sim.core.results import OPTIONAL_SIM_FIELDS, RESULT_KEYS, SIM_FIELDS, simulation_result, simulation_row

COMMON = dict(mean_response=2.0, mean_response_se=0.1, mean_queue=1.5, mean_queue_se=0.05,
              tail=np.array([0.5, 0.25]), tail_se=np.array([0.01, 0.02]), n_jobs=10, events_run=100,
              sim_time=50.0, warmup_time=5.0, warmup_windows=3, n_windows=40, n_batches=20,
              ci_method="batch means")


def test_optional_fields_default_to_empty():
    R = simulation_result("R", "A toy's result.", {"mean_wait": "", "mean_wait_se": "", "own": "its own"})
    assert R._fields[:len(SIM_FIELDS)] == tuple(SIM_FIELDS)
    res = R(**COMMON, mean_wait=1.0, mean_wait_se=0.1, own=7)
    assert res.own == 7 and res.mean_wait == 1.0
    for key in set(OPTIONAL_SIM_FIELDS) - {"mean_wait", "mean_wait_se"}:
        assert getattr(res, key) is None, key
    with pytest.raises(TypeError, match="own"):  # a field it names is required
        R(**COMMON, mean_wait=1.0, mean_wait_se=0.1)
    with pytest.raises(TypeError, match="n_jobs"):  # and so is every common one
        R(**{k: v for k, v in COMMON.items() if k != "n_jobs"}, mean_wait=1.0, mean_wait_se=0.1, own=7)
    assert "``own``: its own" in R.__doc__ and "``mean_wait``: mean wait" in R.__doc__
    assert R.__module__ == __name__


def test_simulation_row():
    R = simulation_result("R", "A toy's result.", {"p0": "", "p0_se": ""})
    res = R(**COMMON, p0=np.float64(0.25), p0_se=0.01)
    row = simulation_row(res, ("p0", "p0_se", "tail_se"), drop_prob=0.0)
    assert list(row)[:len(RESULT_KEYS)] == list(RESULT_KEYS)
    assert row["p0"] == 0.25 and type(row["p0"]) is float and row["tail_se"] == [0.01, 0.02]
    assert row["drop_prob"] == 0.0 and row["mean_wait"] is None and row["n_jobs"] == 10

    class Dist:
        def row(self):
            return {"response_p50": 1.25}

    assert simulation_row(res._replace(responses=Dist()))["response_p50"] == 1.25
