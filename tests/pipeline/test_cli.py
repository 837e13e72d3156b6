"""The console script ``lbsweep``: its help lists the shipped sweeps, it refuses like
``python -m pipeline``, and Hydra's shell completion knows it."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import CONF, driver_cwd

pytestmark = pytest.mark.integration  # real command lines


def lbsweep(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = shutil.which("lbsweep")
    assert exe, "the console script lbsweep is not installed (pip install -e .)"
    return subprocess.run([exe, *args], cwd=driver_cwd(), capture_output=True, text=True, timeout=timeout)


def test_help_describes_the_app_and_lists_every_shipped_sweep():
    res = lbsweep("--help")
    assert res.returncode == 0, res.stderr
    assert "load-balancing" in res.stdout and "plan=true" in res.stdout and "Exit codes" in res.stdout
    for sweep in sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")):
        assert sweep in res.stdout, f"--help does not list {sweep}"


def test_unknown_sweep_is_one_line_and_exit_2():
    res = lbsweep("+sweep=no_such_sweep", "mlflow.enabled=false")
    assert res.returncode == 2
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "no_such_sweep" in lines[0] and "smoke" in lines[0]


def test_shell_completion_script():
    res = lbsweep("--shell-completion", "install=bash")
    assert res.returncode == 0 and "lbsweep" in res.stdout and "complete" in res.stdout
