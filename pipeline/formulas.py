"""Formulas in sweep files, evaluated safely.

A parameter may be given as a string such as ``"1 - beta * N**(-alpha)"``. It is evaluated by
`simpleeval <https://github.com/danthedeckie/simpleeval>`_ (never ``eval``) with a small set of
math functions and the names defined by the sweep (axes, constants, other formulas, and ``N``
as an alias of ``n_servers``). Before evaluation the expression is parsed and refused if it
contains attribute access, subscripts, comprehensions, lambdas, or calls to anything outside
:data:`FUNCTIONS`, so every refusal names the offending part.
"""
from __future__ import annotations

import ast
import graphlib
import math

import simpleeval

from pipeline.errors import ConfigError


def _snap(x: float) -> float:
    """``x`` rounded to the nearest integer when it is within floating-point noise of it, so
    that ``ceil(1 / (1 - 0.9))`` is 10 (not 11, as 10.000000000000002 would give)."""
    r = round(x)
    return r if abs(x - r) <= 1e-9 * max(1.0, abs(x)) else x


def _ceil(x) -> int:
    return math.ceil(_snap(x))


def _floor(x) -> int:
    return math.floor(_snap(x))


def _power(a, b):
    """``a ** b`` without simpleeval's cap on the base (it refuses ``10**7 ** -0.3``): exact for
    small integer powers, floating point otherwise; an overflowing result is an error."""
    if isinstance(a, int) and isinstance(b, int) and b >= 0 and b * math.log2(abs(a) + 1) <= 1024:
        return a**b
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"{a!r} ** {b!r}: {exc}") from None


_OPERATORS = dict(simpleeval.DEFAULT_OPERATORS)
_OPERATORS[ast.Pow] = _power

#: the functions a formula may call (ceil and floor forgive floating-point noise: see _snap)
FUNCTIONS: dict[str, object] = {
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "ceil": _ceil,
    "floor": _floor,
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "int": int,
    "float": float,
}
#: named constants a formula may use
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call,
    ast.Name, ast.Load, ast.Constant,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
    ast.And, ast.Or, ast.Not, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)


def parse(key: str, expr: str) -> set[str]:
    """Check ``expr`` and return the variable names it uses (functions excluded)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{key}={expr!r}: not a valid formula ({exc.msg})") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            raise ConfigError(f"{key}={expr!r}: attribute access ('.{node.attr}') is not allowed")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ConfigError(
                    f"{key}={expr!r}: call to {what!r} is not allowed; "
                    f"allowed functions: {', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords:
                raise ConfigError(f"{key}={expr!r}: keyword arguments are not allowed")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise ConfigError(f"{key}={expr!r}: name {node.id!r} is not allowed")
        elif isinstance(node, ast.Constant):
            # strings for comparisons such as ``policy == 'batch_filling'`` (the replications
            # formula sees the point's policy and variant); a formula's value must be a number
            if not isinstance(node.value, (int, float, str)) or isinstance(node.value, bool):
                raise ConfigError(f"{key}={expr!r}: only numbers and strings are allowed as constants")
        elif not isinstance(node, _ALLOWED_NODES):
            raise ConfigError(
                f"{key}={expr!r}: {type(node).__name__} expressions are not allowed"
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            is_func = any(
                isinstance(c, ast.Call) and c.func is node for c in ast.walk(tree)
            )
            if not is_func:
                names.add(node.id)
    return names


def evaluation_order(
    formulas: dict[str, str], known: set[str], aliases: dict[str, str] | None = None
) -> tuple[list[str], dict[str, set[str]]]:
    """Order ``formulas`` so that each comes after the formulas it uses.

    ``known`` are the names available before any formula (axes, constants); ``aliases`` maps
    an alternative spelling (``N``) to the name it stands for (``n_servers``).
    Raises :class:`ConfigError` for unknown names and for cycles.
    """
    aliases = aliases or {}
    deps: dict[str, set[str]] = {}
    available = known | set(formulas) | set(CONSTANTS)
    for key, expr in formulas.items():
        used = {aliases.get(n, n) for n in parse(f"params.{key}", expr)}
        unknown = sorted(used - available)
        if unknown:
            raise ConfigError(
                f"params.{key}={expr!r}: unknown variable {unknown[0]!r}; "
                f"defined: {', '.join(sorted(available - set(CONSTANTS)))}"
            )
        deps[key] = used & set(formulas)
    try:
        order = list(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        raise ConfigError(f"params.{cycle[0]}={formulas[cycle[0]]!r}: formulas refer to each other "
                          f"in a cycle: {' -> '.join(cycle)}") from None
    return order, deps


def evaluate(key: str, expr: str, names: dict[str, float]):
    """Evaluate one checked formula with the given variable values; ``key`` is the setting's
    full name as the messages show it (``params.lam``, ``replications``), as for :func:`parse`."""
    evaluator = simpleeval.SimpleEval(operators=_OPERATORS, functions=FUNCTIONS, names={**CONSTANTS, **names})
    try:
        value = evaluator.eval(expr)
    except (simpleeval.InvalidExpression, ArithmeticError, ValueError, TypeError, OverflowError) as exc:
        shown = {k: v for k, v in names.items() if k != "N"}
        raise ConfigError(f"{key}={expr!r}: cannot evaluate at {shown}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={expr!r}: gives {value!r}, not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={expr!r}: gives {value!r} at {names}")
    return value
