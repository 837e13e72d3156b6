"""Shared fixtures: one small local Ray cluster per test session (starting Ray takes seconds)."""
from __future__ import annotations

import os

import pytest

from tests.helpers import CONF, REPO  # noqa: F401  (re-exported for fixtures)


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster of 2 CPUs shared by the tests that need one."""
    from pipeline.execute import connect

    os.environ.pop("RAY_ADDRESS", None)
    session = connect({"backend": "ray", "num_cpus": 2, "address": None})  # before importing ray
    import ray

    yield ray
    session.close()
