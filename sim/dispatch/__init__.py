"""The dispatch model: N FIFO servers, Poisson jobs of k tasks, one dispatching policy.

Model
-----
N servers with FIFO queues and exponential service (rate 1, or per-server rates for single-task
jobs on the agent engine). Jobs arrive as a Poisson process of rate ``lam * N / k``; each job has
``k`` tasks (``k = 1``: single-task jobs), placed on arrival by the policy:

- ``random``: each task to a uniformly chosen server; ``jsq``: each task to a shortest queue
  (ties uniform); ``pod``: power-of-d, ``d`` distinct queues sampled without replacement, join the
  shortest (``k = 1`` only);
- ``batch_filling`` (Weng & Wang; Ying, Srikant & Kang): ``k * d`` distinct queues sampled, the
  ``k`` tasks water-filled into them one by one, each to the currently shortest;
  ``batch_sampling``: the ``k`` tasks to the ``k`` shortest of the ``k * d`` sampled queues;
  ``pod_per_task``: each task samples its own ``k * d`` queues and joins the shortest.

A finite buffer ``b`` (tasks per server, in service included) drops a whole job any of whose
tasks would exceed it. A job's response is the time until its last task completes.

Engines
-------
- ``agent`` (:mod:`~sim.dispatch.agent`; k-task jobs and buffers in
  :mod:`~sim.dispatch.agent_jobs`): one entry per server, uniformized continuous time,
  responses measured per job.
- ``occupancy`` (:mod:`~sim.dispatch.occupancy`): counts of servers per queue length; cost per
  event independent of N; job delays by Rao-Blackwell from the queue positions.
- ``meanfield`` (the package :mod:`~sim.dispatch.meanfield`, one module per law: ``pod`` the
  supermarket ODE and closed forms of random, jsq, pod; ``buffer`` a finite buffer;
  ``tasks`` pod_per_task, batch_sampling and k-task random/jsq; ``batch_filling`` the
  batch-filling limit for fixed ``k`` and ``d``; ``laws`` single-task random (M/G/1) and pod
  (the cavity queue) under any service law, and ``ll`` by its workload fixed point).
- ``refined`` (:mod:`~sim.dispatch.refined`, :mod:`~sim.dispatch.refined_batch`) and
  ``trajectory`` (:mod:`~sim.dispatch.trajectory`).
- ``population``, ``population_meanfield``, ``population_refined`` and
  ``population_trajectory`` (:mod:`~sim.dispatch.population`): ``pod`` declared by its transitions
  (:mod:`sim.core.population`), simulated by the generic engine, its mean field and refined
  1/N term derived from the same declaration; under a phase-type law (erlang,
  hyperexponential) the first three run the declaration over (queue length, phase) of
  :mod:`~sim.dispatch.phase_population`.
- ``general`` (:mod:`~sim.dispatch.general_run`): task sizes drawn at arrival from the task's
  service law (``service`` and its keys, :mod:`sim.core.service_keys`; exponential where absent),
  single-task jobs on :mod:`~sim.dispatch.general` and k-task jobs on
  :mod:`~sim.dispatch.general_jobs`; also ``ll`` (least-loaded LL(d)), ``ll_filling`` (its batch
  form) and ``jiq`` (one dispatcher). Which other engine models which laws for a policy is its
  record's ``laws`` (:mod:`~sim.dispatch.policies`: meanfield every law for random, pod and ll;
  the population engines of pod the phase-type laws); everywhere else the sizes are
  exponential, and :func:`check_task` refuses a task that names another law in one line naming
  the general engine.
- ``heavy_traffic`` (:mod:`~sim.dispatch.meanfield.heavy_traffic`): batch-filling and
  batch-sampling as ``1 - lam -> 0`` with ``k d (1 - lam)`` given, to N = 10^300; its tasks take
  ``log10_n``, ``one_minus_lam`` and ``d_real`` in place of ``n_servers``, ``lam`` and ``d``.

:func:`check_task` holds this model's value checks (the registry checks kinds first).
"""
from __future__ import annotations

import math

