"""A model parameter that no (engine, policy) of a sweep takes is refused before anything starts
(the bad-input corpus has a line for each form: params, axes, variants, another model's key);
conf/config.yaml's own defaults pass, and archived runs get a warning instead."""
from __future__ import annotations

import logging

import pytest

from pipeline.errors import ConfigError
from pipeline.plan import make_plan
from pipeline.run import to_plain
from tests.helpers import compose


def _plan(*overrides, **kw):
    return make_plan(to_plain(compose(["output_dir=/tmp/unused", *overrides])), **kw)


def test_the_defaults_d_passes_where_no_policy_takes_it():
    plan = _plan("policies=[central]", "engines=[agent]", "+params.p=0.1")  # d: 2 by default
    assert plan.tasks and all("d" not in t for t in plan.tasks)


def test_a_parameter_some_policies_take_passes():
    plan = _plan("+sweep=smoke", "policies=[pod,random]", "engines=[agent]")
    assert {t["policy"] for t in plan.tasks if "d" in t} == {"pod"}


def test_a_formula_that_uses_the_parameter_counts_as_a_use():
    # k is not taken by pod, but d is computed from it
    plan = _plan("+sweep=smoke", "~axes.d", "+params.k=2", "params.d=k")
    assert {t["d"] for t in plan.tasks} == {2}


def test_a_name_only_the_replications_formula_uses_counts_as_a_use():
    plan = _plan("+sweep=smoke", "+params.reps=3", "replications=reps")
    assert {t["_meta"]["replication"] for t in plan.tasks if t["engine"] == "agent"} == {0, 1, 2}
    with pytest.raises(ConfigError, match="params.reps2 is not a model parameter"):
        _plan("+sweep=smoke", "+params.reps2=3", "replications=2")


def test_unused_is_refused_then_only_warned_for_archived_runs(caplog):
    with pytest.raises(ConfigError, match=r"^params.k=3: no task of this sweep uses it \(policies="
                                          r"\['pod'\], engines=\['agent', 'meanfield'\]\); k is taken by "):
        _plan("+sweep=smoke", "+params.k=3")
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        plan = _plan("+sweep=smoke", "+params.k=3", unused="warn")
    assert all("k" not in t for t in plan.tasks)
    (rec,) = [r for r in caplog.records if "params.k=3" in r.getMessage()]
    assert "its tasks run without them" in rec.getMessage()
