"""The contract test (issue 37, item 5), scipy-style: every (model, engine, policy) entry of every
shipped model runs its declared example through ``sim.testing.check_entry``: row keys and types,
finite standard errors, bitwise determinism by seed, and simulation against its limit within
4 SE plus a measured allowance (declared beside the example). An out-of-tree model calls
``sim.testing.check_model(MODEL)`` in its own tests (docs/extending.md)."""
from __future__ import annotations

import pytest

from sim import registry
from sim.testing import check_entry

SHIPPED_ENTRIES = [e for e in registry.ENTRIES if e.model in registry.SHIPPED]


@pytest.mark.parametrize("entry", SHIPPED_ENTRIES, ids=[f"{e.model}-{e.engine}-{e.policy}" for e in SHIPPED_ENTRIES])
def test_entry_keeps_the_contract(entry):
    check_entry(entry)


def test_every_simulation_with_a_limit_is_compared_with_it():
    """The examples are chosen so that each simulation entry whose model has a limit for its
    policy meets that limit at the example's parameters (not skipped for want of a parameter)."""
    from sim.testing import _limits

    for e in SHIPPED_ENTRIES:
        limits = [x for x in registry.MODELS[e.model].entries if not x.stochastic and x.policy == e.policy]
        if e.stochastic and e.engine not in registry.PATH_ENGINES and limits:
            assert _limits(e, registry.MODELS[e.model]), e
