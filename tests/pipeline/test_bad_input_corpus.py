"""The bad-input corpus (bad_input_corpus.txt, one case a line): every case is refused before
any compute with one line naming the key and the value, exit code 2, no traceback, no Ray and
nothing written but Hydra's log (in ``outputs/.log/``, never under ``outputs/<name>/``).

Every line runs in-process: Hydra's compose API (its refusals turned into one line by
:func:`pipeline.config.compose_error_message`, as ``python -m pipeline`` does), then
``run_cli(run_sweep)`` with Ray's ``connect`` forbidden. Lines marked ``cli`` also run as a
real ``python -m pipeline`` in a fresh folder, a few at a time (each costs seconds of imports).
Lines marked ``hang`` (YAML bombs: a regression would hang) make that in-process check in a
child process with a timeout. Sweep files Hydra reaches other ways (a ``defaults`` list, a
multirun, a ``--config-dir``) and oversized ones are checked through the command line below.
"""
from __future__ import annotations

import codecs
import logging
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import pipeline.run
from pipeline.__main__ import run_cli
from pipeline.config import compose
from pipeline.errors import ConfigError
from pipeline.run import EXIT_CONFIG, run_sweep
from tests.helpers import REPO

CORPUS = Path(__file__).with_name("bad_input_corpus.txt")
HEADER = b"# @package _global_\n"


@dataclass(frozen=True)
class Case:
    line: int
    words: tuple[str, ...]  #: the overrides (a sweep file as +sweep=NAME)
    needles: tuple[str, ...]
    cli: bool
    hang: bool  #: checked in a child process with a timeout
    sweep: str | None  #: name of the case's sweep file, if it has one
    content: bytes | None  #: that file's bytes

    def __str__(self):
        return f"line{self.line}"


def load_corpus(path: Path = CORPUS) -> list[Case]:
    cases = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        lhs, sep, rhs = line.partition(" => ")
        assert sep and rhs.strip(), f"{path.name}:{n}: no ' => NEEDLE'"
        cli = lhs.startswith("cli ")
        if cli:
            lhs = lhs[4:]
        hang = lhs.startswith("hang ")
        if hang:
            lhs = lhs[5:]
        sweep = content = None
        for tag in ("@sweep:", "@file:"):
            if tag in lhs:  # the sweep file's text runs to the '=>'
                lhs, _, text = lhs.partition(tag)
                sweep = f"corpus_line{n}"
                content = (HEADER if tag == "@sweep:" else b"") + codecs.escape_decode(text.encode())[0]
        words = shlex.split(lhs) + ([f"+sweep={sweep}"] if sweep else [])
        needles = tuple(s.strip().replace("{sweep}", sweep or "") for s in rhs.split(" && "))
        cases.append(Case(n, tuple(words), needles, cli, hang, sweep, content))
    return cases


CASES = load_corpus()
CLI_CASES = [c for c in CASES if c.cli]


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory) -> Path:
    """A config folder on Hydra's search path holding every case's sweep file."""
    root = tmp_path_factory.mktemp("corpus_conf")
    (root / "sweep").mkdir()
    for c in CASES:
        if c.sweep:
            (root / "sweep" / f"{c.sweep}.yaml").write_bytes(c.content)
    return root


def _extra(sweep_root: Path, tmp: Path) -> list[str]:
    return [f"hydra.searchpath=[file://{sweep_root}]", f"mlflow.tracking_uri=sqlite:///{tmp}/mlflow.db"]


def _check_message(case: Case, message: str) -> None:
    assert "\n" not in message.strip(), f"line {case.line}: more than one line:\n{message}"
    for needle in case.needles:
        assert needle in message, f"line {case.line}: {needle!r} not in {message!r}"


def test_corpus_is_large_and_unique():
    assert len(CASES) >= 80
    seen = [c.words if not c.sweep else (c.content,) for c in CASES]
    assert len(set(seen)) == len(seen), "a case is listed twice"
    assert len(CLI_CASES) >= 8


#: the in-process check of a ``hang`` line, in a child process: prints the exit code and the
#: messages of WARNING and above as JSON
CHILD = """
import json, logging, sys
import pipeline.run
from pipeline.__main__ import run_cli
from pipeline.config import compose
from pipeline.errors import ConfigError
from pipeline.run import run_sweep

def no_ray(*a, **k):
    raise AssertionError("Ray's connect was called")

pipeline.run.connect = no_ray
try:
    cfg = compose(json.loads(sys.argv[1]))
except ConfigError as exc:
    print(json.dumps({"code": None, "messages": [str(exc)]}))
    sys.exit()
shown = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda r: shown.append(r.getMessage())
logging.getLogger("pipeline").addHandler(handler)
code = run_cli(lambda: run_sweep(cfg, quiet=True))
print(json.dumps({"code": code, "messages": shown}))
"""