from sim.core.declare import INT_LIMIT, POSITIVE_LOAD_BELOW_ONE, Engine, Entry, Model, Param, PrecisePath
from sim.core.memory import RESPONSE_BYTES, WINDOW_BYTES, longest_queue, ring_capacity, ring_slots
from sim.core.service_keys import EXPONENTIAL_NAME, SERVICE_KEYS, SERVICE_PARAMS, is_exponential, law_of
from sim.core.trajectory import INIT_TAIL, events_bound
from sim.dispatch.policies import GENERAL, PHASE_TYPE, POLICIES, policy_of
from sim.engines import (
    AGENT,
    MEANFIELD,
    OCCUPANCY,
    POPULATION,
    POPULATION_MEANFIELD,
    POPULATION_REFINED,
    POPULATION_TRAJECTORY,
    PROBES,
    REFINED,
    TRAJECTORY,
)

__all__ = ["MODEL", "check_task", "events_per_time", "event_cost", "response_law", "LOG10_N_MAX"]

#: the largest ``log10_n`` of a heavy_traffic task: ``one_minus_lam``, ``k d`` and ``d`` stay floats
LOG10_N_MAX = 300.0


def events_per_time(task: dict) -> float:
    """Events per unit of simulated time of a stochastic dispatch task (``time`` -> ``events``).

    The agent engines are uniformized: exactly ``N (lam/k + 1)`` (``(1 + lam) sum(service_rates)``
    for single-task jobs on :mod:`~sim.dispatch.agent`). The occupancy engine counts real
    transitions (as does the population engine, :mod:`~sim.dispatch.population`), job arrivals
    ``lam N / k`` and completions ``busy``; in steady state without a
    buffer ``busy = lam N``, so ``N lam (1/k + 1)`` (with a buffer fewer servers are busy and
    the run covers a little more time). The trajectory engine runs to its horizon ``time``,
    ``events`` being a cap it must not reach: an upper bound, from the rate bound ``N (1 +
    lam)`` plus 10 SDs (:func:`sim.core.trajectory.events_bound`); so does the path engine of
    the declaration, ``population_trajectory``.
    """
    n, lam = task["n_servers"], task["lam"]
    k = task.get("k") or 1
    if task["engine"] == GENERAL:  # an event of the general-size engine is a job's arrival
        return n * lam / k
    if task["engine"] in ("trajectory", "population_trajectory"):
        return events_bound(n * (1.0 + lam / k), task["time"])
    if task["engine"] == "population" and not is_exponential(task):
        # a phase-type law (sim.dispatch.phase_population): every phase change is an event
        return n * lam * (1.0 + _phase_jumps(law_of(task)))
    if task["engine"] in ("occupancy", "population"):
        return n * lam * (1.0 / k + 1.0)
    rates = task.get("service_rates")
    if policy_of(task).single_task_agent(k, task.get("b")) and rates is not None:
        return (1.0 + lam) * float(sum(rates))
    return n * (lam / k + 1.0)


