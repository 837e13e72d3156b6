"""The end of the main job's console fits one screen (issue 43, item 3; docs/running.md, "What
the main job prints"): a headline-shaped run (every policy and rule of sub_halfin_whitt, the
limit path to 10^300) ends with at most 25 lines of at most 120 characters, one per policy and
rule, the reading sentence, and where the per-point table and the report are."""
from __future__ import annotations

import re

import pytest

from pipeline.run import run_sweep, to_plain
from tests.helpers import compose

#: the issue's screen: lines and characters
SCREEN_LINES, SCREEN_WIDTH = 25, 120


# an end-to-end run of the shipped sweep made small (about 90 s on 2 cores): with the integration tests
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def headline_console():
    # the run folder's path is on the screen (its last line names it): a short folder of its own,
    # so that the width checked does not depend on pytest's temporary folder (under pytest-xdist
    # it gains "popen-gwN/", and that line reached 124 characters)
    import shutil
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="console-"))
    out_dir = root / "out"
    # the headline's policies, rules and path, made small: 4 N, 2 runs, short runs, the exact
    # mean field to 10^6 and the heavy-traffic path 10^10..10^300 every 58 decades; serial
    cfg = compose(["+sweep=sub_halfin_whitt", f"output_dir={out_dir}", "mlflow.enabled=false",
                   "execution.progress=false", "execution.backend=serial",
                   "axes.n_servers=[100,316,1000,3162]", "params.time=20", "replications=2",
                   "limit_path.n_servers_max=1e6", "limit_path.heavy_traffic.every_decades=58"])
    import contextlib
    import io

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            out = run_sweep(to_plain(cfg))
        yield out, buf.getvalue()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_console_ends_on_one_screen(headline_console):
    out, text = headline_console
    lines = text.rstrip("\n").split("\n")
    # the screen: from the answer's header (after the one blank line) to the end
    start = max(i for i, line in enumerate(lines) if line == "") + 1
    screen = lines[start:]
    assert len(screen) <= SCREEN_LINES, "\n".join(screen)
    assert max(map(len, screen)) <= SCREEN_WIDTH, max(screen, key=len)
    assert screen[0].startswith("policy") and "vs limit path" in screen[0] and "limit as N -> inf" in screen[0]
    zq = out["analysis"]["extra"]["zero_queueing"]
    # one line per policy and rule
    rows = screen[1:1 + len(zq["verdicts"])]
    assert len(zq["verdicts"]) == 18
    for v, row in zip(sorted(zq["verdicts"], key=lambda v: (v["policy"], v.get("b") is not None)), rows):
        assert f" {v['variant']} " in row, (v["variant"], row)
        # a limit is claimed only with what carries it (in parentheses), else undecided beyond
        assert row.endswith(")") or "undecided beyond" in row, row
    # the reading, made from the run's numbers, in one sentence, the report's own
    from analysis.models.zero_queueing_limit import reading

    sentence = reading(zq["verdicts"])
    first = next(i for i, line in enumerate(screen) if line.startswith("Reading: "))
    printed = " ".join(screen[first:first + 3]).split(" generic gap check")[0]
    assert printed.startswith(f"Reading: {sentence}"[:100]) and sentence.count(". ") <= 1
    assert sentence.startswith("every c/((1-lam) ln k) rule reaches zero queueing delay in the mean-field limit")
    assert f"Reading: {sentence}" in zq["report"].read_text()
    assert " ".join(screen[first:]).startswith(f"Reading: {sentence}")
    # every arm counted by the generic check, those without a mean field named
    generic = next(line for line in screen if line.startswith("generic gap check"))
    counts = [int(n) for n in re.findall(r"(\d+) [a-z]", generic.split("arms, ", 1)[1])]
    assert "18 arms" in generic and sum(counts) == 18 and "3 no mean field" in generic
    # where the per-point table and the report are
    assert screen[-1] == f"run folder {out['output_dir']}: table summary.txt, report analysis/zero_queueing/report.md"
    assert (out["output_dir"] / "summary.txt").is_file()


def test_the_report_carries_the_limit_at_its_marks_and_the_peak(headline_console):
    out, _ = headline_console
    zq = out["analysis"]["extra"]["zero_queueing"]
    by = {(v["policy"], v["variant"]): v for v in zq["verdicts"]}
    c4 = by[("batch_filling", "c4")]
    assert set(c4["path_marks"]) == {300}  # the exact path stops at 10^6 here, the heavy one steps 58 decades
    report = zq["report"].read_text()
    assert "limit: at 10^15, 10^100, 10^300; peak" in report
    assert f"{c4['path_marks'][300]:.4g}" in report
