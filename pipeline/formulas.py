"""Formulas in sweep files, evaluated safely.

A parameter may be given as a string such as ``"1 - beta * N**(-alpha)"``. It is evaluated by
`simpleeval <https://github.com/danthedeckie/simpleeval>`_ (never ``eval``) with a small set of
math functions and the names defined by the sweep (axes, constants, other formulas, and ``N``
as an alias of ``n_servers``). Before evaluation the expression is parsed and refused if it
contains attribute access, subscripts, comprehensions, lambdas, or calls to anything outside
:data:`FUNCTIONS`, so every refusal names the offending part.

The evaluator is bounded, so that no formula can hang the plan or exhaust memory (each refusal
is a :class:`ConfigError`, refused before the costly operation is attempted):

- a formula is at most :data:`MAX_FORMULA_CHARS` characters and its syntax tree at most
  :data:`MAX_DEPTH` levels deep (deeper nesting would exhaust Python's recursion);
- every integer a formula computes, intermediate or final, is below ``2**``:data:`MAX_INT_BITS`
  (the float range): ``a * b`` and ``a ** b`` are refused from the sizes of their operands,
  before multiplying, so a chain ``a1 = a0 * a0``, ``a2 = a1 * a1``, ... stops within a few lines;
- ``round(x, n)`` takes ``|n| <=`` :data:`MAX_ROUND_DIGITS` (``round(1, -10**8)`` would build
  ``10**(10**8)``);
- arithmetic is on numbers only (strings serve comparisons such as ``policy == 'pod'``: ``'%09999d' % 1``
  or ``'a' * n`` would build long strings).

Messages show huge numbers and long formulas abbreviated (:func:`brief`): Python refuses to
print an integer of more than 4,300 digits, and a one-line message should not need to.
"""
from __future__ import annotations

import ast
import graphlib
import math

import simpleeval

from pipeline.errors import ConfigError

#: the longest formula, in characters
MAX_FORMULA_CHARS = 1000
#: the deepest nesting of a formula's syntax tree (``-(-(-1))`` is 5 deep, the whole expression counted; each level costs a
#: few frames of Python's recursion, whose limit is 1000)
MAX_DEPTH = 100
#: integers a formula computes stay below 2**MAX_INT_BITS (about 1.8e308, where floats end)
MAX_INT_BITS = 1024
#: ``round(x, n)``: the largest ``|n|``
MAX_ROUND_DIGITS = 400


class FormulaTooLarge(ValueError):
    """A formula would compute a value beyond the evaluator's bounds (module docstring)."""