def _phase_jumps(law) -> float:
    """The mean number of jumps of a task's phase process, its exit included: ``alpha (I -
    P)^-1 1`` for the jump chain ``P`` among the phases (erlang k: k; hyperexponential: 1)."""
    import numpy as np

    alpha, t = law.phase_type()
    t = np.asarray(t, dtype=float)
    out = -np.diag(t)
    jump = t / out[:, None]
    np.fill_diagonal(jump, 0.0)
    visits = np.linalg.solve((np.eye(t.shape[0]) - jump).T, np.asarray(alpha, dtype=float))
    return float(visits.sum())


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a dispatch task's values cannot run."""
    engine = task["engine"]
    if engine == "heavy_traffic":  # N and the load as log10_n and one_minus_lam
        from sim.dispatch.meanfield.heavy_traffic import check_task as check_heavy

        check_heavy(task)
        return
    if not is_exponential(task) or any(task.get(key) is not None for key in SERVICE_KEYS[1:]):
        law = law_of(task)  # a law parameter the law does not take, lacks or has out of range
        if law.name != EXPONENTIAL_NAME:
            _check_law(task, engine, law)
    n = task["n_servers"]
    k = task.get("k", 1) if task.get("k") is not None else 1
    if k > n:
        raise ValueError(f"k={k!r} must not exceed n_servers={n!r}")
    b = task.get("b")
    lam = task["lam"]
    if b is None and not lam < 1.0:  # lam >= 0 is its declared domain
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1 (queues are unbounded)")
    pol = policy_of(task)
    if engine == "meanfield" and (pol.by_work or not is_exponential(task)):
        POSITIVE_LOAD_BELOW_ONE.check("lam", lam)  # the cavity queue and the LL(d) march
        if pol.by_work and not is_exponential(task):  # a tail too long for the LL(d) march
            from sim.dispatch.meanfield.least_loaded import check_reach

            check_reach(law_of(task), lam)
    if pol.samples:
        d = task["d"]
        if k * d > n:
            what = f"d={d!r}" if k == 1 else f"k*d={k * d} (k={k!r}, d={d!r})"
            raise ValueError(f"{what} must not exceed n_servers={n!r} (sampling without replacement)")
    rates = task.get("service_rates")
    if rates is not None:
        if len(rates) != n:
            raise ValueError(f"service_rates has {len(rates)} entries; it needs one per server "
                             f"(n_servers={n!r})")
        if k > 1 or b is not None:
            raise ValueError("service_rates: unequal service rates are supported for single-task "
                             "jobs without a buffer only (k=1, b absent)")
    if engine == "meanfield" and b is not None and k > 1:
        raise ValueError(f"b={b!r} with k={k!r}: the buffered mean field has single-task jobs "
                         "only (docs/responses.md); leave meanfield out or the buffer off")
    if engine == "refined" and pol.batch and k * task["d"] > 8:
        raise ValueError(f"k*d={k * task['d']} (k={k!r}, d={task['d']!r}): the refined batch-filling "
                         "enumerates the histograms of the k*d samples, at most 8 (docs/refined.md)")
    if engine == "agent" and n > 2**31 - 1:
        raise ValueError(f"n_servers={n!r}: the agent engine needs n_servers < 2**31 "
                         "(use the occupancy engine)")
    if engine == GENERAL:
        if n > 2**31 - 1:  # servers are drawn by the 32-bit bounded draw
            raise ValueError(f"n_servers={n!r}: engine={GENERAL} needs n_servers < 2**31")


def _check_law(task: dict, engine: str, law) -> None:
    """``ValueError`` in one line naming key and value unless ``engine`` models the task's law
    (not the exponential) for its policy (:meth:`DispatchPolicy.models_law`): the general engine
    every law; the meanfield engine every law for random, pod and ll with single-task jobs
    and no buffer; the population engines of pod the phase-type laws."""
    if engine == GENERAL:  # k-task jobs too; its runner refuses `responses`
        return
    pol = policy_of(task)
    scope = pol.models_law(engine)
    if scope is None:
        raise ValueError(f"service={law.name!r}: engine={engine!r} has exponential sizes only"
                         f"{f' for policy={pol.name!r}' if _law_engines(engine) else ''}; "
                         f"engine={GENERAL} draws each task's size from the law (docs/service.md)")
    if scope == PHASE_TYPE and law.phase_type() is None:
        raise ValueError(f"service={law.name!r}: engine={engine!r} models phase-type laws only "
                         "(exponential, erlang, hyperexponential); the meanfield engine has "
                         "pod under any law (docs/service.md)")
    k = task.get("k") if task.get("k") is not None else 1
    if k != 1:
        raise ValueError(f"k={k!r} with service={law.name!r}: engine={engine!r} has a limit of "
                         "single-task jobs only under this law (docs/service.md)")
    if task.get("b") is not None:
        raise ValueError(f"b={task['b']!r} with service={law.name!r}: engine={engine!r} has no "
                         "limit with a buffer under this law (docs/service.md)")
    if task.get("responses"):
        raise ValueError(f"responses: engine={engine!r} has no response-time law under "
                         f"service={law.name!r} (docs/service.md)")


def _law_engines(engine: str) -> bool:
    """Some policy of the model has ``engine`` model a law other than the exponential."""
    return any(p.models_law(engine) is not None for p in POLICIES.values())


def event_cost(task: dict) -> float:
    """Planning cost of one event, in plain agent events (about 20 ns each): the policies that
    sample k*d queues per job cost more per event as d (and, per task, k) grow in the agent
    engine. The occupancy engine draws a batch sample as level counts, a per-task sample by its
    minimum and a job's delay on a shared grid, so its cost per event hardly depends on k and d:
    ``plan=true`` measured 5-48 ns an event for every batch policy and rule of sub_halfin_whitt
    at N = 10^7 (per-task power-of-(kd) 18-23 ns), hence one unit there."""
    d, k = task.get("d") or 1, task.get("k") or 1
    if task.get("engine") == "occupancy":
        return 1.0
    if task.get("engine") == GENERAL:
        return _general_job_cost(task, k, d)
    if task.get("engine") == "population":
        return 2.0  # benchmarks/bench_population.py: 36-48 ns an event for pod at N = 10^6
    return policy_of(task).agent_event_cost(k, d)



