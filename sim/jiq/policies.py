"""The policies of the JIQ model, one frozen record each, in one table.

Every policy sends a task to an idle server its scheduler's I-queue lists; the records say what
each does beyond that (a blind task probes ``d`` servers, an idle server joins the shortest of
``d`` I-queues, the I-queues list servers up to a threshold ``z``, no delete messages), the
kernel codes of the agent and occupancy engines, and the engines that serve it. The model's
entries, checks and response law, the engines and the mean-field laws read these attributes.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.core.declare import Policy, policy_table, record_of

__all__ = ["JiqPolicy", "POLICIES", "policy", "served_by"]

#: the engines of the policies whose counts are a Markov chain (the occupancy engine and the limits)
_MARKOV = ("agent", "occupancy", "meanfield", "refined")
#: and of those the declared transitions and the trajectory engine also cover
_DECLARED = ("trajectory", "population", "population_meanfield", "population_refined")


@dataclass(frozen=True)
class JiqPolicy(Policy):
    """One JIQ policy (module docstring); ``code`` is its agent kernel's code."""

    #: its code in the occupancy kernel (-1: that engine does not serve it)
    occupancy_code: int = -1
    #: a task whose scheduler lists no idle server probes ``d`` servers and joins the shortest
    #: (else it goes to a uniform server)
    probes: bool = False
    #: a server becoming idle joins the shortest of ``d`` sampled I-queues (else a uniform one)
    joins_shortest_iqueue: bool = False
    #: the I-queues list the servers with at most ``z`` tasks (a parameter of its tasks)
    threshold: bool = False
    #: Lu et al.'s approximation (sim.jiq.lu) covers it: its meanfield rows carry it
    lu: bool = False
    #: the policy whose mean-field fixed point starts its agent runs (itself where empty)
    warm_start: str = ""
    #: the engines that serve it
    engines: tuple[str, ...] = ("agent",)

    @property
    def samples(self) -> bool:
        """``d`` is a parameter of its tasks."""
        return self.probes or self.joins_shortest_iqueue

    def probe_d(self, d) -> int:
        """The ``d`` a task of this policy uses: its own if the policy samples, else 1."""
        return int(d) if self.samples else 1

    def exponents(self, d: int) -> tuple[int, int]:
        """``(d', d'')``: the samples of a blind task and of a join."""
        return (d if self.probes else 1), (d if self.joins_shortest_iqueue else 1)

    def d_limit(self, n_servers: int, n_iqueues: int) -> tuple[int, str]:
        """The largest ``d`` and its name: servers probed (N) or I-queues sampled (M)."""
        return (n_servers, "n_servers") if self.probes else (n_iqueues, "M = n_servers / r")

    @property
    def needs(self) -> tuple[str, ...]:
        """The parameters its tasks need, the same on every engine."""
        return ("r",) + ("d",) * self.samples + ("z",) * self.threshold


#: name -> record, the JIQ model's one table of policies
POLICIES: dict[str, JiqPolicy] = policy_table(
    # idle server from the own I-queue, else a uniform server
    JiqPolicy("jiq", 0, "JIQ", occupancy_code=0, lu=True, engines=_MARKOV + _DECLARED),
    # ... else the shortest of d probed servers
    JiqPolicy("jiq_pod", 1, "JIQ-Po2", occupancy_code=1, probes=True, engines=_MARKOV + _DECLARED),
    # no delete messages: I-queues may list busy servers
    JiqPolicy("jiq_original", 2, "JIQ-Original", warm_start="jiq"),
    # I-queues list the servers with at most z tasks
    JiqPolicy("jiq_threshold", 3, "JIQ-threshold", threshold=True, warm_start="jiq"),
    # a server becoming idle joins the shortest of d I-queues
    JiqPolicy("jiq_sqd", 4, "JIQ-SQ(2)", occupancy_code=2, joins_shortest_iqueue=True, lu=True,
              engines=_MARKOV),
)


def policy(name) -> JiqPolicy:
    """The record of a policy given by name (or the record itself); ``ValueError`` naming it
    if the JIQ model has no such policy."""
    return record_of(POLICIES, name, "JIQ")


def served_by(engine: str) -> tuple[str, ...]:
    """The names of the policies ``engine`` serves, in table order."""
    return tuple(p.name for p in POLICIES.values() if engine in p.engines)
