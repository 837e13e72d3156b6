"""Joining Ray: address parsing, the connection time limit, the choice of authentication mode;
a local cluster's token kept out of the user's home."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import execute
from pipeline.execute import ClusterError, check_reachable, configure_auth
from tests.helpers import REPO, driver_cwd, unresponsive_peer


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.5:6379", ("127.0.0.5", 6379)),
    ("head.example.org:7000", ("head.example.org", 7000)),
    ("ray://127.0.0.5:10001", ("127.0.0.5", 10001)),
    ("ray://127.0.0.5", ("127.0.0.5", 10001)),
    ("127.0.0.5", ("127.0.0.5", 6379)),
    ("auto", None),
])
def test_host_port(address, expected):
    assert execute._host_port(address) == expected


def test_unreachable_address_is_refused_within_the_limit():
    with socket.socket() as s:  # a port nobody listens on: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClusterError, match=f"127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}", 2)
    with unresponsive_peer() as (host, port):  # a loopback peer that drops the SYN: times out
        t0 = time.time()
        with pytest.raises(ClusterError, match="within 1 s"):
            check_reachable(f"{host}:{port}", 1)
        # given up after the 1 s asked for, not after the system's SYN retries (about 2 min)
        assert time.time() - t0 < 60


def test_reachable_address_passes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}", 2)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(execute, "DEFAULT_TOKEN_PATH", tmp_path / "no-such-token")
    monkeypatch.setattr(execute, "_set_auth_mode", lambda mode: None)
    return tmp_path


def test_auth_auto(clean_env, monkeypatch):
    assert configure_auth({"auth": "auto"}, joining=False) == "token"  # a new local cluster
    assert configure_auth({"auth": "auto"}, joining=True) == "disabled"  # no token to offer
    token = clean_env / "tok"
    token.write_text("abc")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    assert configure_auth({"auth": "auto"}, joining=True) == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # explicit: respected
    assert configure_auth({"auth": "auto"}, joining=True) == "disabled"


def test_auth_token_without_a_token_is_refused(clean_env):
    with pytest.raises(ClusterError, match="no token was found"):
        configure_auth({"auth": "token"}, joining=True)
    assert configure_auth({"auth": "disabled"}, joining=True) == "disabled"


def test_a_local_cluster_without_a_token_gets_one_of_its_own(clean_env, monkeypatch):
    """Issue 43 (6): with no token configured, ``ray.init`` in token mode wrote one to the user's
    ``~/.ray/auth_token``. A local cluster now gets a token of this process, in the environment
    of Ray's processes only; a configured token is used as before."""
    monkeypatch.setattr(execute, "_local_token", None)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    env = execute._local_token_env()
    assert list(env) == ["RAY_AUTH_TOKEN"] and len(env["RAY_AUTH_TOKEN"]) == 64
    assert execute._local_token_env() == env  # one per process: Ray's token loader caches it
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert execute._local_token_env() == {}
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    token = clean_env / "tok"
    token.write_text("abc")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    assert execute._local_token_env() == {}
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "mine")
    assert execute._local_token_env() == {}


@pytest.mark.integration
def test_a_local_run_writes_no_token_into_home(tmp_path):
    """``python -m pipeline`` in a fresh HOME: a local Ray cluster in token mode, and no
    ``~/.ray/auth_token`` after it (Ray 2.60 wrote one there, readable by all)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    # a fresh HOME, the numba cache of this one (compiling anew would only cost time)
    env.update(HOME=str(home), XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"),
               PYTHONPATH=str(REPO))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "pipeline", f"output_dir={out}", "mlflow.enabled=false",
                          "execution.progress=false", "execution.num_cpus=1", "replications=2"],
                         cwd=driver_cwd(), env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "started a local Ray cluster" in res.stdout + res.stderr
    assert (out / "run.json").is_file()
    assert not (home / ".ray").exists(), sorted(p.name for p in (home / ".ray").iterdir())
