"""The registry: the models' declarations assembled, and the checks of a task.

Each model package exports one :class:`~sim.core.declare.Model` (``sim/<model>/__init__.py``:
``MODEL``); this module collects them and answers what the rest of the project asks about a
model without naming one: :func:`check_task` (here), the pipeline's plan (types of axes and
formulas, which parameters an entry needs, which are null in a row, the model of a policy),
the Parquet schema (a column type per parameter and per result), the general analyses (labels,
response laws) and the docs (a test checks that docs/results-schema.md names every parameter
and result column declared here).

- :data:`MODELS`: name -> declaration, the shipped models first (:data:`SHIPPED`: every package
  under ``sim/`` but ``core``); an out-of-tree model joins with :func:`load_model` (a sweep's
  ``models:`` list; docs/extending.md).
- :data:`PARAMS`: every model parameter a task may carry, with its kind (``int``, ``float``,
  ``bool``, ``choice``, ``floats``): :data:`SHARED_PARAMS` and every model's own.
- :data:`ENTRIES`: one :class:`~sim.core.declare.Entry` per (model, engine, policy). The same
  (engine, policy) may be declared by two models: a sweep that names no ``model`` gets the
  owner of the policy name in the frozen table :data:`POLICY_OWNERS` (today's names; it never
  grows), and a clash between models added later needs ``model:`` (:func:`entry` refuses to
  guess). Today every (engine, policy) is unique; ``jsq``, ``pod``, ``random`` and ``jiq``
  each exist in two models on different engines.
- :data:`DECLARED_ENGINES` (:mod:`sim.core.declare`): every engine a registered model declares
  (:class:`~sim.core.declare.Engine`: name, kind, label); :data:`STOCHASTIC_ENGINES` and
  :data:`LIMIT_ENGINES` are views of it by kind, :data:`PATH_ENGINES` the engines that record
  a path to a horizon (``Engine.path``). An entry on an engine no registered model
  declares is refused when its model registers.
- :data:`RESULTS`: every result column an engine may return (:data:`COMMON_RESULTS` and the
  models' own), with its kind.

The module-level tables are views that :func:`load_model` updates in place, so that code which
imported them sees a model loaded later.
"""
from __future__ import annotations

import dataclasses
import importlib
from types import MappingProxyType
from typing import Mapping

from sim.core.declare import (
    DECLARED_ENGINES,
    ENGINE_KINDS,
    LIMIT_ENGINES,
    PATH_ENGINES,
    SHARED_PARAMS,
    STOCHASTIC_ENGINES,
    Engine,
    Entry,
    Model,
    Param,
)
from sim.core.results import RESULT_KEYS
from sim.core.settings import INIT_CHOICES, N_BATCHES_MAX, SETTING_KEYS, RunSettings
from sim.core.trajectory import TRAJECTORY_DEFAULTS, check_init_tail

__all__ = ["Param", "Engine", "Entry", "Model", "MODELS", "SHIPPED", "SHARED_PARAMS", "PARAMS", "ENTRIES",
           "RESULTS", "COMMON_RESULTS", "ENGINES", "POLICIES", "ENGINE_POLICIES",
           "STOCHASTIC_ENGINES", "LIMIT_ENGINES", "PATH_ENGINES", "DECLARED_ENGINES", "RUN_KEYS", "MAIN_ESTIMATE", "entry", "model", "model_of",
           "models_serving", "POLICY_OWNERS", "owner", "ambiguous", "load_model", "check_task", "policy_label", "INIT_CHOICES",
           "N_BATCHES_MAX", "param_of"]


def _shipped() -> tuple[str, ...]:
    """Every package under ``sim/`` other than ``core``: each is a model and declares itself."""
    import pkgutil

    here = __file__.rsplit("/", 1)[0]
    return tuple(sorted(m.name for m in pkgutil.iter_modules([here]) if m.ispkg and m.name != "core"))


#: the models shipped with the project: every package under sim/ but core (alphabetical)
SHIPPED = _shipped()

