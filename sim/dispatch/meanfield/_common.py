"""What the mean-field modules of the dispatch model share: the checks of their arguments
(``ValueError`` naming the parameter) and the ``ci_method`` of a closed-form row."""
from __future__ import annotations

import numpy as np

from sim.dispatch import MODEL
from sim.engines import LOAD_BELOW_ONE

CI_METHOD = "closed form (mean field, N = infinity)"


def _check_lam(lam) -> float:
    """The load of a mean field without a buffer: the declared load below one."""
    return LOAD_BELOW_ONE.check("lam", lam)


def _check_d(d) -> int:
    return MODEL.param("d").check("d", d)


def _check_k_d(lam, k, d) -> tuple[float, int, int]:
    """``(lam, k, d)`` of a k-task mean field without a buffer, checked against the declarations."""
    return _check_lam(lam), MODEL.param("k").check("k", k), _check_d(d)


def _check_level(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}={v!r} must be an integer >= 1")
    if float(v) != int(v) or int(v) < 1:
        raise ValueError(f"{name}={v!r} must be an integer >= 1")
    return int(v)
