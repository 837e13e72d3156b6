"""Occupancy engine: simulation on the counts of servers per queue length (parallel jobs).

Model (Weng & Wang 2020, "Achieving zero asymptotic queueing delay for parallel jobs")
-------------------------------------------------------------------------------------
N FIFO servers with Exp(1) task service. Jobs arrive as a Poisson process of rate ``N * lam /
k``; a job is ``k`` tasks that may run on different servers and is done when its last task is.
Optional buffer ``b`` per server (task in service included): if any task of a job would make its
queue longer than ``b`` the whole job is dropped. Policies (codes of
:data:`sim.dispatch.policies.POLICY_CODES`; each is power-of-d when ``k = 1``):

- ``batch_filling(d)``: sample ``k*d`` distinct queues; place the tasks one by one, each into a
  currently shortest sampled queue (lengths updated after each task; ties uniform).
- ``batch_sampling(d)``: sample ``k*d`` distinct queues; one task to each of the ``k`` shortest.
- ``pod_per_task(d)``: each task samples its own ``k*d`` distinct queues (independently of the
  other tasks) and joins the shortest; tasks placed one after another.
- ``random``: each task to a uniform server, independently (two tasks of a job may share one).
- ``jsq``: each task, one after another, to a uniform server among the currently shortest.
- ``pod`` (``k = 1``): ``d`` distinct queues sampled, join the shortest.

State and events
----------------
The policies are symmetric in the servers, so the counts ``x[l]`` of servers with exactly ``l``
tasks form a Markov chain; an event costs O(levels + k*d) whatever N is, and memory is a few
arrays of length (highest level + k). How a job is placed and how queues are sampled without
replacement (multivariate hypergeometric, exact: one server at a time, or one hypergeometric per
level for large batch samples; under ``pod_per_task`` only each task's sampled minimum, by
inversion of its law) is described in :mod:`sim.dispatch._occupancy_kernel`.

Clock: embedded jump chain with Rao-Blackwellised time
------------------------------------------------------
In state ``x`` the total event rate is ``R(x) = N*lam/k + (number of busy servers)``. Each event
is drawn from the jump chain -- an arrival with probability ``(N*lam/k) / R(x)``, else a service
completion at a uniform busy server -- and the state ``x`` it leaves is credited with its
*expected* holding time ``1 / R(x)`` instead of an ``Exp(R(x))`` draw. Time averages are then
``sum f(x_n) / R(x_n) / sum 1 / R(x_n)`` over the visited states: the conditional expectation of
the usual estimator given the jump chain (same mean, smaller variance). Why not uniformization
with the bound ``N*lam/k + N``: a service token at an idle server is a wasted event, and in the
state representation a useful event is no cheaper than in the jump chain (both need one level
search), so uniformizing would only waste a fraction ``(1 - busy/N) / (1 + lam/k)`` of the
events (most of them at light load). ``events`` therefore counts real transitions (arrivals,
dropped ones included, and service completions), and ``sim_time`` is the sum of the expected
holding times.

Measurements (per job at its arrival, per state for time averages)
-----------------------------------------------------------------
- ``mean_response``: a job's tasks take positions ``p_1..p_m`` in the distinct queues it uses
  (for a queue that gets several of its tasks only the last counts); with FIFO and Exp(1)
  service its response given the positions is ``max_i Gamma(p_i, 1)``, independent across
  queues, so ``E[T | positions]`` (:func:`sim.core.jobdelay.expected_max_gamma`; ``H_m`` when all
  positions are 1, ``p`` for ``k = 1``, else memoised by the signature of position counts, and
  computed on one grid shared by every job under ``batch_sampling`` and ``pod_per_task``,
  :func:`sim.core.jobdelay.expected_max_gamma_table`) is recorded at arrival. By PASTA the mean
  over admitted arrivals is the steady-state mean response of an admitted job. Exact: no job is
  censored by the end of the run.
- ``mean_wait``: mean over *tasks* of ``position - 1``, each task's expected wait before its
  service starts (the task in service ahead has an Exp(1) residual). For ``k = 1`` it is the
  job's mean wait.
- ``prob_wait``: fraction of admitted jobs with some task at position >= 2.
- ``frac_within_h``: fraction of admitted jobs all of whose tasks take positions <= ``h``.
- ``queueing_ratio``: ``(mean_response - H_k) / H_k``, ``H_k`` the harmonic number (its SE is
  ``mean_response_se / H_k``).
- ``drop_prob``: dropped jobs over arriving jobs.
- ``mean_queue``, ``tail``: time averages (weights ``1 / R``) of tasks per server and of the
  fraction of servers with at least ``i`` tasks, integrated lazily (O(1) per state change).
- ``messages_per_job``: queue-length probes per arriving job: batch policies ``k*d``,
  ``pod_per_task`` ``k*(k*d)``, ``pod`` ``d``, ``random`` 0, ``jsq`` ``N*k``.
- with ``responses=True``: the law of the response time, exactly, as the mixture over the
  recorded position signatures of ``max_i Gamma(p_i, 1)`` (quantiles, CCDF;
  :mod:`sim.core.responses`, docs/responses.md).

Output analysis, as in :mod:`sim.dispatch.agent`: windows of ``2**j`` events (between ``n_windows`` and
``2*n_windows`` of them), MSER-5 on the per-window mean queue length, batch means with ratio
estimators over ``n_batches`` contiguous batches of the kept windows.

Initial state (``init="meanfield"``): the counts of the mean-field fixed point (N -> infinity
at fixed k, d), ``N * s_i`` rounded, from :func:`meanfield_tail`; ``init="empty"``: all idle.
Either way MSER-5 cuts what remains of the transient; at large N a run covers little simulated
time (about ``events / (N * (1 + lam))``), so the fixed-point start matters there.

Random numbers: xoshiro256+ seeded from ``numpy.random.SeedSequence(seed)``; bitwise
reproducible for a given seed and inputs (and independent of the internal array sizes).

Speed (benchmarks/bench_limits.py, CPU time per jump against the C jump chain
``../shared/limits/occupancy_limit.c`` in the same run; figures in docs/performance.md): the
single-task policies (pod, random, jsq) cost 0.75-1.1 times the C loop's power-of-2 jump at
N = 10**3, 10**6 and 10**9, the same at every N (nothing grows with N); batch-filling with
k = 16, d = 4 about 2x its floor of k + 1 such jumps per job. On the headline path
(benchmarks/bench_batch_policies.py) batch-sampling with d = 2 and pod_per_task cost 1.3-1.5x
batch-filling per job at N = 10**5..10**7. Slow case: random routing with k > 1 at high load,
where each job's E[T] is a fresh quadrature (:mod:`sim.dispatch._occupancy_kernel`).

Caveat for large N: a run of ``events`` covers about ``events / (N * (lam + s_1))`` time units
(~50 for 10**8 events at N = 10**6), so the within-run batch-means SE is honest only when that is
many times the relaxation time of the system (13 time units for power-of-2 at lam = 0.9); at
very large N use independent replications (the analysis does when there are several).
"""
from __future__ import annotations

