"""The LED model (Zhou, Shroff & Wierman, "Asymptotically optimal load balancing in large-scale
heterogeneous systems with multiple dispatchers"): M dispatchers with local, stale estimates of
the queues of N heterogeneous FIFO servers, in discrete time.

Model
-----
N servers with FIFO queues, service means ``mu_n`` per slot (``service_rates``; all 1 by
default); M dispatchers (``m_dispatchers``). The load ``lam`` is ``rho = lam_Sigma / mu_Sigma``
(``mu_Sigma = sum_n mu_n``), so ``lam_Sigma = rho * mu_Sigma`` tasks arrive per slot in all,
split over the dispatchers equally or in proportion to ``dispatch_weights``:
``lam_m = lam_Sigma * w_m / sum(w)``. ``eps = mu_Sigma - lam_Sigma``. In each slot ``t``:

1. arrivals: dispatcher ``m`` receives ``A_m(t)`` tasks, i.i.d. over slots, independent across
   dispatchers (``arrival_dist``: ``poisson``, ``bernoulli`` or ``binomial`` with ``arrival_n``
   trials);
2. dispatching: each dispatcher with ``A_m(t) > 0`` picks one server, from its own information
   only, and sends it all of its ``A_m(t)`` tasks;
3. service: server ``n`` offers ``S_n(t)`` units, i.i.d. over slots, independent of everything
   else (``service_dist``: ``bernoulli``, ``binomial`` with ``service_n`` trials, ``poisson`` or
   ``geometric`` on {0, 1, ...}), ``Q_n(t+1) = max(Q_n(t) + A_n(t) - S_n(t), 0)`` and the
   unused service is ``U_n(t) = max(S_n(t) - Q_n(t) - A_n(t), 0)``;
4. updates of the dispatchers' estimates, at the end of the slot (below).

``Q(t)`` is read at the start of slot ``t``, before its arrivals; a task's response is its
completion slot minus its arrival slot plus 1, so ``E[T] = 1 + E[sum_n Q_n] / lam_Sigma``
(Little: a task served in its arrival slot is never counted in Q).

Policies
--------
LED policies (``l_jsq``, ``l_jba``, ``l_pod``): dispatcher ``m`` keeps an estimate
``Qt[m, n]`` of every queue (all 0 at the start, when every queue is empty) and decides on it
alone:

- ``l_jsq``: the smallest estimate, ties uniform (each dispatcher draws its own);
- ``l_jba``: a server among those whose estimate is at most the dispatcher's average estimate,
  drawn with probability proportional to ``mu_n``;
- ``l_pod``: ``d`` distinct servers drawn uniformly, the smallest estimate among them, ties
  uniform.

Updates (``update``): ``push``: at the end of a slot in which dispatcher ``m`` had arrivals, with
probability ``p_hat`` it samples ``d_u`` distinct servers and sets their estimates to the true
queue lengths ``Q(t+1)``. ``pull``: at the end of each slot, every server that completed tasks
in it picks a dispatcher uniformly; if it is now empty it sends ``(n, 0)``, else with probability
``p_hat`` it sends ``(n, Q_n(t+1))``. ``count_own`` (default false, as in the paper): a
dispatcher adds the tasks it sends to its own estimate of the chosen server (LSQ-style).

Baselines, each dispatcher deciding once per slot with arrivals: ``jsq`` (the shortest true
queue, ties uniform; every dispatcher sees ``Q(t)``, the lengths at the start of the slot, not
the other dispatchers' tasks of the same slot: the paper's herd effect), ``pod`` (``d`` distinct
servers, the shortest true queue of ``Q(t)``). Their tie rule ``ties``: ``independent``
(default) each dispatcher draws its own tie-break, so JSQ's dispatchers spread over the tied
shortest queues; ``shared`` one draw per slot serves every dispatcher, so JSQ sends all of the
slot's arrivals to a single shortest queue (the paper's JSQ, Sec. 4.2) and Power-of-d's
dispatchers order tied servers the same way. ``jiq`` (a server that completed tasks in a slot
and is then empty reports once to a uniformly chosen dispatcher, unless it is listed already; a
dispatcher with listed servers sends to one drawn uniformly and drops it from its list, else to a
uniform server; a listed server that got work from elsewhere stays listed, as in the original
JIQ; at the start every server is listed at a uniformly chosen dispatcher), ``random`` and
``weighted_random`` (probability ``mu_n / mu_Sigma``).

Messages (one-way, the project's unit): ``jsq`` 2N per decision, ``pod`` 2d per decision, Push
``2 d_u`` per update, Pull 1 per report, ``jiq`` 1 per report; LED dispatching, ``random`` and
``weighted_random`` decide locally (0). ``messages_per_job`` = messages per arriving task.

Message budget (LED policies): ``msg_budget`` (one-way messages per arriving task) or
``msg_budget_pod_d`` (Power-of-d's budget with that d) instead of ``p_hat``: Push gets its
``p_hat`` from an exact formula; Pull's is calibrated by short pilot runs from the task's seed
(:func:`sim.led.slotted.calibrate_pull`), clipped to [0, 1]; the row reports the ``p_hat_used``,
the target ``msg_budget_per_job`` and the ``messages_per_job`` actually spent.

Engine
------
``slotted`` (:mod:`sim.led.slotted`, kernels in :mod:`sim.led._slotted_kernel`): one entry per
server and per (dispatcher, server) estimate; ``events`` counts slots.

:func:`check_task` validates the model's values of a task (light: numpy only, no numba).
"""
from __future__ import annotations

