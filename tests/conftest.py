"""Shared fixtures: one small local Ray cluster per test session (starting Ray takes seconds);
the repository's ``outputs/`` untouched by the tests. A skipped browser test (no Chromium) is
named in the run's last lines."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.worker import configure_numba

# numba's disk cache of the whole session in the workers' folder (~/.cache/lbsweep/numba/<digest
# of sim/>, or NUMBA_CACHE_DIR), set before anything imports numba: every kernel, the closures
# that a test builds after a serial-backend run has called configure_numba too, is then cached in
# one folder that the xdist workers and the warm-up share, keyed by the code of sim/
configure_numba(1)

import tests.helpers  # noqa: E402
from tests.helpers import CONF, REPO  # noqa: E402, F401  (re-exported for fixtures)


def _tree(root: Path) -> set[str]:
    """Every file and folder under ``root`` (relative paths; empty if ``root`` does not exist)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        found.update(os.path.normpath(os.path.join(rel, n)) for n in dirs + files)
    return found


def pytest_sessionstart(session):
    """Before xdist starts its workers (its own hook runs last), compile the kernels of the
    shipped models' examples and golden tasks into the disk cache, one :mod:`tests.warm_numba`
    process per worker taking groups of tasks from one list, so that no two workers compile the
    same kernel. Only in the controller of a run on several workers; a failed warm-up is
    reported and the tests run (they then compile, and show the failure)."""
    config = session.config
    workers = config.getoption("numprocesses", None) if hasattr(config.option, "numprocesses") else None
    if hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 2:
        return
    if config.getoption("markexpr", "") == "integration":
        # the integration tier: CI runs it after the fast suite, whose warm-up filled the cache
        # (loading every example task again cost about 50 CPU seconds a process); its kernels
        # are mostly loaded by drivers' Ray workers, which a warm-up here would not spare
        return
    import subprocess
    import sys
    import tempfile
    import time

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="warm_numba-") as claims:
        procs = [subprocess.Popen([sys.executable, "-m", "tests.warm_numba", claims], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for _ in range(workers)]
        outs = [(p.communicate()[0], p.returncode) for p in procs]
    failed = [out[-2000:] for out, code in outs if code != 0]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"numba kernels warmed in {time.monotonic() - t0:.0f} s ({workers} processes)"
                            + (": a warm-up process failed:\n" + "\n".join(failed) if failed else ""))


@pytest.fixture(scope="session", autouse=True)
def repository_outputs_untouched(tmp_path_factory):
    """No test writes under the repository's ``outputs/``: tests give ``output_dir`` (or run
    ``python -m pipeline`` in :func:`tests.helpers.driver_cwd`, a temporary folder). Fails the
    session (an error at teardown) naming what appeared there, so run no pipeline in this
    checkout's folder while its tests run."""
    outputs = REPO / "outputs"
    before = _tree(outputs)
    tests.helpers.DRIVER_CWD = tmp_path_factory.mktemp("drivers")
    yield
    added = sorted(_tree(outputs) - before)
    assert not added, f"tests wrote under {outputs}: {', '.join(added[:8])}" + (
        f" and {len(added) - 8} more" if len(added) > 8 else "")


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster of 2 CPUs shared by the tests that need one."""
    from pipeline.execute import connect

    os.environ.pop("RAY_ADDRESS", None)
    session = connect({"backend": "ray", "num_cpus": 2, "address": None})  # before importing ray
    import ray

    yield ray
    session.close()


@pytest.fixture(autouse=True)
def _close_run_log():
    """A test that calls run_sweep directly leaves its run folder's log open (run_cli closes it)."""
    yield
    from pipeline.runfolder import close_log

    close_log()


# ------------------------------------------------------------------ the browser test's skip

#: how tests/integration/test_mlflow_browser.py's skip reason starts (no Debian chromium)
BROWSER_SKIP = "BROWSER TEST SKIPPED"
#: its category in the run's final line ("75 passed, 1 browser test skipped (no chromium) in ...")
BROWSER_SKIPPED = "browser test skipped (no chromium)"


def _browser_skip(report) -> bool:
    return bool(report.skipped and "test_mlflow_browser" in report.nodeid
                and BROWSER_SKIP in str(report.longrepr))


def pytest_report_teststatus(report, config):
    """The browser test skipped for want of Chromium is counted apart in the final line, so that
    a run without it cannot look like a full one (issue 43 item 2)."""
    if _browser_skip(report):
        return BROWSER_SKIPPED, "s", ("SKIPPED (no chromium)", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One loud line above the final one when the browser test was skipped for want of Chromium;
    nothing when it ran or was not selected."""
    reports = terminalreporter.stats.get(BROWSER_SKIPPED, [])
    if reports:
        reason = str(reports[0].longrepr[2] if isinstance(reports[0].longrepr, tuple) else reports[0].longrepr)
        reason = reason[reason.index(BROWSER_SKIP):]
        terminalreporter.write_sep("!", reason, red=True, bold=True)
