"""What every benchmark prints beside its figures (the machine it measured them on), and the
command-line options the engines' benchmarks share."""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
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


def c_loop_arguments(doc: str, c_source: Path, binary: Path, count: str, default: int,
                     c_help: str | None = None, binary_help: str | None = None
                     ) -> argparse.ArgumentParser:
    """The command line of a benchmark of an engine against a C loop of the same chain on one
    power-of-d workload: the loop's C source and the binary to build from it, N, the load, d,
    the run length ``--<count>`` (``default``), the seed and the repeats (the best of 3)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--c-source", type=Path, default=c_source, help=c_help)
    p.add_argument("--binary", type=Path, default=binary, help=binary_help)
    p.add_argument("--n-servers", type=int, default=10_000)
    p.add_argument("--lam", type=float, default=0.9)
    p.add_argument("--d", type=int, default=2)
    p.add_argument(f"--{count}", type=int, default=default)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest is reported")
    return p


def run_c_loop(binary: Path, n: int, lam: float, d: int, count: int, seed: int) -> dict[str, str]:
    """Run a C loop (arguments N, lam, d, run length, seed) and return the ``name=value`` fields
    it prints."""
    out = subprocess.run([str(binary), str(n), repr(lam), str(d), str(count), str(seed)],
                         check=True, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=([^\s]+)", out))


def law_by_name(name: str):
    """A service law of :mod:`sim.core.service` from a short name: ``exponential``,
    ``deterministic``, ``erlang-K`` (K phases), ``hyperexponential-SCV``, ``lognormal-SCV``,
    ``pareto-ALPHA-UPPER`` (bounded Pareto)."""
    from sim.core.service import service_law

    law, *values = name.split("-")
    keys = {"erlang": ("service_phases",), "hyperexponential": ("service_scv",),
            "lognormal": ("service_scv",), "pareto": ("service_alpha", "service_upper")}.get(law, ())
    if len(values) != len(keys):
        raise ValueError(f"law name {name!r}: {law!r} takes {len(keys)} value(s) after '-'")
    params = {k: (int(v) if k == "service_phases" else float(v)) for k, v in zip(keys, values)}
    return service_law("bounded_pareto" if law == "pareto" else law, **params)
