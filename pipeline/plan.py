"""Turn a composed configuration into validated points and tasks, before any compute.

Every refusal is a :class:`~pipeline.errors.ConfigError` whose message names the offending
key and value. Nothing here touches the file system, Ray or MLflow.
"""
from __future__ import annotations

import ast
import itertools
import keyword
import math
import zlib
from dataclasses import dataclass, field

import numpy as np

import sim
from pipeline.analyses import declared_analyses
from pipeline.errors import ConfigError
from pipeline.execute import AUTH_MODES
from pipeline.formulas import brief, evaluate, evaluate_precise, evaluation_order, parse
from pipeline.memory import check_memory
from pipeline.memory import check_settings as check_memory_settings
from sim import registry
from sim.core.declare import INT_LIMIT, PrecisePath, bound_text
from sim.core.service_keys import EXPONENTIAL_NAME, SERVICE_KEYS
from sim.core.settings import SETTING_KEYS, RunSettings
from sim.engines import AUTO_CHOICE
from sim.registry import ENGINE_POLICIES, PARAMS, PATH_ENGINES, POLICIES, STOCHASTIC_ENGINES

#: model parameters and their kinds: :data:`sim.registry.PARAMS`, which an out-of-tree model
#: loaded by a sweep's ``models:`` extends in place; any other name in ``axes``/``params`` is an
#: auxiliary variable (a number) and must be used by some formula
MODEL_PARAMS = PARAMS


def _kind(name: str) -> str:
    """The kind of parameter ``name`` (``float`` for an auxiliary variable)."""
    par = PARAMS.get(name)
    return "float" if par is None else par.kind


#: the Python type of each kind's values (and of the ``variant`` column)
KIND_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "choice": str, "floats": list}
#: names a sweep may write for a model parameter
ALIASES: dict[str, str] = {"N": "n_servers"}
BACKENDS = ("ray", "serial")
#: the most tasks (points x engines x replications) one sweep may plan, refused before the grid
#: is expanded: 100,000 tasks plan in about 3 s and 270 MB here, and each task writes one file
MAX_TASKS = 100_000
#: integer parameters are Int64 columns: every integer stays below the one bound of sim's
#: declarations (each parameter's own domain is checked by sim.check_task)
INT_MAX = INT_LIMIT


@dataclass(frozen=True)
class Point:
    point_id: int
    policy: str
    values: dict  # parameter name -> int | float | bool | str | list

    def label(self, used: set[str] | None = None) -> str:
        """``policy key=value ...``: the values set (not None), of the parameters in ``used``
        if given (those some task of the point takes), the run length left out."""
        inner = " ".join(f"{k}={_fmt(v)}" for k, v in self.values.items()
                         if k != "events" and v is not None and (used is None or k in used))
        return f"{self.policy} {inner}"


