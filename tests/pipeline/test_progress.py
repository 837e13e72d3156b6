"""The progress bar: one step per finished task, also when a Ray task runs a group of several
(rows stream back in batches as tasks end), rows delivered once through a worker's death, and an ETA
learned from the measured time of the finished tasks."""
from __future__ import annotations

import os
import time

import pytest

from pipeline import execute, progress, worker
from pipeline.plan import make_plan
from pipeline.progress import Eta
from pipeline.run import to_plain
from tests.helpers import compose


def _tasks(replications: int = 6) -> list[dict]:
    plan = make_plan(to_plain(compose(["+sweep=smoke", "output_dir=/tmp/unused", f"replications={replications}"])))
    return plan.tasks


# ---- the learned ETA (no Ray)

def test_eta_learns_each_kind_from_its_finished_tasks():
    a, b = ("agent", "pod", ""), ("agent", "jsq", "")
    # estimates: kind a 4 tasks of 1 s, kind b 2 tasks of 1 s; truth: a takes 2 s, b takes 10 s
    eta = Eta({0: (a, 1.0), 1: (a, 1.0), 2: (a, 1.0), 3: (a, 1.0), 4: (b, 1.0), 5: (b, 1.0)}, cpus=2)
    assert eta.remaining_seconds() == pytest.approx(6.0 / 2)  # nothing measured: the plan's
    eta.finish(0, 2.0)
    # a's ratio 2; b, with none done, takes the ratio of the simulations done (2)
    assert eta.remaining_work() == pytest.approx(3 * 2.0 + 2 * 2.0)
    eta.finish(4, 10.0)
    assert eta.ratio(b) == pytest.approx(10.0) and eta.ratio(a) == pytest.approx(2.0)
    assert eta.remaining_work() == pytest.approx(3 * 2.0 + 1 * 10.0)
    assert eta.remaining_seconds() == pytest.approx(16.0 / 2)
    assert eta.fraction_done() == pytest.approx(12.0 / 28.0)
    for i in (1, 2, 3):
        eta.finish(i, 2.0)
    assert eta.remaining_seconds() == pytest.approx(10.0)  # one task left: one CPU works
    eta.finish(5, 10.0)
    assert eta.remaining_seconds() == 0.0 and eta.fraction_done() == 1.0


def test_eta_keeps_limit_tasks_apart_and_ignores_failures_and_repeats():
    sim, lim = ("agent", "pod", ""), ("meanfield", "pod", "")
    eta = Eta({0: (lim, 0.05), 1: (sim, 1.0), 2: (sim, 1.0)}, cpus=1)
    eta.finish(0, 0.001)  # a fast limit task says nothing about the simulations
    assert eta.ratio(sim) == 1.0 and eta.remaining_work() == pytest.approx(2.0)
    eta.finish(1, None)  # failed: done, but not a measurement
    assert eta.ratio(sim) == 1.0 and eta.remaining_work() == pytest.approx(1.0)
    eta.finish(1, 5.0)  # a second report of a finished task changes nothing
    assert eta.remaining_work() == pytest.approx(1.0)


def test_first_task_of_a_kind_in_a_worker_is_work_done_but_not_learned_from():
    a = ("occupancy", "batch_sampling", "const2")
    eta = Eta({0: (a, 1.0), 1: (a, 1.0), 2: (a, 1.0)}, cpus=1)
    eta.finish(0, 30.0, learn=False)  # its kernels loaded: 30 s
    assert eta.ratio(a) == 1.0 and eta.remaining_work() == pytest.approx(2.0)
    assert eta.fraction_done() == pytest.approx(30.0 / 32.0)
    eta.finish(1, 2.0)
    assert eta.ratio(a) == pytest.approx(2.0) and eta.remaining_work() == pytest.approx(2.0)


