"""Orchestration: Hydra configs -> validated tasks -> Ray -> Parquet -> analysis -> MLflow -> archive.

Kept light on import: Ray workers import :mod:`pipeline.worker` only. Ray's authentication mode
is set when Ray is started or joined (:func:`pipeline.execute.configure_auth`), not on import.
"""
