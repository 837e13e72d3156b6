"""The limit path (``limit_path``, docs/sweeps.md): the limit engine along the sweep's formulas
of N, at every simulated N and beyond; arms it cannot model are left out and said so."""
from __future__ import annotations

import math

from pipeline.plan import make_plan, path_values
from pipeline.run import to_plain
from tests.helpers import compose

SMALL = ["+sweep=sub_halfin_whitt", "axes.n_servers=[100,1000]", "replications=2", "output_dir=/nonexistent"]


def test_path_values_continue_the_axis_in_half_decades():
    assert path_values([100, 316, 1000], 1e5, 2) == [100, 316, 1000, 3162, 10000, 31623, 100000]
    assert path_values([100, 1000], 1e15, 1)[-1] == 10**15
    assert path_values([1000], 999.0, 2) == [1000]  # nothing beyond the axis


def test_path_points_run_only_the_limit_engine_and_follow_the_formulas():
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=1e6"])))
    by_point: dict[int, set] = {}
    for t in plan.tasks:
        by_point.setdefault(t["_meta"]["point_id"], set()).add(t["engine"])
    ns = {pt.point_id: pt.values["n_servers"] for pt in plan.points}
    buffered = {pt.point_id for pt in plan.points if pt.values.get("b") is not None}
    assert buffered  # the c4_buffer variant: no limit models its buffer, so it is simulated only
    for pid, engines in by_point.items():
        # simulated N: the sweep's engine and the limit; beyond: the limit alone
        if pid in buffered:
            assert engines == {"occupancy"} and ns[pid] in (100, 1000)
            continue
        assert engines == ({"occupancy", "meanfield"} if ns[pid] in (100, 1000) else {"meanfield"})
    path = [t for t in plan.tasks if t["engine"] == "meanfield" and t["policy"] == "batch_filling"
            and t["_meta"]["params"]["variant"] == "c1"]
    assert [t["n_servers"] for t in path] == [100, 1000, 3162, 10000, 31623, 100000, 316228, 1000000]
    top = path[-1]
    n = 1_000_000
    lam = 1 - n ** -0.3
    k = math.ceil(math.log(n) ** 2)
    assert top["lam"] == lam and top["k"] == k
    assert top["d"] == min(math.ceil(1 / ((1 - lam) * math.log(k))), n // k)
    assert "time" not in top and "seed" in top and top["seed"] == 0


def test_an_arm_without_a_limit_is_left_out_and_named():
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=1e4", "policies=[batch_filling]",
                                               "+variants.buffered={d: 2, b: 3}"])))
    buffered = [t for t in plan.tasks if t["_meta"]["params"].get("variant") == "buffered"]
    assert buffered and {t["engine"] for t in buffered} == {"occupancy"}
    assert any("buffered" in why and "b=3" in why for why in plan.path_skipped)


def test_no_path_without_the_setting():
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=null"])))
    assert {t["engine"] for t in plan.tasks} == {"occupancy"} and plan.path_skipped == []
