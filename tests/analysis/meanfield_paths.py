"""The project's own mean-field paths for the calibration battery (issue 44, item 3): the
``meanfield`` engine's queueing ratio of batch-filling and batch-sampling along the
``sub_halfin_whitt`` path (``lam = 1 - N^-0.3``, ``k = ceil(ln^2 N)``, each rule for d capped at
``floor(N / k)``) at the N of the default run's simulations, 10^2..10^6 in half decades and
10^7. Every one of these sequences vanishes as N -> infinity except d = 2 (the heavy-traffic
engine and the derived bound, docs/analysis.md), yet their values over 10^2..10^7 rise, fall
and step with the integer d.

``python -m tests.analysis.meanfield_paths`` recomputes them with the engine (about 2 minutes
of CPU) and rewrites ``meanfield_paths.json`` beside this file; the battery reads the JSON."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("meanfield_paths.json")
#: the default run's simulated N (its grid: 10^2..10^6 in half decades, then 10^7)
NS = (100, 316, 1000, 3162, 10000, 31623, 100000, 316228, 1000000, 10000000)
ALPHA, BETA = 0.3, 1.0
#: the sweep's rules for d (conf/sweep/sub_halfin_whitt.yaml) as functions of (lam, k, N)
RULES = {
    "c1": lambda lam, k, n: math.ceil(1 / ((1 - lam) * math.log(k))),
    "c4": lambda lam, k, n: math.ceil(4 / ((1 - lam) * math.log(k))),
    "c1_loglog": lambda lam, k, n: math.ceil(math.log(math.log(n)) / ((1 - lam) * math.log(k))),
    "const2": lambda lam, k, n: 2,
    "single_task": lambda lam, k, n: math.ceil(1 / (1 - lam)),
}
#: the limit each path has as N -> infinity (docs/analysis.md): to zero, or growing (d = 2)
LIMIT = {"c1": "zero", "c4": "zero", "c1_loglog": "zero", "single_task": "zero", "const2": "grow"}
POLICIES = ("batch_filling", "batch_sampling")


def point(n: int, variant: str) -> dict:
    lam = 1.0 - BETA * n ** -ALPHA
    k = math.ceil(math.log(n) ** 2)
    d = min(RULES[variant](lam, k, n), n // k)
    return {"n_servers": n, "lam": lam, "k": k, "d": d}


def compute() -> dict:
    import sim

    out = {}
    for policy in POLICIES:
        for variant in RULES:
            rows = []
            for n in NS:
                p = point(n, variant)
                r = sim.run({"model": "dispatch", "engine": "meanfield", "policy": policy, "seed": 0, **p})
                rows.append({**p, "queueing_ratio": r["queueing_ratio"]})
                print(policy, variant, n, r["queueing_ratio"], file=sys.stderr, flush=True)
            out[f"{policy} {variant}"] = {"limit": LIMIT[variant], "points": rows}
    return out


def load() -> dict:
    """The stored table: ``{"<policy> <variant>": {"limit", "points": [{n_servers, lam, k, d,
    queueing_ratio}, ...]}}``."""
    return json.loads(TABLE.read_text())


if __name__ == "__main__":
    TABLE.write_text(json.dumps(compute(), indent=1) + "\n")
    print(f"wrote {TABLE}", file=sys.stderr)
