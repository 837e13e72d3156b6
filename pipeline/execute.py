"""Fan tasks out on Ray (a local cluster by default, or an existing one), with progress.

:func:`connect` starts or joins Ray before anything of a run is written, so that a cluster that
cannot be reached leaves nothing behind. Small tasks are grouped so that there are about
``execution.tasks_per_cpu`` Ray tasks per CPU that Ray reports (a planning estimate of each task's
cost balances the groups). A group is a Ray streaming generator that sends its tasks' rows back
to the driver, which alone writes files, in batches (:func:`pipeline.worker.run_chunk`: at
least every second while tasks end, one Ray object per batch); the progress bar steps as each
batch arrives (pipeline/progress.py). Each row records the Ray node it ran on (column ``node``).
"""
from __future__ import annotations

import heapq
import logging
import os
import secrets
import signal
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pipeline import worker
from pipeline.progress import Progress
from sim.registry import STOCHASTIC_ENGINES, model_of

log = logging.getLogger(__name__)

#: rough cost of one mean-field task, seconds (used only for grouping)
MEANFIELD_SECONDS = 0.05
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: authentication modes of ``execution.auth``
AUTH_MODES = ("auto", "token", "disabled")
#: where Ray looks for a token when none is given in the environment
DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"


class ClusterError(RuntimeError):
    """Ray could not be started or joined; the message says where and why (exit code 3)."""


def event_cost(task: dict) -> float:
    """Planning cost of one event of ``task`` in plain agent events: its model's declared
    :attr:`~sim.core.declare.Model.event_cost` (1 unless the model says otherwise)."""
    return model_of(task).event_cost(task)


def estimated_seconds(task: dict, events_per_second: float) -> float:
    """The planning estimate of a task's run time (grouping and progress only)."""
    if task["engine"] in STOCHASTIC_ENGINES:
        return task["events"] * event_cost(task) / events_per_second
    return MEANFIELD_SECONDS


def group_tasks(tasks: list[dict], cpus: int, tasks_per_cpu: int,
                events_per_second: float) -> list[list[dict]]:
    """The tasks in about ``cpus * tasks_per_cpu`` groups of similar estimated cost, the most
    expensive group first (so that the long ones do not start last).

    Tasks are dealt longest-first, each to the group with the least estimated cost so far, and
    keep the plan's order within a group. Dealing, rather than cutting the plan into runs of
    consecutive tasks, spreads the tasks of one (policy, variant, N), whose estimates err
    alike, over all groups, so that a kind of task whose cost is underestimated cannot fill
    one group that then runs alone on one CPU at the end of the sweep."""
    if not tasks:
        return []
    costs = [estimated_seconds(t, events_per_second) for t in tasks]
    n_groups = max(1, min(len(tasks), int(cpus) * int(tasks_per_cpu)))
    loads = [(0.0, g) for g in range(n_groups)]  # (estimated cost, group); ties to the lower group
    members: list[list[int]] = [[] for _ in range(n_groups)]
    for i in sorted(range(len(tasks)), key=lambda i: (-costs[i], i)):
        load, g = heapq.heappop(loads)
        members[g].append(i)
        heapq.heappush(loads, (load + costs[i], g))
    total = {g: load for load, g in loads}
    order = sorted((g for g in range(n_groups) if members[g]), key=lambda g: (-total[g], g))
    return [[tasks[i] for i in sorted(members[g])] for g in order]


def run_order(group: list[dict]) -> list[dict]:
    """The order in which a group's tasks run: shuffled by a hash of each task's id (fixed, so
    a rerun runs alike; rows do not depend on it). The plan lists a kind's tasks by N, and the
    cost of an event can grow with N (batch sampling with d = 2 on the headline: measured over
    planned seconds 11 at N = 10^3, 95 at 10^6); run in plan order, the tasks done after a tenth of the work would all be small
    ones and the ETA learned from them (pipeline/progress.py) would be far too short."""
    return sorted(group, key=lambda t: (zlib.crc32(str(t["_meta"]["task_id"]).encode()), str(t["_meta"]["task_id"])))


