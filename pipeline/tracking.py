"""MLflow tracking, from the driver only: a parent run per sweep, child runs per arm.

Layout in the store (what :mod:`pipeline.mlflow_log` sends; the reasons are there):

- the **experiment** (``mlflow.experiment``, default ``lbsweep``) is created with the tag
  ``mlflow.experimentKind = custom_model_development`` (an existing experiment without the tag
  gets it), the model-training kind of MLflow 3. The UI of MLflow 3.17 picks its view from the
  sidebar's *workflow type* switch (GenAI / Model training, remembered by the browser), not
  from that tag; :meth:`SweepTracker.ui_path` gives a link with ``?workflowType=machine_learning``
  that opens the model-training view directly.
- the **parent run** (one per sweep): flat parameters of the sweep-level settings, the tags
  users rely on (``mlflow.user``, ``mlflow.source.git.commit``, ``mlflow.note.content``, ...),
  progress metrics logged while tasks finish (:meth:`SweepTracker.log_task`), and the artefacts.
- **child runs** (``tags.mlflow.parentRunId``): one per (arm, policy, engine), metrics keyed by
  the quantity only at ``step = N``.

The default store is a SQLite file in the project folder (``sqlite:///<abs>/mlflow.db``, as
MLflow 3 requires) with artifacts in ``<project>/mlartifacts``. Metrics and parameters are sent
in batches (``log_batch``): one ``log_metric`` call costs about 8 ms.
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import math
import os
import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# MLflow 3.17 maps one relationship of its GenAI MCP-server tables (SqlMCPAccessEndpoint.
# resolved_version_rel) with SQLAlchemy's lazy="noload", which SQLAlchemy 2.1 deprecates in alarming
# words: "SADeprecationWarning: The ``noload`` loader strategy is deprecated ... This option
# produces incorrect results by returning ``None`` for related items." It is raised once per
# process, when MLflow's SQL store configures its mappers (sqlalchemy_store.py, configure_mappers).
# Harmless here: MLflow means that relationship never to load (it fills it by an explicit join),
# and the pipeline logs and reads experiments, runs, params, tags, metrics and artefacts only, no
# MCP table. Only this message is silenced (SADeprecationWarning is a DeprecationWarning; naming
# the base class spares importing SQLAlchemy here). pyproject.toml does the same for pytest.
warnings.filterwarnings("ignore", message=r"The ``noload`` loader strategy is deprecated",
                        category=DeprecationWarning)

_BAD_KEY = re.compile(r"[^\w\-./ ]")
#: experiment tag read by MLflow 3 to tell GenAI experiments from model-training ones
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"
#: MLflow limits (mlflow.utils.validation): key length, param and tag value lengths
MAX_KEY, MAX_PARAM, MAX_TAG = 250, 6000, 8000
#: MLflow's limits on one ``log_batch`` call (mlflow.utils.validation: MAX_METRICS_PER_BATCH,
#: MAX_PARAMS_TAGS_PER_BATCH); every batch below is cut to them
BATCH_METRICS, BATCH_PARAMS_TAGS = 1000, 100
#: live task metrics are sent at most this often (and when the buffer holds this many)
FLUSH_SECONDS, FLUSH_ITEMS = 5.0, 900


def metric_key(*parts: str) -> str:
    """An MLflow-legal metric name (letters, digits, ``_-./`` and spaces)."""
    return _BAD_KEY.sub("_", "/".join(p for p in parts if p))[:MAX_KEY]


def clip(text: str, limit: int, where: str = "") -> str:
    """``text`` cut to ``limit`` characters, saying so at its end."""
    text = str(text)
    if len(text) <= limit:
        return text
    tail = f"\n... (truncated; {where})" if where else " ..."
    return text[:limit - len(tail)] + tail


def resolve_uri(tracking_uri: str | None, project_root: Path) -> tuple[str, str]:
    """(tracking URI, artifact location) with the project-folder SQLite default."""
    if tracking_uri:
        if tracking_uri.startswith("sqlite:///"):
            db = Path(tracking_uri[len("sqlite:///"):])
            return tracking_uri, (db.parent / "mlartifacts").resolve().as_uri()
        return tracking_uri, None
    db = (project_root / "mlflow.db").resolve()
    return f"sqlite:///{db}", (project_root / "mlartifacts").resolve().as_uri()


def command_line_overrides() -> list[str] | None:
    """The command line's overrides (``+sweep=smoke params.lam=0.9 ...``) when called inside a
    Hydra app (``python -m pipeline``, also under ``ray job submit``); None otherwise (tests
    that compose the config, ``pipeline.resume``)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        return [str(o) for o in HydraConfig.get().overrides.task]
    except Exception:  # noqa: BLE001  (an unusual Hydra state must not stop a sweep)
        return None