def test_worker_marks_the_first_task_of_each_kind_in_its_process(monkeypatch):
    import sim

    monkeypatch.setattr(sim, "run", lambda task: {"wall_time": 0.0})
    monkeypatch.setattr(worker, "_kinds_seen", set())
    tasks = _tasks(2)
    marks = [worker.run_timed(t)[worker.FIRST_OF_KIND] for t in tasks]
    kinds = [progress.kind(t) for t in tasks]
    assert marks == [k not in kinds[:i] for i, k in enumerate(kinds)]
    assert sum(marks) == len(set(kinds)) >= 2


def test_run_order_is_a_fixed_shuffle_of_the_group():
    tasks = _tasks()
    order = execute.run_order(tasks)
    assert sorted(t["_meta"]["task_id"] for t in order) == sorted(t["_meta"]["task_id"] for t in tasks)
    assert order == execute.run_order(list(reversed(tasks)))  # the order of the input does not matter
    # the tasks of the largest N are not held to the end: some run in the first half
    big = max(t["n_servers"] for t in tasks)
    assert any(t["n_servers"] == big for t in order[:len(order) // 2])


# ---- the bar advances once per finished task, on a local Ray session

@pytest.fixture
def recorded(monkeypatch):
    """Each call of Progress.task_done: (task_id, the bar's fill after it)."""
    calls = []
    real = progress.Progress.task_done

    def task_done(self, row, measured=True):
        real(self, row, measured)
        calls.append((row["task_id"], self.bar.n))

    monkeypatch.setattr(progress.Progress, "task_done", task_done)
    return calls


def _streaming_fake(flag_dir: str, crash_once_at: int | None = None, batch: int = 1):
    """A stand-in for worker.run_chunk (pickled by value: it is a closure) that yields its rows
    in batches of ``batch``. Before each batch but a group's first, it waits (up to 120 s) until
    the driver has stored the previous task's row, and records in its row whether it had: with
    rows held back until the group ends the wait times out. ``crash_once_at``: the worker dies
    (once) just before that task."""
    def run_chunk(tasks):
        rows = []
        for i, t in enumerate(tasks):
            seen_before = True
            if i > 0 and not rows:
                flag = os.path.join(flag_dir, str(tasks[i - 1]["_meta"]["task_id"]))
                deadline = time.time() + 120
                while not os.path.exists(flag) and time.time() < deadline:
                    time.sleep(0.02)
                seen_before = os.path.exists(flag)
            if t["_meta"]["task_id"] == crash_once_at and not os.path.exists(os.path.join(flag_dir, "crashed")):
                open(os.path.join(flag_dir, "crashed"), "w").close()
                os._exit(1)
            rows.append({**worker.row_header(t), "wall_time": 0.01, "node": "fake", "seen_before": seen_before})
            if len(rows) == batch:
                yield rows
                rows = []
        if rows:
            yield rows
    return run_chunk


def _run(tasks, tmp_path, monkeypatch, max_retries=0, crash_once_at=None, batch=1):
    monkeypatch.setattr(worker, "run_chunk", _streaming_fake(str(tmp_path), crash_once_at, batch))
    rows = []

    def on_row(row):
        rows.append(row)
        (tmp_path / str(row["task_id"])).touch()

    exec_cfg = {"backend": "ray", "tasks_per_cpu": 1, "events_per_second": 5e7, "max_retries": max_retries,
                "progress": True}
    session = execute.Session("ray", None, 2)
    groups = execute.group_tasks(tasks, 2, 1, 5e7)
    errors = execute.execute(tasks, exec_cfg, on_row, session=session)
    return rows, errors, groups


def test_bar_advances_once_per_task_while_groups_run(ray_cluster, tmp_path, monkeypatch, recorded):
    tasks = _tasks()
    rows, errors, groups = _run(tasks, tmp_path, monkeypatch)
    assert len(groups) == 2 and min(len(g) for g in groups) >= 5  # groups of several tasks
    assert errors == 0
    assert sorted(r["task_id"] for r in rows) == sorted(t["_meta"]["task_id"] for t in tasks)
    assert all(r["seen_before"] for r in rows)  # each row reached the driver before the next task ran
    assert [tid for tid, _ in recorded] == [r["task_id"] for r in rows]  # one step per row
    fills = [n for _, n in recorded]
    assert fills == sorted(fills) and fills[-1] == progress.Progress.SCALE


def test_a_worker_dying_mid_group_is_retried_without_duplicates(ray_cluster, tmp_path, monkeypatch, recorded):
    tasks = _tasks()
    groups = [execute.run_order(g) for g in execute.group_tasks(tasks, 2, 1, 5e7)]
    victim = groups[0][2]["_meta"]["task_id"]  # the group's first batch (two rows) is out when it dies
    rows, errors, _ = _run(tasks, tmp_path, monkeypatch, max_retries=1, crash_once_at=victim, batch=2)
    assert (tmp_path / "crashed").exists() and errors == 0
    ids = [r["task_id"] for r in rows]
    assert sorted(ids) == sorted(t["_meta"]["task_id"] for t in tasks)  # each once, none lost
    assert len(recorded) == len(tasks)


def test_a_group_lost_for_good_fails_only_its_undelivered_tasks(ray_cluster, tmp_path, monkeypatch, recorded):
    tasks = _tasks()
    groups = [execute.run_order(g) for g in execute.group_tasks(tasks, 2, 1, 5e7)]
    victim = groups[0][2]["_meta"]["task_id"]
    rows, errors, _ = _run(tasks, tmp_path, monkeypatch, max_retries=0, crash_once_at=victim)
    ids = [r["task_id"] for r in rows]
    assert sorted(ids) == sorted(t["_meta"]["task_id"] for t in tasks)
    failed = {r["task_id"] for r in rows if r["status"] == "error"}
    assert failed == {t["_meta"]["task_id"] for t in groups[0][2:]} and errors == len(failed)
    assert all(r["error"].startswith("Ray task failed") for r in rows if r["status"] == "error")
    assert len(recorded) == len(tasks)


def test_serial_backend_and_no_bar(tmp_path, monkeypatch, recorded):
    import sim

    monkeypatch.setattr(sim, "run", lambda task: {"wall_time": 0.0})
    tasks = _tasks(2)
    rows = []
    errors = execute.execute(tasks, {"backend": "serial", "tasks_per_cpu": 4, "events_per_second": 5e7,
                                     "max_retries": 0, "progress": False}, rows.append)
    assert errors == 0 and len(rows) == len(tasks) == len(recorded)


def test_worker_sends_rows_in_batches_by_count_and_by_time(monkeypatch):
    """worker.run_chunk (called here as a plain generator): a batch goes when it holds
    ``batch_rows`` rows or when a task ends ``batch_seconds`` after the previous batch went;
    every row once, in run order."""
    tasks = _tasks()[:7]
    clock = {"t": 0.0}
    durations = iter([0.1, 0.1, 0.1, 0.1, 5.0, 0.1, 0.1])  # the fifth task is long

    def run_timed(task):
        clock["t"] += next(durations)
        return {"task_id": task["_meta"]["task_id"]}

    monkeypatch.setattr(worker, "run_timed", run_timed)
    monkeypatch.setattr(worker, "ray_node", lambda: "n1")
    monkeypatch.setattr(worker, "configure_numba", lambda n: None)
    monkeypatch.setattr(time, "monotonic", lambda: clock["t"])
    batches = list(worker.run_chunk(tasks, batch_rows=3, batch_seconds=1.0))
    assert [len(b) for b in batches] == [3, 2, 2]  # 3 by count; then the long task's end; the rest
    assert [r["task_id"] for b in batches for r in b] == [t["_meta"]["task_id"] for t in tasks]
    assert all(r["node"] == "n1" for b in batches for r in b)
