"""Names of the JIQ analysis's series: a policy's declared label with its d and threshold z.
"""
from __future__ import annotations

from analysis import declared, style

#: the JIQ policies the analysis names by what they do (their declared records): JIQ-Po(d),
#: whose claim is the shortest response of the five, and JIQ-SQ(d), which Lu et al.'s
#: approximation covers beside plain JIQ
POD = declared.policy_where("jiq", probes=True)
SQD = declared.policy_where("jiq", joins_shortest_iqueue=True)


def takes_d(policy: str) -> bool:
    """The policy's tasks carry ``d``: a JIQ policy that samples servers or I-queues, or a
    policy of another model in the sweep (power-of-d)."""
    rec = declared.policy("jiq", policy)
    return rec is None or rec.samples


def takes_z(policy: str) -> bool:
    """The policy's tasks carry the threshold ``z``."""
    rec = declared.policy("jiq", policy)
    return rec is not None and rec.threshold


def _name(policy: str, row: dict | None = None) -> str:
    """The policy's declared label (analysis.style.policy_name) with its d and z: ``JIQ-Po3``,
    ``power-of-2``, ``JIQ-threshold (z=1)``."""
    name = style.policy_name(policy, None if row is None else row.get("model"),
                             None if row is None else row.get("engine"))
    if row is not None and row.get("d") is not None:
        name = style.with_d(name, row["d"])
    if row is not None and takes_z(policy) and row.get("z") is not None:
        name += f" (z={row['z']})"
    return name
