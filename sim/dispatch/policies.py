"""The dispatching policies of the dispatch model, one frozen record each, in one table.

A record says what every reader needs to know about a policy: its kernel code, its name in
words, how it probes queues (none, all of them, or a sample of ``d`` queues per job or ``k*d``
per job or per task), whether it places single-task or k-task jobs, its planning cost per agent
event and the engines that serve it. The model's entries, checks, costs, memory estimate and
response laws, the engines' drivers and the mean-field laws read these attributes; none of them
compares a policy's name.

Kernels branch on the integer codes once, outside their hot loops (never on jitted functions
passed as arguments: see docs/architecture.md); the Python drivers pass ``record.code``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sim.core.declare import Policy, policy_table, record_of
from sim.core.service_keys import SERVICE_KEYS

__all__ = ["DispatchPolicy", "POLICIES", "policy", "policy_of", "served_by", "only", "RANDOM", "JSQ", "POD",
           "BATCH_FILLING", "BATCH_SAMPLING", "POD_PER_TASK", "LL", "JIQ", "LL_FILLING", "GENERAL",
           "ANY_LAW", "PHASE_TYPE"]

#: kernel codes (the compiled kernels import these integers, never the records); LL, JIQ and
#: LL_FILLING run on the general-size engine only, whose kernels have codes of their own
#: (sim.dispatch.general: GENERAL_POLICIES, JOBS_POLICIES, by name)
RANDOM, JSQ, POD, BATCH_FILLING, BATCH_SAMPLING, POD_PER_TASK, LL, JIQ, LL_FILLING = range(9)
#: the engine whose tasks carry their own sizes from any service law (sim.dispatch.general_run)
GENERAL = "general"
#: the service laws an engine models for a policy beyond the exponential (``DispatchPolicy.laws``):
#: every law of sim.core.service, or the phase-type ones (exponential, erlang, hyperexponential)
ANY_LAW, PHASE_TYPE = "any", "phase-type"


def _unit_cost(k: int, d: int) -> float:
    return 1.0


@dataclass(frozen=True)
class DispatchPolicy(Policy):
    """One dispatching policy (module docstring)."""

    #: it samples ``d`` distinct queues (``k*d`` for k-task jobs) and joins the shortest of
    #: them: ``d`` is a parameter of its tasks
    samples: bool = False
    #: it reads every queue and joins a shortest one (ties uniform)
    probes_all: bool = False
    #: the ``d`` of the power-of-d tail that bounds its longest queue (memory estimates);
    #: 0: the task's own ``d``
    tail_d: int = 0
    #: it places k-task jobs and needs ``k`` (the batch policies)
    k_task: bool = False
    #: it places single-task jobs only (``k`` is not a parameter of its tasks)
    single_task: bool = False
    #: the policy the k-task agent engine runs it as, where it has no code of its own there
    #: (power-of-d with a buffer: batch-filling with k = 1, the same model)
    jobs_as: str = ""
    #: a job's k tasks share one sample of ``k*d`` queues (else each task draws its own)
    batch: bool = False
    #: the tasks are water-filled one by one into the currently shortest sampled queue (else a
    #: batch goes to the ``k`` shortest sampled queues)
    fills: bool = False
    #: it compares the sampled servers' *work* (the sizes are known: least-loaded LL(d) and
    #: its batch form), not their queue lengths
    by_work: bool = False
    #: planning cost of one agent event in plain agent events, given ``(k, d)``
    agent_event_cost: Callable[[int, int], float] = field(default=_unit_cost, compare=False)
    #: engine -> the optional parameters its entry on that engine takes (``k`` where the
    #: policy takes it, ``b``, ...): the engines and limits that serve it
    engines: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False)
    #: engine -> the service laws it models for this policy beyond the exponential
    #: (:data:`ANY_LAW` or :data:`PHASE_TYPE`); an engine not listed has exponential sizes and
    #: refuses a task that names another law (``sim.dispatch.check_task``). The general engine
    #: models every law for every policy it serves, and is not listed
    laws: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def models_law(self, engine: str) -> str | None:
        """The laws ``engine`` models for this policy beyond the exponential (:data:`ANY_LAW`,
        :data:`PHASE_TYPE`), or None where it has exponential sizes only."""
        return ANY_LAW if engine == GENERAL else self.laws.get(engine)

    def probe_d(self, d) -> int:
        """The ``d`` a task of this policy uses: its own ``d`` if the policy samples, else 1
        (the one place where a policy that does not sample ignores ``d``)."""
        return int(d) if self.samples else 1

    def sample_size(self, k: int, d: int) -> int:
        """Distinct queues one sample holds: ``k*d`` for a sampling policy (``d`` for
        power-of-d, whose ``k`` is 1), 1 otherwise (the one queue a task is sent to)."""
        return k * d if self.samples else 1

    def probes(self, n_servers: int, k: int, d: int) -> int:
        """Queue-length probes of one job: 0 (random), N per task (jsq), one sample of ``k*d``
        per job (power-of-d, the batch policies) or per task (power-of-(kd) per task)."""
        if self.probes_all:
            return n_servers * k
        if not self.samples:
            return 0
        return k * d if self.batch or self.single_task else k * k * d

    def messages(self, n_servers: int, k: int, d: int) -> float:
        """One-way messages of one job, the project's one unit: a probe is a request and a
        reply, so 2 per probed queue (power-of-d: 2d per job, as the multi-dispatcher paper
        counts)."""
        return 2.0 * self.probes(n_servers, k, d)

    def single_task_agent(self, k: int, b) -> bool:
        """A task of this policy runs on the single-task agent engine (:mod:`sim.dispatch.agent`:
        faster, per-server service rates): ``k = 1``, no buffer, not a batch policy."""
        return not self.k_task and k == 1 and b is None

    def queue_bound_d(self, d) -> int:
        """The ``d`` of the power-of-d tail that bounds this policy's longest queue."""
        return self.tail_d or int(d)