def ray_address(exec_cfg: dict) -> str | None:
    """The cluster to join (``RAY_ADDRESS`` wins, as in Ray), or None for a local cluster."""
    return os.environ.get("RAY_ADDRESS") or exec_cfg.get("address") or None


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a GCS (``host:port``) or Ray client (``ray://host:port``) address."""
    if address == "auto":
        return None
    parsed = urlparse(address if "://" in address else f"gcs://{address}")
    if not parsed.hostname:
        return None
    return parsed.hostname, parsed.port or (10001 if parsed.scheme == "ray" else 6379)


def check_reachable(address: str, timeout: float) -> None:
    """Refuse within ``timeout`` seconds an address nobody listens on (Ray itself retries
    forever)."""
    hp = _host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout):
            pass
    except OSError as exc:
        raise ClusterError(f"execution.address={address!r}: cannot reach {hp[0]}:{hp[1]} within "
                           f"{timeout:g} s ({exc.strerror or exc}); is the cluster up?") from None


def token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).expanduser().is_file() if path else DEFAULT_TOKEN_PATH.is_file()


def _set_auth_mode(mode: str) -> None:
    os.environ["RAY_AUTH_MODE"] = mode
    try:  # Ray caches its config at import; refresh it if Ray is already loaded
        from ray._raylet import Config

        Config.initialize("")
    except ImportError:
        pass


def configure_auth(exec_cfg: dict, joining: bool) -> str:
    """Set ``RAY_AUTH_MODE`` for this process from ``execution.auth``; return the mode used.

    ``auto`` (the default): an explicit ``RAY_AUTH_MODE`` is respected; otherwise token mode
    when joining a cluster and a token is available (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``
    or ``~/.ray/auth_token``, which is where ``cluster.yaml`` puts it on every node), and for a
    local cluster (Ray's own default since 2.5x: it makes a token if none exists).
    """
    mode = exec_cfg.get("auth") or "auto"
    if mode == "auto":
        if os.environ.get("RAY_AUTH_MODE"):
            return os.environ["RAY_AUTH_MODE"]
        mode = "token" if (token_available() or not joining) else "disabled"
    if mode == "token" and joining and not token_available():
        raise ClusterError("execution.auth='token' but no token was found: set RAY_AUTH_TOKEN, "
                           f"RAY_AUTH_TOKEN_PATH or copy the cluster's token to {DEFAULT_TOKEN_PATH}")
    _set_auth_mode(mode)
    return mode


#: the token of the local clusters this process starts when no token is configured: made once
#: per process, handed to Ray in the environment only while it starts, never written to disk
_local_token: str | None = None


def _reset_token_cache() -> None:
    """Make Ray's token loader (which caches the first token it finds) read the environment anew."""
    try:
        from ray._raylet import AuthenticationTokenLoader

        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):
        pass


def _local_token_env() -> dict[str, str]:
    """The environment a new local cluster in token mode starts with when no token is configured
    (no ``RAY_AUTH_TOKEN``, no file at ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``): a
    token of this process's own. Without it ``ray.init`` makes one and writes it to the user's
    ``~/.ray/auth_token`` (mode 0644), where it outlives the run and is picked up by every later
    Ray command. Ray's processes (GCS, raylet, workers) inherit it when they start;
    the driver's token loader keeps it. Empty when a token exists: that one is used."""
    global _local_token
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" or token_available():
        return {}
    _local_token = _local_token or secrets.token_hex(32)
    return {"RAY_AUTH_TOKEN": _local_token}