@dataclass
class Plan:
    sweep: str
    root_seed: int
    points: list[Point]
    tasks: list[dict]
    #: every parameter column, in a stable order (model parameters first)
    param_columns: list[str]
    #: the parameters that vary across the grid (axes and what derives from them)
    varying: list[str] = field(default_factory=list)
    param_types: dict[str, type] = field(default_factory=dict)
    #: arms the limit path leaves out, and why (``limit_path``; docs/sweeps.md)
    path_skipped: list[str] = field(default_factory=list)
    #: engine -> the exponents x of the points N = 10^x its precise path reached (``limit_path.<engine>``)
    precise: dict = field(default_factory=dict)
    #: the largest task's memory estimate and the share it was checked against
    #: (:func:`pipeline.memory.check_memory`; ``plan=true`` prints it)
    memory: dict = field(default_factory=dict)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _big(v) -> str:
    """A number too large to show in full (``1e+300``, not its 301 digits; an integer beyond
    the float range as :func:`pipeline.formulas.brief` shows it, never converted to decimal)."""
    try:
        return f"{v:.6g}"
    except OverflowError:
        return brief(v)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _canon(name: str, where: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ConfigError(f"{where}: {name!r} is not a valid parameter name")
    return ALIASES.get(name, name)


#: the name in a sweep's ``run:`` section of a run setting whose task key differs
RUN_CONFIG_NAMES = {"h": "position_threshold"}


def run_settings(run: dict) -> RunSettings:
    """The run settings of a sweep's ``run:`` section (:class:`~sim.core.settings.RunSettings`:
    its defaults fill what the section leaves null, its checks refuse a bad value);
    ConfigError naming ``run.<key>`` and the value. The seed is not one of them: each task
    gets its own (:func:`seed_for`)."""
    values = {key: run.get(RUN_CONFIG_NAMES.get(key, key)) for key in SETTING_KEYS if key != "seed"}
    try:
        return RunSettings(**{k: v for k, v in values.items() if v is not None})
    except ValueError as exc:
        key, _, rest = str(exc).partition("=")
        raise ConfigError(f"run.{RUN_CONFIG_NAMES.get(key, key)}={rest}") from None


def _int_at_least(cfg: dict, key: str, lo: int) -> int:
    section, _, leaf = key.rpartition(".")
    node = cfg
    for part in filter(None, section.split(".")):
        node = node.get(part, {})
    v = node.get(leaf)
    if not (_is_number(v) and float(v).is_integer()) or v < lo:
        raise ConfigError(f"{key}={v!r} must be an integer >= {lo}")
    return int(v)


def _check_replications(v) -> None:
    """``replications``: an integer >= 1, or a formula string (checked here, evaluated per point
    by :func:`_replications_at`)."""
    if isinstance(v, str):
        parse("replications", v)
        return
    if not (_is_number(v) and float(v).is_integer()) or v < 1:
        raise ConfigError(f"replications={v!r} must be an integer >= 1 or a formula "
                          "of the point's parameters (e.g. \"6 if N < 1e6 else 10\")")


def _replications_at(v, values: dict, where: str, policy: str) -> int:
    """The replications of one point: ``v`` itself, or its formula evaluated on the point's
    numeric parameters, ``N``, and its ``policy`` and ``variant`` (names, as strings)."""
    if not isinstance(v, str):
        return int(v)
    scope = {n: x for n, x in values.items() if _is_number(x)}
    if "n_servers" in scope:
        scope["N"] = scope["n_servers"]
    scope["policy"] = policy
    if isinstance(values.get("variant"), str):
        scope["variant"] = values["variant"]
    r = evaluate("replications", v, scope)
    if not float(r).is_integer() or not 1 <= r <= MAX_TASKS:
        raise ConfigError(f"replications={v!r} gives {r!r} at {where}: must be an integer in [1, {MAX_TASKS:,}]")
    return int(r)


def _check_named_strings(expr: str, known: dict[str, list[str]]) -> None:
    """In the replications formula, a string compared with ``policy`` or ``variant`` must be one
    of the sweep's policies or variants (a misspelt name would otherwise match nothing)."""
    for node in ast.walk(ast.parse(expr, mode="eval")):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [n.id for n in sides if isinstance(n, ast.Name) and n.id in known]
        for name in names:
            for other in sides:
                if isinstance(other, ast.Constant) and isinstance(other.value, str) \
                        and other.value not in known[name]:
                    valid = ", ".join(known[name]) or "none (the sweep has no variants)"
                    plural = {"policy": "policies", "variant": "variants"}[name]
                    raise ConfigError(f"replications={expr!r}: {other.value!r} is not a {name} of this "
                                      f"sweep ({plural}: {valid})")


def seed_for(root_seed: int, point_id: int, engine: str, replication: int) -> int:
    """The task's 63-bit seed: independent of worker count and execution order."""
    key = (point_id, zlib.crc32(engine.encode()), replication)
    words = np.random.SeedSequence(root_seed, spawn_key=key).generate_state(2, dtype=np.uint32)
    return int((int(words[0]) << 32 | int(words[1])) & (2**63 - 1))


def _check_keys(cfg: dict, schema: type, prefix: str) -> None:
    """Every key of ``cfg`` is a field of the dataclass ``schema``, recursively into sections
    that are dataclasses: Hydra's ``+run.n_batchs=5`` adds a key even to a typed section."""
    fields = schema.__dataclass_fields__
    for key, value in cfg.items():
        if key not in fields:
            valid = ", ".join(f"{prefix}{k}" for k in fields)
            raise ConfigError(f"{prefix}{key}={value!r} is not a configuration key; valid keys: {valid}")
        sub = fields[key].default_factory
        if isinstance(sub, type) and hasattr(sub, "__dataclass_fields__") and isinstance(value, dict):
            _check_keys(value, sub, f"{prefix}{key}.")


def check_top_level(cfg: dict) -> None:
    """Checks of everything outside ``axes``/``params``."""
    from pipeline.config import Config, check_name

    _check_keys(cfg, Config, "")
    check_name(cfg.get("name"))
    _check_replications(cfg.get("replications"))
    _int_at_least(cfg, "seed", 0)
    models = cfg.get("models") or []
    if not isinstance(models, (list, tuple)):
        raise ConfigError(f"models={models!r} must be a list of model module names")
    for name in models:
        try:
            registry.load_model(name)
        except ValueError as exc:
            raise ConfigError(f"models: {exc}") from None
    model = cfg.get("model")
    if model is not None:
        try:
            registry.load_model(model)
        except ValueError as exc:
            raise ConfigError(f"model: {exc}") from None
    engines = cfg.get("engines") or []
    if not engines:
        raise ConfigError(f"engines={engines!r}: name at least one of {', '.join(sim.ENGINES)}")
    for e in engines:
        if e not in ENGINE_POLICIES and e != AUTO:
            raise ConfigError(f"engines: {e!r} is unknown; valid engines: {', '.join(sim.ENGINES)}, "
                              f"{AUTO} ({' or '.join(AUTO_ENGINES)} by N, docs/sweeps.md)")
    if AUTO in engines and set(engines) & set(AUTO_ENGINES):
        raise ConfigError(f"engines={engines!r}: {AUTO} chooses between {' and '.join(AUTO_ENGINES)} "
                          "per point; name it or them, not both")
    auto_n = (cfg.get("run") or {}).get("auto_occupancy_n", AUTO_OCCUPANCY_N)
    if isinstance(auto_n, bool) or not isinstance(auto_n, int) or auto_n < 1:
        raise ConfigError(f"run.auto_occupancy_n={auto_n!r} must be an integer >= 1")
    policies = cfg.get("policies") or []
    if not policies:
        raise ConfigError(f"policies={policies!r}: name at least one of {', '.join(POLICIES)}")
    for p in policies:
        if p not in POLICIES:
            raise ConfigError(f"policies: {p!r} is unknown; valid policies: {', '.join(POLICIES)}")
    for p in policies:
        if AUTO in engines and not _auto_candidates(cfg, p):
            raise ConfigError(f"engines: {AUTO}: policy {p!r} has neither an {' nor an '.join(AUTO_ENGINES)} "
                              "engine to choose from")
    for e in engines:
        if e == AUTO:
            continue
        for p in policies:
            if model is None and p not in ENGINE_POLICIES[e]:
                raise ConfigError(
                    f"policies: {p!r} is not served by engine {e!r}; "
                    f"{e!r} serves: {', '.join(ENGINE_POLICIES[e])}"
                )
            try:
                registry.entry(e, p, model)
            except ValueError as exc:
                raise ConfigError(f"policies: {exc}") from None
            serving = registry.models_serving(e, p)
            loaded = [m for m in models if m in serving]
            if model is None and len(serving) > 1 and loaded:
                # the sweep loads a model that declares this (engine, policy) too: it may mean
                # that one, not the owner the name resolves to without model:
                raise ConfigError(f"policies: {registry.ambiguous(e, p, serving, loaded[0])}")
    if len(set(engines)) != len(engines) or len(set(policies)) != len(policies):
        raise ConfigError(f"engines={engines!r} / policies={policies!r}: each may appear once")
    # the names the models and the general analyses declare: planning imports no analysis
    ANALYSES = declared_analyses()
    for name in cfg.get("extra_analyses") or []:
        if name not in ANALYSES:
            raise ConfigError(f"extra_analyses: {name!r} is unknown; valid: {', '.join(ANALYSES) or '(none)'}")
    run = cfg.get("run", {})
    run_settings(run)
    est = run.get("precision_estimate")
    if est is not None:
        from sim.registry import RESULTS

        if RESULTS.get(est) != "float" or f"{est}_se" not in RESULTS:
            valid = sorted(k for k in RESULTS if RESULTS[k] == "float" and f"{k}_se" in RESULTS)
            raise ConfigError(f"run.precision_estimate={est!r} is not an estimate with a standard "
                              f"error; valid: {', '.join(valid)}")
    _check_limit_path(cfg)
    ex = cfg.get("execution", {})
    if ex.get("backend") not in BACKENDS:
        raise ConfigError(f"execution.backend={ex.get('backend')!r} is unknown; valid: {', '.join(BACKENDS)}")
    if ex.get("num_cpus") is not None:
        _int_at_least(cfg, "execution.num_cpus", 1)
    _int_at_least(cfg, "execution.max_retries", 0)
    _int_at_least(cfg, "execution.tasks_per_cpu", 1)
    if ex.get("chunk_rows") is not None:  # absent from configs of runs made before chunks
        _int_at_least(cfg, "execution.chunk_rows", 1)
    v = ex.get("chunk_seconds")
    if v is not None and (not _is_number(v) or not v >= 0):
        raise ConfigError(f"execution.chunk_seconds={v!r} must be a number >= 0")
    if ex.get("auth", "auto") not in AUTH_MODES:
        raise ConfigError(f"execution.auth={ex.get('auth')!r} is unknown; valid: {', '.join(AUTH_MODES)}")
    addr = ex.get("address")
    if addr is not None and (not isinstance(addr, str) or not addr.strip() or addr == "local"):
        raise ConfigError(f"execution.address={addr!r} must be a cluster address such as "
                          "'head-node:6379' or 'auto' (leave it null for a local cluster)")
    for key in ("connect_timeout", "events_per_second"):
        v = ex.get(key)
        if not _is_number(v) or not v > 0:
            raise ConfigError(f"execution.{key}={v!r} must be a positive number")
    check_memory_settings(ex)


#: the largest N a limit path may reach (n_servers is an int64 column)
PATH_N_MAX = 1e18


def _check_limit_path(cfg: dict) -> None:
    """Checks of ``limit_path`` (docs/sweeps.md)."""
    lp = cfg.get("limit_path") or {}
    top = lp.get("n_servers_max")
    if top is None:
        return
    if not (_is_number(top) and 1 < top <= PATH_N_MAX):
        raise ConfigError(f"limit_path.n_servers_max={top!r} must be null or a number in (1, {PATH_N_MAX:g}]")
    engine = lp.get("engine")
    if engine not in ENGINE_POLICIES or engine in STOCHASTIC_ENGINES:
        limits = [e for e in ENGINE_POLICIES if e not in STOCHASTIC_ENGINES]
        raise ConfigError(f"limit_path.engine={engine!r} is not a limit engine; valid: {', '.join(limits)}")
    per = lp.get("per_decade", 2)
    if not (_is_number(per) and float(per).is_integer() and 1 <= per <= 10):
        raise ConfigError(f"limit_path.per_decade={per!r} must be an integer in [1, 10]")
    served = [p for p in cfg.get("policies") or [] if _serves(cfg, engine, p)]
    if not served:
        raise ConfigError(f"limit_path.engine={engine!r} serves none of policies={list(cfg.get('policies') or [])}")
    for path in registry.precise_paths().values():
        _check_precise_path(cfg, path)


def _check_precise_path(cfg: dict, path: PrecisePath) -> None:
    """Checks of a precise path's section ``limit_path.<engine>`` (docs/sweeps.md)."""
    key = f"limit_path.{path.engine}"
    section = (cfg.get("limit_path") or {}).get(path.engine) or {}
    if section.get("n_servers_max") is None:
        return
    lo, hi, every = section.get("n_servers_min", 1e10), section["n_servers_max"], section.get("every_decades", 5.0)
    if not (_is_number(hi) and 1 < hi <= path.n_servers_max):
        raise ConfigError(f"{key}.n_servers_max={hi!r} must be null or a number in "
                          f"(1, {path.n_servers_max:g}]")
    if not (_is_number(lo) and 1 < lo <= hi):
        raise ConfigError(f"{key}.n_servers_min={lo!r} must be a number in (1, n_servers_max={hi!r}]")
    if not (_is_number(every) and 0.1 <= every <= 100):
        raise ConfigError(f"{key}.every_decades={every!r} must be a number in [0.1, 100]")
    if not any(_serves(cfg, path.engine, p) for p in cfg.get("policies") or []):
        raise ConfigError(f"{key}: engine {path.engine} serves none of "
                          f"policies={list(cfg.get('policies') or [])}")


#: the engine name that lets the plan choose, per point, between the engines of
#: :data:`sim.engines.AUTO_CHOICE` (a fixed rule of N and the policy, never a timing: seeds
#: hash the engine, so the tasks are the same everywhere)
AUTO = "auto"
AUTO_ENGINES = AUTO_CHOICE
#: ``run.auto_occupancy_n``'s default: from this N on, ``auto`` picks the second engine of
#: :data:`AUTO_ENGINES` (the occupancy engine). Measured (power-of-2, lam = 0.9, marginal CPU per job, AMD EPYC, 2 shared cores): agent 26,
#: 58, 252 ns at N = 10^4, 10^5, 10^6; occupancy 47-48 ns at each (docs/sweeps.md)
AUTO_OCCUPANCY_N = 100_000


def _auto_candidates(cfg: dict, policy: str) -> list[str]:
    """The engines of :data:`AUTO_ENGINES` that serve ``policy`` in the sweep's model."""
    return [e for e in AUTO_ENGINES if _serves(cfg, e, policy)]


def _concrete(cfg: dict, engines: list[str], policy: str) -> list[str]:
    """``engines`` with ``auto`` replaced by the engines it may choose for ``policy``."""
    out = []
    for e in engines:
        out += _auto_candidates(cfg, policy) if e == AUTO else [e]
    return list(dict.fromkeys(out))


def auto_engine(cfg: dict, policy: str, values: dict) -> str:
    """The engine ``auto`` runs at a point: the second of :data:`AUTO_ENGINES` (the occupancy
    engine) when N >= ``run.auto_occupancy_n`` and it takes every parameter the point sets that
    the first (the agent engine) takes (heterogeneous ``service_rates``, for one, it does not),
    else the first; the one of them that serves the policy if only one does."""
    cands = _auto_candidates(cfg, policy)
    if len(cands) == 1:
        return cands[0]
    threshold = (cfg.get("run") or {}).get("auto_occupancy_n", AUTO_OCCUPANCY_N)
    small, large = AUTO_ENGINES
    if values.get("n_servers") is None or values["n_servers"] < threshold:
        return small
    takes_small, takes_large = (set(_entry(cfg, e, policy).params) for e in AUTO_ENGINES)
    set_here = {k for k, v in values.items() if v is not None and k in MODEL_PARAMS}
    return large if not (set_here & takes_small) - takes_large else small


def _serves(cfg: dict, engine: str, policy: str) -> bool:
    try:
        _entry(cfg, engine, policy)
    except ValueError:
        return False
    return True


def path_values(axis: list, top: float, per_decade: int) -> list[int]:
    """The N of a limit path: every value of the ``n_servers`` axis, then ``10^(j/per_decade)``
    (rounded) above the axis's largest value up to ``top``."""
    hi = max(axis)
    extra = []
    j = math.floor(math.log10(hi) * per_decade + 1e-9) + 1
    while 10 ** (j / per_decade) <= top * (1 + 1e-12):
        n = int(round(10 ** (j / per_decade)))
        if n > hi:
            extra.append(n)
        j += 1
    return list(axis) + extra


def precise_exponents(lo: float, hi: float, every: float) -> list[float]:
    """The exponents x of a precise path's points N = 10^x (``limit_path.<engine>``,
    :class:`~sim.core.declare.PrecisePath`): from log10(lo) up to
    log10(hi) in steps of ``every`` decades (rounded to 1e-9, so that 10, 15, ... are exact)."""
    x0, x1 = math.log10(lo), math.log10(hi)
    out, j = [], 0
    while x0 + j * every <= x1 + 1e-9:
        out.append(round(x0 + j * every, 9))
        j += 1
    return out


def _precise_values(path: PrecisePath, spec: _Spec, x: float, others: dict, where: str) -> dict:
    """The point values at N = 10^x of one variant's formulas, in high precision
    (:func:`pipeline.formulas.evaluate_precise`, 30 digits more than the 10^x of N holds):
    numbers as floats, integers as ints, ``n_servers`` None where it passes the Int64 column,
    and the precise path's coordinates (:attr:`PrecisePath.coordinates`, computed in that
    precision). An integer beyond the Int64 column is None where the coordinates stand for it
    and a float otherwise (a buffer b of 10^19, which the checks then refuse, never a null: no
    buffer)."""
    import mpmath

    digits = 30 + int(math.ceil(x))
    with mpmath.workdps(digits):
        n_mp = mpmath.mpf(10) ** mpmath.mpf(repr(x))
        n_int = 10 ** int(x) if float(x).is_integer() else None
        exact: dict = dict(spec.constants)
        exact.update(others)
        exact["n_servers"] = n_int if n_int is not None else n_mp
        for key in spec.order:
            scope = dict(exact)
            scope["N"] = scope["n_servers"]
            exact[key] = evaluate_precise(f"params.{key}", spec.formulas[key], scope, digits)
        values = {}
        for name, v in exact.items():
            if name == "n_servers":
                continue
            if isinstance(v, mpmath.mpf):
                v = float(v)
            if _kind(name) == "int" and isinstance(v, (int, float)) and abs(v) >= INT_MAX:
                v = None if name in path.stands_for else float(v)
            elif v is not None and not isinstance(v, str):
                v = _coerce(name, v, where)  # an auxiliary variable (d_cap) as a float
            values[name] = v
        # N itself where it is an integer of the Int64 column (10^10, 10^15), else the coordinates alone
        values["n_servers"] = n_int if n_int is not None and n_int < INT_MAX else None
        values.update(path.coordinates(exact, float(x)))
    return values


def _precise_points(cfg: dict, path: PrecisePath, specs: dict, xs: list[float], names: list[str],
                    named: bool, pid: int, skipped: list[str], settings) -> list[tuple]:
    """``(x, Point, task)`` of a precise path (``limit_path.<engine>``, docs/sweeps.md): every
    policy its engine serves, every variant and combination of the other axes, at N = 10^x for
    the exponents ``xs`` (:func:`precise_exponents`), with the values of
    :func:`_precise_values`; point ids from ``pid`` on. A point where the limit does not apply
    (what :func:`sim.check_task` refuses, or a parameter the simulations model that it does
    not, a buffer) is left out, and each arm with such points is named in ``skipped`` once: how
    many, from where, and the first reason. ``settings``: the sweep's run settings
    (:func:`run_settings`), as every task carries them."""
    out = []
    engine = path.engine
    for policy in cfg["policies"]:
        if not _serves(cfg, engine, policy):
            skipped.append(f"policy {policy}: engine {engine} does not serve it")
            continue
        ent = _entry(cfg, engine, policy)
        for variant, spec in specs.items():
            others = {a: v for a, v in spec.axes.items() if a != "n_servers"}
            for combo in itertools.product(*others.values()):
                fixed = "".join(f", {a}={_fmt(v)}" for a, v in zip(others, combo))
                varied = ", ".join(f"{a}={_fmt(v)}" for a, v in zip(others, combo) if len(others[a]) > 1)
                arm = f"{policy}{f' ({variant})' if variant else ''}{f' [{varied}]' if varied else ''}"
                left_out: list[tuple[float, str]] = []
                for x in xs:
                    where = f"point log10_n={x:g}{fixed}" + (f" (variant {variant})" if variant is not None else "")
                    raw = _precise_values(path, spec, x, dict(zip(others, combo)), where)
                    # what the simulations model besides N, the load and d (a buffer b)
                    extra = [n for n in raw if n in MODEL_PARAMS and raw[n] is not None
                             and n not in ent.params and n not in path.stands_for
                             and n not in _NOT_IN_LIMIT and _NEUTRAL.get(n, object()) != raw[n]]
                    task = {"model": ent.model, "engine": engine, "policy": policy,
                            **{k: raw[k] for k in ent.params if raw.get(k) is not None},
                            "seed": 0, "init": settings.init, "n_batches": settings.n_batches,
                            "max_level": settings.max_level, "h": settings.h}
                    try:
                        if extra:
                            raise ValueError(f"{extra[0]}={_fmt(raw[extra[0]])} is simulated but engine="
                                             f"{engine} has no model of it")
                        sim.check_task(task)
                    except ValueError as exc:  # the limit does not apply to this arm here
                        left_out.append((x, str(exc)))
                        continue
                    values = {n: raw.get(n) for n in names if n != "variant"}
                    if named:
                        values = {"variant": variant, **values}
                    row_params = {n: (v if n not in MODEL_PARAMS or n in ent.params else None)
                                  for n, v in values.items()}
                    task["_meta"] = {"task_id": f"p{pid:05d}-{engine}-r000", "point_id": pid,
                                     "replication": 0, "params": row_params}
                    out.append((x, Point(pid, policy, values), task))
                    pid += 1
                if left_out:
                    at = (f"from N = 10^{left_out[0][0]:g} on" if len(left_out) == len(xs)
                          else f"at {len(left_out)} of its {len(xs)} N (10^{left_out[0][0]:g} to "
                               f"10^{left_out[-1][0]:g})")
                    skipped.append(f"{arm} {at}: {engine}: {left_out[0][1]}")
    return out


def _split_inputs(cfg: dict) -> tuple[dict[str, list], dict[str, float], dict[str, str]]:
    axes_in = cfg.get("axes") or {}
    params_in = cfg.get("params") or {}
    if not isinstance(axes_in, dict):
        raise ConfigError(f"axes={axes_in!r} must be a mapping of name -> list of values")
    if not isinstance(params_in, dict):
        raise ConfigError(f"params={params_in!r} must be a mapping of name -> value or formula")
    axes: dict[str, list] = {}
    for raw, values in axes_in.items():
        name = _canon(raw, f"axes.{raw}")
        if name in axes:
            raise ConfigError(f"axes.{raw}: {name!r} is given twice")
        kind = _kind(name)
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(f"axes.{raw}={values!r} must be a non-empty list of values")
        if kind == "floats":
            raise ConfigError(f"axes.{raw}: {name!r} is a list parameter and cannot be an axis; "
                              "give each list in a variant instead")
        for i, v in enumerate(values):
            _literal(name, v, f"axes.{raw}[{i}]")
        if len(set(values)) != len(values):
            raise ConfigError(f"axes.{raw}={list(values)!r} repeats a value")
        axes[name] = list(values)
    constants: dict[str, float] = {}
    formulas: dict[str, str] = {}
    for raw, value in params_in.items():
        name = _canon(raw, f"params.{raw}")
        if name in axes:  # an axis overrides a constant of the same name (e.g. the defaults)
            continue
        if name in constants or name in formulas:
            raise ConfigError(f"params.{raw}: {name!r} is given twice")
        kind = _kind(name)
        if kind in ("int", "float") and isinstance(value, str):
            formulas[name] = value
        else:  # a number, or a literal of a categorical, boolean or list parameter
            constants[name] = _literal(name, value, f"params.{raw}")
    return axes, constants, formulas


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _expand_classes(name: str, classes, where: str) -> list:
    """A list parameter given as classes ``[[count, value], ...]`` (for example 50 servers of
    mean 1 and 50 of mean 3: ``[[50, 1.0], [50, 3.0]]``) expanded to the list of values."""
    out = []
    for count, value in classes:
        if not (_is_number(count) and float(count).is_integer() and count >= 1):
            raise ConfigError(f"{where}: class [{count!r}, {value!r}] needs a whole count >= 1")
        out += [value] * int(count)
    return out


def _literal(name: str, value, where: str):
    """A literal value of parameter ``name`` checked against its kind (auxiliary variables are
    numbers); ``ConfigError`` naming ``where`` (the key: ``params.lam``, ``axes.N[2]``) and the
    value otherwise."""
    kind = _kind(name)
    if kind == "choice":
        choices = PARAMS[name].choices
        if value not in choices:
            raise ConfigError(f"{where}={value!r} is not one of: {', '.join(choices)}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r} must be true or false")
        return value
    if kind == "floats":
        given = value
        if (isinstance(value, (list, tuple)) and value
                and all(isinstance(c, (list, tuple)) and len(c) == 2 for c in value)):
            value = _expand_classes(name, value, where)
        if (not isinstance(value, (list, tuple)) or not value
                or not all(_is_number(v) and math.isfinite(v) for v in value)):
            raise ConfigError(f"{where}={given!r} must be a non-empty list of finite numbers")
        return [float(v) for v in value]
    if _is_number(value):
        if not math.isfinite(value):
            raise ConfigError(f"{where}={value!r} is not finite: give a finite number")
        return value
    what = "a number or a formula string" if where.startswith("params") else "a finite number"
    raise ConfigError(f"{where}={value!r} must be {what}")


def _coerce(name: str, value, where: str):
    kind = _kind(name)
    if kind == "int":
        if abs(value) >= INT_MAX:
            raise ConfigError(f"{where}: {name}={_big(value)} is too large: an integer parameter "
                              f"must be below {bound_text(INT_MAX)}")
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{where}: {name}={value!r} must be an integer (wrap the formula in ceil() or floor())")
            value = int(value)
        return int(value)
    if kind in ("choice", "bool", "floats"):
        return value  # checked literals (never formulas)
    return float(value)


@dataclass
class _Spec:
    """The axes, constants and formulas of one variant, checked and ordered."""
    axes: dict
    constants: dict
    formulas: dict
    order: list
    names: list
    used: set  #: names the formulas use
    where: str  #: "params" or "variants.NAME", for messages


def _spec(cfg: dict, params_in: dict, where: str) -> _Spec:
    axes, constants, formulas = _split_inputs({"axes": cfg.get("axes"), "params": params_in})
    order, _ = evaluation_order(formulas, set(axes) | set(constants), ALIASES)
    used: set[str] = set()
    for key, expr in formulas.items():
        used |= {ALIASES.get(n, n) for n in parse(f"params.{key}", expr)}
    defined = set(axes) | set(constants) | set(formulas)
    names = [n for n in MODEL_PARAMS if n in defined]
    names += [n for n in list(axes) + list(constants) + order if n not in MODEL_PARAMS]
    return _Spec(axes, constants, formulas, order, list(dict.fromkeys(names)), used, where)


def _variants(cfg: dict) -> dict:
    """name -> parameter overrides; one unnamed variant when the sweep names none."""
    variants = cfg.get("variants") or {}
    if not isinstance(variants, dict):
        raise ConfigError(f"variants={variants!r} must be a mapping of name -> parameter overrides")
    out = {}
    for name, over in variants.items():
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
            raise ConfigError(f"variants: {name!r} must be a name of letters, digits, '_', '-', '.'")
        if not isinstance(over, dict):
            raise ConfigError(f"variants.{name}={over!r} must be a mapping of parameter -> value or formula")
        out[name] = over
    return out or {None: {}}


#: parameters a limit (mean-field) row may leave out although a simulation of the point uses
#: them: the run length and the start of a path (a stationary limit depends on neither), and
#: a value equal to the model without the parameter (single-task jobs, exponential sizes)
_NOT_IN_LIMIT = ("events", "time", "init_tail")
_NEUTRAL = {"k": 1, SERVICE_KEYS[0]: EXPONENTIAL_NAME}
_NO_VALUE = object()


def _entry(cfg: dict, engine: str, policy: str):
    """The registry entry of (engine, policy) in the sweep's ``model`` (inferred when unnamed)."""
    return registry.entry(engine, policy, cfg.get("model"))


def _limit_mismatch(cfg: dict, policy: str, engines: list[str], engine: str, values: dict) -> str | None:
    """Why the limit ``engine``'s row at ``values`` would not be the limit of the sweep's
    simulations (``engines``): a parameter they simulate that it does not model (``k = 4`` jobs
    beside a single-task mean field, a buffer ``b`` beside the unbuffered one); None if none."""
    simulated = set().union(*(_entry(cfg, e, policy).params for e in engines if e in STOCHASTIC_ENGINES))
    modelled = _entry(cfg, engine, policy).params
    for name in sorted(simulated - set(modelled) - set(_NOT_IN_LIMIT)):
        value = values.get(name)
        if value is None or _NEUTRAL.get(name, object()) == value:
            continue
        return (f"{name}={_fmt(value)} is simulated but engine={engine} has no model of it (its "
                f"parameters: {', '.join(modelled) or 'none'})")
    return None


def _check_limit_models(cfg: dict, policy: str, engines: list[str], values: dict, where: str) -> None:
    """``ConfigError`` if a limit engine (meanfield, refined) of the sweep would stand for a
    simulation of another model (:func:`_limit_mismatch`): its row would be compared with the
    simulations as if it were their limit."""
    for engine in engines:
        if engine in STOCHASTIC_ENGINES:
            continue
        why = _limit_mismatch(cfg, policy, engines, engine, values)
        if why is not None:
            name = why.split("=", 1)[0]
            raise ConfigError(
                f"{where} (policy={policy}, engine={engine}): {why}; its row would be compared with "
                f"the simulations as their limit. Leave {engine} out of engines for this sweep, or "
                f"{name} out of its parameters")


def _config_defaults() -> dict:
    """``params`` of ``conf/config.yaml``: the defaults every sweep composes over."""
    import yaml

    from pipeline.config import CONF_DIR

    with open(CONF_DIR / "config.yaml") as fh:
        return dict((yaml.safe_load(fh) or {}).get("params") or {})


def _takers(name: str) -> str:
    """Which policies of the registry take parameter ``name``, by model."""
    by: dict[str, list[str]] = {}
    for ent in registry.ENTRIES:
        if name in ent.params and ent.policy not in by.setdefault(ent.model, []):
            by[ent.model].append(ent.policy)
    if not by:
        return f"{name}: no policy of any model takes it"
    return f"{name} is taken by " + "; ".join(f"{', '.join(pols)} ({model})"
                                            for model, pols in by.items())


def _check_unused(cfg: dict, specs: dict, variants: dict, policies: list[str],
                  engines: list[str], unused: str) -> None:
    """Refuse (or, ``unused="warn"``, log) every model parameter that the sweep file or the
    command line sets and that no (engine, policy) of the sweep takes and no formula uses: its
    value would be dropped from every task. ``conf/config.yaml``'s own defaults (its ``d``,
    which ``central`` does not take) are not the user's doing and pass."""
    takes = set().union(*(_entry(cfg, e, p).params for p in policies
                          for e in _concrete(cfg, engines, p)))
    defaults = _config_defaults()
    found: dict[str, str] = {}  # key as set -> "key=value"
    names: list[str] = []
    for v, spec in specs.items():
        over = variants.get(v) or {}
        for name in [*spec.axes, *spec.constants, *spec.formulas]:
            if name not in MODEL_PARAMS or name in takes or name in spec.used:
                continue
            if v is not None and name in over:
                key, value = f"variants.{v}.{name}", over[name]
            elif name in spec.axes:
                key, value = f"axes.{name}", spec.axes[name]
            else:
                key = f"params.{name}"
                value = spec.constants.get(name, spec.formulas.get(name))
                if name in spec.constants and name in defaults and defaults[name] == value:
                    continue  # the default of conf/config.yaml
            found.setdefault(key, f"{key}={value!r}")
            if name not in names:
                names.append(name)
    if not found:
        return
    msg = (f"{', '.join(found.values())}: no task of this sweep uses "
           f"{'it' if len(found) == 1 else 'them'} (policies={policies}, engines={engines}); "
           + "; ".join(_takers(n) for n in names))
    if unused == "warn":
        import logging

        logging.getLogger("pipeline").warning(
            "%s (a run made before such parameters were refused: its tasks run without them)", msg)
    else:
        raise ConfigError(msg)


def make_plan(cfg: dict, unused: str = "refuse") -> Plan:
    """Validate ``cfg`` (a plain dict of the composed config) and expand it into tasks.

    The grid is policies x variants x the product of the axes. A variant (``variants.NAME``)
    overrides parameters of ``params`` (for example several rules for d); its name becomes the
    ``variant`` column. A model parameter the sweep sets that no (engine, policy) of it takes is
    refused (``unused="warn"``: logged, for archives and runs made before that rule).
    """
    check_top_level(cfg)
    variants = _variants(cfg)
    specs = _specs(cfg, variants)
    _check_variables(cfg, specs, variants)
    policies, engines = list(cfg["policies"]), list(cfg["engines"])
    settings = run_settings(cfg["run"])  # the run settings every task carries (sim.core.settings)
    _check_required(cfg, specs, policies, engines)
    _check_unused(cfg, specs, variants, policies, engines, unused)
    path = _limit_path(cfg, specs)
    _check_size(cfg, specs, path)
    names, named = _param_columns(specs), None not in variants
    points, tasks, skipped = _grid(cfg, specs, path, names, named, settings)
    # past the float range: each precise path's points after every other point, so that the
    # simulations' point ids and seeds stay as they are
    reached: dict[str, list[float]] = {}
    for precise, xs in path.precise:
        names += [n for n in precise.columns if n not in names]
        made = _precise_points(cfg, precise, specs, xs, names, named, len(points), skipped, settings)
        for x, point, task in made:
            points.append(point)
            tasks.append(task)
        reached[precise.engine] = sorted({x for x, _, _ in made})
    # before any compute (and before plan=true's timing runs): docs/sweeps.md, memory
    memory = check_memory(tasks, cfg.get("execution") or {})
    return Plan(
        sweep=cfg["name"],
        root_seed=int(cfg["seed"]),
        points=points,
        tasks=tasks,
        param_columns=names,
        varying=[n for n in names if len({_hashable(pt.values.get(n)) for pt in points}) > 1],
        param_types={n: (str if n == "variant" else KIND_TYPES[_kind(n)]) for n in names},
        path_skipped=list(dict.fromkeys(skipped)),
        memory=memory,
        precise=reached,
    )


def _specs(cfg: dict, variants: dict) -> dict:
    """Variant -> its :class:`_Spec`: ``params`` with the variant's overrides."""
    base = cfg.get("params") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"params={base!r} must be a mapping of name -> value or formula")
    return {v: _spec(cfg, {**base, **over}, "params" if v is None else f"variants.{v}")
            for v, over in variants.items()}


