"""Fan tasks out on Ray (a local cluster by default, or an existing one), with progress.

Small tasks are grouped so that each Ray task does at least ``min_task_seconds`` of work by
a planning estimate of its cost; rows come back to the driver, which alone writes files.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tqdm import tqdm

from sim.registry import STOCHASTIC_ENGINES

from pipeline import worker

log = logging.getLogger(__name__)

#: rough cost of one mean-field task, seconds (used only for grouping)
MEANFIELD_SECONDS = 0.05
PROJECT_ROOT = Path(__file__).resolve().parent.parent


#: planning cost of one slot of the slotted engine, in agent events: a slot serves every server
#: (measured here: about 30-110 ns per server per slot, against 8-20 ns per agent event)
SLOT_EVENTS_PER_SERVER = 5.0


def estimated_seconds(task: dict, events_per_second: float) -> float:
    if task["engine"] == "slotted":
        return task["events"] * task["n_servers"] * SLOT_EVENTS_PER_SERVER / events_per_second
    if task["engine"] in STOCHASTIC_ENGINES:
        return task["events"] / events_per_second
    return MEANFIELD_SECONDS


def group_tasks(tasks: list[dict], min_seconds: float, events_per_second: float) -> list[list[dict]]:
    """Consecutive tasks grouped until each group's estimated cost reaches ``min_seconds``."""
    groups: list[list[dict]] = []
    current: list[dict] = []
    cost = 0.0
    for task in tasks:
        current.append(task)
        cost += estimated_seconds(task, events_per_second)
        if cost >= min_seconds:
            groups.append(current)
            current, cost = [], 0.0
    if current:
        groups.append(current)
    return groups


def ray_address(exec_cfg: dict) -> str | None:
    return os.environ.get("RAY_ADDRESS") or exec_cfg.get("address")


def init_ray(exec_cfg: dict) -> bool:
    """Start or join Ray; return True if this call started it (and should stop it)."""
    address = ray_address(exec_cfg)
    import ray

    if ray.is_initialized():
        return False
    if address:
        # Joining a cluster: never pass num_cpus (it raises). Ship our two packages unless
        # the job already runs from the project's working directory (ray job submit).
        runtime_env = None
        if not os.environ.get("RAY_JOB_ID") and address != "auto":
            runtime_env = {"py_modules": [str(PROJECT_ROOT / "sim"), str(PROJECT_ROOT / "pipeline")]}
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
    else:
        # a local cluster sized to this machine
        ray.init(
            num_cpus=exec_cfg.get("num_cpus") or os.cpu_count(),
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )
    return True


def execute(
    tasks: list[dict],
    exec_cfg: dict,
    on_row: Callable[[dict], None],
    desc: str = "tasks",
) -> int:
    """Run every task, calling ``on_row`` on the driver for each result row; return #errors."""
    groups = group_tasks(tasks, exec_cfg["min_task_seconds"], exec_cfg["events_per_second"])
    bar = tqdm(total=len(tasks), desc=desc, unit="task", disable=not exec_cfg.get("progress", True),
               dynamic_ncols=True, smoothing=0.1)
    errors = 0

    def deliver(rows: Iterable[dict]) -> None:
        nonlocal errors
        for row in rows:
            errors += row["status"] == "error"  # "unstable" (slotted engine) is a result
            on_row(row)
            bar.update(1)

    try:
        if exec_cfg["backend"] == "serial":
            worker.configure_numba(1)
            for group in groups:
                deliver([worker.run_one(t) for t in group])
        else:
            _execute_ray(groups, exec_cfg, deliver)
    finally:
        bar.close()
    return errors


def _execute_ray(groups: list[list[dict]], exec_cfg: dict, deliver: Callable) -> None:
    import ray

    started = init_ray(exec_cfg)
    try:
        remote = ray.remote(num_cpus=1, max_retries=int(exec_cfg["max_retries"]))(worker.run_chunk)
        pending = {remote.remote(g): g for g in groups}
        t0 = time.perf_counter()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                group = pending.pop(ref)
                try:
                    rows = ray.get(ref)
                except Exception as exc:  # the worker died even after retries
                    log.error("a Ray task of %d tasks failed: %s", len(group), exc)
                    rows = [_failed_row(t, exc) for t in group]
                deliver(rows)
        log.info("executed %d Ray tasks in %.1f s", len(groups), time.perf_counter() - t0)
    finally:
        if started:
            ray.shutdown()


def _failed_row(task: dict, exc: BaseException) -> dict:
    return {**worker.row_header(task), "status": "error", "error": f"Ray task failed: {exc}"}
