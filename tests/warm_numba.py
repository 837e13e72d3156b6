"""Fill numba's disk cache with the shipped models' kernels before the test workers start.

``python -m tests.warm_numba SHARD SHARDS`` runs the declared example task (:func:`sim.testing.example_task`)
of every ``SHARDS``-th shipped (model, engine, policy) entry, from the ``SHARD``-th on, grouped by
(model, engine) so that kernels shared by one engine's policies are compiled in one process.
tests/conftest.py starts one process per xdist worker before the workers exist: each kernel is then
compiled once, both cores busy, instead of once in each worker that meets it first (two workers
running test files of one model compile its kernels side by side). The examples are what the
contract test (tests/test_contract.py) runs; a kernel a test calls with other argument types is
still compiled by that test.
"""
from __future__ import annotations

import sys


def shards(n: int) -> list[list]:
    """The shipped entries in ``n`` lists of about equal size, each (model, engine) in one list."""
    from sim import registry

    groups: dict[tuple, list] = {}
    for e in registry.ENTRIES:
        if e.model in registry.SHIPPED:
            groups.setdefault((e.model, e.engine), []).append(e)
    out: list[list] = [[] for _ in range(n)]
    for group in sorted(groups.values(), key=len, reverse=True):  # largest first, into the smallest list
        min(out, key=len).extend(group)
    return out


def main(argv: list[str]) -> int:
    from pipeline.worker import configure_numba

    configure_numba(1)  # the folder the tests use (tests/conftest.py), before sim imports numba
    import sim
    from sim.testing import example_task

    shard, n = int(argv[0]), int(argv[1])
    for entry in shards(n)[shard]:
        sim.run(example_task(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