def _check_variables(cfg: dict, specs: dict, variants: dict) -> None:
    """An auxiliary variable (not a model parameter) must be used by a formula of some variant
    (or by the replications formula), so that a misspelt parameter (``lamda``) is refused
    rather than silently ignored; the replications formula's strings must name the sweep's
    policies and variants, and no variable of the sweep may hide those names."""
    used = set().union(*(sp.used for sp in specs.values()))
    if isinstance(cfg["replications"], str):  # the replications formula uses names too
        used |= {"n_servers" if n == "N" else n for n in parse("replications", cfg["replications"])}
        _check_named_strings(cfg["replications"], {"policy": list(cfg["policies"]),
                                                   "variant": [v for v in variants if v is not None]})
    # a sweep's own variable may not hide the names the replications formula gets from the point
    for name in ("policy", "variant"):
        for sp in specs.values():
            if name in sp.axes or name in sp.constants or name in sp.formulas:
                raise ConfigError(f"{sp.where}.{name}: {name!r} is the point's {name} name in the "
                                  "replications formula; give the variable another name")
    for sp in specs.values():
        for name in list(sp.axes) + list(sp.constants) + list(sp.formulas):
            if name not in MODEL_PARAMS and name not in used:
                section = "axes" if name in sp.axes else sp.where
                raise ConfigError(
                    f"{section}.{name} is not a model parameter and no formula uses it; "
                    f"model parameters: {', '.join(MODEL_PARAMS)}"
                )


