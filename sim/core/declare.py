"""How a model declares itself: :class:`Param`, :class:`Engine`, :class:`Entry` and :class:`Model`.

Each model package ``sim/<model>/__init__.py`` exports one ``MODEL = Model(...)``; the registry
(:mod:`sim.registry`) assembles them, and the pipeline and the general analyses ask the
registry what they need to know about a model (its entries, parameters, result columns, labels,
costs, response law, analyses) instead of naming it. docs/extending.md walks through a new
model file by file.

Nothing here knows a model or an engine: these are the shapes of a declaration and the checks
of its form. The engines are what the loaded models declare (:data:`DECLARED_ENGINES`, filled by
the registry); :data:`STOCHASTIC_ENGINES`, :data:`LIMIT_ENGINES`, :data:`PATH_ENGINES` and
:data:`PER_SERVER_ENGINES` are views of those declarations, computed when asked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from sim.core.results import is_number

__all__ = ["KINDS", "RESULT_KINDS", "ENGINE_KINDS", "DECLARED_ENGINES", "STOCHASTIC_ENGINES",
           "LIMIT_ENGINES", "PATH_ENGINES", "INT_LIMIT", "bound_text", "SHARED_PARAMS", "POSITIVE_LOAD_BELOW_ONE", "Param", "Engine", "Entry", "Policy", "policy_table", "record_of", "Model", "default_memory_bytes",
           "DEFAULT_BYTES_PER_SERVER", "DEFAULT_FIXED_BYTES", "PER_SERVER_ENGINES"]

#: kinds of a model parameter
KINDS = ("int", "float", "bool", "choice", "floats")
#: kinds of a result column
RESULT_KINDS = ("float", "int", "str", "floats")
#: kinds of an engine: a ``stochastic`` engine's output is random (its tasks take seeds,
#: replications and a run length, ``events`` or ``time``); a ``limit`` is exact for its
#: parameters (mean field, refined mean field): one row per point, no seed
ENGINE_KINDS = ("stochastic", "limit")


@dataclass(frozen=True)
class Engine:
    """An engine a model's entries run on: its name (the rows' ``engine`` column), its kind
    (:data:`ENGINE_KINDS`) and its name in words for figures and reports. Several models may
    declare one engine; their declarations must be equal (the registry checks)."""

    name: str
    kind: str
    label: str
    #: it keeps state per server (an entry per server): the default memory estimate
    #: (:func:`default_memory_bytes`) counts :data:`DEFAULT_BYTES_PER_SERVER` per server
    per_server: bool = False
    #: it records a path to a fixed horizon (a stochastic engine: ``time`` required, ``events``
    #: only a cap, the run setting ``grid``, ``init: empty`` by default; docs/transients.md)
    path: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"engine name {self.name!r} must be an identifier")
        if self.path and self.kind != "stochastic":
            raise ValueError(f"engine {self.name!r}: path=True needs kind='stochastic'")
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine {self.name!r}: kind={self.kind!r} is unknown; valid kinds: "
                             f"{', '.join(ENGINE_KINDS)}")


#: engine name -> its declaration, for every engine a loaded model declares (the registry adds
#: them as it loads models; nothing here names one)
DECLARED_ENGINES: dict[str, Engine] = {}


class EngineNames:
    """The names of the declared engines whose ``attr`` equals ``value``, in declaration order:
    a view of :data:`DECLARED_ENGINES` (an engine a model loaded later declares is in it)."""

    def __init__(self, attr: str, value):
        self._attr, self._value = attr, value

    def _names(self) -> tuple[str, ...]:
        return tuple(n for n, e in DECLARED_ENGINES.items() if getattr(e, self._attr) == self._value)

    def __contains__(self, name) -> bool:
        e = DECLARED_ENGINES.get(name) if isinstance(name, str) else None
        return e is not None and getattr(e, self._attr) == self._value

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


#: engines whose output is random: they take seeds, replications and a run length
STOCHASTIC_ENGINES = EngineNames("kind", "stochastic")
#: engines that compute a limit: one row per point, no seed
LIMIT_ENGINES = EngineNames("kind", "limit")
#: engines that record a path to a fixed horizon (the ``trajectory`` engines)
PATH_ENGINES = EngineNames("path", True)


#: The one bound of every integer the project counts with (servers, events, queue levels, Int64
#: columns): values stay below it, so that sums and doublings of two of them still fit a signed
#: 64-bit integer. Also the "no bound" of a kernel argument (an unbounded buffer, an uncapped
#: run). A test (tests/test_hygiene.py) checks that it is written out nowhere else.
INT_LIMIT = 2**62


def bound_text(x) -> str:
    """How a refusal writes a bound: :data:`INT_LIMIT` (and other powers of two from 2**20) by
    its exponent, a whole float without its ``.0``, anything else as ``repr``."""
    if isinstance(x, int) and x >= 2**20 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


@dataclass(frozen=True)
class Param:
    """A model parameter: its kind, a one-line meaning, its domain, the choices of a ``choice``,
    and how figures and reports name it: ``label``, axis words with units (``{unit}`` stands for
    the time unit the analysis fills in), and ``symbol``, the short name of legends and panel
    titles (``\u03bb = 0.9``). Without them a figure prints the column name.

    The domain, as scipy.stats' ``_ShapeInfo`` declares a shape parameter's: an interval
    ``domain = (low, high)`` with ``inclusive`` ends, integers for the ``int`` kind and reals for
    ``float``, each entry of the list for ``floats``. An integer's upper end is never above
    :data:`INT_LIMIT`, which it stays below. :meth:`refusal` is the one check of a value against
    the declaration (kind, then domain), and every refusal of a single parameter's value is
    its one-line message; relations between parameters (``k <= n_servers``) are the model's."""

    kind: str
    doc: str
    choices: tuple[str, ...] = ()
    label: str = ""
    symbol: str = ""
    #: the interval of valid values (``int``, ``float``; each entry of a ``floats`` list)
    domain: tuple[float, float] = (-math.inf, math.inf)
    #: whether each end of :attr:`domain` is a valid value
    inclusive: tuple[bool, bool] = (True, True)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {KINDS}")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError("a choice parameter (and only one) lists its choices")
        if not isinstance(self.label, str) or not isinstance(self.symbol, str):
            raise ValueError(f"label={self.label!r} and symbol={self.symbol!r} must be strings")
        low, high = self.domain
        if not low < high or (self.kind not in ("int", "float", "floats")
                              and self.domain != (-math.inf, math.inf)):
            raise ValueError(f"domain={self.domain!r}: an interval low < high, of a numeric kind")
        if self.kind == "int" and high >= INT_LIMIT:
            object.__setattr__(self, "domain", (max(low, -INT_LIMIT), INT_LIMIT))
            object.__setattr__(self, "inclusive", (self.inclusive[0], False))

    def within(self, x) -> bool:
        """``x`` (a number) is in the domain."""
        (low, high), (lo_in, hi_in) = self.domain, self.inclusive
        return (low < x or (lo_in and low == x)) and (x < high or (hi_in and x == high))

    def domain_text(self, value=None) -> str:
        """The domain in words, as a refusal ends: ``an integer >= 1``, ``a number in [0, 1)``;
        an integer's bound :data:`INT_LIMIT` is named only to a ``value`` that passes it."""
        what = "an integer" if self.kind == "int" else "a number"
        (low, high), (lo_in, hi_in) = self.domain, self.inclusive
        top = high == math.inf or (high == INT_LIMIT and (value is None or value < high))
        if low == -math.inf and top:
            return what if self.kind == "int" else "a finite number"
        if top:
            return f"{what} {'>=' if lo_in else '>'} {bound_text(low)}"
        if low == -math.inf:
            return f"{what} {'<=' if hi_in else '<'} {bound_text(high)}"
        return f"{what} in {'[' if lo_in else '('}{bound_text(low)}, {bound_text(high)}{']' if hi_in else ')'}"

    def refusal(self, name: str, value) -> str | None:
        """The one-line refusal of ``value`` for parameter ``name`` (``None`` if it is valid):
        its kind, then its domain, generated from this declaration."""
        if self.kind in ("int", "float"):
            if not is_number(value) or not math.isfinite(float(value)):
                return f"{name}={value!r} must be {'an integer' if self.kind == 'int' else 'a finite number'}"
            if self.kind == "int" and not float(value).is_integer():
                return f"{name}={value!r} must be an integer"
            if not self.within(value):
                return f"{name}={value!r} must be {self.domain_text(value)}"
        elif self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                return f"{name}={value!r} must be true or false"
        elif self.kind == "choice":
            if value not in self.choices:
                return f"{name}={value!r} is not one of: {', '.join(self.choices)}"
        elif self.kind == "floats":
            if (isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) == 0
                    or not all(is_number(v) and math.isfinite(float(v)) for v in value)):
                return f"{name}={value!r} must be a non-empty list of finite numbers"
            for i, v in enumerate(value):
                if not self.within(v):
                    return f"{name}[{i}]={v!r} must be {self.domain_text(v)}"
        return None

    def check(self, name: str, value):
        """``value`` if it is valid (an ``int`` for the ``int`` kind, a ``float`` for ``float``:
        YAML formulas give integer-valued floats), else ``ValueError`` with :meth:`refusal`'s
        message."""
        message = self.refusal(name, value)
        if message is not None:
            raise ValueError(message)
        return int(value) if self.kind == "int" else float(value) if self.kind == "float" else value