#: the service law's keys (sim.core.service_keys): the general engine takes any law; the
#: exponential simulators take them too, so that a task of theirs that names another law is
#: refused by the model's check (naming the general engine), never run with exponential sizes
_LAW = SERVICE_KEYS
_BUFFERED = ("b", *_LAW)
#: the engines of power-of-d declared by its transitions (sim.dispatch.population; with a
#: phase-type law, sim.dispatch.phase_population)
_DECLARED = {"population": ("b", "replacement", *_LAW), "population_meanfield": ("b", "replacement", *_LAW),
             "population_refined": ("replacement", *_LAW),
             "population_trajectory": ("init_tail", "replacement", *_LAW)}
#: the limits of single-task jobs under any law (docs/service.md, "Limits as entries"): random
#: is M/G/1 per server, pod the cavity queue (sim.dispatch.meanfield.cavity), ll the workload
#: fixed point (sim.dispatch.meanfield.least_loaded), all reached through the meanfield engine
_MEANFIELD_ANY_LAW = {"meanfield": ANY_LAW}
#: the population engines of pod take the phase-type laws (sim.dispatch.phase_population)
_PHASE_POPULATION = {"population": PHASE_TYPE, "population_meanfield": PHASE_TYPE,
                     "population_refined": PHASE_TYPE}
#: the batch policies' heavy-traffic limit (sim.dispatch.meanfield.heavy_traffic)
_HEAVY_TRAFFIC_ENGINE = {"heavy_traffic": ()}

