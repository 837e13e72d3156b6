"""Occupancy engine of distributed Join-the-Idle-Queue: simulation on counts of servers per
queue length and of I-queues per size.

Model (Wang, Feng & Cheng, "Distributed Join-the-Idle-Queue for low latency cloud services";
``/work/shared/papers/wang-feng-cheng-distributed-jiq.txt``)
-----------------------------------------------------------------------------------------
``N`` FIFO servers with Exp(1) service, ``M = N / r`` schedulers. Tasks arrive as a Poisson
process of rate ``lam * N``, each to a uniform scheduler. Each scheduler holds an I-queue of idle
servers; a server becoming idle sends a "join" message to an I-queue. A task whose scheduler's
I-queue is non-empty goes to a uniform server of that I-queue, which leaves it; otherwise it is
dispatched blindly, and if the server it reaches was idle, that server sends a "delete" message
to the I-queue listing it (so I-queues list idle servers only, each exactly once). Policies:

- ``jiq``: joins go to a uniform I-queue; a blind task goes to a uniform server;
- ``jiq_pod``: as ``jiq``, but a blind task probes ``d`` distinct uniform servers and joins
  the shortest (ties uniform);
- ``jiq_sqd``: as ``jiq``, but a server becoming idle samples ``d`` distinct I-queues
  (``d <= M``) and joins the shortest (ties uniform).

``jiq_original`` (no delete messages) and ``jiq_threshold`` (servers with up to ``z`` tasks
listed) are served by the agent engine only: the I-queues then list servers that are not
exchangeable given the counts, so the counts are not a Markov chain.

State and events
----------------
With delete messages the state is symmetric: the counts ``x[l]`` of servers with ``l`` tasks
and ``y[j]`` of I-queues of size ``j`` form a Markov chain, with ``sum_j j y[j] = x[0]``. An event
costs O(levels + d), whatever N is (N up to its declared bound), and memory is a few arrays as long as
the highest level and the largest I-queue; they grow (doubling) as needed. The transitions are
described in :mod:`sim.jiq._occupancy_kernel`.

Clock: the embedded jump chain with Rao-Blackwellised time, as in :mod:`sim.dispatch.occupancy`
(read its docstring for why): in state ``x`` the total rate is ``R = lam N + busy``; each event
is drawn with probabilities proportional to the rates and the state it leaves is credited with
its expected holding time ``1 / R``. ``events`` counts arrivals and service completions;
``sim_time`` is the sum of the expected holding times.

Measurements
------------
- ``mean_response``: a task joining at position ``p`` of a FIFO queue with Exp(1) service has
  expected response ``p`` (Rao-Blackwell), recorded at arrival; by PASTA the mean over arrivals
  is the steady-state mean. ``mean_wait``: mean of ``p - 1``; ``prob_wait``: fraction with
  ``p >= 2``; ``queueing_ratio = mean_response - 1`` (no drops: ``drop_prob = 0``).
- ``mean_queue``, ``tail`` (``s_i``, fraction of servers with ``>= i`` tasks): time averages.
- ``p0``: time average of ``y[0] / M`` (fraction of empty I-queues).
- ``mean_iqueue``: time average of the listed servers per I-queue, ``sum_j j y[j] / M``, tracked
  from the I-queue counts alone; it equals ``x[0] / M`` by the invariant, so comparing it with
  ``r (1 - s_1)`` checks the two halves of the state against each other.
- ``join_rate``, ``delete_rate``, ``probe_rate``: messages per server per unit time (a join or a
  delete 1, a probe of a server or an I-queue 2: request and reply; ``jiq_pod`` probes ``d``
  servers per blind task, ``jiq_sqd`` ``d`` I-queues per join, ``jiq`` none);
  ``messages_per_job``: all messages over arrivals.

Output analysis: windows of ``2**j`` events (between ``n_windows`` and ``2 n_windows``), warm-up
cut by MSER-5 on the per-window mean queue length *and* on the per-window ``p0`` (the larger
cut: the I-queue sizes relax much more slowly than the queue lengths at high load -- from empty
at lam = 0.98, r = 10 the mean field needs t > 800 to settle), then batch means with ratio
estimators over ``n_batches`` contiguous batches.

Initial state: ``init="meanfield"`` draws the counts from the mean-field fixed point
(:func:`sim.jiq.meanfield.fixed_point`): ``y ~ Multinomial(M, iqueue_pmf)``, ``x[0] = sum_j j y[j]``
(redrawn if it exceeds N), and the ``N - x[0]`` busy servers' levels
``~ Multinomial(N - x[0], (s_l - s_{l+1}) / s_1)``; the draws use their own stream
(``SeedSequence(seed, spawn_key=(1,))``). ``init="empty"`` (and the fall-back when the mean field
is not available or ``r > 10**5``, where its I-queue law is too long to compute): all servers
idle and listed, spread as evenly as possible over the I-queues. ``init_used`` says which.

Memory: the level array is as long as the longest queue and the I-queue size array as long as
the longest I-queue, O(r); hence ``r <= 2**24`` (one I-queue of 10**9 servers would need 8 GB:
few schedulers are the agent engine's domain). Time per event does not grow with r: the
I-queue draws scan sizes from the smallest occupied one.

Speed (benchmarks/bench_jiq_occupancy.py, lam = 0.9, r = 10, AMD EPYC, 2 shared cores): CPU
time 21 ns per event for ``jiq`` and 26 ns for ``jiq_pod`` (d = 2), the same from N = 10**3 to
N = 10**9 (max / min over N 1.01); wall time was 2-4x that on the loaded machine.

Caveat for large N: a run of ``events`` covers about ``events / (N (lam + s_1))`` time units,
so at large N the within-run batch-means SE is honest only if that is many relaxation times;
use independent replications there.
"""
from __future__ import annotations