def _general_job_cost(task: dict, k: int, d: int) -> float:
    """Planning cost of one job of the general-size engine, in plain agent events (20 ns): a
    single-task job about 70 ns (power-of-2, lam 0.9: docs/service.md, "Speed"); a k-task job
    about 100 ns a sampled server (k d per job for the batch policies, k^2 d for the per-task
    one) plus 50 ns a task, from ``plan=true``'s CPU time of batch-filling at N = 10^5 on the
    headline's path (80-120 us a job, k d = 931; a machine shared with other jobs). Only the
    ranking of tasks rests on it: the progress bar learns the real ratio (docs/architecture.md)."""
    pol = policy_of(task)
    if k == 1 and not pol.k_task:
        return 3.5
    return (100.0 * pol.probes(1, k, d) + 50.0 * k + 70.0) / 20.0


def memory_bytes(task: dict) -> float:
    """Peak bytes of the arrays one dispatch task allocates (docs/sweeps.md, memory), from the
    engines' allocations:

    - agent, single-task jobs (:mod:`~sim.dispatch.agent`): per server the service rates, queue
      lengths and ring heads (3 x 8 bytes), the kernel's working copies and two masks (about
      6), for JSQ the buckets (16), and a ring of ``C`` event stamps (int32, int64 beyond 2**31
      events) where ``C`` is the power of two above the longest queue; while a ring doubles the
      old one is alive too (1.5 C stamps);
    - agent, k-task jobs or a buffer (:mod:`~sim.dispatch.agent_jobs`): per server a record of
      ``W`` int32 (16, doubled while ``W - 4`` is below the longest queue; 1.5 W while it
      doubles), the queue lengths (8), the sampling marks or permutation (8), about 32 more of
      working arrays (measured, not itemized) and for JSQ the buckets (24); the job table, 16 bytes per slot (slots: the power of two above
      ``1.25 N lam / k (H_k + 1)``);
    - occupancy: ``cap`` >= levels + k (a power of two) levels in six int64 arrays, the
      harmonic numbers 1..k and their temporaries (4 x 8 k), the positions of a job's tasks
      (8 k) and the signature memo (5 MB when 1 < k < 2**16): O(levels + k), independent of N;
    - meanfield: batch-filling's exact program (:mod:`~sim.dispatch.meanfield.large_batch`):
      six (k + 1) x (k + 1) float tables; batch-sampling's chain
      (:mod:`~sim.dispatch.meanfield.large_sampling`): seven (k + 1) x T float tables, T = 16
      nodes per unit of time up to about L + 30 (refused by the engine beyond 2e7 cells, before
      allocating); a buffer b: about ten arrays of b floats; the rest O(levels);
    - meanfield under a law other than the exponential, and ll's workload fixed point: the
      cavity queue's and the LL(d) march's arrays, at their caps (200,000 levels, 400,000 grid
      points) a few float arrays each: :data:`_LAW_SOLVER_BYTES`;
    - population engines under a phase-type law (:mod:`~sim.dispatch.phase_population`): the
      state has ``L + 2 + (m - 1) S`` coordinates for ``m`` phases (``L <= 254``, stride ``S <=
      256``), the limits about ten dense matrices of that side;
    - refined, trajectory: O(levels^2) and O(grid x levels) tables;
    - heavy_traffic: the law of C_0 on its window (24 sd + 61 values, sd <= sqrt(k d (1 - lam)))
      in a few float arrays;
    - general (:mod:`~sim.dispatch.general`, :mod:`~sim.dispatch.general_jobs`): per server a
      ring of ``C`` float completion times (``C`` the power of two above the longest queue plus
      ``k``, from 16; 1.5 C while it doubles), the queue length, head and last completion and a
      sampling mark (4 x 8), for jsq and jiq the buckets and calendar links (5 x 8) and
      ``B`` bucket heads (8 B, ``B`` the power of two at or above ``4 lam N``). The longest
      queue of a law other than the exponential is that of random routing (geometric) times
      ``max(1, (1 + scv) / 2)``, the M/G/1 factor of its mean queue: a guard against running out
      of memory, not a bound.

    The longest queue is :func:`sim.core.memory.longest_queue` of the supermarket tail (power
    of d, random routing for random, d = 2 for JSQ) over the run's simulated time, capped by b.
    """
    engine, pol = task["engine"], policy_of(task)
    fixed = WINDOW_BYTES + (RESPONSE_BYTES if task.get("responses") else 0)
    if engine == "heavy_traffic":  # the law of C_0 on its window, a few arrays of its length
        mu = float(task["k"]) * float(task["d_real"]) * float(task["one_minus_lam"])
        return 8 * 8.0 * (24.0 * math.sqrt(mu) + 61.0) + fixed
    n, lam = float(task["n_servers"]), float(task["lam"])
    k, d, b = int(task.get("k") or 1), int(task.get("d") or 1), task.get("b")
    events = float(task.get("events") or 10**6)
    if engine == GENERAL:
        return _general_bytes(task, n, lam, k, d, events) + fixed
    run_time = events / (n * (1.0 + lam / k))
    dd = pol.queue_bound_d(d)
    if engine == "agent":
        if pol.single_task_agent(k, b):
            stamp = 4 if events <= 2**31 else 8
            per = 30 + (16 if pol.probes_all else 0) + stamp * ring_slots(n, lam, dd, b, run_time)
            return n * per + fixed
        width = ring_slots(n, lam, dd, b, run_time, start=16, reserve=3)
        slots = 1024
        while slots < 1.25 * n * lam / k * (math.log(k) + 1.6):
            slots *= 2
        per = 48 + (24 if pol.probes_all else 0) + 4 * width
        return n * per + 16.0 * slots + 8.0 * k + fixed
    if engine == "occupancy":
        levels = longest_queue(n, lam, dd, b, run_time)
        cap = ring_capacity(levels + k + 2, start=16)
        memo = 5 * 2**20 if 1 < k < 2**16 else 0
        return 6 * 8.0 * cap + 5 * 8.0 * k + memo + fixed
    if engine == "meanfield":
        if not is_exponential(task) or pol.by_work:
            return _LAW_SOLVER_BYTES + fixed
        if pol.fills:
            return 6 * 8.0 * (k + 1) ** 2 + fixed
        if pol.batch and k > 1:
            levels = longest_queue(1e6, lam, d)
            cells = (k + 1) * 16.0 * (levels + 30 + math.log(k))
            return 7 * 8.0 * (cells if cells <= 2e7 else 0) + fixed
        if b is not None:
            return 10 * 8.0 * int(b) + fixed
        return fixed
    if engine in ("trajectory", "population_trajectory"):
        return 4 * 8.0 * int(task.get("grid") or 200) * 64 + 8.0 * (k * d + k) + fixed
    if engine in ("population", "population_meanfield", "population_refined"):
        # the truncation L of sim.dispatch.population.pod_levels (the limits': s_L >= 1e-300,
        # 1e-30 for d = 1);
        # the simulation keeps an area per level and window (up to 2000 windows), the limits
        # dense L x L matrices (the ODE's Jacobian, A, W, Q: about ten)
        if not is_exponential(task):  # phase-type: (L + 2) + (m - 1) S coordinates, L <= 254
            from sim.dispatch.phase_population import L_LIMIT_MAX

            phases = len(law_of(task).phase_type()[0])
            dim = L_LIMIT_MAX + 2 + (phases - 1) * 256.0
            if engine == "population":
                return 2000 * 8.0 * (L_LIMIT_MAX + 2) + 8 * 8.0 * dim + fixed
            return 10 * 8.0 * dim**2 + fixed
        if b is not None:
            levels = int(b)
        elif engine == "population":
            levels = longest_queue(n * 1e6, lam, d, None, run_time) + 2
        else:
            levels = longest_queue(1e300 if d > 1 else 1e30, lam, d) + 2
        if engine == "population":
            return 2000 * 8.0 * (levels + 2) + 8 * 8.0 * (levels + 2) + fixed
        return 10 * 8.0 * (levels + 2) ** 2 + fixed
    return fixed  # refined: k*d <= 8, levels^2 tables


