"""How far each golden field moves across CPUs: the measurement behind the tolerances of
``tests/golden/test_golden.py``. Never run by the tests.

    python -m tests.golden.cross_cpu dump OUT.json          # rerun every golden task here
    python -m tests.golden.cross_cpu compare A.json B.json  # 'stored' names the stored rows

``compare`` prints, per (engine, field) that differs anywhere, the largest relative difference
among elements above 1e-12 in size and the largest absolute difference, and whether the field
is compared bitwise or to a tolerance by the golden test (a bitwise field that differs is
marked ``BITWISE FIELD MOVED``).

Another CPU on this host: run ``dump`` under :data:`EMULATED` (numba code generated for a
baseline x86-64, numpy's SIMD kernels off, glibc's libm without its FMA/AVX2 variants,
OpenBLAS's Sandybridge kernels) with a numba cache folder of its own, e.g.

    (source <(python -m tests.golden.cross_cpu env); NUMBA_CACHE_DIR=/tmp/nc \
        python -m tests.golden.cross_cpu dump emul.json)

and the golden test itself the same way (``python -m pytest tests/golden``).
"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: environment variables that make this host compute as a CPU without AVX2/FMA would
EMULATED = {
    "NUMBA_CPU_NAME": "generic",
    "NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 F16C AVX AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL "
                                "AVX512_ICL AVX512_SPR X86_V3 X86_V4",
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX,-FMA4",
    "OPENBLAS_CORETYPE": "Sandybridge",
}


def dump(path: str) -> None:
    from tests.golden.make_golden import TASKS, golden_row

    rows = {name: [golden_row(t) for t in make()] for name, make in TASKS.items()}
    Path(path).write_text(json.dumps(rows))
    print(f"{path}: {sum(map(len, rows.values()))} rows")


def _load(path: str) -> dict:
    from tests.golden.make_golden import TASKS

    if path == "stored":
        return {n: [r["row"] for r in json.loads((HERE / f"{n}.json").read_text())] for n in TASKS}
    return json.loads(Path(path).read_text())


def _diffs(x, y) -> tuple[float, float]:
    """(largest relative difference among elements above 1e-12, largest absolute difference)."""
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        pairs = list(zip(x, y))
    else:
        pairs = [(x, y)]
    rel = ab = 0.0
    for a, b in pairs:
        if a == b or (type(a) is float and type(b) is float and math.isnan(a) and math.isnan(b)):
            continue
        if type(a) is not float or type(b) is not float:
            return math.inf, math.inf
        ab = max(ab, abs(a - b))
        if max(abs(a), abs(b)) > 1e-12:
            rel = max(rel, abs(a - b) / max(abs(a), abs(b)))
    return rel, ab


def compare(a_path: str, b_path: str) -> int:
    from tests.golden.make_golden import TASKS, TIMING
    from tests.golden.test_golden import tolerance

    a, b = _load(a_path), _load(b_path)
    worst: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, make in TASKS.items():
        for task, ra, rb in zip(make(), a[name], b[name]):
            for key in (set(ra) | set(rb)) - set(TIMING):
                rel, ab = _diffs(ra.get(key), rb.get(key))
                if rel or ab:
                    w = worst[(task["engine"], key)]
                    w[0], w[1] = max(w[0], rel), max(w[1], ab)
    bad = 0
    for (engine, key), (rel, ab) in sorted(worst.items()):
        tol = tolerance(engine, key)
        how = "BITWISE FIELD MOVED" if tol is None else f"tolerance rtol {tol.rtol:g} atol {tol.atol:g}"
        bad += tol is None
        print(f"{engine:22s} {key:26s} rel {rel:9.3g}  abs {ab:9.3g}  {how}")
    print(f"{len(worst)} fields differ, {bad} of them compared bitwise")
    return 1 if bad else 0


if __name__ == "__main__":
    cmd, *args = sys.argv[1:] or ["help"]
    if cmd == "dump":
        dump(*args)
    elif cmd == "compare":
        sys.exit(compare(*args))
    elif cmd == "env":
        print("\n".join(f"export {k}='{v}'" for k, v in EMULATED.items()))
    else:
        print(__doc__)
