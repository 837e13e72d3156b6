"""The calibration battery of analysis.asymptotics (issues 35 and 44): synthetic arms on
N = 10^2..10^7 in half decades, relative SE 1% at the smallest N rising to 3% at the largest,
Gaussian noise at those SEs; humps that rise and vanish after a peak at 10^5, 10^9 and 10^20
in two forms; sequences with the steps that rounding d = ceil(c / ((1 - lam) ln k)) and
k = ceil(ln^2 N) puts in them; and the project's own mean-field paths (their values at the
default run's N, :mod:`tests.analysis.meanfield_paths`) with 1% Gaussian noise, judged with the
general rivals alone and with the rivals the zero-queueing analysis adds (the heavy-traffic form
at the arm's own k and the limit path itself, known to vanish).

``python -m tests.analysis.asymptotics_battery DRAWS [JOBS] [--outside]`` prints the table of
docs/analysis.md (family x outcome fractions, level coverage), JOBS processes at a time; with
``--outside``, also humps wider than the battery's (:data:`OUTSIDE`), which are not asserted."""
from __future__ import annotations

import math
import sys
import time
from collections import Counter

import numpy as np

from analysis.asymptotics import CONVERGES, NOT_VANISHING, OUTCOMES, UNDECIDED, VANISHING, asymptotic_verdict, rival_from_points, rival_plus_gap
from analysis.models.zero_queueing.verdicts import HEAVY_RIVAL, PATH_GAP_RIVAL, PATH_RIVAL, heavy_traffic_shape
from tests.analysis import meanfield_paths

NS = 10.0 ** np.arange(2.0, 7.01, 0.5)
REL = 0.01 * 3.0 ** (np.arange(NS.size) / (NS.size - 1))
LN = np.log(NS)
K = np.ceil(LN ** 2)
OUTLIER_SE = 5.0


#: the headline path (conf/sweep/sub_halfin_whitt.yaml): lam = 1 - N^-0.3, d = ceil(1 / ((1 - lam) ln k))
D_REAL = 1.0 / (NS ** -0.3 * np.log(K))
#: the relative steps rounding d up makes: (d_real / d)^0.3, between 0.8 and 1, 1 in the limit
STEPS = (D_REAL / np.ceil(D_REAL)) ** 0.3


def _gamma_hump(peak_log10, a=0.3):
    """``a t e^(1 - t)``, t = ln N / ln N_peak: rises like ln N, vanishes like N^(-1/ln N_peak)."""
    t = LN / (peak_log10 * math.log(10.0))
    return a * t * np.exp(1.0 - t)


def _sech_hump(peak_log10, a=0.3):
    """``2 a / (t + 1/t)``, t = ln N / ln N_peak: rises like ln N, vanishes like 1/ln N."""
    t = LN / (peak_log10 * math.log(10.0))
    return 2.0 * a / (t + 1.0 / t)


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
    "flat 0.33": (np.full(NS.size, 0.33), "level", 0.33, None, True),
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
    # issue 44: humps that vanish after a peak inside or beyond the range, two forms
    "hump t e^(1-t), peak 10^5": (_gamma_hump(5), "zero", None, None, False),
    "hump t e^(1-t), peak 10^9": (_gamma_hump(9), "zero", None, None, False),
    "hump t e^(1-t), peak 10^20": (_gamma_hump(20), "zero", None, None, False),
    "hump 2/(t + 1/t), peak 10^5": (_sech_hump(5), "zero", None, None, False),
    "hump 2/(t + 1/t), peak 10^9": (_sech_hump(9), "zero", None, None, False),
    "hump 2/(t + 1/t), peak 10^20": (_sech_hump(20), "zero", None, None, False),
    # the steps of rounding d up (the headline path's c = 1 rule) on smooth sequences
    "N^-0.1 x steps of d": (0.4 * NS ** -0.1 * STEPS, "zero", None, None, False),
    "ln ln k / ln k x steps of d": (np.log(np.log(K)) / np.log(K) * STEPS, "zero", None, None, False),
    "0.1 + 0.3 N^-0.3 x steps of d": (0.1 + 0.3 * NS ** -0.3 * STEPS, "level", 0.1, None, False),
    "flat 0.3 x steps of d": (0.3 * STEPS, "level", 0.3, None, False),
}

def _wide_hump(peak_log10, width, a=0.3):
    """``a / cosh((x - x_p) / s)``, x = ln ln N: a hump of width about s in x (the battery's
    two forms have s = 1)."""
    x = np.log(LN)
    return a / np.cosh((x - math.log(peak_log10 * math.log(10.0))) / width)


#: humps wider than the battery's, at and past the widest hump rival (``HUMP_WIDTH_MAX``): not
#: asserted (``--outside`` on the command line measures them; docs/analysis.md, "What the
#: humps' width assumes")
OUTSIDE = {f"hump 1/cosh((x - x_p)/{w:g}), peak 10^{p}": (_wide_hump(p, w), "zero", None, None, False)
           for w in (1.5, 2.0) for p in (5, 9, 20)}

#: the project's mean-field paths: (the zero-queueing analysis' rivals added?) per path
MF_REL = 0.01
for _name, _path in meanfield_paths.load().items():
    _cls = _path["limit"]
    for _own in (False, True):
        FAMILIES[f"mean field {_name}{' (model rivals)' if _own else ''}"] = (
            np.array([q["queueing_ratio"] for q in _path["points"]]), _cls, None, None, False)

