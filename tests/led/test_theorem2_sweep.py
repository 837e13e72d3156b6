"""The shipped Theorem 2 sweeps run every point for the slotted engine's own run length,
``suggested_slots(eps, zeta, 0.05)``: their ``events`` formula is checked against the function at
every load, with eps and zeta from the model's laws."""
from __future__ import annotations

import pytest

from pipeline.plan import make_plan
from pipeline.run import to_plain
from sim.led.model import model_spec
from sim.led.slotted import suggested_slots
from tests.helpers import compose


@pytest.mark.parametrize("sweep", ["led_theorem2", "led_theorem2_large"])
def test_events_are_the_engines_suggested_slots(sweep):
    plan = make_plan(to_plain(compose([f"+sweep={sweep}", "output_dir=/tmp/unused"])))
    assert len({t["lam"] for t in plan.tasks}) >= 5
    for t in plan.tasks:
        spec = model_spec(t["n_servers"], t["lam"], t["policy"], t["m_dispatchers"],
                          update=t["update"], p_hat=t["p_hat"], d_u=t.get("d_u"), d=t.get("d"),
                          arrival_dist=t["arrival_dist"], service_dist=t["service_dist"])
        want = suggested_slots(spec.eps, spec.zeta, 0.05)
        assert t["events"] == pytest.approx(want, rel=1e-6, abs=2), (t["lam"], t["events"], want)
