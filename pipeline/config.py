"""Typed configuration schema.

Registered with Hydra's ConfigStore as ``lbsweep_schema`` and used as the first entry of
``conf/config.yaml``'s defaults list, so that composition refuses a misspelt top-level key
(for example in a sweep file) and a value of the wrong type, naming the key. The values
themselves (ranges, names of policies, formulas) are checked in :mod:`pipeline.plan`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class RunConfig:
    #: initial state of simulations: ``meanfield`` (drawn from the fixed point) or ``empty``
    init: str = "meanfield"
    #: batches for batch means after the MSER-5 warm-up cut
    n_batches: int = 20
    #: number of tail fractions s_1..s_max_level reported
    max_level: int = 64
    #: threshold h of ``frac_within_h`` (jobs whose tasks all land at positions <= h)
    position_threshold: int = 1


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
    #: show a progress bar
    progress: bool = True


@dataclass
class MlflowConfig:
    enabled: bool = True
    #: null: ``sqlite:///<project folder>/mlflow.db``
    tracking_uri: Optional[str] = None
    experiment: str = "lbsweep"


@dataclass
class Config:
    #: sweep name; also the MLflow parent run's name and the output folder's parent
    name: str = "default"
    description: str = ""
    #: root seed; every task's seed derives from it, the point and the replication
    seed: int = 20261201
    policies: List[str] = field(default_factory=lambda: ["pod"])
    engines: List[str] = field(default_factory=lambda: ["agent", "meanfield"])
    replications: int = 2
    #: name -> list of values; the grid is their product
    axes: Dict[str, Any] = field(default_factory=dict)
    #: name -> constant number, or a formula string of other names
    params: Dict[str, Any] = field(default_factory=dict)
    #: variant name -> parameters overriding ``params`` (a categorical axis, column ``variant``)
    variants: Dict[str, Any] = field(default_factory=dict)
    #: analyses beyond the standard mean-field comparison (names in ``analysis.ANALYSES``)
    extra_analyses: List[str] = field(default_factory=list)
    run: RunConfig = field(default_factory=RunConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    #: where results go (default: Hydra's run folder)
    output_dir: Optional[str] = None
    #: dry run: validate, print the points, task count, events and estimated wall times; run nothing
    plan: bool = False
    #: the cluster size (CPUs) the dry run also estimates the wall time for
    plan_cpus: int = 64


def register() -> None:
    ConfigStore.instance().store(name="lbsweep_schema", node=Config)


register()
