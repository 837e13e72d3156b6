"""The limit path (``limit_path``, docs/sweeps.md): the limit engine along the sweep's formulas
of N, at every simulated N and beyond; arms it cannot model are left out and said so."""
from __future__ import annotations

import math

import mpmath
import pytest

from pipeline.errors import ConfigError
from pipeline.plan import make_plan, path_values
from pipeline.run import to_plain
from tests.helpers import compose

SMALL = ["+sweep=sub_halfin_whitt", "axes.n_servers=[100,1000]", "replications=2", "output_dir=/nonexistent"]


def test_path_values_continue_the_axis_in_half_decades():
    assert path_values([100, 316, 1000], 1e5, 2) == [100, 316, 1000, 3162, 10000, 31623, 100000]
    assert path_values([100, 1000], 1e15, 1)[-1] == 10**15
    assert path_values([1000], 999.0, 2) == [1000]  # nothing beyond the axis


def test_path_points_run_only_the_limit_engine_and_follow_the_formulas():
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=1e6",
                                               "limit_path.heavy_traffic.n_servers_max=null"])))
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
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=null",
                                               "limit_path.heavy_traffic.n_servers_max=null"])))
    assert {t["engine"] for t in plan.tasks} == {"occupancy"} and plan.path_skipped == []


HEAVY = SMALL + ["limit_path.n_servers_max=1e4", "limit_path.heavy_traffic.n_servers_max=1e100",
                 "limit_path.heavy_traffic.every_decades=30"]


def test_heavy_traffic_points_follow_the_formulas_in_high_precision():
    plan = make_plan(to_plain(compose(HEAVY)))
    heavy = [t for t in plan.tasks if t["engine"] == "heavy_traffic"]
    assert sorted({t["log10_n"] for t in heavy}) == [10.0, 40.0, 70.0, 100.0]
    assert {t["policy"] for t in heavy} == {"batch_filling", "batch_sampling"}
    top = next(t for t in heavy if t["log10_n"] == 100.0 and t["policy"] == "batch_filling"
               and t["_meta"]["params"]["variant"] == "c1")
    # the sweep's formulas by hand in 60 digits: lam = 1 - N^-alpha with the float alpha = 0.3,
    # k = ceil(ln(N)^2), d = min(ceil(1 / ((1 - lam) ln k)), floor(N / k))
    with mpmath.workdps(60):
        n = mpmath.mpf(10) ** 100
        oml = n ** (-mpmath.mpf(0.3))
        k = int(mpmath.ceil(mpmath.log(n) ** 2))
        d = int(mpmath.ceil(1 / (oml * mpmath.log(k))))
    assert k == 53019 and top["k"] == k
    assert top["one_minus_lam"] == float(oml) and top["d_real"] == float(d) and d > 2**62
    assert "n_servers" not in top and "lam" not in top and "d" not in top and top["seed"] == 0
    row = top["_meta"]["params"]
    assert row["n_servers"] is None and row["d"] is None and row["lam"] is None and row["log10_n"] == 100.0
    # at 10^10 the integers still fit: the point carries them, the task takes the float coordinates
    low = next(pt for pt in plan.points if pt.values.get("log10_n") == 10.0)
    assert low.values["n_servers"] == 10**10 and isinstance(low.values["d"], int)


def test_heavy_traffic_points_leave_the_simulations_seeds_alone():
    without = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=1e4",
                                                  "limit_path.heavy_traffic.n_servers_max=null"])))
    with_ = make_plan(to_plain(compose(HEAVY)))
    seeds = [(t["_meta"]["task_id"], t["seed"]) for t in without.tasks]
    assert [(t["_meta"]["task_id"], t["seed"]) for t in with_.tasks][:len(seeds)] == seeds
    assert {t["engine"] for t in with_.tasks[len(seeds):]} == {"heavy_traffic"}


def test_heavy_traffic_leaves_out_the_arms_it_cannot_model_and_says_why():
    plan = make_plan(to_plain(compose(HEAVY)))
    variants = {t["_meta"]["params"]["variant"] for t in plan.tasks if t["engine"] == "heavy_traffic"}
    assert variants == {"c1", "c4", "c1_loglog", "single_task"}
    why = "\n".join(plan.path_skipped)
    assert "batch_filling (c4_buffer) from N = 10^10 on: heavy_traffic: b=1 is simulated" in why
    assert "batch_filling (const2) from N = 10^10 on: heavy_traffic: d_real=2" in why and "layer 2" in why
    assert "policy pod_per_task: engine heavy_traffic does not serve it" in why


@pytest.mark.parametrize("override, message", [
    ("limit_path.heavy_traffic.n_servers_max=1e301", "limit_path.heavy_traffic.n_servers_max=1e+301 must be"),
    ("limit_path.heavy_traffic.n_servers_min=1e200", "limit_path.heavy_traffic.n_servers_min=1e+200 must be"),
    ("limit_path.heavy_traffic.every_decades=0", "limit_path.heavy_traffic.every_decades=0.0 must be"),
    ("+limit_path.heavy_traffic.step=3", "limit_path.heavy_traffic.step=3 is not a configuration key"),
])
def test_heavy_traffic_settings_are_checked(override, message):
    with pytest.raises(ConfigError) as exc:
        make_plan(to_plain(compose(HEAVY + [override])))
    assert message in str(exc.value)


def test_heavy_traffic_needs_a_policy_it_serves():
    with pytest.raises(ConfigError, match="engine heavy_traffic serves none of policies"):
        make_plan(to_plain(compose(HEAVY + ["policies=[pod_per_task]"])))


def test_heavy_traffic_leaves_out_single_points_where_the_form_does_not_hold_yet():
    # c = 1 at N = 10^2 and 10^4: k d (1 - lam) is too small for jobs to end on layers 0-1
    plan = make_plan(to_plain(compose(SMALL + [
        "limit_path.n_servers_max=1e4", "limit_path.heavy_traffic.n_servers_max=1e10",
        "limit_path.heavy_traffic.n_servers_min=1e2", "limit_path.heavy_traffic.every_decades=2",
        "policies=[batch_filling]"])))
    c1 = sorted(t["log10_n"] for t in plan.tasks if t["engine"] == "heavy_traffic"
                and t["_meta"]["params"]["variant"] == "c1")
    assert c1 == [6.0, 8.0, 10.0]
    why = next(w for w in plan.path_skipped if w.startswith("batch_filling (c1) "))
    assert "at 2 of its 5 N (10^2 to 10^4): heavy_traffic:" in why and "layer 2" in why


def test_a_buffer_past_the_int64_column_is_still_a_buffer():
    # c4_buffer's b = floor(min(N^0.3, N^0.2 / k)) passes 2^62 from about N = 10^120 on: still
    # a buffer the heavy-traffic limit does not model, never taken for "no buffer"
    plan = make_plan(to_plain(compose(SMALL + ["limit_path.n_servers_max=1e4", "policies=[batch_filling]",
                                               "limit_path.heavy_traffic.n_servers_max=1e300",
                                               "limit_path.heavy_traffic.every_decades=60"])))
    assert not [t for t in plan.tasks if t["engine"] == "heavy_traffic"
                and t["_meta"]["params"]["variant"] == "c4_buffer"]
    assert any(w.startswith("batch_filling (c4_buffer) from N = 10^10 on") for w in plan.path_skipped)
