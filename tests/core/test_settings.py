"""Run settings (sim.core.settings.RunSettings): defaults, checks, reading task dicts."""
from __future__ import annotations

import json

import pytest

import sim
from sim.core.settings import DEFAULTS, INIT_CHOICES, N_BATCHES_MAX, SETTING_KEYS, RunSettings, check_run_args, task_int
from sim.core.trajectory import TRAJECTORY_DEFAULTS


def test_defaults():
    s = RunSettings()
    assert (s.seed, s.init, s.n_batches, s.max_level, s.h) == (0, "meanfield", 20, 64, 1)
    assert (s.precision, s.precision_cap, s.precision_estimate) == (None, 16, None)
    assert (s.responses, s.grid) == (False, 200)
    assert DEFAULTS == s
    assert s.se_method == "obm"
    assert SETTING_KEYS == ("seed", "init", "n_batches", "max_level", "h", "precision",
                            "precision_cap", "precision_estimate", "se_method", "responses", "grid")


def test_run_config_takes_its_defaults_from_the_settings():
    from pipeline.config import RunConfig

    run = RunConfig()
    assert (run.init, run.n_batches, run.max_level, run.position_threshold) == (
        DEFAULTS.init, DEFAULTS.n_batches, DEFAULTS.max_level, DEFAULTS.h)
    assert (run.precision, run.precision_cap, run.precision_estimate, run.responses, run.grid) == (
        DEFAULTS.precision, DEFAULTS.precision_cap, DEFAULTS.precision_estimate,
        DEFAULTS.responses, DEFAULTS.grid)


@pytest.mark.parametrize("key, value, text", [
    ("seed", -1, "seed=-1 must be a non-negative integer"),
    ("seed", 1.5, "seed=1.5 must be a non-negative integer"),
    ("init", "warm", "init='warm' is unknown; valid: meanfield, empty"),
    ("n_batches", 1, f"n_batches=1 must be an integer in [2, {N_BATCHES_MAX}]"),
    ("n_batches", N_BATCHES_MAX + 1, f"n_batches={N_BATCHES_MAX + 1} must be an integer in [2, {N_BATCHES_MAX}]"),
    ("max_level", 0, "max_level=0 must be an integer >= 1"),
    ("max_level", True, "max_level=True must be an integer >= 1"),
    ("h", 0, "h=0 must be an integer >= 1"),
    ("responses", 1, "responses=1 must be true or false"),
    ("grid", 1, "grid=1 must be an integer >= 2"),
    ("precision", 1.0, "precision=1.0 must be a number in (0, 1)"),
    ("precision", float("nan"), "precision=nan must be a number in (0, 1)"),
    ("precision_cap", 0.5, "precision_cap=0.5 must be a number in [1, 1e6]"),
    ("precision_estimate", 3, "precision_estimate=3 must be null or the name of an estimate"),
])
def test_checks_name_key_and_value(key, value, text):
    with pytest.raises(ValueError) as exc:
        RunSettings(**{key: value})
    assert str(exc.value).startswith(text)
    with pytest.raises(ValueError) as exc:  # the same check from a task dict
        RunSettings.from_task({key: value})
    assert str(exc.value).startswith(text)


def test_integral_floats_become_ints():
    s = RunSettings.from_task({"seed": 7.0, "n_batches": 30.0, "max_level": 8.0, "h": 2.0,
                               "grid": 50.0})
    assert (s.seed, s.n_batches, s.max_level, s.h, s.grid) == (7, 30, 8, 2, 50)
    assert all(type(v) is int for v in (s.seed, s.n_batches, s.max_level, s.h, s.grid))
    assert task_int({"k": 3.0}, "k") == 3 and task_int({"k": 2.5}, "k") == 2.5
    assert task_int({}, "k", 1) == 1 and task_int({}, "b") is None


