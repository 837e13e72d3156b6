"""The tree's own hygiene: every import is installed by the declared dependencies, and no test,
tool or config names a network address outside loopback.

The import check reads the declared requirements, not what happens to be installed: a module
counts as provided only if a distribution in the transitive requirement closure of
``lbsweep[test]`` ships it, so a package installed by hand on the machine cannot make it pass.
"""
from __future__ import annotations

import ast
import ipaddress
import math
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO

DIST = "lbsweep"
EXTRAS = ("test",)
#: the project's packages, and the example model packages of docs/examples (out-of-tree models
#: that import themselves)
FIRST_PARTY = {"sim", "pipeline", "analysis", "tests", "benchmarks"} | {
    init.parent.name for init in (REPO / "docs" / "examples").glob("*/__init__.py")}
#: the folders whose Python files are read (the packages, their tests, the benchmarks, the docs' figure scripts)
PY_ROOTS = ("sim", "pipeline", "analysis", "tests", "benchmarks", "docs")
#: where an address could hide: code, configs and the CI script
SCANNED = (*PY_ROOTS, "conf", ".ci")
SCANNED_SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".ini", ""}


def _python_files() -> list[Path]:
    return sorted(f for root in PY_ROOTS for f in (REPO / root).rglob("*.py") if "__pycache__" not in f.parts)


def imported_modules(path: Path) -> set[str]:
    """Top-level names of the absolute imports in ``path``, those inside functions included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def requirement_closure(dist: str, extras: tuple[str, ...]) -> set[str]:
    """Canonical names of ``dist`` and of every distribution it requires, with ``extras``,
    transitively (markers evaluated for this interpreter; an extra is followed where a
    requirement asks for it)."""
    seen: set[tuple[str, str]] = set()
    closure: set[str] = set()
    stack = [(canonicalize_name(dist), extra) for extra in ("", *extras)]
    env = default_environment()
    while stack:
        name, extra = stack.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        closure.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{name} is required (through {dist}[{','.join(extras)}]) but not "
                                 "installed: run pip install -e \".[test]\"") from None
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
                continue
            child = canonicalize_name(req.name)
            stack.extend((child, e) for e in ("", *sorted(req.extras)))
    return closure


def undeclared_imports(files, closure: set[str], providers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Module -> files importing it, for each imported module that is neither standard library,
    nor first-party, nor shipped by a distribution in ``closure`` (``providers``: module ->
    distributions, as :func:`importlib.metadata.packages_distributions` gives)."""
    missing: dict[str, list[str]] = {}
    for path in files:
        for mod in imported_modules(path):
            if mod in sys.stdlib_module_names or mod in FIRST_PARTY or mod == "__future__":
                continue
            if not {canonicalize_name(d) for d in providers.get(mod, ())} & closure:
                missing.setdefault(mod, []).append(str(path))
    return missing


def test_every_import_is_provided_by_a_declared_dependency():
    providers = metadata.packages_distributions()
    missing = undeclared_imports(_python_files(), requirement_closure(DIST, EXTRAS), providers)
    assert not missing, "imported but not installed by lbsweep[test]'s requirements: " + "; ".join(
        f"{mod} ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}; provided by "
        f"{', '.join(providers.get(mod, ())) or 'nothing installed'})" for mod, files in sorted(missing.items()))


def test_the_import_check_refuses_what_only_the_machine_has(tmp_path):
    """An import inside a function is read; a module that is installed (by hand) but shipped by
    no distribution of the closure is reported; a transitive requirement counts."""
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom a.b import c\nfrom . import d\n\ndef g():\n    import numpy.linalg\n    import yaml\n")
    assert imported_modules(f) == {"os", "a", "numpy", "yaml"}
    closure = requirement_closure(DIST, EXTRAS)
    assert {"numpy", "pytest", "mpmath", "pyyaml"} <= closure  # pyyaml arrives transitively
    assert "lbsweep" in closure and "pytest" not in requirement_closure(DIST, ())
    providers = {"numpy": ["numpy"], "yaml": ["PyYAML"], "a": ["handmade-dist"]}  # 'a' installed by hand
    assert undeclared_imports([f], closure, providers) == {"a": [str(f)]}


