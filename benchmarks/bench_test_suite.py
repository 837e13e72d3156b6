"""Where the test suite's time goes: each test's CPU time and every numba kernel it compiled.

Load it into a pytest run as a plugin (every xdist worker loads it too)::

    PYTHONPATH=$PWD BENCH_SUITE_OUT=DIR python -m pytest -n 2 --dist loadfile -p benchmarks.bench_test_suite

Each process writes ``DIR/suite-<worker>.json``: per test, the CPU time of the worker process
(``time.process_time``: the share of a shared machine's load is left out, but so is the CPU of
any subprocess a test starts), and every numba compilation, that is every cache miss (a kernel
loaded from the disk cache fires no event), with the function, its argument types, its nesting
depth (0: called from Python), its wall time and its CPU time (``time.process_time``, the
compile runs in the test's process: on a loaded machine the wall time is several times the
CPU time). Then::

    python -m benchmarks.bench_test_suite DIR

The numba warm-up's processes (tests/warm_numba.py, started by tests/conftest.py) write
``DIR/suite-warm<pid>.json`` too: each (model, engine, policy) group they ran, as a "test" named
``warm-up <model> <engine> <policy>``, and the kernels it compiled, so the summary below counts
the warm-up's CPU and compiles beside the tests'.

prints the CPU time per test file and per test, the compile time per test file and per kernel,
and the kernels compiled by more than one worker with the same argument types (a closure's
variants share a name and argument types: they are told apart only by the values they capture,
so a repeat of a closure may be another variant, not a duplicate).
"""
from __future__ import annotations

import collections
import glob
import json
import os
import sys
import time

import pytest

_STATE = {"node": "session", "depth": 0, "starts": [], "compiles": [], "cpu": {}}


def _listen() -> None:
    from numba.core import event

    class Compiles(event.Listener):
        def on_start(self, ev):
            _STATE["starts"].append((time.perf_counter(), time.process_time(), _STATE["depth"]))
            _STATE["depth"] += 1

        def on_end(self, ev):
            t0, c0, depth = _STATE["starts"].pop()
            _STATE["depth"] -= 1
            data = ev.data or {}
            py = getattr(data.get("dispatcher"), "py_func", None)
            name = f"{py.__module__}.{py.__qualname__}" if py is not None else "?"
            _STATE["compiles"].append({"test": _STATE["node"], "func": name, "depth": depth,
                                       "args": str(data.get("args")), "seconds": time.perf_counter() - t0,
                                       "cpu": time.process_time() - c0})

    event.register("numba:compile", Compiles())


def pytest_sessionstart(session):
    _listen()  # after tests/conftest.py has set numba's cache folder (it is imported first)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _STATE["node"] = item.nodeid
    c0 = time.process_time()
    yield
    _STATE["cpu"][item.nodeid] = time.process_time() - c0
    _STATE["node"] = "(between tests)"


def pytest_sessionfinish(session):
    out = os.environ.get("BENCH_SUITE_OUT")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(out, f"suite-{worker}.json"), "w") as f:
        json.dump({"cpu": _STATE["cpu"], "compiles": _STATE["compiles"]}, f)


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def summarize(folder: str, top: int = 30) -> None:
    cpu, compiles = {}, []
    paths = sorted(glob.glob(os.path.join(folder, "suite-*.json")))
    if not paths:
        sys.exit(f"no suite-*.json in {folder}: run pytest with -p benchmarks.bench_test_suite and "
                 "BENCH_SUITE_OUT set to it first")
    for path in paths:
        worker = os.path.basename(path)[len("suite-"):-len(".json")]
        data = json.load(open(path))
        cpu.update(data["cpu"])
        compiles += [dict(c, worker=worker) for c in data["compiles"]]
    total = sum(cpu.values())
    print(f"{len(cpu)} tests, {total:.0f} s CPU in the test processes")
    by_file = collections.Counter()
    for node, t in cpu.items():
        by_file[_file(node)] += t
    print("\nCPU by test file")
    for name, t in by_file.most_common(top):
        print(f"{t:8.1f} s {100 * t / total:5.1f}%  {name}")
    print("\nCPU by test")
    for node, t in collections.Counter(cpu).most_common(top):
        print(f"{t:8.1f} s  {node}")
    outer = [c for c in compiles if c["depth"] == 0]
    cpu_of = [c.get("cpu", c["seconds"]) for c in outer]  # files written before CPU was recorded: wall
    print(f"\n{len(compiles)} compilations ({len(outer)} called from Python), "
          f"{sum(c['seconds'] for c in outer):.0f} s wall, {sum(cpu_of):.0f} s CPU")
    compile_by_file, by_kernel, count = collections.Counter(), collections.Counter(), collections.Counter()
    for c, t in zip(outer, cpu_of):
        compile_by_file[_file(c["test"])] += t
        by_kernel[c["func"]] += t
        count[c["func"]] += 1
    print("\ncompile CPU time by test file")
    for name, t in compile_by_file.most_common(top):
        print(f"{t:8.1f} s  {name}")
    print("\ncompile CPU time by kernel (called from Python)")
    for name, t in by_kernel.most_common(top):
        print(f"{t:8.1f} s  {count[name]:3d}x  {name}")
    seen = collections.defaultdict(set)
    for c in outer:
        seen[(c["func"], c["args"])].add(c["worker"])
    shared = [k for k, workers in seen.items() if len(workers) > 1]
    print(f"\n{len(shared)} (kernel, argument types) compiled in more than one worker")
    for func, args in shared[:top]:
        print(f"  {func} {args[:100]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.bench_test_suite DIR")
    summarize(sys.argv[1])
