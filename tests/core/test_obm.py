"""The ``obm`` standard error (sim.core.output) and the run-length rule of ``sim.run``: the
estimator on an AR(1) series whose variance of the mean is known, the fixed warm-up cut, and
``run.precision`` refusing a run shorter than the rule (docs/analysis.md, section 1)."""
from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter
from scipy.stats import t as student_t

import sim
from sim.core.output import MIN_RUN_PER_IAT, MIN_RUN_RELAX, OBM_DOF, OBM_WARMUP, TOO_SHORT, batch_means, ci_label, obm_cut


def _ar1(rng, phi, n):
    """A stationary AR(1) path (unit innovations, the first value from the stationary law)."""
    e = rng.normal(size=n)
    e[0] /= math.sqrt(1 - phi ** 2)
    return lfilter([1.0], [1.0, -phi], e)


def _var_of_mean(phi, n):
    k = np.arange(1, n)
    return (1 + 2 * np.sum((1 - k / n) * phi ** k)) / ((1 - phi ** 2) * n)


def test_obm_covers_the_mean_of_an_ar1_series():
    # phi = 0.9: integrated autocorrelation time 19, 1000 windows = 53 of them, batches of 100.
    # Measured (400 paths, this seed): coverage 0.94, rms SE / true sd 0.95 (OBM's known
    # downward bias at a batch of 5 IATs); the bounds are about 3 binomial sd (0.011) and the
    # bias plus its sampling spread
    phi, n, reps = 0.9, 1000, 400
    rng = np.random.default_rng(2024)
    sd = math.sqrt(_var_of_mean(phi, n))
    q = student_t.ppf(0.975, OBM_DOF)
    est, se = np.empty(reps), np.empty(reps)
    for r in range(reps):
        bm = batch_means(_ar1(rng, phi, n), np.ones(n), se_method="obm")
        est[r], se[r] = bm.estimate, bm.se
    cover = np.mean(np.abs(est) <= q * se)
    assert 0.92 <= cover <= 0.98, cover
    assert 0.90 <= math.sqrt(np.mean(se ** 2)) / sd <= 1.05


def test_obm_flags_a_run_short_against_its_autocorrelation():
    rng = np.random.default_rng(5)
    long_ = batch_means(_ar1(rng, 0.5, 1000), np.ones(1000), se_method="obm")  # IAT 3
    short = batch_means(_ar1(rng, 0.98, 1000), np.ones(1000), se_method="obm")  # IAT 99
    assert TOO_SHORT not in ci_label(20, long_.batch_values, long_)
    assert TOO_SHORT in ci_label(20, short.batch_values, short)
    assert 1000 / long_.iat >= MIN_RUN_PER_IAT > 1000 / short.iat


def _pod_task(t, **extra):
    task = {"engine": "occupancy", "policy": "pod", "d": 2, "n_servers": 4, "lam": 0.7, "time": t,
            "seed": 3, "init": "meanfield", "n_batches": 20, "max_level": 32, "h": 1, **extra}
    task["events"] = sim.events_for_time(task)
    return task


def test_obm_cuts_a_fixed_tenth_and_batch_means_keeps_mser5():
    relax = 1 / (1 - 0.7) ** 2
    new = sim.run(_pod_task(2 * MIN_RUN_RELAX * relax))
    old = sim.run(_pod_task(2 * MIN_RUN_RELAX * relax, se_method="batch_means"))
    windows = int(new["ci_method"].split(" windows")[0].split(" of ")[-1])  # kept windows
    n_windows = round(windows / (1 - OBM_WARMUP))
    assert obm_cut(n_windows) + windows == n_windows
    assert new["ci_method"].startswith("overlapping batch means")
    assert old["ci_method"].startswith("batch means, 20 batches after MSER-5 cut")
    assert TOO_SHORT not in new["ci_method"]


def test_precision_refuses_a_run_shorter_than_the_rule():
    relax = 1 / (1 - 0.7) ** 2
    short = sim.run(_pod_task(30 * relax))
    assert TOO_SHORT in short["ci_method"] and short["runs"] == 1
    assert sim.run_too_short(_pod_task(30 * relax), short) > 1
    # a loose target (met at once) still grows the run until the rule holds
    out = sim.run(_pod_task(30 * relax, precision=0.5, precision_cap=100))
    assert out["runs"] > 1
    assert out["sim_time"] - out["warmup_time"] >= MIN_RUN_RELAX * relax
    assert TOO_SHORT not in out["ci_method"]
    # the old method has no such rule (archives made before it reproduce as they were)
    old = sim.run(_pod_task(30 * relax, precision=0.5, precision_cap=100, se_method="batch_means"))
    assert old["runs"] == 1 and TOO_SHORT not in old["ci_method"]
