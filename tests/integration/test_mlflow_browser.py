"""The MLflow UI as a user sees it, in a real browser (issue 23).

Two tiny sweeps (the smoke grid at lam = 0.8 and 0.9, N = 20, 50, 200, agent and mean field) are
logged in-process to a fresh SQLite store in the test's tmp folder, as ``python -m pipeline``
logs them (Hydra's config set, so the overrides are recorded too). ``mlflow server`` is started
on 127.0.0.1 on a free port against that store and stopped by PID at the end. Debian's Chromium
(``/usr/bin/chromium``; never a browser Playwright downloads), driven headless by Playwright,
then walks the UI the way the README and docs/mlflow.md tell a user to: the experiment, the parent runs with their
child runs nested under them, a child run's parameters and metrics, the parent's note (the
sweep's report, figures included) and artefacts, and the chart of ``mean_response`` against
step = N with both sweeps overlaid (then with a log x-axis).

A third sweep, of 10^4 points (N = 20..2519 at four loads, power-of-2, in its own experiment of
the store), shows a sweep of many points as MLflow keeps it comparable (issue 45): the
experiment lists its parent and four child runs (one per arm), not 10^4 runs, the parent's page
says 10000 points and names its four children, and a child's metric page offers every one of
its 2500 points (``Download data``, checked against the store's history), while MLflow's charts
draw a sample of them (320 a run). Its rows come from the mean-field engine, the cheapest that
makes real rows of those timed (0.2-0.3 ms a task; the refined engine 2.5 ms; the agent and
occupancy engines about 8 ms at their shortest run, 1000 events, mostly their output analysis;
on a loaded 2-core machine), so that the sweep costs about what the pipeline and MLflow cost per
point: planning, rows, analysis and about 1.2 * 10^5 metric values in the store. The mean
field is the N -> infinity limit, so each arm's values are flat in N; what the test checks (runs,
points, steps) does not depend on the values.

Screenshots go to ``<tmp>/shots`` and are copied to ``/tmp/browser_shots/``. Selectors are by
text and role; where MLflow's UI gives a control no accessible name (the row's expand button,
the chart view's radio), the nearest text or attribute is used and said so. 3-4 min here on a
2-core machine shared at load average 17-24, 61-67 s of CPU (97-140 s of it the three sweeps and
the server's start; the sweep of 10^4 points alone, in-process, 120 s and 32 s of CPU at load
13-16).

Without ``/usr/bin/chromium`` (``apt-get install chromium`` as root; only ``.ci/run`` installs it)
the test is skipped and the run's last lines say so (tests/conftest.py); with
``LBSWEEP_REQUIRE_BROWSER=1`` (set by ``.ci/run``) it fails instead.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import run_sweep_as_the_app, smoke_sweeps_in_one_store

CHROMIUM = Path("/usr/bin/chromium")
#: the flags this machine's Chromium needs (the machine's notes): no sandbox as root, no GPU, and
#: no background connections (the closed network refuses them)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: where the screenshots are copied for a reviewer
SHOTS_COPY = Path("/tmp/browser_shots")


@contextlib.contextmanager
def _browser_page(shots: Path, notes: list[str], notes_name: str, failure_shot: str, **context):
    """A page of headless Chromium (1600 x 1000) for one test: on a failure inside, a screenshot
    ``failure_shot``; in any case the browser closed, then the test's notes written beside its
    screenshots and all copied to :data:`SHOTS_COPY`."""
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=TIMEOUT_MS)
            try:
                page = browser.new_context(viewport={"width": 1600, "height": 1000}, **context).new_page()
                page.set_default_timeout(TIMEOUT_MS)
                try:
                    yield page
                except Exception:
                    page.screenshot(path=str(shots / f"{failure_shot}.png"))
                    raise
            finally:
                browser.close()
    finally:
        (shots / notes_name).write_text("\n".join(notes) + "\n")
        SHOTS_COPY.mkdir(parents=True, exist_ok=True)
        for f in shots.iterdir():
            shutil.copy2(f, SHOTS_COPY / f.name)


LAMS = (0.8, 0.9)
NS = (20, 50, 200)
EXPERIMENT = "lbsweep"
#: one UI action or check; generous, the machine may be busy
TIMEOUT_MS = 60_000
#: the sweep of many points: N = 20 .. 2519 at four loads, 10^4 points of the mean-field engine
#: (one task each); its arms (one per load) are four child runs of 2500 points each, far more than
#: the 320 points MLflow 3.17's charts draw of one run's metric (they sample the history;
#: docs/mlflow.md)
MANY_NS = tuple(range(20, 2520))
MANY_LAMS = (0.6, 0.7, 0.8, 0.9)
MANY_ENGINE = "meanfield"
MANY_EXPERIMENT = "lbsweep_many"

#: set to 1 (``.ci/run`` does) to make a missing Chromium a failure instead of a skip
REQUIRE_ENV = "LBSWEEP_REQUIRE_BROWSER"
#: the skip's reason; tests/conftest.py finds the skip by it and says so in the run's summary
SKIP_REASON = (f"BROWSER TEST SKIPPED: Debian's chromium not found ({CHROMIUM} absent; apt-get install "
               "chromium, as root); the MLflow UI was not checked")

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module", autouse=True)
def chromium() -> Path:
    """Debian's Chromium, before the sweeps and the server start: without it the test is skipped
    (tests/conftest.py names the skip in the run's last lines), or fails when ``REQUIRE_ENV`` is 1."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but Debian's chromium is not installed ({CHROMIUM} absent): "
                    "apt-get install chromium, as root", pytrace=False)
    pytest.skip(SKIP_REASON)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two sweeps in one fresh store: {lam: run_sweep's result}, the URI, the tmp folder."""
    tmp = tmp_path_factory.mktemp("mlflow_browser")
    outs, uri = smoke_sweeps_in_one_store(tmp, LAMS, [
        "replications=2", f"axes.n_servers=[{','.join(map(str, NS))}]", "axes.d=[2]",
        "engines=[agent,meanfield]", f"mlflow.experiment={EXPERIMENT}"])
    assert all(out["errors"] == 0 for out in outs.values())
    # a sweep of 10^4 cheap points (serial, one replication), in its own experiment of the store
    many = run_sweep_as_the_app([
        "name=many_points", "policies=[pod]", f"engines=[{MANY_ENGINE}]", "replications=1", "params.d=2",
        f"+axes.n_servers=[{','.join(map(str, MANY_NS))}]", f"+axes.lam=[{','.join(map(str, MANY_LAMS))}]",
        "execution.backend=serial", "execution.progress=false",
        f"mlflow.tracking_uri={uri}", f"mlflow.experiment={MANY_EXPERIMENT}", f"output_dir={tmp / 'out_many'}"])
    assert many["errors"] == 0 and many["frame"].height == len(MANY_NS) * len(MANY_LAMS)
    return {"outs": outs, "uri": uri, "tmp": tmp, "many": many}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the server and every process it started, by PID; SIGKILL what outlives 20 s."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    for k in kids:
        try:
            k.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(kids, timeout=10)
    for k in alive:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture(scope="module")
def server(store):
    """``mlflow server`` on 127.0.0.1:<free port> against the store; its base URL."""
    tmp = store["tmp"]
    port = _free_port()
    art = (tmp / "server-artifacts").as_uri()
    log = tmp / "mlflow_server.log"
    # the job runner (GenAI jobs: four more processes) is not needed to browse runs
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store["uri"],
             "--default-artifact-root", art, "--artifacts-destination", art,
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}/"
    try:
        t0 = time.time()
        while True:
            try:
                with urllib.request.urlopen(base + "health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() - t0 > 240:
                raise AssertionError(f"mlflow server did not answer on {base} (exit {proc.poll()}); log:\n"
                                     + log.read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        yield base
    finally:
        _stop(proc)


def _kids(client, parent_id: str) -> dict[str, str]:
    """Child run name -> engine of a parent run."""
    exp = client.get_run(parent_id).info.experiment_id
    runs = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    return {r.info.run_name: r.data.params["engine"] for r in runs}


def _table(page, header: str) -> dict[str, str]:
    """A run page's two-column table (``Metric``/``Parameter`` | ``Value``) as a dict."""
    table = page.get_by_role("table").filter(has_text=header).first
    out = {}
    for row in table.get_by_role("row").all():
        cells = [c for c in re.split(r"[\t\n]+", row.inner_text().strip()) if c]
        if len(cells) == 2 and cells[0] != header:
            out[cells[0]] = cells[1]
    return out


def test_browser_mlflow_ui_shows_sweeps_nested_with_note_artifacts_and_overlay(store, server, tmp_path):
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import expect

    client = MlflowClient(tracking_uri=store["uri"])
    parents = {lam: client.get_run(out["mlflow_run_id"]) for lam, out in store["outs"].items()}
    pname = {lam: r.info.run_name for lam, r in parents.items()}
    kids = {lam: _kids(client, r.info.run_id) for lam, r in parents.items()}
    n_runs = len(parents) + sum(len(k) for k in kids.values())
    agent = {lam: next(n for n, e in k.items() if e == "agent") for lam, k in kids.items()}
    child_run = client.get_run(next(r.info.run_id for r in client.search_runs(
        [parents[LAMS[0]].info.experiment_id], filter_string=f"attributes.run_name = '{agent[LAMS[0]]}'")))

    shots = tmp_path / "shots"
    shots.mkdir()
    notes: list[str] = []

    def shot(page, name: str, locator=None) -> None:
        (locator or page).screenshot(path=str(shots / f"{name}.png"))

    expect.set_options(timeout=TIMEOUT_MS)
    with _browser_page(shots, notes, "notes.txt", "zz_failure") as page:
        # 1. the home page: the experiment is listed
        page.goto(server, wait_until="domcontentloaded")
        exp_link = page.get_by_role("link", name=EXPERIMENT, exact=True)
        expect(exp_link.first).to_be_visible()
        shot(page, "01_home")

        # 2. what a first-time user gets on opening the experiment (MLflow 3.17: the GenAI
        # overview, whatever the experiment's kind tag says); recorded, not asserted
        exp_link.first.click()
        page.wait_for_url(re.compile(r"#/experiments/\d+"))
        try:
            page.get_by_text(re.compile(r"No data available|matching runs")).first.wait_for(timeout=20_000)
        except Exception:  # noqa: BLE001  (only the screenshot's moment depends on it)
            pass
        shot(page, "02_experiment_first_view")
        notes.append(f"first view of the experiment: {page.url}")
        got_it = page.get_by_role("button", name="Got it", exact=True)
        if got_it.count() and got_it.first.is_visible():  # the GenAI view's feature tour (modal)
            got_it.first.click()
            notes.append("a 'Detect Issues' tour popover covered the page; closed with 'Got it'")

        # 3. the sidebar's switch to "Model training" (remembered by the browser), the runs
        page.get_by_role("button", name="Model training", exact=True).click()
        expect(page).to_have_url(re.compile(r"workflowType=machine_learning"))
        if not page.get_by_text(re.compile(r"\d+ matching runs")).count():
            page.get_by_role("link", name="Runs", exact=True).first.click()
        expect(page.get_by_text(f"{n_runs} matching runs")).to_be_visible()
        assistant_close = page.get_by_role("button", name="Close", exact=True)
        if page.get_by_text("MLflow Assistant").first.is_visible() and assistant_close.count():
            assistant_close.first.click()  # the assistant panel opens by itself the first time
            notes.append("the MLflow Assistant panel opened by itself and was closed")

        # 4. the parent runs, each expanded: its child runs listed under it, indented
        for lam in LAMS:
            link = page.get_by_role("link", name=pname[lam], exact=True)
            expect(link).to_be_visible()
            first_kid = page.get_by_role("link", name=next(iter(kids[lam])), exact=True)
            if not first_kid.count():
                # the expand button (a "+" icon without a label) is the row's first button
                row = page.get_by_role("row").filter(has=link)
                row.get_by_role("button").first.click()
            for kid in kids[lam]:
                expect(page.get_by_role("link", name=kid, exact=True)).to_be_visible()
        boxes = {n: page.get_by_role("link", name=n, exact=True).bounding_box()
                 for lam in LAMS for n in [pname[lam], *kids[lam]]}
        order = sorted(LAMS, key=lambda lam: boxes[pname[lam]]["y"])
        for i, lam in enumerate(order):
            top = boxes[pname[lam]]["y"]
            bottom = boxes[pname[order[i + 1]]]["y"] if i + 1 < len(order) else float("inf")
            for kid in kids[lam]:
                assert top < boxes[kid]["y"] < bottom, (kid, "not listed under", pname[lam], boxes)
                assert boxes[kid]["x"] > boxes[pname[lam]]["x"], (kid, "not indented under", pname[lam])
        shot(page, "03_runs_nested")

        # 5. a child run: its parameters and its metrics (the value at the last step, the largest N)
        page.get_by_role("link", name=agent[LAMS[0]], exact=True).click()
        expect(page.get_by_role("heading", name=agent[LAMS[0]], exact=True)).to_be_visible()
        expect(page.get_by_text(re.compile(r"^Parameters \(\d+\)$"))).to_be_visible()
        expect(page.get_by_role("table").filter(has_text="Parameter").get_by_text("events", exact=True)).to_be_visible()
        params = _table(page, "Parameter")
        assert params == child_run.data.params, params
        assert params["lam"] == str(LAMS[0]) and params["engine"] == "agent"
        metrics = _table(page, "Metric")
        for key in ("mean_response", "mean_response_lo", "mean_response_hi", "mean_response_gap"):
            assert float(metrics[key]) == pytest.approx(child_run.data.metrics[key], rel=1e-12), key
        expect(page.get_by_text("Parent run", exact=True)).to_be_visible()
        expect(page.get_by_text(child_run.data.tags["verdict"]).first).to_be_visible()
        shot(page, "04_child_run")

        # 6. its parent, by the "Parent run" link: the report as the run's description
        page.get_by_role("link", name=pname[LAMS[0]], exact=True).click()
        expect(page.get_by_role("heading", name=pname[LAMS[0]], exact=True)).to_be_visible()
        expect(page.get_by_role("heading", name=re.compile(r"Sweep\s+smoke:\s+analysis report"))).to_be_visible()
        for kid in kids[LAMS[0]]:  # "Child runs" in About this run
            expect(page.get_by_role("link", name=kid, exact=True)).to_be_visible()
        more = page.get_by_text("Show more", exact=True)
        if more.count():
            more.first.click()
        figures = page.get_by_role("heading", name="Figures", exact=True)
        expect(figures).to_be_visible()
        # the report's figures load from the parent's artefacts (pipeline/mlflow_log.py)
        page.wait_for_function(
            "() => { const i = [...document.querySelectorAll('img[src*=\"get-artifact\"]')];"
            " return i.length >= 2 && i.every(x => x.complete && x.naturalWidth > 0); }",
            timeout=TIMEOUT_MS)
        shot(page, "05_parent_note_top")
        page.locator("img[src*='get-artifact']").nth(1).scroll_into_view_if_needed()
        shot(page, "06_parent_note_figures")

        # 7. the parent's artefacts: the archive among them
        page.get_by_role("tab", name="Artifacts").click()
        for name in ("archive.tar.gz", "results.parquet", "config.yaml", "overrides.txt", "analysis"):
            expect(page.get_by_text(name, exact=True).first).to_be_visible()
        page.get_by_text("archive.tar.gz", exact=True).first.click()
        expect(page.get_by_text(re.compile(r"Path:.*archive\.tar\.gz"))).to_be_visible()
        shot(page, "07_parent_artifacts")

        # 8. the runs' chart view: mean_response against step = N, the agent arms of both sweeps
        page.get_by_role("link", name="Runs", exact=True).first.click()
        search = page.get_by_placeholder(re.compile(r"metrics\.|params\.|[Ss]earch")).first
        search.fill("params.engine = 'agent'")
        search.press("Enter")
        expect(page).to_have_url(re.compile(r"searchFilter=params\.engine"))
        for lam in LAMS:
            expect(page.get_by_role("link", name=agent[lam], exact=True)).to_be_visible()
        expect(page.get_by_role("link", name=re.compile(r"meanfield"))).to_have_count(0)
        # the chart view's radio has no accessible name: its value is the handle
        page.locator("label").filter(has=page.locator("input[value=CHART]")).click()
        expect(page).to_have_url(re.compile(r"compareRunsMode=CHART"))
        page.get_by_placeholder("Search metric charts").fill("mean_response")
        # the progress charts of the parents (task/<engine>/...) come first; the children's
        # metrics are in the section "Model metrics", drawn when scrolled to
        page.get_by_text("Model metrics", exact=True).scroll_into_view_if_needed()
        card = page.get_by_role("heading", name="mean_response", exact=True).locator(
            "xpath=ancestor::*[contains(., 'Step')][1]")  # the chart's card: title, plot, legend
        card.scroll_into_view_if_needed()
        for lam in LAMS:
            expect(card).to_contain_text(f"{agent[lam]} (mean_response)")
        expect(card.locator(".point")).to_have_count(len(LAMS) * len(NS))  # plotly's markers
        shot(page, "08_chart_mean_response_vs_N")
        shot(page, "09_chart_card", card)

        # 9. the same chart with a log x-axis (Configure: "X-axis scale: Log scale")
        card.get_by_role("button").nth(1).click()  # the card's menu (after full screen)
        page.get_by_role("menuitem", name="Configure").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("switch", name="x-axis-log").click()
        dialog.get_by_role("button", name="Save changes").click()
        expect(dialog).to_have_count(0)
        card.scroll_into_view_if_needed()
        expect(card.locator(".point")).to_have_count(len(LAMS) * len(NS))
        shot(page, "10_chart_card_log_x", card)
    assert len(list(shots.glob("*.png"))) == 10



def _metric_page(experiment_id: str, run_id: str, key: str) -> str:
    """The UI's page of one metric of one run (the route MLflow's UI builds itself,
    ``Routes.getMetricPageRoute``: full history, a ``Download data`` button), points shown."""
    import json
    from urllib.parse import quote

    return (f"#/metric?runs={json.dumps([run_id])}&metric={quote(json.dumps(key))}"
            f"&experiments={json.dumps([experiment_id])}&plot_metric_keys={quote(json.dumps([key]))}"
            "&plot_layout={}&x_axis=step&y_axis_scale=linear&line_smoothness=1&show_point=true"
            "&deselected_curves=[]&last_linear_y_axis_range=[]")


def test_browser_a_sweep_of_many_points_is_a_handful_of_child_runs_with_every_point(store, server, tmp_path):
    """A sweep of 10^4 points shows in the UI as its parent and four child runs (one per arm,
    here per load), not as 10^4 runs: the runs list counts five, the parent's page says 10000
    points and names its four children; a child's metric page holds all of its 2500 points (its
    ``Download data`` file, the full history), while its charts draw a sample of them."""
    import csv

    from mlflow.tracking import MlflowClient
    from playwright.sync_api import expect

    client = MlflowClient(tracking_uri=store["uri"])
    parent = client.get_run(store["many"]["mlflow_run_id"])
    exp_id = parent.info.experiment_id
    assert client.get_experiment(exp_id).name == MANY_EXPERIMENT
    runs = client.search_runs([exp_id], max_results=5000)
    kids = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    n_points = len(MANY_NS) * len(MANY_LAMS)
    assert parent.data.params["n_points"] == str(n_points) == "10000"
    assert len(runs) == 1 + len(MANY_LAMS) and len(kids) == len(MANY_LAMS)  # a handful, not 10^4
    assert sorted(float(k.data.params["lam"]) for k in kids.values()) == list(MANY_LAMS)
    name, kid = sorted(kids.items())[0]
    history = sorted((m.step, m.value) for m in client.get_metric_history(kid.info.run_id, "mean_response"))
    assert [s for s, _ in history] == list(MANY_NS)  # step = N, every point of the arm

    shots = tmp_path / "shots"
    shots.mkdir()
    notes: list[str] = []
    expect.set_options(timeout=TIMEOUT_MS)
    with _browser_page(shots, notes, "notes_many.txt", "zz_many_failure", accept_downloads=True) as page:
        # 1. the experiment's runs, in the model-training view: the parent and its children
        page.goto(f"{server}#/experiments/{exp_id}/runs?workflowType=machine_learning",
                  wait_until="domcontentloaded")
        expect(page.get_by_text(f"{1 + len(MANY_LAMS)} matching runs")).to_be_visible()
        close = page.get_by_role("button", name="Close", exact=True)
        if page.get_by_text("MLflow Assistant").first.is_visible() and close.count():
            close.first.click()
        link = page.get_by_role("link", name=parent.info.run_name, exact=True)
        expect(link).to_be_visible()
        if not page.get_by_role("link", name=name, exact=True).count():
            page.get_by_role("row").filter(has=link).get_by_role("button").first.click()
        for kid_name in kids:
            expect(page.get_by_role("link", name=kid_name, exact=True)).to_be_visible()
        page.screenshot(path=str(shots / "11_many_points_runs.png"))

        # 2. the parent's page: a sweep of 10^4 points ("n_points"), its child runs four links
        link.click()
        expect(page.get_by_role("heading", name=parent.info.run_name, exact=True)).to_be_visible()
        expect(page.get_by_role("table").filter(has_text="Parameter").get_by_text("n_points", exact=True)).to_be_visible()
        params = _table(page, "Parameter")
        assert params["n_points"] == params["n_tasks"] == str(n_points), {k: params.get(k) for k in ("n_points", "n_tasks")}
        for kid_name in kids:  # "Child runs" in About this run
            expect(page.get_by_role("link", name=kid_name, exact=True)).to_be_visible()
        shown = [n for n in page.get_by_role("link").all_inner_texts() if n.strip() in kids]
        assert sorted(n.strip() for n in shown) == sorted(kids), shown
        notes.append(f"parent {parent.info.run_name}: n_points {params['n_points']}, child runs linked: {len(shown)}")
        page.screenshot(path=str(shots / "12_many_points_parent.png"))

        # 3. a child run's charts (Model metrics): mean_response against step = N
        page.get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()
        page.get_by_role("tab", name="Model metrics").click()
        heading = page.get_by_role("heading", name="mean_response", exact=True)
        expect(heading).to_be_visible()
        card = heading.locator("xpath=ancestor::*[contains(., 'Step')][1]")  # drawn: axis title
        expect(card.locator("path.js-line").first).to_be_attached()  # plotly's line of the trace
        page.screenshot(path=str(shots / "13_many_points_child_charts.png"))

        # 4. the child's metric page: the chart with its points, and the full history
        page.goto(server + _metric_page(exp_id, kid.info.run_id, "mean_response"))
        expect(page.get_by_role("button", name=re.compile("Download data"))).to_be_visible()
        points = page.locator(".point")
        expect(points.first).to_be_attached()
        drawn = points.count()
        assert 0 < drawn <= len(MANY_NS)
        notes.append(f"metric page of {name}: the chart draws {drawn} of the {len(MANY_NS)} points "
                     "(MLflow's charts sample a run's history)")
        # the page has loaded the history when its table shows Latest, Min and Max (each "(step=N)")
        summary = page.get_by_role("row").filter(has_text="mean_response").filter(has_text="step=")
        expect(summary.first).to_have_text(re.compile(r"(\(step=\d+\).*){3}", re.S))
        page.screenshot(path=str(shots / "14_many_points_metric_page.png"))
        with page.expect_download() as download:
            page.get_by_role("button", name=re.compile("Download data")).click()
        with open(download.value.path(), newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["key"] == "mean_response"]
        got = sorted((int(r["step"]), float(r["value"])) for r in rows)
        assert got == history, (len(got), len(history))  # every point, as the store has it
        notes.append(f"its Download data file: {len(got)} points, steps {got[0][0]}..{got[-1][0]}")
    assert len(list(shots.glob("*.png"))) == 4