def _in_child(case: Case, words: list[str]) -> str:
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(words)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"line {case.line}: {proc.stderr[-2000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["code"] in (None, EXIT_CONFIG), f"line {case.line}: exit {res['code']}, {res['messages']}"
    assert len(res["messages"]) == 1, res["messages"]
    return res["messages"][0]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_process(case, sweep_root, tmp_path, monkeypatch, caplog):
    def no_ray(*a, **k):
        raise AssertionError(f"line {case.line}: Ray's connect was called")

    monkeypatch.setattr(pipeline.run, "connect", no_ray)
    out = tmp_path / "out"
    if case.hang:
        _check_message(case, _in_child(case, [*case.words, *_extra(sweep_root, tmp_path), f"output_dir={out}"]))
        assert not out.exists() and not (tmp_path / "mlflow.db").exists()
        return
    try:
        cfg = compose([*case.words, *_extra(sweep_root, tmp_path), f"output_dir={out}"])
    except ConfigError as exc:  # Hydra's refusal: python -m pipeline prints this line, exit 2
        message = str(exc)
    else:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pipeline"):
            code = run_cli(lambda: run_sweep(cfg, quiet=True))
        shown = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert code == EXIT_CONFIG, f"line {case.line}: exit {code}, {[r.getMessage() for r in shown]}"
        assert len(shown) == 1, [r.getMessage() for r in shown]
        message = shown[0].getMessage()
    _check_message(case, message)
    assert not out.exists(), f"line {case.line}: {out} was created"
    assert not (tmp_path / "mlflow.db").exists()


def _run_cli(case: Case, sweep_root: Path, tmp: Path) -> dict:
    cwd = tmp / "a" / "b"  # name=../../x would leave outputs/ two levels up
    cwd.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "pipeline", *case.words, *_extra(sweep_root, tmp)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    return {"code": proc.returncode, "out": proc.stdout + proc.stderr, "files": files}


@pytest.fixture(scope="module")
def cli_results(sweep_root, tmp_path_factory) -> dict[int, dict]:
    """Every ``cli`` case as a real subprocess, a few at a time."""
    dirs = {c.line: tmp_path_factory.mktemp(f"cli_line{c.line}") for c in CLI_CASES}
    with ThreadPoolExecutor(max_workers=min(4, (os.cpu_count() or 1) + 1)) as pool:
        futures = {c.line: pool.submit(_run_cli, c, sweep_root, dirs[c.line]) for c in CLI_CASES}
        return {line: f.result() for line, f in futures.items()}


@pytest.mark.integration  # real command lines (about 20 s in all): CI runs them with -m integration
@pytest.mark.parametrize("case", CLI_CASES, ids=str)
def test_refused_by_the_command_line(case, cli_results):
    res = cli_results[case.line]
    out = res["out"]
    assert res["code"] == EXIT_CONFIG, f"line {case.line}: exit {res['code']}\n{out}"
    assert "Traceback" not in out and "Ray" not in out, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and "configuration error" in lines[0], out
    _check_message(case, lines[0])
    # nothing but Hydra's log, and that only under outputs/.log/ of the working folder
    for f in res["files"]:
        assert f.startswith(os.path.join("a", "b", "outputs", ".log", "")) and f.endswith("__main__.log"), res["files"]


def _bomb() -> str:
    """A YAML alias bomb of about 600 bytes (9**9 strings once expanded)."""
    levels = "".join(f"l{i + 1}: &l{i + 1} [" + ", ".join([f"*l{i}"] * 9) + "]\n" for i in range(8))
    return "# @package _global_\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + levels


@pytest.mark.parametrize("how", ["defaults", "multirun", "config_dir", "config_name", "oversized"])
def test_sweep_files_hydra_reaches_other_ways_are_bounded(tmp_path, how):
    """A sweep file is checked before Hydra composes it also when it comes through another
    sweep's ``defaults`` list, one of a multirun's sweeps (``-m +sweep=a,b``), a
    ``--config-dir`` or as the primary config (``--config-name``); and a file over the size cap
    is refused unread. A real command line, in a
    child process with a timeout (an unbounded load would hang it)."""
    conf = tmp_path / "conf" / "sweep"
    conf.mkdir(parents=True)
    (conf / "bomb.yaml").write_text(_bomb())
    (conf / "outer.yaml").write_text("# @package _global_\ndefaults:\n  - bomb\n  - _self_\nname: outer\n")
    # refused by the plan too (replications: 0), so that no regression runs a sweep
    (conf / "big.yaml").write_text("# @package _global_\nname: big\nreplications: 0\n" + "# padding\n" * 120_000)
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    words, needle = {
        "defaults": ([search, "+sweep=outer"], "bomb.yaml"),
        "multirun": (["-m", search, "+sweep=smoke,bomb"], "bomb.yaml"),
        "config_dir": (["--config-dir", str(tmp_path / "conf"), "+sweep=bomb"], "bomb.yaml"),
        "config_name": (["--config-dir", str(conf), "--config-name", "bomb"], "bomb.yaml"),
        "oversized": ([search, "+sweep=big"], "big.yaml"),
    }[how]
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "pipeline", *words, f"output_dir={tmp_path / 'out'}",
                           "mlflow.enabled=false"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
    assert proc.returncode == EXIT_CONFIG and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("configuration error: ") and needle in lines[0], lines
    reason = "more than the 1048576 bytes" if how == "oversized" else "expands to more than 100000 nodes"
    assert reason in lines[0], lines
    assert not (tmp_path / "out").exists()