#: an IPv4 literal: four dotted numbers not part of a longer dotted run (versions such as 1.2.3.4.5)
_IPV4 = re.compile(r"(?<![\d.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\d.])")
#: an IPv6 literal in brackets (as in a URL); a bare ``::`` is Python slicing
_IPV6 = re.compile(r"\[([0-9A-Fa-f:]*:[0-9A-Fa-f:.]*)\]")


def addresses_outside_loopback(text: str) -> list[str]:
    found = []
    for m in _IPV4.finditer(text):
        if all(int(g) <= 255 for g in m.groups()) and not ipaddress.ip_address(m.group(0)).is_loopback:
            found.append(m.group(0))
    for m in _IPV6.finditer(text):
        try:
            addr = ipaddress.ip_address(m.group(1))
        except ValueError:
            continue
        if not addr.is_loopback:
            found.append(m.group(1))
    return found


def _scanned_files() -> list[Path]:
    return sorted(f for root in SCANNED for f in (REPO / root).rglob("*")
                  if f.is_file() and f.suffix in SCANNED_SUFFIXES and "__pycache__" not in f.parts)


def test_no_address_outside_loopback():
    """Tests and tools send packets to 127.0.0.0/8 and ::1 only: no other address is named."""
    hits = {str(f.relative_to(REPO)): addrs for f in _scanned_files()
            if (addrs := addresses_outside_loopback(f.read_text(errors="replace")))}
    assert not hits, f"addresses outside loopback: {hits}"


#: the scan's own examples, assembled so that this file names no such address itself
_TEST_NET, _PRIVATE, _DOC6 = ".".join(["192", "0", "2", "1"]), ".".join(["10", "255", "255", "1"]), ":".join(["2001", "db8", "", "1"])


@pytest.mark.parametrize("text, found", [
    (f"check_reachable('{_TEST_NET}:6379')", [_TEST_NET]),
    (f"ray://{_PRIVATE}:10001", [_PRIVATE]),
    (f"http://[{_DOC6}]:80", [_DOC6]),
    ("127.0.0.2:6379 and [::1]:80", []),
    ("version 1.2.3.4.5 and x[::-1]", []),
])
def test_the_address_scan(text, found):
    assert addresses_outside_loopback(text) == found


#: the folders whose code must take what a policy is from its declared record (sim/<model>/
#: policies.py), not from its name: comparisons against policy-name literals there stay few
POLICY_SCANNED = ("sim", "pipeline", "analysis")
#: at most this many comparisons against a policy-name literal in those folders (117 before the
#: policies became records; what is left names a model's one policy, e.g. centralization's)
MAX_POLICY_NAME_COMPARISONS = 10


def _policy_names() -> set[str]:
    from sim.registry import POLICIES

    return set(POLICIES)


