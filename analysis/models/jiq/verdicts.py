"""The verdicts of the JIQ analysis: the ordering of the policies per load (:func:`orderings`)
and where two policies cross (:func:`crossovers`).
"""
from __future__ import annotations

import math

import polars as pl

from analysis.models.jiq.labels import _name


def orderings(agg: pl.DataFrame, sim: bool, metric: str = "mean_response") -> list[dict]:
    """Per load (and every other parameter), the policies sorted by ``metric`` (smallest first).
    ``sim``: the simulated points (adjacent policies whose difference is within 1.96 of its SE,
    sqrt(se_a^2 + se_b^2), are marked as tied, ``~``), else the meanfield rows (exact)."""
    part = agg.filter((pl.col("engine") != "meanfield") if sim else (pl.col("engine") == "meanfield"))
    part = part.filter(pl.col(metric).is_not_null())
    if part.height == 0:
        return []
    others = [c for c in ("n_servers", "r", "d", "z") if c in part.columns]
    out = []
    for grp in part.partition_by(["lam"], as_dict=False, maintain_order=True):
        rows = sorted(grp.iter_rows(named=True), key=lambda r: r[metric])
        text = _name(rows[0]["policy"], rows[0])
        for a, b in zip(rows, rows[1:]):
            se = math.hypot(a.get(f"{metric}_se") or 0.0, b.get(f"{metric}_se") or 0.0)
            tied = sim and b[metric] - a[metric] <= 1.96 * se
            text += (" ~ " if tied else " < ") + _name(b["policy"], b)
        out.append({"lam": rows[0]["lam"], "order": [r["policy"] for r in rows], "text": text,
                    "values": {r["policy"]: r[metric] for r in rows},
                    "se": {r["policy"]: r.get(f"{metric}_se") or 0.0 for r in rows},
                    **{c: rows[0].get(c) for c in others}})
    return sorted(out, key=lambda o: o["lam"])


def crossovers(ords: list[dict], sim: bool) -> list[dict]:
    """Loads where two policies change places: for each pair, between consecutive loads where the
    sign of their difference changes, the crossing by linear interpolation of the difference.
    With ``sim``, only sign changes significant on both sides (|difference| > 1.96 SE) count,
    and the others are listed as ``unresolved`` (the two are within their CIs there)."""
    out = []
    if len(ords) < 2:
        return out
    pols = sorted(set.intersection(*[set(o["values"]) for o in ords]))
    for i, a in enumerate(pols):
        for b in pols[i + 1:]:
            for o1, o2 in zip(ords, ords[1:]):
                d1 = o1["values"][a] - o1["values"][b]
                d2 = o2["values"][a] - o2["values"][b]
                if d1 == 0 or d2 == 0 or (d1 > 0) == (d2 > 0):
                    continue
                lam = o1["lam"] + (o2["lam"] - o1["lam"]) * d1 / (d1 - d2)
                sig = True
                if sim:
                    se1 = math.hypot(o1["se"][a], o1["se"][b])
                    se2 = math.hypot(o2["se"][a], o2["se"][b])
                    sig = abs(d1) > 1.96 * se1 and abs(d2) > 1.96 * se2
                low, high = (a, b) if d1 < 0 else (b, a)  # low is the smaller below the crossing
                out.append({"below": low, "above": high, "lam": lam, "between": (o1["lam"], o2["lam"]),
                            "significant": sig})
    return sorted(out, key=lambda c: c["lam"])
