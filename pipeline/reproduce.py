"""``python -m pipeline.reproduce ARCHIVE``: rerun an archived sweep and compare every row.

The archive is checked member by member (no absolute paths, no ``..``, no links) before
anything is extracted. The tasks are planned again from the archived config; their seeds must
equal the archived ones. Every row's estimates are then compared with the archived row:
bitwise where the environment (Python and the numeric packages) matches, otherwise to a
relative tolerance, which is reported. Exit code 0 when every row matches, 1 otherwise,
2 for an unusable archive.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pipeline.archive import environment, safe_extract
from pipeline.errors import ConfigError
from pipeline.store import ESTIMATE_COLUMNS, read_results

log = logging.getLogger("pipeline.reproduce")


def _same(a, b, rtol: float) -> tuple[bool, bool]:
    """(bitwise equal, equal within rtol) for scalars or lists."""
    if isinstance(a, list) or isinstance(b, list):
        if a is None or b is None or len(a) != len(b):
            return False, False
        pairs = [_same(x, y, rtol) for x, y in zip(a, b)]
        return all(p[0] for p in pairs), all(p[1] for p in pairs)
    if a is None or b is None:
        return a is None and b is None, a is None and b is None
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b), math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b), math.isclose(a, b, rel_tol=rtol, abs_tol=1e-300)
    return a == b, a == b


def compare(old: pl.DataFrame, new: pl.DataFrame, rtol: float) -> dict:
    old_rows = {r["task_id"]: r for r in old.iter_rows(named=True)}
    new_rows = {r["task_id"]: r for r in new.iter_rows(named=True)}
    missing = sorted(set(old_rows) - set(new_rows))
    extra = sorted(set(new_rows) - set(old_rows))
    bitwise = close = 0
    mismatches = []
    for tid in sorted(set(old_rows) & set(new_rows)):
        o, n = old_rows[tid], new_rows[tid]
        bit_all, close_all = True, True
        for col in ESTIMATE_COLUMNS + ["status"]:
            b, c = _same(o.get(col), n.get(col), rtol)
            bit_all &= b
            close_all &= c
            if not c:
                mismatches.append((tid, col, o.get(col), n.get(col)))
        bitwise += bit_all
        close += close_all
    return {"rows": len(old_rows), "bitwise": bitwise, "close": close, "missing": missing,
            "extra": extra, "mismatches": mismatches}


def env_differences(archived: dict, current: dict) -> list[str]:
    diffs = []
    if archived.get("python") != current.get("python"):
        diffs.append(f"python {archived.get('python')} -> {current.get('python')}")
    if archived.get("machine") != current.get("machine"):
        diffs.append(f"machine {archived.get('machine')} -> {current.get('machine')}")
    for pkg, v in (archived.get("key_packages") or {}).items():
        w = current["key_packages"].get(pkg)
        if v != w:
            diffs.append(f"{pkg} {v} -> {w}")
    return diffs


def reproduce(archive: Path, out_dir: Path | None = None, backend: str | None = None,
              rtol: float = 1e-9, progress: bool = True) -> dict:
    from pipeline.run import run_sweep

    archive = Path(archive)
    if not archive.is_file():
        raise ConfigError(f"archive={str(archive)!r} does not exist")
    work = Path(tempfile.mkdtemp(prefix="lbsweep-reproduce-"))
    run = safe_extract(archive, work)
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=True)
    archived_tasks = json.loads((run / "tasks.json").read_text())["tasks"]
    if out_dir is None:
        out_dir = archive.resolve().parent / f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg["output_dir"] = str(out_dir)
    cfg["mlflow"]["enabled"] = False
    cfg["execution"]["progress"] = progress
    if backend:
        cfg["execution"]["backend"] = backend
    result = run_sweep(cfg, quiet=True)
    new_tasks = json.loads((Path(out_dir) / "tasks.json").read_text())["tasks"]
    seeds_match = [(t["_meta"]["task_id"], t["seed"]) for t in archived_tasks] == \
                  [(t["_meta"]["task_id"], t["seed"]) for t in new_tasks]
    old = read_results(run / "results")
    cmp = compare(old, result["frame"], rtol)
    archived_env = json.loads((run / "environment.json").read_text())
    diffs = env_differences(archived_env, environment())
    env_match = not diffs
    ok = seeds_match and not cmp["missing"] and not cmp["extra"] and (
        cmp["bitwise"] == cmp["rows"] if env_match else cmp["close"] == cmp["rows"])
    return {"ok": ok, "seeds_match": seeds_match, "env_match": env_match, "env_differences": diffs,
            "output_dir": Path(out_dir), **cmp}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("archive", type=Path, help="a run's archive.tar.gz")
    ap.add_argument("--out", type=Path, default=None, help="output folder of the rerun")
    ap.add_argument("--backend", choices=["ray", "serial"], default=None,
                    help="override the archived execution backend")
    ap.add_argument("--rtol", type=float, default=1e-9,
                    help="relative tolerance used when the environment differs (default 1e-9)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(message)s")
    try:
        rep = reproduce(args.archive, args.out, args.backend, args.rtol, progress=not args.no_progress)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"archive:      {args.archive}")
    print(f"rerun:        {rep['output_dir']}")
    print(f"seeds:        {'identical' if rep['seeds_match'] else 'DIFFERENT'}")
    print(f"environment:  {'matches' if rep['env_match'] else 'differs: ' + '; '.join(rep['env_differences'])}")
    print(f"rows:         {rep['bitwise']}/{rep['rows']} bitwise identical, "
          f"{rep['close']}/{rep['rows']} within rtol={args.rtol:g}")
    if rep["missing"] or rep["extra"]:
        print(f"missing rows: {rep['missing']}  extra rows: {rep['extra']}")
    for tid, col, a, b in rep["mismatches"][:20]:
        print(f"  mismatch {tid} {col}: archived {a!r} rerun {b!r}")
    print("REPRODUCED" if rep["ok"] else "NOT REPRODUCED")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