#: bytes of the limits under a general law (:func:`memory_bytes`): eight float arrays of the
#: solvers' largest length (the LL(d) march's 400,000 points; the cavity queue's 200,000 levels)
_LAW_SOLVER_BYTES = 8 * 8.0 * 400_000


def _general_bytes(task: dict, n: float, lam: float, k: int, d: int, events: float) -> float:
    """The general-size engine's arrays (:func:`memory_bytes`)."""
    pol = policy_of(task)
    run_time = events * k / (n * lam)
    if is_exponential(task):
        levels = longest_queue(n, lam, pol.queue_bound_d(d), None, run_time)
    else:
        scv = law_of(task).scv
        levels = longest_queue(n, lam, 1, None, run_time) * max(1.0, (1.0 + scv) / 2.0)
    first = 16
    while first < 2 * (k + 1):
        first *= 2
    slots = ring_capacity(int(levels) + k, start=first)
    slots = 1.5 * slots if slots > first else float(slots)
    per = 8.0 * slots + 32.0
    calendar = 0.0
    if pol.probes_all or (not pol.samples and pol.single_task):  # jsq, jiq: buckets, calendar
        per += 40.0
        calendar = 8.0 * ring_capacity(int(4.0 * lam * n), start=16)
    return n * per + calendar + 8.0 * k * d