def brief(v) -> str:
    """``repr(v)``, with an integer of more than 20 digits as ``1.23457e+4300 (4301 digits)``
    (without converting it to decimal, which Python refuses beyond 4,300 digits), a long string
    cut, and dicts and lists shown element by element the same way."""
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int) and v.bit_length() > 64:
        bits = v.bit_length()
        shift = max(0, bits - 60)
        lg = math.log10(abs(v) >> shift) + shift * math.log10(2)
        exp = math.floor(lg)
        return f"{'-' if v < 0 else ''}{10 ** (lg - exp):.6g}e+{exp} ({exp + 1} digits)"
    if isinstance(v, str) and len(v) > 80:
        return f"{v[:60]!r}... ({len(v)} characters)"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {brief(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        inner = ", ".join(brief(x) for x in v[:10]) + (f", ... ({len(v)} entries)" if len(v) > 10 else "")
        return f"[{inner}]" if isinstance(v, list) else f"({inner})"
    return repr(v)


def _number(op: str, *args) -> None:
    for a in args:
        if isinstance(a, str) or not isinstance(a, (int, float)):
            raise FormulaTooLarge(f"{op} of {brief(a)}: arithmetic is on numbers only "
                                  "(strings serve comparisons such as policy == 'pod')")


def _int_fits(x, what: str) -> None:
    if isinstance(x, int) and x.bit_length() > MAX_INT_BITS:
        raise FormulaTooLarge(f"{what} is an integer of {x.bit_length()} bits (about "
                              f"{brief(x)}); formulas compute integers below 2**{MAX_INT_BITS}")


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
    small integer powers (below 2**MAX_INT_BITS), floating point otherwise; an overflowing
    result is an error."""
    _number("**", a, b)
    if isinstance(a, int) and isinstance(b, int) and b >= 0 and b * math.log2(abs(a) + 1) <= 1024:
        return a**b
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"{a!r} ** {b!r}: {exc}") from None


def _mult(a, b):
    """``a * b`` of numbers, refused before multiplying when the integer product could reach
    2**MAX_INT_BITS (its bit length is at most the sum of theirs)."""
    _number("*", a, b)
    if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise FormulaTooLarge(f"{brief(a)} * {brief(b)} would be an integer of about "
                              f"{a.bit_length() + b.bit_length()} bits; formulas compute integers "
                              f"below 2**{MAX_INT_BITS}")
    return a * b


def _numeric(op: str, fn):
    def apply(a, b):
        _number(op, a, b)
        return fn(a, b)
    return apply


def _round(x, ndigits=None):
    """``round`` with ``|ndigits| <= MAX_ROUND_DIGITS`` (``round(1, -n)`` builds ``10**n``)."""
    _number("round", x)
    if ndigits is None:
        return round(x)
    _number("round", ndigits)
    if not isinstance(ndigits, int):
        raise TypeError(f"round: ndigits={brief(ndigits)} must be an integer")
    if abs(ndigits) > MAX_ROUND_DIGITS:
        raise FormulaTooLarge(f"round: ndigits={brief(ndigits)} is beyond +-{MAX_ROUND_DIGITS}")
    return round(x, ndigits)


_OPERATORS = dict(simpleeval.DEFAULT_OPERATORS)
_OPERATORS[ast.Pow] = _power
_OPERATORS[ast.Mult] = _mult
for _node, _sym in ((ast.Add, "+"), (ast.Sub, "-"), (ast.Div, "/"), (ast.FloorDiv, "//"), (ast.Mod, "%")):
    _OPERATORS[_node] = _numeric(_sym, simpleeval.DEFAULT_OPERATORS[_node])

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
    "round": _round,
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
    if len(expr) > MAX_FORMULA_CHARS:
        raise ConfigError(f"{key}={brief(expr)}: a formula is at most {MAX_FORMULA_CHARS} characters")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{key}={brief(expr)}: not a valid formula ({exc.msg})") from None
    except (RecursionError, MemoryError):  # nesting too deep for Python's own parser
        raise ConfigError(f"{key}={brief(expr)}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    depth, stack = 0, [(tree, 1)]
    while stack:  # iteratively: the tree may be deeper than Python's recursion allows
        node, level = stack.pop()
        depth = max(depth, level)
        if depth > MAX_DEPTH:
            raise ConfigError(f"{key}={brief(expr)}: nested more than {MAX_DEPTH} levels deep "
                              f"(a formula's syntax tree is at most {MAX_DEPTH} levels)")
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            raise ConfigError(f"{key}={brief(expr)}: attribute access ('.{node.attr}') is not allowed")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ConfigError(
                    f"{key}={brief(expr)}: call to {what!r} is not allowed; "
                    f"allowed functions: {', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords:
                raise ConfigError(f"{key}={brief(expr)}: keyword arguments are not allowed")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise ConfigError(f"{key}={brief(expr)}: name {node.id!r} is not allowed")
        elif isinstance(node, ast.Constant):
            # strings for comparisons such as ``policy == 'batch_filling'`` (the replications
            # formula sees the point's policy and variant); a formula's value must be a number
            if not isinstance(node.value, (int, float, str)) or isinstance(node.value, bool):
                raise ConfigError(f"{key}={brief(expr)}: only numbers and strings are allowed as constants")
        elif not isinstance(node, _ALLOWED_NODES):
            raise ConfigError(
                f"{key}={brief(expr)}: {type(node).__name__} expressions are not allowed"
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
                f"params.{key}={brief(expr)}: unknown variable {unknown[0]!r}; "
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


class _Bounded(simpleeval.SimpleEval):
    """simpleeval with every integer it computes checked against 2**MAX_INT_BITS (``int('9' *
    999)``, ``abs``, ...; products and powers are refused before they are computed)."""

    def _eval(self, node):
        value = super()._eval(node)
        _int_fits(value, "a value")
        return value


def evaluate(key: str, expr: str, names: dict[str, float]):
    """Evaluate one checked formula with the given variable values; ``key`` is the setting's
    full name as the messages show it (``params.lam``, ``replications``), as for :func:`parse`."""
    if len(expr) > MAX_FORMULA_CHARS:  # parse() refuses it first; a direct caller too
        parse(key, expr)
    evaluator = _Bounded(operators=_OPERATORS, functions=FUNCTIONS, names={**CONSTANTS, **names})
    try:
        value = evaluator.eval(expr)
    except (simpleeval.InvalidExpression, ArithmeticError, ValueError, TypeError, OverflowError,
            RecursionError) as exc:
        shown = brief({k: v for k, v in names.items() if k != "N"})
        if isinstance(exc, RecursionError):
            exc = f"nested too deeply (at most {MAX_DEPTH} levels)"
        raise ConfigError(f"{key}={brief(expr)}: cannot evaluate at {shown}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={brief(expr)}: gives {brief(value)}, not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={brief(expr)}: gives {value!r} at {brief(names)}")
    return value


def _precise_functions(mp) -> dict[str, object]:
    """:data:`FUNCTIONS` on mpmath numbers (``ceil`` and ``floor`` forgive noise by the rule of
    :func:`_snap`, within 1e-9 relative of an integer: a float constant such as 0.9 carries its
    binary rounding into any precision; ``float`` keeps the precision)."""
    def snap(x):
        r = mp.nint(x)
        return r if abs(x - r) <= mp.mpf("1e-9") * max(1, abs(x)) else x

    def to_int(x):
        if isinstance(x, int):
            return x
        if not mp.isfinite(x):
            raise ValueError(f"{x} is not finite")
        return int(x)

    return {"log": lambda x, *b: mp.log(x, *b), "log2": lambda x: mp.log(x, 2), "log10": mp.log10,
            "exp": mp.exp, "sqrt": mp.sqrt, "ceil": lambda x: to_int(mp.ceil(snap(x))),
            "floor": lambda x: to_int(mp.floor(snap(x))), "abs": abs, "min": min, "max": max,
            "round": lambda x, n=None: to_int(mp.nint(x)) if n is None else _round(float(x), n),
            "int": lambda x: to_int(x) if isinstance(x, int) else to_int(mp.floor(x) if x >= 0 else mp.ceil(x)),
            "float": mp.mpf}


def evaluate_precise(key: str, expr: str, names: dict, digits: int):
    """:func:`evaluate` in ``digits`` significant decimal digits (mpmath): for the points of a
    limit path past the float range of a formula (``1 - beta * N**(-alpha)`` is 1.0 in floats
    past N ~ 10^53). ``names`` may hold mpmath numbers (``N = mpf(10)**100``); numbers come back
    as ``int`` (integers) or mpmath ``mpf``. Bounded as :func:`evaluate` (integers below
    2**MAX_INT_BITS); refusals are :class:`ConfigError`."""
    import mpmath

    if len(expr) > MAX_FORMULA_CHARS:
        parse(key, expr)
    with mpmath.workdps(int(digits)):
        mp = mpmath.mp

        def number(op, *args):
            for a in args:
                if not isinstance(a, (int, float, mpmath.mpf)) or isinstance(a, bool):
                    raise FormulaTooLarge(f"{op} of {brief(a)}: arithmetic is on numbers only "
                                          "(strings serve comparisons such as policy == 'pod')")

        def mpfy(a):
            return mp.mpf(a) if isinstance(a, float) else a

        def power(a, b):
            number("**", a, b)
            if isinstance(a, int) and isinstance(b, int) and b >= 0 and b * math.log2(abs(a) + 1) <= 1024:
                return a**b
            return mp.power(mpfy(a), mpfy(b))

        def mult(a, b):
            number("*", a, b)
            if isinstance(a, int) and isinstance(b, int):
                return _mult(a, b)
            return mpfy(a) * mpfy(b)

        def arith(op, fn):
            def apply(a, b):
                number(op, a, b)
                return fn(mpfy(a), mpfy(b)) if isinstance(a, float) or isinstance(b, float) else fn(a, b)
            return apply

        top = mp.mpf(2) ** MAX_INT_BITS

        class Bounded(_Bounded):  # numbers stay in the float range too: they end as floats
            def _eval(self, node):
                value = super()._eval(node)
                if isinstance(value, mpmath.mpf) and not abs(value) < top:
                    raise FormulaTooLarge(f"a value is {mpmath.nstr(value, 6)}; formulas compute numbers "
                                          f"below 2**{MAX_INT_BITS} (the float range)")
                return value

        operators = dict(_OPERATORS)
        operators[ast.Pow] = power
        operators[ast.Mult] = mult
        for node, sym in ((ast.Add, "+"), (ast.Sub, "-"), (ast.FloorDiv, "//"), (ast.Mod, "%")):
            operators[node] = arith(sym, simpleeval.DEFAULT_OPERATORS[node])
        operators[ast.Div] = arith("/", lambda a, b: mp.mpf(a) / mp.mpf(b))  # int / int too
        consts = {"pi": +mp.pi, "e": +mp.e}
        evaluator = Bounded(operators=operators, functions=_precise_functions(mp),
                             names={**consts, **{n: mpfy(v) for n, v in names.items()}})
        try:
            value = evaluator.eval(expr)
        except (simpleeval.InvalidExpression, ArithmeticError, ValueError, TypeError, OverflowError,
                RecursionError) as exc:
            raise ConfigError(f"{key}={brief(expr)}: cannot evaluate at "
                              f"{brief({k: (float(v) if isinstance(v, mpmath.mpf) else v) for k, v in names.items() if k != 'N'})}: {exc}") from None
        if isinstance(value, bool) or not isinstance(value, (int, mpmath.mpf)):
            raise ConfigError(f"{key}={brief(expr)}: gives {brief(value)}, not a number")
        if isinstance(value, mpmath.mpf) and not mp.isfinite(value):
            raise ConfigError(f"{key}={brief(expr)}: gives {value}")
        return value
