"""Arms of the zero-queueing analysis: their keys and their labels in figures and reports.
"""
from __future__ import annotations

from analysis import style


def _arm_key(row: dict, arm: list[str]) -> tuple:
    return (row["policy"], row["engine"], *(row[p] for p in arm))


def _label(row: dict, arm: list[str]) -> str:
    parts = [f"{p}={row[p]:.4g}" if isinstance(row[p], float) else f"{p}={row[p]}"
             for p in arm if row[p] is not None]
    return f"{row['policy']} [{row['engine']}] " + ", ".join(parts)


def _rule_labels(arms: dict, arm: list[str], verdicts: list[dict]) -> dict:
    """Per arm key: ``(legend label, colour index)``. The label names the rule for d as the
    sweep wrote it (``c1: d = ceil(1 / ((1 - lam) * log(k)))``, a buffer added), else the arm's
    parameters; the colour belongs to the rule (its variant, else the arm without policy and
    engine: :func:`analysis.style.rule_of`), the same in every figure of the run, those of
    ``analysis/`` included (:class:`analysis.style.RuleStyles` over the same simulated arms)."""
    rule = {k: style.rule_of(dict(zip(arm, k[2:])), arm) for k in arms}
    styles = style.RuleStyles(rule.values())
    out = {}
    for key, v in zip(arms, verdicts):
        text = v.get("rule_text")
        label = _key_label(key, arm, skip=2, drop=frozenset(p for p in arm if p not in ("variant", "b")))
        if text:
            buffer = [f"b = {v['b']}"] if v.get("b") is not None else []
            name = v.get("variant")
            label = ", ".join(([f"{name}: {text}"] if name else [text]) + buffer)
        out[key] = (label or "all", styles.index(rule[key]))
    return out


def _key_label(key: tuple, arm: list[str], skip: int, drop: frozenset = frozenset()) -> str:
    """``c1, \u03b1 = 0.3, c = 1`` for an arm key, without its first ``skip`` parts and without
    the names in ``drop`` (those that are the same in every arm: the panel's title has them)."""
    names = ["policy", "engine", *arm]
    parts = []
    for n, v in list(zip(names, key))[skip:]:
        if v is None or n in drop:
            continue
        if n == "engine":
            parts.append(style.engine_name(v))
        elif n in ("policy", "variant"):
            parts.append(str(v))
        else:
            parts.append(f"{style.symbol(n)} = {v:g}" if isinstance(v, float) else f"{style.symbol(n)} = {v}")
    return ", ".join(parts)


def _constant(keys: list[tuple], arm: list[str]) -> frozenset:
    """The names (engine and arm parameters) whose value is the same in every arm key."""
    names = ["policy", "engine", *arm]
    return frozenset(n for i, n in enumerate(names) if i > 0 and len({k[i] for k in keys}) == 1)


def _fixed_text(key: tuple, arm: list[str], same: frozenset) -> str:
    """`` [occupancy simulation, \u03b1 = 0.3]``: the names in ``same`` (for a title)."""
    names = ["policy", "engine", *arm]
    text = _key_label(key, arm, skip=1, drop=frozenset(names) - same)
    return f" [{text}]" if text else ""
