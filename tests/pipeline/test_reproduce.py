"""``python -m pipeline.reproduce``: a tiny real sweep (serial backend, MLflow off) is archived,
altered in one place at a time, and reproduced; plus damaged, oversized and hostile archives."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from pipeline import reproduce as rp
from pipeline.archive import safe_extract
from pipeline.errors import ConfigError
from pipeline.run import run_sweep, to_plain
from tests.helpers import REPO, compose, unresponsive_peer

TASK = "p00000-agent-r000"  # the row the alterations touch


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """A sweep of 12 tasks that takes about a second: smoke with short runs, serial, no MLflow."""
    tmp = tmp_path_factory.mktemp("reproduce")
    cfg = compose(["+sweep=smoke", f"output_dir={tmp / 'out'}", "mlflow.enabled=false",
                   "execution.progress=false", "execution.backend=serial", "params.events=20000",
                   "axes.n_servers=[20,40]"])
    out = run_sweep(to_plain(cfg), quiet=True)
    assert (out["frame"]["status"] == "ok").all()
    return out["archive"]


def repack(archive: Path, dest: Path, edit) -> Path:
    """``archive`` extracted (it is our own), ``edit(run_folder)`` applied, packed again."""
    work = dest.parent / (dest.name + ".d")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    edit(work / "run")
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(work / "run", arcname="run")
    shutil.rmtree(work)
    return dest


def result_file(run: Path, task_id: str = TASK) -> Path:
    """The result file (a chunk of rows, or one row in archives made before chunks) that holds
    ``task_id``'s row."""
    (path,) = [p for p in (run / "results").glob("*.parquet")
               if task_id in pl.read_parquet(p, columns=["task_id"])["task_id"].to_list()]
    return path


def edit_result(column: str, change):
    """Change ``column`` of TASK's row only, in the file that holds it."""
    def edit(run: Path) -> None:
        path = result_file(run)
        df = pl.read_parquet(path)
        i = df["task_id"].to_list().index(TASK)
        values = df[column].to_list()
        values[i] = change(values[i])
        df.with_columns(pl.Series(column, values, dtype=df.schema[column])).write_parquet(path)
    return edit


def edit_summary(run: Path) -> None:
    path = run / "analysis" / "summary.parquet"
    df = pl.read_parquet(path)
    values = df["mean_response"].to_list()
    i = next(i for i, v in enumerate(values) if v is not None)
    values[i] = values[i] * 1.001
    df.with_columns(pl.Series("mean_response", values, dtype=pl.Float64)).write_parquet(path)


def edit_report(run: Path) -> None:
    path = run / "analysis" / "report.md"
    text = path.read_text()
    assert "Tasks: **12**" in text
    path.write_text(text.replace("Tasks: **12**", "Tasks: **13**"))