def _check_required(cfg: dict, specs: dict, policies: list[str], engines: list[str]) -> None:
    """Every parameter some (engine, policy) of the sweep requires (:data:`sim.registry.ENTRIES`)
    is given in every variant."""
    needed: set[str] = set()
    for policy in policies:
        for engine in _concrete(cfg, engines, policy):
            ent = _entry(cfg, engine, policy)
            needed.update(n for n in ent.params if n not in ent.optional and n != "time")
    for v, spec in specs.items():
        defined = set(spec.axes) | set(spec.constants) | set(spec.formulas)
        for name in sorted(needed - defined):
            where = "params" if v is None else f"params (variant {v!r})"
            raise ConfigError(f"{where}.{name} is required (policies={policies}, engines={engines}) but not given")


@dataclass
class _Path:
    """A sweep's limit path (docs/sweeps.md): its engine (None: no path), each variant's axes
    with N continued along the path, and the precise paths past the float range that the
    sweep asks for, each with the exponents x of its points N = 10^x."""
    engine: str | None = None
    axes: dict = field(default_factory=dict)
    precise: list[tuple[PrecisePath, list[float]]] = field(default_factory=list)


def _limit_path(cfg: dict, specs: dict) -> _Path:
    """The limit path of the sweep: the limit engine at every simulated N and beyond, and the
    precise paths (``limit_path.<engine>``) its models declare and the sweep sets."""
    lp = cfg.get("limit_path") or {}
    if lp.get("n_servers_max") is None:
        return _Path()
    path = _Path(engine=lp.get("engine"))
    for v, spec in specs.items():
        if "n_servers" not in spec.axes:
            where = "axes" if v is None else f"axes (variant {v!r})"
            raise ConfigError(f"limit_path.n_servers_max={lp['n_servers_max']!r}: the path follows the "
                              f"n_servers axis, and {where} has none")
        path.axes[v] = {**spec.axes, "n_servers": path_values(
            spec.axes["n_servers"], float(lp["n_servers_max"]), int(lp.get("per_decade", 2)))}
    for precise in registry.precise_paths().values():
        section = lp.get(precise.engine) or {}
        if section.get("n_servers_max") is not None:
            path.precise.append((precise, precise_exponents(
                float(section.get("n_servers_min", 1e10)), float(section["n_servers_max"]),
                float(section.get("every_decades", 5.0)))))
    return path