#: the outcomes that are right for a class (a flat sequence is a level already reached)
RIGHT = {"zero": {VANISHING}, "level": {CONVERGES, NOT_VANISHING}, "grow": {NOT_VANISHING},
         "none": {NOT_VANISHING}}
#: the outcomes that are wrong (undecided is neither)
WRONG = {"zero": {CONVERGES, NOT_VANISHING}, "level": {VANISHING}, "grow": {VANISHING, CONVERGES},
         "none": {VANISHING}}


def _mf(name: str):
    """The stored path of a mean-field family, or None."""
    if not name.startswith("mean field "):
        return None
    return meanfield_paths.load()[name[len("mean field "):].removesuffix(" (model rivals)")]


def rivals_of(name: str) -> list:
    """The rivals the zero-queueing analysis adds for a mean-field family judged with them
    (:func:`analysis.models.zero_queueing.verdicts.arm_rivals`: the heavy-traffic form at the
    arm's own k, and the limit path in the class of its limit); none for the others."""
    path = _mf(name)
    if path is None or not name.endswith("(model rivals)"):
        return []
    n = [q["n_servers"] for q in path["points"]]
    cls = "zero" if path["limit"] == "zero" else "level"
    values = [q["queueing_ratio"] for q in path["points"]]
    return [rival_from_points(HEAVY_RIVAL, "zero", "a ln ln k / ln k at the arm's own k", n,
                              heavy_traffic_shape([q["k"] for q in path["points"]])),
            rival_from_points(PATH_RIVAL, cls, "a x the limit path", n, values),
            rival_plus_gap(PATH_GAP_RIVAL, cls, "a x the limit path + g N^b", n, values)]


def _family(name: str):
    return FAMILIES[name] if name in FAMILIES else OUTSIDE[name]


def draw(name: str, i: int):
    """The i-th noisy arm of a family: (n, r, se)."""
    truth, _, _, shift, _ = _family(name)
    path = _mf(name)
    if path is not None:  # the default run's N, 1% Gaussian noise
        ns = np.array([q["n_servers"] for q in path["points"]], dtype=float)
        se = MF_REL * np.abs(truth)
        r = truth + se * np.random.default_rng([44, sum(map(ord, name)), i]).standard_normal(truth.size)
        return ns, r, se
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
    floor = _family(name)[2]
    for i in range(draws):
        v = asymptotic_verdict(*draw(name, i), seed=[i, 1], rivals=rivals_of(name))
        counts[v.outcome] += 1
        fragile += bool(v.fragile)
        if v.outcome == CONVERGES and floor is not None and v.level is not None:
            levels += 1
            covered += v.level_lo <= floor <= (math.inf if v.level_hi is None else v.level_hi)
    cls = _family(name)[1]
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


def summary(results: list[dict]) -> str:
    """The rates the issue bounds, over the families: the largest share of wrong calls of each
    kind, and the smallest share of right calls of the clear families (with their undecided)."""
    def worst(cls_set, wrong):
        rs = [(r["counts"].__getitem__, r) for r in results if _family(r["name"])[1] in cls_set]
        return max(((sum(c(o) for o in wrong) / r["draws"], r["name"]) for c, r in rs), default=(0.0, "-"))
    lv = worst({"zero"}, (CONVERGES, NOT_VANISHING))
    vz = worst({"level", "grow", "none"}, (VANISHING,))
    clear = [r for r in results if _family(r["name"])[4]]
    right = min(((r["right"], r["name"]) for r in clear), default=(1.0, "-"))
    und = max(((r["undecided"], r["name"]) for r in clear), default=(0.0, "-"))
    return (f"false 'converges' or 'not vanishing' (families to zero): at most {lv[0]:.3f} ({lv[1]}); "
            f"false 'vanishing' (levels, growth, oscillation): at most {vz[0]:.3f} ({vz[1]}); "
            f"clear families right: at least {right[0]:.3f} ({right[1]}), undecided at most {und[0]:.3f} ({und[1]})")


def _one(args):
    return run_family(*args)


if __name__ == "__main__":
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    t0, c0 = time.time(), time.process_time()
    # further arguments: the families to run first (by a part of their name), the rest after;
    # --outside: the wider humps of OUTSIDE after the battery (a table of their own)
    keys = [a for a in sys.argv[3:] if a != "--outside"]
    first = [n for key in keys for n in FAMILIES if key in n]
    names = list(dict.fromkeys(first + list(FAMILIES)))
    if "--outside" in sys.argv[3:]:
        names += list(OUTSIDE)
    if jobs > 1:
        from multiprocessing import Pool

        with Pool(jobs) as pool:
            res = []
            for r in pool.imap(_one, [(name, draws) for name in names]):
                res.append(r)
                print(f"{r['name']}: {dict(r['counts'])} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
                print(table([r]).split("\n")[-1], file=sys.stderr, flush=True)
    else:
        res = []
        for name in names:
            res.append(run_family(name, draws))
            print(f"{name}: {dict(res[-1]['counts'])} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    res.sort(key=lambda r: names.index(r["name"]))
    print(table([r for r in res if r["name"] in FAMILIES]))
    print("\n" + summary([r for r in res if r["name"] in FAMILIES]))
    if any(r["name"] in OUTSIDE for r in res):
        print("\nOutside the battery (not asserted):\n")
        print(table([r for r in res if r["name"] in OUTSIDE]))
    print(f"\n{len(FAMILIES)} families x {draws} draws: {time.time() - t0:.0f} s wall, "
          f"{time.process_time() - c0:.0f} s CPU (this process; {jobs} process(es))")
