"""MLflow tracking, from the driver only: a parent run per sweep and a child run per point.

The default store is a SQLite file in the project folder (``sqlite:///<abs>/mlflow.db``, as
MLflow 3 requires) with artifacts in ``<project>/mlartifacts``. Metrics are sent in batches
(``log_batch``); where N varies, metrics carry ``step = N`` so the UI plots them against N.
"""
from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path

log = logging.getLogger(__name__)

_BAD_KEY = re.compile(r"[^\w\-./ ]")


def metric_key(*parts: str) -> str:
    """An MLflow-legal metric name (letters, digits, ``_-./`` and spaces)."""
    return _BAD_KEY.sub("_", "/".join(p for p in parts if p))


def resolve_uri(tracking_uri: str | None, project_root: Path) -> tuple[str, str]:
    """(tracking URI, artifact location) with the project-folder SQLite default."""
    if tracking_uri:
        if tracking_uri.startswith("sqlite:///"):
            db = Path(tracking_uri[len("sqlite:///"):])
            return tracking_uri, (db.parent / "mlartifacts").resolve().as_uri()
        return tracking_uri, None
    db = (project_root / "mlflow.db").resolve()
    return f"sqlite:///{db}", (project_root / "mlartifacts").resolve().as_uri()


class SweepTracker:
    """One parent run for the sweep; ``log_points`` adds a child run per grid point."""

    def __init__(self, tracking_uri: str | None, experiment: str, project_root: Path):
        import mlflow
        from mlflow.tracking import MlflowClient

        logging.getLogger("alembic").setLevel(logging.WARNING)
        uri, artifacts = resolve_uri(tracking_uri, project_root)
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            exp_id = self.client.create_experiment(experiment, artifact_location=artifacts)
        else:
            exp_id = exp.experiment_id
        self.experiment_id = exp_id
        self.parent_id: str | None = None

    def start(self, run_name: str, params: dict, tags: dict) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.parent_id = run.info.run_id
        self._params(self.parent_id, params)
        return self.parent_id

    def reopen(self, run_id: str) -> bool:
        """Continue an earlier parent run (a resumed sweep); False if the store does not have it.
        Its child runs, if any (a sweep resumed after it had finished), are deleted: the
        resumed run logs every point again."""
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
        return True

    def _params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        items = [Param(str(k)[:250], str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def _metrics(self, run_id: str, metrics: list[tuple[str, float, int]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, int(step)) for k, v, step in metrics
                 if v is not None and math.isfinite(float(v))]
        for i in range(0, len(items), 1000):
            self.client.log_batch(run_id, metrics=items[i:i + 1000])

    def log_metrics(self, metrics: list[tuple[str, float, int]]) -> None:
        self._metrics(self.parent_id, metrics)

    def log_points(self, points: list[dict]) -> None:
        """Each item: ``{"name", "params": {...}, "metrics": [(key, value, step)]}``."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        for p in points:
            child = self.client.create_run(
                self.experiment_id, run_name=p["name"], tags={MLFLOW_PARENT_RUN_ID: self.parent_id}
            )
            cid = child.info.run_id
            self._params(cid, p["params"])
            self._metrics(cid, p["metrics"])
            self.client.set_terminated(cid, "FINISHED")

    def log_artifacts(self, paths: list[Path], subdir: str | None = None) -> None:
        for path in paths:
            if path.is_dir():
                self.client.log_artifacts(self.parent_id, str(path), artifact_path=subdir or path.name)
            elif path.exists():
                self.client.log_artifact(self.parent_id, str(path), artifact_path=subdir)

    def end(self, status: str = "FINISHED") -> None:
        if self.parent_id:
            self.client.set_terminated(self.parent_id, status)
