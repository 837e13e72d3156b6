"""docs/figures/heavy_traffic_path.png: the batch-filling queueing ratio along the path
lam = 1 - N^-0.3, k = ceil(ln^2 N), d = ceil(c / ((1 - lam) ln k)), c = 1 and 4: the exact
recursion (tests/dispatch/heavy_traffic_exact.json, to N = 10^30), the heavy-traffic mean field
(sim.dispatch.meanfield.heavy_traffic, to N = 10^1000), its Gumbel form and the leading rate
ln ln k / ln k; right: the ratio over ln ln k / ln k against ln k, the limit to k = 10^9.

    nice .venv/bin/python docs/figures/heavy_traffic_path.py [OUT.png]
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sim.dispatch.meanfield import heavy_traffic as ht

REPO = Path(__file__).resolve().parents[2]
COLORS = {1: "tab:blue", 4: "tab:orange"}


def main(out: Path):
    fixture = json.loads((REPO / "tests/dispatch/heavy_traffic_exact.json").read_text())
    fig = Figure(figsize=(12, 5.2))
    FigureCanvasAgg(fig)
    ax, bx = fig.subplots(1, 2)
    xs = np.unique(np.concatenate([np.arange(2, 30, 0.5), np.geomspace(30, 1000, 40)]))
    t0 = time.perf_counter()
    for c in (1, 4):
        col = COLORS[c]
        ratio, gumbel, lead, logn = [], [], [], []
        for x in xs:
            p = ht.path_point(x, c)
            out_ = ht.queueing_ratio(p["k"], p["d"], p["one_minus_lam"])
            ratio.append(out_["queueing_ratio"])
            rho = out_["mu"] / p["k"]
            gumbel.append(ht.asymptotic_ratio(p["k"], out_["mu"]) if rho < 0.9 else np.nan)
            lead.append(ht.leading_rate(p["k"]))
            logn.append(x)
        ax.plot(logn, ratio, "-", color=col, lw=2, label=f"heavy-traffic mean field, c = {c}")
        ax.plot(logn, gumbel, "--", color=col, lw=1.2, label=f"Gumbel form, c = {c}")
        rows = [r for r in fixture["rows"] if r["c"] == c]
        ax.plot([r["log10_n"] for r in rows], [r["queueing_ratio"] for r in rows], "o",
                color=col, mfc="white", ms=6, label=f"exact recursion, c = {c}")
        # right: ratio / (ln ln k / ln k) against ln k, the eps -> 0 limit (mu = c k / ln k)
        lks = np.linspace(3.0, math.log(1e9), 40)
        rel, relg = [], []
        for lk in lks:
            k = int(round(math.exp(lk)))
            mu = c * k / math.log(k)
            lead_k = ht.leading_rate(k)
            rel.append(ht.limit_ratio(k, mu)["queueing_ratio"] / lead_k)
            relg.append(ht.asymptotic_ratio(k, mu) / lead_k if mu / k < 0.9 else np.nan)
        bx.plot(lks, rel, "-", color=col, lw=2, label=f"limit (mu = c k / ln k), c = {c}")
        bx.plot(lks, relg, "--", color=col, lw=1.2, label=f"Gumbel form, c = {c}")
    ax.plot(xs, [ht.leading_rate(ht.path_point(x, 1)["k"]) for x in xs], ":", color="k",
            lw=1.5, label="ln ln k / ln k")
    ax.set_xscale("log")
    ax.set_xlabel("log10 N  (k = ceil(ln^2 N): 22 at 10^2, 4772 at 10^30, 53019 at 10^100)")
    ax.set_ylabel("queueing ratio (E[T] - H_k) / H_k")
    ax.set_title("batch-filling on lam = 1 - N^-0.3, d = ceil(c / ((1 - lam) ln k))")
    ax.set_xticks([2, 5, 10, 30, 100, 300, 1000])
    ax.set_xticklabels(["2", "5", "10", "30", "100", "300", "1000"])
    ax.set_ylim(0.0, 0.4)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    bx.axhline(1.0, color="k", lw=0.8)
    bx.set_xlabel("ln k")
    bx.set_ylabel("ratio / (ln ln k / ln k)")
    bx.set_title("the leading rate: ratio ~ ln ln k / ln k (constant 1, any c)")
    bx.grid(alpha=0.3)
    bx.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"{out} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs/figures/heavy_traffic_path.png")