#: parameters every model shares: the size, the load and the run length (a model may restate
#: one with a narrower domain in its own ``params``: its tasks are checked against its own)
SHARED_PARAMS: dict[str, Param] = {
    "n_servers": Param("int", "N, the number of servers (stations)",
                       label="number of servers N", symbol="N", domain=(1, INT_LIMIT)),
    "lam": Param("float", "load: arrival rate per unit of total service rate",
                 label="load \u03bb (arrival rate per server; service rate 1)", symbol="\u03bb",
                 domain=(0.0, math.inf)),
    "events": Param("int", "run length of a simulation: events, warm-up included",
                    label="run length (events)", domain=(1000, INT_LIMIT)),
    "time": Param("float", "run length in simulated time (mean service time 1; slots for the "
                  "slotted engine), warm-up included: the plan turns it into events",
                  label="run length ({unit})", domain=(0.0, math.inf), inclusive=(False, True)),
}


#: ``lam`` where a limit or an engine needs a positive load below one (the JIQ mean field,
#: whose p0 solves a normalisation that degenerates at lam = 0; the refined mean fields and the
#: population limits without a buffer; the trajectories; the general-size engine)
POSITIVE_LOAD_BELOW_ONE = Param("float", "load: arrival rate per unit of total service rate, "
                                "in (0, 1)", domain=(0.0, 1.0), inclusive=(False, False))


