"""The run archive: everything needed to rerun a sweep and check that it gives the same rows.

``<output>/archive.tar.gz`` holds, under ``run/``: the resolved config (``config.yaml``), the
tasks with their seeds (``tasks.json``), the result rows (``results/*.parquet``), the analysis
outputs, the package versions (``environment.json``), the git state (``git.json`` with
commit and dirty flag, ``git.diff``) and the MLflow run with whether tracking held
(``tracking.json``: ``ok``, ``off`` or ``lost: <reason>``; written by :mod:`pipeline.run`).

:func:`safe_extract` opens an archive someone else made: it reads every member header first and
refuses absolute paths, ``..``, links and special files, duplicate names, more than
:data:`MAX_MEMBERS` members or more than :data:`MAX_BYTES` declared uncompressed bytes, all before
extracting anything; it counts the bytes written while extracting too, and turns a truncated,
corrupt or non-tar file into a one-line :class:`~pipeline.errors.ConfigError`.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import lzma
import os
import platform
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from pipeline.errors import ConfigError

PREFIX = "run"
#: packages whose versions decide whether results can be bitwise identical
KEY_PACKAGES = ("numpy", "numba", "llvmlite", "scipy", "polars", "ray", "mlflow", "hydra-core", "simpleeval")


#: environment variables that change which machine code computes the numbers on one CPU
CPU_OVERRIDES = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES",
                 "GLIBC_TUNABLES", "OPENBLAS_CORETYPE")


def cpu() -> dict:
    """The CPU as the numbers see it: its model name, the target numba compiles for (name and
    features), numpy's enabled SIMD extensions and any variable that overrides them. The last
    bits of float results follow these (docs/reproduce.md, "Across CPUs"); on a cluster this is
    the driver's CPU (each row names its ``node``)."""
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = {"model": model}
    try:
        from llvmlite import binding as llvm
        from numba.core import config as numba_config

        out["llvm_target"] = numba_config.CPU_NAME or llvm.get_host_cpu_name()
        out["llvm_features"] = numba_config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
    except Exception as exc:  # numba missing or broken: say so rather than guess
        out["llvm_target"] = f"unknown ({type(exc).__name__})"
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as simd

        out["numpy_simd"] = sorted(k for k, on in simd.items() if on)
    except ImportError:
        out["numpy_simd"] = None
    out["overrides"] = {k: os.environ[k] for k in CPU_OVERRIDES if k in os.environ}
    return out


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
        "cpu": cpu(),
        "key_packages": {p: packages.get(p) for p in KEY_PACKAGES},
        "packages": dict(sorted(packages.items())),
    }


def git_state(root: Path) -> tuple[dict, str]:
    """(commit, dirty flag and ``git status``; ``git diff HEAD``) of the project folder.

    In a Ray job sent by ``python -m pipeline.submit`` the working directory is Ray's copy,
    without ``.git``: the state recorded by the submitter before the upload is used (the folder
    named by ``LBSWEEP_PROVENANCE``, relative to the project folder)."""
    recorded = os.environ.get("LBSWEEP_PROVENANCE")
    if recorded and (Path(root) / recorded / "git.json").is_file():
        folder = Path(root) / recorded
        diff_file = folder / "git.diff"
        return (json.loads((folder / "git.json").read_text()),
                diff_file.read_text() if diff_file.is_file() else "")

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


def code_state(root: Path) -> dict:
    """The code a run or resume computes with, as a resume compares it: ``commit``, ``dirty``
    and, for a dirty checkout, ``changes``: the first 12 hex digits of the sha256 of its ``git
    status --porcelain`` and ``git diff HEAD`` (so two different sets of uncommitted changes on
    one commit are two code states). ``commit`` is None outside a git checkout."""
    state, diff = git_state(root)
    dirty = state.get("dirty")
    changes = None
    if dirty:
        text = (state.get("status") or "") + "\0" + diff
        changes = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return {"commit": state.get("commit"), "dirty": dirty, "changes": changes}


def code_label(code: dict | None) -> str | None:
    """``<commit>``, or ``<commit>+dirty.<changes>`` for a dirty checkout; None when the commit is
    unknown (the ``code_commit`` column of a row; docs/results-schema.md)."""
    if not code or not code.get("commit"):
        return None
    return code["commit"] + (f"+dirty.{code.get('changes') or '?'}" if code.get("dirty") else "")


def same_code(a: dict | None, b: dict | None) -> bool:
    """Whether two :func:`code_state` records name the same code."""
    if not a or not b:
        return False
    return all(a.get(k) == b.get(k) for k in ("commit", "dirty", "changes"))


