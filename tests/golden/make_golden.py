"""Golden rows: a small task list per (model, engine, policy) entry, run through ``sim.run`` and
written as JSON, one file per model (``tests/golden/<model>.json``). ``tests/golden/test_golden.py``
reruns every stored task and compares the row (every field but the timing ones, :data:`TIMING`):
bitwise where the numbers cannot depend on the CPU, to a stated tolerance where they can
(``tests/golden/cross_cpu.py`` measures which). A structural change must leave them unchanged.

    .venv/bin/python tests/golden/make_golden.py [MODEL ...]
    .venv/bin/python tests/golden/make_golden.py --append-general   # the general engine's rows only
    .venv/bin/python tests/golden/make_golden.py --append-law-limits  # the limits under a law only

Never run by the tests. Run it only when a change of the numbers is intended, and say so in the
commit that rewrites the files. Floats are written by ``json`` (``repr``: they read back exactly).
Every task is small: the whole golden test runs in about 20 s on one core of a 2-core machine
once the kernels are compiled (the first run compiles them).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from sim.testing import TIMING  # result fields that measure the machine: left out of the rows

HERE = Path(__file__).resolve().parent
#: the run settings of the plan's defaults (pipeline/config.py), as a planned task carries them
RUN = {"init": "meanfield", "n_batches": 20, "max_level": 32, "h": 1}


def _sim(engine: str, policy: str, seed: int, events: int = 20_000, **params) -> dict:
    return {"engine": engine, "policy": policy, **params, "events": events, "seed": seed, **RUN}


def _limit(engine: str, policy: str, **params) -> dict:
    return {"engine": engine, "policy": policy, **params, "seed": 0, **RUN}


def _traj(policy: str, seed: int, engine: str = "trajectory", **params) -> dict:
    return {"engine": engine, "policy": policy, **params, "events": 20_000, "time": 5.0,
            "seed": seed, **{**RUN, "init": "empty"}, "grid": 11}


def dispatch_tasks() -> list[dict]:
    n, lam = 50, 0.8
    base = {"n_servers": n, "lam": lam}
    batch = {**base, "d": 2, "k": 2}
    out = []
    for i, eng in enumerate(("agent", "occupancy")):
        s = 100 * i
        out += [
            _sim(eng, "random", s + 1, **base),
            _sim(eng, "random", s + 2, **base, k=2),
            _sim(eng, "random", s + 3, **base, b=4),
            _sim(eng, "jsq", s + 4, **base),
            _sim(eng, "jsq", s + 5, **base, k=2),
            _sim(eng, "pod", s + 6, **base, d=2),
            _sim(eng, "pod", s + 7, **base, d=2, b=3),
            _sim(eng, "pod", s + 8, **base, d=2, responses=True),
            _sim(eng, "pod", s + 9, **base, d=2, precision=0.02, precision_cap=4),
            _sim(eng, "batch_filling", s + 10, **batch),
            _sim(eng, "batch_filling", s + 11, **batch, b=5),
            _sim(eng, "batch_sampling", s + 12, **batch),
            _sim(eng, "pod_per_task", s + 13, **batch),
        ]
    out += [
        _sim("agent", "pod", 21, n_servers=10, lam=0.7, d=2, service_rates=[0.5, 1.5] * 5),
        _sim("agent", "batch_sampling", 22, **batch, responses=True),
        _limit("meanfield", "random", **base),
        _limit("meanfield", "random", **base, k=2),
        _limit("meanfield", "random", **base, b=4),
        _limit("meanfield", "jsq", **base),
        _limit("meanfield", "jsq", **base, k=2),
        _limit("meanfield", "pod", **base, d=2),
        _limit("meanfield", "pod", **base, d=2, b=3),
        _limit("meanfield", "pod", **base, d=2, responses=True),
        _limit("meanfield", "batch_filling", **batch),
        _limit("meanfield", "batch_sampling", **batch),
        _limit("meanfield", "pod_per_task", **batch),
        _limit("refined", "pod", **base, d=2),
        _limit("refined", "pod", **base, d=2, replacement=True),
        _limit("refined", "batch_filling", **batch),
        _traj("pod", 31, **base, d=2),
        _traj("batch_filling", 32, **batch),
    ]
    # the heavy-traffic limit on the sub_halfin_whitt path (c = 1) at N = 10^20 and 10^300
    heavy = [{"log10_n": 20.0, "one_minus_lam": 1e-06, "k": 2121, "d_real": 130555.0},
             {"log10_n": 300.0, "one_minus_lam": 1e-90, "k": 477171, "d_real": 7.647814942725025e+88}]
    out += [_limit("heavy_traffic", pol, **h) for pol in ("batch_filling", "batch_sampling") for h in heavy]
    # power-of-d declared by its transitions (issue 38): the population engine and its mean field
    out += [
        _sim("population", "pod", 81, **base, d=2),
        _sim("population", "pod", 82, **base, d=2, b=3),
        _sim("population", "pod", 83, **base, d=3, replacement=True),
        _limit("population_meanfield", "pod", **base, d=2),
        _limit("population_meanfield", "pod", **base, d=2, b=3),
        _limit("population_refined", "pod", **base, d=2),
        _limit("population_refined", "pod", **base, d=2, replacement=True),
        _traj("pod", 84, "population_trajectory", **base, d=2),
    ]
    out += general_tasks()
    out += law_limit_tasks()
    return [{"model": "dispatch", **t} for t in out]


def general_tasks() -> list[dict]:
    """The general-size engine (issue 47): each of its policies with a law other than the
    exponential (every law once at least), and two exponential tasks, with and without the
    ``service`` key; ``events`` are job arrivals."""
    base = {"n_servers": 50, "lam": 0.8}
    batch = {**base, "d": 2, "k": 2}
    hyper = {"service": "hyperexponential", "service_scv": 4.0}
    pareto = {"service": "bounded_pareto", "service_alpha": 1.5, "service_upper": 100.0}
    lognormal = {"service": "lognormal", "service_scv": 2.0}
    return [
        _sim("general", "random", 91, **base, **hyper),
        _sim("general", "pod", 92, **base, d=2, service="deterministic"),
        _sim("general", "pod", 93, **base, d=2),
        _sim("general", "jsq", 94, **base, service="erlang", service_phases=3),
        _sim("general", "ll", 95, **base, d=2, **lognormal),
        _sim("general", "jiq", 96, **base, **pareto),
        _sim("general", "random", 97, **base, k=2, service="exponential"),
        _sim("general", "jsq", 98, **base, k=2, **hyper),
        _sim("general", "batch_filling", 99, **batch, **hyper),
        _sim("general", "batch_sampling", 100, **batch, service="erlang", service_phases=2),
        _sim("general", "pod_per_task", 101, **batch, **lognormal),
        _sim("general", "ll_filling", 102, **batch, **pareto),
    ]


def law_limit_tasks() -> list[dict]:
    """The limits under a service law (docs/service.md, "Limits as entries"): meanfield's ll
    (exponential and a law), pod (the cavity queue) and random (M/G/1) under a law, and pod's
    population engines under a phase-type law."""
    base = {"n_servers": 50, "lam": 0.8}
    return [
        _limit("meanfield", "ll", **base, d=2),
        _limit("meanfield", "ll", **base, d=2, service="hyperexponential", service_scv=4.0),
        _limit("meanfield", "pod", **base, d=2, service="deterministic"),
        _limit("meanfield", "random", **base, service="erlang", service_phases=3),
        _limit("population_meanfield", "pod", **base, d=2, service="erlang", service_phases=2),
        _limit("population_refined", "pod", **base, d=2, service="erlang", service_phases=2),
        _sim("population", "pod", 103, **base, d=2, service="hyperexponential", service_scv=4.0),
    ]


def append(name: str, tasks: list[dict]) -> None:
    """Add the rows of ``tasks`` to ``tests/golden/<name>.json``, the stored rows kept as they
    are (read back and written again: a float's ``repr`` reads back exactly)."""
    path = HERE / f"{name}.json"
    records = json.loads(path.read_text())
    have = [r["task"] for r in records]
    new = [t for t in tasks if t not in have]
    records += [{"task": t, "row": golden_row(t)} for t in new]
    path.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{path}: {len(new)} rows added, {len(records)} in all")


def centralization_tasks() -> list[dict]:
    base = {"n_servers": 50, "lam": 0.8, "p": 0.2}
    out = [_sim("agent", "central", 41, **base), _sim("occupancy", "central", 42, **base),
           _limit("meanfield", "central", **base), _traj("central", 43, **base),
           # declared by its transitions (issue 38): the population engine, stationary and paths
           _sim("population", "central", 44, **base), _traj("central", 45, "population_trajectory", **base)]
    return [{"model": "centralization", **t} for t in out]


def jiq_tasks() -> list[dict]:
    base = {"n_servers": 50, "lam": 0.8, "r": 5.0}
    extra = {"jiq": {}, "jiq_pod": {"d": 2}, "jiq_original": {}, "jiq_threshold": {"z": 1},
             "jiq_sqd": {"d": 2}}
    out = []
    for i, (pol, more) in enumerate(extra.items()):
        out.append(_sim("agent", pol, 51 + i, **base, **more))
    for i, pol in enumerate(("jiq", "jiq_pod", "jiq_sqd")):
        out += [_sim("occupancy", pol, 61 + i, **base, **extra[pol]),
                _limit("meanfield", pol, **base, **extra[pol]),
                _limit("refined", pol, **base, **extra[pol])]
    out += [_traj("jiq", 71, **base), _traj("jiq_pod", 72, **base, d=2)]
    # jiq and jiq_pod declared by their transitions (issue 38, sim.jiq.population)
    out += [_sim("population", "jiq", 73, **base), _sim("population", "jiq_pod", 74, **base, d=2)]
    for pol in ("jiq", "jiq_pod"):
        out += [_limit("population_meanfield", pol, **base, **extra[pol]),
                _limit("population_refined", pol, **base, **extra[pol])]
    return [{"model": "jiq", **t} for t in out]


def led_tasks() -> list[dict]:
    base = {"n_servers": 20, "lam": 0.8, "m_dispatchers": 2}
    out = [
        _sim("slotted", "l_jsq", 81, **base, update="push", p_hat=0.5),
        _sim("slotted", "l_jsq", 82, **{**base, "m_dispatchers": 20}, update="pull", p_hat=0.5,
             arrival_dist="bernoulli"),
        _sim("slotted", "l_jba", 83, **base, update="push", p_hat=0.5),
        _sim("slotted", "l_pod", 84, **base, d=2, update="pull", p_hat=0.5),
        _sim("slotted", "jsq", 85, **base, ties="shared"),
        _sim("slotted", "pod", 86, **base, d=2),
        _sim("slotted", "jiq", 87, **base),
        _sim("slotted", "random", 88, **base, service_dist="geometric"),
        _sim("slotted", "weighted_random", 89, n_servers=4, lam=0.8,
             service_rates=[0.5, 0.5, 1.0, 1.0], service_dist="bernoulli"),
    ]
    return [{"model": "led", **t} for t in out]


TASKS = {"dispatch": dispatch_tasks, "centralization": centralization_tasks, "jiq": jiq_tasks,
         "led": led_tasks}


def golden_row(task: dict) -> dict:
    """``sim.run(task)`` without its timing fields."""
    import sim

    row = sim.run(dict(task))
    return {k: v for k, v in row.items() if k not in TIMING}


def main(models: list[str]) -> None:
    for name in models or list(TASKS):
        records = [{"task": t, "row": golden_row(t)} for t in TASKS[name]()]
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(records, indent=1) + "\n")
        print(f"{path}: {len(records)} rows")


if __name__ == "__main__":
    if sys.argv[1:] == ["--append-general"]:
        append("dispatch", [{"model": "dispatch", **t} for t in general_tasks()])
    elif sys.argv[1:] == ["--append-law-limits"]:
        append("dispatch", [{"model": "dispatch", **t} for t in law_limit_tasks()])
    else:
        main(sys.argv[1:])