def response_law(policy: str, params: dict):
    """The N = infinity response-time law of a point (:mod:`sim.core.responses` mixture), or
    None where the model has none: a finite buffer, a load outside (0, 1), a missing d, a
    service law other than the exponential, a policy without a mean field (jiq) or whose mean
    field is of workloads (ll: its waiting-time law is not built as a mixture)."""
    k = 1 if params.get("k") is None else int(params["k"])
    lam, d = params.get("lam"), params.get("d")
    if params.get("b") is not None or lam is None or not 0.0 < float(lam) < 1.0:
        return None
    lam, pol = float(lam), POLICIES[policy]
    if not is_exponential(params) or "meanfield" not in pol.engines or pol.by_work:
        return None  # the laws below are of exponential sizes, for the policies that compare queues
    if not pol.samples and k == 1:
        from sim.dispatch.meanfield.pod import response_law as pod_law
        return pod_law(pol, lam)
    if d is None or not pol.samples:
        return None
    d = int(d)
    if k == 1:  # a sampling policy with single-task jobs is power-of-d
        from sim.dispatch.meanfield.pod import response_law as pod_law
        return pod_law(pol, lam, d)
    if pol.fills:
        from sim.dispatch.meanfield.batch_filling import response_law as batch_law
        return batch_law(lam, k, d)
    from sim.dispatch.meanfield.tasks import response_law as task_law
    return task_law(pol, lam, k, d)