def _no_bytecode(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave compiled bytecode out of the archive (it is rebuilt from the source)."""
    parts = PurePosixPath(info.name).parts
    return None if "__pycache__" in parts or info.name.endswith((".pyc", ".pyo")) else info


def write_archive(out_dir: Path, files: dict[str, Path | str | bytes], project_root: Path,
                  commits: list[dict] | None = None) -> Path:
    """Write ``out_dir/archive.tar.gz``. ``files`` maps archive names to paths or contents;
    ``commits`` (run.json's ``code``: every code state that ran on the folder) goes into
    ``git.json`` as ``commits``."""
    state, diff = git_state(project_root)
    if commits is not None:
        state = {**state, "commits": commits}
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
                tar.add(src, arcname=arcname, recursive=True, filter=_no_bytecode)
            else:
                contents[name] = src.encode() if isinstance(src, str) else src
        for name, data in contents.items():
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(target)
    return target


#: default limits of :func:`safe_extract` (``python -m pipeline.reproduce --max-bytes/--max-members``).
#: Rows are archived in chunk files of up to 1000 rows (pipeline/store.py); an archive made before
#: chunks has one file of about 20 KB per row, so 2 GiB then holds about 10^5 tasks.
MAX_BYTES = 2 * 1024**3
MAX_MEMBERS = 200_000

#: what a damaged archive raises while it is read: a bad tar header (``tarfile.ReadError``), a
#: truncated gzip stream (``EOFError``), corrupt compressed data (``zlib.error``,
#: ``gzip.BadGzipFile`` and bz2's errors are ``OSError``, ``lzma.LZMAError``), an unreadable file
READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


def check_members(tar: tarfile.TarFile, max_bytes: int = MAX_BYTES, max_members: int = MAX_MEMBERS,
                  name: str = "archive") -> list[tarfile.TarInfo]:
    """Read every member header and refuse the archive, before anything is extracted, if a member
    has an absolute path, ``..``, is a link or special file, appears twice, or if there are more
    than ``max_members`` members or their declared sizes sum to more than ``max_bytes``.

    The declared size (the tar header's, after pax and GNU sparse headers; what ``tarfile``
    writes) bounds what extraction writes; :func:`safe_extract` also counts what it writes.
    Headers are read one at a time and reading stops at the first limit crossed.
    """
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    total = 0
    for m in tar:
        members.append(m)
        if len(members) > max_members:
            raise ConfigError(f"{name}: more than {max_members} members (limit --max-members); refused")
        p = PurePosixPath(m.name)
        if p.is_absolute() or m.name.startswith(("/", "\\")) or (p.parts and ":" in p.parts[0]):
            raise ConfigError(f"archive member {m.name!r}: absolute paths are refused")
        if ".." in p.parts:
            raise ConfigError(f"archive member {m.name!r}: '..' in a path is refused")
        if not (m.isfile() or m.isdir()):
            raise ConfigError(f"archive member {m.name!r}: links and special files are refused")
        key = str(p)
        if key in seen:
            raise ConfigError(f"archive member {m.name!r} appears twice; refused")
        seen.add(key)
        total += max(int(m.size), 0)
        if total > max_bytes:
            raise ConfigError(f"{name}: members declare more than {max_bytes} bytes uncompressed "
                              f"(limit --max-bytes); refused before extracting")
    return members


def safe_extract(archive: Path, dest: Path, max_bytes: int = MAX_BYTES,
                 max_members: int = MAX_MEMBERS) -> Path:
    """Extract a run archive into ``dest`` after checking every member; return the run folder.

    Every refusal and every sign of a damaged archive (truncated, not gzip, corrupt) is a
    :class:`ConfigError` with a one-line message. Members are extracted one at a time with
    tarfile's ``data`` filter, and the bytes actually written are counted against ``max_bytes``
    as well (a second check that does not rely on the headers).
    """
    name = f"archive={str(archive)!r}"
    _check_gzip_stream(archive, max_bytes, name)
    try:
        tar = tarfile.open(archive, "r:*")
    except READ_ERRORS as exc:
        raise ConfigError(f"{name}: cannot open ({_reason(exc)})") from None
    with tar:
        try:
            members = check_members(tar, max_bytes, max_members, name)
        except ConfigError:
            raise
        except READ_ERRORS as exc:
            raise ConfigError(f"{name}: damaged or truncated ({_reason(exc)})") from None
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            for m in members:
                tar.extract(m, dest, filter="data")
                if m.isfile():
                    written += (dest / m.name).stat().st_size
                    if written > max_bytes:
                        raise ConfigError(f"{name}: more than {max_bytes} bytes written while "
                                          f"extracting (limit --max-bytes); stopped")
        except ConfigError:
            raise
        except tarfile.FilterError as exc:
            raise ConfigError(f"{name}: member refused by tarfile's data filter ({_reason(exc)})") from None
        except READ_ERRORS as exc:
            raise ConfigError(f"{name}: damaged or truncated ({_reason(exc)})") from None
    run = dest / PREFIX
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{name}: no {PREFIX}/config.yaml inside; not a run archive")
    return run


def _check_gzip_stream(archive: Path, max_bytes: int, name: str) -> None:
    """Read a gzip archive to its end before anything is extracted: its CRC is checked only
    there, and tarfile stops at the end-of-archive blocks without reaching it, so a corrupted
    middle would otherwise extract silently. The decompressed size is counted on the way (a
    bound that does not trust the tar headers)."""
    import gzip

    with open(archive, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return  # not gzip: tarfile says what it is (or that it is not an archive)
    total = 0
    try:
        with gzip.open(archive, "rb") as g:
            while chunk := g.read(1 << 20):
                total += len(chunk)
                if total > max_bytes + (1 << 20):  # tar headers and padding on top of the data
                    raise ConfigError(f"{name}: decompresses to more than {max_bytes} bytes "
                                      "(limit --max-bytes); refused before extracting")
    except ConfigError:
        raise
    except READ_ERRORS as exc:
        raise ConfigError(f"{name}: damaged or truncated ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no detail"
    return f"{type(exc).__name__}: {text}"