def user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001  (no login name, e.g. in some containers)
        return "unknown"


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores and in-memory ones)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]  # SQLAlchemy's query options aside
    return None if path in ("", ":memory:") else Path(path).resolve()


class StoreStart:
    """MLflow's fixed start-up work, done in a thread while Ray starts; :meth:`install` (after
    Ray is up, before the first MLflow call) waits for it and puts its result in place.

    Measured on a loaded 2-core AMD EPYC: importing MLflow takes 3-5 s, and MLflow creating a
    new SQLite store (its tables and some 60 schema migrations) 7-10 s; an existing store's
    first opening 2.5 s (the migration scripts read to check its schema version, SQLAlchemy's
    mappers configured). Ray's own start takes about 9 s. The thread does all of this but write
    where the run will: a new store is built as a private file in a temporary folder and
    :meth:`install` copies it beside the store's path and hard-links it there (``os.link``
    never replaces a file, so a store another process made meanwhile is kept and used). A run
    refused or stopped before :meth:`install` (Ray fails: exit 3, nothing written) leaves
    nothing: :meth:`discard` removes the temporary folder. Whatever fails in the thread only
    leaves MLflow to do the same work itself in :class:`SweepTracker`, as without this class.
    """

    def __init__(self, tracking_uri: str | None, project_root: Path):
        import threading

        self.uri, self.artifacts = resolve_uri(tracking_uri, project_root)
        self.db = _sqlite_path(self.uri)
        self.error: str | None = None
        self.built: Path | None = None  # a new store, built in self._tmp
        self._tmp: str | None = None
        self._cancelled = self._done = False
        self._lock = threading.Lock()
        self.seconds = {"thread": 0.0, "wait": 0.0, "install": 0.0}
        self._thread = threading.Thread(target=self._work, name="mlflow-store-start", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        import tempfile

        t0 = time.perf_counter()
        try:
            logging.getLogger("alembic").setLevel(logging.WARNING)
            import mlflow  # noqa: F401
            from mlflow.tracking import MlflowClient  # noqa: F401

            if self.db is not None and not self.db.exists():
                # the function MLflow registers for sqlite URIs: the same store class and
                # default artifact root (hence the same Default experiment) as at the real path
                from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

                self._tmp = tempfile.mkdtemp(prefix="lbsweep-mlflow-")
                built = Path(self._tmp) / "mlflow.db"
                store = _get_sqlalchemy_store(f"sqlite:///{built}", None)
                store.engine.dispose()
                if not self._cancelled:
                    self.built = built
            elif self.db is not None:  # an existing store: what its first opening reads once
                import sqlalchemy.orm
                from mlflow.store.db.utils import _get_latest_schema_revision
                from mlflow.store.tracking import sqlalchemy_store  # noqa: F401

                _get_latest_schema_revision()
                sqlalchemy.orm.configure_mappers()
        except Exception as exc:  # noqa: BLE001  (MLflow then does it itself, in SweepTracker)
            self.error = _one_line(exc)
        finally:
            self.seconds["thread"] = time.perf_counter() - t0
            with self._lock:
                self._done = True
                if self._cancelled:
                    self._remove_tmp()

    def _remove_tmp(self) -> None:
        import shutil

        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def install(self) -> None:
        """Wait for the thread, then put a new store in place (if none appeared meanwhile)."""
        import shutil
        import uuid

        t0 = time.perf_counter()
        self._thread.join()
        t1 = time.perf_counter()
        try:
            if self.built is not None and not self.db.exists():
                part = self.db.parent / f".{self.db.name}.{uuid.uuid4().hex}.part"
                try:
                    shutil.copyfile(self.built, part)
                    os.link(part, self.db)
                except FileExistsError:  # another process made the store meanwhile: use it
                    pass
                except OSError as exc:  # no hard links here (some network filesystems)
                    self.error = _one_line(exc)
                finally:
                    part.unlink(missing_ok=True)
        finally:
            self._remove_tmp()
            self.seconds.update(wait=t1 - t0, install=time.perf_counter() - t1)
        log.info("MLflow start-up: %.1f s in a thread while Ray started, %.1f s waited for after%s",
                 self.seconds["thread"], self.seconds["wait"] + self.seconds["install"],
                 f" (the thread failed, MLflow does it itself: {self.error})" if self.error else "")

    def discard(self) -> None:
        """The run will not track: leave nothing (the thread removes what it is still building)."""
        with self._lock:
            self._cancelled = True
            if self._done:
                self._remove_tmp()


class SweepTracker:
    """One parent run for the sweep; ``log_children`` adds its child runs."""

    def __init__(self, tracking_uri: str | None, experiment: str, project_root: Path,
                 started: StoreStart | None = None):
        if started is not None:  # the store prepared while Ray started (StoreStart)
            started.install()
        import mlflow
        from mlflow.tracking import MlflowClient

        logging.getLogger("alembic").setLevel(logging.WARNING)
        uri, artifacts = resolve_uri(tracking_uri, project_root)
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            exp_id = self.client.create_experiment(
                experiment, artifact_location=artifacts,
                tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND})
        else:
            exp_id = exp.experiment_id
            if EXPERIMENT_KIND_TAG not in exp.tags:  # made by an older version: leave a user's choice
                self.client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
        self.experiment_id = exp_id
        self.parent_id: str | None = None
        #: tags every run of this sweep carries (git commit, user, source)
        self.common_tags: dict[str, str] = {}
        self._buffer: list = []
        self._last_flush = time.monotonic()
        self._done = self._failed = 0

    # ---- runs
    def start(self, run_name: str, params: dict, tags: dict) -> str:
        from mlflow.utils.mlflow_tags import MLFLOW_USER

        tags = {MLFLOW_USER: user_name(), **{k: str(v) for k, v in tags.items()}}
        self.common_tags = {k: v for k, v in tags.items() if k.startswith("mlflow.source.") or k == MLFLOW_USER}
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={k[:MAX_KEY]: clip(v, MAX_TAG) for k, v in tags.items()})
        self.parent_id = run.info.run_id
        self._params(self.parent_id, params)
        return self.parent_id

    def reopen(self, run_id: str) -> bool:
        """Continue an earlier parent run (a resumed sweep); False if the store does not have it.
        Its child runs, if any (a sweep resumed after it had finished), are deleted: the
        resumed run logs every arm again. Progress metrics continue from their last step."""
        from mlflow.exceptions import MlflowException
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        if run.info.experiment_id != self.experiment_id:
            return False
        for child in self.client.search_runs([self.experiment_id],
                                             filter_string=f"tags.{MLFLOW_PARENT_RUN_ID} = '{run_id}'"):
            self.client.delete_run(child.info.run_id)
        self.client.update_run(run_id, status="RUNNING")
        self.parent_id = run_id
        self.common_tags = {k: v for k, v in run.data.tags.items()
                            if k.startswith("mlflow.source.") or k == "mlflow.user"}
        self._done = int(run.data.metrics.get("tasks_done", 0))
        self._failed = int(run.data.metrics.get("tasks_failed", 0))
        return True

    def set_tags(self, tags: dict, run_id: str | None = None) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(str(k)[:MAX_KEY], clip(v, MAX_TAG)) for k, v in tags.items() if v is not None]
        for i in range(0, len(items), BATCH_PARAMS_TAGS):
            self.client.log_batch(run_id or self.parent_id, tags=items[i:i + BATCH_PARAMS_TAGS])

    def _params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        items = [Param(str(k)[:MAX_KEY], clip(v, MAX_PARAM)) for k, v in params.items() if v is not None]
        for i in range(0, len(items), BATCH_PARAMS_TAGS):
            self.client.log_batch(run_id, params=items[i:i + BATCH_PARAMS_TAGS])

    @staticmethod
    def _metric_items(metrics: list[tuple[str, float, int]]) -> list:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        out = []
        for k, v, step in metrics:
            if v is None or isinstance(v, (str, bool)):
                continue
            v = float(v)
            if math.isfinite(v):
                out.append(Metric(metric_key(k), v, now, int(step)))
        return out

    def _metrics(self, run_id: str, metrics: list[tuple[str, float, int]]) -> None:
        items = self._metric_items(metrics)
        for i in range(0, len(items), BATCH_METRICS):
            self.client.log_batch(run_id, metrics=items[i:i + BATCH_METRICS])

    def log_metrics(self, metrics: list[tuple[str, float, int]]) -> None:
        self.flush()
        self._metrics(self.parent_id, metrics)

    def log_children(self, children: list[dict]) -> list[str]:
        """Each item: ``{"name", "params": {...}, "tags": {...}, "metrics": [(key, value, step)]}``;
        every child carries ``mlflow.parentRunId`` and the sweep's common tags. Returns their ids."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        ids = []
        for c in children:
            tags = {**self.common_tags, **{k: str(v) for k, v in c.get("tags", {}).items()},
                    MLFLOW_PARENT_RUN_ID: self.parent_id}
            child = self.client.create_run(self.experiment_id, run_name=c["name"],
                                           tags={k[:MAX_KEY]: clip(v, MAX_TAG) for k, v in tags.items()})
            cid = child.info.run_id
            self._params(cid, c["params"])
            self._metrics(cid, c["metrics"])
            self.client.set_terminated(cid, "FINISHED")
            ids.append(cid)
        return ids

    # ---- progress while the tasks run
    def log_task(self, row: dict) -> None:
        """Record one finished task on the parent run (call it from ``execute``'s ``on_row``).

        At ``step`` = tasks completed so far: ``tasks_done``, ``tasks_failed`` (cumulative) and
        ``task/<engine>/mean_response`` (the task's estimate). Buffered: sent every
        :data:`FLUSH_SECONDS` (or :data:`FLUSH_ITEMS` items) and at the end, so thousands of
        short tasks cost a few calls. A failure raises (:class:`TrackingGuard` turns it into
        "tracking lost": one warning, no more MLflow calls, the sweep goes on).
        """
        if self.parent_id is None:
            return
        self._done += 1
        self._failed += row.get("status") == "error"
        step = self._done
        items = [("tasks_done", self._done, step), ("tasks_failed", self._failed, step)]
        if row.get("status") != "error" and row.get("engine"):
            items.append((f"task/{row['engine']}/mean_response", row.get("mean_response"), step))
        self._buffer += self._metric_items(items)
        if len(self._buffer) >= FLUSH_ITEMS or time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Send the buffered progress metrics."""
        items, self._buffer = self._buffer, []
        self._last_flush = time.monotonic()
        if not items or self.parent_id is None:
            return
        for i in range(0, len(items), BATCH_METRICS):
            self.client.log_batch(self.parent_id, metrics=items[i:i + BATCH_METRICS])

    # ---- artefacts and the end
    def log_text(self, text: str, name: str) -> None:
        self.client.log_text(self.parent_id, text, name)

    def log_artifacts(self, paths: list[Path], subdir: str | None = None) -> None:
        for path in paths:
            if path.is_dir():
                self.client.log_artifacts(self.parent_id, str(path), artifact_path=subdir or path.name)
            elif path.exists():
                self.client.log_artifact(self.parent_id, str(path), artifact_path=subdir)

    def ui_path(self) -> str:
        """The UI's page of the parent run, in the model-training view (append it to the UI's
        address, e.g. ``http://127.0.0.1:5000/``)."""
        return (f"#/experiments/{self.experiment_id}/runs/{self.parent_id}"
                "?workflowType=machine_learning")

    def end(self, status: str = "FINISHED") -> None:
        if self.parent_id:
            self.flush()
            self.client.set_terminated(self.parent_id, status)


# ---- failures of the store: refused before the run (exit 4), or lost during it (warn, go on)
#: MLflow's HTTP client retries a failed request for about 4 minutes by default (7 retries with
#: exponential backoff, 120 s per request). During a sweep these bound it instead, unless the
#: environment sets them (MLflow reads them at each request).
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
#: seconds of the pre-flight check and of each HTTP request to the store (``mlflow.timeout``)
DEFAULT_TIMEOUT = 5.0


#: the values :func:`bound_http` put in the environment (a later sweep may change them)
_bounded: dict[str, str] = {}


def bound_http(timeout: float = DEFAULT_TIMEOUT) -> None:
    """Bound MLflow's HTTP retries and each request's timeout for the rest of this process
    (values the user put in the environment win)."""
    for key, value in {**HTTP_LIMITS, "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, math.ceil(timeout)))}.items():
        if key not in os.environ or os.environ[key] == _bounded.get(key):
            os.environ[key] = _bounded[key] = value


def _one_line(exc: BaseException) -> str:
    from pipeline.state import one_line

    return one_line(exc)


def _probe_folder(folder: Path, what: str, uri: str) -> None:
    """Create and remove a file in ``folder``: the only test of writability that holds for
    every user (root passes ``os.access``) and filesystem (read-only mounts)."""
    import tempfile

    from pipeline.errors import TrackingError

    if not folder.is_dir():
        raise TrackingError(f"mlflow.tracking_uri={uri!r}: the {what} {str(folder)!r} does not exist")
    try:
        tempfile.NamedTemporaryFile(dir=folder, prefix=".lbsweep-probe-").close()
    except OSError as exc:
        raise TrackingError(f"mlflow.tracking_uri={uri!r}: the {what} {str(folder)!r} is not "
                            f"writable ({exc.strerror or exc})") from None


def _check_sqlite(uri: str, artifacts: str | None) -> None:
    import sqlite3

    from pipeline.errors import TrackingError

    path = uri[len("sqlite:///"):].split("?", 1)[0]  # SQLAlchemy's query options aside
    if path in ("", ":memory:"):
        return
    db = Path(path).resolve()  # a relative path is relative to the working folder, as in MLflow
    _probe_folder(db.parent, "store's folder", uri)
    if artifacts and artifacts.startswith("file://"):
        from urllib.parse import unquote, urlparse

        art = Path(unquote(urlparse(artifacts).path))
        if art.exists():
            _probe_folder(art, "artifact folder", uri)
    if not db.exists():
        return  # MLflow creates it
    try:
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=DEFAULT_TIMEOUT)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = (con.execute("SELECT version_num FROM alembic_version").fetchone() or [None])[0] \
                if "alembic_version" in tables else None
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TrackingError(f"mlflow.tracking_uri={uri!r}: {str(db)!r} is not a readable SQLite "
                            f"database ({exc}); move it away or choose another store") from None
    if not os.access(db, os.W_OK):
        raise TrackingError(f"mlflow.tracking_uri={uri!r}: {str(db)!r} is not writable")
    if tables:  # MLflow creates its tables in an empty database, and refuses any other schema
        try:
            from mlflow.store.db.utils import _get_latest_schema_revision  # private: best effort

            head = _get_latest_schema_revision()
        except Exception:  # noqa: BLE001  (another MLflow version: leave it to MLflow)
            return
        if version is None:
            raise TrackingError(f"mlflow.tracking_uri={uri!r}: {str(db)!r} has tables but no MLflow "
                                "schema version: not an MLflow store; choose another")
        if version != head:
            raise TrackingError(
                f"mlflow.tracking_uri={uri!r}: {str(db)!r} has schema version {version}, this MLflow "
                f"expects {head}: back it up and run 'mlflow db upgrade {uri}', or choose another store")


def _check_reachable(uri: str, timeout: float) -> None:
    import socket
    from urllib.parse import urlparse

    from pipeline.errors import TrackingError

    parsed = urlparse(uri)
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme)
    if not parsed.hostname or not port:
        return
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise TrackingError(f"mlflow.tracking_uri={uri!r}: cannot reach {parsed.hostname}:{port} "
                            f"within {timeout:g} s ({exc.strerror or exc}); is the server up?") from None


def check_store(tracking_uri: str | None, experiment: str, project_root: Path,
                timeout: float = DEFAULT_TIMEOUT) -> str:
    """Refuse, within about ``timeout`` seconds and before anything of a run starts, a store
    that cannot be used: :class:`~pipeline.errors.TrackingError` with one line. Returns the URI.

    SQLite: the store's folder (and an existing artifact folder) must take a new file; an
    existing database must open read-only, and if it has tables, be at this MLflow's schema
    version (MLflow refuses another). Nothing is created here. Other stores: a server
    (``http(s)://``, or any URI with a host and port) must accept a connection; then MLflow's
    client opens the store and looks the experiment up, with MLflow's HTTP retries off and each
    request bounded by ``timeout`` (MLflow itself would retry for about 4 minutes). A store
    that answers reads but refuses writes is found only at its first write: tracking is then
    lost for the run (:class:`TrackingGuard`), the sweep goes on.
    """
    from pipeline.errors import TrackingError

    logging.getLogger("alembic").setLevel(logging.WARNING)
    uri, artifacts = resolve_uri(tracking_uri, project_root)
    if uri.startswith("sqlite:///"):  # checked without opening it in MLflow, which would create
        _check_sqlite(uri, artifacts)  # the database before Ray is known to start
        return uri
    if "://" in uri:
        _check_reachable(uri, timeout)
    with environ_restored("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, math.ceil(timeout)))
        try:
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
        except Exception as exc:  # noqa: BLE001  (MLflow's, SQLAlchemy's, requests' errors alike)
            raise TrackingError(f"mlflow.tracking_uri={uri!r}: {_one_line(exc)}") from None
    return uri


@contextlib.contextmanager
def environ_restored(*keys: str) -> Iterator[dict]:
    """Yield ``{key: its value in os.environ, or None}``; on exit each key is set back to that
    value (removed where it was unset), whatever the block changed."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield saved
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class TrackingGuard:
    """Makes the sweep's MLflow calls: the first one that fails marks tracking *lost* (one
    warning line, ``on_lost(reason)``), and every later call is skipped (returns None). The
    sweep goes on: its results, analysis and archive do not depend on the store."""

    def __init__(self, on_lost=None):
        self.lost: str | None = None
        self.on_lost = on_lost

    def __call__(self, fn, *args, **kwargs):
        if self.lost is not None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (any failure of the store or its client)
            self.lost = _one_line(exc)
            log.warning("MLflow: tracking lost, the sweep goes on without it (results, analysis "
                        "and archive are kept; run.json says so): %s", self.lost)
            if self.on_lost is not None:
                self.on_lost(self.lost)
            return None

    @property
    def state(self) -> str:
        return "ok" if self.lost is None else f"lost: {self.lost}"
