"""``extra_analyses`` is checked from declarations (pipeline.analyses), not by importing
analysis: planning a sweep imports neither analysis nor matplotlib, and the declared names are
exactly the analyses a run can make, function for function."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analyses import GENERAL_ANALYSES, declared_analyses
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
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"analysis", "matplotlib"})))
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


def test_general_analyses_are_declared_first_and_models_own_theirs():
    assert list(declared_analyses())[:len(GENERAL_ANALYSES)] == list(GENERAL_ANALYSES)
    from sim.registry import MODELS

    assert MODELS["dispatch"].analyses == {"zero_queueing": "analysis.models.zero_queueing:analyze_zero_queueing"}


def test_an_unknown_analysis_is_refused_with_the_declared_names():
    cfg = to_plain(compose(["+sweep=smoke", "extra_analyses=[nope]", "output_dir=/nonexistent"]))
    with pytest.raises(ConfigError, match="'nope' is unknown; valid: response_times, transients, centralization"):
        make_plan(cfg)