def _check_size(cfg: dict, specs: dict, path: _Path) -> None:
    """The size of the grid before expanding it (a product of long axes would exhaust memory);
    a formula's replications are known per point: counted as 1 here, the tasks checked as
    they are made (:func:`_grid`)."""
    policies, replications = cfg["policies"], cfg["replications"]
    per_point = sum((1 if isinstance(replications, str) else int(replications)) if e in STOCHASTIC_ENGINES
                    else 1 for e in cfg["engines"])
    n_points = len(policies) * sum(math.prod(len(a) for a in sp.axes.values()) for sp in specs.values())
    n_path = len(policies) * sum(math.prod(len(a) for a in ax.values()) for ax in path.axes.values())
    for _, xs in path.precise:
        n_path += len(policies) * len(xs) * sum(math.prod(len(v) for a, v in sp.axes.items() if a != "n_servers")
                                                for sp in specs.values())
    if n_points * per_point + n_path > MAX_TASKS:
        shape = " x ".join(f"{a}[{len(v)}]" for a, v in next(iter(specs.values())).axes.items())
        raise ConfigError(
            f"axes ({shape or 'none'}) x policies[{len(policies)}]"
            f"{f' x variants[{len(specs)}]' if len(specs) > 1 else ''}: {n_points:,} points and "
            f"{n_points * per_point:,} tasks; a sweep may have at most {MAX_TASKS:,} tasks "
            f"(points x engines x replications): split it or use fewer values")