def policy_name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, code)`` of each comparison against a policy-name literal in ``source``: ``==``,
    ``!=``, ``in`` and ``not in`` with a literal (or a tuple, list or set of literals) on either
    side, a subscript keyed by a literal, a ``.get``/``.pop`` of one, and a lookup in a dict
    literal keyed by them (``{"jsq": ...}[policy]``)."""
    def literals(node) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(literals(e) for e in node.elts)
        return False

    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hit = (any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
                   and any(literals(x) for x in (node.left, *node.comparators)))
        elif isinstance(node, ast.Subscript):
            hit = literals(node.slice) or (isinstance(node.value, ast.Dict) and any(
                k is not None and literals(k) for k in node.value.keys))
        elif isinstance(node, ast.Call):
            hit = (isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
                   and bool(node.args) and literals(node.args[0]))
        else:
            hit = False
        if hit:
            hits.append((node.lineno, ast.unparse(node)))
    return hits


def test_policies_are_read_from_their_records_not_compared_by_name():
    """sim/, pipeline/ and analysis/ ask a policy's record what it does (samples, k-task,
    engines, ...) instead of comparing its name: at most MAX_POLICY_NAME_COMPARISONS such
    comparisons in all (the ast count, printed)."""
    names = _policy_names()
    hits = [f"{f.relative_to(REPO)}:{line}: {code}"
            for root in POLICY_SCANNED for f in sorted((REPO / root).rglob("*.py"))
            if "__pycache__" not in f.parts
            for line, code in policy_name_comparisons(f.read_text(), names)]
    print(f"{len(hits)} comparisons against policy-name literals in {', '.join(POLICY_SCANNED)}")
    assert len(hits) <= MAX_POLICY_NAME_COMPARISONS, "\n".join(hits)


def test_the_policy_comparison_count():
    src = ("if policy == 'jsq' or p in ('pod', 'x'):\n    pass\n"
           "a = {'random': 0, 'jsq': 1}[policy]\nb = t['pod']\nc = t.get('jsq')\n"
           "d = policy == other\ne = 'jsq'\nf(policy='pod')\ng = 'jsqx' in s\n")
    assert sorted(line for line, _ in policy_name_comparisons(src, {"jsq", "pod", "random"})) == [1, 1, 3, 4, 5]


def _model_packages() -> list[str]:
    return sorted(p.name for p in (REPO / "sim").iterdir()
                  if (p / "__init__.py").exists() and p.name != "core")


def imported_sim_models(path: Path, models: list[str]) -> set[str]:
    """The model packages ``sim.<model>`` that ``path`` imports (absolute imports, those inside
    functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else [])
        for mod in mods:
            parts = mod.split(".")
            if len(parts) >= 2 and parts[0] == "sim" and parts[1] in models:
                found.add(parts[1])
    return found


def test_no_model_imports_another():
    """A model's package imports sim.core and itself (and the shared sim.engines), never
    another model's package; what two models share lives in sim/core."""
    models = _model_packages()
    assert {"dispatch", "jiq", "led", "centralization"} <= set(models)
    bad = {str(f.relative_to(REPO)): sorted(others)
           for model in models for f in sorted((REPO / "sim" / model).rglob("*.py"))
           if (others := imported_sim_models(f, models) - {model})}
    assert not bad, f"model packages importing another model: {bad}"


def test_the_model_import_scan(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import sim.core.rng\nfrom sim.dispatch.population import x\n"
                 "def g():\n    import sim.jiq\n    from . import y\n")
    assert imported_sim_models(f, ["dispatch", "jiq", "led"]) == {"dispatch", "jiq"}


def string_literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every string literal of ``source`` equal to one of ``names``; docstrings
    (the first statement of a module, class or function) are prose and left out, as comments
    are (the parser drops them)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in names and id(node) not in docstrings)


def test_pipeline_names_no_engine_and_no_model():
    """pipeline/ orchestrates whatever the models declare: no string literal in it is the name
    of a registered engine or model (defaults are conf/config.yaml's, the path past the float
    range is a model's PrecisePath, auto's engines are sim.engines.AUTO_CHOICE)."""
    from sim.registry import DECLARED_ENGINES, MODELS

    names = set(DECLARED_ENGINES) | set(MODELS)
    assert {"agent", "meanfield", "heavy_traffic", "dispatch", "led"} <= names
    hits = [f"{f.relative_to(REPO)}:{line}: {text!r}"
            for f in sorted((REPO / "pipeline").rglob("*.py")) if "__pycache__" not in f.parts
            for line, text in string_literals(f.read_text(), names)]
    assert not hits, "engine or model names in pipeline/:\n" + "\n".join(hits)


def test_the_string_literal_scan():
    src = ('"""agent: a docstring"""\nx = "agent"  # meanfield\ny = f"{x} meanfield"\n'
           'def f():\n    """meanfield"""\n    return {"dispatch": 1}.get("agents")\n')
    assert string_literals(src, {"agent", "meanfield", "dispatch"}) == [(2, "agent"), (6, "dispatch")]


#: make_plan reads as a short story of named steps, each a function of its own
MAKE_PLAN_MAX_LINES = 80


