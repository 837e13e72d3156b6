"""Distributed Join-the-Idle-Queue (Wang, Feng & Cheng, "Distributed Join-the-Idle-Queue for low
latency cloud services"; Lu et al. 2011 for the original JIQ): the model.

Model
-----
``N`` identical servers with FIFO queues and Exp(1) service; ``M`` schedulers, ``r = N / M``
servers per scheduler (``r > 0`` with ``N / r`` a positive integer). Tasks arrive as a Poisson
process of rate ``lam * N`` (``0 <= lam < 1``), each at a uniformly chosen scheduler. Each
scheduler holds an *I-queue*, a list of idle servers; a server that becomes idle sends a "join"
message to an I-queue chosen uniformly among the ``M``.

A task arriving at a scheduler whose I-queue is non-empty goes to a server drawn uniformly from
that I-queue, which leaves it (no message). If the I-queue is empty:

- ``jiq``: the task goes to a server drawn uniformly among all ``N``;
- ``jiq_pod``: ``d`` distinct servers are probed (uniformly) and the task joins the shortest,
  ties uniform;

and if the chosen server was idle it is listed in another I-queue and sends it a "delete"
message, so that I-queues hold idle servers only (and every idle server is listed once).

Variants:

- ``jiq_original`` (Lu et al. 2011): no delete messages. A listed server may become busy by a
  blind assignment and stays listed; a scheduler that draws it sends the task there although it
  is busy (and it leaves that I-queue). A server is listed at most once: a listed server that
  becomes idle again does not join a second I-queue.
- ``jiq_threshold`` (threshold ``z >= 0``): the I-queues hold exactly the servers with at most
  ``z`` tasks (join on falling to ``z``, leave on rising above ``z`` by any route); a scheduler
  draws uniformly from its I-queue and the server stays listed while it holds at most ``z``
  tasks. ``z = 0`` is ``jiq``.
- ``jiq_sqd`` (JIQ-SQ(d)): as ``jiq``, but a server becoming idle samples ``d`` distinct
  I-queues and joins the shortest (ties uniform); needs ``d <= M``.

Messages (one-way): a probe of a server or of an I-queue is a request and a reply, 2; a join or
a delete, 1. Under ``jiq_threshold`` a server rising above ``z`` by a task from its own I-queue's
scheduler sends a delete when ``z > 0`` (the scheduler cannot know its count); for ``z = 0`` the
scheduler knows the server was idle and drops it itself, as under ``jiq``.

Engines
-------
- ``agent`` (:mod:`sim.jiq.agent`, kernels in :mod:`sim.jiq._agent_kernel`): one entry per
  server and per I-queue, uniformized continuous time, every task's response measured directly,
  O(1) per event, any ``M >= 1``.
- ``occupancy`` (:mod:`sim.jiq.occupancy`, kernels in :mod:`sim.jiq._occupancy_kernel`):
  counts of servers per queue length and of I-queues per size, O(levels) per event whatever N
  (jiq, jiq_pod, jiq_sqd: the policies whose counts are a Markov chain).
- ``meanfield`` (:mod:`sim.jiq.meanfield`): the ``N, M -> infinity`` limit with ``r`` fixed
  (``p0``, the server tails, the I-queue size law, message rates), by root and by ODE.
- ``population``, ``population_meanfield`` and ``population_refined``
  (:mod:`sim.jiq.population`): ``jiq`` and ``jiq_pod`` declared by their transitions
  (:mod:`sim.core.population`; the server tail and the I-queue tail, with delete messages),
  simulated by the generic engine, the mean field and refined 1/N term derived from the same
  declaration; rows with the population engine's keys (no ``p0`` or message rates).

:func:`check_task` validates the model's parameters of a task (kept light: numpy only, no numba).
"""
from __future__ import annotations

import math

from sim.core.declare import INT_LIMIT, POSITIVE_LOAD_BELOW_ONE, Entry, Model, Param
from sim.core.memory import RESPONSE_BYTES, WINDOW_BYTES, longest_queue, ring_capacity, ring_slots
from sim.core.trajectory import INIT_TAIL, events_bound
from sim.engines import AGENT, LOAD_BELOW_ONE, MEANFIELD, OCCUPANCY, POPULATION, POPULATION_MEANFIELD, POPULATION_REFINED, PROBES, REFINED, TRAJECTORY
from sim.jiq.policies import POLICIES as POLICY_RECORDS
from sim.jiq.policies import policy as policy_record

