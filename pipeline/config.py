"""Typed configuration schema.

Registered with Hydra's ConfigStore as ``lbsweep_schema`` and used as the first entry of
``conf/config.yaml``'s defaults list, so that composition refuses a misspelt top-level key
(for example in a sweep file) and a value of the wrong type, naming the key. The values
themselves (ranges, names of policies, formulas) are checked in :mod:`pipeline.plan`.

Hydra's own refusals (a misspelt key, a wrong type, an unknown or unreadable sweep file) are
turned into one line by :func:`compose_error_message`, so that ``python -m pipeline`` shows
every refusal the same way (exit code 2). ``conf/config.yaml`` names Hydra's log folder
(``outputs/.log/<time>_<name>_<pid>``) through the resolvers ``lbsweep_folder``
(:func:`run_folder_name`: a name that could leave ``outputs/``, ``../../x``, becomes
:data:`REFUSED_NAME_FOLDER`, so Hydra's log of the refusal stays under ``outputs/.log/``; the
plan then refuses the name itself) and ``lbsweep_pid`` (the process id: two runs started in the
same second get two log folders). The run folder itself is made by the pipeline
(:mod:`pipeline.runfolder`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from sim import registry
from sim.core.settings import DEFAULTS as RUN_DEFAULTS

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


@dataclass
class RunConfig:
    """The ``run:`` section: the run settings of every task (:class:`sim.core.settings.RunSettings`,
    whose defaults these are and whose checks the plan applies; ``position_threshold`` is the
    setting ``h``) and how the plan picks engines."""

    #: initial state of simulations: ``meanfield`` (drawn from the fixed point) or ``empty``
    init: str = RUN_DEFAULTS.init
    #: batches for batch means after the MSER-5 warm-up cut
    n_batches: int = RUN_DEFAULTS.n_batches
    #: number of tail fractions s_1..s_max_level reported
    max_level: int = RUN_DEFAULTS.max_level
    #: threshold h of ``frac_within_h`` (jobs whose tasks all land at positions <= h): the
    #: task key ``h``
    position_threshold: int = RUN_DEFAULTS.h
    #: null, or a target relative 95% half-width of each task's main estimate: a task is rerun
    #: longer until it is met (sim.run; docs/sweeps.md)
    precision: Optional[float] = RUN_DEFAULTS.precision
    #: the longest run a precision target may ask for, as a multiple of the given events/time
    precision_cap: float = float(RUN_DEFAULTS.precision_cap)
    #: the estimate whose relative half-width ``precision`` controls (null: the model's main
    #: estimate, e.g. ``mean_response``; ``queueing_ratio`` for the headline question)
    precision_estimate: Optional[str] = RUN_DEFAULTS.precision_estimate
    #: simulations' standard errors: ``obm`` (overlapping batch means with a run-length check;
    #: the default) or ``batch_means`` (``n_batches`` batches: the method before this setting,
    #: which ``pipeline.reproduce`` selects for an archive whose config lacks it); docs/analysis.md
    se_method: str = RUN_DEFAULTS.se_method
    #: record response-time distributions (quantiles, CCDF) in the dispatch model's agent and
    #: occupancy tasks and the JIQ occupancy tasks (docs/responses.md)
    responses: bool = RUN_DEFAULTS.responses
    #: trajectory engine: points of the time grid from 0 to `time`, both included (>= 2;
    #: docs/transients.md)
    grid: int = RUN_DEFAULTS.grid
    #: ``engines: [auto]``: the occupancy engine from this N on, the agent engine below
    #: (pipeline.plan.auto_engine; docs/sweeps.md)
    auto_occupancy_n: int = 100000


@dataclass
class ExecutionConfig:
    #: ``ray`` (a local cluster, or an existing one via ``address``/``RAY_ADDRESS``) or ``serial``
    backend: str = "ray"
    #: address of an existing Ray cluster (``host:6379``, ``auto``); RAY_ADDRESS wins;
    #: null: start a local cluster of this machine, bound to 127.0.0.1
    address: Optional[str] = None
    #: Ray authentication: ``auto`` (token if one is found, see docs/cluster.md), ``token``,
    #: ``disabled``; an explicit RAY_AUTH_MODE in the environment wins over ``auto``
    auth: str = "auto"
    #: seconds to wait for the cluster's address to answer before giving up (exit code 3)
    connect_timeout: float = 15.0
    #: CPUs of the local cluster (null: all cores of this machine); ignored when joining a cluster
    num_cpus: Optional[int] = None
    #: tasks are grouped into about this many Ray tasks per CPU that Ray reports
    tasks_per_cpu: int = 4
    #: planning estimate of simulator speed, used only to balance the groups
    events_per_second: float = 5.0e7
    #: Ray retries of a task whose worker died
    max_retries: int = 2
    #: the driver writes the rows in a new chunk file (pipeline/store.py) when this many wait ...
    chunk_rows: int = 1000
    #: ... or when the oldest waiting row is this many seconds old, or 5% of the run's time so far
    #: when longer (0: a chunk per row)
    chunk_seconds: float = 5.0
    #: show a progress bar
    progress: bool = True
    #: the plan refuses a task whose estimated memory exceeds this share (0, 1] of
    #: ``memory_gib`` (docs/sweeps.md, memory)
    memory_share: float = 0.5
    #: the memory, GiB, a task may use a share of; null: this machine's (its cgroup limit if
    #: lower); on a cluster give the smallest node's
    memory_gib: Optional[float] = None


@dataclass
class MlflowConfig:
    enabled: bool = True
    #: null: ``sqlite:///<project folder>/mlflow.db``
    tracking_uri: Optional[str] = None
    experiment: str = "lbsweep"
    #: seconds: the check of the store before the run starts (exit code 4 when it fails) and
    #: each HTTP request to a tracking server during the run (2 retries; then tracking is lost)
    timeout: float = 5.0


@dataclass
class PrecisePathConfig:
    """A section ``limit_path.<engine>``: the limit engine of a model's precise path
    (:class:`sim.core.declare.PrecisePath`, which carries the path past the float range)."""

    #: null: none; else the engine along the sweep's path from ``n_servers_min`` to this N (at
    #: most the path's declared largest N), at N = 10^x for x every ``every_decades`` decades;
    #: the formulas are evaluated in high precision there (docs/sweeps.md)
    n_servers_max: Optional[float] = None
    #: where it starts (overlapping the exact mean field, which it must match there)
    n_servers_min: float = 1e10
    #: decades between two of its points
    every_decades: float = 5.0


@dataclass
class _LimitPath:
    #: null: no path; else the limit ``engine`` is also evaluated along the sweep's path (its
    #: formulas of N) at every simulated N and beyond, in steps of 1/``per_decade`` decade, up
    #: to this N (docs/sweeps.md)
    n_servers_max: Optional[float] = None
    #: a limit engine of the sweep's model (the default is conf/config.yaml's)
    engine: Optional[str] = None
    #: points of the path per decade beyond the largest simulated N
    per_decade: int = 2


#: the ``limit_path`` section: the fields above, then one :class:`PrecisePathConfig` section per
#: precise path the shipped models declare, named after its engine (the path past the float
#: range; ``limit_path.heavy_traffic``, the dispatch model's), so that the schema names no engine
LimitPathConfig = make_dataclass(
    "LimitPathConfig",
    [(engine, PrecisePathConfig, field(default_factory=PrecisePathConfig))
     for engine in registry.precise_paths()],
    bases=(_LimitPath,))


@dataclass
class Config:
    #: sweep name; also the MLflow parent run's name and the output folder's parent
    name: str = "default"
    description: str = ""
    #: root seed; every task's seed derives from it, the point and the replication
    seed: int = 20261201
    #: the model of the sweep's policies (null: inferred from each (engine, policy), which is
    #: refused where two models declare it); docs/sweeps.md
    model: Optional[str] = None
    #: out-of-tree models to load (module paths on sys.path; docs/extending.md)
    models: List[str] = field(default_factory=list)
    #: the policies and engines of the sweep (the defaults are conf/config.yaml's)
    policies: List[str] = field(default_factory=list)
    engines: List[str] = field(default_factory=list)
    #: runs per point of each stochastic engine: an integer, or a formula of the point's
    #: parameters (e.g. more runs where lam is near 1; docs/sweeps.md)
    replications: Any = 2
    #: name -> list of values; the grid is their product
    axes: Dict[str, Any] = field(default_factory=dict)
    #: name -> constant number, or a formula string of other names
    params: Dict[str, Any] = field(default_factory=dict)
    #: variant name -> parameters overriding ``params`` (a categorical axis, column ``variant``)
    variants: Dict[str, Any] = field(default_factory=dict)
    #: analyses beyond the standard mean-field comparison (names in ``analysis/catalog.py``)
    extra_analyses: List[str] = field(default_factory=list)
    run: RunConfig = field(default_factory=RunConfig)
    #: the limit engine along the sweep's path of N, far beyond simulation
    limit_path: LimitPathConfig = field(default_factory=LimitPathConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    #: where results go: null, a new ``outputs/<name>/<date>_<time>[-k]`` (pipeline/runfolder.py);
    #: a given folder must not exist yet (it is made exclusively; resume reuses a folder)
    output_dir: Optional[str] = None
    #: dry run: validate, print the points, task count, events and estimated wall times; run nothing
    plan: bool = False
    #: the cluster size (CPUs) the dry run also estimates the wall time for
    plan_cpus: int = 64


def check_name(name) -> str:
    """``name`` if it can name a folder under ``outputs/`` (and an MLflow run); else ConfigError."""
    if (not isinstance(name, str) or not name or any(c in name for c in "/\\")
            or name.startswith(".") or name != name.strip() or not name.isprintable()):
        raise ConfigError(f"name={name!r} must be a non-empty name without slashes, leading dot "
                          "or surrounding spaces")
    return name


#: the part of Hydra's log folder (under ``outputs/.log/``) that names a run whose ``name`` is refused
REFUSED_NAME_FOLDER = "_refused_name"


def run_folder_name(name) -> str:
    """``name`` if it is a valid sweep name, else :data:`REFUSED_NAME_FOLDER` (never raises:
    the plan refuses the name with the usual one-line message and exit code 2)."""
    try:
        return check_name(name)
    except ConfigError:
        return REFUSED_NAME_FOLDER


def compose_error_message(exc: BaseException) -> str:
    """One line for an exception raised while Hydra composes the config (bad override, unknown
    key or sweep, a sweep file that is not YAML or not text), naming the key or file."""
    import yaml
    from hydra.errors import MissingConfigException

    seen = exc
    while seen is not None:  # a ConfigError (from a resolver) says it best
        if isinstance(seen, ConfigError):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = (exc.problem or "").replace("\t", "\\t")
        context = f" ({exc.context})" if exc.context else ""
        return f"config file {where}: not valid YAML: {problem}{context}"
    if isinstance(exc, yaml.YAMLError):
        return f"a config file is not valid YAML: {_one_line(str(exc))}"
    if isinstance(exc, UnicodeDecodeError):
        return f"config file {_file_in_traceback(exc)} is not text (UTF-8): {exc.reason} at byte {exc.start}"
    text = str(exc)
    cause = exc.__cause__
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        first = text.strip().splitlines()[0]
        return f"{first}; available: {', '.join(exc.options) or '(none)'}"
    m = re.match(r"In '(sweep/[^']+)': ConfigKeyError", text)
    if m and "Key 'sweep' not in" in (str(cause) if cause else text):
        return (f"{m.group(1)}.yaml: its first line must be '# @package _global_' (without it "
                "its keys land under 'sweep', which is not a configuration key)")
    if cause is not None and str(cause) not in text:
        text += "\n" + str(cause)
    return _one_line(text)


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines()]
    keep = [ln.rstrip(".:") for ln in lines
            if ln and not ln.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(keep)


def _file_in_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    found = "(unknown)"
    while tb is not None:
        path = tb.tb_frame.f_locals.get("full_path")
        if isinstance(path, str):
            found = path
        tb = tb.tb_next
    return found


def compose(overrides: list[str], config_dir: Path | str = CONF_DIR):
    """The config as ``python -m pipeline`` composes it; ConfigError (one line) if Hydra refuses."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pipeline.safe_yaml import check_sweep_files

    try:
        check_sweep_files(list(overrides), Path(config_dir))  # bounded YAML before Hydra reads it
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides))
    except ConfigError:
        raise
    except Exception as exc:  # Hydra, OmegaConf, YAML and decoding errors
        raise ConfigError(compose_error_message(exc)) from exc


def register() -> None:
    ConfigStore.instance().store(name="lbsweep_schema", node=Config)
    if not OmegaConf.has_resolver("lbsweep_folder"):
        OmegaConf.register_new_resolver("lbsweep_folder", run_folder_name)
    if not OmegaConf.has_resolver("lbsweep_pid"):
        OmegaConf.register_new_resolver("lbsweep_pid", lambda: str(os.getpid()))


register()
