"""Fill numba's disk cache with the kernels the tests use before the test workers start.

``python -m tests.warm_numba CLAIMS`` runs groups of small tasks through ``sim.run``: the declared
example (:func:`sim.testing.example_task`) of every shipped (model, engine, policy) entry, which
the contract test (tests/test_contract.py) runs, and every golden task
(``tests/golden/<model>.json``), which tests/golden/test_golden.py runs and which reach
kernel variants the examples do not (a closure per policy code compiled for k-task jobs, a
buffer, response recording, per-server rates, a large N's sampler): each variant is a full
compile. A group is every task of one (model, engine, policy), so that the kernels of one
policy are compiled in one process.

tests/conftest.py starts one process per xdist worker, all with the same folder ``CLAIMS``. The
processes walk the same list of groups, stochastic engines (the large event loops) first, and
each takes the next group that no other has claimed (an exclusive create of ``CLAIMS/<i>``): both
cores stay busy to the end however the compile times fall, and each kernel is compiled once,
not once in each worker that meets it first. A kernel a test calls with other arguments than
these tasks is still compiled by that test.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

#: engines whose kernels are event loops (each variant a compile of tens of seconds): claimed first
_LOOPS = ("agent", "occupancy", "slotted", "population", "trajectory", "population_trajectory")


def groups() -> list[list[dict]]:
    """The warm-up's tasks, one list per (model, engine, policy), in the order they are claimed."""
    import json
    from pathlib import Path

    from sim import registry
    from sim.testing import example_task
    from tests.golden.make_golden import TASKS

    by_key: dict[tuple, list[dict]] = {}
    for e in registry.ENTRIES:
        if e.model in registry.SHIPPED:
            by_key.setdefault((e.model, e.engine, e.policy), []).append(example_task(e))
    for name in TASKS:  # the tasks as stored, which the golden test reruns
        for rec in json.loads((Path(__file__).parent / "golden" / f"{name}.json").read_text()):
            task = rec["task"]
            by_key.setdefault((task["model"], task["engine"], task["policy"]), []).append(task)
    order = sorted(by_key, key=lambda k: (k[1] not in _LOOPS, -len(by_key[k]), k))
    return [by_key[k] for k in order]


def claim(folder: str, i: int) -> bool:
    """True for the one process that creates ``folder/i`` first."""
    try:
        os.close(os.open(os.path.join(folder, str(i)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def main(argv: list[str]) -> int:
    from pipeline.worker import configure_numba

    configure_numba(1)  # the folder the tests use (tests/conftest.py), before sim imports numba
    import sim

    folder = argv[0]
    bench = _bench_state()
    failed = 0
    for i, group in enumerate(groups()):
        if not claim(folder, i):
            continue
        if bench is not None:
            bench["node"] = "warm-up {model} {engine} {policy}".format(**group[0])
            c0 = time.process_time()
        for task in group:
            try:
                sim.run(task)
            except Exception:  # noqa: BLE001 -- reported; the tests that run it will show it too
                failed += 1
                print(f"warm-up task failed: {task}\n{traceback.format_exc()}", file=sys.stderr)
        if bench is not None:
            bench["cpu"][bench["node"]] = time.process_time() - c0
    if bench is not None:
        _bench_write(bench)
    return 1 if failed else 0


def _bench_state() -> dict | None:
    """With ``BENCH_SUITE_OUT`` set (a run measured by :mod:`benchmarks.bench_test_suite`), the
    plugin's record of this process: each group's CPU time under the name ``warm-up <model>
    <engine> <policy>`` and every kernel it compiles, so that the summary counts the warm-up's
    compiles beside the tests'. None otherwise."""
    if not os.environ.get("BENCH_SUITE_OUT"):
        return None
    from benchmarks import bench_test_suite

    bench_test_suite._listen()
    return bench_test_suite._STATE


def _bench_write(bench: dict) -> None:
    """``BENCH_SUITE_OUT/suite-warm<pid>.json``, in the plugin's format (its summary reads every
    ``suite-*.json``; the worker's name is ``warm<pid>``)."""
    import json

    out = os.environ["BENCH_SUITE_OUT"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"suite-warm{os.getpid()}.json"), "w") as f:
        json.dump({"cpu": bench["cpu"], "compiles": bench["compiles"]}, f)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