import numpy as np

from sim.core._trajectory_kernel import padded  # counts in a power-of-two array, room above the top
from sim.core.output import LEGACY_SE_METHOD, mser5, warmup_cut
from sim.core.results import simulation_result, simulation_row
from sim.core.settings import DEFAULTS, N_WINDOWS, RunSettings, task_int
from sim.core.skeleton import Run
from sim.jiq import MODEL, SIM_COLUMNS, n_schedulers
from sim.jiq import _occupancy_kernel as _k
from sim.jiq.policies import POLICIES, served_by
from sim.jiq.policies import policy as policy_record

__all__ = ["JiqOccupancyResult", "simulate", "run_task", "initial_counts", "OCCUPANCY_POLICIES",
           "AGENT_ONLY_POLICIES", "EXTRA_KEYS"]

#: policies this engine serves
OCCUPANCY_POLICIES: tuple[str, ...] = served_by("occupancy")
#: policies of the model that only the agent engine serves (no symmetric count state)
AGENT_ONLY_POLICIES: tuple[str, ...] = tuple(p.name for p in POLICIES.values() if p.engines == ("agent",))
#: largest r (servers per scheduler): the I-queue size arrays are O(r) long (16 bytes per size)
MAX_R = 2**24
#: largest r with a mean-field warm start: sim.jiq.meanfield.fixed_point took 1.1 s at r = 1e5
#: and asked for 512 MiB arrays at r = 1e6 (its I-queue law has ~2.6 r terms); above, start empty
MEANFIELD_MAX_R = 10**5

#: keys :func:`run_task` returns beyond :data:`sim.core.results.RESULT_KEYS`
EXTRA_KEYS = tuple(SIM_COLUMNS)


#: estimates of one occupancy run of distributed JIQ (mean service time 1)
JiqOccupancyResult = simulation_result("JiqOccupancyResult", "Estimates of one occupancy run of distributed JIQ (mean service time 1).", {
    "mean_response": "mean response of a task (E[position] by Rao-Blackwell)",
    "mean_wait": "mean of (position - 1)", "mean_wait_se": "", "prob_wait": "fraction of tasks at position >= 2", "prob_wait_se": "",
    "queueing_ratio": "mean_response - 1", "queueing_ratio_se": "", "drop_prob": "0: no buffer", "drop_prob_se": "",
    "frac_within_h": "fraction of tasks at position 1 (h = 1): 1 - prob_wait", "frac_within_h_se": "",
    **SIM_COLUMNS,
    "messages_per_job": "all messages per arriving task", "messages_per_job_se": "",
    "n_jobs": "tasks arrived after the warm-up cut", "n_schedulers": "M = N / r",
    "init_used": '"meanfield" or "empty" (what the run actually started from)',
    "final_levels": "x at the end of the run (servers per level)",
    "final_iqueues": "y at the end of the run (I-queues per size)"})


