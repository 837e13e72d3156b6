"""The bounded formula evaluator (pipeline/formulas.py; docs/sweeps.md, "Limits of formulas"):
what could be huge is refused before it is evaluated, with one line naming the formula."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from pipeline.errors import ConfigError
from pipeline.formulas import MAX_DEPTH, MAX_FORMULA_CHARS, brief, evaluate, parse
from tests.helpers import REPO


def _refused(expr: str, names: dict | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse("params.x", expr)
        evaluate("params.x", expr, names or {})
    message = str(info.value)
    assert "\n" not in message
    return message


#: the cases of issue 34 that hung (or ran for seconds) before the bounds; each runs in a
#: subprocess with a timeout, and must be refused within a second
HANG_CASES = {
    "round(1, -10**8)": "ndigits=-100000000",
    "round(1, -10**7)": "ndigits=-10000000",
    "round(1.5, 10**9)": "ndigits=1000000000",
    "2 * round(7, -(10**8)) + 1": "ndigits=-100000000",
}


def test_hanging_cases_are_refused_within_a_second():
    script = textwrap.dedent("""
        import json, sys, time
        from pipeline.errors import ConfigError
        from pipeline.formulas import evaluate, parse
        out = {}
        for expr in json.loads(sys.argv[1]):
            t0 = time.perf_counter()
            try:
                parse("params.x", expr)
                evaluate("params.x", expr, {"N": 100})
                out[expr] = ["accepted", time.perf_counter() - t0]
            except ConfigError as exc:
                out[expr] = [str(exc), time.perf_counter() - t0]
        print(json.dumps(out))
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script, json.dumps(list(HANG_CASES))], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the evaluator did not return within 60 s")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for expr, needle in HANG_CASES.items():
        message, _seconds = out[expr]  # the subprocess's timeout is the guard against hanging
        assert needle in message and "400" in message, (expr, message)


def test_chained_squares_stop_within_a_few_lines():
    # a_i = a_{i-1} * a_{i-1} doubles the size each line: refused once a product could reach
    # 2**1024, before multiplying (a0 = 3: a9 = 3**512 has 812 bits, a10 would have 1624)
    names = {"a0": 3}
    for i in range(1, 10):
        names[f"a{i}"] = evaluate(f"params.a{i}", f"a{i - 1} * a{i - 1}", names)
    assert names["a9"] == 3**512
    message = _refused("a9 * a9", names)
    assert "1624 bits" in message and "below 2**1024" in message
    assert "e+244 (245 digits)" in message  # a9 abbreviated, not its 245 digits


@pytest.mark.parametrize("expr, needle", [
    ("-" * 600 + "1", f"nested more than {MAX_DEPTH} levels"),
    ("(" * 250 + "1" + ")" * 250, "not a valid formula"),  # Python's parser refuses 200 parentheses
    ("1" + "+1" * (MAX_FORMULA_CHARS // 2), f"at most {MAX_FORMULA_CHARS} characters"),
    ("2 ** 5000", "math range error"),
    ("int('9' * 500)", "arithmetic is on numbers only"),
    ("'%099999d' % 1", "arithmetic is on numbers only"),
    ("'a' + 'b'", "arithmetic is on numbers only"),
], ids=["unary600", "parens250", "long", "pow", "int_of_string", "string_format", "string_add"])
def test_refused(expr, needle):
    assert needle in _refused(expr)


def test_integers_beyond_the_bound_from_functions_are_refused():
    # int() of a float is exact: int(1e308) has 1024 bits (allowed); products of it are not
    assert evaluate("params.x", "int(1e308)", {}).bit_length() == 1024
    assert "bits" in _refused("int(1e308) * int(1e308)")
    assert "bits" in _refused("x * 1", {"x": 2**2000})  # a value given as a variable


def test_bounds_keep_ordinary_formulas():
    n = 10**6
    assert evaluate("params.k", "ceil(log(N)**2)", {"N": n}) == 191
    assert evaluate("params.lam", "1 - 0.5 * N**(-0.3)", {"N": n}) == pytest.approx(1 - 0.5 * n**-0.3)
    assert evaluate("params.e", "round(2.567, 2)", {}) == 2.57
    assert evaluate("params.e", "round(12345, -2)", {}) == 12300
    assert evaluate("params.e", "round(2.5)", {}) == 2
    assert evaluate("params.e", "2 ** 62 - 1", {}) == 2**62 - 1
    assert evaluate("replications", "3 if policy == 'pod' else 2", {"policy": "pod"}) == 3
    deep = "-" * (MAX_DEPTH - 2) + "1"  # Expression, 98 UnaryOps, Constant: MAX_DEPTH levels
    parse("params.x", deep)
    assert evaluate("params.x", deep, {}) == 1


def test_brief_never_converts_a_huge_integer():
    assert brief(3**16384) == "1.4277e+7817 (7818 digits)"  # str() would raise (4,300 digits)
    assert brief(-(10**5000)) == "-1e+5000 (5001 digits)"
    assert brief(12345) == "12345"
    assert brief({"a": 10**400, "b": 1.5}) == "{'a': 1e+400 (401 digits), 'b': 1.5}"
    assert brief("x" * 100).endswith("... (100 characters)")


# evaluate_precise: the formulas past the float range (limit_path.heavy_traffic)


def test_precise_evaluation_keeps_one_minus_lam_where_floats_round_it_away():
    import mpmath

    from pipeline.formulas import evaluate, evaluate_precise

    with mpmath.workdps(130):
        n = mpmath.mpf(10) ** 100
        names = {"N": n, "n_servers": n, "alpha": 0.3, "beta": 1.0}
        lam = evaluate_precise("params.lam", "1 - beta * N**(-alpha)", names, 130)
        assert float(1 - lam) == pytest.approx(1e-30, rel=1e-14)
    assert evaluate("params.lam", "1 - beta * N**(-alpha)", {"N": 1e100, "alpha": 0.3, "beta": 1.0}) == 1.0
    # integers of any size (below 2**1024); ceil and floor forgive noise as in floats: within 1e-9
    # relative of an integer (floor(N / k) at 10^100 is then the nearest integer)
    k = evaluate_precise("params.k", "ceil(log(N)**2)", {"N": 10**100}, 130)
    assert k == 53019
    cap = evaluate_precise("params.d_cap", "floor(N / k)", {"N": 10**100, "k": k}, 130)
    assert cap == (10**100 + k // 2) // k
    assert evaluate_precise("x", "floor(10**20 / 3 + 0.5)", {}, 60) == 10**20 // 3 + 1
    # ceil forgives noise at the working precision, as floor does in floats
    assert evaluate_precise("x", "ceil(1 / (1 - 0.9))", {}, 50) == 10


def test_precise_evaluation_is_bounded_and_refuses_as_the_float_one_does():
    from pipeline.formulas import evaluate_precise

    with pytest.raises(ConfigError, match="below 2\\*\\*1024"):
        evaluate_precise("params.x", "2**2000", {}, 40)
    with pytest.raises(ConfigError, match="below 2\\*\\*1024"):
        evaluate_precise("params.x", "exp(1000)", {}, 40)
    with pytest.raises(ConfigError, match="cannot evaluate"):
        evaluate_precise("params.x", "log(0)", {}, 40)
    with pytest.raises(ConfigError, match="arithmetic is on numbers only"):
        evaluate_precise("params.x", "'a' * 3", {}, 40)
