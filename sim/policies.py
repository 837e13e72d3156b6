"""Policy and engine registry, and the checks every task passes before any compute.

Policies are dispatched to compiled kernels by integer code (never by passing jitted
functions around): see ``../shared/DESIGN.md``.
"""
from __future__ import annotations

import math

#: policy name -> integer code used inside compiled kernels
POLICIES: dict[str, int] = {"random": 0, "jsq": 1, "pod": 2}

#: (engine, policy) -> "module:function" that runs such a task (imported only when used, so
#: that each engine's compiled kernels load only in the processes that need them)
RUNNERS: dict[tuple[str, str], str] = {
    ("agent", "random"): "sim.agent:run_task",
    ("agent", "jsq"): "sim.agent:run_task",
    ("agent", "pod"): "sim.agent:run_task",
    ("meanfield", "random"): "sim.meanfield:run_task",
    ("meanfield", "jsq"): "sim.meanfield:run_task",
    ("meanfield", "pod"): "sim.meanfield:run_task",
}

#: engine name -> the policies it serves
ENGINE_POLICIES: dict[str, tuple[str, ...]] = {}
for (_engine, _policy) in RUNNERS:
    ENGINE_POLICIES.setdefault(_engine, ())
    ENGINE_POLICIES[_engine] += (_policy,)
ENGINES: tuple[str, ...] = tuple(ENGINE_POLICIES)

#: model parameters a task may carry, with their types (n_servers and lam always)
PARAM_TYPES: dict[str, type] = {"n_servers": int, "lam": float, "d": int}

#: parameters each policy needs beyond n_servers and lam
POLICY_PARAMS: dict[str, tuple[str, ...]] = {"random": (), "jsq": (), "pod": ("d",)}

#: engines whose output is random (they take seeds and replications)
STOCHASTIC_ENGINES: tuple[str, ...] = ("agent",)

INIT_CHOICES = ("meanfield", "empty")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) or (
        isinstance(x, float) and x.is_integer()
    )


def check_task(task: dict) -> None:
    """Raise ``ValueError`` with the offending key and value if ``task`` cannot run."""
    engine = task.get("engine")
    if engine not in ENGINE_POLICIES:
        raise ValueError(f"engine={engine!r} is unknown; valid engines: {', '.join(ENGINES)}")
    policy = task.get("policy")
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is unknown; valid policies: {', '.join(POLICIES)}")
    if policy not in ENGINE_POLICIES[engine]:
        raise ValueError(
            f"policy={policy!r} is not served by engine={engine!r}; "
            f"it serves: {', '.join(ENGINE_POLICIES[engine])}"
        )
    n = task.get("n_servers")
    if not _is_int(n) or n < 1:
        raise ValueError(f"n_servers={n!r} must be an integer >= 1")
    lam = task.get("lam")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not math.isfinite(lam):
        raise ValueError(f"lam={lam!r} must be a finite number")
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1 (queues are unbounded)")
    if policy == "pod":
        d = task.get("d")
        if not _is_int(d) or d < 1:
            raise ValueError(f"d={d!r} must be an integer >= 1")
        if d > n:
            raise ValueError(f"d={d!r} must not exceed n_servers={n!r} (sampling without replacement)")
    if engine in STOCHASTIC_ENGINES:
        ev = task.get("events")
        if not _is_int(ev) or ev < 1000:
            raise ValueError(f"events={ev!r} must be an integer >= 1000")
        init = task.get("init", "meanfield")
        if init not in INIT_CHOICES:
            raise ValueError(f"init={init!r} is unknown; valid: {', '.join(INIT_CHOICES)}")
        nb = task.get("n_batches", 20)
        if not _is_int(nb) or nb < 2:
            raise ValueError(f"n_batches={nb!r} must be an integer >= 2")
        seed = task.get("seed")
        if not _is_int(seed) or seed < 0:
            raise ValueError(f"seed={seed!r} must be a non-negative integer")
