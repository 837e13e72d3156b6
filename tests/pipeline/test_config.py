"""Every sweep composes and validates; every kind of bad input gets one clear refusal."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from pipeline.errors import ConfigError
from pipeline.plan import make_plan, seed_for
from pipeline.run import run_sweep, to_plain

from tests.helpers import CONF, REPO, compose, sweep_names


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


BAD = [
    (["params.lam=1.0"], "lam=1.0"),
    (["params.lam=1.5"], "lam=1.5"),
    (["params.d=0"], "d=0"),
    (["params.n_servers=10", "params.d=11"], "d=11"),
    (["params.n_servers=0"], "n_servers=0"),
    (["policies=[pod,fastest]"], "'fastest'"),
    (["engines=[agent,quantum]"], "'quantum'"),
    (["params.lam='1 - bta'"], "'bta'"),
    (["params.lam='N.real'"], "attribute access"),
    (["params.lam='__import__(\"os\")'"], "__import__"),
    (["params.lam='open(1)'"], "'open'"),
    (["params.d='ceil(2.5) + 0.5'"], "d=3.5"),
    (["replications=0"], "replications=0"),
    (["+axes.lamda=[0.5]"], "lamda"),
    (["params.events=10"], "events=10"),
    (["run.init=warm"], "run.init='warm'"),
    (["execution.backend=spark"], "execution.backend='spark'"),
    (["execution.auth=kerberos"], "execution.auth='kerberos'"),
    (["execution.tasks_per_cpu=0"], "execution.tasks_per_cpu=0"),
    (["execution.address=local"], "execution.address='local'"),
    (["execution.connect_timeout=0"], "execution.connect_timeout=0"),
    (["run.n_batches=100000"], "run.n_batches=100000"),
    (["params.lam=nan"], "lam=nan is not finite"),
    # distributed JIQ (sim/jiq): one clear message each
    (["policies=[jiq]", "engines=[agent]", "+params.r=3"], "n_servers / r = 1000 / 3"),
    (["policies=[jiq]", "engines=[agent]"], "params.r is required"),
    (["policies=[jiq]", "engines=[agent]", "+params.r=0"], "r=0"),
    (["policies=[jiq_pod]", "engines=[agent]", "+params.r=10", "params.d=1001"], "d=1001"),
    (["policies=[jiq_sqd]", "engines=[agent]", "+params.r=10", "params.d=101"], "d=101 must be an integer with 1 <= d <= M"),
    (["policies=[jiq_threshold]", "engines=[agent]", "+params.r=10", "+params.z=-1"], "z=-1"),
    (["policies=[jiq_threshold]", "engines=[agent]", "+params.r=10"], "params.z is required"),
    (["policies=[jiq_original]", "engines=[occupancy]", "+params.r=10"], "'jiq_original' is not served by engine 'occupancy'"),
    (["policies=[jiq]", "engines=[meanfield]", "+params.r=10", "params.lam=0"], "lam=0"),
    # multi-dispatcher LED model (sim/led, slotted engine)
    (["policies=[l_jsq]", "engines=[slotted]", "+params.p_hat=1.5"], "p_hat=1.5"),
    (["policies=[l_pod]", "engines=[slotted]", "params.d=1001"], "d=1001"),
    (["policies=[l_jsq]", "engines=[slotted]", "+params.update=push", "+params.d_u=2000"], "d_u=2000"),
    (["policies=[jsq]", "engines=[slotted]", "params.lam=1.0"], "lam=1.0"),
    (["policies=[jsq]", "engines=[slotted]", "+params.arrival_dist=bernoulli", "+params.m_dispatchers=1"], "bernoulli"),
    (["policies=[jsq]", "engines=[slotted]", "+params.service_dist=bernoulli", "+params.service_rates=[[1000,2.0]]"], "bernoulli"),
    (["policies=[jsq]", "engines=[slotted]", "+params.service_dist=lognormal"], "service_dist='lognormal'"),
    (["policies=[jsq]", "engines=[slotted]", "+params.update=sideways"], "update='sideways'"),
    (["policies=[jsq]", "engines=[slotted]", "+params.service_rates=[[999,1.0]]"], "service_rates"),
    (["policies=[jsq]", "engines=[slotted]", "+params.service_rates=[[999,1.0],[1,-1.0]]"], "-1.0"),
    (["policies=[jsq]", "engines=[slotted]", "+params.count_own=3"], "count_own=3"),
    (["policies=[l_jsq]", "engines=[slotted]", "+params.msg_budget=-0.5"], "msg_budget=-0.5"),
    (["policies=[l_jba]", "engines=[slotted]", "+params.msg_budget_pod_d=2000"], "msg_budget_pod_d=2000"),
    (["policies=[l_jsq]", "engines=[slotted]", "+params.p_hat=0.5", "+params.msg_budget_pod_d=2"],
     "msg_budget_pod_d=2 and p_hat=0.5 are both given"),
]


@pytest.mark.parametrize("overrides,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_refused_with_key_and_value(overrides, needle):
    with pytest.raises(ConfigError) as err:
        plan_for(overrides)
    assert needle in str(err.value)


def test_valid_lists_are_shown():
    with pytest.raises(ConfigError, match="valid policies: random, jsq, pod"):
        plan_for(["policies=[nope]"])
    with pytest.raises(ConfigError, match="valid engines: agent, meanfield"):
        plan_for(["engines=[nope]"])


def test_engine_that_does_not_serve_a_policy(monkeypatch):
    from sim import registry as policies

    monkeypatch.setitem(policies.ENGINE_POLICIES, "meanfield", ("random", "pod"))
    with pytest.raises(ConfigError, match="'jsq' is not served by engine 'meanfield'"):
        plan_for(["policies=[jsq]"])


def test_unknown_key_in_sweep_file_is_refused(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "sweep" / "typo.yaml").write_text("# @package _global_\nname: typo\nreplicatons: 3\n")
    from hydra import compose as hc
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            hc("config", overrides=["+sweep=typo"])
    assert "replicatons" in str(err.value.__cause__ or err.value)


def test_refused_config_writes_nothing(tmp_path):
    cfg = to_plain(compose(["params.lam=1.2", f"output_dir={tmp_path / 'out'}"]))
    with pytest.raises(ConfigError):
        run_sweep(cfg)
    assert not (tmp_path / "out").exists()


def test_cli_bad_input_exit_code_and_only_a_log(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "params.d=0", f"hydra.run.dir={run_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    out = proc.stdout + proc.stderr
    assert "d=0" in out and "configuration error" in out
    assert [p.name for p in run_dir.iterdir()] == ["__main__.log"]


def test_cli_unknown_sweep_key(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "+sweep=smoke", "+replicatons=2", f"hydra.run.dir={tmp_path / 'r'}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "replicatons" in proc.stdout + proc.stderr
    run_dir = tmp_path / "r"
    assert not run_dir.exists() or [p.name for p in run_dir.iterdir()] == ["__main__.log"]


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
