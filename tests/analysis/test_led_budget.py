"""The LED analysis of message budgets: a tiny real run of led_heterogeneous (scaled down), end
to end without Ray or MLflow: the rows carry the budget, the p_hat used and what was spent, and
the report shows them side by side."""
from __future__ import annotations

import polars as pl
import pytest

from sim.led.model import model_spec, pod_budget_per_job
from tests.analysis.test_model_analyses import _tiny


@pytest.mark.integration  # a shipped sweep end to end through the pipeline
def test_led_heterogeneous_budget_against_spent(tmp_path):
    out = _tiny(tmp_path, "led_heterogeneous", [
        "axes.lam=[0.7,0.9]", "params.events=20000", "params.n_servers=10",
        "params.m_dispatchers=2", "params.service_rates=[[5,1.0],[5,3.0]]",
        "policies=[l_jba,pod]"])
    frame = out["frame"]
    led = frame.filter(pl.col("policy") == "l_jba")
    # the budget sets p_hat: the sweep gives no p_hat parameter at all
    assert "p_hat" not in frame.columns or led["p_hat"].is_null().all()
    for r in led.iter_rows(named=True):
        spec = model_spec(10, r["lam"], "l_jba", 2, service_rates=[1.0] * 5 + [3.0] * 5)
        assert r["msg_budget_per_job"] == pytest.approx(pod_budget_per_job(2, spec), rel=1e-12)
        if r["update"] == "push":  # d_u = d = 2: p_hat = 1 exactly, no pilots
            assert r["p_hat_used"] == 1.0 and r["calib_slots"] is None
        else:
            assert 0.0 <= r["p_hat_used"] <= 1.0 and r["calib_slots"] > 0
    pod = frame.filter(pl.col("policy") == "pod")
    assert pod["p_hat_used"].is_null().all() and pod["msg_budget_per_job"].is_null().all()
    extra = out["analysis"]["extra"]["led"]
    text = extra["report"].read_text()
    assert "## Message budget: target against spent" in text
    assert "| L-JBA-Pull | 0.7 | pull |" in text and "| L-JBA-Push | 0.9 | push |" in text
    assert "messages.png" in [p.name for p in extra["plots"]]