def test_old_style_task_dicts():
    """A task as the plan wrote it into an archive's tasks.json (issue 37 left the format as it
    was): only some settings, JSON's types, model parameters and _meta beside them."""
    stochastic = json.loads('{"model": "dispatch", "engine": "agent", "policy": "pod", "n_servers": 100, '
                            '"lam": 0.9, "d": 2, "events": 200000, "seed": 123456789, "init": "meanfield", '
                            '"n_batches": 20, "max_level": 64, "h": 1, "_meta": {"task_id": "p00000-agent-r000"}}')
    s = RunSettings.from_task(stochastic)
    assert (s.seed, s.init, s.n_batches, s.max_level, s.h) == (123456789, "meanfield", 20, 64, 1)
    assert (s.precision, s.responses, s.grid) == (None, False, 200)
    limit = {"engine": "meanfield", "policy": "pod", "n_servers": 100, "lam": 0.9, "d": 2}
    assert RunSettings.from_task(limit) == DEFAULTS  # nothing given: every default
    with_nulls = {"seed": 5, "precision": None, "precision_estimate": None, "init": None}
    assert RunSettings.from_task(with_nulls) == RunSettings(seed=5)


def test_engine_defaults_and_required_keys():
    s = RunSettings.from_task({"seed": 1}, **TRAJECTORY_DEFAULTS)
    assert s.init == "empty"
    assert RunSettings.from_task({"seed": 1, "init": "meanfield"}, **TRAJECTORY_DEFAULTS).init == "meanfield"
    with pytest.raises(ValueError, match=r"^seed=None must be a non-negative integer"):
        RunSettings.from_task({}, required=("seed",))
    with pytest.raises(TypeError, match="n_servers are not run settings"):
        RunSettings.from_task({}, n_servers=3)


def test_registry_checks_through_the_settings():
    task = {"engine": "agent", "policy": "pod", "n_servers": 100, "lam": 0.9, "d": 2,
            "events": 10_000, "seed": 1}
    sim.check_task(dict(task))
    for key, value, text in [("n_batches", 1, "n_batches=1"), ("init", "warm", "init='warm'"),
                             ("h", 0, "h=0"), ("max_level", 0, "max_level=0"),
                             ("precision_cap", 0, "precision_cap=0")]:
        with pytest.raises(ValueError, match=text.replace("(", r"\(")):
            sim.check_task({**task, key: value})
    with pytest.raises(ValueError, match="seed=None"):
        sim.check_task({k: v for k, v in task.items() if k != "seed"})
    with pytest.raises(ValueError, match="max_level=0"):  # a limit's settings are checked too
        sim.check_task({"engine": "meanfield", "policy": "pod", "n_servers": 100, "lam": 0.9,
                        "d": 2, "max_level": 0})


def test_plan_refuses_run_settings_by_their_config_names():
    from pipeline.errors import ConfigError
    from pipeline.plan import run_settings

    assert run_settings({"position_threshold": 3}).h == 3
    assert run_settings({}) == DEFAULTS
    with pytest.raises(ConfigError, match=r"^run\.position_threshold=0 must be an integer >= 1"):
        run_settings({"position_threshold": 0})
    with pytest.raises(ConfigError, match=r"^run\.n_batches=1 must be"):
        run_settings({"n_batches": 1})


def test_check_run_args_is_strict_about_integers():
    args = dict(events=10_000, seed=1, init="empty", n_batches=20, max_level=8, n_windows=1000)
    check_run_args(**args)
    with pytest.raises(ValueError, match=r"^seed=1.0 must be a non-negative integer"):
        check_run_args(**{**args, "seed": 1.0})
    with pytest.raises(ValueError, match=r"^n_batches=501 must be an integer in \[2, 500\]"):
        check_run_args(**{**args, "n_batches": 501})
    with pytest.raises(ValueError, match=r"^init='x' is unknown; valid: "):
        check_run_args(**{**args, "init": "x"})
    assert INIT_CHOICES == ("meanfield", "empty")


def test_arguments_are_the_settings_a_function_takes():
    def simulate(n_servers, lam, events, seed=0, init="meanfield", n_batches=20, *, responses=False):
        return None

    s = RunSettings(seed=3, init="empty", n_batches=10, responses=True, h=2)
    assert s.arguments(simulate) == {"seed": 3, "init": "empty", "n_batches": 10, "responses": True}
    assert s.arguments(lambda task: None) == {}
