"""Arms of the LED analysis: which columns vary and the labels of series and panels.
"""
from __future__ import annotations

from analysis import style
from analysis.fmt import num as _fmt


def _label(row: dict) -> str:
    name = style.policy_name(row["policy"], row.get("model") or "led")
    if row.get("policy", "").startswith("l_") and row.get("update"):
        name += "-" + row["update"].capitalize()
    if row.get("d") is not None:
        name = style.with_d(name, row["d"])
    if row.get("ties"):  # jsq, pod: the tie rule (sim.led.model.TIES)
        name += f" ({row['ties']} ties)"
    return name


#: arm columns that _label already shows (or that the variant's own columns spell out)
_IN_LABEL = ("policy", "update", "ties", "variant", "engine", "model")
_SHORT = {"p_hat": "p\u0302", "d_u": "d_u", "m_dispatchers": "M", "n_servers": "N",
          "lam": "\u03c1"}


def _varying(keys: list[dict]) -> list[str]:
    """The columns whose value differs between the arms ``keys`` (each a dict of arm values)."""
    cols = list(dict.fromkeys(c for k in keys for c in k))
    return [c for c in cols if len({repr(k.get(c)) for k in keys}) > 1]


def _series_label(row: dict, varying: list[str]) -> str:
    """:func:`_label` plus the arm columns that tell this arm from the others (``p_hat``,
    ``d_u``, ...), or the variant's name where nothing else does."""
    shown = set(_IN_LABEL)
    if row.get("d") is not None and _label(row) != _label({**row, "d": None}):
        shown.add("d")  # the name carries it (power-of-2)
    extra = [f"{_SHORT.get(c, c)}={_fmt(row.get(c))}" for c in varying
             if c not in shown and row.get(c) is not None]
    if not extra and "variant" in varying and row.get("variant"):
        extra = [str(row["variant"])]
    return _label(row) + (f" ({', '.join(extra)})" if extra else "")
