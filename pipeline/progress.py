"""The progress bar of a sweep: one step per finished task, with an ETA learned from the tasks
that have finished.

The planning estimate of a task's cost (:func:`pipeline.execute.estimated_seconds`) ranks the
tasks of one kind well (more events cost more) but its per-event cost can be off by an order of
magnitude between kinds (measured: 12-60 ns an event for most batch arms, about 1 us for batch
sampling with d = 2 at large N, against one planning speed for all). So the bar does not trust
it alone: each finished row brings its measured ``wall_time``, and for each kind of task
(engine, policy, variant) :class:`Eta` keeps the ratio of measured seconds to estimated seconds
over the finished tasks of that kind (a kind with none finished yet takes the ratio over the
finished tasks of its class, simulations or limit tasks, and 1 before any of them finished).
The first task of a kind in a worker process is not learned from: its time includes loading
(or compiling) that kind's kernels, measured at 12 s against 0.4 s for the task itself on a
loaded 2-core machine, which would make its kind look 30 times dearer. The remaining work is the sum, over the unfinished tasks, of their estimate
times their kind's ratio; the ETA is that work spread over the CPUs; the bar's fill is the
measured work done over the measured work done plus the remaining work. Ratios are over sums
(measured / estimated), so large tasks weigh most and the fixed cost of a small task (a
worker's first import, say) does not blow up the ratio of its kind.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from tqdm import tqdm

from sim.registry import STOCHASTIC_ENGINES


def kind(task_or_row: dict) -> tuple:
    """(engine, policy, variant): tasks of one kind share a per-event cost."""
    variant = task_or_row.get("variant")
    if variant is None and "_meta" in task_or_row:
        variant = task_or_row["_meta"]["params"].get("variant")
    return task_or_row.get("engine"), task_or_row.get("policy"), variant or ""


def _simulation(k: tuple) -> bool:
    return k[0] in STOCHASTIC_ENGINES


class Eta:
    """Remaining wall time of a set of tasks, learned from the measured time of those done.

    ``estimates``: task id -> (kind, planning estimate in seconds). ``cpus``: how many tasks run
    at once."""

    def __init__(self, estimates: dict[int, tuple[tuple, float]], cpus: int):
        self.cpus = max(1, int(cpus))
        self.todo = dict(estimates)
        self.est_left: dict[tuple, float] = defaultdict(float)  # estimated seconds not yet done
        for k, e in self.todo.values():
            self.est_left[k] += e
        self.measured: dict[tuple, float] = defaultdict(float)  # measured seconds of the done
        self.estimated: dict[tuple, float] = defaultdict(float)  # their estimated seconds
        self.done_seconds = 0.0  # measured seconds of every done task (the work done)

    def finish(self, task_id: int, wall_time: float | None, learn: bool = True) -> None:
        """Task ``task_id`` is done; ``wall_time`` its measured seconds (None: not measured, e.g.
        a failed task). ``learn=False``: the time counts as work done but says nothing of the
        cost of its kind (the first task of a kind in a worker, which loads its kernels)."""
        if task_id not in self.todo:
            return
        k, e = self.todo.pop(task_id)
        self.est_left[k] -= e
        if wall_time is None or wall_time < 0.0:
            return
        self.done_seconds += wall_time
        if learn:
            self.measured[k] += wall_time
            self.estimated[k] += e

    def ratio(self, k: tuple) -> float:
        """Measured over estimated seconds of the done tasks of kind ``k``; for a kind with none
        done, that of the done tasks of its class (simulations, or limit tasks: their estimates
        err in unrelated ways); for a class with none done, 1 (the planning estimate)."""
        if self.estimated[k] > 0.0:
            return self.measured[k] / self.estimated[k]
        same = [j for j in self.estimated if _simulation(j) == _simulation(k)]
        est = sum(self.estimated[j] for j in same)
        return sum(self.measured[j] for j in same) / est if est > 0.0 else 1.0

    def remaining_work(self) -> float:
        """CPU seconds of the unfinished tasks."""
        if not self.todo:
            return 0.0
        return sum(e * self.ratio(k) for k, e in self.est_left.items() if e > 0.0)

    def remaining_seconds(self) -> float:
        """Wall seconds to the end: the remaining work on at most ``cpus`` tasks at once."""
        return self.remaining_work() / min(self.cpus, len(self.todo)) if self.todo else 0.0

    def fraction_done(self) -> float:
        """Measured work done over that plus the remaining work."""
        total = self.done_seconds + self.remaining_work()
        return self.done_seconds / total if total > 0.0 else 1.0


class _Bar(tqdm):
    """A tqdm bar whose ``{eta}`` field is set by the caller (tqdm's own ETA extrapolates the
    rate of the bar's units, which here would be the stale planning estimate)."""

    eta_text = "?"

    @property
    def format_dict(self):
        d = super().format_dict
        d["eta"] = self.eta_text
        return d


class Progress:
    """The bar of one :func:`pipeline.execute.execute` call: :meth:`task_done` once per finished
    task (the driver calls it as each row arrives)."""

    #: bar units: the fill is a fraction of work, shown in thousandths
    SCALE = 1000

    def __init__(self, tasks: list[dict], cost: Callable[[dict], float], cpus: int, desc: str,
                 enabled: bool = True):
        self.n_tasks = len(tasks)
        self.desc = desc
        self.done = self.failed = 0
        self.eta = Eta({t["_meta"]["task_id"]: (kind(t), cost(t)) for t in tasks}, cpus)
        self.bar = _Bar(total=self.SCALE, desc=desc, disable=not enabled, dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{eta}]")
        self.bar.eta_text = tqdm.format_interval(self.eta.remaining_seconds())  # the plan's, at first
        self.bar.set_description_str(f"{desc} 0/{self.n_tasks} tasks")

    def task_done(self, row: dict, measured: bool = True) -> None:
        """``row``'s task is done; ``measured=False``: its time is not its kind's cost
        (:data:`pipeline.worker.FIRST_OF_KIND`)."""
        self.done += 1
        self.failed += row.get("status") == "error"
        wall = row.get("wall_time") if row.get("status") != "error" else None
        self.eta.finish(row.get("task_id"), wall, learn=measured)
        self.bar.eta_text = tqdm.format_interval(self.eta.remaining_seconds())
        n = self.SCALE if self.done >= self.n_tasks else min(self.SCALE - 1, int(self.SCALE * self.eta.fraction_done()))
        self.bar.set_description_str(f"{self.desc} {self.done}/{self.n_tasks} tasks"
                                     + (f" ({self.failed} failed)" if self.failed else ""), refresh=False)
        self.bar.n = max(self.bar.n, n)  # the fill never goes back, even when the ETA grows
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

