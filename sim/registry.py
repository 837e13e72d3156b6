"""The registry: which engine serves which policy of which model, with which parameters.

One declaration, read by everything that needs it: :func:`check_task` (here), the pipeline's
plan (types of axes and formulas, which parameters a policy needs, which are null in a row),
the Parquet schema (a column type per parameter and per result) and the docs (a test checks that
docs/results-schema.md names every parameter and result column declared here).

- :data:`PARAMS`: every model parameter a task may carry, with its kind -- ``int``, ``float``,
  ``bool``, ``choice`` (a string from a listed set, never parsed as a formula) or ``floats`` (a
  list of floats, for example one service rate per server).
- :data:`ENTRIES`: one :class:`Entry` per (engine, policy): the model it belongs to, the runner
  (``"module:function"``, imported only when used so that each engine's compiled kernels load
  only in the processes that need them), the parameters it requires and those it accepts.
  The same policy name may be served by several models (``jsq`` by the dispatch model's
  engines and by the slotted engine), each entry with its own parameters.
- :data:`RESULTS`: every result column an engine may return, with its kind; an engine returns
  a subset, the others are null in its row.

Model-specific value checks (``k * d <= N``, ``p`` in [0, 1], ...) live in each model package's
``check_task`` (:mod:`sim.dispatch`, :mod:`sim.centralization`), called from here.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

from sim.core.results import INIT_CHOICES

__all__ = ["Param", "Entry", "PARAMS", "ENTRIES", "RESULTS", "ENGINES", "POLICIES",
           "ENGINE_POLICIES", "STOCHASTIC_ENGINES", "RUN_KEYS", "MAIN_ESTIMATE", "entry", "check_task",
           "task_params", "INIT_CHOICES", "N_BATCHES_MAX", "N_SERVERS_MAX"]

KINDS = ("int", "float", "bool", "choice", "floats")


@dataclass(frozen=True)
class Param:
    """A model parameter: its kind, a one-line meaning, and the choices of a ``choice``."""

    kind: str
    doc: str
    choices: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {KINDS}")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError("a choice parameter (and only one) lists its choices")


#: every model parameter a task may carry (``n_servers`` and ``lam`` always)
PARAMS: dict[str, Param] = {
    "n_servers": Param("int", "N, the number of servers (stations)"),
    "lam": Param("float", "load: arrival rate per unit of total service rate"),
    "d": Param("int", "queues probed per job (pod) or per task (batch policies)"),
    "k": Param("int", "tasks per job (default 1)"),
    "b": Param("int", "buffer per server, the task in service included (absent: unbounded)"),
    "p": Param("float", "central fraction of the processing (partial centralization)"),
    "events": Param("int", "run length of a simulation: events, warm-up included"),
    "time": Param("float", "run length in simulated time (mean service time 1; slots for the "
                  "slotted engine), warm-up included: the plan turns it into events"),
    "service_rates": Param("floats", "per-server service rates (length N; absent: all 1)"),
    "r": Param("float", "servers per scheduler (JIQ: M = N / r schedulers, each with an I-queue)"),
    "z": Param("int", "JIQ threshold: the I-queues list the servers with at most z tasks"),
    "replacement": Param("bool", "refined mean field: the d probes drawn with replacement "
                         "(default false, as the simulators)"),
    # multi-dispatcher LED model (slotted engine)
    "m_dispatchers": Param("int", "dispatchers M, each with its own estimates (default 1)"),
    "update": Param("choice", "how LED estimates are refreshed", ("push", "pull")),
    "p_hat": Param("float", "LED update probability in [0, 1]"),
    "d_u": Param("int", "Push: servers sampled per update"),
    "count_own": Param("bool", "a dispatcher adds its own dispatches to its estimates (default false)"),
    "arrival_dist": Param("choice", "law of arrivals per dispatcher per slot",
                          ("poisson", "bernoulli", "binomial")),
    "arrival_n": Param("int", "trials of binomial arrivals"),
    "service_dist": Param("choice", "law of service offered per server per slot",
                          ("bernoulli", "binomial", "poisson", "geometric")),
    "service_n": Param("int", "trials of binomial services"),
    "dispatch_weights": Param("floats", "split of the arrivals over the dispatchers (default equal)"),
    "msg_budget": Param("float", "LED: one-way messages per arriving task that set p_hat "
                        "(Push exact, Pull calibrated by pilot runs); not with p_hat"),
    "msg_budget_pod_d": Param("int", "LED: the message budget of Power-of-d with this d "
                              "(instead of msg_budget); not with p_hat"),
    "init_tail": Param("floats", "trajectory engine: the start s_1, s_2, ... (non-increasing "
                       "fractions in [0, 1], zeros after; round(N s_i) servers with >= i tasks); "
                       "with init=empty"),
}

#: run settings every stochastic task carries (not model parameters; the pipeline sets them)
RUN_KEYS = ("seed", "init", "n_batches", "max_level", "h", "precision", "precision_cap",
            "responses", "grid")

#: the estimate whose relative 95% half-width ``precision`` targets, per model (docs/sweeps.md)
MAIN_ESTIMATE: dict[str, str] = {"dispatch": "mean_response", "centralization": "mean_response",
                                 "jiq": "mean_response", "led": "mean_total_queue"}

#: engine limits the plan checks before compute
N_BATCHES_MAX = 500  # n_batches <= n_windows // 2 with the engines' 1000 windows
N_SERVERS_MAX = 2**62 - 1  # occupancy counts; agent engines need < 2**31 (their models check)


@dataclass(frozen=True)
class Entry:
    """One (engine, policy) of one model."""

    engine: str
    policy: str
    model: str  #: the package under sim/ (``dispatch``, ``centralization``, ...)
    runner: str  #: ``"module:function"`` taking the task dict, returning the result dict
    required: tuple[str, ...] = ()  #: parameters beyond n_servers and lam it needs
    optional: tuple[str, ...] = ()  #: parameters it accepts (defaults documented by the model)

    @property
    def params(self) -> tuple[str, ...]:
        sim_keys = ("events", "time") if self.engine in STOCHASTIC_ENGINES else ()
        return ("n_servers", "lam", *self.required, *sim_keys, *self.optional)


#: engines whose output is random (they take seeds, replications and a run length)
STOCHASTIC_ENGINES: tuple[str, ...] = ("agent", "occupancy", "slotted", "trajectory")

_D = "sim.dispatch"
_C = "sim.centralization.simulate"
_J = "sim.jiq"
_L = "sim.led.slotted:run_task"
#: what every slotted task may carry (defaults in sim.led.model.DEFAULTS)
_LED_LAWS = ("m_dispatchers", "arrival_dist", "arrival_n", "service_dist", "service_n",
             "service_rates", "dispatch_weights")
_LED_UPDATES = ("update", "p_hat", "d_u", "count_own", "msg_budget", "msg_budget_pod_d")
ENTRIES: tuple[Entry, ...] = (
    # the dispatch model: N FIFO servers, Poisson jobs of k tasks, one dispatching policy
    Entry("agent", "random", "dispatch", f"{_D}.parallel:run_task", (), ("k", "b", "service_rates")),
    Entry("agent", "jsq", "dispatch", f"{_D}.parallel:run_task", (), ("k", "b", "service_rates")),
    Entry("agent", "pod", "dispatch", f"{_D}.parallel:run_task", ("d",), ("b", "service_rates")),
    Entry("agent", "batch_filling", "dispatch", f"{_D}.parallel:run_task", ("d", "k"), ("b",)),
    Entry("agent", "batch_sampling", "dispatch", f"{_D}.parallel:run_task", ("d", "k"), ("b",)),
    Entry("agent", "pod_per_task", "dispatch", f"{_D}.parallel:run_task", ("d", "k"), ("b",)),
    # k-task jobs (random, jsq) and a finite buffer b (single-task jobs) in the mean field:
    # sim/dispatch/task_meanfield.py, sim/dispatch/buffer_meanfield.py
    Entry("meanfield", "random", "dispatch", f"{_D}.meanfield:run_task", (), ("k", "b")),
    Entry("meanfield", "jsq", "dispatch", f"{_D}.meanfield:run_task", (), ("k", "b")),
    Entry("meanfield", "pod", "dispatch", f"{_D}.meanfield:run_task", ("d",), ("b",)),
    Entry("meanfield", "batch_filling", "dispatch", f"{_D}.batch_meanfield:run_task", ("d", "k")),
    Entry("meanfield", "batch_sampling", "dispatch", f"{_D}.task_meanfield:run_task", ("d", "k")),
    Entry("meanfield", "pod_per_task", "dispatch", f"{_D}.task_meanfield:run_task", ("d", "k")),
    # the refined mean field, x* + V/N (Gast & Van Houdt; docs/refined.md)
    Entry("refined", "pod", "dispatch", f"{_D}.refined:run_task", ("d",), ("replacement",)),
    Entry("refined", "batch_filling", "dispatch", f"{_D}.refined_batch:run_task", ("d", "k")),
    Entry("occupancy", "random", "dispatch", f"{_D}.occupancy:run_task", (), ("k", "b")),
    Entry("occupancy", "jsq", "dispatch", f"{_D}.occupancy:run_task", (), ("k", "b")),
    Entry("occupancy", "pod", "dispatch", f"{_D}.occupancy:run_task", ("d",), ("b",)),
    Entry("occupancy", "batch_filling", "dispatch", f"{_D}.occupancy:run_task", ("d", "k"), ("b",)),
    Entry("occupancy", "batch_sampling", "dispatch", f"{_D}.occupancy:run_task", ("d", "k"), ("b",)),
    Entry("occupancy", "pod_per_task", "dispatch", f"{_D}.occupancy:run_task", ("d", "k"), ("b",)),
    # partial centralization (Tsitsiklis-Xu)
    Entry("agent", "central", "centralization", f"{_C}:run_agent_task", ("p",)),
    Entry("occupancy", "central", "centralization", f"{_C}:run_occupancy_task", ("p",)),
    Entry("meanfield", "central", "centralization", f"{_C}:run_meanfield_task", ("p",)),
    # distributed Join-the-Idle-Queue (Wang, Feng & Cheng): M = N / r schedulers with I-queues
    Entry("agent", "jiq", "jiq", f"{_J}.agent:run_task", ("r",)),
    Entry("agent", "jiq_pod", "jiq", f"{_J}.agent:run_task", ("r", "d")),
    Entry("agent", "jiq_original", "jiq", f"{_J}.agent:run_task", ("r",)),
    Entry("agent", "jiq_threshold", "jiq", f"{_J}.agent:run_task", ("r", "z")),
    Entry("agent", "jiq_sqd", "jiq", f"{_J}.agent:run_task", ("r", "d")),
    Entry("occupancy", "jiq", "jiq", f"{_J}.occupancy:run_task", ("r",)),
    Entry("occupancy", "jiq_pod", "jiq", f"{_J}.occupancy:run_task", ("r", "d")),
    Entry("occupancy", "jiq_sqd", "jiq", f"{_J}.occupancy:run_task", ("r", "d")),
    Entry("meanfield", "jiq", "jiq", f"{_J}.meanfield:run_task", ("r",)),
    Entry("meanfield", "jiq_pod", "jiq", f"{_J}.meanfield:run_task", ("r", "d")),
    Entry("meanfield", "jiq_sqd", "jiq", f"{_J}.meanfield:run_task", ("r", "d")),
    Entry("refined", "jiq", "jiq", f"{_J}.refined:run_task", ("r",)),
    Entry("refined", "jiq_pod", "jiq", f"{_J}.refined:run_task", ("r", "d")),
    Entry("refined", "jiq_sqd", "jiq", f"{_J}.refined:run_task", ("r", "d")),
    # trajectories s_i(t) on a time grid beside the mean-field ODE from the same start (real
    # exponential clock, runs to the horizon `time`; docs/transients.md)
    Entry("trajectory", "pod", "dispatch", f"{_D}.trajectory:run_task", ("d",), ("init_tail",)),
    Entry("trajectory", "batch_filling", "dispatch", f"{_D}.trajectory:run_task", ("d", "k"),
          ("init_tail",)),
    Entry("trajectory", "jiq", "jiq", f"{_J}.trajectory:run_task", ("r",), ("init_tail",)),
    Entry("trajectory", "jiq_pod", "jiq", f"{_J}.trajectory:run_task", ("r", "d"), ("init_tail",)),
    Entry("trajectory", "central", "centralization", "sim.centralization.trajectory:run_task",
          ("p",), ("init_tail",)),
    # multiple dispatchers with local estimated queue lengths (LED, Zhou, Shroff & Wierman):
    # discrete time; lam is the load rho = lam_Sigma / mu_Sigma
    Entry("slotted", "l_jsq", "led", _L, (), _LED_UPDATES + _LED_LAWS),
    Entry("slotted", "l_jba", "led", _L, (), _LED_UPDATES + _LED_LAWS),
    Entry("slotted", "l_pod", "led", _L, ("d",), _LED_UPDATES + _LED_LAWS),
    Entry("slotted", "jsq", "led", _L, (), _LED_LAWS),
    Entry("slotted", "pod", "led", _L, ("d",), _LED_LAWS),
    Entry("slotted", "jiq", "led", _L, (), _LED_LAWS),
    Entry("slotted", "random", "led", _L, (), _LED_LAWS),
    Entry("slotted", "weighted_random", "led", _L, (), _LED_LAWS),
)

_BY_KEY: dict[tuple[str, str], Entry] = {(e.engine, e.policy): e for e in ENTRIES}
assert len(_BY_KEY) == len(ENTRIES), "an (engine, policy) is declared twice"
for _e in ENTRIES:
    for _name in _e.required + _e.optional:
        assert _name in PARAMS, f"{_e.engine}/{_e.policy}: undeclared parameter {_name!r}"

#: engine name -> the policies it serves, in declaration order
ENGINE_POLICIES: dict[str, tuple[str, ...]] = {}
for _e in ENTRIES:
    ENGINE_POLICIES[_e.engine] = ENGINE_POLICIES.get(_e.engine, ()) + (_e.policy,)
ENGINES: tuple[str, ...] = tuple(ENGINE_POLICIES)
#: every policy name, in declaration order
POLICIES: tuple[str, ...] = tuple(dict.fromkeys(e.policy for e in ENTRIES))

#: result columns and their kinds: ``float``, ``int``, ``str``, ``floats`` (list of floats);
#: a row holds the ones its engine returns, the others are null (docs/results-schema.md)
RESULTS: dict[str, str] = {
    "mean_response": "float", "mean_response_se": "float",
    "mean_wait": "float", "mean_wait_se": "float",
    "prob_wait": "float", "prob_wait_se": "float",
    "mean_queue": "float", "mean_queue_se": "float",
    "tail": "floats", "tail_se": "floats",
    "queueing_ratio": "float", "queueing_ratio_se": "float",
    "drop_prob": "float", "drop_prob_se": "float",
    "frac_within_h": "float",
    "mean_queue_1n": "float",  # refined engine: E[Q] = x* + mean_queue_1n / N + O(1/N^2)
    "messages_per_job": "float",
    # JIQ: I-queues and message rates (per server per unit time, one-way messages)
    "p0": "float", "p0_se": "float", "mean_iqueue": "float", "mean_iqueue_se": "float",
    "join_rate": "float", "join_rate_se": "float", "delete_rate": "float",
    "delete_rate_se": "float", "probe_rate": "float", "probe_rate_se": "float",
    # LED (slotted engine): sums over the servers, at slot starts
    "mean_total_queue": "float", "mean_total_queue_se": "float",
    "unused_service": "float", "unused_service_se": "float",
    "imbalance": "float", "imbalance_se": "float",
    "eps": "float", "zeta": "float", "ht_ratio": "float", "ht_ratio_se": "float",
    "mean_u2": "float", "mean_u2_se": "float", "mean_qu": "float", "mean_qu_se": "float",
    "messages_per_job_se": "float", "p_hat_used": "float", "msg_budget_per_job": "float",
    "calib_slots": "int",
    # response-time distribution (dispatch agent and occupancy, JIQ occupancy; run.responses;
    # docs/responses.md): quantiles with batch-means SEs, the CCDF on a fixed grid
    "response_p50": "float", "response_p50_se": "float",
    "response_p90": "float", "response_p90_se": "float",
    "response_p99": "float", "response_p99_se": "float",
    "response_p999": "float", "response_p999_se": "float",
    "response_grid": "floats", "response_ccdf": "floats", "response_ccdf_se": "floats",
    "n_jobs": "int", "events_run": "int", "sim_time": "float", "warmup_time": "float",
    # run length by precision (sim.run): the relative 95% half-width of the model's main
    # estimate reached (every stochastic row) and the runs made to reach it (1 without a target)
    "rel_halfwidth": "float", "runs": "int",
    "ci_method": "str",
    # trajectory engine (docs/transients.md): the grid t_0..t_{G-1}; s_i(t) of the path and of
    # the ODE flattened level-major (entry (i - 1) * G + j is s_i(t_j), i = 1..traj_levels);
    # JIQ's p0(t); sup over the grid (and levels) of |path - ODE|
    "traj_time": "floats", "traj_levels": "int", "traj_tail": "floats", "traj_ode_tail": "floats",
    "traj_p0": "floats", "traj_ode_p0": "floats", "traj_sup_dist": "float",
    "traj_sup_dist_p0": "float",
    # partial centralization: the path's longest queue and the fluid model's top level m(t)
    "traj_top": "floats", "traj_ode_top": "floats",
}


def entry(engine: str, policy: str) -> Entry:
    """The entry of (engine, policy); ``ValueError`` naming both if there is none."""
    if engine not in ENGINE_POLICIES:
        raise ValueError(f"engine={engine!r} is unknown; valid engines: {', '.join(ENGINES)}")
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is unknown; valid policies: {', '.join(POLICIES)}")
    found = _BY_KEY.get((engine, policy))
    if found is None:
        raise ValueError(f"policy={policy!r} is not served by engine={engine!r}; "
                         f"it serves: {', '.join(ENGINE_POLICIES[engine])}")
    return found


def task_params(engine: str, policy: str) -> tuple[str, ...]:
    """The model parameters a task of (engine, policy) uses; the others are null in its row."""
    return entry(engine, policy).params


def _integral(x) -> bool:
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())


def _check_kind(name: str, value) -> None:
    """``ValueError`` naming the parameter unless ``value`` is of its declared kind."""
    par = PARAMS[name]
    if par.kind == "int":
        if not _integral(value):
            raise ValueError(f"{name}={value!r} must be an integer")
    elif par.kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ValueError(f"{name}={value!r} must be a finite number")
    elif par.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be true or false")
    elif par.kind == "choice":
        if value not in par.choices:
            raise ValueError(f"{name}={value!r} is not one of: {', '.join(par.choices)}")
    elif par.kind == "floats":
        if (not isinstance(value, (list, tuple)) or not value or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
            raise ValueError(f"{name}={value!r} must be a non-empty list of finite numbers")


def _check_run_settings(task: dict) -> None:
    lam = task["lam"]
    if lam <= 0:
        raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
    ev = task.get("events")
    if task["engine"] == "trajectory" and ev is None:
        ev = 1000  # optional there: only the plan's cost estimate (it runs to `time`)
    if not _integral(ev) or ev < 1000:
        raise ValueError(f"events={ev!r} must be an integer >= 1000")
    if ev >= 2**62:
        raise ValueError(f"events={ev!r} must be < 2**62")
    init = task.get("init", "meanfield")
    if init not in INIT_CHOICES:
        raise ValueError(f"init={init!r} is unknown; valid: {', '.join(INIT_CHOICES)}")
    nb = task.get("n_batches", 20)
    if not _integral(nb) or not 2 <= nb <= N_BATCHES_MAX:
        raise ValueError(f"n_batches={nb!r} must be an integer in [2, {N_BATCHES_MAX}]")
    seed = task.get("seed")
    if not _integral(seed) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    t = task.get("time")
    if t is not None and not t > 0:
        raise ValueError(f"time={t!r} must be > 0 (simulated time units)")
    if task["engine"] == "trajectory":
        if t is None:
            raise ValueError("time=None: engine='trajectory' needs time, the horizon T of the "
                             "trajectory (it runs to T; events only caps it)")
        grid = task.get("grid", 200)
        if not _integral(grid) or grid < 2:
            raise ValueError(f"grid={grid!r} must be an integer >= 2 (trajectory grid points "
                             "from 0 to time, both included)")
        if task.get("init_tail") is not None:  # a configured start (docs/transients.md)
            from sim.dispatch.trajectory import check_init_tail
            check_init_tail(task["init_tail"], task.get("init", "empty"))
        if task.get("precision") is not None:
            raise ValueError("precision: engine='trajectory' records a path to a fixed horizon; "
                             "a precision target does not apply (give more replications)")
    prec = task.get("precision")
    if prec is not None and (isinstance(prec, bool) or not isinstance(prec, (int, float))
                             or not 0 < prec < 1):
        raise ValueError(f"precision={prec!r} must be a number in (0, 1): the target relative "
                         "95% half-width of the main estimate")
    cap = task.get("precision_cap", 16)
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 1 <= cap <= 10**6:
        raise ValueError(f"precision_cap={cap!r} must be a number in [1, 1e6]: the longest run "
                         "as a multiple of the given length")


def check_task(task: dict) -> None:
    """Raise ``ValueError`` with the offending key and value if ``task`` cannot run.

    Generic checks first (the entry exists, no undeclared key, required parameters are present
    and each parameter the entry uses is of its declared kind), then the model's own value
    checks.
    """
    ent = entry(task.get("engine"), task.get("policy"))
    used = set(ent.params)
    for name in ent.params:
        if name in ("events", "time") or name in ent.optional:
            continue
        if task.get(name) is None:
            raise ValueError(f"{name} is required by policy={ent.policy!r} on engine={ent.engine!r}")
    for name, value in task.items():
        if name in ("engine", "policy") or name in RUN_KEYS or value is None:
            continue
        if name not in PARAMS:
            raise ValueError(f"{name}={value!r} is not a task key; parameters of "
                             f"{ent.engine}/{ent.policy}: {', '.join(ent.params)}")
        if name in used:  # a declared parameter another entry uses is ignored here (the
            _check_kind(name, value)  # plan never sends one: it is null in the row)
    n = task["n_servers"]
    if n < 1 or n > N_SERVERS_MAX:
        raise ValueError(f"n_servers={n!r} must be an integer in [1, {N_SERVERS_MAX}]")
    if ent.engine in STOCHASTIC_ENGINES:
        _check_run_settings(task)
    importlib.import_module(f"sim.{ent.model}").check_task(task)