@dataclass(frozen=True)
class Entry:
    """One (engine, policy) of one model: the runner and the parameters it takes."""

    engine: str
    policy: str
    #: ``"module:function"`` taking the task dict and returning the result dict; imported only
    #: when used, so that each engine's compiled kernels load only where they run
    runner: str
    required: tuple[str, ...] = ()  #: parameters beyond n_servers and lam it needs
    optional: tuple[str, ...] = ()  #: parameters it accepts (defaults documented by the model)
    model: str = ""  #: the declaring model's name (set by :class:`Model`)
    #: the parameters every model shares that it needs: n_servers and lam, or none for a limit
    #: of the whole path that takes N and the load in other coordinates (dispatch's
    #: ``heavy_traffic``: ``log10_n`` and ``one_minus_lam``)
    shared: tuple[str, ...] = ("n_servers", "lam")
    #: a small task of this entry (its parameters, and for a stochastic engine its ``events``),
    #: run by the contract check :func:`sim.testing.check_model` in a fraction of a second
    example: dict = field(default_factory=dict, compare=False, hash=False)
    #: limit engine -> the measured gap of the main estimate between this entry's example and
    #: that limit, allowed beyond 4 standard errors (finite-N effects; say where it was measured)
    example_allowance: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def stochastic(self) -> bool:
        return self.engine in STOCHASTIC_ENGINES

    @property
    def params(self) -> tuple[str, ...]:
        """Every parameter a task of this entry uses: the shared ones (n_servers, lam), the
        required ones, the run length (stochastic engines) and the optional ones."""
        sim_keys = ("events", "time") if self.stochastic else ()
        return (*self.shared, *self.required, *sim_keys, *self.optional)


@dataclass(frozen=True)
class Policy:
    """A policy of one model: its name (the rows' ``policy`` column), the integer code its
    compiled kernels branch on (kernels never receive the record, only the code), and its name
    in words for figures and reports. A model subclasses it with what its readers need to know
    about a policy (whether it samples queues, which engines serve it, ...) and lists its
    records once, in one table (``sim/<model>/policies.py``); :attr:`Model.policy_decls` carries
    them, and the model's labels are theirs."""

    name: str
    code: int
    label: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"policy name {self.name!r} must be an identifier")


def policy_table(*records: Policy) -> dict[str, Policy]:
    """Name -> record of a model's policies, in the order given; a name or a kernel code given
    twice is refused."""
    table = {p.name: p for p in records}
    if len(table) != len(records) or len({p.code for p in records}) != len(records):
        raise ValueError(f"policies {[p.name for p in records]}: a name or a kernel code is given twice")
    return table


def record_of(table: dict, name, model: str):
    """The record of a policy given by name in a model's table (a record is returned as it
    is); ``ValueError`` naming the policy and the valid names if the model has no such policy."""
    key = name.name if isinstance(name, Policy) else name
    found = table.get(key) if isinstance(key, str) else None
    if isinstance(name, Policy) and found is not name:
        found = None
    if found is None:
        raise ValueError(f"policy={name!r} is not a {model} policy; valid: {', '.join(table)}")
    return found


