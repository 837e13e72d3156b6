"""Limit claims past the exact path's end (analysis/models/zero_queueing_limit.py; issue 44, item 4):
per-task power-of-(kd) carried by its closed form and derived forms, the batch policies with
constant d by the derived lower bound, anything else undecided beyond the path's end."""
from __future__ import annotations

import math

import polars as pl

from analysis.models.zero_queueing import analyze_zero_queueing

NS = [100, 1000, 10_000, 100_000]
PATH = [10**x for x in range(2, 16)]
CONTEXT = {"params": {"d_cap": "floor(N / k)"},
           "variants": {"c1": {"c": 1, "d": "min(ceil(c / ((1 - lam) * log(k))), d_cap)"}, "const2": {"d": 2},
                        "flat": {"d": 3}},
           "limit_path": {"heavy_traffic": {"n_servers_max": 1e300}}}
PARAMS = ["n_servers", "variant", "alpha", "k", "d", "lam", "log10_n", "one_minus_lam", "d_real"]
COLS = ("queueing_ratio", "queueing_ratio_se", "mean_response", "mean_response_se", "drop_prob", "drop_prob_se",
        "frac_within_h", "tail", "mean_queue")


def _point(n: int, variant: str) -> tuple[int, int, float]:
    x = math.log10(n)
    eps = 10.0 ** (-0.3 * x)
    k = math.ceil((x * math.log(10.0)) ** 2)
    d = {"c1": math.ceil(1 / (eps * math.log(k))), "const2": 2, "flat": 3}[variant]
    return k, min(d, n // k), eps


def _rows(policy: str, variant: str, path=PATH, sim_ratio=None) -> list[dict]:
    import sim

    rows = []
    for n in NS:
        k, d, eps = _point(n, variant)
        for r in range(4):
            rows.append({"task_id": f"{policy}-{variant}-{n}-{r}", "engine": "occupancy", "policy": policy,
                         "variant": variant, "alpha": 0.3, "n_servers": n, "k": k, "d": d, "lam": 1 - eps, "status": "ok",
                         "replication": r, "queueing_ratio": (sim_ratio or 0.3) * (1 + 0.01 * r),
                         "queueing_ratio_se": 0.003, "mean_response": 4.0, "mean_response_se": 0.01,
                         "drop_prob": 0.0, "drop_prob_se": 0.0, "frac_within_h": 0.9, "tail": [0.8, 0.1, 0.0],
                         "mean_queue": 1.0, "log10_n": None, "one_minus_lam": None, "d_real": None})
    for n in path:
        k, d, eps = _point(n, variant)
        row = sim.run({"engine": "meanfield", "policy": policy, "n_servers": n, "lam": 1 - eps, "k": k, "d": d})
        rows.append({"task_id": f"{policy}-{variant}-mf{n}", "engine": "meanfield", "policy": policy,
                     "variant": variant, "alpha": 0.3, "n_servers": n, "k": k, "d": d, "lam": 1 - eps, "status": "ok",
                     "replication": 0, "log10_n": None, "one_minus_lam": None, "d_real": None,
                     **{c: row[c] for c in COLS}})
    return rows


def _heavy(variant: str, xs=(10, 100, 300)) -> list[dict]:
    """batch_filling's heavy_traffic rows: the N, k and 1 - lam the far path is evaluated at."""
    import sim
    from sim.dispatch.meanfield import heavy_traffic as ht

    out = []
    for x in xs:
        p = ht.path_point(x, 1)
        row = sim.run({"engine": "heavy_traffic", "policy": "batch_filling", "log10_n": float(x), "k": p["k"],
                       "d_real": float(p["d"]), "one_minus_lam": p["one_minus_lam"]})
        out.append({"task_id": f"h{x}", "engine": "heavy_traffic", "policy": "batch_filling", "variant": variant, "alpha": 0.3,
                    "n_servers": None, "k": p["k"], "d": None, "lam": None, "status": "ok", "replication": 0,
                    "log10_n": float(x), "one_minus_lam": p["one_minus_lam"], "d_real": float(p["d"]),
                    **{c: row[c] for c in COLS}})
    return out


def test_per_task_and_constant_d_limits_are_derived_not_extrapolated(tmp_path):
    rows = (_rows("pod_per_task", "const2") + _rows("pod_per_task", "c1", path=PATH[:9])
            + _rows("batch_sampling", "const2", path=PATH[:7], sim_ratio=1.0) + _heavy("c1"))
    out = analyze_zero_queueing(pl.DataFrame(rows, infer_schema_length=None), PARAMS, tmp_path, "t",
                                context=CONTEXT)
    by = {(v["policy"], v["variant"]): v for v in out["verdicts"]}
    const2 = by[("pod_per_task", "const2")]
    # the exact path alone (to 10^15, flat near 0.30 over its last decade) no longer makes a level
    assert const2["path_verdict"] == "not vanishing" and const2["heavy_verdict"] == "not vanishing"
    assert const2["limit_carried_by"].startswith("derived form")
    assert const2["path_n_max"] == 1e300 and const2["path_ratio_at_max"] > 2.0
    assert const2["heavy_marks"][100] > 1.0 and "grows without bound" in const2["heavy_note"]
    c1 = by[("pod_per_task", "c1")]
    assert c1["heavy_verdict"] == "vanishing" and "lam^(kd)" in c1["limit_carried_by"]
    bs = by[("batch_sampling", "const2")]
    assert bs["path_verdict"] == "not vanishing" and bs["limit_carried_by"].startswith("derived lower bound")
    assert "grows without bound" in bs["path_note"] and bs["path_level"] is None
    lines = "\n".join(out["verdict_lines"])
    assert "converges to a positive level" not in lines.split("simulated")[0]
    assert lines.count("grows without bound") >= 2


def test_an_exact_path_alone_carries_no_limit(tmp_path):
    """A rule whose limit nothing derives (here pod_per_task with constant d but no N past the exact
    path: no heavy-traffic rows to evaluate the closed form at) is undecided beyond the path's end."""
    rows = _rows("pod_per_task", "const2")
    out = analyze_zero_queueing(pl.DataFrame(rows, infer_schema_length=None), PARAMS, tmp_path, "t",
                                context=CONTEXT)
    v = out["verdicts"][0]
    assert v["path_verdict"] == "undecided" and v["path_note"].startswith("undecided beyond N = 10^15")
    assert v["path_level"] is None and "undecided beyond N = 10^15" in out["verdict_lines"][1]
