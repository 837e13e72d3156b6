"""``python -m pipeline.compare RUN_DIR RUN_DIR ...``: one metric against N for finished runs.

Reads each run folder's ``results.parquet`` and ``tasks.json`` (no MLflow, no Ray) and writes
one figure and one table (CSV and Markdown) of ``--metric`` (default ``mean_response``)
against ``--x`` (default ``n_servers``), every arm of every run one series
(:mod:`analysis.compare`), into ``--out`` (default ``outputs/compare/<time>`` under the
project folder). Exit codes: 0 written; 2 bad input (a folder that is not a finished run, a
metric or x column that a run lacks), one line naming it.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from pipeline.errors import ConfigError

log = logging.getLogger("pipeline")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _load(folder: Path):
    import polars as pl

    from analysis.compare import Run

    results, tasks = folder / "results.parquet", folder / "tasks.json"
    if not folder.is_dir():
        raise ConfigError(f"run_dir={str(folder)!r} is not a folder")
    if not results.is_file() or not tasks.is_file():
        raise ConfigError(f"run_dir={str(folder)!r} has no results.parquet and tasks.json: "
                          "not a finished run folder (python -m pipeline.resume finishes one)")
    try:
        doc = json.loads(tasks.read_text())
        frame = pl.read_parquet(results)
    except Exception as exc:
        raise ConfigError(f"run_dir={str(folder)!r}: cannot read its files ({exc})") from None
    label = f"{doc.get('sweep', folder.parent.name)} {folder.name}"
    return Run(label=label, frame=frame, params=list(doc.get("param_columns") or []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="finished run folders (outputs/SWEEP/TIME)")
    ap.add_argument("--metric", default="mean_response", help="result column to compare (default mean_response)")
    ap.add_argument("--x", default="n_servers", help="parameter on the x axis (default n_servers)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default outputs/compare/<time> under the project)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    try:
        runs = [_load(f.resolve()) for f in args.run_dirs]
        labels = [r.label for r in runs]
        if len(set(labels)) < len(labels):
            raise ConfigError(f"run_dirs: the same run is given twice ({labels})")
        out = args.out or PROJECT_ROOT / "outputs" / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")
        from analysis.compare import compare_runs

        try:
            made = compare_runs(runs, args.metric, out, x=args.x)
        except ValueError as exc:
            raise ConfigError(f"--metric={args.metric!r} --x={args.x!r}: {exc}") from None
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return 2
    print(f"figure: {made['plot']}\ntable:  {made['table_md']}\ncsv:    {made['csv']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
