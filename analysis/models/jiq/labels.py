"""Names of the JIQ analysis's series: a policy's declared label with its d and threshold z.
"""
from __future__ import annotations

from analysis import style


def _name(policy: str, row: dict | None = None) -> str:
    """The policy's declared label (analysis.style.policy_name) with its d and z: ``JIQ-Po3``,
    ``power-of-2``, ``JIQ-threshold (z=1)``."""
    name = style.policy_name(policy, None if row is None else row.get("model"),
                             None if row is None else row.get("engine"))
    if row is not None and row.get("d") is not None:
        name = style.with_d(name, row["d"])
    if row is not None and policy == "jiq_threshold" and row.get("z") is not None:
        name += f" (z={row['z']})"
    return name
