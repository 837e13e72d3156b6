"""The closed forms of partial centralization the analysis reads (the model declares them:
``Model.theory``, read through :mod:`analysis.declared`), and the i* table (Table 3.1).
"""
from __future__ import annotations

import math

from analysis import declared

# the closed forms of the invariant state the model declares for analysis (Model.theory)
invariant_tail = declared.theory("centralization", "invariant_tail")
invariant_mean_queue = declared.theory("centralization", "invariant_mean_queue")
predicted_slope = declared.theory("centralization", "predicted_slope")
relaxation_time = declared.theory("centralization", "relaxation_time")
top_level = declared.theory("centralization", "top_level")
#: grid of Table 3.1 (i* from the closed form)
P_TABLE = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
LAM_TABLE = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999)
#: Figure 3.1: p = 0 against p = 0.05 at the load where the p = 0.05 tail ends near i = 40
FIG31_LAM, FIG31_P = 0.99, 0.05


def istar_table(p_values=P_TABLE, lam_values=LAM_TABLE) -> list[list]:
    """Rows ``[p, i*(p, lam) for lam in lam_values]`` (0 where lam <= p)."""
    return [[p] + [top_level(lam, p) for lam in lam_values] for p in p_values]


def _degenerate(lam: float, p: float) -> bool:
    """s_{i*} = 0 exactly (the log in i* is an integer, e.g. lam = 1 - p with (1-p)/p integer):
    the central server has no spare capacity at the top level."""
    i = top_level(lam, p)
    if not 0 < i < math.inf:
        return False
    return bool(invariant_tail(lam, p, int(i))[int(i) - 1] < 1e-12)


def _istar_cell(lam: float, p: float) -> str:
    return f"{top_level(lam, p)}" + ("+" if _degenerate(lam, p) else "")
