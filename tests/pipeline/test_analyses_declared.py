"""``extra_analyses`` is checked from one list (analysis/catalog.py) and the declarations of
models kept outside the project, without importing the analyses: planning a sweep loads neither
Polars' analyses nor matplotlib, and the names are exactly the analyses a run can make,
function for function."""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import analysis.models
from analysis.catalog import ANALYSES as CATALOG
from pipeline.analyses import declared_analyses
from pipeline.errors import ConfigError
from pipeline.plan import make_plan
from pipeline.run import to_plain
from tests.helpers import compose

ROOT = Path(__file__).resolve().parents[2]

PLAN_IN_A_FRESH_PROCESS = """
import json, sys
from omegaconf import OmegaConf
from tests.helpers import compose
from pipeline.plan import make_plan
cfg = OmegaConf.to_container(compose(sys.argv[1:] + ["output_dir=/nonexistent"]), resolve=True)
plan = make_plan(cfg)
assert plan.tasks and cfg["extra_analyses"], cfg["extra_analyses"]
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] == "matplotlib"
                        or (m.startswith("analysis") and m not in ("analysis", "analysis.catalog")))))
"""


@pytest.mark.parametrize("sweep", ["sub_halfin_whitt", "led_heavy_traffic", "transients"])
def test_planning_imports_no_analysis_nor_matplotlib(sweep):
    out = subprocess.run([sys.executable, "-c", PLAN_IN_A_FRESH_PROCESS, f"+sweep={sweep}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_declared_names_are_the_analyses_a_run_can_make():
    from analysis import model_analyses

    declared, made = declared_analyses(), model_analyses()
    assert list(declared) == list(made)
    for name, ref in declared.items():
        module, _, func = ref.partition(":")
        assert getattr(importlib.import_module(module), func) is made[name], name


def test_the_catalog_lists_every_analysis_function_once_and_models_name_none():
    """Every public ``analyze_*`` function of analysis/ is listed in the catalog, under one
    name; the in-tree models declare no analyses of their own (the catalog is the one list)."""
    found = set()
    for mod in ("analysis.response_times", "analysis.transients",
                *(f"analysis.models.{m.name}" for m in pkgutil.iter_modules(analysis.models.__path__))):
        module = importlib.import_module(mod)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("analyze_") and fn.__module__.startswith(mod):
                found.add(f"{mod}:{name}")
    assert sorted(CATALOG.values()) == sorted(found)
    from sim.registry import MODELS

    assert {m: d.analyses for m, d in MODELS.items() if d.analyses} == {}


def test_an_unknown_analysis_is_refused_with_the_declared_names():
    cfg = to_plain(compose(["+sweep=smoke", "extra_analyses=[nope]", "output_dir=/nonexistent"]))
    with pytest.raises(ConfigError, match="'nope' is unknown; valid: response_times, transients, centralization"):
        make_plan(cfg)
