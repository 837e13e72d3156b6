"""``engines: [auto]``: the plan runs the occupancy engine from ``run.auto_occupancy_n`` on and
the agent engine below, by a fixed rule of N and the policy (never a timing), so the tasks and
their seeds are those of a sweep that names the engine."""
from __future__ import annotations

from pipeline.plan import make_plan
from pipeline.run import to_plain
from tests.helpers import compose


def _plan(*overrides):
    return make_plan(to_plain(compose(["+sweep=smoke", "output_dir=/tmp/unused", *overrides])))


def _strip(task):
    return {k: v for k, v in task.items() if k != "_meta"} | {"id": task["_meta"]["task_id"]}


def test_auto_picks_by_n_and_keeps_the_named_engines_tasks():
    axes = "axes.n_servers=[1000,100000,1000000]"
    auto = _plan("engines=[auto,meanfield]", axes)
    by_n = {(t["n_servers"], t["engine"]) for t in auto.tasks}
    assert by_n == {(1000, "agent"), (100000, "occupancy"), (1000000, "occupancy"),
                    (1000, "meanfield"), (100000, "meanfield"), (1000000, "meanfield")}
    named = {"agent": _plan("engines=[agent,meanfield]", axes),
             "occupancy": _plan("engines=[occupancy,meanfield]", axes)}
    for t in auto.tasks:
        if t["engine"] in named:  # same task, same seed as in the sweep that names it
            assert _strip(t) in [_strip(u) for u in named[t["engine"]].tasks]


def test_the_threshold_is_a_setting():
    plan = _plan("engines=[auto]", "axes.n_servers=[1000,100000]", "run.auto_occupancy_n=1000")
    assert {t["engine"] for t in plan.tasks} == {"occupancy"}
    plan = _plan("engines=[auto]", "axes.n_servers=[1000,100000]", "run.auto_occupancy_n=10000000")
    assert {t["engine"] for t in plan.tasks} == {"agent"}


def test_auto_keeps_the_agent_where_occupancy_lacks_a_parameter():
    # heterogeneous service rates: the agent engine takes them, the occupancy engine does not
    plan = _plan("engines=[auto]", "~axes.n_servers", "params.n_servers=200000",
                 "+params.service_rates=[[100000,1.0],[100000,2.0]]")
    assert {t["engine"] for t in plan.tasks} == {"agent"}


def test_auto_with_only_one_candidate_takes_it():
    # jiq_threshold has an agent engine only
    plan = make_plan(to_plain(compose(["output_dir=/tmp/unused", "policies=[jiq_threshold]",
                                       "engines=[auto]", "+params.r=10", "+params.z=1",
                                       "params.n_servers=100000", "~params.d"])))
    assert {t["engine"] for t in plan.tasks} == {"agent"}