#: result columns every engine may return, whatever the model: the rows the shared builders
#: write (:data:`sim.core.results.RESULT_KEYS`), the response-time distribution
#: (:mod:`sim.core.responses`; run.responses), the run length reached by precision
#: (:func:`sim.run`) and the trajectory columns (:mod:`sim.core.trajectory`)
COMMON_RESULTS: dict[str, str] = {
    **{k: ("floats" if k in ("tail", "tail_se") else "int" if k in ("n_jobs", "events_run")
           else "str" if k == "ci_method" else "float") for k in RESULT_KEYS},
    # response-time distribution (docs/responses.md): quantiles with batch-means SEs, the CCDF
    # on a fixed grid
    "response_p50": "float", "response_p50_se": "float",
    "response_p90": "float", "response_p90_se": "float",
    "response_p99": "float", "response_p99_se": "float",
    "response_p999": "float", "response_p999_se": "float",
    "response_grid": "floats", "response_ccdf": "floats", "response_ccdf_se": "floats",
    # run length by precision (sim.run): the relative 95% half-width of the model's main
    # estimate reached (every stochastic row) and the runs made to reach it (1 without a target)
    "rel_halfwidth": "float", "runs": "int",
    # trajectory engine (docs/transients.md): the grid t_0..t_{G-1}; s_i(t) of the path and of
    # the ODE flattened level-major (entry (i - 1) * G + j is s_i(t_j), i = 1..traj_levels);
    # sup over the grid and levels of |path - ODE|
    "traj_time": "floats", "traj_levels": "int", "traj_tail": "floats", "traj_ode_tail": "floats",
    "traj_sup_dist": "float",
}

#: run settings a task carries (not model parameters; the pipeline sets them): the fields of
#: :class:`sim.core.settings.RunSettings`, whose defaults and checks are there
RUN_KEYS = SETTING_KEYS

MODELS: dict[str, Model] = {}
PARAMS: dict[str, Param] = dict(SHARED_PARAMS)
RESULTS: dict[str, str] = dict(COMMON_RESULTS)
ENTRIES: list[Entry] = []
#: model name -> the estimate ``run.precision`` targets (:attr:`Model.main_estimate`)
MAIN_ESTIMATE: dict[str, str] = {}
#: engine name -> the policies it serves (any model), in declaration order
ENGINE_POLICIES: dict[str, tuple[str, ...]] = {}
#: every engine and every policy name, in declaration order
ENGINES: list[str] = []
POLICIES: list[str] = []
_BY_KEY: dict[tuple[str, str, str], Entry] = {}


