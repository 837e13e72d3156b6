"""Exact batch-filling queueing ratio (sim.dispatch.meanfield.large_batch) along the path
lam = 1 - N^-0.3, k = ceil(ln^2 N), d = ceil(c / ((1 - lam) ln k)), written as JSON: the
fixture of tests/dispatch/test_heavy_traffic.py.

    nice .venv/bin/python tests/dispatch/make_heavy_traffic_exact.py OUT.json C LOG10N [LOG10N ...]

Appends one record per point to OUT.json (``{"commands": [...], "rows": [...]}``; the command
line of every run that added rows is kept), so a long run can be stopped and resumed. The fixture
tests/dispatch/heavy_traffic_exact.json was made by the commands it lists.
"""
from __future__ import annotations

import json
import os
import sys
import time

from sim.dispatch.meanfield import large_batch
from sim.dispatch.meanfield.heavy_traffic import path_point


def main(argv):
    out, c, xs = argv[0], float(argv[1]), [float(x) for x in argv[2:]]
    data = {"commands": [], "rows": []}
    if os.path.exists(out):
        with open(out) as f:
            data = json.load(f)
    data["commands"].append(" ".join(["python", "tests/dispatch/make_heavy_traffic_exact.py", *argv]))
    rows = data["rows"]
    for x in xs:
        pt = path_point(x, c)
        t0 = time.perf_counter()
        res = large_batch.queueing_ratio(1.0 - pt["one_minus_lam"], pt["k"], pt["d"],
                                         one_minus_lam=pt["one_minus_lam"])
        rows.append({**pt, "queueing_ratio": res["queueing_ratio"],
                     "mean_response": res["mean_response"], "mass": res["mass"],
                     "levels": int(res["s"].size), "seconds": time.perf_counter() - t0})
        print(json.dumps(rows[-1]), flush=True)
        with open(out + ".tmp", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(sys.argv[1:])