from sim.core.declare import Engine, Entry, Model
from sim.core.memory import WINDOW_BYTES
from sim.led.model import DEFAULTS, LED_POLICIES, PARAMS, POLICIES, UPDATES, model_spec
from sim.led.policies import POLICIES as POLICY_RECORDS

__all__ = ["MODEL", "check_task", "events_per_time", "event_cost", "POLICIES", "LED_POLICIES",
           "UPDATES", "DEFAULTS"]

#: planning cost of one slot, in agent events per server: a slot serves every server
#: (measured here: about 30-110 ns per server per slot, against 8-20 ns per agent event)
SLOT_EVENTS_PER_SERVER = 5.0


def events_per_time(task: dict) -> float:
    """The slotted engine's events are slots: one per unit of (discrete) time."""
    return 1.0

#: task keys of the model (beyond engine, policy, n_servers, lam and the run settings)
MODEL_KEYS = ("m_dispatchers", "update", "p_hat", "d_u", "d", "count_own", "arrival_dist",
              "arrival_n", "service_dist", "service_n", "service_rates", "dispatch_weights",
              "msg_budget", "msg_budget_pod_d", "ties")


def event_cost(task: dict) -> float:
    """Planning cost of one slot in plain agent events (:data:`SLOT_EVENTS_PER_SERVER` per
    server)."""
    return task["n_servers"] * SLOT_EVENTS_PER_SERVER


def memory_bytes(task: dict) -> float:
    """Peak bytes of the arrays one slotted task allocates (docs/sweeps.md, memory), from
    :mod:`sim.led._slotted_kernel`'s set-up: per server about twelve int64 arrays (queue
    lengths, arrivals, departures, the shortest-queue list, the sampling permutation, the
    queue heads and tails, rates and alias tables: 96 bytes), the given ``service_rates`` list
    as Python floats (32), each dispatcher's int32 estimates of every queue for the LED
    policies and its I-queue row for jiq (4 M bytes), the minimum tree of l_jsq (16), and 16
    for the pool of queued batches (it starts at 1024 entries and grows with the batches
    waiting: a run whose queues grow long needs more than this estimate says)."""
    n = float(task["n_servers"])
    pol = POLICY_RECORDS[task["policy"]]
    m = int(task.get("m_dispatchers") or DEFAULTS.get("m_dispatchers") or 1)
    per = 96 + (32 if task.get("service_rates") is not None else 0)
    if pol.dispatcher_row:
        per += 4 * m
    if pol.min_tree:
        per += 16
    return n * (per + 16) + WINDOW_BYTES