def _param_columns(specs: dict) -> list[str]:
    """Every parameter column, model parameters first (``variant`` among the others when the
    sweep names variants)."""
    named = None not in specs
    names = (["variant"] if named else []) + list(dict.fromkeys(n for sp in specs.values() for n in sp.names))
    return [n for n in names if n in MODEL_PARAMS] + [n for n in names if n not in MODEL_PARAMS]


def _grid(cfg: dict, specs: dict, path: _Path, names: list[str], named: bool,
          settings: RunSettings) -> tuple[list[Point], list[dict], list[str]]:
    """The points of policies x variants x the axes (N continued along the limit path where
    the policy has one) with their tasks, point ids in that order, and why the path leaves
    arms out."""
    points: list[Point] = []
    tasks: list[dict] = []
    skipped: list[str] = []
    for policy in cfg["policies"]:
        on_path = path.engine is not None and _serves(cfg, path.engine, policy)
        if path.engine is not None and not on_path:
            skipped.append(f"policy {policy}: engine {path.engine} does not serve it")
        for variant, spec in specs.items():
            axes = path.axes[variant] if on_path else spec.axes
            simulated_n = set(spec.axes.get("n_servers", ()))
            axis_names = list(axes)
            combos = list(itertools.product(*(axes[a] for a in axis_names))) if axis_names else [()]
            for combo in combos:
                values, where = _point_values(spec, dict(zip(axis_names, combo)), variant, names, named)
                engines = [auto_engine(cfg, policy, values) if e == AUTO else e for e in cfg["engines"]]
                if on_path:
                    engines = _path_engines(cfg, policy, variant, engines, path.engine, values,
                                            simulated_n, skipped)
                    if engines is None:
                        continue
                point = Point(len(points), policy, values)
                points.append(point)
                _check_limit_models(cfg, policy, engines, values, where)
                for engine in engines:
                    tasks += _tasks(cfg, point, engine, settings, where)
                if len(tasks) > MAX_TASKS:
                    raise ConfigError(f"replications={cfg['replications']!r}: more than {MAX_TASKS:,} tasks; "
                                      "a sweep may have at most that many (points x engines x replications)")
    return points, tasks, skipped