import numpy as np

from sim.core.declare import INT_LIMIT
from sim.core.jobdelay import GL_W, GL_X
from sim.core.results import simulation_result, simulation_row
from sim.core.settings import DEFAULTS, N_WINDOWS, RunSettings, task_int
from sim.core.skeleton import Run
from sim.dispatch import MODEL
from sim.dispatch import _occupancy_kernel as _k
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import policy_of, served_by

__all__ = ["OccupancyResult", "simulate", "run_task", "meanfield_tail",
           "OCCUPANCY_POLICIES"]

#: policies this engine serves
OCCUPANCY_POLICIES: tuple[str, ...] = served_by("occupancy")


#: estimates of one occupancy run (times in the model's time unit, mean service 1)
OccupancyResult = simulation_result("OccupancyResult", "Estimates of one occupancy run (times in the model's time unit, mean service 1).", {
    "mean_response": "mean response of an admitted job (until its last task is done)",
    "mean_wait": "mean over tasks of (position - 1): expected wait before service", "mean_wait_se": "",
    "prob_wait": "fraction of admitted jobs with some task at position >= 2", "prob_wait_se": "",
    "queueing_ratio": "", "queueing_ratio_se": "", "drop_prob": "dropped / arriving jobs", "drop_prob_se": "",
    "frac_within_h": "fraction of admitted jobs with all tasks at positions <= h", "frac_within_h_se": "",
    "messages_per_job": "", "n_jobs": "admitted jobs after the warm-up cut",
    "n_arrivals": "arriving jobs after the warm-up cut",
    "arrivals_run": "arriving jobs in the whole run (warm-up included)"})


# --------------------------------------------------------------------------------------------
# mean-field fixed point (start of the run)
# --------------------------------------------------------------------------------------------
def _pmf_power_truncated(pmf: np.ndarray, n: int, size: int) -> np.ndarray:
    """pmf of the sum of ``n`` i.i.d. copies of a variable on 0, 1, ..., truncated to the values
    ``0..size-1`` (the mass above is dropped): binary powering of truncated convolutions."""
    out = np.zeros(size)
    out[0] = 1.0
    base = np.zeros(size)
    m = min(size, pmf.size)
    base[:m] = pmf[:m]
    while n > 0:
        if n & 1:
            out = np.convolve(out, base)[:size]
        n >>= 1
        if n:
            base = np.convolve(base, base)[:size]
    return out