__all__ = ["MODEL", "POLICIES", "check_task", "n_schedulers", "events_per_time", "response_law"]

#: the policies of this model (sim.jiq.policies)
POLICIES = tuple(POLICY_RECORDS)
#: the columns the JIQ simulators (agent and occupancy engines) add to the common result keys,
#: with their meanings (rates per server per unit time; a ``_se``: the standard error before)
SIM_COLUMNS = {
    "p0": "time-average fraction of empty I-queues", "p0_se": "",
    "mean_iqueue": "time-average listed (idle) servers per I-queue (listed servers / M)",
    "mean_iqueue_se": "",
    "join_rate": "join messages per server per unit time", "join_rate_se": "",
    "delete_rate": "delete messages per server per unit time", "delete_rate_se": "",
    "probe_rate": "probe messages (2 per probe) per server per unit time", "probe_rate_se": "",
}


def events_per_time(task: dict) -> float:
    """Events per unit of simulated time (``time`` -> ``events``): the agent engine is
    uniformized at ``N (1 + lam)``; the occupancy engine counts arrivals ``lam N`` and
    completions ``busy = lam N`` in steady state, ``2 lam N``; the trajectory engine runs to its
    horizon ``time``, ``events`` being a cap it must not reach: the rate bound ``(1 + lam) N``
    plus 10 SDs (:func:`sim.core.trajectory.events_bound`)."""
    n, lam = task["n_servers"], task["lam"]
    if task["engine"] == "trajectory":
        return events_bound((1.0 + lam) * n, task["time"])
    return 2.0 * lam * n if task["engine"] in ("occupancy", "population") else (1.0 + lam) * n


def n_schedulers(n_servers, r) -> int:
    """``M = N / r``; ``ValueError`` naming ``r`` unless it is a positive integer."""
    if r is None:
        raise ValueError("r=None: the JIQ model needs r (servers per scheduler), a number > 0")
    MODEL.check_values(r=r)
    m_float = float(n_servers) / float(r)
    m = round(m_float)
    if m < 1 or abs(m_float - m) > 1e-9 * max(1.0, m_float):
        raise ValueError(f"r={r!r}: n_servers / r = {n_servers} / {r} = {m_float:.10g} must be a "
                         "positive integer (the number of schedulers)")
    if m >= 2**31:
        raise ValueError(f"r={r!r}: n_servers / r = {m} schedulers, must be < 2**31")
    return int(m)