@dataclass(frozen=True)
class PrecisePath:
    """A limit engine that carries a sweep's path of N past the float range, where N, the load
    or another parameter no longer fits a float or an Int64 column (a sweep's
    ``limit_path.<engine>`` section, docs/sweeps.md). The plan evaluates the sweep's formulas at
    N = 10^x in high precision and asks :attr:`coordinates` for the engine's own parameters,
    which take the place of those in :attr:`stands_for`."""

    #: the limit engine whose tasks the path's points are (one of the model's entries' engines)
    engine: str
    #: the largest N the engine takes
    n_servers_max: float
    #: the parameters the engine takes in other coordinates: their columns are null where
    #: their values pass the Int64 range
    stands_for: tuple[str, ...]
    #: the parameter columns :attr:`coordinates` fills, in order
    columns: tuple[str, ...]
    #: ``coordinates(exact, log10_n) -> {column: float or None}``: the engine's coordinates of
    #: a point from its values in high precision (``exact``: every parameter as the evaluator
    #: gives it, N included; called while that precision is in force)
    coordinates: Callable[[dict, float], dict]


__all__ += ["PrecisePath"]


def _unit_cost(task: dict) -> float:
    return 1.0


#: the default memory estimate (:func:`default_memory_bytes`): bytes per server of an engine
#: that keeps one entry per server, and a fixed part (window arrays, small tables) of any task
DEFAULT_BYTES_PER_SERVER = 64
DEFAULT_FIXED_BYTES = 2 * 2**20
#: engines that keep state per server (declared ``per_server``); any other engine's state is
#: O(levels), independent of N, unless its model says otherwise
PER_SERVER_ENGINES = EngineNames("per_server", True)


def default_memory_bytes(task: dict) -> float:
    """The memory estimate of a model that declares none: ``DEFAULT_BYTES_PER_SERVER`` bytes per
    server on a per-server engine (:data:`PER_SERVER_ENGINES`), plus ``DEFAULT_FIXED_BYTES`` for any task.
    An out-of-tree model whose engines hold more per server, or grow with another parameter,
    declares its own ``memory_bytes`` (docs/extending.md)."""
    per = DEFAULT_BYTES_PER_SERVER * float(task["n_servers"]) if task.get("engine") in PER_SERVER_ENGINES else 0.0
    return per + DEFAULT_FIXED_BYTES