def meanfield_tail(policy: str, lam: float, k: int = 1, d: int = 1, b: int | None = None,
                   eps: float = 1e-12, max_levels: int = 100_000) -> np.ndarray:
    """Fixed point ``s_1, s_2, ...`` (until ``s_i < eps``, or level ``b``) of the N -> infinity
    limit at fixed ``k`` and ``d``, used as the initial state.

    In the limit the ``k*d`` sampled queues are i.i.d. with ``P(level >= l) = s_l``. An arrival
    raises ``N*s_i`` by the number of its tasks at position exactly ``i``, and services lower
    it at rate ``N*(s_i - s_{i+1})``; summing the balance over the levels above ``i`` gives
    ``s_i = (lam / k) * E[T_i]`` with ``T_i`` the number of a job's tasks at positions ``>= i``:

    - batch-filling: ``T_i = (k - F_{i-1})^+``, ``F_l = sum over the sample of (l - level)^+``
      (the free slots at positions <= l; tasks fill positions from the lowest up);
    - batch-sampling: ``T_i = (k - #{sampled queues at level < i-1})^+``;
    - pod_per_task: ``E[T_i] = k * s_{i-1}**(k*d)`` (pod with ``k*d`` choices); pod:
      ``s_{i-1}**d``; random: ``k * s_{i-1}`` (``lam**i``); jsq: ``s_1 = lam``, then 0.

    (Interactions between the tasks of one job vanish in this limit.) ``k = 1`` gives the
    power-of-d fixed point for every batch policy. With a buffer the tail stops at level ``b``;
    for ``lam >= 1`` (allowed with a buffer) there is no such point and an empty array is
    returned (start empty).
    """
    if lam <= 0.0 or lam >= 1.0:
        return np.zeros(0)
    top = max_levels if b is None else min(max_levels, b)
    s = [1.0]  # s_0
    pol = policy_record(policy)
    if pol.name not in OCCUPANCY_POLICIES:
        raise ValueError(f"policy={pol.name!r} is not served by the occupancy engine")
    if pol.probes_all:
        return np.array([lam])
    n = pol.sample_size(k, d)  # queues a task (batch: a job) chooses among
    while len(s) <= top:
        prev = s[-1]
        if not pol.samples:
            si = lam * prev
        elif not pol.batch:  # the shortest of its own n: power-of-n
            si = lam * prev**n
        else:
            lvl = len(s) - 1  # i - 1: slots below position i
            levels = np.array(s + [0.0])
            p_level = levels[:-1] - levels[1:]  # P(level = j), j = 0..i-1
            if pol.fills:
                # one sampled queue offers (lvl - level)^+ slots at positions <= lvl
                pmf = np.zeros(lvl + 1)
                for j in range(lvl):
                    pmf[lvl - j] += p_level[j]
                pmf[0] += prev  # level >= lvl: no slot
            else:
                pmf = np.array([prev, 1.0 - prev])  # 1 iff the queue is below level lvl
            dist = _pmf_power_truncated(pmf, n, k)
            si = lam / k * float(np.dot(k - np.arange(k), dist))
        if si < eps:
            break
        s.append(min(si, prev))
    return np.array(s[1:])


