"""What every benchmark prints beside its figures (the machine it measured them on), and the
command-line options the engines' benchmarks share."""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one) and the cores this process
    may use: ratios between engines move between machines, so every figure names its CPU."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return f"{name}, {cores} core(s) usable"


def engine_arguments(doc: str, events: int, lam: float = 0.9) -> argparse.ArgumentParser:
    """A benchmark's command line, described by the first line of ``doc``, with the options of an
    engine's timing: ``--events`` per run, the load ``--lam`` and ``--repeat`` (the best of 3 by
    default); the benchmark adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--events", type=int, default=events)
    p.add_argument("--lam", type=float, default=lam)
    p.add_argument("--repeat", type=int, default=3)
    return p
