"""Policy and engine registry, and the checks every task passes before any compute.

Policies are dispatched to compiled kernels by integer code (never by passing jitted
functions around): see ``../shared/DESIGN.md``.
"""
from __future__ import annotations

import math

from sim.core.results import INIT_CHOICES

#: policy name -> integer code used inside compiled kernels
POLICIES: dict[str, int] = {
    "random": 0,          # uniform server (per task when k > 1)
    "jsq": 1,             # join the shortest queue (per task when k > 1)
    "pod": 2,             # power-of-d, single-task jobs (k = 1)
    "batch_filling": 3,   # k tasks into k*d sampled queues, each into the current shortest
    "batch_sampling": 4,  # k tasks to the k shortest of k*d sampled queues
    "pod_per_task": 5,    # each task samples its own k*d queues and joins the shortest
    "central": 6,         # partial centralization (Tsitsiklis-Xu): no dispatching
}

#: policies for parallel (k-task) jobs; with k = 1 each is power-of-d
BATCH_POLICIES = ("batch_filling", "batch_sampling", "pod_per_task")

#: (engine, policy) -> "module:function" that runs such a task (imported only when used, so
#: that each engine's compiled kernels load only in the processes that need them)
RUNNERS: dict[tuple[str, str], str] = {
    # random / jsq / pod: sim.parallel.run_task sends k = 1 without a buffer on to sim.agent
    ("agent", "random"): "sim.dispatch.parallel:run_task",
    ("agent", "jsq"): "sim.dispatch.parallel:run_task",
    ("agent", "pod"): "sim.dispatch.parallel:run_task",
    ("meanfield", "random"): "sim.dispatch.meanfield:run_task",
    ("meanfield", "jsq"): "sim.dispatch.meanfield:run_task",
    ("meanfield", "pod"): "sim.dispatch.meanfield:run_task",
    ("meanfield", "batch_filling"): "sim.dispatch.batch_meanfield:run_task",
    # parallel jobs (k tasks per job): agent engine with k-task jobs, and the occupancy engine
    ("agent", "batch_filling"): "sim.dispatch.parallel:run_task",
    ("agent", "batch_sampling"): "sim.dispatch.parallel:run_task",
    ("agent", "pod_per_task"): "sim.dispatch.parallel:run_task",
    ("occupancy", "random"): "sim.dispatch.occupancy:run_task",
    ("occupancy", "jsq"): "sim.dispatch.occupancy:run_task",
    ("occupancy", "pod"): "sim.dispatch.occupancy:run_task",
    ("occupancy", "batch_filling"): "sim.dispatch.occupancy:run_task",
    ("occupancy", "batch_sampling"): "sim.dispatch.occupancy:run_task",
    ("occupancy", "pod_per_task"): "sim.dispatch.occupancy:run_task",
    # partial centralization
    ("agent", "central"): "sim.centralization.simulate:run_agent_task",
    ("occupancy", "central"): "sim.centralization.simulate:run_occupancy_task",
    ("meanfield", "central"): "sim.centralization.simulate:run_meanfield_task",
}

#: engine name -> the policies it serves
ENGINE_POLICIES: dict[str, tuple[str, ...]] = {}
for (_engine, _policy) in RUNNERS:
    ENGINE_POLICIES.setdefault(_engine, ())
    ENGINE_POLICIES[_engine] += (_policy,)
ENGINES: tuple[str, ...] = tuple(ENGINE_POLICIES)

#: model parameters a task may carry, with their types (n_servers and lam always)
PARAM_TYPES: dict[str, type] = {
    "n_servers": int,
    "lam": float,
    "d": int,      # probes per task (pod: queues sampled per job)
    "k": int,      # tasks per job (default 1)
    "b": int,      # buffer per server, the task in service included (default: unbounded)
    "p": float,    # central fraction of the processing (policy central)
}

#: parameters each policy needs beyond n_servers and lam
POLICY_PARAMS: dict[str, tuple[str, ...]] = {
    "random": (), "jsq": (), "pod": ("d",),
    "batch_filling": ("d", "k"), "batch_sampling": ("d", "k"), "pod_per_task": ("d", "k"),
    "central": ("p",),
}

#: engines whose output is random (they take seeds and replications)
STOCHASTIC_ENGINES: tuple[str, ...] = ("agent", "occupancy")



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
    k = task.get("k", 1)
    if not _is_int(k) or k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1")
    if k > 1 and policy in ("pod", "central"):
        raise ValueError(
            f"k={k!r}: policy {policy!r} serves single-task jobs; for k-task jobs use one of "
            f"{', '.join(BATCH_POLICIES)}, random or jsq"
        )
    if k > n:
        raise ValueError(f"k={k!r} must not exceed n_servers={n!r}")
    b = task.get("b")
    if b is not None and (not _is_int(b) or b < 1):
        raise ValueError(f"b={b!r} must be an integer >= 1 (or absent: unbounded)")
    if b is not None and engine == "meanfield" and policy != "central":
        raise ValueError(f"b={b!r}: the meanfield engine has no finite buffer; use the simulators")
    lam = task.get("lam")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not math.isfinite(lam):
        raise ValueError(f"lam={lam!r} must be a finite number")
    if b is None and not 0.0 <= lam < 1.0:
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1 (queues are unbounded)")
    if lam < 0:
        raise ValueError(f"lam={lam!r} must be >= 0")
    if "d" in POLICY_PARAMS[policy]:
        d = task.get("d")
        if not _is_int(d) or d < 1:
            raise ValueError(f"d={d!r} must be an integer >= 1")
        if k * d > n:
            what = f"d={d!r}" if k == 1 else f"k*d={k * d} (k={k!r}, d={d!r})"
            raise ValueError(f"{what} must not exceed n_servers={n!r} (sampling without replacement)")
    if policy == "central":
        pc = task.get("p")
        if not isinstance(pc, (int, float)) or isinstance(pc, bool) or not 0.0 <= pc <= 1.0:
            raise ValueError(f"p={pc!r} must be a number in [0, 1]")
    if engine in STOCHASTIC_ENGINES:
        if lam <= 0:
            raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
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