@dataclass
class Session:
    """A Ray connection for one run (or none, for the serial backend)."""

    backend: str
    address: str | None  # None: a local cluster (or serial)
    cpus: int
    started: bool = False
    #: the cluster was started with this process's own token (:func:`_local_token_env`)
    own_token: bool = False

    def close(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False
            if self.own_token:  # a later ray.init (e.g. joining a cluster) looks for its token anew
                _reset_token_cache()


def _local_loopback() -> None:
    """Make a new local cluster advertise and bind 127.0.0.1 (all of Ray's gRPC servers: GCS,
    raylet, workers). Ray 2.60 turns a ``127.0.0.1`` node address into the machine's routable IP
    unless clusters are "disabled" (its macOS/Windows switch), which is what this does; it must
    be undone before joining a real cluster in the same process (:func:`_undo_loopback`)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray._private.ray_constants as rc

        rc.ENABLE_RAY_CLUSTER = False
    except ImportError:
        pass


def _undo_loopback() -> None:
    os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    try:
        import ray._private.ray_constants as rc

        rc.ENABLE_RAY_CLUSTER = not rc.IS_WINDOWS_OR_OSX
    except ImportError:
        pass


def connect(exec_cfg: dict, py_modules=()) -> Session:
    """Start a local Ray cluster (``address`` unset) or join one; refuse clearly, in bounded
    time, a cluster that cannot be reached. Nothing of the run exists yet when this runs.

    ``py_modules``: package folders of out-of-tree models (:func:`pipeline.models.py_modules`),
    shipped to every worker through Ray's ``runtime_env``."""
    if exec_cfg["backend"] == "serial":
        return Session("serial", None, 1)
    address = ray_address(exec_cfg)
    timeout = float(exec_cfg.get("connect_timeout") or 15)
    if address:
        check_reachable(address, timeout)
    configure_auth(exec_cfg, joining=bool(address))
    import ray

    if ray.is_initialized():  # an embedding program (or a test) already connected
        return Session("ray", address, int(ray.cluster_resources().get("CPU", 1)))
    # ray.init installs a SIGTERM handler that exits at once; keep the caller's (the command
    # line's turns SIGTERM, e.g. from `ray job stop`, into an orderly interruption)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    token_env: dict[str, str] = {}
    try:
        if address:
            # Never pass num_cpus when joining (Ray refuses it). Ship our two packages unless
            # the job already runs from the project's working directory (ray job submit).
            shipped = list(py_modules)
            if not os.environ.get("RAY_JOB_ID"):
                shipped = [str(PROJECT_ROOT / "sim"), str(PROJECT_ROOT / "pipeline"), *shipped]
            _undo_loopback()
            ray.init(address=address, runtime_env={"py_modules": shipped} if shipped else None,
                     logging_level=logging.WARNING)
        else:
            _local_loopback()
            token_env = _local_token_env()
            saved = {k: os.environ.get(k) for k in token_env}
            os.environ.update(token_env)
            if token_env:
                _reset_token_cache()
            try:
                ray.init(address="local", num_cpus=exec_cfg.get("num_cpus") or os.cpu_count(),
                         include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True,
                         runtime_env={"py_modules": list(py_modules)} if py_modules else None)
            finally:  # Ray's processes have it; programs this process starts later do not
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    except Exception as exc:  # Ray's own errors, e.g. InvalidAuthToken after its retries
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f"the Ray cluster at {address!r}" if address else "a local Ray cluster"
        hint = (" (token authentication: see execution.auth and docs/cluster.md)"
                if "auth" in str(exc).lower() or "token" in str(exc).lower() else "")
        raise ClusterError(f"could not start or join {where}: {type(exc).__name__}: {first}{hint}") from None
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    log.info("%s Ray cluster: %d CPUs on %d node(s)", "joined" if address else "started a local",
             cpus, sum(n["Alive"] for n in ray.nodes()))
    return Session("ray", address, cpus, started=True, own_token=bool(token_env))


def execute(
    tasks: list[dict],
    exec_cfg: dict,
    on_row: Callable[[dict], None],
    desc: str = "tasks",
    session: Session | None = None,
    on_idle: Callable[[], None] | None = None,
) -> int:
    """Run every task, calling ``on_row`` on the driver for each result row; return #errors.
    ``on_idle`` is called on the driver at least every :data:`IDLE_SECONDS` while tasks run (and
    after each task with the serial backend): the caller's chance to write rows it buffers.

    A KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one by the command line) propagates
    after the rows already delivered are written; the caller records the run as interrupted.
    """
    own = session is None
    session = session or connect(exec_cfg)
    groups = [run_order(g) for g in group_tasks(tasks, session.cpus, int(exec_cfg.get("tasks_per_cpu") or 4),
                                                exec_cfg["events_per_second"])]
    # One step per finished task (rows stream back from the groups in batches); the ETA is
    # learned from the measured time of the finished tasks (pipeline/progress.py).
    progress = Progress(tasks, lambda t: estimated_seconds(t, exec_cfg["events_per_second"]),
                        min(session.cpus, max(1, len(groups))), desc, enabled=exec_cfg.get("progress", True))
    errors = 0

    def deliver(rows: Iterable[dict]) -> None:
        nonlocal errors
        for row in rows:
            first = row.pop(worker.FIRST_OF_KIND, False)
            errors += row["status"] == "error"  # "unstable" (slotted engine) is a result
            on_row(row)
            progress.task_done(row, measured=not first)

    from tqdm.contrib.logging import logging_redirect_tqdm

    try:
        with logging_redirect_tqdm():  # log lines go above the bar, not onto it
            if session.backend == "serial":
                worker.configure_numba(1)
                for group in groups:
                    for t in group:
                        deliver([worker.run_timed(t)])
                        if on_idle is not None:
                            on_idle()
            else:
                _execute_ray(groups, exec_cfg, deliver, on_idle or (lambda: None))
    finally:
        progress.close()
        if own:
            session.close()
    return errors


#: longest wait of the driver for the workers before it calls ``on_idle`` (seconds)
IDLE_SECONDS = 1.0


def _execute_ray(groups: list[list[dict]], exec_cfg: dict, deliver: Callable,
                 on_idle: Callable[[], None]) -> None:
    """Run each group as one Ray streaming generator task that yields batches of rows, and
    deliver each batch as it arrives; call ``on_idle`` after each wait (at most
    :data:`IDLE_SECONDS` long).

    Each task's row is delivered once: a row whose task was already delivered is dropped
    (whatever Ray replays when it retries a generator that died part-way), and when a group
    fails for good (its worker or node lost, retries used up) only its tasks not yet delivered
    become error rows."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=int(exec_cfg["max_retries"]),
                        num_returns="streaming")(worker.run_chunk)
    pending = {remote.remote(g): g for g in groups}
    delivered: set = set()
    t0 = time.perf_counter()

    def fail_rest(group: list[dict], exc: BaseException) -> None:
        rest = [t for t in group if t["_meta"]["task_id"] not in delivered]
        log.error("a Ray task of %d tasks failed (%d of them not run): %s", len(group), len(rest),
                  str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        delivered.update(t["_meta"]["task_id"] for t in rest)
        deliver([_failed_row(t, exc) for t in rest])

    # On an interruption nothing is cancelled here: ray.cancel(force=True) racing a reply crashed
    # Ray 2.60's core worker ("Tried to complete task that was not pending"); the driver's
    # exit ends its job, and Ray stops that job's workers itself.
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=IDLE_SECONDS)
        on_idle()
        for gen in ready:  # ready: its next batch has arrived, or the task has ended
            group = pending[gen]
            try:
                ref = next(gen)
            except StopIteration:
                del pending[gen]
                if any(t["_meta"]["task_id"] not in delivered for t in group):  # never seen
                    fail_rest(group, RuntimeError("the Ray task ended without a row for every task"))
                continue
            try:
                batch = ray.get(ref)
            except Exception as exc:  # the worker (or its node) died even after retries
                del pending[gen]
                fail_rest(group, exc)
                continue
            fresh = []
            for row in batch:
                if row["task_id"] not in delivered:
                    delivered.add(row["task_id"])
                    fresh.append(row)
            deliver(fresh)
    # a Ray task runs a group of the sweep's tasks on one worker (group_tasks): say both counts
    log.info("executed %d tasks as %d Ray tasks (groups of tasks, one worker each) in %.1f s",
             sum(map(len, groups)), len(groups), time.perf_counter() - t0)


def _failed_row(task: dict, exc: BaseException) -> dict:
    return {**worker.row_header(task), "status": "error", "node": None,
            "error": f"Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
