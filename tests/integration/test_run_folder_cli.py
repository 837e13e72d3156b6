"""One run, one folder through real command lines (pipeline/runfolder.py): two sweeps started
together get two folders, each with exactly its own rows; a refused input and a dry run leave
nothing under ``outputs/<sweep>/`` (their logs stay in ``outputs/.log/``); an existing
``output_dir`` is refused with one line and exit code 2."""
from __future__ import annotations

import subprocess
import sys

import polars as pl

from pipeline.run import EXIT_CONFIG
from tests.integration.conftest import driver_env

#: the smoke grid (12 tasks, 2 replications) with short runs, without Ray
SMOKE = ["+sweep=smoke", "params.events=20000", "execution.backend=serial", "execution.progress=false"]


def _start(cwd, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=driver_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def test_two_sweeps_started_together_get_two_folders_with_their_own_rows(tmp_path):
    procs = {lam: _start(tmp_path, *SMOKE, f"params.lam={lam}", f"mlflow.tracking_uri=sqlite:///{tmp_path / f'm{lam}.db'}")
             for lam in (0.5, 0.7)}
    done = {lam: _finish(p) for lam, p in procs.items()}
    for lam, (code, text) in done.items():
        assert code == 0, text[-3000:]
    folders = sorted((tmp_path / "outputs" / "smoke").iterdir())
    assert len(folders) == 2, folders
    seen = []
    for folder in folders:
        frame = pl.read_parquet(folder / "results.parquet")
        assert frame.height == 12 and frame["task_id"].n_unique() == 12 and frame["run_id"].n_unique() == 1
        (lam,) = frame["lam"].unique().to_list()
        seen.append(lam)
        summary = pl.read_parquet(folder / "analysis" / "summary.parquet")
        assert set(summary.filter(pl.col("engine") == "agent")["n_rep"].to_list()) == {2}
        assert str(folder) in done[lam][1]  # each command printed its own folder
        assert "sweep 'smoke'" in (folder / "__main__.log").read_text()
    assert sorted(seen) == [0.5, 0.7]
    assert not any((tmp_path / "outputs" / ".log").iterdir())  # both logs moved to their folders


def test_refused_input_dry_run_and_existing_output_dir_make_no_run_folder(tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "run.json").write_text("{}")
    procs = [_start(tmp_path, *SMOKE, "mlflow.enabled=false", "params.lam=1.5"),
             _start(tmp_path, *SMOKE, "mlflow.enabled=false", "plan=true"),
             _start(tmp_path, *SMOKE, "mlflow.enabled=false", f"output_dir={taken}")]
    (refused, r_text), (dry, d_text), (existing, e_text) = (_finish(p) for p in procs)
    for code, text, needle in ((refused, r_text, "lam=1.5"), (existing, e_text, f"python -m pipeline.resume {taken}")):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        assert code == EXIT_CONFIG and len(lines) == 1 and needle in lines[0], text[-3000:]
    assert dry == 0 and "tasks" in d_text, d_text[-3000:]
    assert sorted(p.name for p in taken.iterdir()) == ["run.json"]
    # nothing under outputs/smoke/; one log folder per process in outputs/.log/
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == [".log"]
    logs = list((tmp_path / "outputs" / ".log").iterdir())
    assert len(logs) == 3 and all((f / "__main__.log").is_file() for f in logs), logs
