"""Out-of-tree models: how a model package that is not under ``sim/`` is found, shipped to the
Ray workers and kept in a run's archive (docs/extending.md).

- **Found**: a sweep names it in ``models: [my_model]`` (or ``model: my_model``): a package
  importable from ``sys.path`` (``PYTHONPATH``, the working directory or an installed
  distribution) whose ``__init__`` exports ``MODEL``, a :class:`sim.core.declare.Model` whose
  ``name`` is the module path. The plan loads it (:func:`sim.registry.load_model`) before it
  checks anything, so its entries, parameters and result columns take part in every check.
- **Shipped**: its top-level package folder goes to Ray as a ``runtime_env`` ``py_modules``
  entry, for a local cluster and a joined one alike, so that workers import it as the driver
  does (:func:`py_modules`).
- **Archived**: the package's source (``__pycache__`` left out) goes into the run's archive
  under ``models/<package>/`` (:func:`archive_members`). That copy is data: ``python -m
  pipeline.reproduce`` never puts an archive folder on ``sys.path`` and, by default, resolves
  the models among those installed on the machine (:func:`check_installed`). Only with
  ``--trust-archive-models`` does it import the archived packages (:func:`trust_archived`):
  the top-level packages the config names and nothing else, each from its own folder through
  an ``importlib`` spec, never one whose name is a standard-library or installed module.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from pipeline.errors import ConfigError
from sim.registry import SHIPPED

__all__ = ["out_of_tree", "package_dir", "py_modules", "archive_members", "check_installed",
           "trust_archived", "forget", "ARCHIVE_FOLDER"]

#: the archive folder (under the run's prefix) holding the out-of-tree models' source
ARCHIVE_FOLDER = "models"


def out_of_tree(conf: dict) -> list[str]:
    """The sweep's out-of-tree model names (``models`` and a ``model`` that is not shipped)."""
    names = list(conf.get("models") or [])
    if conf.get("model") is not None:
        names.append(conf["model"])
    return [n for n in dict.fromkeys(names) if n not in SHIPPED]


def package_dir(name: str) -> Path:
    """The folder of the top-level package that holds model ``name`` (a module path)."""
    top = name.split(".")[0]
    try:
        module = importlib.import_module(top)
    except ImportError as exc:
        raise ConfigError(f"models: {name!r} cannot be imported ({exc})") from None
    path = Path(getattr(module, "__file__", "") or "")
    if path.name != "__init__.py":
        raise ConfigError(f"models: {name!r} must live in a package (a folder with an __init__.py) "
                          f"to be shipped to Ray workers and archived; {top!r} is {path or 'a namespace'}")
    return path.parent


def py_modules(conf: dict) -> list[str]:
    """The package folders Ray ships to every worker (``runtime_env`` ``py_modules``)."""
    return list(dict.fromkeys(str(package_dir(n)) for n in out_of_tree(conf)))


def archive_members(conf: dict) -> dict[str, Path]:
    """Archive name -> package folder of each out-of-tree model (``models/<package>``)."""
    return {f"{ARCHIVE_FOLDER}/{package_dir(n).name}": package_dir(n) for n in out_of_tree(conf)}


def _top_names(names: list[str]) -> list[str]:
    """The top-level package of each model name; ConfigError for a name that is no module path
    or that is a standard-library module (never a model, and importing some has effects)."""
    tops = []
    for name in names:
        if not isinstance(name, str) or not name or not all(p.isidentifier() for p in name.split(".")):
            raise ConfigError(f"models: {name!r} is not a model name (a module path such as 'my_model')")
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            raise ConfigError(f"models: {name!r} is a standard-library module, not a model")
        tops.append(top)
    return list(dict.fromkeys(tops))


def check_installed(names: list[str], run_dir: Path | None = None) -> None:
    """Every model in ``names`` is importable on this machine (found, not imported); else a
    ConfigError naming it, with a hint when the archive at ``run_dir`` holds its source."""
    for top in _top_names(names):
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            continue
        hint = ""
        if run_dir is not None and (Path(run_dir) / ARCHIVE_FOLDER / top).is_dir():
            hint = (f"; the archive holds its source ({ARCHIVE_FOLDER}/{top}/): install it, or rerun "
                    "with --trust-archive-models to run the archived code")
        raise ConfigError(f"models: {top!r} is not installed on this machine{hint}")


def trust_archived(run_dir: Path, names: list[str]) -> list[str]:
    """Import the top-level package of each model in ``names`` from the extracted archive's
    ``models/<package>/`` (``--trust-archive-models``); return the packages imported.

    Each is loaded through an ``importlib`` spec of its own folder: no folder goes on
    ``sys.path``, so no other file of the archive can be imported by name (a ``pprint.py``
    beside the package stays unread), and its submodules resolve inside its folder. A name that
    is a standard-library module, or that this machine can already import, is refused: the
    archive's copy would shadow it. ConfigError names the package."""
    folder = Path(run_dir) / ARCHIVE_FOLDER
    loaded: list[str] = []
    try:
        for top in _top_names(names):
            _trust_one(folder, top)
            loaded.append(top)
    except ConfigError:
        forget(loaded)
        raise
    return loaded


def _trust_one(folder: Path, top: str) -> None:
    try:
        installed = top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        installed = True
    if installed:
        raise ConfigError(f"models: {top!r} is also a module on this machine; the archive's copy "
                          "would shadow it (rerun without --trust-archive-models to use the installed one)")
    init = folder / top / "__init__.py"
    if not init.is_file() or init.is_symlink() or init.parent.is_symlink():
        raise ConfigError(f"models: {top!r}: the archive has no package {ARCHIVE_FOLDER}/{top}/__init__.py")
    spec = importlib.util.spec_from_file_location(top, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        forget([top])
        raise ConfigError(f"models: the archived package {top!r} failed to import "
                          f"({type(exc).__name__}: {' '.join(str(exc).split())})") from None


def forget(tops: list[str]) -> None:
    """Drop packages :func:`trust_archived` imported (and their submodules) from ``sys.modules``:
    their folder goes with the archive's temporary folder."""
    for name in list(sys.modules):
        if name.split(".")[0] in tops:
            del sys.modules[name]
    importlib.invalidate_caches()