def _initial_counts(tail: np.ndarray, n_servers: int) -> np.ndarray:
    """Counts ``x[l]`` with ``#{servers with >= i tasks} = round(N * s_i)`` (deterministic)."""
    ge = np.round(n_servers * np.asarray(tail, dtype=np.float64)).astype(np.int64)
    ge = np.minimum.accumulate(np.minimum(ge, n_servers)) if ge.size else ge
    ge = np.concatenate(([n_servers], ge, [0]))
    return ge[:-1] - ge[1:]


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(n_servers: int, lam: float, policy: str, k: int = 1, d: int = 1,
             b: int | None = None, events: int = 10**6, seed: int = DEFAULTS.seed, init: str = DEFAULTS.init,
             n_batches: int = DEFAULTS.n_batches, max_level: int = DEFAULTS.max_level, h: int = DEFAULTS.h, *,
             n_windows: int = N_WINDOWS, responses: bool = DEFAULTS.responses,
             se_method: str = DEFAULTS.se_method) -> OccupancyResult:
    """Simulate the occupancy engine; batch-means estimates after an MSER-5 warm-up cut.

    Parameters
    ----------
    n_servers : int
        N, in its declared domain (10**9 costs the same per event as 10**3).
    lam : float
        Load per server, 0 < lam (job rate ``N * lam / k``); lam < 1 unless ``b`` is given.
    policy : str
        ``random``, ``jsq``, ``pod``, ``batch_filling``, ``batch_sampling``, ``pod_per_task``.
    k : int
        Tasks per job, 1 <= k <= N (``pod``: k = 1).
    d : int
        Probe overhead: ``pod`` samples ``d`` queues, batch policies ``k*d`` (per job; per task
        for ``pod_per_task``); ``k*d <= N``. Ignored by ``random`` and ``jsq``.
    b : int or None
        Buffer per server, task in service included (None: unbounded).
    events : int
        Jump-chain events (arrivals and service completions), warm-up included, >= n_windows.
    seed, n_batches, max_level, n_windows : int
        Run settings (:mod:`sim.core.settings`; ``n_windows``, keyword only, >= ``2 * n_batches``).
    init : str
        ``meanfield`` (counts of :func:`meanfield_tail`) or ``empty``.
    h : int
        Position threshold of ``frac_within_h`` (>= 1).
    responses : bool
        Record the response-time distribution (keyword only; docs/responses.md): each admitted
        job's signature (``job_signature``: its queues per position of their job-last task) per window,
        by a separately compiled loop; quantiles and CCDF in ``responses`` of the result. Uses
        no random number: every other estimate is bitwise the same.

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter.
    """
    if policy not in OCCUPANCY_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by the occupancy engine; valid: "
                         f"{', '.join(OCCUPANCY_POLICIES)}")
    pol = policy_record(policy)
    n_servers, k, lam = MODEL.checked(n_servers=n_servers, k=k, lam=lam)
    (b,) = MODEL.check_values(b=b)
    if pol.samples:
        (d,) = MODEL.checked(d=d)
    if k > n_servers:
        raise ValueError(f"k={k!r} must not exceed n_servers={n_servers}")
    if pol.single_task and k != 1:
        raise ValueError(f"k={k!r}: policy {policy!r} serves single-task jobs (k = 1)")
    if lam == 0.0:
        raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
    if b is None and lam >= 1.0:
        raise ValueError(f"lam={lam!r} must be < 1 when the buffer b is unbounded")
    if pol.samples and (d is None or k * d > n_servers):
        raise ValueError(f"d={d!r} must be an integer >= 1 with k*d <= n_servers "
                         f"(k={k}, n_servers={n_servers})")
    d = int(pol.probe_d(d))
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, h=h, responses=responses, se_method=se_method)
    code, sample_size = pol.code, pol.sample_size(k, d)
    bmax = INT_LIMIT if b is None else int(b)  # INT_LIMIT: no buffer

    # ---- set-up: the start, the seed, the windows
    state = run.xoshiro()
    tail0 = meanfield_tail(policy, lam, k, d, b) if run.init == "meanfield" else np.zeros(0)
    x0 = _initial_counts(tail0, n_servers)
    cap = 16
    while cap < min(x0.size - 1 + k, bmax) + 2:
        cap *= 2
    x = np.zeros(cap, dtype=np.int64)
    x[: x0.size] = x0
    harm = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, k + 1))))
    memo = _k.new_memo(k)
    outputs = (run.zeros(float), run.zeros(float), run.tail_zeros(float),
               *(run.zeros() for _ in range(3)), run.zeros(float), *(run.zeros() for _ in range(3)))
    rec = run.recorder(k)

    # ---- the kernel
    _k.occupancy_kernel(code, n_servers, n_servers * lam / k, k, sample_size, bmax, run.h, x,
                        run.bounds, state, harm, memo, GL_X, GL_W, outputs, rec)
    (w_time, w_qarea, w_tail, w_arr, w_drop, w_adm, w_resp, w_wait, w_waited,
     w_within) = outputs

    # ---- epilogue
    est = run.epilogue(n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, jobs=w_adm,
                       w_time=w_time, rec=rec, k=k, ci_note="; jump chain, expected holding times",
                       ratios={"mean_response": (w_resp, w_adm), "mean_wait": (w_wait, k * w_adm),
                               "prob_wait": (w_waited, w_adm), "frac_within_h": (w_within, w_adm),
                               "drop_prob": (w_drop, w_arr)})
    h_k = float(harm[k])
    return OccupancyResult(
        **est, queueing_ratio=(est["mean_response"] - h_k) / h_k,
        queueing_ratio_se=est["mean_response_se"] / h_k,
        messages_per_job=pol.messages(n_servers, k, d),
        n_arrivals=int(w_arr[est["warmup_windows"]:].sum()), arrivals_run=int(w_arr.sum()),
    )


def run_task(task: dict) -> dict:
    """Run one occupancy task (keys as in docs/results-schema.md) and return the result keys
    :data:`RESULT_KEYS` as plain Python values (``wall_time`` is added by :func:`sim.run`);
    with ``responses: true`` also :data:`sim.core.responses.RESPONSE_COLUMNS`."""
    pol = policy_of(task)
    settings = RunSettings.from_task(task)
    res = simulate(
        n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=pol.name,
        k=task_int(task, "k", 1), d=task_int(task, "d") if pol.samples else 1, b=task_int(task, "b"),
        events=task_int(task, "events"), **settings.arguments(simulate))
    return simulation_row(res)