def memory_bytes(task: dict) -> float:
    """Peak bytes of the arrays one JIQ task allocates (docs/sweeps.md, memory):

    - agent (:mod:`~sim.jiq.agent`): per server a ring of ``C`` stamps (int32; 1.5 C while it
      doubles), ``C`` four times the ring above the power-of-2 longest queue of
      :func:`sim.core.memory.ring_slots` (the docstring of the engine: C = 32 at lam = 0.9,
      N = 10**6), the queue lengths, I-queue positions and the start's permutations and owner arrays
      (about 72 bytes), and the I-queue rows (4 bytes per slot, about 2 slots per idle server);
    - occupancy: the level array and the I-queue size array, O(levels + r) (the longest
      I-queue is about r (1 - lam) + 10 sqrt(r)): eight arrays of int64 of that length;
    - meanfield: the I-queue size law's series, kept in blocks that double: a fit of the
      measured peak, ``64 * 2**ceil(log2(4 r + 2e5))`` bytes (measured 17-136 MiB for r = 1e4..5e5), and
      8 GiB x r / 1e6 from r = 1e6 on, where the root solve's series ran past 6 GiB (measured
      under an 8 GiB address limit; not measured further);
    - refined: dense matrices of the I-queue law's length ``r + 10 sqrt(r / (1 - lam))``
      squared, eight of them (measured 281 MiB peak RSS at r = 1000: 264 estimated;
      r = 1e4 did not finish in 10 minutes).
    """
    engine = task["engine"]
    n, lam = float(task["n_servers"]), float(task["lam"])
    r = float(task.get("r") or 1.0)
    fixed = WINDOW_BYTES + (RESPONSE_BYTES if task.get("responses") else 0)
    events = float(task.get("events") or 10**6)
    iq_len = r * max(1.0 - lam, 0.0) + 10.0 * math.sqrt(r) + 16
    run_time = events / (n * (1.0 + lam))
    if engine in ("population", "population_meanfield", "population_refined"):
        # sim.jiq.population: L levels (at most random routing's) and K = r + 8 sqrt(r) + 8
        # I-queue sizes; the simulation keeps an area per coordinate and window (up to 2000
        # windows), the limits dense (L + K)^2 matrices (the ODE's Jacobian, A, W, Q: about ten)
        dim = longest_queue(n * 1e6, lam, 1, None, run_time) + r + 8.0 * math.sqrt(r) + 16
        if engine == "population":
            return 2000 * 8.0 * dim + 8 * 8.0 * dim + fixed
        return 10 * 8.0 * (longest_queue(1e20, lam, 1) + 2.0 * r + 10.0 * math.sqrt(r) + 64) ** 2 + fixed
    if engine == "agent":
        slots = 4 * ring_slots(n, lam, 2, None, run_time)
        return n * (72 + 4 * slots + 8 * max(1.0 - lam, 0.05)) + fixed
    if engine in ("occupancy", "trajectory"):
        levels = longest_queue(n, lam, 2, None, run_time)
        return 8 * 8.0 * ring_capacity(int(levels + iq_len), start=16) + fixed
    if engine == "refined":  # dense (L + K)^2 matrices, K the I-queue law's length
        size = r + 10.0 * math.sqrt(r / max(1.0 - lam, 1e-12)) + 64
        return 8 * 8.0 * size**2 + fixed
    # meanfield: the I-queue law's series grows in doubling blocks; a fit of the measured peak
    # (r = 1e4..5e5 at lam = 0.9: 17-136 MiB, benchmarks/bench_memory.py), and at least the
    # measured > 6 GiB from r = 1e6 on (the solver's series then runs to 1.3e8 terms)
    fit = 64.0 * 2 ** math.ceil(math.log2(4.0 * r + 2e5))
    return max(fit, 8.0 * 2**30 * r / 1e6 if r >= 1e6 else 0.0) + fixed


def check_task(task: dict) -> None:
    """``ValueError`` with one clear message naming the key and its value if the task's model
    parameters are invalid: ``policy``; ``n_servers``, ``lam``, ``r``, ``d`` and ``z`` against
    their declared domains (:attr:`MODEL.params <sim.core.declare.Model.param>`; the engines'
    run_task call this directly, without the registry); ``n_servers / r`` a positive integer,
    ``d`` (jiq_pod: d <= n_servers; jiq_sqd: d <= M), ``z`` given to jiq_threshold."""
    policy = task.get("policy")
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is not a JIQ policy; valid: {', '.join(POLICIES)}")
    n, lam = task.get("n_servers"), task.get("lam")
    MODEL.check_values(n_servers=n, lam=lam)
    if n is None or lam is None:
        raise ValueError(f"n_servers={n!r}, lam={lam!r}: the JIQ model needs both")
    if int(n) >= 2**31 and task.get("engine", "agent") == "agent":
        raise ValueError(f"n_servers={n!r}: the agent engine needs n_servers < 2**31 "
                         "(use the occupancy engine)")
    n = int(n)
    m = n_schedulers(n, task.get("r"))
    pol = policy_record(policy)
    if pol.samples:
        d = task.get("d")
        if d is None:
            raise ValueError(f"d=None: policy={policy!r} needs d (an integer >= 1)")
        MODEL.check_values(d=d)
        top, what = pol.d_limit(n, m)
        if int(d) > top:
            raise ValueError(f"d={d!r} must be an integer with 1 <= d <= {what} = {top} "
                             f"for policy={policy!r}")
    if pol.threshold:
        z = task.get("z")
        if z is None:
            raise ValueError(f"z=None: policy={policy!r} needs z (an integer >= 0)")
        MODEL.check_values(z=z)
    if task.get("engine") == "meanfield":  # p0 solves a normalisation that degenerates at lam = 0
        POSITIVE_LOAD_BELOW_ONE.check("lam", lam)


