"""General-size engine: N FIFO servers whose tasks carry their own sizes, drawn at arrival.

Model
-----
N servers with FIFO queues; Poisson arrivals of total rate ``lam N``; each arrival is one
task whose size is drawn from a service law of mean 1 (:mod:`sim.core.service`), so ``lam``
is the load. The dispatcher sends the task on arrival by one of the policies of
:data:`GENERAL_POLICIES`:

- ``random``: a uniform server;
- ``pod``: power-of-d, SQ(d): ``d`` distinct uniform servers, the shortest queue among them;
- ``ll``: least-loaded LL(d): ``d`` distinct uniform servers, the least *work* among them
  (the sizes are known, so the work of a server is its last completion minus now);
- ``jsq``: a shortest queue of all N;
- ``jiq``: Join-the-Idle-Queue with one dispatcher: its I-queue lists every idle server, so a
  task joins an idle server (uniform among them) while there is one, else a uniform server.

Ties are uniform among the tied servers. Every policy costs O(1) per arrival (O(d) for the
sampling ones) whatever N; :mod:`sim.dispatch._general_kernel` says how (lazy reads of the
queues for random, pod and ll; a calendar of departures for jsq and jiq) and docs/service.md
derives it. The system starts empty.

Measurements, per arriving task and credited to the window of its arrival (all fixed at the
arrival: the task's wait is the work ahead of it, known under FIFO), after the warm-up cut and
with batch-means standard errors (:func:`sim.core.output.epilogue`; ``obm`` by default):
``mean_response``, ``mean_wait``, ``prob_wait`` (the chosen server was busy), the second
moments ``mean_wait_sq`` and ``mean_response_sq``, ``mean_queue`` (tasks per server, by
Little's law from the responses), ``tail`` (time-average fraction of servers with at least
``i`` tasks, from the time each task spends at position ``i``), ``messages_per_job``
(probes of a request and a reply: random 0, pod and ll ``2d``, jsq ``2N``, jiq 1: the idle
server's report to the I-queue per task that found one; as counted in :mod:`sim.jiq` for its
joins). Exact controls: random dispatch is N independent M/G/1 queues
(:func:`sim.core.service.mg1_wait`); ll with ``d = N`` is the M/G/N queue in order of arrival.

Single-task jobs of the dispatch model's ``general`` engine run here (its runner,
:func:`sim.dispatch.general_run.run_task`, builds the law from the task's ``service`` keys).
"""
from __future__ import annotations

import math

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.results import is_int, simulation_result
from sim.core.service import Exponential, ServiceLaw
from sim.core.settings import DEFAULTS, N_WINDOWS
from sim.core.skeleton import Run
from sim.dispatch import MODEL
from sim.dispatch import _general_kernel as _k

__all__ = ["GeneralResult", "GENERAL_POLICIES", "simulate"]

#: policy name -> (kernel code, samples d servers)
GENERAL_POLICIES: dict[str, tuple[int, bool]] = {
    "random": (_k.RANDOM, False), "pod": (_k.SQD, True), "ll": (_k.LLD, True),
    "jsq": (_k.JSQ, False), "jiq": (_k.JIQ, False)}

#: the ring capacity the run starts with (doubled when a queue fills it)
_CAPACITY = 16

GeneralResult = simulation_result(
    "GeneralResult", "Estimates of one run of the general-size engine (times in mean sizes).", {
        "mean_wait": "", "mean_wait_se": "", "prob_wait": "", "prob_wait_se": "",
        "mean_wait_sq": "mean square wait E[W^2]", "mean_wait_sq_se": "",
        "mean_response_sq": "mean square response E[T^2]", "mean_response_sq_se": "",
        "messages_per_job": "", "service": "the service law (a sim.core.service record)"})


def check_system(n_servers, lam, policy, policies) -> tuple[int, float]:
    """Refuse (``ValueError``, one line naming the value) an N or a load outside their declared
    domains (the load in ``(0, 1)``), an N of ``2**31`` or more (servers are drawn by the fast
    32-bit bounded draw, :func:`sim.core.rng.below`) or a policy not among the names of
    ``policies``; returns N and the load as checked."""
    n_servers = MODEL.param("n_servers").check("n_servers", n_servers)
    if n_servers >= 2**31:
        raise ValueError(f"n_servers={n_servers!r} must be < 2**31")
    lam = POSITIVE_LOAD_BELOW_ONE.check("lam", lam)
    if not isinstance(policy, str) or policy not in policies:
        raise ValueError(f"policy={policy!r} is unknown; valid: {', '.join(policies)}")
    return n_servers, lam