#: engine -> the function that runs its tasks (``sim.dispatch.<module>:<function>``), in the
#: order of the model's entries. Named, not imported: a runner's module loads its compiled
#: kernels, and only the engines a worker runs should load theirs (docs/architecture.md)
_RUNNERS = {
    "agent": "sim.dispatch.agent:run_task",
    "meanfield": "sim.dispatch.meanfield:run_task",  # picks the law of the task
    # the refined mean field, x* + V/N (Gast & Van Houdt; docs/refined.md)
    "refined": "sim.dispatch.refined:run_task",
    "occupancy": "sim.dispatch.occupancy:run_task",
    # power-of-d declared by its transitions (sim.dispatch.population): the generic population
    # engine and the mean field of the same declaration
    "population": "sim.dispatch.population:run_task",
    "population_meanfield": "sim.dispatch.population:run_meanfield",
    "population_refined": "sim.dispatch.population:run_refined",
    "population_trajectory": "sim.dispatch.population:run_path",
    # paths s_i(t) on a time grid beside the mean-field ODE from the same start (real
    # exponential clock, runs to the horizon `time`; docs/transients.md)
    "trajectory": "sim.dispatch.trajectory:run_task",
    # the batch policies' mean field as 1 - lam -> 0 with k d (1 - lam) given, to
    # N = 10^300 (docs/analysis.md, "Batch-filling in heavy traffic"): N, the load and d as
    # floats, never n_servers and lam (1 - lam rounds to 0 past N ~ 10^53)
    "heavy_traffic": "sim.dispatch.meanfield.heavy_traffic:run_task",
    # task sizes drawn at arrival from the task's service law (docs/service.md): single-task
    # jobs on sim.dispatch.general, k-task jobs on sim.dispatch.general_jobs
    GENERAL: "sim.dispatch.general_run:run_task",
}
#: the examples of the contract check (sim.testing): N = 500 at lam = 0.7, 400,000 events (about
#: 470 time units); JSQ at N = 100, lam = 0.9, where it queues at all (at lam = 0.7 and N = 500
#: no job ever waits and the SE is 0). JSQ's finite-N gap to its mean field (E[T] = 1) there
#: was measured over 10 seeds: 0.0656 +- 0.0015 (agent), 0.0674 +- 0.0015 (occupancy), so 0.07
_EXAMPLE_POINT = {"n_servers": 500, "lam": 0.7}
_EXAMPLE_EVENTS = 400_000
_JSQ_POINT = {"n_servers": 100, "lam": 0.9}
_JSQ_GAP = {"meanfield": 0.07}
_PATH_EXAMPLE = {"n_servers": 100, "lam": 0.7, "d": 2, "time": 5.0, "events": 100_000}
#: the heavy-traffic engine's example: the sub_halfin_whitt path at N = 10^20, c = 1 (k = ceil(ln^2 N))
_HEAVY_TRAFFIC_EXAMPLE = {"log10_n": 20.0, "one_minus_lam": 1e-06, "k": 2121, "d_real": 130555.0}
#: the general engine's example law where the meanfield engine models it (random: M/G/1, pod:
#: the cavity queue and the phase-type population's limits, ll: the workload fixed point) or
#: the policy has no limit entry (jiq, ll_filling): a hyperexponential of SCV 4; the others
#: take exponential sizes, so that the contract compares them with their exponential mean field
_GENERAL_LAW = {"service": "hyperexponential", "service_scv": 4.0}
#: the general engine's example law of random against M/G/1: the deterministic (M/D/1), which
#: relaxes within the example's run (400 jobs a server from empty, about 570 time units).
#: Measured over 10 seeds: the hyperexponential of SCV 4 read -0.15 +- 0.08 from
#: Pollaczek-Khinchine (one run 6.8 SE off), the deterministic -0.003 +- 0.004 (at most 2.1 SE)
_MG1_LAW = {"service": "deterministic"}
#: jobs (the general engine's events) of its examples: about the agent examples' time
_GENERAL_JOBS = 200_000


def _entry(engine: str, pol) -> Entry:
    """The entry of one policy record on one engine that serves it: its parameters from the
    record (``d`` where it samples, ``k`` where it places k-task jobs, the optional ones it
    lists for the engine) and its contract example."""
    if engine == "heavy_traffic":  # N, the load and d in the coordinates of the whole path
        return Entry(engine, pol.name, _RUNNERS[engine], ("log10_n", "one_minus_lam", "k", "d_real"),
                     pol.engines[engine], shared=(), example=_HEAVY_TRAFFIC_EXAMPLE)
    required = ("d",) * pol.samples + ("k",) * pol.k_task
    point = {**(_JSQ_POINT if pol.probes_all else _EXAMPLE_POINT), **({"d": 2} if pol.samples else {}),
             **({"k": 2} if pol.k_task else {})}
    allowance = {}
    if engine in ("trajectory", "population_trajectory"):
        example = {**_PATH_EXAMPLE, **({"k": 2} if pol.k_task else {})}
    elif engine in ("agent", "occupancy", "population"):
        example = {**point, "events": _EXAMPLE_EVENTS}
        allowance = _JSQ_GAP if pol.probes_all and engine != "population" else {}
    elif engine == GENERAL:
        # a law other than the exponential where the meanfield engine has its limit (random,
        # pod, ll) or where the policy has no limit here (jiq, ll_filling); exponential sizes
        # where its limit is of exponential sizes (jsq, the k-task policies)
        law = _GENERAL_LAW if pol.models_law("meanfield") or "meanfield" not in pol.engines else {}
        if pol.models_law("meanfield") and not pol.samples:  # random: M/G/1, exact at every N
            law = _MG1_LAW
        example = {**point, **law, "events": _GENERAL_JOBS}
        allowance = _JSQ_GAP if pol.probes_all else {}
    else:
        example = point
    return Entry(engine, pol.name, _RUNNERS[engine], required, pol.engines[engine], example=example,
                 example_allowance=allowance)


