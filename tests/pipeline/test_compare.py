"""``python -m pipeline.compare``: one figure and one table of a metric against N for finished
runs, from their files alone; bad input refused with one line and exit code 2."""
from __future__ import annotations

import polars as pl
import pytest

from pipeline import compare
from pipeline.run import run_sweep, to_plain
from tests.helpers import compose


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished smoke runs (serial, no MLflow) at loads 0.8 and 0.9."""
    base = tmp_path_factory.mktemp("compare")
    out = []
    for lam in (0.8, 0.9):
        cfg = compose(["+sweep=smoke", f"output_dir={base / f'lam{lam}'}", "mlflow.enabled=false",
                       "execution.progress=false", "execution.backend=serial",
                       "params.events=20000", f"params.lam={lam}", "axes.n_servers=[20,40]"])
        run_sweep(to_plain(cfg), quiet=True)
        out.append(base / f"lam{lam}")
    return out


def test_two_runs_give_one_figure_and_one_table(runs, tmp_path, capsys):
    assert compare.main([str(r) for r in runs] + ["--out", str(tmp_path / "cmp")]) == 0
    png = tmp_path / "cmp" / "compare_mean_response.png"
    assert png.stat().st_size > 10_000
    table = pl.read_csv(tmp_path / "cmp" / "compare_mean_response.csv")
    # smoke: pod d in {1, 2}, agent and meanfield: 4 series per run, 2 values of N each
    assert table["run"].n_unique() == 2 and table["series"].n_unique() == 8
    assert sorted(table["n_servers"].unique().to_list()) == [20.0, 40.0]
    for rows in table.partition_by("run"):
        frame = pl.read_parquet(runs[0 if "lam0.8" in rows["run"][0] else 1] / "results.parquet")
        agent = frame.filter(pl.col("engine") == "agent", pl.col("d") == 2, pl.col("n_servers") == 20)
        mine = rows.filter(pl.col("series").str.contains("power-of-2 \\[agent"), pl.col("n_servers") == 20)
        assert mine["mean_response"][0] == pytest.approx(agent["mean_response"].mean())
        assert mine["n_rep"][0] == agent.height
    md = (tmp_path / "cmp" / "compare_mean_response.md").read_text()
    # the runs differ in lam, constant within each: it labels their series
    assert md.count("\n| smoke lam0.8 (\u03bb = 0.8): ") == 8 and "+-" in md
    assert md.count("\n| smoke lam0.9 (\u03bb = 0.9): ") == 8
    assert "figure:" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["{run}", "--metric", "nope"], "no column 'nope'"),
    (["{run}", "--x", "k"], "no column 'k'"),
    (["/nonexistent/run"], "is not a folder"),
    (["{tmp}"], "not a finished run folder"),
    (["{run}", "{run}"], "the same run is given twice"),
])
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, caplog, args, needle):
    words = [a.format(run=runs[0], tmp=tmp_path) for a in args]
    assert compare.main(words + ["--out", str(tmp_path / "cmp")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and needle in errors[0] and "\n" not in errors[0]
    assert not (tmp_path / "cmp").exists()
