"""The calibration battery of analysis.asymptotics (issue 35, item 1): synthetic arms on
N = 10^2..10^7 in half decades, relative SE 1% at the smallest N rising to 3% at the largest,
Gaussian noise at those SEs. ``python -m tests.analysis.asymptotics_battery DRAWS`` prints the
table of docs/analysis.md (family x outcome fractions, level coverage)."""
from __future__ import annotations

import math
import sys
import time
from collections import Counter

import numpy as np

from analysis.asymptotics import CONVERGES, NOT_VANISHING, OUTCOMES, UNDECIDED, VANISHING, asymptotic_verdict

NS = 10.0 ** np.arange(2.0, 7.01, 0.5)
REL = 0.01 * 3.0 ** (np.arange(NS.size) / (NS.size - 1))
LN = np.log(NS)
K = np.ceil(LN ** 2)
OUTLIER_SE = 5.0


def _power(b, a=0.4):
    return a * (NS / NS[0]) ** b


def _with_outlier(truth, at, sign):
    t = truth.copy()
    return t, (at, sign * OUTLIER_SE)


#: name: (truth at NS, the true limit class "zero" / "level" / "grow" / "none", true floor or None,
#: (index, SEs) of a shifted point or None, clear: the issue's clear families)
FAMILIES = {
    "power N^-0.1": (0.4 * NS ** -0.1, "zero", None, None, True),
    "power N^-0.3": (0.4 * NS ** -0.3, "zero", None, None, True),
    "power N^-1": (5.0 * NS ** -1.0, "zero", None, None, True),
    "3 / ln N": (3.0 / LN, "zero", None, None, False),
    "1 / sqrt(ln N)": (1.0 / np.sqrt(LN), "zero", None, None, False),
    "ln ln N / ln N": (np.log(LN) / LN, "zero", None, None, False),
    "ln ln k / ln k, k = ceil(ln^2 N)": (np.log(np.log(K)) / np.log(K), "zero", None, None, False),
    "0.12 + 0.3 N^-0.5": (0.12 + 0.3 * NS ** -0.5, "level", 0.12, None, True),
    "0.05 + N^-0.3": (0.05 + 1.0 * NS ** -0.3, "level", 0.05, None, True),
    "0.2 + 2 N^-1": (0.2 + 2.0 * NS ** -1.0, "level", 0.2, None, True),
    "0.05 + 0.5 / ln N": (0.05 + 0.5 / LN, "level", 0.05, None, False),
    "flat 0.33": (np.full(NS.size, 0.33), "level", 0.33, None, False),
    "growing 0.36 -> 0.88": (0.36 * (NS / 100) ** (math.log(0.88 / 0.36) / math.log(1e5)), "grow", None, None, True),
    "oscillating 0.2 (1 + 0.1 sin)": (0.2 * (1 + 0.1 * np.sin(math.pi * np.log10(NS))), "none", None, None, False),
    "flat 0.33, last point 1e-4": (np.r_[np.full(NS.size - 1, 0.33), 1e-4], "level", 0.33, None, False),
    "N^-0.3, first +5 SE": (0.4 * NS ** -0.3, "zero", None, (0, 5.0), False),
    "N^-0.3, middle +5 SE": (0.4 * NS ** -0.3, "zero", None, (5, 5.0), False),
    "N^-0.3, last +5 SE": (0.4 * NS ** -0.3, "zero", None, (10, 5.0), False),
    "N^-0.3, last +10 SE": (0.4 * NS ** -0.3, "zero", None, (10, 10.0), False),
    "N^-0.3, first -5 SE": (0.4 * NS ** -0.3, "zero", None, (0, -5.0), False),
    "N^-0.3, middle -5 SE": (0.4 * NS ** -0.3, "zero", None, (5, -5.0), False),
    "N^-0.3, last -5 SE": (0.4 * NS ** -0.3, "zero", None, (10, -5.0), False),
    "0.12 + 0.3 N^-0.5, last -5 SE": (0.12 + 0.3 * NS ** -0.5, "level", 0.12, (10, -5.0), False),
    "0.12 + 0.3 N^-0.5, last +5 SE": (0.12 + 0.3 * NS ** -0.5, "level", 0.12, (10, 5.0), False),
}

#: the outcomes that are right for a class (a flat sequence is a level already reached)
RIGHT = {"zero": {VANISHING}, "level": {CONVERGES, NOT_VANISHING}, "grow": {NOT_VANISHING},
         "none": {NOT_VANISHING}}
#: the outcomes that are wrong (undecided is neither)
WRONG = {"zero": {CONVERGES, NOT_VANISHING}, "level": {VANISHING}, "grow": {VANISHING, CONVERGES},
         "none": {VANISHING}}


def draw(name: str, i: int):
    """The i-th noisy arm of a family: (n, r, se)."""
    truth, _, _, shift, _ = FAMILIES[name]
    se = REL * np.abs(truth)
    se = np.where(se > 0, se, 1e-6)
    rng = np.random.default_rng([35, sum(map(ord, name)), i])
    r = truth + se * rng.standard_normal(truth.size)
    if shift is not None:
        r[shift[0]] += shift[1] * se[shift[0]]
    return NS, r, se


def run_family(name: str, draws: int) -> dict:
    """Outcome counts, level coverage and fragility of one family over ``draws`` arms."""
    counts, covered, levels, fragile = Counter(), 0, 0, 0
    floor = FAMILIES[name][2]
    for i in range(draws):
        v = asymptotic_verdict(*draw(name, i), seed=[i, 1])
        counts[v.outcome] += 1
        fragile += bool(v.fragile)
        if v.outcome == CONVERGES and floor is not None and v.level is not None:
            levels += 1
            covered += v.level_lo <= floor <= (math.inf if v.level_hi is None else v.level_hi)
    cls = FAMILIES[name][1]
    return {"name": name, "draws": draws, "counts": counts, "levels": levels, "covered": covered,
            "fragile": fragile, "right": sum(counts[o] for o in RIGHT[cls]) / draws,
            "wrong": sum(counts[o] for o in WRONG[cls]) / draws, "undecided": counts[UNDECIDED] / draws}


def table(results: list[dict]) -> str:
    head = ("| family | draws | " + " | ".join(OUTCOMES) + " | right | wrong | fragile "
            "| level covers the floor (of *converges* with a level) |")
    lines = [head, "|" + "---|" * (len(OUTCOMES) + 6)]
    for r in results:
        cov = "-" if not r["levels"] else f"{r['covered'] / r['levels']:.2f} ({r['covered']}/{r['levels']})"
        lines.append(f"| {r['name']} | {r['draws']} | "
                     + " | ".join(f"{r['counts'][o] / r['draws']:.3f}" for o in OUTCOMES)
                     + f" | {r['right']:.3f} | {r['wrong']:.3f} | {r['fragile'] / r['draws']:.3f} | {cov} |")
    return "\n".join(lines)


if __name__ == "__main__":
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    t0, c0 = time.time(), time.process_time()
    res = []
    for name in FAMILIES:
        res.append(run_family(name, draws))
        print(f"{name}: {dict(res[-1]['counts'])} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(table(res))
    print(f"\n{len(FAMILIES)} families x {draws} draws: {time.time() - t0:.0f} s wall, "
          f"{time.process_time() - c0:.0f} s CPU")
