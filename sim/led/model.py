"""The LED model's parameters: names, defaults, value checks and the derived constants.

Light (numpy only, scipy inside table building): :func:`sim.led.check_task` and
:func:`sim.led.slotted.simulate` both validate through :func:`model_spec`, so a bad input gets
the same message before any compute, from the plan or from a direct call.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.core.declare import INT_LIMIT, Param
from sim.engines import LOAD_BELOW_ONE, PROBES
from sim.led.distributions import TRIALS, Law, make_law
from sim.led.policies import POLICIES as POLICY_RECORDS

__all__ = ["LED_POLICIES", "BASELINES", "POLICIES", "UPDATES", "TIES", "TIE_POLICIES",
           "DEFAULTS", "PARAMS", "ModelSpec",
           "model_spec", "push_p_hat_for_budget", "pod_budget_per_job"]

#: LED policies: each dispatcher decides on its own estimates only (sim.led.policies)
LED_POLICIES: tuple[str, ...] = tuple(p.name for p in POLICY_RECORDS.values() if p.local)
#: baselines served by the slotted engine (decisions on true lengths, or blind)
BASELINES: tuple[str, ...] = tuple(p.name for p in POLICY_RECORDS.values() if not p.local)
POLICIES: tuple[str, ...] = LED_POLICIES + BASELINES
#: update strategies of the LED policies
UPDATES: tuple[str, ...] = ("push", "pull")
#: tie rules of the policies on true lengths: ``independent``, each dispatcher breaks ties by a
#: draw of its own (ties spread over the tied servers); ``shared``, one draw per slot is shared
#: by every dispatcher, so those that compare the same tied servers pick the same one (JSQ: all
#: join the single shortest queue, the paper's Sec. 4.2)
TIES: tuple[str, ...] = ("independent", "shared")
#: the policies the tie rule applies to
TIE_POLICIES: tuple[str, ...] = tuple(p.name for p in POLICY_RECORDS.values() if p.ties)

#: defaults of the optional parameters (None in a task means the default)
DEFAULTS: dict = {
    "update": "pull", "p_hat": 1.0, "d_u": 1, "d": 2, "count_own": False,
    "arrival_dist": "poisson", "arrival_n": None, "service_dist": "poisson", "service_n": None,
    "dispatch_weights": None, "m_dispatchers": 1, "msg_budget": None, "msg_budget_pod_d": None,
    "ties": "independent",
}


#: the model's parameters with their domains (its declaration's ``params``; :func:`model_spec`
#: checks a value against them): the size and the load restated with the slotted engine's
#: int32 server index and a steady state (rho < 1)
PARAMS: dict[str, Param] = {
    "n_servers": Param("int", "N, the number of servers (the slotted engine indexes them in int32)",
                       domain=(1, 2**31), inclusive=(True, False)),
    "lam": LOAD_BELOW_ONE,
    "d": PROBES,
    "service_rates": Param("floats", "per-server service rates (length N; absent: all 1)",
                           domain=(0.0, math.inf), inclusive=(False, True)),
    "m_dispatchers": Param("int", "dispatchers M, each with its own estimates (default 1)",
                           label="number of dispatchers M", symbol="M", domain=(1, 2**31),
                           inclusive=(True, False)),
    "update": Param("choice", "how LED estimates are refreshed", UPDATES, symbol="updates"),
    "p_hat": Param("float", "LED update probability in [0, 1]",
                   label="update probability p\u0302 (per dispatcher and slot)", symbol="p\u0302",
                   domain=(0.0, 1.0)),
    "d_u": Param("int", "Push: servers sampled per update", label="servers per Push update d_u",
                 domain=(1, INT_LIMIT)),
    "count_own": Param("bool", "a dispatcher adds its own dispatches to its estimates "
                       "(default false)"),
    "arrival_dist": Param("choice", "law of arrivals per dispatcher per slot",
                          ("poisson", "bernoulli", "binomial"), symbol="arrivals"),
    "arrival_n": TRIALS["arrival"],
    "service_dist": Param("choice", "law of service offered per server per slot",
                          ("bernoulli", "binomial", "poisson", "geometric"), symbol="service"),
    "service_n": TRIALS["service"],
    "dispatch_weights": Param("floats", "split of the arrivals over the dispatchers "
                              "(default equal)", domain=(0.0, math.inf), inclusive=(False, True)),
    "msg_budget": Param("float", "LED: one-way messages per arriving task that set p_hat "
                        "(Push exact, Pull calibrated by pilot runs); not with p_hat",
                        domain=(0.0, math.inf)),
    "msg_budget_pod_d": Param("int", "LED: the message budget of Power-of-d with this d "
                              "(instead of msg_budget); not with p_hat",
                              symbol="message budget of power-of-d with d", domain=(1, INT_LIMIT)),
    "queue_cap": Param("int", "stop a run (status unstable, unstable_by cap) when sum Q exceeds "
                       "this (default 100 N (1 + zeta/eps), a hundred times mu-weighted random "
                       "routing's level; a stable policy far worse than random, e.g. L-JSQ-Push "
                       "with a small p_hat, can exceed it)", domain=(1, INT_LIMIT)),
    "ties": Param("choice", "jsq, pod: tie rule among the shortest true queues, each "
                  "dispatcher's own draw (independent, default) or one draw per slot shared "
                  "by all (shared: JSQ's single shortest queue)", TIES),
}


def _check(**values) -> None:
    """Each value that is not None against its declaration (:data:`PARAMS`)."""
    for name, value in values.items():
        if value is not None:
            PARAMS[name].check(name, value)


class ModelSpec(NamedTuple):
    """A validated LED model: the policy, the laws and the derived constants."""

    n_servers: int
    m_dispatchers: int
    rho: float  #: load lam_Sigma / mu_Sigma
    policy: str
    update: str | None  #: None for the baselines
    p_hat: float
    d_u: int
    d: int
    count_own: bool
    mu: np.ndarray  #: service means per slot, one per server
    lam_m: np.ndarray  #: arrival means per slot, one per dispatcher
    arrival_laws: tuple  #: one :class:`Law` per dispatcher
    service_laws: tuple  #: one :class:`Law` per server
    lam_sigma: float
    mu_sigma: float
    eps: float  #: mu_Sigma - lam_Sigma
    sigma2: float  #: variance of the total arrivals per slot
    nu2: float  #: sum of the service variances
    zeta: float  #: (sigma2 + nu2) / 2
    #: LED policies with a message budget (``msg_budget`` or ``msg_budget_pod_d``): the target in
    #: one-way messages per arriving task; None: ``p_hat`` as given (or its default)
    budget: float | None = None
    budget_pod_d: int | None = None  #: the d of ``msg_budget_pod_d`` (None otherwise)
    #: tie rule of ``jsq`` and ``pod`` (:data:`TIES`); the other policies ignore it
    ties: str = "independent"


def _as_int(x):
    """Integer-valued floats (YAML formulas) and numpy integers become ints; anything else is
    returned as is (then :func:`~sim.core.results.is_int` is the check)."""
    if isinstance(x, (float, np.floating)) and math.isfinite(float(x)) and float(x).is_integer():
        return int(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _positive_list(name: str, values, length: int, length_what: str) -> np.ndarray:
    """Ones where ``values`` is None, else its entries (checked against the declaration: every
    one > 0) as floats; ``ValueError`` unless it has ``length`` entries."""
    if values is None:
        return np.ones(length)
    PARAMS[name].check(name, values)
    if len(values) != length:
        raise ValueError(f"{name} has {len(values)} entries; it needs one per {length_what} "
                         f"({length})")
    return np.array([float(v) for v in values], dtype=np.float64)


def _laws(dist: str, means, n, role: str, what) -> list[Law]:
    """One validated law of ``dist`` per mean (laws of equal means shared); ``what(i)`` names the
    i-th mean in an error."""
    made: dict[float, Law] = {}
    laws = []
    for i, v in enumerate(means):
        if v not in made:
            made[v] = make_law(dist, v, n, role=role, what=what(i))
        laws.append(made[v])
    return laws


def model_spec(n_servers, lam, policy, m_dispatchers=1, *, update=None, p_hat=None, d_u=None,
               d=None, count_own=None, arrival_dist=None, arrival_n=None, service_dist=None,
               service_n=None, service_rates=None, dispatch_weights=None, msg_budget=None,
               msg_budget_pod_d=None, ties=None) -> ModelSpec:
    """Validate the model's values and derive its constants; ``ValueError`` naming the key and
    the value on the first bad one. ``None`` means the default (:data:`DEFAULTS`).

    ``ties`` (``jsq`` and ``pod`` only, :data:`TIES`; ignored by the other policies): the tie
    rule, ``independent`` (default) or ``shared``.

    Message budget (LED policies only; ignored, like ``p_hat``, by the baselines):
    ``msg_budget`` (one-way messages per arriving task, >= 0) or ``msg_budget_pod_d`` (an integer
    d in [1, N]: the budget of Power-of-d, ``2 d sum_m P(A_m > 0) / lam_Sigma`` per task,
    computed from the arrival laws); at most one of them, and not with an explicit ``p_hat``
    (which the budget determines). The spec then carries ``budget`` (per task) and ``p_hat``
    as follows: Push, exact (:func:`push_p_hat_for_budget`; with ``msg_budget_pod_d`` it is
    ``min(1, d / d_u)`` exactly); Pull, 1.0, where the calibration starts: the slotted engine
    always replaces it by the value of its pilot runs (:func:`sim.led.slotted.calibrate_pull`)."""
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is unknown to the slotted engine; valid: "
                         f"{', '.join(POLICIES)}")
    PARAMS["n_servers"].check("n_servers", n_servers)
    n = _as_int(n_servers)
    m = _as_int(PARAMS["m_dispatchers"].check("m_dispatchers", 1 if m_dispatchers is None else m_dispatchers))
    rho = float(PARAMS["lam"].check("lam", lam))  # the load rho = lam_Sigma / mu_Sigma

    led = policy in LED_POLICIES
    upd = None
    ph = float(DEFAULTS["p_hat"])
    du = int(DEFAULTS["d_u"])
    own = False
    if led:
        upd = DEFAULTS["update"] if update is None else update
        if upd not in UPDATES:
            raise ValueError(f"update={update!r} is unknown; valid: {', '.join(UPDATES)}")
        if p_hat is not None:
            ph = float(PARAMS["p_hat"].check("p_hat", p_hat))
        if upd == "push" and d_u is not None:
            du = _as_int(PARAMS["d_u"].check("d_u", d_u))
            if du > n:
                raise ValueError(f"d_u={d_u!r} must not exceed n_servers={n} (distinct servers "
                                 "sampled per push update)")
        if count_own is not None:
            own = bool(PARAMS["count_own"].check("count_own", count_own))
    if led:
        _check_budget(msg_budget, msg_budget_pod_d, p_hat, n)
    dd = int(DEFAULTS["d"])
    if POLICY_RECORDS[policy].samples:
        if d is not None:
            dd = _as_int(PARAMS["d"].check("d", d))
            if dd > n:
                raise ValueError(f"d={d!r} must not exceed n_servers={n} (distinct servers "
                                 "sampled per decision)")
    if dd > n:
        dd = n  # the default d = 2 with a single server
    tie = DEFAULTS["ties"]
    if policy in TIE_POLICIES and ties is not None:
        if not isinstance(ties, str) or ties not in TIES:
            raise ValueError(f"ties={ties!r} is unknown; valid: {', '.join(TIES)} (the tie rule "
                             f"of {policy}: each dispatcher's own draw, or one draw per slot "
                             "shared by all)")
        tie = ties

    # service means
    _check(arrival_n=arrival_n, service_n=service_n)
    mu = _positive_list("service_rates", service_rates, n, "server (n_servers)")
    service_laws = _laws(DEFAULTS["service_dist"] if service_dist is None else service_dist, mu,
                         service_n, "service", lambda i: f"service_rates[{i}]")
    mu_sigma = float(mu.sum())
    lam_sigma = rho * mu_sigma

    # dispatcher weights and arrival means
    w = _positive_list("dispatch_weights", dispatch_weights, m, "dispatcher (m_dispatchers)")
    lam_m = lam_sigma * w / w.sum()
    arrival_laws = _laws(DEFAULTS["arrival_dist"] if arrival_dist is None else arrival_dist, lam_m,
                         arrival_n, "arrival", lambda j: f"lam_m[{j}] = lam * mu_Sigma * w[{j}] / sum(w)")
    sigma2 = float(sum(law.variance for law in arrival_laws))
    nu2 = float(sum(law.variance for law in service_laws))
    spec = ModelSpec(
        n_servers=n, m_dispatchers=m, rho=rho, policy=policy, update=upd, p_hat=ph, d_u=du,
        d=dd, count_own=own, mu=mu, lam_m=lam_m, arrival_laws=tuple(arrival_laws),
        service_laws=tuple(service_laws), lam_sigma=lam_sigma, mu_sigma=mu_sigma,
        eps=mu_sigma - lam_sigma, sigma2=sigma2, nu2=nu2, zeta=0.5 * (sigma2 + nu2), ties=tie)
    if not led or (msg_budget is None and msg_budget_pod_d is None):
        return spec
    if msg_budget_pod_d is not None:
        bd = _as_int(msg_budget_pod_d)
        budget = pod_budget_per_job(bd, spec)
        if upd == "push":  # 2 d_u p_hat per update against 2 d per decision: exact
            ph = min(1.0, bd / du)
    else:
        bd = None
        budget = float(msg_budget)
        if upd == "push":
            ph = push_p_hat_for_budget(budget, spec)
    if upd == "pull":
        ph = 1.0  # the calibration's start; sim.led.slotted.simulate replaces it (calibrate_pull)
    return spec._replace(budget=budget, budget_pod_d=bd, p_hat=ph)


def _check_budget(msg_budget, msg_budget_pod_d, p_hat, n) -> None:
    if msg_budget is not None and msg_budget_pod_d is not None:
        raise ValueError(f"msg_budget={msg_budget!r} and msg_budget_pod_d={msg_budget_pod_d!r} "
                         "are both given: give one message budget")
    if msg_budget is None and msg_budget_pod_d is None:
        return
    key, val = (("msg_budget", msg_budget) if msg_budget is not None
                else ("msg_budget_pod_d", msg_budget_pod_d))
    if p_hat is not None:
        raise ValueError(f"{key}={val!r} and p_hat={p_hat!r} are both given: the message budget "
                         "sets p_hat (give one of them)")
    _check(msg_budget=msg_budget, msg_budget_pod_d=msg_budget_pod_d)
    if msg_budget is not None:
        return
    bd = _as_int(msg_budget_pod_d)
    if bd > n:
        raise ValueError(f"msg_budget_pod_d={msg_budget_pod_d!r} must be an integer in [1, "
                         f"n_servers={n}] (the d of the Power-of-d budget)")


def _p_busy(spec: ModelSpec) -> float:
    """sum_m P(A_m > 0): the expected decisions per slot (one per dispatcher with arrivals)."""
    return float(sum(1.0 - float(law.scipy().pmf(0)) ** law.pieces if law.mean > 0 else 0.0
                     for law in spec.arrival_laws))


def pod_budget_per_job(d: int, spec: ModelSpec) -> float:
    """Power-of-d's one-way messages per arriving task: ``2 d`` per decision, one decision per
    dispatcher and slot with arrivals, so ``2 d sum_m P(A_m > 0) / lam_Sigma`` (exact)."""
    if spec.lam_sigma <= 0:
        return 0.0
    return 2.0 * d * _p_busy(spec) / spec.lam_sigma


def push_p_hat_for_budget(budget: float, spec: ModelSpec) -> float:
    """The ``p_hat`` at which Push spends ``budget`` one-way messages per arriving task.

    Push spends ``2 d_u`` messages per update, and an update happens with probability ``p_hat``
    at the end of each slot in which a dispatcher had arrivals, so the messages per task are
    ``2 d_u p_hat sum_m P(A_m > 0) / lam_Sigma``: exact, no calibration needed. The result is
    clipped to [0, 1] (then the row reports the budget actually spent). Power-of-d's budget is
    ``2 d sum_m P(A_m > 0) / lam_Sigma`` (one decision per dispatcher and slot with arrivals).
    Pull has no such formula (its idle reports are mandatory and their rate depends on the
    state): calibrate with a pilot run, whose ``reports_idle`` and ``reports_busy`` per task
    give ``p_hat = (budget - idle) / busy``.
    """
    p_busy = _p_busy(spec)
    if spec.lam_sigma <= 0 or p_busy <= 0:
        return 1.0
    return float(min(max(budget * spec.lam_sigma / (2.0 * spec.d_u * p_busy), 0.0), 1.0))
