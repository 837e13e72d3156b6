"""The policies of the multi-dispatcher model (the slotted engine), one frozen record each, in
one table.

The LED policies decide on each dispatcher's local estimates, refreshed by Push or Pull
updates under a message budget; the baselines decide on the true queue lengths (``jsq``,
``pod``, with a tie rule), on I-queues (``jiq``) or blindly (``random``, ``weighted_random``).
The model's entries, checks and memory estimate and the slotted engine's set-up read these
attributes; the kernel receives ``code``.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.core.declare import Policy, policy_table, record_of

__all__ = ["LedPolicy", "POLICIES", "policy"]


@dataclass(frozen=True)
class LedPolicy(Policy):
    """One policy of the slotted engine (module docstring)."""

    #: it decides on local estimates (an LED policy: update strategy, p_hat, message budget)
    local: bool = False
    #: it samples ``d`` servers per decision (``d`` a parameter of its tasks)
    samples: bool = False
    #: it compares true lengths and takes the tie rule ``ties``
    ties: bool = False
    #: it draws servers in proportion to their service rates when the rates differ
    draws_by_rate: bool = False
    #: it always draws by rate (uniformly when the rates are equal): a blind policy
    blind_by_rate: bool = False
    #: each dispatcher keeps a row of N entries (estimates of every queue, or an I-queue)
    dispatcher_row: bool = False
    #: it keeps a minimum tree over the estimates (16 bytes per server)
    min_tree: bool = False


#: name -> record, the slotted engine's one table of policies (kernel codes 0..7)
POLICIES: dict[str, LedPolicy] = policy_table(
    LedPolicy("l_jsq", 0, "L-JSQ", local=True, dispatcher_row=True, min_tree=True),
    LedPolicy("l_jba", 1, "L-JBA", local=True, dispatcher_row=True, draws_by_rate=True),
    LedPolicy("l_pod", 2, "L-Pod", local=True, dispatcher_row=True, samples=True),
    LedPolicy("jsq", 3, "JSQ", ties=True),
    LedPolicy("pod", 4, "power-of-d", samples=True, ties=True),
    LedPolicy("jiq", 5, "JIQ", dispatcher_row=True),
    LedPolicy("random", 6, "random"),
    LedPolicy("weighted_random", 7, "\u03bc-weighted random", draws_by_rate=True, blind_by_rate=True),
)


def policy(name) -> LedPolicy:
    """The record of a policy given by name (or the record itself); ``ValueError`` naming it
    if the slotted engine serves no such policy."""
    return record_of(POLICIES, name, "slotted-engine")
