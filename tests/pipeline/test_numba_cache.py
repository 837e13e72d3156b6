"""The workers' numba cache folder is keyed by a digest of sim/: a kernel whose own file is
unchanged but whose inlined helper changed must not load from a folder filled by the old code
(numba keys a cached kernel on its own file's time stamp only)."""
from __future__ import annotations

import os
import shutil
import time

from pipeline import worker
from tests.helpers import REPO


def test_the_digest_follows_every_file_of_the_tree(tmp_path):
    tree = tmp_path / "sim"
    shutil.copytree(REPO / "sim", tree, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    before = worker.tree_digest(tree)
    assert before == worker.tree_digest(REPO / "sim")  # the bytes, not where they lie
    helper = tree / "core" / "sampling.py"  # inlined into the kernels (probes_in, draws)
    helper.write_text(helper.read_text() + "\n")
    assert worker.tree_digest(tree) != before
    (tree / "core" / "__pycache__").mkdir(exist_ok=True)
    (tree / "core" / "__pycache__" / "x.py").write_text("cached\n")  # caches do not count
    helper.write_text(helper.read_text()[:-1])
    assert worker.tree_digest(tree) == before


def test_workers_use_a_folder_of_this_version_and_prune_old_ones(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "lbsweep" / "numba"
    for k in range(5):  # folders of five older versions, the oldest first
        old = root / f"old{k}"
        old.mkdir(parents=True)
        os.utime(old, (time.time() - 1000 + k, time.time() - 1000 + k))
    import numba

    saved = numba.config.CACHE_DIR
    try:
        worker.configure_numba(1)
        path = os.environ["NUMBA_CACHE_DIR"]
        assert path == str(root / worker.tree_digest(REPO / "sim"))
        assert numba.config.CACHE_DIR == path  # numba was imported already: set there too
        left = sorted(p.name for p in root.iterdir())
        assert left == sorted(["old2", "old3", "old4", os.path.basename(path)])
        os.environ["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")  # the user's choice is kept
        worker.configure_numba(1)
        assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")
    finally:
        numba.config.CACHE_DIR = saved
        os.environ.pop("NUMBA_CACHE_DIR", None)