def _add(decl: Model) -> None:
    """Check ``decl`` against what is registered, then add it to every table."""
    if decl.name in MODELS:
        raise ValueError(f"model {decl.name!r} is declared twice")
    for name, par in decl.params.items():
        known = PARAMS.get(name)
        if known is not None and known.kind != par.kind:
            raise ValueError(f"model {decl.name!r}: parameter {name!r} is a {par.kind} but "
                             f"another model declares it a {known.kind}")
        for attr in ("label", "symbol"):
            mine, theirs = getattr(par, attr), getattr(known, attr, "") if known else ""
            if mine and theirs and mine != theirs:
                raise ValueError(f"model {decl.name!r}: parameter {name!r} has {attr} {mine!r} but "
                                 f"another model declares {theirs!r}")
    for name, kind in decl.results.items():
        if RESULTS.get(name, kind) != kind:
            raise ValueError(f"model {decl.name!r}: result {name!r} is a {kind} but another "
                             f"model declares it a {RESULTS[name]}")
    for e in decl.entries:
        for name in e.required + e.optional:
            if name not in decl.params and name not in SHARED_PARAMS:
                raise ValueError(f"model {decl.name!r}, {e.engine}/{e.policy}: parameter "
                                 f"{name!r} is not declared in its params")
    if decl.main_estimate not in decl.results and decl.main_estimate not in COMMON_RESULTS:
        raise ValueError(f"model {decl.name!r}: main_estimate {decl.main_estimate!r} is not a "
                         "result column")
    for eng in decl.engine_decls:
        known = DECLARED_ENGINES.get(eng.name)
        if known is not None and known != eng:
            raise ValueError(f"model {decl.name!r}: engine {eng.name!r} is declared as {eng} but "
                             f"another model declares it as {known}")
    mine = {eng.name for eng in decl.engine_decls}
    for e in decl.entries:
        if e.engine not in mine and e.engine not in DECLARED_ENGINES:
            raise ValueError(f"model {decl.name!r}, {e.engine}/{e.policy}: engine {e.engine!r} is not "
                             f"declared; add Engine({e.engine!r}, kind, label) to its engine_decls "
                             f"(kinds: {', '.join(ENGINE_KINDS)})")
    MODELS[decl.name] = decl
    for eng in decl.engine_decls:
        DECLARED_ENGINES.setdefault(eng.name, eng)
    for name, par in decl.params.items():
        known = PARAMS.setdefault(name, par)
        if known is not par and ((par.label and not known.label) or (par.symbol and not known.symbol)):
            PARAMS[name] = dataclasses.replace(known, label=known.label or par.label,
                                               symbol=known.symbol or par.symbol)
    for name, kind in decl.results.items():
        RESULTS.setdefault(name, kind)
    MAIN_ESTIMATE[decl.name] = decl.main_estimate
    for e in decl.entries:
        ENTRIES.append(e)
        _BY_KEY[(decl.name, e.engine, e.policy)] = e
        ENGINE_POLICIES[e.engine] = tuple(dict.fromkeys(ENGINE_POLICIES.get(e.engine, ()) + (e.policy,)))
        if e.engine not in ENGINES:
            ENGINES.append(e.engine)
        if e.policy not in POLICIES:
            POLICIES.append(e.policy)


def load_model(name: str) -> Model:
    """The declaration of model ``name``, importing it if it is not registered yet.

    A shipped model is ``sim.<name>``; any other name is imported as a module path (an
    out-of-tree model: a package on ``sys.path`` whose ``__init__`` exports ``MODEL`` with
    ``MODEL.name == name``; docs/extending.md). ``ValueError`` naming the model otherwise.
    """
    if name in MODELS:
        return MODELS[name]
    if not isinstance(name, str) or not name or not all(p.isidentifier() for p in name.split(".")):
        raise ValueError(f"model={name!r} is not a model name (a module path such as 'my_model')")
    module_name = f"sim.{name}" if name in SHIPPED else name
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"model={name!r} cannot be imported ({exc}); shipped models: "
                         f"{', '.join(SHIPPED)}") from None
    decl = getattr(module, "MODEL", None)
    if not isinstance(decl, Model):
        raise ValueError(f"model={name!r}: module {module_name} exports no MODEL "
                         "(a sim.core.declare.Model)")
    if decl.name != name:
        raise ValueError(f"model={name!r}: module {module_name} declares the name {decl.name!r}; "
                         "an out-of-tree model's name is its module path")
    _add(decl)
    return decl


for _name in SHIPPED:
    load_model(_name)

#: the column order of parameters in rows and reports: these first, in this order (as it was
#: before the models declared themselves, so that archived runs reproduce line for line), then
#: any other parameter in the order the models declare it
_COLUMN_ORDER = ("n_servers", "lam", "d", "k", "b", "p", "events", "time", "service_rates", "r",
                 "z", "replacement", "m_dispatchers", "update", "p_hat", "d_u", "count_own",
                 "arrival_dist", "arrival_n", "service_dist", "service_n", "dispatch_weights",
                 "msg_budget", "msg_budget_pod_d", "init_tail")
_ordered = {name: PARAMS[name] for name in _COLUMN_ORDER if name in PARAMS}
_ordered.update(PARAMS)
PARAMS.clear()
PARAMS.update(_ordered)


def model(name: str) -> Model:
    """The registered declaration of ``name`` (:func:`load_model` imports it if needed)."""
    return load_model(name)


