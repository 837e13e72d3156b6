"""Shared test helpers: the statistical check every simulator test uses, and Hydra composition.

:func:`assert_within_se` is the one statistical assertion of the suite: an estimate is within
``z`` estimated standard errors of the truth, plus a finite-N ``allowance`` that was *measured*
(the caller says where), never a bare hand-picked tolerance.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

from scipy import stats as _sps

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
#: the working folder of the tests' ``python -m pipeline`` subprocesses (set per test session by
#: tests/conftest.py): their ``outputs/`` (Hydra's logs in outputs/.log/, default run folders)
#: land there, never in the repository's
DRIVER_CWD: Path | None = None


def driver_cwd() -> Path:
    """The working folder for a ``python -m pipeline`` subprocess of a test (not the repository)."""
    assert DRIVER_CWD is not None, "tests/conftest.py's session fixture sets it"
    return DRIVER_CWD

#: standard errors an estimate may be from the truth (two-sided p about 6e-5 per check)
Z = 4.0
#: the same two-sided tail for tests of distributions (chi-square p-values), about 6.3e-5
ALPHA = 2 * _sps.norm.sf(Z)


def assert_within_se(estimate, truth, se, what: str = "estimate", *, allowance: float = 0.0,
                     z: float = Z):
    """Assert ``|estimate - truth| <= z * se + allowance`` with ``se`` an estimated standard error.

    ``se`` must be finite and positive (a zero SE would make the check exact and fragile: a
    test that cannot fail is not a test either). ``allowance`` is the measured finite-N gap,
    zero unless the caller documents its measurement. Returns the gap in standard errors.
    """
    estimate, truth, se = float(estimate), float(truth), float(se)
    assert math.isfinite(estimate), f"{what}: estimate {estimate!r} is not finite"
    assert math.isfinite(se) and se > 0, f"{what}: standard error {se!r} must be finite and > 0"
    gap = abs(estimate - truth)
    bound = z * se + allowance
    assert gap <= bound, (
        f"{what}: {estimate:.6g} vs truth {truth:.6g}: gap {gap:.3g} > {z} SE ({se:.3g})"
        + (f" + allowance {allowance:.3g}" if allowance else ""))
    return gap / se


def assert_engines_agree(a, se_a, b, se_b, what: str = "estimates", *, z: float = Z):
    """Two independent estimates of one quantity agree within ``z`` combined standard errors."""
    se = math.hypot(float(se_a), float(se_b))
    return assert_within_se(a, b, se, what, z=z)


def compose(overrides: list[str], *, return_hydra_config: bool = False):
    """The config as ``python -m pipeline`` would compose it (Hydra's compose API); with
    ``return_hydra_config`` Hydra's own section too, as the Hydra app sees it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import pipeline.config  # noqa: F401

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose("config", overrides=overrides, return_hydra_config=return_hydra_config)


def run_sweep_as_the_app(overrides: list[str]) -> dict:
    """``run_sweep`` of the composed config with Hydra's config set, as ``python -m pipeline``
    runs it (so that the overrides are recorded, in MLflow too); quiet."""
    from hydra.core.hydra_config import HydraConfig

    from pipeline.run import run_sweep, to_plain

    HydraConfig.instance().set_config(compose(overrides, return_hydra_config=True))
    try:
        return run_sweep(to_plain(compose(overrides)), quiet=True)
    finally:
        HydraConfig.instance().cfg = None


def sweep_names() -> list[str]:
    return sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))


@contextlib.contextmanager
def unresponsive_peer():
    """``(host, port)`` on loopback where a connection attempt times out instead of being refused.

    A socket listening with backlog 0 whose accept queue is already full: the kernel drops later
    SYNs, so ``connect`` waits for its time limit (a socket that merely never accepts would still
    complete the handshake). Used wherever a test needs a peer that does not answer; tests never
    address anything outside loopback.
    """
    import select
    import socket

    server = socket.socket()
    clients = []
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(16):  # fill the queue: stop at the first attempt that no longer completes
            c = socket.socket()
            c.setblocking(False)
            clients.append(c)
            c.connect_ex(("127.0.0.1", port))
            if not select.select([], [c], [], 0.2)[1]:
                break
        else:
            raise RuntimeError("could not fill a listen(0) backlog on loopback")
        yield "127.0.0.1", port
    finally:
        for c in clients:
            c.close()
        server.close()


@contextlib.contextmanager
def registry_restored(*packages: str):
    """The registry's tables (and :data:`sim.core.declare.DECLARED_ENGINES`) as they were before,
    once a test that registered a model (a toy package) ends; the modules of ``packages`` are
    forgotten too, so that the next test imports its own copy."""
    import sys

    from sim import registry
    from sim.core import declare

    tables = [registry.MODELS, registry.PARAMS, registry.RESULTS, registry.MAIN_ESTIMATE,
              registry.ENGINE_POLICIES, registry._BY_KEY, declare.DECLARED_ENGINES,
              registry.ENTRIES, registry.ENGINES, registry.POLICIES]
    saved = [t.copy() for t in tables]
    try:
        yield registry
    finally:
        for table, old in zip(tables, saved):
            table.clear()
            table.update(old) if isinstance(table, dict) else table.extend(old)
        for name in [m for m in sys.modules if m.split(".")[0] in packages]:
            del sys.modules[name]


