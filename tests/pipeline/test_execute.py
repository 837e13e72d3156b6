"""Joining Ray: address parsing, the connection time limit, the choice of authentication mode."""
from __future__ import annotations

import socket
import time

import pytest

from pipeline import execute
from pipeline.execute import ClusterError, check_reachable, configure_auth
from tests.helpers import unresponsive_peer


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
        assert time.time() - t0 < 10


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
