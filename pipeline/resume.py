"""``python -m pipeline.resume OUTPUT_DIR``: finish an interrupted or killed sweep in its folder.

The run's own ``config.yaml`` is planned again and must give the tasks of its ``tasks.json``
(same ids and seeds). Only the tasks without a row in ``results/`` run (``--retry-failed``: also those
whose row is an error; their old rows move to ``results/failed/``); then the analysis, the
archive and MLflow as usual, under the run's own run id and MLflow parent run (which is set back
to RUNNING, then FINISHED, FAILED or KILLED). Every row is then what an uninterrupted run gives
(``wall_time`` and ``node`` aside). Works after Ctrl-C, ``ray job stop`` and SIGKILL of the
driver alike: rows are written in chunks, each atomically, every few seconds
(pipeline/store.py), and what a kill loses is run again. Exit codes as ``python -m
pipeline``.

Refused with exit code 2 and one line, before anything runs: a folder another run or resume is
writing (its lock, ``run.lock``, names that process's id); a folder whose rows were computed by
other code (another commit, or other uncommitted changes, than run.json's ``code`` records)
unless ``--allow-code-change``, which records the new commit beside the old ones (run.json,
the archive's ``git.json``, the new rows' ``code_commit``); a symbolic link as the folder.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.resume", description=__doc__.split("\n\n")[0])
    ap.add_argument("output_dir", type=Path, help="the run folder (it holds config.yaml, tasks.json, run.json)")
    ap.add_argument("--retry-failed", action="store_true", help="also rerun the tasks whose row is an error")
    ap.add_argument("--backend", choices=["ray", "serial"], default=None, help="override execution.backend")
    ap.add_argument("--address", default=None,
                    help="join this Ray cluster (default: the run's own execution.address)")
    ap.add_argument("--allow-code-change", action="store_true",
                    help="resume with code other than the one that computed the rows so far "
                         "(another commit or other uncommitted changes); every commit is recorded")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-mlflow", action="store_true",
                    help="finish without MLflow (its store is gone or unusable: exit code 4 otherwise)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    from pipeline.__main__ import run_cli

    def run():
        from omegaconf import OmegaConf

        from pipeline import safe_yaml
        from pipeline.run import run_sweep
        from pipeline.runfolder import check_not_link

        check_not_link(args.output_dir)  # before resolve(), which would follow it
        folder = args.output_dir.resolve()
        if not (folder / "config.yaml").is_file():
            raise ConfigError(f"output_dir={str(args.output_dir)!r} has no config.yaml: not a run folder")
        try:  # bounded plain data (pipeline/safe_yaml.py): the pipeline wrote it, resolved
            cfg = OmegaConf.to_container(safe_yaml.load(folder / "config.yaml", interpolations=False),
                                         resolve=True)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{folder / 'config.yaml'}: cannot read ({exc})") from None
        cfg["output_dir"] = str(folder)
        if args.backend:
            cfg["execution"]["backend"] = args.backend
        if args.address:
            cfg["execution"]["address"] = args.address
        if args.no_progress:
            cfg["execution"]["progress"] = False
        if args.no_mlflow:
            cfg["mlflow"]["enabled"] = False
        return run_sweep(cfg, resume=True, retry_failed=args.retry_failed,
                         allow_code_change=args.allow_code_change)

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
