"""A real multi-node Ray cluster on loopback addresses of this machine, for the cluster tests.

Each node is a ``ray start --block`` process in its own session (process group) with its own
temporary folder and its own ports, so that it collides with nothing else on the machine (other
clusters, a concurrent local run). Nodes are stopped by killing their process group by PID,
never with ``ray stop`` (which would stop every Ray on the machine).

    with LoopbackCluster(tmp, auth_token="...") as cluster:
        cluster.add_node(cpus=1)            # a worker node on the next loopback address
        cluster.gcs_address                 # "127.0.0.2:PORT"
        cluster.dashboard_url               # "http://127.0.0.2:PORT" (ray job submit)
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
#: what ``ray start`` says when its raylet did not register with the GCS within Ray's fixed 30 s
#: (seen on a 2-core machine under a load of 29: the GCS answered one call after its deadline);
#: a worker node that says so is started once more, any other failure is raised at once
STARTUP_TIMEOUT = "The current node timed out during startup"
STARTS = 2


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(host: str, n: int, avoid=()) -> list[int]:
    """``n`` distinct ports free on ``host``, none in ``avoid``: all bound at once (released on
    return), so that two of one node's components never get the same port (probing one at a
    time, as :func:`free_port` does, can hand out a just-released port twice)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def free_range(host: str, width: int) -> int:
    """The first port of ``width`` consecutive ports free on ``host`` (probed, not reserved)."""
    for _ in range(200):
        start = free_port(host)
        if start + width >= 65535:
            continue
        try:
            socks = []
            for p in range(start, start + width):
                s = socket.socket()
                socks.append(s)
                s.bind((host, p))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {width} consecutive free ports on {host}")


class Node:
    def __init__(self, proc: subprocess.Popen, ip: str, log: Path):
        self.proc, self.ip, self.log = proc, ip, log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def processes(self):
        """psutil processes of this node (the ray start process and all its descendants)."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the whole node (its process group) by PID."""
        procs = self.processes()
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        for p in procs:  # raylet children may have left the group (setsid): kill them by PID
            try:
                p.send_signal(sig)
            except Exception:
                pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


class LoopbackCluster:
    def __init__(self, tmp: Path, head_cpus: int = 1, auth_token: str | None = None,
                 first_ip: int = 2):
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        # Ray's session folders hold Unix sockets, whose paths must stay under 108 bytes
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="lbc-", dir="/tmp"))
        self.nodes: list[Node] = []
        self.env = dict(os.environ)
        for key in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
            self.env.pop(key, None)
        # a Ray job's entrypoint `python -m pipeline` finds python on the nodes' PATH: this
        # interpreter's (its virtual environment's), as on a cluster whose nodes run the project's
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        if auth_token:
            token = self.tmp / "auth_token"
            token.write_text(auth_token)
            self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
            self.token_path = token
        else:
            self.env["RAY_AUTH_MODE"] = "disabled"
            self.token_path = None
        self._next_ip = first_ip
        self.head_cpus = head_cpus

    def _start(self, args: list[str], ip: str, name: str, taken=()) -> Node:
        temp = self.ray_tmp / name
        log = self.tmp / f"{name}.log"
        worker_start = free_range(ip, 24)
        while any(worker_start <= t < worker_start + 24 for t in taken):
            worker_start = free_range(ip, 24)
        node_mgr, obj_mgr, metrics, env_agent, agent_http, agent_grpc = free_ports(
            ip, 6, avoid={*range(worker_start, worker_start + 24), *taken})
        cmd = [RAY, "start", "--block", "--disable-usage-stats", f"--node-ip-address={ip}",
               f"--temp-dir={temp}", f"--node-manager-port={node_mgr}",
               f"--object-manager-port={obj_mgr}", f"--metrics-export-port={metrics}",
               f"--runtime-env-agent-port={env_agent}",
               f"--dashboard-agent-listen-port={agent_http}",
               f"--dashboard-agent-grpc-port={agent_grpc}",
               f"--min-worker-port={worker_start}", f"--max-worker-port={worker_start + 23}", *args]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        node = Node(proc, ip, log)
        self.nodes.append(node)
        return node

    def start_head(self) -> Node:
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        self.head_ip = ip
        self.gcs_port, self.dashboard_port = free_ports(ip, 2)
        head = self._start(["--head", f"--port={self.gcs_port}", f"--num-cpus={self.head_cpus}",
                            "--include-dashboard=true", f"--dashboard-host={ip}",
                            f"--dashboard-port={self.dashboard_port}"], ip, "head",
                           taken=(self.gcs_port, self.dashboard_port))
        self._wait(lambda: ip in self._alive_ips() and self._dashboard_up(), head, "head")
        return head

    def add_node(self, cpus: int = 1) -> Node:
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        for attempt in range(STARTS):
            node = self._start([f"--address={self.gcs_address}", f"--num-cpus={cpus}"], ip,
                               f"worker{len(self.nodes)}")
            # Wait for this node's own address, not for a count: a node just SIGKILLed stays
            # ALIVE in the GCS until its health checks time out, so a count taken before the
            # start can be one too high and never be reached.
            try:
                self._wait(lambda: ip in self._alive_ips(), node, ip)
                return node
            except RuntimeError:
                if attempt + 1 == STARTS or STARTUP_TIMEOUT not in node.log.read_text():
                    raise
                self.nodes.remove(node)  # its processes went with it; start it again
                node.kill(signal.SIGKILL)
        raise AssertionError("unreachable")

    @property
    def gcs_address(self) -> str:
        return f"{self.head_ip}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.head_ip}:{self.dashboard_port}"

    def client_env(self) -> dict:
        """Environment for a driver process that joins this cluster."""
        env = {k: v for k, v in self.env.items() if k != "RAY_AUTH_MODE"}
        return env

    def _alive_ips(self) -> set[str]:
        """Addresses of the nodes the GCS reports ALIVE (through the dashboard)."""
        import json
        import urllib.request

        req = urllib.request.Request(f"{self.dashboard_url}/nodes?view=summary")
        if self.token_path:
            req.add_header("Authorization", f"Bearer {self.token_path.read_text().strip()}")
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                data = json.load(r)
        except Exception:
            return set()
        summary = data.get("data", {}).get("summary", [])
        return {n["raylet"].get("nodeManagerAddress") for n in summary
                if n.get("raylet", {}).get("state") == "ALIVE"}

    def _dashboard_up(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.dashboard_url}/api/version", timeout=3):
                return True
        except Exception as exc:
            return "401" in str(exc) or "403" in str(exc)  # up, and asks for the token

    def _wait(self, ready, node: Node, what: str, timeout: float = 90) -> None:
        t0 = time.time()
        while time.time() - t0 < timeout:
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray start ({what}) exited: {node.log.read_text()[-2000:]}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"ray start ({what}) not ready in {timeout} s: {node.log.read_text()[-2000:]}")

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.kill(signal.SIGTERM)
        for node in self.nodes:
            if node.proc.poll() is None:
                node.kill(signal.SIGKILL)
        self.nodes.clear()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)

    def __enter__(self) -> LoopbackCluster:
        self.start_head()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
