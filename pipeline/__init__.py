"""Orchestration: Hydra configs -> validated tasks -> Ray -> Parquet -> analysis -> MLflow -> archive.

Kept light on import: Ray workers import :mod:`pipeline.worker` only.
"""
