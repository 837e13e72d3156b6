"""The JIQ analysis' Table II (q_i) and ordering helpers (analysis/models/jiq/) on small
synthetic frames whose answers are known exactly."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis.models.jiq import crossovers, orderings, q_table


def _agg(rows):
    return pl.DataFrame(rows)


def test_q_table_differences_per_replication_and_relative_error():
    mf_tail = [0.5, 0.25, 0.125]
    reps = [[0.51, 0.26, 0.13], [0.49, 0.24, 0.12], [0.50, 0.25, 0.125]]
    rows = [{"policy": "jiq", "engine": "agent", "n_servers": 500, "lam": 0.5, "tail": t} for t in reps]
    rows.append({"policy": "jiq", "engine": "meanfield", "n_servers": 500, "lam": 0.5, "tail": mf_tail})
    qs = q_table(pl.DataFrame(rows), ["policy", "engine", "n_servers", "lam"], ["policy", "n_servers", "lam"],
                 levels=2)
    assert [q["level"] for q in qs] == [0, 1, 2]
    per_rep = np.array([[1 - t[0], t[0] - t[1], t[1] - t[2]] for t in reps])
    for q in qs:
        i = q["level"]
        mf = [0.5, 0.25, 0.125][i]
        assert q["mf"] == pytest.approx(mf)
        assert q["sim"] == pytest.approx(per_rep[:, i].mean())
        assert q["se"] == pytest.approx(per_rep[:, i].std(ddof=1) / math.sqrt(3))
        assert q["rel_err"] == pytest.approx((per_rep[:, i].mean() - mf) / mf)


def test_orderings_and_crossover_of_two_lines():
    # a = 1 + lam, b = 1.5 (exact, meanfield): a < b below lam = 0.5, above it the reverse
    rows = []
    for lam in (0.2, 0.4, 0.6, 0.8):
        rows.append({"policy": "jiq", "engine": "meanfield", "lam": lam, "mean_response": 1 + lam,
                     "mean_response_se": 0.0})
        rows.append({"policy": "jiq_pod", "engine": "meanfield", "lam": lam, "mean_response": 1.5,
                     "mean_response_se": 0.0})
    ords = orderings(_agg(rows), sim=False)
    assert [o["order"][0] for o in ords] == ["jiq", "jiq", "jiq_pod", "jiq_pod"]
    (c,) = crossovers(ords, sim=False)
    assert c["lam"] == pytest.approx(0.5) and c["below"] == "jiq" and c["above"] == "jiq_pod"
    assert c["between"] == (0.4, 0.6)


def test_simulated_crossover_within_the_ci_is_unresolved():
    rows = []
    for lam, a in ((0.4, 1.49), (0.6, 1.51)):
        rows.append({"policy": "jiq", "engine": "agent", "lam": lam, "mean_response": a, "mean_response_se": 0.05})
        rows.append({"policy": "jiq_pod", "engine": "agent", "lam": lam, "mean_response": 1.5,
                     "mean_response_se": 0.05})
    ords = orderings(_agg(rows), sim=True)
    assert " ~ " in ords[0]["text"]
    (c,) = crossovers(ords, sim=True)
    assert not c["significant"]