def heavy_traffic_coordinates(exact: dict, log10_n: float) -> dict:
    """The ``heavy_traffic`` engine's coordinates of a point of the sweep's path from its values
    in high precision: ``log10_n``, ``one_minus_lam`` (1 - lam in that precision: the float lam
    is 1.0 past N ~ 10^53) and ``d_real`` (d as a float: it passes the Int64 column, reaching
    10^89 at N = 10^300)."""
    lam, d = exact.get("lam"), exact.get("d")
    return {"log10_n": float(log10_n), "one_minus_lam": float(1 - lam) if lam is not None else None,
            "d_real": float(d) if d is not None else None}


MODEL = Model(
    name="dispatch",
    title="N FIFO servers, Poisson jobs of k tasks, one dispatching policy",
    entries=tuple(_entry(engine, pol) for engine in _RUNNERS for pol in POLICIES.values()
                  if engine in pol.engines),
    params={
        "d": PROBES,
        "k": Param("int", "tasks per job (default 1)", label="k (tasks per job)", symbol="k",
                   domain=(1, INT_LIMIT)),
        "b": Param("int", "buffer per server, the task in service included (absent: unbounded)",
                   label="buffer b (tasks per server)", symbol="b", domain=(1, INT_LIMIT)),
        "service_rates": Param("floats", "per-server service rates (length N; absent: all 1)",
                               domain=(0.0, math.inf), inclusive=(False, True)),
        "replacement": Param("bool", "refined mean field and population engine: the d probes "
                             "drawn with replacement (default false, as the simulators)"),
        "init_tail": INIT_TAIL,
        "log10_n": Param("float", "heavy_traffic: log10 N (N itself may pass the Int64 column, "
                         "to 10^300)", domain=(0.0, LOG10_N_MAX), inclusive=(False, True)),
        "one_minus_lam": Param("float", "heavy_traffic: 1 - lam, computed from the sweep's lam "
                               "formula in high precision (lam itself rounds to 1 past N ~ 10^53)",
                               domain=(0.0, 1.0), inclusive=(False, False)),
        "d_real": Param("float", "heavy_traffic: the sweep's d as a float (the Int64 d column "
                        "ends at INT_LIMIT; d reaches 10^89 at N = 10^300)", domain=(1.0, math.inf)),
        # the law of task sizes and its parameters (sim.core.service_keys; docs/service.md)
        **SERVICE_PARAMS,
    },
    results={
        "mean_queue_1n": "float",  # refined engine: E[Q] = x* + mean_queue_1n / N + O(1/N^2)
    },
    main_estimate="mean_response",
    events_per_time=events_per_time,
    check_task=check_task,
    responses=("agent", "occupancy", "meanfield"),
    event_cost=event_cost,
    memory_bytes=memory_bytes,
    response_law=response_law,
    theory={  # the heavy-traffic form of the mean field along the headline's path
        "limit_ratio": "sim.dispatch.meanfield.heavy_traffic:limit_ratio",
        "leading_rate": "sim.dispatch.meanfield.heavy_traffic:leading_rate",
        # per-task power-of-(kd) past the exact path (closed form in logs) and the derived forms
        # that carry the limit claims of pod_per_task and of the batch policies with constant d
        "per_task_ratio": "sim.dispatch.meanfield.per_task_path:queueing_ratio",
        "per_task_form": "sim.dispatch.meanfield.per_task_path:asymptotic_form",
        "batch_queue_bound": "sim.dispatch.meanfield.per_task_path:batch_little_bound",
    },
    engine_decls=(
        AGENT, OCCUPANCY, TRAJECTORY, MEANFIELD, REFINED,
        POPULATION, POPULATION_MEANFIELD, POPULATION_REFINED, POPULATION_TRAJECTORY,
        Engine("heavy_traffic", "limit", "heavy-traffic mean field (1 - lam \u2192 0)"),
        Engine(GENERAL, "stochastic", "general-size simulation", per_server=True),
    ),
    policy_decls=tuple(POLICIES.values()),
    # past the float range along the sweep's path (limit_path.heavy_traffic, docs/sweeps.md):
    # N, the load and d in the heavy-traffic engine's coordinates, to the N = 10^300 its
    # check_task takes (log10_n <= 300)
    precise_path=PrecisePath("heavy_traffic", 1e300, stands_for=("n_servers", "lam", "d"),
                             columns=("log10_n", "one_minus_lam", "d_real"),
                             coordinates=heavy_traffic_coordinates),
)