@dataclass(frozen=True)
class Model:
    """What the rest of the project needs to know about one model.

    ``name`` is the model's name in configs and rows (``model`` column): a shipped model's is
    its package under ``sim/`` (``dispatch``); an out-of-tree model's is the module path it is
    imported by (docs/extending.md).
    """

    name: str
    #: one line saying what the model is (``lbsweep --help``, docs)
    title: str
    entries: tuple[Entry, ...]
    #: the parameters its entries use, beyond the ones every model shares (n_servers, lam,
    #: events, time); a name two models declare must have the same kind
    params: dict[str, Param]
    #: result columns its engines may return (kind per column); a row holds the ones its engine
    #: returns, the others are null
    results: dict[str, str]
    #: the estimate whose relative 95% half-width ``run.precision`` targets
    main_estimate: str
    #: ``events_per_time(task)``: events per unit of simulated time (``time`` -> ``events``)
    events_per_time: Callable[[dict], float]
    #: ``check_task(task)``: the model's value checks, ``ValueError`` naming key and value; runs
    #: in the plan before any compute, so it must stay light (no compiled module)
    check_task: Callable[[dict], None]
    #: policy -> its name in words, for figures and reports (default: the labels of
    #: ``policy_decls``)
    labels: dict[str, str] = field(default_factory=dict)
    #: engines that record response-time distributions when a sweep sets ``run.responses``
    responses: tuple[str, ...] = ()
    #: ``event_cost(task)``: the planning cost of one event of a stochastic task, in units of
    #: a plain agent event (used to group tasks and estimate run times, never for results)
    event_cost: Callable[[dict], float] = _unit_cost
    #: ``memory_bytes(task)``: the peak bytes of the arrays one task allocates (its state, as
    #: the engine sizes it: O(N) for agent engines, O(levels) for occupancy engines, the
    #: mean-field tables, ...), estimated from the task's parameters without allocating or
    #: compiling anything; the plan refuses a task above ``execution.memory_share`` of the
    #: machine's memory (docs/sweeps.md). Default: :func:`default_memory_bytes`
    memory_bytes: Callable[[dict], float] = default_memory_bytes
    #: ``response_law(policy, params)``: the N = infinity response-time law of a point
    #: (an object with ``quantile(q)`` and ``ccdf(t)``), or None where the model has none
    response_law: Callable[[str, dict], object] | None = None
    #: a model kept outside the project: its own analyses, which live outside analysis/
    #: (name -> ``"module:function"`` taking ``(frame, params, outdir, sweep_name)``, as in
    #: ``analysis/catalog.py``, which lists every in-tree analysis). The plan checks a sweep's
    #: names against both without importing them (``pipeline/analyses.py``); the run imports them
    analyses: dict[str, str] = field(default_factory=dict)
    #: theory the analyses need beyond the rows (closed forms at points no row has, the
    #: headline's asymptotics): name -> ``"module:function"``, a pure numpy/scipy function
    #: (no kernels, no simulation), imported only when an analysis asks for it through
    #: ``analysis.declared.theory(model, name)``, so that analysis/ never imports a model
    theory: dict[str, str] = field(default_factory=dict)
    #: the engines its entries run on (:class:`Engine`: name, kind, label). An engine another
    #: loaded model declares may be used without declaring it again; an entry on an engine no
    #: loaded model declares is refused when the model is registered
    engine_decls: tuple[Engine, ...] = ()
    #: the model's policy records (:class:`Policy` subclasses), one per policy its entries name
    policy_decls: tuple[Policy, ...] = ()
    #: the limit engine that carries the sweep's path past the float range, where the model
    #: has one (:class:`PrecisePath`)
    precise_path: PrecisePath | None = None

    def __post_init__(self):
        if not self.entries:
            raise ValueError(f"model {self.name!r} declares no entries")
        if not isinstance(self.engine_decls, tuple) or not all(isinstance(e, Engine) for e in self.engine_decls):
            raise ValueError(f"model {self.name!r}: engine_decls must be Engine(name, kind, label) declarations")
        names = [e.name for e in self.engine_decls]
        if len(set(names)) != len(names):
            raise ValueError(f"model {self.name!r} declares an engine twice")
        fixed = tuple(replace(e, model=self.name) for e in self.entries)
        object.__setattr__(self, "entries", fixed)
        keys = [(e.engine, e.policy) for e in fixed]
        if len(set(keys)) != len(keys):
            raise ValueError(f"model {self.name!r} declares an (engine, policy) twice")
        for kind in self.results.values():
            if kind not in RESULT_KINDS:
                raise ValueError(f"model {self.name!r}: result kind {kind!r} is not one of {RESULT_KINDS}")
        for name, ref in {**self.analyses, **self.theory}.items():
            if not (isinstance(ref, str) and ref.count(":") == 1 and all(ref.split(":"))):
                raise ValueError(f"model {self.name!r}: {name!r} -> {ref!r} must be 'module:function'")
        if self.precise_path is not None and self.precise_path.engine not in {e.engine for e in fixed}:
            raise ValueError(f"model {self.name!r}: its precise path's engine "
                             f"{self.precise_path.engine!r} runs none of its entries")
        if self.policy_decls:
            names = {p.name for p in self.policy_decls}
            if names != {e.policy for e in fixed}:
                raise ValueError(f"model {self.name!r}: its policy records {sorted(names)} and the "
                                 f"policies of its entries {sorted({e.policy for e in fixed})} differ")
            object.__setattr__(self, "labels", {**{p.name: p.label for p in self.policy_decls},
                                                **self.labels})
        missing = sorted({e.policy for e in fixed} - set(self.labels))
        if missing:
            raise ValueError(f"model {self.name!r}: no label for policies {missing}")

    def param(self, name: str) -> Param:
        """The declaration a value of ``name`` is checked against in this model: its own (or
        its restatement of a shared one), else the shared one (:data:`SHARED_PARAMS`)."""
        own = self.params.get(name)
        return own if own is not None else SHARED_PARAMS[name]

    def check_values(self, **values) -> tuple:
        """Each given value that is not None against its declaration (:meth:`param`):
        ``ValueError`` with the first refusal (:meth:`Param.refusal`), else the values in the
        order given, as :meth:`Param.check` returns them (an integer-valued float as an
        ``int``; None kept). What the model's simulators call on their arguments, so that a
        direct call is refused in the words of the plan's check and runs on the values a task
        of the plan would."""
        return tuple(None if value is None else self.param(name).check(name, value)
                     for name, value in values.items())

    def checked(self, **values) -> tuple:
        """As :meth:`check_values`, for values that must be given: None is refused too."""
        return tuple(self.param(name).check(name, value) for name, value in values.items())

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.policy for e in self.entries))

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.engine for e in self.entries))
