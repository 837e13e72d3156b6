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
from sim.core.declare import INT_LIMIT, bound_text
from sim.core.settings import SETTING_KEYS, RunSettings
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
                              f"{AUTO} (agent or occupancy by N, docs/sweeps.md)")
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
            raise ConfigError(f"engines: {AUTO}: policy {p!r} has neither an agent nor an occupancy "
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
#: the engine of ``limit_path.heavy_traffic`` and the largest N it reaches (floats end at 1.8e308)
HEAVY_ENGINE = "heavy_traffic"
HEAVY_N_MAX = 1e300


def _check_limit_path(cfg: dict) -> None:
    """Checks of ``limit_path`` (docs/sweeps.md)."""
    lp = cfg.get("limit_path") or {}
    top = lp.get("n_servers_max")
    if top is None:
        return
    if not (_is_number(top) and 1 < top <= PATH_N_MAX):
        raise ConfigError(f"limit_path.n_servers_max={top!r} must be null or a number in (1, {PATH_N_MAX:g}]")
    engine = lp.get("engine", "meanfield")
    if engine not in ENGINE_POLICIES or engine in STOCHASTIC_ENGINES:
        limits = [e for e in ENGINE_POLICIES if e not in STOCHASTIC_ENGINES]
        raise ConfigError(f"limit_path.engine={engine!r} is not a limit engine; valid: {', '.join(limits)}")
    per = lp.get("per_decade", 2)
    if not (_is_number(per) and float(per).is_integer() and 1 <= per <= 10):
        raise ConfigError(f"limit_path.per_decade={per!r} must be an integer in [1, 10]")
    served = [p for p in cfg.get("policies") or [] if _serves(cfg, engine, p)]
    if not served:
        raise ConfigError(f"limit_path.engine={engine!r} serves none of policies={list(cfg.get('policies') or [])}")
    ht = lp.get("heavy_traffic") or {}
    if ht.get("n_servers_max") is None:
        return
    lo, hi, every = ht.get("n_servers_min", 1e10), ht["n_servers_max"], ht.get("every_decades", 5.0)
    if not (_is_number(hi) and 1 < hi <= HEAVY_N_MAX):
        raise ConfigError(f"limit_path.heavy_traffic.n_servers_max={hi!r} must be null or a number in "
                          f"(1, {HEAVY_N_MAX:g}]")
    if not (_is_number(lo) and 1 < lo <= hi):
        raise ConfigError(f"limit_path.heavy_traffic.n_servers_min={lo!r} must be a number in "
                          f"(1, n_servers_max={hi!r}]")
    if not (_is_number(every) and 0.1 <= every <= 100):
        raise ConfigError(f"limit_path.heavy_traffic.every_decades={every!r} must be a number in [0.1, 100]")
    if not any(_serves(cfg, HEAVY_ENGINE, p) for p in cfg.get("policies") or []):
        raise ConfigError(f"limit_path.heavy_traffic: engine {HEAVY_ENGINE} serves none of "
                          f"policies={list(cfg.get('policies') or [])}")


#: the engine name that lets the plan choose agent or occupancy per point (a fixed rule of N
#: and the policy, never a timing: seeds hash the engine, so the tasks are the same everywhere)
AUTO = "auto"
AUTO_ENGINES = ("agent", "occupancy")
#: ``run.auto_occupancy_n``'s default: from this N on, ``auto`` picks the occupancy engine.
#: Measured (power-of-2, lam = 0.9, marginal CPU per job, AMD EPYC, 2 shared cores): agent 26,
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
    """The engine ``auto`` runs at a point: the occupancy engine when N >=
    ``run.auto_occupancy_n`` and it takes every parameter the point sets that the agent engine
    takes (heterogeneous ``service_rates``, for one, it does not), else the agent engine; the
    one of them that serves the policy if only one does."""
    cands = _auto_candidates(cfg, policy)
    if len(cands) == 1:
        return cands[0]
    threshold = (cfg.get("run") or {}).get("auto_occupancy_n", AUTO_OCCUPANCY_N)
    if values.get("n_servers") is None or values["n_servers"] < threshold:
        return "agent"
    agent, occ = (set(_entry(cfg, e, policy).params) for e in AUTO_ENGINES)
    set_here = {k for k, v in values.items() if v is not None and k in MODEL_PARAMS}
    return "occupancy" if not (set_here & agent) - occ else "agent"


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


def heavy_exponents(lo: float, hi: float, every: float) -> list[float]:
    """The exponents x of ``limit_path.heavy_traffic``'s points N = 10^x: from log10(lo) up to
    log10(hi) in steps of ``every`` decades (rounded to 1e-9, so that 10, 15, ... are exact)."""
    x0, x1 = math.log10(lo), math.log10(hi)
    out, j = [], 0
    while x0 + j * every <= x1 + 1e-9:
        out.append(round(x0 + j * every, 9))
        j += 1
    return out


def _heavy_values(spec: _Spec, x: float, others: dict, where: str) -> dict:
    """The point values at N = 10^x of one variant's formulas, in high precision
    (:func:`pipeline.formulas.evaluate_precise`, 30 digits more than the 10^x of N holds):
    numbers as floats, integers as ints, plus ``log10_n``, ``one_minus_lam`` (1 - lam in that
    precision: the float lam is 1.0 past N ~ 10^53) and ``d_real``; ``n_servers`` and ``d`` are
    None where they pass the Int64 columns."""
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
        lam = exact.get("lam")
        values = {}
        for name, v in exact.items():
            if name == "n_servers":
                continue
            if isinstance(v, mpmath.mpf):
                v = float(v)
            if _kind(name) == "int" and isinstance(v, (int, float)) and abs(v) >= INT_MAX:
                # beyond the Int64 column: d_real carries d; any other (a buffer b of 10^19)
                # stays a float, which the checks below refuse, never a null (no buffer)
                v = None if name == "d" else float(v)
            elif v is not None and not isinstance(v, str):
                v = _coerce(name, v, where)  # an auxiliary variable (d_cap) as a float
            values[name] = v
        # N itself where it is an integer of the Int64 column (10^10, 10^15), else log10_n alone
        values["n_servers"] = n_int if n_int is not None and n_int < INT_MAX else None
        values["log10_n"] = float(x)
        values["one_minus_lam"] = float(1 - lam) if lam is not None else None
        d = exact.get("d")
        values["d_real"] = float(d) if d is not None else None
    return values


def _heavy_traffic_points(cfg: dict, specs: dict, xs: list[float], names: list[str], named: bool,
                          pid: int, skipped: list[str], settings) -> list[tuple]:
    """``(Point, task)`` of ``limit_path.heavy_traffic`` (docs/sweeps.md): every policy the
    engine serves, every variant and combination of the other axes, at N = 10^x for the
    exponents ``xs`` (:func:`heavy_exponents`), with the values of :func:`_heavy_values`; point ids
    from ``pid`` on. A point where the form does not apply (what :func:`sim.check_task` refuses,
    or a parameter the simulations model that it does not, a buffer) is left out, and each arm
    with such points is named in ``skipped`` once: how many, from where, and the first reason.
    ``settings``: the sweep's run settings (:func:`run_settings`), as every task carries them."""
    out = []
    for policy in cfg["policies"]:
        if not _serves(cfg, HEAVY_ENGINE, policy):
            skipped.append(f"policy {policy}: engine {HEAVY_ENGINE} does not serve it")
            continue
        ent = _entry(cfg, HEAVY_ENGINE, policy)
        for variant, spec in specs.items():
            others = {a: v for a, v in spec.axes.items() if a != "n_servers"}
            for combo in itertools.product(*others.values()):
                fixed = "".join(f", {a}={_fmt(v)}" for a, v in zip(others, combo))
                varied = ", ".join(f"{a}={_fmt(v)}" for a, v in zip(others, combo) if len(others[a]) > 1)
                arm = f"{policy}{f' ({variant})' if variant else ''}{f' [{varied}]' if varied else ''}"
                left_out: list[tuple[float, str]] = []
                for x in xs:
                    where = f"point log10_n={x:g}{fixed}" + (f" (variant {variant})" if variant is not None else "")
                    raw = _heavy_values(spec, x, dict(zip(others, combo)), where)
                    # what the simulations model besides N, the load and d (a buffer b)
                    extra = [n for n in raw if n in MODEL_PARAMS and raw[n] is not None
                             and n not in ent.params and n not in _HEAVY_STANDS_FOR
                             and n not in _NOT_IN_LIMIT and _NEUTRAL.get(n, object()) != raw[n]]
                    task = {"model": ent.model, "engine": HEAVY_ENGINE, "policy": policy,
                            **{k: raw[k] for k in ent.params if raw.get(k) is not None},
                            "seed": 0, "init": settings.init, "n_batches": settings.n_batches,
                            "max_level": settings.max_level, "h": settings.h}
                    try:
                        if extra:
                            raise ValueError(f"{extra[0]}={_fmt(raw[extra[0]])} is simulated but engine="
                                             f"{HEAVY_ENGINE} has no model of it")
                        sim.check_task(task)
                    except ValueError as exc:  # the limit does not apply to this arm here
                        left_out.append((x, str(exc)))
                        continue
                    values = {n: raw.get(n) for n in names if n != "variant"}
                    if named:
                        values = {"variant": variant, **values}
                    row_params = {n: (v if n not in MODEL_PARAMS or n in ent.params else None)
                                  for n, v in values.items()}
                    task["_meta"] = {"task_id": f"p{pid:05d}-{HEAVY_ENGINE}-r000", "point_id": pid,
                                     "replication": 0, "params": row_params}
                    out.append((Point(pid, policy, values), task))
                    pid += 1
                if left_out:
                    at = (f"from N = 10^{left_out[0][0]:g} on" if len(left_out) == len(xs)
                          else f"at {len(left_out)} of its {len(xs)} N (10^{left_out[0][0]:g} to "
                               f"10^{left_out[-1][0]:g})")
                    skipped.append(f"{arm} {at}: {HEAVY_ENGINE}: {left_out[0][1]}")
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
#: a value equal to the model without the parameter
_NOT_IN_LIMIT = ("events", "time", "init_tail")
_NEUTRAL = {"k": 1}
#: what the heavy-traffic limit takes in other coordinates: N as log10_n, lam as one_minus_lam,
#: d as d_real
_HEAVY_STANDS_FOR = ("n_servers", "lam", "d")


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
    base = cfg.get("params") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"params={base!r} must be a mapping of name -> value or formula")
    specs = {v: _spec(cfg, {**base, **over}, "params" if v is None else f"variants.{v}")
             for v, over in variants.items()}

    # an auxiliary variable (not a model parameter) must be used by a formula of some variant
    # (or by the replications formula),
    # so that a misspelt parameter (``lamda``) is refused rather than silently ignored
    used = set().union(*(sp.used for sp in specs.values()))
    if isinstance(cfg["replications"], str):  # the replications formula uses names too
        used |= {"n_servers" if n == "N" else n for n in parse("replications", cfg["replications"])}
    if isinstance(cfg["replications"], str):
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

    policies: list[str] = list(cfg["policies"])
    engines: list[str] = list(cfg["engines"])
    replications = cfg["replications"]
    root_seed = int(cfg["seed"])
    run = cfg["run"]
    settings = run_settings(run)  # the run settings every task carries (sim.core.settings)

    # every parameter some (engine, policy) of the sweep requires (sim.registry.ENTRIES)
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
    _check_unused(cfg, specs, variants, policies, engines, unused)

    # the limit path (docs/sweeps.md): the limit engine at every simulated N and beyond
    lp = cfg.get("limit_path") or {}
    path_engine = lp.get("engine", "meanfield") if lp.get("n_servers_max") is not None else None
    path_axes: dict = {}
    if path_engine is not None:
        for v, spec in specs.items():
            if "n_servers" not in spec.axes:
                where = "axes" if v is None else f"axes (variant {v!r})"
                raise ConfigError(f"limit_path.n_servers_max={lp['n_servers_max']!r}: the path follows the "
                                  f"n_servers axis, and {where} has none")
            path_axes[v] = {**spec.axes, "n_servers": path_values(
                spec.axes["n_servers"], float(lp["n_servers_max"]), int(lp.get("per_decade", 2)))}

    # the size of the grid before expanding it (a product of long axes would exhaust memory)
    # (a formula's replications are known per point: counted as 1 here, the tasks checked below)
    per_point = sum((1 if isinstance(replications, str) else int(replications)) if e in STOCHASTIC_ENGINES
                    else 1 for e in engines)
    n_points = len(policies) * sum(math.prod(len(a) for a in sp.axes.values()) for sp in specs.values())
    n_path = len(policies) * sum(math.prod(len(a) for a in ax.values()) for ax in path_axes.values())
    ht = lp.get("heavy_traffic") or {}
    heavy_xs = []  # the exponents of the heavy-traffic points, N = 10^x
    if path_engine is not None and ht.get("n_servers_max") is not None:
        heavy_xs = heavy_exponents(float(ht.get("n_servers_min", 1e10)), float(ht["n_servers_max"]),
                                   float(ht.get("every_decades", 5.0)))
        n_path += len(policies) * len(heavy_xs) * sum(math.prod(len(v) for a, v in sp.axes.items() if a != "n_servers")
                                            for sp in specs.values())
    if n_points * per_point + n_path > MAX_TASKS:
        shape = " x ".join(f"{a}[{len(v)}]" for a, v in next(iter(specs.values())).axes.items())
        raise ConfigError(
            f"axes ({shape or 'none'}) x policies[{len(policies)}]"
            f"{f' x variants[{len(specs)}]' if len(specs) > 1 else ''}: {n_points:,} points and "
            f"{n_points * per_point:,} tasks; a sweep may have at most {MAX_TASKS:,} tasks "
            f"(points x engines x replications): split it or use fewer values")

    named = None not in variants
    names = (["variant"] if named else []) + list(dict.fromkeys(n for sp in specs.values() for n in sp.names))
    names = [n for n in names if n in MODEL_PARAMS] + [n for n in names if n not in MODEL_PARAMS]
    points: list[Point] = []
    tasks: list[dict] = []
    path_skipped: list[str] = []
    pid = 0
    for policy in policies:
        on_path = path_engine is not None and _serves(cfg, path_engine, policy)
        if path_engine is not None and not on_path:
            path_skipped.append(f"policy {policy}: engine {path_engine} does not serve it")
        for variant, spec in specs.items():
            axes = path_axes[variant] if on_path else spec.axes
            simulated_n = set(spec.axes.get("n_servers", ()))
            axis_names = list(axes)
            combos = list(itertools.product(*(axes[a] for a in axis_names))) if axis_names else [()]
            for combo in combos:
                values: dict = dict(spec.constants)
                values.update(dict(zip(axis_names, combo)))
                where = ", ".join(f"{a}={_fmt(v)}" for a, v in zip(axis_names, combo))
                where = ("point " + where) if where else "params"
                if variant is not None:
                    where += f" (variant {variant})"
                for key in spec.order:
                    scope = dict(values)
                    if "n_servers" in scope:
                        scope["N"] = scope["n_servers"]
                    values[key] = evaluate(f"params.{key}", spec.formulas[key], scope)
                values = {n: (_coerce(n, values[n], where) if n in values else None)
                          for n in names if n != "variant"}
                if named:
                    values = {"variant": variant, **values}
                point_engines = [auto_engine(cfg, policy, values) if e == AUTO else e for e in engines]
                if on_path:
                    why = _limit_mismatch(cfg, policy, point_engines, path_engine, values)
                    path_only = values["n_servers"] not in simulated_n
                    if why is not None:  # the arm has no limit on the path
                        if path_only:
                            continue
                        path_skipped.append(f"{policy}{f' ({variant})' if variant else ''}: {why}")
                    elif path_only:
                        point_engines = [path_engine]
                    elif path_engine not in point_engines:
                        point_engines.append(path_engine)
                point = Point(pid, policy, values)
                points.append(point)
                _check_limit_models(cfg, policy, point_engines, values, where)
                for engine in point_engines:
                    ent = _entry(cfg, engine, policy)
                    used = ent.params
                    # a model parameter the task does not use is null in its row
                    row_params = {n: (v if n not in MODEL_PARAMS or n in used else None)
                                  for n, v in values.items()}
                    reps = _replications_at(replications, values, where, policy) if engine in STOCHASTIC_ENGINES else 1
                    for rep in range(reps):
                        task = {
                            "model": ent.model,
                            "engine": engine,
                            "policy": policy,
                            **{k: values[k] for k in used if values.get(k) is not None},
                            "seed": seed_for(root_seed, pid, engine, rep) if engine in STOCHASTIC_ENGINES else 0,
                            "init": settings.init,
                            "n_batches": settings.n_batches,
                            "max_level": settings.max_level,
                            "h": settings.h,
                        }
                        if engine in STOCHASTIC_ENGINES:
                            task["se_method"] = settings.se_method
                        if engine in STOCHASTIC_ENGINES and settings.precision is not None:
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
                        tasks.append(task)
                pid += 1
                if len(tasks) > MAX_TASKS:
                    raise ConfigError(f"replications={replications!r}: more than {MAX_TASKS:,} tasks; a sweep may "
                                      "have at most that many (points x engines x replications)")
    # past the float range: the heavy-traffic limit along the same path (docs/sweeps.md), its
    # points after every other point so that the simulations' point ids and seeds stay as they are
    if heavy_xs:
        names += [n for n in ("log10_n", "one_minus_lam", "d_real") if n not in names]
        for point, task in _heavy_traffic_points(cfg, specs, heavy_xs, names, named, pid, path_skipped,
                                                 settings):
            points.append(point)
            tasks.append(task)
        pid = len(points)
    types = {n: (str if n == "variant" else KIND_TYPES[_kind(n)]) for n in names}
    # before any compute (and before plan=true's timing runs): docs/sweeps.md, memory
    memory = check_memory(tasks, cfg.get("execution") or {})
    return Plan(
        sweep=cfg["name"],
        root_seed=root_seed,
        points=points,
        tasks=tasks,
        param_columns=names,
        varying=[n for n in names if len({_hashable(pt.values.get(n)) for pt in points}) > 1],
        param_types=types,
        path_skipped=list(dict.fromkeys(path_skipped)),
        memory=memory,
    )
