"""What the mean-field modules of the dispatch model share: the checks of their arguments
(``ValueError`` naming the parameter) and the ``ci_method`` of a closed-form row."""
from __future__ import annotations

import numpy as np

from sim.core.results import check_real

CI_METHOD = "closed form (mean field, N = infinity)"


def _check_lam(lam) -> float:
    return check_real("lam", lam, lambda v: 0.0 <= v < 1.0, "satisfy 0 <= lam < 1",
                      not_number="a number")


def _check_d(d) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)):
        raise ValueError(f"d={d!r} must be an integer >= 1")
    if float(d) != int(d) or int(d) < 1:
        raise ValueError(f"d={d!r} must be an integer >= 1")
    return int(d)


def _check_level(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}={v!r} must be an integer >= 1")
    if float(v) != int(v) or int(v) < 1:
        raise ValueError(f"{name}={v!r} must be an integer >= 1")
    return int(v)