def check_task(task: dict) -> None:
    """``ValueError`` with one clear message naming the key and its value if the task's model
    values cannot run: an unknown policy, ``p_hat`` outside [0, 1], ``d`` or ``d_u`` above
    ``n_servers`` (or below 1), a ``queue_cap`` below 1, ``lam`` (the load rho) outside [0, 1),
    an unknown distribution name, a distribution that cannot carry its mean (Bernoulli
    arrivals with ``lam_m > 1``, Bernoulli service with ``mu_n > 1``, a binomial mean above
    its trials), negative means, a ``service_rates`` list whose length is not ``n_servers``, ``m_dispatchers < 1``,
    ``dispatch_weights`` not positive or of a length other than ``m_dispatchers``; a message
    budget that is negative, out of range, doubly given or given with ``p_hat``; a ``ties`` of
    ``jsq`` or ``pod`` other than ``independent`` or ``shared``.

    Parameters a policy does not use are not checked (they are null in its row)."""
    if task.get("queue_cap") is not None:
        PARAMS["queue_cap"].check("queue_cap", task["queue_cap"])
    model_spec(task.get("n_servers"), task.get("lam"), task.get("policy"),
               task.get("m_dispatchers"), **{k: task.get(k) for k in MODEL_KEYS
                                             if k != "m_dispatchers"})


_L = "sim.led.slotted:run_task"
#: what every slotted task may carry (defaults in sim.led.model.DEFAULTS)
_LAWS = ("m_dispatchers", "arrival_dist", "arrival_n", "service_dist", "service_n",
         "service_rates", "dispatch_weights")
_UPDATES = ("update", "p_hat", "d_u", "count_own", "msg_budget", "msg_budget_pod_d")
_RUN = ("queue_cap",)
#: the contract check's example (sim.testing): 20 servers at load 0.8, 20,000 slots
_EXAMPLE = {"n_servers": 20, "lam": 0.8, "events": 20_000}
#: the optional parameters of a policy's entry: the laws and the run's cap, the updates of an
#: LED policy, the tie rule of a policy on true lengths
def _optional(pol) -> tuple[str, ...]:
    return _UPDATES * pol.local + ("ties",) * pol.ties + _LAWS + _RUN


def _example(pol) -> dict:
    """A policy's contract example: ``d = 2`` where it samples, unequal rates for the blind
    draw by rate (with equal rates it is random routing)."""
    return {**_EXAMPLE, **({"d": 2} if pol.samples else {}),
            **({"service_rates": [0.5, 1.5] * 10} if pol.blind_by_rate else {})}


MODEL = Model(
    name="led",
    title="multiple dispatchers with local estimates (Zhou, Shroff & Wierman), discrete time",
    # lam is the load rho = lam_Sigma / mu_Sigma
    entries=tuple(Entry("slotted", pol.name, _L, ("d",) * pol.samples, _optional(pol), example=_example(pol))
                  for pol in POLICY_RECORDS.values()),
    params=PARAMS,
    results={
        # sums over the servers, at slot starts
        "mean_total_queue": "float", "mean_total_queue_se": "float",
        "unused_service": "float", "unused_service_se": "float",
        "imbalance": "float", "imbalance_se": "float",
        "eps": "float", "zeta": "float", "ht_ratio": "float", "ht_ratio_se": "float",
        "mean_u2": "float", "mean_u2_se": "float", "mean_qu": "float", "mean_qu_se": "float",
        "messages_per_job_se": "float", "p_hat_used": "float", "msg_budget_per_job": "float",
        "calib_slots": "int",
        "unstable_by": "str", "drift_p": "float", "drift_rise": "float",
        "relaxation_slots": "float",
    },
    main_estimate="mean_total_queue",
    events_per_time=events_per_time,
    check_task=check_task,
    event_cost=event_cost,
    memory_bytes=memory_bytes,
    engine_decls=(
        Engine("slotted", "stochastic", "slotted simulation", per_server=True),
    ),
    policy_decls=tuple(POLICY_RECORDS.values()),
)