def _point_values(spec: _Spec, at: dict, variant, names: list[str], named: bool) -> tuple[dict, str]:
    """The values of the point at axis values ``at`` (the constants, the axes, the formulas in
    their order), each coerced to its parameter's kind, and the point in words for messages."""
    values: dict = dict(spec.constants)
    values.update(at)
    where = ", ".join(f"{a}={_fmt(v)}" for a, v in at.items())
    where = ("point " + where) if where else "params"
    if variant is not None:
        where += f" (variant {variant})"
    for key in spec.order:
        scope = dict(values)
        if "n_servers" in scope:
            scope["N"] = scope["n_servers"]
        values[key] = evaluate(f"params.{key}", spec.formulas[key], scope)
    values = {n: (_coerce(n, values[n], where) if n in values else None) for n in names if n != "variant"}
    if named:
        values = {"variant": variant, **values}
    return values, where


def _path_engines(cfg: dict, policy: str, variant, engines: list[str], path_engine: str, values: dict,
                  simulated_n: set, skipped: list[str]) -> list[str] | None:
    """The engines of a point of an arm on the limit path: the path's engine beside the
    simulations at a simulated N, alone beyond; where the arm has no limit on the path
    (:func:`_limit_mismatch`), the simulations alone and the reason in ``skipped``, and None
    (no point) beyond them."""
    why = _limit_mismatch(cfg, policy, engines, path_engine, values)
    path_only = values["n_servers"] not in simulated_n
    if why is not None:
        if path_only:
            return None
        skipped.append(f"{policy}{f' ({variant})' if variant else ''}: {why}")
        return engines
    if path_only:
        return [path_engine]
    return engines if path_engine in engines else [*engines, path_engine]


