"""Golden rows: every stored task of ``tests/golden/<model>.json`` rerun through ``sim.run`` gives
its stored row, every field but the timing ones, on any x86-64 CPU.

The rows were written on one machine and are checked on others, whose numba code, numpy SIMD
kernels, libm variants and OpenBLAS kernels differ in the last bits (docs/reproduce.md, "Across
CPUs"). So each field is compared by what can move it:

- **Stochastic engines** (agent, occupancy, population, slotted; the trajectories' simulated
  paths): the RNG path is integer-exact (the seeds, the uniforms, the event sequence and every
  count), and so are the estimates made from it: they are compared **bitwise**. Measured:
  every such field equal bit for bit between the machine that wrote the rows, this project's
  AMD EPYC hosts and an emulated baseline x86-64 CPU (:mod:`tests.golden.cross_cpu`). Only the
  fields *computed from* the estimates by special functions, root finding or an ODE move, and
  each has its tolerance in :data:`DERIVED`.
- **Limit engines** (deterministic: mean fields, refined terms, the heavy-traffic quadrature):
  every float to the tolerance in :data:`LIMITS`, which follows from the solver that makes the
  value; ints, strings and the shape of lists stay exact.

:data:`LIMITS` and :data:`DERIVED` are the only places a tolerance is granted;
``test_the_check_catches_*`` prove the check still fails on a change one ulp past them, on
a perturbed engine and on any change of a stochastic row. The files are made by
``tests/golden/make_golden.py`` (never by a test); a change that moves a number past these
tolerances must say so and rewrite them."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from sim import registry
from sim.testing import differences, exact
from tests.golden.make_golden import TASKS, TIMING, golden_row

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Tol:
    """``|a - b| <= rtol * max(|a|, |b|) + atol``; ``why`` names the solver it follows from."""

    rtol: float
    atol: float
    why: str

    def holds(self, a: float, b: float) -> bool:
        if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
            return exact(a) == exact(b)
        return abs(a - b) <= self.rtol * max(abs(a), abs(b)) + self.atol


#: Limit engines: every float of their rows. The tolerance is the solver's own, times the
#: amplification measured across CPUs (``tests/golden/cross_cpu.py``).
LIMITS: dict[str, Tol] = {
    # closed forms (pod, jsq, random; exp/log/pow last bits) and fixed points found by brentq
    # (xtol 1e-15), hybr (tol 1e-14) or Newton (1e-15) from an ODE warm start (BDF/LSODA,
    # rtol 1e-8 .. 1e-10): the fixed point is the root to ~1e-14 times its conditioning;
    # measured <= 4e-16 (AMD hosts), one ulp on Intel ("1.4999999999999998 -> 1.5")
    "meanfield": Tol(1e-9, 1e-13, "root finders to 1e-14 after ODE warm starts at rtol >= 1e-10"),
    "population_meanfield": Tol(1e-9, 1e-13, "LSODA (rtol 1e-10) to near the fixed point, hybr xtol 1e-14"),
    # the 1/N term: linear solves with the Jacobian (and Hessian) at that fixed point, which
    # amplify the fixed point's last bits: measured 5.7e-10 relative between two AMD EPYC
    # hosts, 4.1e-8 against the emulated baseline CPU, 4e-8 on an Intel Xeon (issue 43:
    # mean_queue_1n 1.5012335128 -> 1.5012335712): at most 4% of the tolerance
    "refined": Tol(1e-6, 1e-10, "linear solves at a fixed point known to ~1e-14 x its conditioning"),
    "population_refined": Tol(1e-6, 1e-10, "as refined: linear solves at the declared drift's fixed point"),
    # fixed-rule Gauss-Legendre quadrature and log-space pmf sums: no stopping tolerance,
    # rounding only (sums of ~10^4 terms)
    "heavy_traffic": Tol(1e-11, 1e-300, "fixed 16-point Gauss-Legendre panels and pmf sums: rounding only"),
}

#: Fields of stochastic rows that are computed from the estimates, by field-name prefix.
DERIVED: dict[str, Tol] = {
    # the response-time ccdf as a Gamma mixture (regula falsi to rtol 1e-13, expm1/log1p) on a
    # geometric grid made by powers, and quantiles by brentq (xtol 1e-10, rtol 1e-12): measured
    # 4e-15 relative on the ccdf, 1 ulp on the grid and on the quantiles' SEs
    "response_": Tol(1e-9, 1e-12, "quantiles by brentq (xtol 1e-10); the ccdf's regula falsi to 1e-13"),
    # the ODE path beside a simulated path (BDF/LSODA rtol 1e-10, atol 1e-13 .. 1e-14) and the
    # sup-distance between the two: measured 2.5e-10 relative (|x| > 1e-12), 5.8e-12 absolute
    # against the emulated baseline CPU (2.3% of the tolerance)
    "traj_ode_": Tol(1e-8, 1e-12, "the ODE solvers' rtol 1e-10, atol 1e-13, integrated to t = 5"),
    "traj_sup_dist": Tol(1e-8, 1e-12, "a sup over |path - ODE path|: the ODE's tolerance"),
}


def tolerance(engine: str, key: str) -> Tol | None:
    """The tolerance of ``key`` in a row of ``engine``; None: bitwise."""
    decl = registry.DECLARED_ENGINES.get(engine)
    if decl is not None and decl.kind != "stochastic":
        return LIMITS[engine]
    return next((t for prefix, t in DERIVED.items() if key.startswith(prefix)), None)


def _cell_moved(a, b, tol: Tol | None) -> bool:
    if tol is None:
        return exact(a) != exact(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_cell_moved(x, y, tol) for x, y in zip(a, b))
    if type(a) is float and type(b) is float:
        return not tol.holds(a, b)
    return exact(a) != exact(b)


def moved(engine: str, stored: dict, fresh: dict) -> list[str]:
    """One line per field that moved past its tolerance (bitwise where it has none), is missing
    or is new; the timing fields aside."""
    out = []
    for key in sorted((set(stored) | set(fresh)) - set(TIMING)):
        if key not in fresh or key not in stored:
            out += differences({key: stored[key]} if key in stored else {}, {key: fresh[key]} if key in fresh else {})
            continue
        tol = tolerance(engine, key)
        if _cell_moved(stored[key], fresh[key], tol):
            how = "bitwise" if tol is None else f"rtol {tol.rtol:g}, atol {tol.atol:g}"
            out.append(f"{key} ({how}): stored {stored[key]!r}, now {fresh[key]!r}")
    return out


def _records() -> list[tuple[str, int, dict]]:
    out = []
    for name in TASKS:
        for i, rec in enumerate(json.loads((HERE / f"{name}.json").read_text())):
            out.append((name, i, rec))
    return out


RECORDS = _records()


def test_exact_tells_what_equality_would_not():
    assert exact(0.0) != exact(-0.0) and exact(1) != exact(1.0) and exact(True) != exact(1)
    assert exact(math.nan) == exact(float("nan")) and exact([0.1 + 0.2]) != exact([0.3])
    assert differences({"a": 1.0, "b": 2}, {"a": 1.0000000000000002, "c": 3}) == [
        "a: stored 1.0, now 1.0000000000000002", "b: missing (stored 2)", "c: new field 3"]


def test_every_entry_has_golden_rows():
    stored = {(rec["task"]["model"], rec["task"]["engine"], rec["task"]["policy"]) for _, _, rec in RECORDS}
    # every entry of a model with golden rows (a model added later adds its file to TASKS)
    entries = {(e.model, e.engine, e.policy) for e in registry.ENTRIES if e.model in TASKS}
    assert set(TASKS) <= set(registry.SHIPPED)
    assert not entries - stored, f"entries without golden rows (add tasks to make_golden.py): {sorted(entries - stored)}"
    assert all(not set(TIMING) & set(rec["row"]) for _, _, rec in RECORDS)


def test_every_limit_engine_states_its_tolerance():
    limit_engines = {rec["task"]["engine"] for _, _, rec in RECORDS
                     if registry.DECLARED_ENGINES[rec["task"]["engine"]].kind != "stochastic"}
    assert limit_engines == set(LIMITS), "each limit engine with golden rows states its tolerance here"
    assert all(t.rtol <= 1e-6 and t.why for t in (*LIMITS.values(), *DERIVED.values()))


@pytest.mark.parametrize("name,index,record", RECORDS,
                         ids=[f"{n}-{i}-{r['task']['engine']}-{r['task']['policy']}" for n, i, r in RECORDS])
def test_golden_row(name, index, record):
    diff = moved(record["task"]["engine"], record["row"], golden_row(record["task"]))
    assert not diff, f"{name}.json row {index} ({record['task']}) moved:\n" + "\n".join(diff)


# --- the check still catches real changes -------------------------------------------------------

def _one_ulp_past(x: float, tol: Tol) -> float:
    """The float nearest ``x`` from above that ``tol`` no longer accepts."""
    y = x + tol.rtol * abs(x) + tol.atol
    y = y if y > x else math.nextafter(x, math.inf)
    while tol.holds(x, y):
        y = math.nextafter(y, math.inf)
    return y


def _first(engine: str) -> dict:
    return next(rec for _, _, rec in RECORDS if rec["task"]["engine"] == engine)


@pytest.mark.parametrize("engine", sorted(LIMITS))
def test_the_check_catches_a_limit_value_one_ulp_past_its_tolerance(engine):
    row = _first(engine)["row"]
    key = next(k for k, v in sorted(row.items()) if type(v) is float and v != 0 and math.isfinite(v))
    tol = LIMITS[engine]
    past = _one_ulp_past(row[key], tol)
    assert moved(engine, row, {**row, key: past}), f"{engine}: {key} one ulp past its tolerance passed"
    inside = math.nextafter(past, -math.inf)
    assert tol.holds(row[key], inside) and not moved(engine, row, {**row, key: inside})


@pytest.mark.parametrize("engine", ["agent", "occupancy", "population", "slotted"])
def test_the_check_catches_a_one_ulp_change_of_a_stochastic_estimate(engine):
    row = _first(engine)["row"]
    estimates = [k for k, v in sorted(row.items()) if type(v) is float and math.isfinite(v) and tolerance(engine, k) is None]
    assert estimates
    for key in estimates:
        assert moved(engine, row, {**row, key: math.nextafter(row[key], math.inf)}), f"{engine}: {key} moved one ulp unseen"
    for key in [k for k, v in row.items() if type(v) is int]:
        assert moved(engine, row, {**row, key: row[key] + 1})


@pytest.mark.parametrize("engine", ["agent", "population"])
def test_the_check_catches_another_sample_path(engine):
    """A changed RNG path (here: the next seed) moves the row far past every tolerance."""
    rec = _first(engine)
    assert moved(engine, rec["row"], golden_row({**rec["task"], "seed": rec["task"]["seed"] + 1}))


def test_the_check_catches_a_perturbed_limit_engine(monkeypatch):
    """A deterministic engine whose answer moves by 10 x its tolerance (here: the load a hair
    higher, as a wrong constant in a drift would move it) fails the check."""
    rec = next(r for _, _, r in RECORDS if r["task"]["engine"] == "meanfield" and r["task"]["policy"] == "pod")
    tol = LIMITS["meanfield"]
    perturbed = golden_row({**rec["task"], "lam": rec["task"]["lam"] * (1 + 10 * tol.rtol)})
    assert moved("meanfield", rec["row"], perturbed)
