"""The memory check of a plan: every task's estimated peak memory against a share of the machine's.

Each model estimates the bytes of one task's arrays from its parameters
(:attr:`sim.core.declare.Model.memory_bytes`, closed forms: nothing is allocated); the plan
refuses a sweep whose largest task would need more than ``execution.memory_share`` of the
memory a task may use (``execution.memory_gib``, or this machine's: its physical memory, or its
cgroup limit where that is lower), before any compute and before a dry run's timing runs.
docs/sweeps.md states the rule and how close the estimates are.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from pipeline.errors import ConfigError
from sim import registry

__all__ = ["machine_memory", "allowed_bytes", "largest_task", "check_memory", "fmt_bytes"]

GiB = 2**30
#: ``execution.memory_share``'s default
DEFAULT_SHARE = 0.5
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory() -> tuple[float, str]:
    """(bytes, where from): this machine's physical memory (``os.sysconf``, else
    /proc/meminfo), or its cgroup's limit where that is lower (a container)."""
    total, source = math.inf, "unknown"
    try:
        total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        source = "this machine's memory"
    except (ValueError, OSError, AttributeError):
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    total, source = float(line.split()[1]) * 1024, "this machine's memory"
        except OSError:
            pass
    for name in _CGROUP_FILES:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and float(text) < total:
            total, source = float(text), f"this machine's cgroup limit ({name})"
    return total, source


def fmt_bytes(b: float) -> str:
    if b >= GiB:
        return f"{b / GiB:.3g} GiB"
    return f"{b / 2**20:.3g} MiB"


def check_settings(ex: dict) -> None:
    """``ConfigError`` unless ``execution.memory_share`` is in (0, 1] and
    ``execution.memory_gib`` null or positive."""
    share = ex.get("memory_share", DEFAULT_SHARE)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ConfigError(f"execution.memory_share={share!r} must be a number in (0, 1]: the share of "
                          "the memory (execution.memory_gib, or this machine's) one task may use")
    gib = ex.get("memory_gib")
    if gib is not None and (isinstance(gib, bool) or not isinstance(gib, (int, float))
                            or not math.isfinite(gib) or gib <= 0):
        raise ConfigError(f"execution.memory_gib={gib!r} must be null (this machine's memory) or a "
                          "positive number of GiB (on a cluster: its smallest node's)")


def allowed_bytes(ex: dict) -> tuple[float, float, str]:
    """(bytes one task may use, the total it is a share of, where the total comes from)."""
    share = float(ex.get("memory_share", DEFAULT_SHARE))
    gib = ex.get("memory_gib")
    if gib is not None:
        total, source = float(gib) * GiB, "execution.memory_gib"
    else:
        total, source = machine_memory()
    return share * total, total, source


def task_bytes(task: dict) -> float:
    """The task's model's estimate of its peak bytes (``ConfigError`` if the hook fails)."""
    try:
        return float(registry.model_of(task).memory_bytes(task))
    except (ValueError, TypeError, ArithmeticError, KeyError) as exc:
        raise ConfigError(f"the memory estimate of task {task['_meta']['task_id']} (engine="
                          f"{task['engine']}, policy={task['policy']}) failed: {exc}") from None


def largest_task(tasks: list[dict]) -> tuple[float, dict | None]:
    """(bytes, task) of the task with the largest estimate (replications share their point's)."""
    best, which = 0.0, None
    for t in tasks:
        if t["_meta"]["replication"] != 0:
            continue
        b = task_bytes(t)
        if which is None or b > best:
            best, which = b, t
    return best, which


def describe_task(task: dict) -> str:
    keys = [k for k in ("n_servers", "k", "d", "b", "r", "m_dispatchers") if task.get(k) is not None]
    from pipeline.formulas import brief

    return (f"engine={task['engine']}, policy={task['policy']}, "
            + ", ".join(f"{k}={task[k]:.6g}" if isinstance(task[k], float) else f"{k}={brief(task[k])}"
                        for k in keys))


def check_memory(tasks: list[dict], ex: dict) -> dict:
    """Refuse (``ConfigError``, one line naming the task's N, engine and estimate) if the largest
    task's estimate exceeds the allowed share; else return what ``plan=true`` reports."""
    check_settings(ex)
    need, task = largest_task(tasks)
    allowed, total, source = allowed_bytes(ex)
    out = {"bytes": need, "allowed": allowed, "total": total, "source": source,
           "task": describe_task(task) if task is not None else None}
    if task is not None and need > allowed:
        share = float(ex.get("memory_share", DEFAULT_SHARE))
        raise ConfigError(
            f"task {task['_meta']['task_id']} ({describe_task(task)}) needs about {fmt_bytes(need)} "
            f"of memory (estimate), more than execution.memory_share={share:g} of {fmt_bytes(total)} "
            f"({source}) = {fmt_bytes(allowed)}: use a smaller N (or k), an engine whose memory does "
            "not grow with N (occupancy), or raise execution.memory_share / execution.memory_gib")
    return out
