"""cluster.yaml is a valid Ray cluster launcher config (Ray's own schema and preparation, as
``ray up`` applies them), with the choices docs/cluster.md explains."""
from __future__ import annotations

import copy

import pytest
import yaml

from tests.helpers import REPO


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def ray_schema() -> dict:
    import json

    import ray.autoscaler

    return json.loads((REPO.__class__(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def test_cluster_yaml_passes_rays_schema(config):
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    jsonschema.validate(config, ray_schema())  # the file as written
    prepared = prepare_config(copy.deepcopy(config))  # what `ray up` does before validating
    validate_config(prepared)
    assert prepared["provider"]["type"] == "local"
    assert prepared["max_workers"] >= len(config["provider"]["worker_ips"])


def test_a_broken_cluster_yaml_is_refused(config):
    """The schema check can fail: an unknown top-level key and a wrong type are refused."""
    import jsonschema

    for key, value in (("max_worker", 3), ("max_workers", "eight"), ("idle_timeout_minutes", -1)):
        bad = copy.deepcopy(config)
        bad[key] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, ray_schema())


def test_every_node_uses_token_auth_and_the_pinned_install(config):
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert any('pip install -e ".[cluster]"' in c for c in config["setup_commands"])
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])
    text = (REPO / "docs" / "cluster.md").read_text()
    for key in ("max_workers", "idle_timeout_minutes", "file_mounts", "setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands", "rsync_exclude"):
        assert f"`{key}`" in text, f"docs/cluster.md does not explain {key}"