#: name -> record, the dispatch model's one table of policies (its entries' order)
POLICIES: dict[str, DispatchPolicy] = policy_table(
    # each task to a uniformly chosen server
    DispatchPolicy("random", RANDOM, "random", tail_d=1,
                   engines={"agent": ("k", "b", "service_rates", *_LAW), "meanfield": ("k", "b", *_LAW),
                            "occupancy": ("k", "b", *_LAW), GENERAL: ("k", *_LAW)},
                   laws=_MEANFIELD_ANY_LAW),
    # each task to a shortest queue (ties uniform)
    DispatchPolicy("jsq", JSQ, "JSQ", probes_all=True, tail_d=2,
                   engines={"agent": ("k", "b", "service_rates", *_LAW), "meanfield": ("k", "b"),
                            "occupancy": ("k", "b", *_LAW), GENERAL: ("k", *_LAW)}),
    # power-of-d: single-task jobs, d distinct queues sampled, join the shortest
    DispatchPolicy("pod", POD, "power-of-d", samples=True, single_task=True,
                   jobs_as="batch_filling",
                   engines={"agent": ("b", "service_rates", *_LAW), "meanfield": ("b", *_LAW),
                            "refined": ("replacement",), "occupancy": _BUFFERED, **_DECLARED,
                            "trajectory": ("init_tail", *_LAW), GENERAL: _LAW},
                   laws={**_MEANFIELD_ANY_LAW, **_PHASE_POPULATION}),
    # k tasks into k*d sampled queues, each into the currently shortest
    DispatchPolicy("batch_filling", BATCH_FILLING, "batch-filling", samples=True, k_task=True,
                   batch=True, fills=True, agent_event_cost=lambda k, d: 1.0 + d / 16.0,
                   engines={"agent": _BUFFERED, "meanfield": (), "refined": (),
                            "occupancy": _BUFFERED, "trajectory": ("init_tail", *_LAW), **_HEAVY_TRAFFIC_ENGINE,
                            GENERAL: _LAW}),
    # k tasks to the k shortest of k*d sampled queues
    DispatchPolicy("batch_sampling", BATCH_SAMPLING, "batch-sampling", samples=True, k_task=True,
                   batch=True, agent_event_cost=lambda k, d: 1.0 + d / 16.0,
                   engines={"agent": _BUFFERED, "meanfield": (), "occupancy": _BUFFERED, **_HEAVY_TRAFFIC_ENGINE,
                            GENERAL: _LAW}),
    # each task samples its own k*d queues and joins the shortest
    DispatchPolicy("pod_per_task", POD_PER_TASK, "power-of-d per task", samples=True, k_task=True,
                   agent_event_cost=lambda k, d: (1.0 + k / 40.0) * (1.0 + d / 32.0),
                   engines={"agent": _BUFFERED, "meanfield": (), "occupancy": _BUFFERED,
                            GENERAL: _LAW}),
    # least-loaded LL(d): d distinct servers sampled, join the one with the least work (the
    # sizes are known at arrival); single-task jobs, sizes of any law
    DispatchPolicy("ll", LL, "LL(d)", samples=True, single_task=True, by_work=True,
                   engines={"meanfield": _LAW, GENERAL: _LAW}, laws=_MEANFIELD_ANY_LAW),
    # Join-the-Idle-Queue with one dispatcher: an idle server while there is one, else a
    # uniform server (the JIQ model's jiq with r = N; several dispatchers are that model's).
    # Labelled as the JIQ and LED models label theirs, so that a figure that names no model
    # still prints one label for the name
    DispatchPolicy("jiq", JIQ, "JIQ", single_task=True, tail_d=2,
                   engines={GENERAL: _LAW}),
    # the batch form of LL(d): k*d servers sampled per job, the k tasks water-filled by work
    DispatchPolicy("ll_filling", LL_FILLING, "least-loaded filling", samples=True, k_task=True,
                   batch=True, fills=True, by_work=True, engines={GENERAL: _LAW}),
)


def policy(name) -> DispatchPolicy:
    """The record of a policy given by name (or the record itself); ``ValueError`` naming it
    if the dispatch model has no such policy."""
    return record_of(POLICIES, name, "dispatch")


def served_by(engine: str, where: Callable[[DispatchPolicy], bool] = lambda p: True) -> tuple[str, ...]:
    """The names of the policies ``engine`` serves (and ``where`` accepts), in table order."""
    return tuple(p.name for p in POLICIES.values() if engine in p.engines and where(p))


def policy_of(task: dict) -> DispatchPolicy:
    """The record of a task's policy (:func:`policy`)."""
    return policy(task.get("policy"))


def only(**attributes) -> DispatchPolicy:
    """The one record whose attributes have the given values (``only(fills=True)``: the
    water-filling policy), for a module that carries one policy's law; ``ValueError`` unless
    exactly one matches."""
    found = [p for p in POLICIES.values() if all(getattr(p, a) == v for a, v in attributes.items())]
    if len(found) != 1:
        raise ValueError(f"{attributes}: {len(found)} dispatch policies match, not one")
    return found[0]