def run_main(args: list, capsys) -> tuple[int, str, str]:
    code = rp.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_unaltered_archive_reproduces(archive, tmp_path, capsys):
    code, out, _ = run_main([archive, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 0, out
    assert out.rstrip().endswith("\nREPRODUCED")
    assert "12/12 bitwise identical" in out
    for name in ("summary.parquet", "report.md", "fits.json", "tail_pod.png"):
        assert name in out.split("analysis:", 1)[1].splitlines()[0]
    assert "mismatch" not in out


def test_an_archive_made_before_se_method_reproduces(tmp_path, capsys):
    """An archive whose config has no ``run.se_method`` (and whose tasks carry no
    ``se_method``) was made with batch means: it is rerun with them, and reproduces bitwise."""
    cfg = compose(["+sweep=smoke", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
                   "execution.progress=false", "execution.backend=serial", "params.events=20000",
                   "axes.n_servers=[20]", "run.se_method=batch_means"])
    made = run_sweep(to_plain(cfg), quiet=True)["archive"]

    def edit(run: Path) -> None:  # what an archive of that time holds: neither key
        conf = yaml.safe_load((run / "config.yaml").read_text())
        del conf["run"]["se_method"]
        (run / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
        doc = json.loads((run / "tasks.json").read_text())
        for t in doc["tasks"]:
            t.pop("se_method", None)
        (run / "tasks.json").write_text(json.dumps(doc))

    old = repack(made, tmp_path / "old.tar.gz", edit)
    code, out, _ = run_main([old, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 0, out
    assert out.rstrip().endswith("\nREPRODUCED")
    assert "6/6 bitwise identical" in out  # under obm the SEs and the cut would differ


@pytest.mark.parametrize("what", ["parameter", "seed", "estimate_1ulp", "summary", "report"])
def test_each_alteration_is_named(archive, tmp_path, capsys, what):
    ulp = {}

    def nudge(x):
        ulp["old"], ulp["new"] = x, math.nextafter(x, math.inf)
        return ulp["new"]

    edit, needle = {
        "parameter": (edit_result("lam", lambda x: x + 0.01), f"results task_id={TASK} lam:"),
        "seed": (edit_result("seed", lambda x: x + 1), f"results task_id={TASK} seed:"),
        "estimate_1ulp": (edit_result("mean_response", nudge), f"results task_id={TASK} mean_response:"),
        "summary": (edit_summary, "analysis/summary.parquet row "),
        "report": (edit_report, "analysis/report.md line 3: archived 'Tasks: **13**"),
    }[what]
    altered = repack(archive, tmp_path / "altered.tar.gz", edit)
    code, out, _ = run_main([altered, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 1, out
    assert out.rstrip().endswith("NOT REPRODUCED")
    assert needle in out, out
    assert "mismatches:   1\n" in out, out  # exactly the altered cell or line, nothing else
    if what == "estimate_1ulp":  # both values in full precision: they differ in the last digit
        assert f"archived {ulp['new']!r}, rerun {ulp['old']!r}" in out, out
    if what == "summary":
        line = next(x for x in out.splitlines() if x.startswith("  analysis/summary.parquet"))
        assert "policy='pod'" in line and "engine=" in line


def test_many_mismatches_are_counted_beyond_the_first_20(archive, tmp_path, capsys):
    def edit(run: Path) -> None:
        for path in (run / "results").glob("*.parquet"):
            df = pl.read_parquet(path)
            df.with_columns(pl.col("seed") + 1, pl.col("lam") * 2).write_parquet(path)

    altered = repack(archive, tmp_path / "altered.tar.gz", edit)
    code, out, _ = run_main([altered, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 1
    assert "mismatches:   24\n" in out and "  ... and 4 more\n" in out, out
    assert sum(x.startswith("  results task_id=") for x in out.splitlines()) == 20


def test_a_timing_line_alone_still_reproduces(archive, tmp_path, capsys):
    def edit(run: Path) -> None:
        path = run / "analysis" / "report.md"
        lines = path.read_text().splitlines()
        lines.insert(3, "Wall time: 12.25 s summed over tasks, finished 2026-12-01 11:42:07.")
        path.write_text("\n".join(lines) + "\n")

    altered = repack(archive, tmp_path / "altered.tar.gz", edit)
    code, out, _ = run_main([altered, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 0, out
    assert "timing lines: analysis/report.md line 4 left out" in out


def test_timing_rule_and_excluded_columns():
    timing = ["Wall time: 3.1 s", "wall_time_s = 4", "elapsed 2.0 s", "run on 2026-12-01",
              "finished at 11:42:07", "outputs/smoke/2026-12-01_11-42-07/report.md"]
    kept = ["mean response time 4.737 ± 1.8", "run length in fluid relaxation times (120)",
            "| 20 | agent | 2 | t over R replications |", "sim_time 1234.5", "ratio 1:10"]
    assert all(rp.TIMING.search(x) for x in timing)
    assert not any(rp.TIMING.search(x) for x in kept)

    old = pl.DataFrame({"task_id": ["a", "b"], "x": [1.0, 2.0], "wall_time": [1.0, 2.0],
                        "node": ["n1", "n1"], "run_id": ["r1", "r1"], "only_old": [1, 2]})
    new = pl.DataFrame({"task_id": ["b", "a"], "x": [2.0, 1.0], "wall_time": [9.0, 8.0],
                        "node": ["n2", "n3"], "run_id": ["r2", "r2"]})
    c = rp.Comparison(1e-9, True, [], [])
    out = c.frames(old, new, "f")
    assert out["rows"] == out["bitwise"] == 2
    assert [m[:3] for m in c.mismatches] == [("f", "every row", "only_old")]


def test_cells_bitwise_and_to_rtol():
    x = 0.1
    y = math.nextafter(x, 1.0)
    assert rp.cell_difference(x, y, 1e-9, True) == ("", x, y)
    assert rp.cell_difference(x, y, 1e-9, False) is None
    assert rp.cell_difference([1.0, x], [1.0, y], 1e-9, True) == ("[1]", x, y)
    assert rp.cell_difference(0.0, -0.0, 1e-9, True) is not None
    assert rp.cell_difference(math.nan, math.nan, 1e-9, True) is None
    assert rp.cell_difference(None, 0.0, 1e-9, False) is not None
    assert rp.cell_difference(3, 3, 1e-9, True) is None and rp.cell_difference(3, 4, 0.5, False) is not None


def test_png_pixels_ignore_metadata_but_not_pixels(archive, tmp_path):
    with tarfile.open(archive) as tar:
        png = tar.extractfile("run/analysis/tail_pod.png").read()
    assert b"tEXt" in png
    # the same image with another Software text chunk: same pixels
    i = png.index(b"tEXt") - 4
    n = int.from_bytes(png[i:i + 4], "big")
    other = png[:i] + png[i + 12 + n:]
    assert rp.png_pixels(other) == rp.png_pixels(png) is not None
    c = rp.Comparison(1e-9, True, [], [])
    c.image(png, other, "a.png")
    assert not c.mismatches
    # one pixel changed: a mismatch (the image data may span several IDAT chunks: they are
    # one zlib stream, rewritten here as a single chunk)
    import zlib
    chunks, i = [], 8
    while i < len(png):
        n = int.from_bytes(png[i:i + 4], "big")
        chunks.append((png[i + 4:i + 8], png[i:i + 12 + n]))
        i += 12 + n
    idat = [c_ for kind, c_ in chunks if kind == b"IDAT"]
    raw = bytearray(zlib.decompress(b"".join(c_[8:-4] for c_ in idat)))
    raw[len(raw) // 2] ^= 0xFF
    body = zlib.compress(bytes(raw))
    chunk = len(body).to_bytes(4, "big") + b"IDAT" + body + zlib.crc32(b"IDAT" + body).to_bytes(4, "big")
    j = png.index(idat[0])
    c.image(png, png[:j] + chunk + png[j + sum(map(len, idat)):], "a.png")
    assert [m[:2] for m in c.mismatches] == [("a.png", "pixels")]


def _short_tmp() -> Path:
    # Ray puts sockets under $TMPDIR/ray; pytest's folders are too long for a unix socket path
    return Path(tempfile.mkdtemp(prefix="lbr", dir="/tmp"))


@pytest.mark.integration  # the real command line with a local Ray cluster of its own
def test_archived_cluster_address_and_ray_address_are_not_used(archive, tmp_path):
    with unresponsive_peer() as (host, port):  # joining it would hang until Ray's time limit
        _archived_address_not_used(archive, tmp_path, f"ray://{host}:{port}")


def _archived_address_not_used(archive, tmp_path, address: str) -> None:
    def edit(run: Path) -> None:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["execution"].update(backend="ray", address=address, num_cpus=64)
        (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    altered = repack(archive, tmp_path / "cluster.tar.gz", edit)
    short = _short_tmp()
    env = {**os.environ, "RAY_ADDRESS": address, "TMPDIR": str(short)}
    env.pop("RAY_AUTH_MODE", None)
    try:  # the timeout is the guard against a connection attempt to the archived address, which hangs
        proc = subprocess.run([sys.executable, "-m", "pipeline.reproduce", str(altered), "--out",
                               str(tmp_path / "again"), "--no-progress", "--num-cpus", "2"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(local Ray cluster of 2 CPUs)" in proc.stdout
    assert proc.stdout.rstrip().endswith("\nREPRODUCED")
    assert f"archived execution settings not used (this machine's instead): address={address}, " \
           "num_cpus=64" in proc.stderr
    assert f"RAY_ADDRESS={address} is ignored" in proc.stderr


def test_execution_section_is_this_machines():
    import dataclasses

    from pipeline.config import ExecutionConfig

    archived = {"backend": "ray", "address": "ray://127.0.0.9:10001", "num_cpus": 64,
                "auth": "token", "connect_timeout": 600.0, "min_task_seconds": 30.0, "progress": True}
    ex = rp.local_execution(archived, None, None, None, False)
    assert ex == {**dataclasses.asdict(ExecutionConfig()), "backend": "ray", "address": None,
                  "num_cpus": None, "progress": False}
    assert rp.local_execution({"backend": "serial"}, None, None, 3, True)["backend"] == "serial"
    assert rp.local_execution({"backend": "serial"}, "ray", None, 3, True)["num_cpus"] == 3
    joined = rp.local_execution({"backend": "serial"}, None, "auto", None, True)
    assert joined["backend"] == "ray" and joined["address"] == "auto"
    with pytest.raises(ConfigError, match="needs the ray backend"):
        rp.local_execution({}, "serial", "auto", None, True)


def test_help_documents_address():
    text = rp.parser().format_help()
    assert "--address ADDR" in text and "RAY_ADDRESS" in text and "--max-bytes" in text


def _damaged(archive: Path, tmp_path: Path, kind: str) -> Path:
    data = archive.read_bytes()
    path = tmp_path / f"{kind}.tar.gz"
    if kind == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif kind == "not_gzip":
        path.write_bytes(b"this is not an archive\n" * 100)
    elif kind == "corrupt":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 64]) + data[mid + 64:])
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("kind", ["truncated", "not_gzip", "corrupt", "empty"])
def test_damaged_archives_exit_2_with_one_line(archive, tmp_path, capsys, kind):
    bad = _damaged(archive, tmp_path, kind)
    code, out, err = run_main([bad, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: archive="), err
    assert "Traceback" not in err and not out
    assert not (tmp_path / "again").exists()


def test_truncated_archive_on_the_command_line(archive, tmp_path):
    bad = _damaged(archive, tmp_path, "truncated")
    proc = subprocess.run([sys.executable, "-m", "pipeline.reproduce", str(bad)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "damaged or truncated" in proc.stderr and not proc.stdout


def test_declared_size_over_the_limit_is_refused_before_extracting(archive, tmp_path, capsys, monkeypatch):
    calls = []
    real = tarfile.TarFile.extract
    monkeypatch.setattr(tarfile.TarFile, "extract", lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    dest = tmp_path / "x"
    with pytest.raises(ConfigError, match="refused before extracting"):
        safe_extract(archive, dest, max_bytes=10_000)
    assert not calls and not dest.exists()
    code, _, err = run_main([archive, "--max-bytes", "10K", "--out", tmp_path / "again"], capsys)
    assert code == 2 and "more than 10240 bytes" in err and err.count("\n") == 1
    code, _, err = run_main([archive, "--max-members", "3", "--out", tmp_path / "again"], capsys)
    assert code == 2 and "more than 3 members" in err
    assert not calls and not (tmp_path / "again").exists()
    # within the limits it extracts
    assert (safe_extract(archive, dest) / "config.yaml").is_file() and calls


def test_bytes_written_are_counted_too(tmp_path):
    """A header that understates a member cannot exist in tar (the size *is* the header's); the
    second count still stops an extraction whose files outgrow the limit."""
    src = tmp_path / "run"
    src.mkdir()
    (src / "config.yaml").write_text("x: 1\n")
    (src / "big.bin").write_bytes(b"\0" * 50_000)
    path = tmp_path / "a.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname="run")
    with pytest.raises(ConfigError, match="more than 40000 bytes"):
        safe_extract(path, tmp_path / "x", max_bytes=40_000)


def test_no_temporary_folder_is_left(archive, tmp_path, capsys, monkeypatch):
    tmpdir = tmp_path / "tmpd"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))

    def left():
        return sorted(p.name for p in tmpdir.glob("lbsweep-reproduce-*"))

    assert run_main([archive, "--out", tmp_path / "ok", "--no-progress"], capsys)[0] == 0
    assert left() == []
    altered = repack(archive, tmp_path / "altered.tar.gz", edit_report)
    assert run_main([altered, "--out", tmp_path / "bad", "--no-progress"], capsys)[0] == 1
    assert left() == []
    assert run_main([_damaged(archive, tmp_path, "truncated")], capsys)[0] == 2
    assert left() == []

    import pipeline.run

    seen = []

    def interrupted(cfg, quiet=False, archived=False):
        seen.append(left())  # the extraction folder exists while the rerun runs
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.run, "run_sweep", interrupted)
    code, _, err = run_main([archive, "--out", tmp_path / "int", "--no-progress"], capsys)
    assert code == 130 and err == "error: interrupted\n"
    assert len(seen) == 1 and len(seen[0]) == 1
    assert left() == []


def _alone(archive: Path, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A copy of ``archive`` alone in a folder, and an empty ``$TMPDIR`` for the command."""
    folder = tmp_path / "run"
    folder.mkdir()
    copy = folder / "archive.tar.gz"
    shutil.copy(archive, copy)
    tmpdir = tmp_path / "tmpd"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    return copy, tmpdir


def test_by_default_the_rerun_leaves_nothing(archive, tmp_path, capsys, monkeypatch):
    """Issue 43 (6): the rerun (92 MB for the headline) was left as reproduce-<time>/ inside the
    original run folder. By default it goes to a temporary folder, removed at the end."""
    copy, tmpdir = _alone(archive, tmp_path, monkeypatch)
    code, out, _ = run_main([copy, "--no-progress"], capsys)
    assert code == 0 and out.rstrip().endswith("\nREPRODUCED"), out
    assert "rerun:        in a temporary folder, removed (--keep or --out DIR keeps it)" in out
    assert [p.name for p in copy.parent.iterdir()] == ["archive.tar.gz"]
    assert list(tmpdir.iterdir()) == []


def test_keep_keeps_the_rerun_and_names_it(archive, tmp_path, capsys, monkeypatch):
    copy, tmpdir = _alone(archive, tmp_path, monkeypatch)
    code, out, _ = run_main([copy, "--keep", "--no-progress"], capsys)
    assert code == 0 and out.rstrip().endswith("\nREPRODUCED"), out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("rerun:")]
    kept = Path(line.split()[1])
    assert line.endswith("), kept") and kept.parent.parent == tmpdir and kept.parent.name.startswith("lbsweep-rerun-")
    assert (kept / "results.parquet").is_file() and (kept / "archive.tar.gz").is_file()
    assert [p.name for p in copy.parent.iterdir()] == ["archive.tar.gz"]
    assert [p.name for p in tmpdir.iterdir()] == [kept.parent.name]  # the extraction folder is gone
    # the folder made for a kept rerun that never started (interrupted at once) is not left
    shutil.rmtree(kept.parent)
    import pipeline.run

    def interrupted(cfg, quiet=False, archived=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.run, "run_sweep", interrupted)
    assert run_main([copy, "--keep", "--no-progress"], capsys)[0] == 130
    assert list(tmpdir.iterdir()) == []


@pytest.mark.parametrize("files,needle", [
    ({"other.txt": "x"}, "no run/config.yaml inside"),
    ({"config.yaml": "- a list\n"}, "config.yaml is not a mapping"),
    ({"config.yaml": "name: x\nno_such_key: 1\n"}, "not a usable config"),
    ({"config.yaml": "name: x\n"}, "run/tasks.json is missing or not JSON"),
])
def test_archives_that_are_not_runs_exit_2(tmp_path, capsys, files, needle):
    src = tmp_path / "run"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    path = tmp_path / "a.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname="run")
    code, out, err = run_main([path, "--out", tmp_path / "again"], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1 and not out, err


def test_an_archive_with_an_unused_parameter_reproduces_with_a_warning(tmp_path, capsys, caplog):
    # made as before the rule that refuses such parameters (run_sweep's archived mode only
    # warns): smoke's pod takes no k, so k = 3 was dropped from every task
    cfg = compose(["+sweep=smoke", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
                   "execution.progress=false", "execution.backend=serial", "params.events=20000",
                   "axes.n_servers=[20]", "+params.k=3"])
    with pytest.raises(ConfigError, match=r"params.k=3: no task of this sweep uses it"):
        run_sweep(to_plain(cfg), quiet=True)
    with caplog.at_level("WARNING", logger="pipeline"):
        out = run_sweep(to_plain(cfg), quiet=True, archived=True)
    assert out["frame"]["k"].null_count() == out["frame"].height  # k applied to no task
    assert any("params.k=3: no task" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeline"):
        code, text, _ = run_main([out["archive"], "--out", tmp_path / "again", "--no-progress"],
                                 capsys)
    assert code == 0, text
    assert text.rstrip().endswith("\nREPRODUCED")
    assert any("params.k=3: no task" in r.getMessage() and "run without them" in r.getMessage()
               for r in caplog.records)


# ------------------------------------------------------- archives that carry code or bombs

def _marker_module(marker: Path, what: str) -> str:
    """Source that leaves ``marker`` behind if it is ever executed."""
    return f"open({str(marker)!r}, 'a').write({what!r} + '\\n')\nMODEL = None\n"


def _set_config(run: Path, **changes) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.update(changes)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def _reproduce_cli(args: list, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-m", "pipeline.reproduce", *map(str, args)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("names", [{"models": ["evilmod"]}, {"model": "evilmod"}], ids=["models", "model"])
def test_an_archived_model_the_config_names_is_not_imported(archive, tmp_path, capsys, names):
    """Issue 34 (1a): ``models: [evilmod]`` with ``run/models/evilmod/`` ran the archive's code
    as the user; it is data now: not installed here, so one line and exit 2, nothing ran. The
    same through the ``model`` key."""
    marker = tmp_path / "ran.txt"

    def edit(run: Path) -> None:
        _set_config(run, **names)
        (run / "models" / "evilmod").mkdir(parents=True)
        (run / "models" / "evilmod" / "__init__.py").write_text(_marker_module(marker, "evilmod"))

    evil = repack(archive, tmp_path / "evil.tar.gz", edit)
    code, out, err = run_main([evil, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert not marker.exists(), marker.read_text()
    assert code == 2 and not out and err.count("\n") == 1, err
    assert "'evilmod' is not installed on this machine" in err and "--trust-archive-models" in err, err
    assert "evilmod" not in sys.modules and not any("lbsweep-reproduce-" in p for p in sys.path)
    assert not (tmp_path / "again").exists()


def test_archived_files_that_shadow_the_standard_library_are_not_imported(archive, tmp_path):
    """Issue 34 (1b): an untouched config and ``run/models/{pprint,shlex,fractions,secrets}.py``:
    they ran (first on sys.path) and the verdict was REPRODUCED. None may run. A fresh process,
    since these modules are already imported in this one."""
    marker = tmp_path / "ran.txt"
    names = ("pprint", "shlex", "fractions", "secrets")

    def edit(run: Path) -> None:
        (run / "models").mkdir()
        for name in names:
            (run / "models" / f"{name}.py").write_text(_marker_module(marker, name))

    shadow = repack(archive, tmp_path / "shadow.tar.gz", edit)
    proc = _reproduce_cli([shadow, "--out", tmp_path / "again", "--no-progress"])
    assert not marker.exists(), f"archived modules ran: {marker.read_text()}"
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("\nREPRODUCED"), proc.stdout + proc.stderr


def test_an_archived_package_named_as_an_installed_one_never_runs(archive, tmp_path):
    """A third shape: the config names ``numpy`` and the archive ships ``run/models/numpy/``.
    First on sys.path, it replaced the real numpy. Without the flag the installed numpy is
    used (it is no model: exit 2); with --trust-archive-models the name is refused, as it
    would shadow an installed module. One line each, and the archived package never runs."""
    marker = tmp_path / "ran.txt"

    def edit(run: Path) -> None:
        _set_config(run, models=["numpy"])
        (run / "models" / "numpy").mkdir(parents=True)
        (run / "models" / "numpy" / "__init__.py").write_text(_marker_module(marker, "numpy"))

    evil = repack(archive, tmp_path / "numpy.tar.gz", edit)
    for flag, needle in (([], "exports no MODEL"), (["--trust-archive-models"], "also a module on this machine")):
        proc = _reproduce_cli([evil, "--out", tmp_path / "again", "--no-progress", *flag])
        assert not marker.exists(), f"{flag}: the archived numpy ran"
        assert proc.returncode == 2 and not proc.stdout, (flag, proc.stdout + proc.stderr)
        lines = [x for x in proc.stderr.splitlines() if x.startswith("error")]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["json", "antigravity"])
def test_a_standard_library_name_is_no_model(archive, tmp_path, capsys, name):
    def edit(run: Path) -> None:
        _set_config(run, models=[name])

    bad = repack(archive, tmp_path / "std.tar.gz", edit)
    for flag in ([], ["--trust-archive-models"]):
        code, out, err = run_main([bad, "--out", tmp_path / "again", "--no-progress", *flag], capsys)
        assert code == 2 and not out and err.count("\n") == 1, err
        assert f"models: '{name}' is a standard-library module, not a model" in err, err


TOY_INIT = '''
import pprint  # must be the standard library's, not the archive's pprint.py
from sim.core.declare import Entry, Model, Param

assert pprint.pformat([1]) == "[1]"

MODEL = Model(
    name="toy_trusted",
    title="toy: independent M/M/1 queues behind random routing",
    entries=(Entry("agent", "random", "toy_trusted.engine:run_task", ("mu",)),),
    params={"mu": Param("float", "service rate of every server")},
    results={},
    main_estimate="mean_response",
    events_per_time=lambda task: task["n_servers"] * task["lam"] * task["mu"],
    check_task=lambda task: None,
    labels={"random": "random (toy)"},
)
'''

TOY_ENGINE = '''
import numpy as np


def run_task(task):
    rng = np.random.default_rng(task["seed"])
    x = rng.exponential(1.0 / task["mu"], 2000)
    return {"mean_response": float(x.mean()), "mean_response_se": float(x.std() / 2000 ** 0.5),
            "n_jobs": 2000, "events_run": int(task["events"]), "sim_time": 1.0,
            "ci_method": "iid"}
'''

TOY_SWEEP = '''# @package _global_
name: toy_trusted
model: toy_trusted
models: [toy_trusted]
policies: [random]
engines: [agent]
replications: 2
axes:
  n_servers: [10, 20]
params:
  lam: 0.5
  mu: 2.0
  events: 1000
'''

MAKE_TOY_ARCHIVE = '''
import sys
from pathlib import Path
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose

out = Path(sys.argv[1])
cfg = compose(["+sweep=toy_trusted", f"hydra.searchpath=[file://{sys.argv[2]}]", f"output_dir={out}",
               "mlflow.enabled=false", "execution.backend=serial", "execution.progress=false"])
print(run_sweep(to_plain(cfg), quiet=True)["archive"])
'''


@pytest.fixture(scope="module")
def toy_archive(tmp_path_factory) -> Path:
    """An archive of an out-of-tree model, made in another process (registering the toy here
    would change which models serve random/agent for the other tests)."""
    tmp = tmp_path_factory.mktemp("toy")
    pkg = tmp / "ext" / "toy_trusted"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(TOY_INIT.lstrip())
    (pkg / "engine.py").write_text(TOY_ENGINE.lstrip())
    (tmp / "conf" / "sweep").mkdir(parents=True)
    (tmp / "conf" / "sweep" / "toy_trusted.yaml").write_text(TOY_SWEEP)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp / "ext"), str(REPO)])
    proc = subprocess.run([sys.executable, "-c", MAKE_TOY_ARCHIVE, str(tmp / "out"), str(tmp / "conf")], cwd=tmp,
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_trusted_archive_models_load_only_the_named_package(toy_archive, tmp_path):
    """--trust-archive-models imports the named package from the archive (its submodule too),
    and nothing else: a pprint.py beside it stays unread, the package's own ``import pprint``
    gets the standard library. Without the flag: one line, exit 2, naming the flag."""
    marker = tmp_path / "ran.txt"

    def edit(run: Path) -> None:
        assert (run / "models" / "toy_trusted" / "engine.py").is_file()
        (run / "models" / "pprint.py").write_text(_marker_module(marker, "pprint"))

    toy = repack(toy_archive, tmp_path / "toy.tar.gz", edit)
    proc = _reproduce_cli([toy, "--out", tmp_path / "plain", "--no-progress"])
    assert proc.returncode == 2 and not proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "'toy_trusted' is not installed on this machine" in proc.stderr
    assert "--trust-archive-models" in proc.stderr and not (tmp_path / "plain").exists()

    proc = _reproduce_cli([toy, "--out", tmp_path / "trusted", "--no-progress", "--trust-archive-models"])
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("\nREPRODUCED"), proc.stdout + proc.stderr
    assert "4/4 bitwise identical" in proc.stdout
    assert not marker.exists()
    with tarfile.open(tmp_path / "trusted" / "archive.tar.gz") as tar:  # the rerun archives it too
        assert "run/models/toy_trusted/engine.py" in tar.getnames()
        assert "run/models/pprint.py" not in tar.getnames()


def alias_bomb() -> str:
    """About 1 kB of YAML whose aliases expand to 9**10 strings (a "billion laughs")."""
    levels = "".join(f"l{i + 1}: &l{i + 1} [" + ", ".join([f"*l{i}"] * 9) + "]\n" for i in range(9))
    return 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + levels


def test_yaml_alias_bomb_is_refused_at_once(archive, tmp_path, capsys):
    """Issue 34 (4): a 1,250-byte config.yaml of nested aliases took minutes and gigabytes."""
    def edit(run: Path) -> None:
        (run / "config.yaml").write_text(alias_bomb() + (run / "config.yaml").read_text())

    bomb = repack(archive, tmp_path / "bomb.tar.gz", edit)
    # the timeout is the guard: the expansion took minutes and gigabytes
    proc = _reproduce_cli([bomb, "--out", tmp_path / "again", "--no-progress"], timeout=60)
    assert proc.returncode == 2 and not proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "run/config.yaml" in proc.stderr, proc.stderr
    assert "expands to more than" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_reads_a_run_folders_config_bounded(archive, tmp_path):
    """``python -m pipeline.resume`` loads the folder's config.yaml through the same bounds."""
    folder = tmp_path / "run"
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    (folder / "config.yaml").write_text(alias_bomb() + (folder / "config.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "-m", "pipeline.resume", str(folder), "--no-progress"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "configuration error" in lines[0] and "expands to more than" in lines[0], lines


@pytest.mark.parametrize("text,needle", [
    ("name: !!python/object/apply:os.system ['echo pwned']\n", "the tag '!!python/object/apply:os.system' is not allowed"),
    ("name: ${oc.env:HOME}\n", "is an interpolation"),
    ("name: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 64 levels"),
], ids=["python_tag", "interpolation", "depth"])
def test_unsafe_yaml_in_an_archived_config_is_refused(archive, tmp_path, capsys, text, needle):
    """Issue 34 (7): a ``!!python`` tag was a traceback, exit 1 (read as NOT REPRODUCED). It is
    an unusable archive: one line, exit 2. So are an interpolation (our configs are written
    resolved) and absurd nesting."""
    def edit(run: Path) -> None:
        cfg = (run / "config.yaml").read_text()
        (run / "config.yaml").write_text(text + "\n".join(x for x in cfg.splitlines() if not x.startswith("name:")) + "\n")

    bad = repack(archive, tmp_path / "bad.tar.gz", edit)
    code, out, err = run_main([bad, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert err.startswith("error: archive=") and "run/config.yaml, line 1" in err and needle in err, err
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("where", ["results", "analysis"])
def test_a_byte_flip_in_parquet_metadata_is_an_unusable_archive(archive, tmp_path, capsys, where):
    """Issue 34 (7): one flipped byte in a result file's Parquet footer gave a traceback and no
    verdict. It names the file, exit 2, before any compute (also for an analysis frame)."""
    def edit(run: Path) -> None:
        path = result_file(run) if where == "results" else run / "analysis" / "summary.parquet"
        data = bytearray(path.read_bytes())
        # the high byte of the footer's length (the 4 bytes before the closing "PAR1"): a byte
        # inside the footer may land in statistics no reader checks; this one every reader needs
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))

    flipped = repack(archive, tmp_path / "flip.tar.gz", edit)
    code, out, err = run_main([flipped, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 2 and not out and err.count("\n") == 1, err
    name = "run/results/chunk-" if where == "results" else "run/analysis/summary.parquet"
    assert name in err and "is not readable Parquet" in err, err
    assert not (tmp_path / "again").exists()


def test_sigterm_removes_the_temporary_folder(archive, tmp_path):
    """Issue 34 (4): SIGTERM left the extraction folder behind. It ends the command as Ctrl-C
    does: exit 130, the folder removed."""
    import signal

    tmpdir = tmp_path / "tmpd"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env["TMPDIR"] = str(tmpdir)
    # the rerun waits in run_sweep (patched in this process only) until it is signalled
    script = ("import sys, time, pipeline.run\n"
              "def wait(*a, **k):\n"
              "    print('running', flush=True)\n"
              "    time.sleep(120)\n"
              "pipeline.run.run_sweep = wait\n"
              "from pipeline.reproduce import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(archive), "--out", str(tmp_path / "again"),
                             "--no-progress"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        assert len(list(tmpdir.glob("lbsweep-reproduce-*"))) == 1
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err.strip().endswith("error: interrupted"), err
    assert list(tmpdir.glob("lbsweep-reproduce-*")) == []


def test_another_cpu_is_another_environment():
    """Last bits follow the CPU's code paths (numba's target, numpy's SIMD): a rerun on another
    CPU, or of an archive that recorded none, is compared to --rtol, never bitwise."""
    from pipeline.archive import cpu, environment

    here = environment()
    assert here["cpu"] == cpu() and here["cpu"]["llvm_target"] and here["cpu"]["model"] is not None
    assert rp.env_differences(here, here) == []
    other = json.loads(json.dumps(here))
    other["cpu"]["llvm_target"], other["cpu"]["model"] = "skylake-avx512", "Intel Xeon"
    assert rp.env_differences(other, here) == [
        f"cpu Intel Xeon (skylake-avx512) -> {here['cpu']['model']} ({here['cpu']['llvm_target']}) (llvm_target differ)"]
    old = {k: v for k, v in here.items() if k != "cpu"}  # an archive made before the CPU was recorded
    assert rp.env_differences(old, here) == [f"cpu not recorded in the archive -> {here['cpu']['model'] or 'this CPU'}"]
    forced = json.loads(json.dumps(here))
    forced["cpu"]["overrides"] = {"NUMBA_CPU_NAME": "generic"}
    assert "overrides differ" in rp.env_differences(forced, here)[0]


def test_where_bits_may_differ_the_default_tolerance_covers_a_cpu_change():
    # a refined mean-field value as it moved between an AMD EPYC and an Intel Xeon (issue 43)
    assert rp.cell_difference(1.5012335128, 1.5012335712, rp.DEFAULT_RTOL, False) is None
    assert rp.cell_difference(1.5012335128, 1.5012335712, rp.DEFAULT_RTOL, True) is not None
    assert rp.cell_difference(1e-15, 3e-15, rp.DEFAULT_RTOL, False) is None  # below ATOL
    assert rp.cell_difference(1.0, 1.0 + 3 * rp.DEFAULT_RTOL, rp.DEFAULT_RTOL, False) is not None


def test_an_archive_of_one_file_per_row_reproduces(archive, tmp_path, capsys):
    """Archives made before chunks hold one result file per row (``<task_id>-<hex>.parquet``):
    they are read in one scan and still reproduce, row for row."""
    from tests.pipeline.test_chunks import one_file_per_row

    old = repack(archive, tmp_path / "old.tar.gz", lambda run: one_file_per_row(run / "results"))
    with tarfile.open(old) as tar:
        names = [n for n in tar.getnames() if n.startswith("run/results/") and n.endswith(".parquet")]
    assert len(names) == 12 and not any("/chunk-" in n for n in names)
    code, out, _ = run_main([old, "--out", tmp_path / "again", "--no-progress"], capsys)
    assert code == 0, out
    assert "12/12 bitwise identical" in out and out.rstrip().endswith("\nREPRODUCED")
