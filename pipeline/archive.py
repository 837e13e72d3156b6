"""The run archive: everything needed to rerun a sweep and check that it gives the same rows.

``<output>/archive.tar.gz`` holds, under ``run/``: the resolved config (``config.yaml``), the
tasks with their seeds (``tasks.json``), the result rows (``results/*.parquet``), the analysis
outputs, the package versions (``environment.json``) and the git state (``git.json`` with
commit and dirty flag, ``git.diff``).
"""
from __future__ import annotations

import importlib.metadata
import io
import json
import platform
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

from pipeline.errors import ConfigError

PREFIX = "run"
#: packages whose versions decide whether results can be bitwise identical
KEY_PACKAGES = ("numpy", "numba", "llvmlite", "scipy", "polars", "ray", "mlflow", "hydra-core", "simpleeval")


def environment() -> dict:
    packages = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            packages[name.lower()] = dist.version
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "key_packages": {p: packages.get(p) for p in KEY_PACKAGES},
        "packages": dict(sorted(packages.items())),
    }


def git_state(root: Path) -> tuple[dict, str]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "note": "not a git checkout"}, ""
    status = git("status", "--porcelain") or ""
    diff = git("diff", "HEAD") or ""
    return {"commit": commit.strip(), "dirty": bool(status.strip()), "status": status}, diff


def write_archive(out_dir: Path, files: dict[str, Path | str | bytes], project_root: Path) -> Path:
    """Write ``out_dir/archive.tar.gz``. ``files`` maps archive names to paths or contents."""
    state, diff = git_state(project_root)
    contents: dict[str, bytes] = {
        "environment.json": json.dumps(environment(), indent=1).encode(),
        "git.json": json.dumps(state, indent=1).encode(),
        "git.diff": diff.encode(),
    }
    target = out_dir / "archive.tar.gz"
    tmp = out_dir / ".archive.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for name, src in files.items():
            arcname = f"{PREFIX}/{name}"
            if isinstance(src, Path):
                tar.add(src, arcname=arcname, recursive=True)
            else:
                contents[name] = src.encode() if isinstance(src, str) else src
        for name, data in contents.items():
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(target)
    return target


def check_members(tar: tarfile.TarFile) -> None:
    """Refuse absolute paths, ``..``, links and special files before extracting anything."""
    for m in tar.getmembers():
        p = PurePosixPath(m.name)
        if p.is_absolute() or m.name.startswith(("/", "\\")) or ":" in p.parts[0]:
            raise ConfigError(f"archive member {m.name!r}: absolute paths are refused")
        if ".." in p.parts:
            raise ConfigError(f"archive member {m.name!r}: '..' in a path is refused")
        if not (m.isfile() or m.isdir()):
            raise ConfigError(f"archive member {m.name!r}: links and special files are refused")


def safe_extract(archive: Path, dest: Path) -> Path:
    """Extract a run archive into ``dest`` after checking every member; return the run folder."""
    try:
        tar = tarfile.open(archive, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise ConfigError(f"archive={str(archive)!r}: cannot open ({exc})") from None
    with tar:
        check_members(tar)
        tar.extractall(dest, filter="data")
    run = dest / PREFIX
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"archive={str(archive)!r}: no {PREFIX}/config.yaml inside; not a run archive")
    return run