def write_package(root: Path, name: str, files: dict[str, str]) -> Path:
    """A package ``root/name`` of the given ``{file name: source}`` (dedented), for a toy model."""
    import textwrap

    pkg = root / name
    pkg.mkdir(parents=True)
    for fname, text in files.items():
        (pkg / fname).write_text(textwrap.dedent(text).lstrip())
    return pkg


def smoke_sweeps_in_one_store(tmp: Path, lams, extra: list[str]) -> tuple[dict, str]:
    """The smoke sweep at each lam of ``lams`` (20000 events, serial, no progress bar, plus the
    ``extra`` overrides) run as ``python -m pipeline`` runs it into one fresh SQLite MLflow
    store in ``tmp`` (the output folders there too): ``({lam: run_sweep's result, with the
    sweep's "overrides"}, the store's URI)``."""
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    outs = {}
    for lam in lams:
        overrides = ["+sweep=smoke", f"params.lam={lam}", "params.events=20000", *extra,
                     "execution.backend=serial", "execution.progress=false",
                     f"mlflow.tracking_uri={uri}", f"output_dir={tmp / f'out{lam}'}"]
        outs[lam] = run_sweep_as_the_app(overrides)
        outs[lam]["overrides"] = overrides
    return outs, uri


def plan_digests(names: list[str] | None = None) -> dict[str, str]:
    """Sweep name -> a digest of everything its plan holds (points, tasks with their model, seed
    and run length, column order), for every shipped sweep (``conf/sweep/*.yaml``)."""
    import hashlib
    import json

    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    out = {}
    for name in names or sweep_names():
        plan = make_plan(to_plain(compose([f"+sweep={name}", "output_dir=/nonexistent"])))
        data = [plan.root_seed, plan.param_columns, plan.varying, plan.param_types, plan.path_skipped,
                [(p.point_id, p.policy, p.values) for p in plan.points], plan.tasks]
        out[name] = hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()
    return out


#: the engines of the toy models the tests write (tests/test_toy_models.py,
#: tests/integration/test_extending.py): N independent M/M/1 queues behind random routing,
#: ``run_task`` simulates one queue (Lindley's recursion; ``events`` counts arrivals and
#: departures), ``exact`` is E[T] = 1 / (mu (1 - lam))
TOY_ENGINE = '''
"""The toy's engines: Lindley's recursion for one queue (by symmetry, any server's), and E[T]."""
import numpy as np


def run_task(task):
    rng = np.random.default_rng(task["seed"])
    n, lam, mu = int(task["events"]) // 2, task["lam"], task.get("mu", 1.0)
    gaps = rng.exponential(1.0 / (lam * mu), n)
    service = rng.exponential(1.0 / mu, n)
    wait = np.empty(n)
    w = 0.0
    for i in range(n):
        wait[i] = w
        w = max(0.0, w + service[i] - gaps[i])
    response = (wait + service)[n // 10:]
    means = np.array([b.mean() for b in np.array_split(response, 20)])
    return {"mean_response": float(means.mean()),
            "mean_response_se": float(means.std(ddof=1) / np.sqrt(means.size)),
            "n_jobs": int(response.size), "events_run": 2 * n, "sim_time": float(gaps.sum()),
            "ci_method": "batch means (20 batches), first 10% cut"}


def exact(task):
    return {"mean_response": 1.0 / (task.get("mu", 1.0) * (1.0 - task["lam"])), "ci_method": "closed form"}
'''


#: N independent M/M/1 queues behind random routing, with an engine of a new name and a limit
TOY_INIT = '''
"""Toy: N servers, each job to a uniformly chosen one; Poisson arrivals of rate lam * mu per
server and Exp(mu) service make every queue M/M/1: E[T] = 1 / (mu (1 - lam))."""
from sim.core.declare import Engine, Entry, Model, Param

EXAMPLE = {"n_servers": 10, "lam": 0.5, "mu": 2.0}


def events_per_time(task):
    return 2.0 * task["n_servers"] * task["lam"] * task["mu"]  # arrivals and departures


def check_task(task):
    if not 0.0 < task["lam"] < 1.0:
        raise ValueError(f"lam={task['lam']!r} must satisfy 0 < lam < 1")
    if not task["mu"] > 0:
        raise ValueError(f"mu={task['mu']!r} must be > 0")


MODEL = Model(
    name="NAME",
    title="toy: independent M/M/1 queues behind random routing",
    entries=(Entry("agent", "POLICY", "NAME.engine:run_task", ("mu",), example={**EXAMPLE, "events": 40000}),
             Entry("gillespie", "POLICY", "NAME.engine:run_task", ("mu",), example={**EXAMPLE, "events": 40000}),
             Entry("closed_form", "POLICY", "NAME.engine:exact", ("mu",), example=EXAMPLE)),
    params={"mu": Param("float", "service rate of every server")},
    results={},
    main_estimate="mean_response",
    events_per_time=events_per_time,
    check_task=check_task,
    labels={"POLICY": "random (toy)"},
    engine_decls=(Engine("gillespie", "KIND", "Gillespie simulation"),
                  Engine("closed_form", "limit", "closed form"),),
)
'''

def toy_files(name: str, kind: str = "stochastic", policy: str = "toy_random") -> dict[str, str]:
    init = TOY_INIT.replace("NAME", name).replace("KIND", kind).replace("POLICY", policy)
    return {"__init__.py": init, "engine.py": TOY_ENGINE}
