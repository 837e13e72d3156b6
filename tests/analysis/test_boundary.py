"""The analysis boundary (docs/architecture.md): analysis/ reaches sim/ through one module,
analysis/declared.py, which reads the models' declarations and declared hooks; sim/ imports
neither analysis nor pipeline."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import math
from pathlib import Path

import pytest

from analysis import declared

ROOT = Path(__file__).resolve().parents[2]
DOOR = Path("analysis/declared.py")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports: import statements at any depth, and
    ``importlib.import_module`` / ``__import__`` calls with a literal name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            found.append((node.lineno, node.args[0].value))
    return found


def offenders(folder: str, roots: tuple[str, ...], allowed: tuple[Path, ...] = ()) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel in allowed:
            continue
        out += [f"{rel}:{line}: {name}" for line, name in imported_modules(path)
                if name.split(".")[0] in roots]
    return out


def test_only_declared_imports_sim():
    assert offenders("analysis", ("sim",), allowed=(DOOR,)) == []
    assert [name for _, name in imported_modules(ROOT / DOOR)].count("sim") == 1


def test_sim_imports_no_analysis_nor_pipeline():
    assert offenders("sim", ("analysis", "pipeline")) == []


def test_the_scan_sees_every_form_of_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import sim.registry\nfrom sim.core import declare\n"
                 "def g():\n    from sim import run\n    importlib.import_module('sim.jiq')\n"
                 "from . import sibling\nimport simple\n")
    assert sorted(n for _, n in imported_modules(f)) == ["sim", "sim.core", "sim.jiq", "sim.registry", "simple"]


def test_every_declared_theory_resolves_to_a_function():
    refs = [(m, n) for m, decl in declared.models().items() for n in decl.theory]
    assert ("dispatch", "leading_rate") in refs and ("centralization", "invariant_tail") in refs
    for m, n in refs:
        module, _, func = declared.models()[m].theory[n].partition(":")
        assert declared.theory(m, n) is getattr(importlib.import_module(module), func)
    assert declared.theory("dispatch", "leading_rate")(1e6) == pytest.approx(math.log(math.log(1e6)) / math.log(1e6))
    with pytest.raises(KeyError, match="declares no theory 'nope'; it declares: limit_ratio, leading_rate"):
        declared.theory("dispatch", "nope")


def test_limit_engines_are_the_declared_ones():
    from analysis.aggregate import LIMIT_ENGINES

    assert set(LIMIT_ENGINES) == {e.name for m in declared.models().values() for e in m.engine_decls
                                  if e.kind == "limit"} >= {"meanfield", "refined", "heavy_traffic"}
    assert "agent" not in LIMIT_ENGINES and "trajectory" not in LIMIT_ENGINES


def test_figures_take_engine_and_parameter_words_from_the_declarations():
    from analysis import style
    from sim import registry

    for m in declared.models().values():
        for e in m.engine_decls:
            assert style.engine_name(e.name) == e.label
    assert style.engine_name("no_such_engine") == "no_such_engine"
    assert style.engine_name("trajectory") == "trajectory simulation"
    for name, par in registry.PARAMS.items():
        if par.label:
            assert style.label(name) == par.label.replace("{unit}", "mean service times")
        assert style.symbol(name) == (par.symbol or style.SYMBOLS.get(name, name))
    assert style.label("lam") == "load \u03bb (arrival rate per server; service rate 1)"
    assert style.label("lam", ["slotted"]).startswith("load \u03c1")  # the slotted model's load
    assert style.symbol("m_dispatchers") == "M" and style.symbol("alpha") == "\u03b1"
    assert not set(style.LABELS) & {n for n, p in registry.PARAMS.items() if p.label}
    assert style.label("undeclared_column") == "undeclared column"


def test_a_parameter_two_models_name_differently_is_refused():
    from sim import registry
    from sim.core.declare import Param

    clash = Param("int", "queues probed", label="probes", symbol="d")
    with pytest.raises(ValueError, match="parameter 'd' has label 'probes' but another model declares"):
        registry._add(dataclasses.replace(registry.model("dispatch"), name="clash",
                                          params={**registry.model("dispatch").params, "d": clash}))
    assert "clash" not in registry.MODELS
