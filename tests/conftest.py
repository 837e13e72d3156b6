"""Shared fixtures: one small local Ray cluster per test session (starting Ray takes seconds)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster of 2 CPUs shared by the tests that need one."""
    from pipeline.execute import init_ray

    os.environ.pop("RAY_ADDRESS", None)
    started = init_ray({"num_cpus": 2, "address": None})  # before importing ray (auth mode)
    import ray

    yield ray
    if started:
        ray.shutdown()


def compose(overrides: list[str]):
    """The config as ``python -m pipeline`` would compose it (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import pipeline.config  # noqa: F401

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def sweep_names() -> list[str]:
    return sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