def test_make_plan_is_short():
    tree = ast.parse((REPO / "pipeline" / "plan.py").read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make_plan"]
    assert len(found) == 1
    lines = found[0].end_lineno - found[0].lineno + 1
    print(f"make_plan: {lines} lines")
    assert lines < MAKE_PLAN_MAX_LINES, f"make_plan has {lines} lines"


#: how the one integer bound (sim.core.declare.INT_LIMIT) could be written out
_INT_LIMIT_LITERAL = re.compile(r"\b2\s*\*\*\s*62\b")


def int_limit_literals(text: str) -> list[int]:
    """The lines of ``text`` that write ``2**62`` (with or without spaces), code or prose."""
    return [n for n, line in enumerate(text.splitlines(), 1) if _INT_LIMIT_LITERAL.search(line)]


def test_the_integer_bound_is_written_once():
    """``2**62`` is written out once in sim/, pipeline/ and analysis/: where
    sim.core.declare.INT_LIMIT is defined; everything else names the constant."""
    hits = [f"{f.relative_to(REPO)}:{n}" for root in ("sim", "pipeline", "analysis")
            for f in sorted((REPO / root).rglob("*.py")) if "__pycache__" not in f.parts
            for n in int_limit_literals(f.read_text())]
    assert len(hits) == 1 and hits[0].startswith("sim/core/declare.py:"), hits


def test_the_integer_bound_scan():
    assert int_limit_literals("a = 2**62\nb = 2 ** 62 - 1\nc = 2**621\nd = 12**62\n# < 2**62.\n") == [1, 2, 5]


def _outside(par):
    """Values just outside a parameter's declared domain, one per finite end (a list of one
    entry for a ``floats`` parameter)."""
    (low, high), (lo_in, hi_in) = par.domain, par.inclusive
    step = 1 if par.kind == "int" else 0.5
    out = []
    if low != -math.inf:
        out.append(low - step if lo_in else low)
    if high != math.inf:
        out.append(high + step if hi_in else high)
    return [[v] if par.kind == "floats" else v for v in out]


def _bounded_cases():
    import sim.registry as registry
    cases = []
    for ent in registry.ENTRIES:
        if not ent.example:
            continue
        for name in ent.params:
            par = registry.param_of(name, ent.model)
            for value in _outside(par):
                cases.append(pytest.param(ent, name, value, id=f"{ent.model}-{ent.engine}-{ent.policy}-{name}={value}"))
    return cases


@pytest.mark.parametrize("ent, name, value", _bounded_cases())
def test_refusals_come_from_the_declarations(ent, name, value):
    """For every entry and every parameter it takes with a bounded declared domain, a value
    just past each end is refused by sim.check_task with the declaration's own one-line
    message (sim.core.declare.Param.refusal), the model's value checks never reached first."""
    import sim
    import sim.registry as registry

    task = {**ent.example, "model": ent.model, "engine": ent.engine, "policy": ent.policy,
            **({"seed": 1} if ent.stochastic else {}), name: value}
    expected = registry.param_of(name, ent.model).refusal(name, value)
    assert expected is not None and f"{name}" in expected
    with pytest.raises(ValueError) as err:
        sim.check_task(task)
    assert str(err.value) == expected


def test_a_refusal_follows_its_declaration(monkeypatch):
    """Narrowing a declared domain narrows what is refused, in the words generated from it:
    the check is the declaration's, not a copy of its bounds."""
    import sim
    import sim.registry as registry
    from sim.core.declare import Param

    model = registry.MODELS["centralization"]
    task = {**model.entries[0].example, "model": "centralization", "engine": model.entries[0].engine,
            "policy": "central", "seed": 1, "p": 0.4}
    sim.check_task(task)
    monkeypatch.setitem(model.params, "p", Param("float", "narrowed for the test", domain=(0.0, 0.25)))
    with pytest.raises(ValueError, match=r"^p=0\.4 must be a number in \[0, 0\.25\]$"):
        sim.check_task(task)


def test_simulators_refuse_in_the_declarations_words():
    """A direct call of a simulator or a limit refuses a value outside its parameter's domain
    with the message the plan's check gives (the same declaration)."""
    from sim.centralization import MODEL as CENTRAL
    from sim.centralization.meanfield import fixed_point as central_fixed_point
    from sim.dispatch import MODEL as DISPATCH
    from sim.dispatch.meanfield.batch_filling import fixed_point as batch_fixed_point
    from sim.dispatch.occupancy import simulate as occupancy
    from sim.jiq import MODEL as JIQ
    from sim.jiq.occupancy import simulate as jiq_occupancy
    from sim.led.model import PARAMS as LED
    from sim.led.model import model_spec

    cases = [
        (lambda: occupancy(0, 0.5, "pod", d=2), DISPATCH.param("n_servers").refusal("n_servers", 0)),
        (lambda: occupancy(10, 0.5, "batch_filling", k=0, d=2), DISPATCH.param("k").refusal("k", 0)),
        (lambda: occupancy(10, 0.5, "pod", d=2, b=0), DISPATCH.param("b").refusal("b", 0)),
        (lambda: batch_fixed_point(0.5, 2, 0), DISPATCH.param("d").refusal("d", 0)),
        (lambda: jiq_occupancy(10, 1.0, "jiq", r=2.0), JIQ.param("lam").refusal("lam", 1.0)),
        (lambda: central_fixed_point(0.5, 1.5), CENTRAL.param("p").refusal("p", 1.5)),
        (lambda: model_spec(10, 0.5, "l_jsq", p_hat=2.0), LED["p_hat"].refusal("p_hat", 2.0)),
    ]
    for call, message in cases:
        assert message is not None
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message


def _same_result(a, b) -> bool:
    """Two simulator results equal field by field (arrays and NaNs included)."""
    import numpy as np

    if type(a) is not type(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True):
                return False
        elif isinstance(x, float) and isinstance(y, float) and math.isnan(x):
            if not math.isnan(y):
                return False
        elif x != y:
            return False
    return True


def _integer_valued_float_cases():
    from sim.centralization import agent as central_agent
    from sim.centralization import occupancy as central_occupancy
    from sim.centralization import trajectory as central_trajectory
    from sim.dispatch import agent, agent_jobs, general, occupancy, trajectory
    from sim.jiq import agent as jiq_agent
    from sim.jiq import occupancy as jiq_occupancy
    from sim.jiq import trajectory as jiq_trajectory

    run = {"events": 20_000, "seed": 3}
    return [
        ("dispatch agent", lambda n, d, k: agent.simulate(n, 0.7, "pod", d=d, **run)),
        ("dispatch agent_jobs", lambda n, d, k: agent_jobs.simulate(n, 0.7, "batch_filling", k=k, d=d, **run)),
        ("dispatch occupancy", lambda n, d, k: occupancy.simulate(n, 0.7, "batch_sampling", k=k, d=d, **run)),
        ("dispatch trajectory", lambda n, d, k: trajectory.simulate(n, 0.7, d, 2.0, grid=5, seed=3,
                                                                   policy="batch_filling", k=k)),
        ("dispatch general", lambda n, d, k: general.simulate(n, 0.7, "pod", d=d, jobs=20_000, seed=3)),
        ("jiq agent", lambda n, d, k: jiq_agent.simulate(n, 0.7, "jiq_pod", 5.0, d=d, **run)),
        ("jiq occupancy", lambda n, d, k: jiq_occupancy.simulate(n, 0.7, "jiq_pod", 5.0, d=d, **run)),
        ("jiq trajectory", lambda n, d, k: jiq_trajectory.simulate(n, 0.7, "jiq_pod", 5.0, d=d, time=2.0,
                                                                  grid=5, seed=3)),
        ("centralization agent", lambda n, d, k: central_agent.simulate(n, 0.7, 0.2, **run)),
        ("centralization occupancy", lambda n, d, k: central_occupancy.simulate(n, 0.7, 0.2, **run)),
        ("centralization trajectory", lambda n, d, k: central_trajectory.simulate(n, 0.7, 0.2, 2.0, grid=5,
                                                                                 seed=3)),
    ]


def test_simulators_take_integer_valued_floats_as_the_plan_does():
    """A simulator called directly with integer-valued floats for its integer parameters (what a
    sweep's formulas give, and what sim.check_task accepts) runs exactly as with the integers:
    the declaration's check returns the value as an int, and the simulator runs on that."""
    for name, call in _integer_valued_float_cases():
        as_int, as_float = call(100, 2, 2), call(100.0, 2.0, 2.0)
        assert _same_result(as_int, as_float), name
