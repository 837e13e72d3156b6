"""Golden rows (issue 37, item 8): every stored task of ``tests/golden/<model>.json`` rerun through
``sim.run`` gives its stored row bit for bit, every field but the timing ones. The files are made
by ``tests/golden/make_golden.py`` (never by a test); a change that moves a number must say so
and rewrite them."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim import registry
from sim.testing import differences, exact
from tests.golden.make_golden import TASKS, TIMING, golden_row

HERE = Path(__file__).resolve().parent


def _records() -> list[tuple[str, int, dict]]:
    out = []
    for name in TASKS:
        for i, rec in enumerate(json.loads((HERE / f"{name}.json").read_text())):
            out.append((name, i, rec))
    return out


RECORDS = _records()


def test_exact_tells_what_equality_would_not():
    assert exact(0.0) != exact(-0.0) and exact(1) != exact(1.0) and exact(True) != exact(1)
    assert exact(math.nan) == exact(float("nan")) and exact([0.1 + 0.2]) != exact([0.3])
    assert differences({"a": 1.0, "b": 2}, {"a": 1.0000000000000002, "c": 3}) == [
        "a: stored 1.0, now 1.0000000000000002", "b: missing (stored 2)", "c: new field 3"]


def test_every_entry_has_golden_rows():
    stored = {(rec["task"]["model"], rec["task"]["engine"], rec["task"]["policy"]) for _, _, rec in RECORDS}
    # every entry of a model with golden rows (a model added later adds its file to TASKS)
    entries = {(e.model, e.engine, e.policy) for e in registry.ENTRIES if e.model in TASKS}
    assert set(TASKS) <= set(registry.SHIPPED)
    assert not entries - stored, f"entries without golden rows (add tasks to make_golden.py): {sorted(entries - stored)}"
    assert all(not set(TIMING) & set(rec["row"]) for _, _, rec in RECORDS)


@pytest.mark.parametrize("name,index,record", RECORDS,
                         ids=[f"{n}-{i}-{r['task']['engine']}-{r['task']['policy']}" for n, i, r in RECORDS])
def test_golden_row(name, index, record):
    diff = differences(record["row"], golden_row(record["task"]))
    assert not diff, f"{name}.json row {index} ({record['task']}) moved:\n" + "\n".join(diff)