def response_law(policy: str, params: dict):
    """The N = infinity response-time law of a point of jiq, jiq_pod or jiq_sqd (the policies
    with a mean field), or None (another policy, a load outside (0, 1), r or d missing)."""
    lam, r, d = params.get("lam"), params.get("r"), params.get("d")
    pol = POLICY_RECORDS.get(policy)
    if pol is None or "meanfield" not in pol.engines or lam is None or not 0.0 < float(lam) < 1.0:
        return None
    if r is None or (pol.samples and d is None):
        return None
    from sim.jiq.meanfield import response_law as jiq_law
    return jiq_law(policy, float(lam), float(r), 1 if d is None else int(d))


#: the engines in the order of the model's entries
_ENGINES = ("agent", "occupancy", "meanfield", "refined", "trajectory", "population",
            "population_meanfield", "population_refined")
#: the function of each engine's module that runs a task (sim.jiq.<module>:<function>)
_TARGET = {"population": "population:run_task", "population_meanfield": "population:run_meanfield",
           "population_refined": "population:run_refined"}


#: the contract check's examples (sim.testing): N = 500, lam = 0.7, r = 5 (d = 2, z = 1 where
#: the policy takes them), 400,000 events; a trajectory to time 5 at N = 100
def _example(engine: str, pol) -> dict:
    base = {"n_servers": 500, "lam": 0.7, "r": 5.0, **({"d": 2} if pol.samples else {}),
            **({"z": 1} if pol.threshold else {})}
    if engine == "trajectory":
        return {**base, "n_servers": 100, "time": 5.0, "events": 100_000}
    return {**base, "events": 400_000} if engine in ("agent", "occupancy", "population") else base


MODEL = Model(
    name="jiq",
    title="distributed Join-the-Idle-Queue (Wang, Feng & Cheng): M = N / r schedulers with I-queues",
    entries=tuple(Entry(engine, pol.name, f"sim.jiq.{_TARGET.get(engine, engine + ':run_task')}", pol.needs,
                        ("init_tail",) if engine == "trajectory" else (), example=_example(engine, pol))
                  for engine in _ENGINES for pol in POLICY_RECORDS.values() if engine in pol.engines),
    params={
        "r": Param("float", "servers per scheduler (JIQ: M = N / r schedulers, each with an I-queue)",
                   label="r (servers per scheduler)", symbol="r", domain=(0.0, math.inf),
                   inclusive=(False, True)),
        "d": PROBES,
        "z": Param("int", "JIQ threshold: the I-queues list the servers with at most z tasks",
                   label="threshold z (tasks)", symbol="z", domain=(0, INT_LIMIT)),
        "lam": LOAD_BELOW_ONE,
        "init_tail": INIT_TAIL,
    },
    results={
        "mean_queue_1n": "float",  # refined engine: E[Q] = x* + mean_queue_1n / N + O(1/N^2)
        # I-queues and message rates (per server per unit time, one-way messages)
        "p0": "float", "p0_se": "float", "mean_iqueue": "float", "mean_iqueue_se": "float",
        "join_rate": "float", "join_rate_se": "float", "delete_rate": "float",
        "delete_rate_se": "float", "probe_rate": "float", "probe_rate_se": "float",
        "messages_per_job_se": "float",
        # meanfield rows of jiq and jiq_sqd: Lu et al.'s approximation (sim.jiq.lu, unverified)
        "lu_mean_response": "float", "lu_rho": "float",
        # trajectory engine: p0(t) of the path and of the ODE, their sup distance
        "traj_p0": "floats", "traj_ode_p0": "floats", "traj_sup_dist_p0": "float",
    },
    main_estimate="mean_response",
    events_per_time=events_per_time,
    memory_bytes=memory_bytes,
    check_task=check_task,
    responses=("agent", "occupancy", "meanfield"),
    response_law=response_law,
    engine_decls=(
        AGENT, OCCUPANCY, TRAJECTORY, MEANFIELD, REFINED,
        POPULATION, POPULATION_MEANFIELD, POPULATION_REFINED,
    ),
    policy_decls=tuple(POLICY_RECORDS.values()),
)