def _tasks(cfg: dict, point: Point, engine: str, settings: RunSettings, where: str) -> list[dict]:
    """The tasks of one point on one engine, one per replication (one for a limit engine): its
    parameters, seed and run settings, the run length in events, checked by
    :func:`sim.check_task`, with the row's parameters (those the engine does not use null, but
    a limit's neutral value: :data:`_NEUTRAL`)."""
    policy, values, pid = point.policy, point.values, point.point_id
    ent = _entry(cfg, engine, policy)
    used = ent.params
    stochastic = engine in STOCHASTIC_ENGINES
    # a limit's row keeps a parameter it does not take where the point's value is the one it
    # models (_NEUTRAL: service=exponential beside the exponential mean field), so that its
    # row meets the simulations' arm in the analyses; any other such parameter is null
    row_params = {n: (v if n not in MODEL_PARAMS or n in used
                      or (not stochastic and _NEUTRAL.get(n, _NO_VALUE) == v) else None)
                  for n, v in values.items()}
    reps = _replications_at(cfg["replications"], values, where, policy) if stochastic else 1
    out = []
    for rep in range(reps):
        task = {
            "model": ent.model,
            "engine": engine,
            "policy": policy,
            **{k: values[k] for k in used if values.get(k) is not None},
            "seed": seed_for(int(cfg["seed"]), pid, engine, rep) if stochastic else 0,
            "init": settings.init,
            "n_batches": settings.n_batches,
            "max_level": settings.max_level,
            "h": settings.h,
        }
        if stochastic:
            task["se_method"] = settings.se_method
        if stochastic and settings.precision is not None:
            task["precision"] = float(settings.precision)
            task["precision_cap"] = float(settings.precision_cap)
            if settings.precision_estimate is not None:
                task["precision_estimate"] = settings.precision_estimate
        if settings.responses and engine in registry.model(ent.model).responses:
            # the engines that record, and the exact limits (docs/responses.md)
            task["responses"] = True
        if engine in PATH_ENGINES:  # the trajectory engines, docs/transients.md
            task["grid"] = settings.grid
        try:
            if task.get("time") is not None:  # run length in simulated time
                task["events"] = sim.events_for_time(task)
            sim.check_task(task)
        except ValueError as exc:
            raise ConfigError(f"{where} (policy={policy}, engine={engine}): {exc}") from None
        params_row = dict(row_params)
        if "events" in params_row and task.get("events") is not None:
            params_row["events"] = task["events"]  # the events the run has
        task["_meta"] = {
            "task_id": f"p{pid:05d}-{engine}-r{rep:03d}",
            "point_id": pid,
            "replication": rep,
            "params": params_row,
        }
        out.append(task)
    return out
