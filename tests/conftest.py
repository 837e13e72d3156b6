"""Shared fixtures: one small local Ray cluster per test session (starting Ray takes seconds);
the repository's ``outputs/`` untouched by the tests. A skipped browser test (no Chromium) is
named in the run's last lines."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import tests.helpers
from tests.helpers import CONF, REPO  # noqa: F401  (re-exported for fixtures)


def _tree(root: Path) -> set[str]:
    """Every file and folder under ``root`` (relative paths; empty if ``root`` does not exist)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        found.update(os.path.normpath(os.path.join(rel, n)) for n in dirs + files)
    return found


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