def check_run(service, jobs, seed, n_batches, max_level, n_windows,
              se_method=DEFAULTS.se_method) -> tuple[ServiceLaw, Run]:
    """Refuse a service that is not a law of :func:`sim.core.service.service_law`, a run of
    fewer ``jobs`` (arrivals) than windows, and bad run settings; returns the law
    (exponential for None) and the run over ``jobs`` arrivals (:class:`sim.core.skeleton.Run`,
    which checks the settings)."""
    if service is None:
        service = Exponential()
    if not isinstance(service, ServiceLaw):
        raise ValueError(f"service={service!r} must be a law of sim.core.service.service_law")
    if not is_int(jobs) or not is_int(n_windows) or jobs < n_windows:
        raise ValueError(f"jobs={jobs!r} must be an integer >= n_windows={n_windows!r}")
    return service, Run(events=jobs, seed=seed, init="empty", n_batches=n_batches,
                        max_level=max_level, n_windows=n_windows, se_method=se_method)


def simulate(n_servers: int, lam: float, policy: str, d: int = 1, jobs: int = 10**6,
             service: ServiceLaw | None = None, seed: int = DEFAULTS.seed,
             n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level, *,
             n_windows: int = N_WINDOWS, se_method: str = DEFAULTS.se_method) -> GeneralResult:
    """Simulate ``jobs`` arrivals from an empty system; estimates after the warm-up cut.

    Parameters
    ----------
    n_servers : int     N >= 1 (< 2**31).
    lam : float         load, ``0 < lam < 1`` (arrival rate per server; sizes have mean 1).
    policy : str        a name of :data:`GENERAL_POLICIES`.
    d : int             servers sampled by ``pod`` and ``ll``, ``1 <= d <= N``; else unused.
    jobs : int          arrivals simulated, warm-up included (>= ``n_windows``).
    service : ServiceLaw or None
                        the size law (:func:`sim.core.service.service_law`); None: exponential.
    seed, n_batches, max_level, n_windows, se_method : run settings (:mod:`sim.core.settings`).

    Memory: rings of ``8 N C`` bytes, ``C`` the power of two above the longest queue seen
    (at least 16), and for jsq and jiq a calendar of about ``32 lam N`` bytes.
    """
    n_servers, lam = check_system(n_servers, lam, policy, GENERAL_POLICIES)
    code, samples = GENERAL_POLICIES[policy]
    if samples:
        d = MODEL.param("d").check("d", d)
        if d > n_servers:
            raise ValueError(f"d={d!r} must not exceed n_servers={n_servers!r} "
                             "(sampling without replacement)")
    else:
        d = 1
    service, run = check_run(service, jobs, seed, n_batches, max_level, n_windows, se_method)

    rate = lam * n_servers
    calendar = code in _k.CALENDAR
    (ring, head, q, clast, samp, perm, pos, start, cal_head, nxt, prv, calb,
     inv_delta) = _k.new_state(n_servers, _CAPACITY, calendar, rate)
    ((w_time, w_wait, w_wait2, w_resp, w_resp2), (w_n, w_waited), w_tail, state, istate,
     fstate) = _k.new_run(run, 5, 2, 2)
    loop = _k.make_loop(code, samples and 2 * d > n_servers)
    law_params = service.params()
    while not loop(d, rate, service.code, law_params, ring, head, q, clast, samp, perm, pos,
                   start, cal_head, nxt, prv, calb, inv_delta, istate, fstate, run.bounds, state,
                   w_time, w_n, w_waited, w_wait, w_wait2, w_resp, w_resp2, w_tail):
        ring, start = _k.grow(ring, head, q, start)

    # the windows weigh their time; the queue area is the sum of responses (Little's law)
    est = run.epilogue(n_servers=n_servers, w_qarea=w_resp, w_tail=w_tail, jobs=w_n, w_time=w_time,
                       ratios={"mean_response": (w_resp, w_n), "mean_wait": (w_wait, w_n),
                               "prob_wait": (w_waited, w_n), "mean_wait_sq": (w_wait2, w_n),
                               "mean_response_sq": (w_resp2, w_n)})
    cut = est["warmup_windows"]
    kept = w_n[cut:].sum()
    found_idle = kept - w_waited[cut:].sum()
    messages = {_k.RANDOM: 0.0, _k.SQD: 2.0 * d, _k.LLD: 2.0 * d, _k.JSQ: 2.0 * n_servers,
                _k.JIQ: float(found_idle / kept) if kept else math.nan}[code]
    return GeneralResult(**est, messages_per_job=messages, service=service)