def precise_paths() -> dict:
    """Engine -> the precise path (:class:`~sim.core.declare.PrecisePath`: a limit engine that
    carries a sweep's path of N past the float range) a registered model declares on it."""
    out: dict = {}
    for decl in MODELS.values():
        if decl.precise_path is not None:
            out.setdefault(decl.precise_path.engine, decl.precise_path)
    return out


def models_serving(engine: str, policy: str) -> list[str]:
    """The registered models that declare (engine, policy)."""
    return [m for (m, e, p) in _BY_KEY if e == engine and p == policy]


#: The policy names of the shipped models when policies became their model's, each with the
#: models that declared it then. A sweep without ``model:`` whose (engine, policy) several
#: registered models declare gets the one model of these that declares it. This table must
#: never grow, for a new model or a new policy: a model added later (shipped or out of tree)
#: whose policy name clashes with one here is reached only with ``model:`` in the sweep, so that
#: adding a model never changes what an existing command line or archive means.
POLICY_OWNERS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "random": ("dispatch", "led"), "jsq": ("dispatch", "led"), "pod": ("dispatch", "led"),
    "batch_filling": ("dispatch",), "batch_sampling": ("dispatch",), "pod_per_task": ("dispatch",),
    "central": ("centralization",),
    "jiq": ("jiq", "led"), "jiq_pod": ("jiq",), "jiq_original": ("jiq",), "jiq_threshold": ("jiq",),
    "jiq_sqd": ("jiq",),
    "l_jsq": ("led",), "l_jba": ("led",), "l_pod": ("led",), "weighted_random": ("led",),
})


def ambiguous(engine: str, policy: str, candidates: list[str], fix: str) -> str:
    """The one-line refusal of a policy several models declare on one engine, naming the fix
    (``model: <fix>`` in the sweep)."""
    return (f"policy={policy!r} on engine={engine!r} is declared by the models "
            f"{', '.join(candidates)}: name one with model= (model: {fix} in the sweep file, or "
            f"model={fix} on the command line)")


def owner(engine: str, policy: str) -> str | None:
    """The model a sweep without ``model:`` means by (engine, policy): the one registered model
    that declares it, else the one of :data:`POLICY_OWNERS` among those that do; None where
    neither settles it (the sweep must name its model)."""
    candidates = models_serving(engine, policy)
    if len(candidates) == 1:
        return candidates[0]
    owners = [m for m in candidates if m in POLICY_OWNERS.get(policy, ())]
    return owners[0] if len(owners) == 1 else None


def entry(engine: str, policy: str, model: str | None = None) -> Entry:
    """The entry of (model, engine, policy); ``ValueError`` naming them if there is none.

    Without ``model`` the model is inferred from (engine, policy) (:func:`owner`): the one
    model that declares it, else its owner in :data:`POLICY_OWNERS`; where neither settles it
    the error names the candidates and ``model:`` as the fix.
    """
    if model is not None:
        decl = load_model(model)
        found = _BY_KEY.get((model, engine, policy))
        if found is None:
            pairs = ", ".join(f"{e.engine}/{e.policy}" for e in decl.entries)
            raise ValueError(f"model={model!r} has no policy={policy!r} on engine={engine!r}; "
                             f"it declares: {pairs}")
        return found
    if engine not in ENGINE_POLICIES:
        raise ValueError(f"engine={engine!r} is unknown; valid engines: {', '.join(ENGINES)}")
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is unknown; valid policies: {', '.join(POLICIES)}")
    candidates = models_serving(engine, policy)
    if not candidates:
        raise ValueError(f"policy={policy!r} is not served by engine={engine!r}; "
                         f"it serves: {', '.join(ENGINE_POLICIES[engine])}")
    found = owner(engine, policy)
    if found is None:
        later = [m for m in candidates if m not in POLICY_OWNERS.get(policy, ())]
        raise ValueError(ambiguous(engine, policy, candidates, (later or candidates)[-1]))
    return _BY_KEY[(found, engine, policy)]


