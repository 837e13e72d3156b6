"""Every sweep composes and validates; every kind of bad input gets one clear refusal."""
from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.plan import make_plan, seed_for
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose, sweep_names


def plan_for(overrides: list[str], tmp_path=None):
    cfg = compose(overrides + [f"output_dir={tmp_path or '/nonexistent'}"])
    return make_plan(to_plain(cfg))


@pytest.mark.parametrize("name", sweep_names())
def test_every_sweep_composes_and_validates(name):
    plan = plan_for([f"+sweep={name}"])
    assert plan.sweep == name
    assert plan.tasks and plan.points
    ids = [t["_meta"]["task_id"] for t in plan.tasks]
    assert len(ids) == len(set(ids))


def test_default_is_one_point():
    plan = plan_for([])
    assert len(plan.points) == 1
    p = plan.points[0]
    assert (p.policy, p.values["n_servers"], p.values["lam"], p.values["d"]) == ("pod", 1000, 0.9, 2)


def test_formulas_and_alias():
    plan = plan_for(["+axes.N=[100,10000]", "+axes.beta=[0.5]", "+params.alpha=0.25",
                     "params.lam='1 - beta * N**(-alpha)'", "params.d='ceil(2 / (1 - lam))'"])
    vals = [p.values for p in plan.points]
    assert [v["n_servers"] for v in vals] == [100, 10000]
    assert vals[0]["lam"] == pytest.approx(1 - 0.5 * 100 ** -0.25)
    assert vals[1]["d"] == int(-(-2 // (0.5 * 10000 ** -0.25)))
    assert isinstance(vals[1]["d"], int)
    assert set(plan.varying) >= {"n_servers", "lam", "d"}


def test_seeds_are_keyed_not_ordered():
    a = plan_for(["+sweep=smoke"])
    b = plan_for(["+sweep=smoke", "replications=3"])
    sa = {t["_meta"]["task_id"]: t["seed"] for t in a.tasks}
    sb = {t["_meta"]["task_id"]: t["seed"] for t in b.tasks}
    assert all(sb[k] == v for k, v in sa.items())
    assert seed_for(1, 0, "agent", 0) != seed_for(1, 0, "agent", 1) != seed_for(1, 1, "agent", 0)
    agent_seeds = [t["seed"] for t in b.tasks if t["engine"] == "agent"]
    assert len(set(agent_seeds)) == len(agent_seeds)


def test_replications_may_be_a_formula_of_the_point():
    base = plan_for(["+sweep=smoke", "axes.n_servers=[100,1000]", "replications=2"])
    plan = plan_for(["+sweep=smoke", "axes.n_servers=[100,1000]", "replications='2 if N < 1000 else 3'"])
    reps = {}
    for t in plan.tasks:
        if t["engine"] == "agent":
            reps.setdefault((t["_meta"]["point_id"], t["n_servers"]), []).append(t["_meta"]["replication"])
    assert len(reps) >= 2
    assert all(sorted(r) == ([0, 1] if n == 100 else [0, 1, 2]) for (_, n), r in reps.items())
    # the first two runs of every point are the integer setting's, seed for seed
    seeds = {t["_meta"]["task_id"]: t["seed"] for t in plan.tasks}
    assert all(seeds[t["_meta"]["task_id"]] == t["seed"] for t in base.tasks)


# Every kind of bad input, one case a line: bad_input_corpus.txt (test_bad_input_corpus.py).


def test_valid_lists_are_shown():
    with pytest.raises(ConfigError, match="valid policies: central, random, jsq, pod"):
        plan_for(["policies=[nope]"])
    with pytest.raises(ConfigError, match="valid engines: agent, occupancy, meanfield"):
        plan_for(["engines=[nope]"])


def test_engine_that_does_not_serve_a_policy(monkeypatch):
    from sim import registry as policies

    monkeypatch.setitem(policies.ENGINE_POLICIES, "meanfield", ("random", "pod"))
    with pytest.raises(ConfigError, match="'jsq' is not served by engine 'meanfield'"):
        plan_for(["policies=[jsq]"])


def test_refused_config_writes_nothing(tmp_path):
    cfg = to_plain(compose(["params.lam=1.2", f"output_dir={tmp_path / 'out'}"]))
    with pytest.raises(ConfigError):
        run_sweep(cfg)
    assert not (tmp_path / "out").exists()


def test_variants_are_a_categorical_axis():
    plan = plan_for(["+axes.N=[100,1000]", "+variants={rule1:{c:1,d:'ceil(c/(1-lam))'},fixed:{d:3}}"])
    assert [(p.values["variant"], p.values["n_servers"], p.values["d"]) for p in plan.points] == [
        ("rule1", 100, 10), ("rule1", 1000, 10), ("fixed", 100, 3), ("fixed", 1000, 3)]
    assert plan.param_types["variant"] is str
    assert {"variant", "n_servers", "d"} <= set(plan.varying)
    assert plan.points[2].values["c"] is None  # a variable only one variant defines
    with pytest.raises(ConfigError, match=r"variants.bad.lamda is not a model parameter"):
        plan_for(["+variants={bad:{lamda:0.5}}"])


def test_ceil_forgives_floating_point_noise():
    from pipeline.formulas import evaluate

    assert 1 / (1 - 0.9) > 10  # 10.000000000000002
    assert evaluate("d", "ceil(1 / (1 - lam))", {"lam": 0.9}) == 10
    assert evaluate("d", "ceil(10.5)", {}) == 11
    assert evaluate("d", "floor(2.9999999999999996)", {}) == 3


def test_power_of_large_bases():
    # simpleeval refuses bases above 4e6 by default; the sweeps need N**(-alpha) at N = 1e8
    from pipeline.formulas import evaluate

    assert evaluate("lam", "1 - N**(-0.3)", {"N": 10**8}) == pytest.approx(1 - 1e8 ** -0.3)
    assert evaluate("k", "2**10", {}) == 1024
    with pytest.raises(ConfigError, match="range"):
        evaluate("x", "10.0**400", {})


def test_replications_formula_sees_the_policy_and_variant():
    over = ["+sweep=smoke", "policies=[pod,random]", "engines=[agent]", "axes.n_servers=[100,1000]",
            "+variants={a: {d: 2}, b: {d: 3}}", "~axes.d"]
    base = plan_for([*over, "replications=2"])
    plan = plan_for([*over, "replications=\"4 if policy == 'pod' and variant != 'b' and N > 100 else 2\""])
    reps = {}
    for t in plan.tasks:
        key = (t["policy"], t["_meta"]["params"]["variant"], t["n_servers"])
        reps.setdefault(key, set()).add(t["_meta"]["replication"])
    assert len(reps) == 8
    assert all(r == (set(range(4)) if k == ("pod", "a", 1000) else {0, 1}) for k, r in reps.items())
    # replication r of a point has the seed it has under any other count
    seeds = {t["_meta"]["task_id"]: t["seed"] for t in plan.tasks}
    assert all(seeds[t["_meta"]["task_id"]] == t["seed"] for t in base.tasks)
