"""The error types the pipeline shows to users as a one-line message (each its own exit code)."""


class ConfigError(ValueError):
    """A configuration value that cannot run; the message names the key and the value."""


class TrackingError(RuntimeError):
    """The MLflow store cannot be reached, read or written, found before anything started
    (exit code 4); the message names ``mlflow.tracking_uri`` and the reason."""


class OutputError(RuntimeError):
    """The run folder could not be written (disk full, file size limit, read-only or failing
    disk) while the sweep ran (exit code 5); ``run.json`` says ``failed`` with the reason and
    the rows written so far are kept (``python -m pipeline.resume`` continues the run)."""
