"""The models' memory estimates (``Model.memory_bytes``) against the measured peak of real tasks.

Each task runs in a fresh subprocess: a small task of the same engine and policy first (so that
compilation and imports are in the baseline), then the task itself; the peak is the rise of
the process's maximum resident set (``resource.getrusage``) over its resident set before the
task, and, beside it, the peak of numpy's traced allocations (``tracemalloc``; numba's own
allocations inside kernels are not traced). ``python benchmarks/bench_memory.py [INDEX ...]``
prints one line per task (all, or those of TASKS at the indices given); docs/sweeps.md quotes
the figures.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_model  # noqa: E402

BASE = {"seed": 1, "init": "meanfield", "n_batches": 20, "max_level": 64, "h": 1}
TASKS = [
    {"model": "dispatch", "engine": "agent", "policy": "pod", "n_servers": 1_000_000, "lam": 0.9, "d": 2,
     "events": 4_000_000},
    {"model": "dispatch", "engine": "agent", "policy": "random", "n_servers": 200_000, "lam": 0.9,
     "events": 4_000_000},
    {"model": "dispatch", "engine": "agent", "policy": "batch_filling", "n_servers": 1_000_000, "lam": 0.9,
     "k": 4, "d": 2, "events": 4_000_000},
    {"model": "dispatch", "engine": "occupancy", "policy": "random", "n_servers": 10**9, "lam": 0.9,
     "k": 2_000_000, "events": 100_000},
    {"model": "dispatch", "engine": "meanfield", "policy": "batch_filling", "n_servers": 10**9, "lam": 0.9,
     "k": 1000, "d": 2},
    {"model": "jiq", "engine": "agent", "policy": "jiq", "n_servers": 1_000_000, "lam": 0.9, "r": 10,
     "events": 4_000_000},
    {"model": "centralization", "engine": "agent", "policy": "central", "n_servers": 1_000_000, "lam": 0.9,
     "p": 0.1, "events": 4_000_000},
    # a long run whose rings double (128 -> 256 stamps) during it
    {"model": "dispatch", "engine": "agent", "policy": "random", "n_servers": 100_000, "lam": 0.9,
     "events": 200_000_000},
    {"model": "dispatch", "engine": "meanfield", "policy": "batch_sampling", "n_servers": 10**9, "lam": 0.9,
     "k": 1000, "d": 2},
    {"model": "jiq", "engine": "meanfield", "policy": "jiq", "n_servers": 10**8, "lam": 0.9, "r": 100_000},
    {"model": "jiq", "engine": "refined", "policy": "jiq", "n_servers": 10**6, "lam": 0.9, "r": 1000},
    {"model": "led", "engine": "slotted", "policy": "l_jsq", "n_servers": 200_000, "lam": 0.9,
     "m_dispatchers": 10, "events": 20_000},
]

CHILD = r"""
import json, resource, sys, tracemalloc
import sim
from sim.registry import model_of
task = json.loads(sys.argv[1])
small = {**task, "n_servers": min(task["n_servers"], 2000)}
if task.get("k"):
    small["k"] = min(task["k"], 4)
if task.get("r"):
    small["r"] = 10
if "events" in small:
    small["events"] = 10_000
sim.run(small)  # compile and import first: the baseline holds them
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()
before = rss()
tracemalloc.start()
sim.run(task)
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(json.dumps({"estimate": model_of(task).memory_bytes(task), "rss": peak, "traced": traced}))
"""


def measure(task: dict) -> dict:
    full = {**BASE, **task} if task["engine"] != "meanfield" else {**task}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(full)], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    print(f"# {cpu_model()}")
    print(f"{'task':80s} {'estimate':>10s} {'peak RSS':>10s} {'numpy':>10s} {'est/RSS':>8s}")
    chosen = [int(a) for a in sys.argv[1:]] or range(len(TASKS))  # indices into TASKS
    for task in (TASKS[i] for i in chosen):
        m = measure(task)
        label = " ".join(f"{k}={v}" for k, v in task.items() if k not in ("model",))
        mib = 2**20
        print(f"{label:80s} {m['estimate'] / mib:9.1f}M {m['rss'] / mib:9.1f}M {m['traced'] / mib:9.1f}M "
              f"{m['estimate'] / max(m['rss'], 1):8.2f}", flush=True)


if __name__ == "__main__":
    main()
