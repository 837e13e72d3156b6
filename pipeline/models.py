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
  under ``models/<package>/`` (:func:`archive_members`); ``python -m pipeline.reproduce`` puts
  that folder first on ``sys.path`` (:func:`use_archived`), so the rerun runs the archived
  code, not whatever the machine has under that name.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from pipeline.errors import ConfigError
from sim.registry import SHIPPED

__all__ = ["out_of_tree", "package_dir", "py_modules", "archive_members", "use_archived",
           "ARCHIVE_FOLDER"]

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


def use_archived(run_dir: Path) -> bool:
    """Put an extracted archive's model source first on ``sys.path`` (True if it has any)."""
    folder = Path(run_dir) / ARCHIVE_FOLDER
    if not folder.is_dir():
        return False
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    return True