# --------------------------------------------------------------------------------------------
# initial state
# --------------------------------------------------------------------------------------------
def _empty_counts(n_servers: int, n_iq: int) -> tuple[np.ndarray, np.ndarray]:
    """All servers idle and listed, spread as evenly as possible over the I-queues."""
    q, rem = divmod(n_servers, n_iq)
    x = np.array([n_servers], dtype=np.int64)
    y = np.zeros(q + 2, dtype=np.int64)
    y[q] = n_iq - rem
    y[q + 1] = rem
    return x, y


def initial_counts(policy: str, lam: float, r: float, d: int, n_servers: int, n_iq: int,
                   init: str, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Initial ``(x, y, how)``: drawn from the mean-field fixed point (``how = "meanfield"``)
    or all idle (``"empty"``, also when :mod:`sim.jiq.meanfield` is not available, when
    ``r > MEANFIELD_MAX_R``, or when no draw with ``sum_j j y[j] <= N`` was found in 100
    tries)."""
    if init == "meanfield" and r <= MEANFIELD_MAX_R:
        try:
            from sim.jiq.meanfield import fixed_point
        except ImportError:
            fixed_point = None
        if fixed_point is not None:
            fp = fixed_point(policy, lam, r, d, max_level=4096)
            pmf = np.clip(np.asarray(fp.iqueue_pmf, dtype=np.float64), 0.0, None)
            s = np.concatenate((np.asarray(fp.tail, dtype=np.float64), [0.0]))
            s = np.minimum.accumulate(np.clip(s, 0.0, 1.0))
            q = s[:-1] - s[1:]  # P(level = l), l = 1..L
            keep = np.nonzero(q > 0)[0]
            q = q[: keep[-1] + 1] if keep.size else np.array([1.0])
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
            for _ in range(100):
                y = rng.multinomial(n_iq, pmf / pmf.sum()).astype(np.int64)
                idle = int(np.dot(np.arange(y.size, dtype=np.int64), y))
                if idle <= n_servers:
                    break
            else:
                return (*_empty_counts(n_servers, n_iq), "empty")
            busy = n_servers - idle
            x = np.zeros(q.size + 1, dtype=np.int64)
            x[0] = idle
            x[1:] = rng.multinomial(busy, q / q.sum())
            return x, y, "meanfield"
    return (*_empty_counts(n_servers, n_iq), "empty")


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def simulate(n_servers: int, lam: float, policy: str, r: float, d: int = 1,
             events: int = 10**6, seed: int = DEFAULTS.seed, init: str = DEFAULTS.init, n_batches: int = DEFAULTS.n_batches,
             max_level: int = DEFAULTS.max_level, *, n_windows: int = N_WINDOWS,
             responses: bool = DEFAULTS.responses, se_method: str = DEFAULTS.se_method) -> JiqOccupancyResult:
    """Simulate distributed JIQ on counts; batch-means estimates after an MSER-5 warm-up cut.

    Parameters
    ----------
    n_servers : int
        N, in its declared domain (the cost per event does not depend on N).
    lam : float
        Load per server, 0 < lam < 1 (task rate ``lam * N``).
    policy : str
        ``jiq``, ``jiq_pod`` or ``jiq_sqd`` (``jiq_original``, ``jiq_threshold``: agent engine).
    r : float
        Servers per scheduler, ``r <= 2**24``; ``M = N / r`` must be a positive integer.
    d : int
        ``jiq_pod``: servers probed by a blind task, 1 <= d <= N; ``jiq_sqd``: I-queues
        sampled by a server becoming idle, 1 <= d <= M; ignored by ``jiq``.
    events : int
        Jump-chain events (arrivals and completions), warm-up included, >= n_windows.
    seed, n_batches, max_level, n_windows : int
        Run settings (:mod:`sim.core.settings`; ``n_windows``, keyword only, >= ``2 * n_batches``).
    init : str
        ``meanfield`` (counts drawn from the mean-field fixed point) or ``empty``.
    responses : bool
        Record the response-time distribution (keyword only; docs/responses.md): the
        position histogram of the tasks per window, by a separately compiled loop; a task at
        position p responds in Gamma(p, 1). Uses no random number.

    Raises
    ------
    ValueError
        On bad input, naming the offending parameter and its value.
    """
    if policy in AGENT_ONLY_POLICIES:
        raise ValueError(f"policy={policy!r} is served by the agent engine only (without delete "
                         "messages or with a threshold the count state is not Markov)")
    if policy not in OCCUPANCY_POLICIES:
        raise ValueError(f"policy={policy!r} is not served by the JIQ occupancy engine; valid: "
                         f"{', '.join(OCCUPANCY_POLICIES)}")
    n_servers, lam = MODEL.checked(n_servers=n_servers, lam=lam)
    if lam == 0.0:
        raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
    n_iq = n_schedulers(n_servers, r)  # ValueError naming r unless N / r is a positive integer
    if float(r) > MAX_R:
        raise ValueError(f"r={r!r} must be <= 2**24 in the occupancy engine (its I-queue size "
                         "arrays are O(r) long); use the agent engine for few schedulers")
    pol = policy_record(policy)
    if not pol.samples:
        d = 1
    else:
        limit, what = pol.d_limit(n_servers, n_iq)
        (d,) = MODEL.checked(d=d)
        if d > limit:
            raise ValueError(f"d={d!r} must be an integer with 1 <= d <= {what} = {limit} "
                             f"(policy {policy})")
    run = Run(events=events, seed=seed, init=init, n_batches=n_batches, max_level=max_level,
              n_windows=n_windows, responses=responses, se_method=se_method)
    lam, r, d = float(lam), float(r), int(d)

    # ---- set-up: the start (its own stream of the seed, sim.jiq.occupancy.initial_counts),
    # the kernel's stream, the windows
    x0, y0, how = initial_counts(policy, lam, r, d, n_servers, n_iq, run.init, run.seed)
    x, y = padded(x0, 2), padded(y0, 2)
    state = run.xoshiro()
    outputs = _k.new_outputs(run.n_win, run.max_level)
    rec = run.recorder()

    # ---- the kernel
    x, y = _k.occupancy_kernel(pol.occupancy_code, n_servers, n_iq, lam * n_servers, d,
                               x, y, run.bounds, state, outputs, rec)
    (w_time, w_qarea, w_tail, w_y0area, w_listarea, w_arr, w_resp, w_waited, w_join, w_del,
     w_probe) = outputs

    # ---- epilogue: batch_means cuts the larger of the MSER-5 cuts on queue length and on p0;
    # obm its fixed fraction (sim.core.output.epilogue)
    cut = None
    if run.se_method == LEGACY_SE_METHOD:
        cut_q = warmup_cut(w_qarea, w_time, n_servers, run.n_batches)
        cut_p0 = min(mser5(w_y0area / (w_time * n_iq)), run.n_win - run.n_batches)
        cut = max(cut_q, cut_p0)
    srv_time = w_time * n_servers
    est = run.epilogue(
        n_servers=n_servers, w_qarea=w_qarea, w_tail=w_tail, jobs=w_arr, w_time=w_time,
        cut=cut, rec=rec, ci_note=f"; jump chain, expected holding times; start {how}"
        + ("; MSER-5 on queue and p0" if run.se_method == LEGACY_SE_METHOD else ""),
        ratios={"mean_response": (w_resp, w_arr), "mean_wait": (w_resp - w_arr, w_arr),
                "prob_wait": (w_waited, w_arr), "p0": (w_y0area, w_time * n_iq),
                "mean_iqueue": (w_listarea, w_time * n_iq), "join_rate": (w_join, srv_time),
                "delete_rate": (w_del, srv_time), "probe_rate": (w_probe, srv_time),
                "messages_per_job": (w_join + w_del + w_probe, w_arr)})
    return JiqOccupancyResult(
        **est, queueing_ratio=est["mean_response"] - 1.0, queueing_ratio_se=est["mean_response_se"],
        drop_prob=0.0, drop_prob_se=0.0,
        frac_within_h=1.0 - est["prob_wait"], frac_within_h_se=est["prob_wait_se"],
        n_schedulers=n_iq, init_used=how, final_levels=x, final_iqueues=y,
    )


def run_task(task: dict) -> dict:
    """Run one task (keys ``n_servers, lam, policy, r, d, events, seed, init, n_batches,
    max_level, h``) and return :data:`sim.core.results.RESULT_KEYS` plus :data:`EXTRA_KEYS`
    as plain Python values (``frac_within_h`` only for ``h = 1``: 1 - prob_wait)."""
    settings = RunSettings.from_task(task)
    res = simulate(
        n_servers=task_int(task, "n_servers"), lam=task["lam"], policy=task["policy"], r=task["r"],
        d=task_int(task, "d", 1) if task.get("d") is not None else 1,
        events=task_int(task, "events"), **settings.arguments(simulate))
    return simulation_row(res, EXTRA_KEYS, frac_within_h=res.frac_within_h if settings.h == 1 else None)