def model_of(task: dict) -> Model:
    """The declaration of a task's model (its ``model`` key, or inferred from its engine and
    policy)."""
    name = task.get("model")
    if name is None:
        name = entry(task.get("engine"), task.get("policy")).model
    return load_model(name)


def policy_label(policy: str, model: str | None = None, engine: str | None = None) -> str:
    """A policy's name in words, from its model's labels (the policy name where no registered
    model, or several with different labels, could be meant)."""
    if model is not None and model in MODELS:
        return MODELS[model].labels.get(policy, policy)
    names = {m.labels[policy] for m in MODELS.values() if policy in m.labels
             and (engine is None or any(e.engine == engine and e.policy == policy for e in m.entries))}
    return names.pop() if len(names) == 1 else policy


def param_of(name: str, model: str | None = None) -> Param:
    """The declaration of parameter ``name`` that a task of ``model`` is checked against: the
    model's own where it declares or restates it (a narrower domain of a shared parameter, as
    lam < 1 of a model without buffers), else the registered one (:data:`PARAMS`)."""
    return MODELS[model].param(name) if model in MODELS and name in MODELS[model].params else PARAMS[name]


def _check_run_settings(task: dict) -> None:
    """A stochastic task's run length and run settings (:class:`~sim.core.settings.RunSettings`:
    their checks are defined there once), and what the settings mean on its engine."""
    lam = task["lam"]
    if lam <= 0:
        raise ValueError(f"lam={lam!r}: a simulation needs lam > 0 (no job would arrive)")
    ev = task.get("events")
    trajectory = task["engine"] in PATH_ENGINES  # the trajectory engines (Engine.path)
    if trajectory and ev is None:
        ev = 1000  # optional there: only the plan's cost estimate (it runs to `time`)
    PARAMS["events"].check("events", ev)
    settings = RunSettings.from_task(task, required=("seed",), **(TRAJECTORY_DEFAULTS if trajectory else {}))
    t = task.get("time")
    if trajectory:
        if t is None:
            raise ValueError(f"time=None: engine={task['engine']!r} needs time, the horizon T of the "
                             "trajectory (it runs to T; events only caps it)")
        if task.get("init_tail") is not None:  # a configured start (docs/transients.md)
            check_init_tail(task["init_tail"], settings.init)
        if settings.precision is not None:
            raise ValueError(f"precision: engine={task['engine']!r} records a path to a fixed horizon; "
                             "a precision target does not apply (give more replications)")
    est = settings.precision_estimate
    if est is not None and (RESULTS.get(est) != "float" or f"{est}_se" not in RESULTS):
        raise ValueError(f"precision_estimate={est!r} is not an estimate with a standard error")


def check_task(task: dict) -> None:
    """Raise ``ValueError`` with the offending key and value if ``task`` cannot run.

    Generic checks first (the entry exists, no undeclared key, required parameters are present
    and each parameter the entry uses is of its declared kind and in its declared domain:
    :meth:`~sim.core.declare.Param.refusal`, through :func:`param_of`), then the model's own value
    checks (:attr:`Model.check_task`).
    """
    ent = entry(task.get("engine"), task.get("policy"), task.get("model"))
    used = set(ent.params)
    for name in ent.params:
        if name in ("events", "time") or name in ent.optional:
            continue
        if task.get(name) is None:
            raise ValueError(f"{name} is required by policy={ent.policy!r} on engine={ent.engine!r}")
    for name, value in task.items():
        if name in ("model", "engine", "policy") or name in RUN_KEYS or value is None:
            continue
        if name not in PARAMS:
            raise ValueError(f"{name}={value!r} is not a task key; parameters of "
                             f"{ent.engine}/{ent.policy}: {', '.join(ent.params)}")
        if name in used:  # a declared parameter another entry uses is ignored here (the
            param_of(name, ent.model).check(name, value)  # plan never sends one: it is null in the row)
    if ent.stochastic:
        _check_run_settings(task)
    else:  # a limit reads max_level and h; its seed is 0
        RunSettings.from_task(task)
    MODELS[ent.model].check_task(task)
