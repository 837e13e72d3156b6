"""The control-variate estimate of the queueing ratio (analysis.models.zero_queueing.control_variate):
its coverage on frames whose truth is known, where it declines to apply, and the simulated ratio
against the mean field along the headline sweep's path at N = 10^5 with it."""
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

import sim
from analysis.aggregate import aggregate
from analysis.models.zero_queueing import CV_METHOD, CV_MIN_REP, control_variate, cv_fit
from sim.dispatch.meanfield.large_batch import queueing_ratio as meanfield_ratio

PARAMS = ["n_servers", "lam"]
METRICS = ("queueing_ratio", "mean_response")


def frame(y, c, lam=0.9, drop=0.0, n_servers=1000):
    """Replication rows of one point: ratio y, busy fraction lam + c (tail[0])."""
    y, c = np.asarray(y, float), np.asarray(c, float)
    return pl.DataFrame({"policy": "batch_filling", "engine": "occupancy", "status": "ok",
                         "n_servers": n_servers, "lam": lam, "queueing_ratio": y,
                         "queueing_ratio_se": 0.01, "mean_response": 2.0 * (1.0 + y),
                         "mean_response_se": 0.02, "drop_prob": drop,
                         "tail": [[lam + ci, 0.5] for ci in c]})


def cv(f):
    return control_variate(f, aggregate(f, PARAMS, metrics=METRICS), PARAMS)


def interval(y, c):
    f = cv_fit(y, c)
    return f["estimate"], float(stats.t.ppf(0.975, f["dof"])) * f["se"], f["se"]


@pytest.mark.parametrize("n_rep", [4, 6, 12])
def test_interval_covers_the_mean_at_its_level(n_rep):
    """Y = mu + b C + e with C of mean 0 (the control's known mean) and e independent normal:
    the interval of the fit at C = 0 is exact t with R - 2 dof, so over 4000 sets of runs the
    95% interval covers mu in 95% of them (binomial SE 0.34%; accepted 93.6-96.4%, 4 SE)."""
    rng = np.random.default_rng(n_rep)
    mu, b = 0.15, 25.0
    hits, widths_cv, widths_raw = 0, [], []
    for _ in range(4000):
        c = rng.normal(0.0, 0.002, n_rep)
        y = mu + b * c + rng.normal(0.0, 0.003, n_rep)
        est, hw, _ = interval(y, c)
        hits += abs(est - mu) <= hw
        widths_cv.append(hw)
        widths_raw.append(stats.t.ppf(0.975, n_rep - 1) * y.std(ddof=1) / math.sqrt(n_rep))
    assert 0.936 <= hits / 4000 <= 0.964
    # the control explains b^2 var(C) = 0.0025 of var(Y) = 0.0025 + 0.000009: the interval narrows
    assert np.median(widths_cv) < 0.35 * np.median(widths_raw)


def test_a_curved_dependence_is_biased_by_its_curvature_over_r():
    """Y = mu + b C + g C^2 + e: E[Y] = mu + g var(C), and the fit at C = 0 is biased by about
    -2 g var(C) / R (the slope fitted on the same runs grows with their mean C). At the
    curvature measured on the single-task rule's runs at N = 10^6 (g var(C) = 0.0021 for runs of
    120 time units, residual sd 0.0037), with 6 replications: a bias of about 0.0007, well inside
    the SE (about 0.0017), and the 95% interval still covers at least 93%."""
    rng = np.random.default_rng(11)
    mu, b, sd, noise, r = 0.05, 12.0, 0.0013, 0.0037, 6
    g = 0.0021 / sd ** 2
    truth = mu + g * sd ** 2
    est, ses, hits = [], [], 0
    for _ in range(6000):
        c = rng.normal(0.0, sd, r)
        y = mu + b * c + g * c ** 2 + rng.normal(0.0, noise, r)
        e, hw, se = interval(y, c)
        est.append(e)
        ses.append(se)
        hits += abs(e - truth) <= hw
    bias = np.mean(est) - truth
    expected = -2.0 * g * sd ** 2 / r
    assert abs(bias - expected) < 4.0 * np.std(est) / math.sqrt(len(est)) + 0.3 * abs(expected)
    assert abs(bias) < 0.5 * np.median(ses)
    assert hits / 6000 >= 0.93


def test_frame_rows_take_the_control_variate():
    rng = np.random.default_rng(5)
    c = rng.normal(0.0, 0.002, 6)
    y = 0.15 + 25.0 * c + rng.normal(0.0, 0.003, 6)
    row = cv(frame(y, c)).row(0, named=True)
    est, hw, se = interval(y, c)
    assert row["ci_method"] == CV_METHOD
    assert (row["queueing_ratio"], row["queueing_ratio_hw"], row["queueing_ratio_se"]) == pytest.approx((est, hw, se))
    assert row["queueing_ratio_lo"] == pytest.approx(est - hw)
    # E[T] = 2 (1 + ratio) is adjusted the same way
    assert row["mean_response"] == pytest.approx(2.0 * (1.0 + row["queueing_ratio"]), rel=1e-12)


def test_declines_without_its_conditions():
    rng = np.random.default_rng(3)
    c = rng.normal(0.0, 0.002, 6)
    y = 0.1 + 20.0 * c
    plain = aggregate(frame(y, c), PARAMS, metrics=METRICS).row(0, named=True)
    for f, why in [(frame(y[: CV_MIN_REP - 1], c[: CV_MIN_REP - 1]), "too few replications"),
                   (frame(y, c, drop=0.01), "jobs dropped: the busy fraction's mean is unknown"),
                   (frame(y, c).with_columns(pl.lit(None, dtype=pl.List(pl.Float64)).alias("tail")), "no s_1")]:
        row = cv(f).row(0, named=True)
        assert row["ci_method"] != CV_METHOD, why
        assert row["queueing_ratio"] == row["queueing_ratio_raw"], why
        assert row["cv_corr"] is None, why
    row = cv(frame(y, c)).row(0, named=True)
    assert row["queueing_ratio_raw"] == pytest.approx(plain["queueing_ratio"])
    assert row["queueing_ratio_raw_hw"] == pytest.approx(plain["queueing_ratio_hw"])
    assert row["cv_corr"] == pytest.approx(1.0)
    assert row["queueing_ratio"] == pytest.approx(0.1, abs=1e-12)  # no residual: the exact mean


# The headline sweep's path at N = 10^5: lam = 1 - N^-0.3, k = ceil(log(N)^2), d by the rule.
# Measured here (2026-12-03, 20 replications of 30 time units, control variate): simulated -
# mean field = c1 -0.00005 [95% CI -0.00028, 0.00018], c1_loglog -0.0025 [-0.0036, -0.0014],
# c4 +0.0024 [-0.0018, +0.0066], const2 -0.0016 [-0.0023, -0.0008]; the allowance is the
# measured gap's far end, rounded up. (single_task: +0.052, a finite-N excess that closes as N
# alone grows, left out here: tests/integration/test_headline_path.py.)
N5 = 100_000
LAM5 = 1.0 - N5 ** -0.3
K5 = math.ceil(math.log(N5) ** 2)
PATH5 = {"c1": (7, 0.0003), "c1_loglog": (16, 0.004), "c4": (26, 0.007), "const2": (2, 0.0025)}


def path_d(n: int, arm: str) -> int:
    """d of a rule of the headline sweep at N = n (conf/sweep/sub_halfin_whitt.yaml)."""
    lam, k = 1.0 - n ** -0.3, math.ceil(math.log(n) ** 2)
    rule = {"c1": 1.0, "c4": 4.0, "c1_loglog": math.log(math.log(n))}
    return 2 if arm == "const2" else min(math.ceil(rule[arm] / ((1.0 - lam) * math.log(k))), n // k)


def assert_near_meanfield(n: int, lam: float, k: int, d: int, allowance: float, seed: int, reps: int = 6,
                          time: float = 30.0, what: str = "") -> None:
    """Batch-filling at N = n: the control-variate estimate of ``reps`` runs of ``time`` time units
    within 4 SE plus ``allowance`` of the mean field at the same (lam, k, d)."""
    rows = []
    for rep in range(reps):
        task = dict(engine="occupancy", policy="batch_filling", n_servers=n, lam=lam, k=k, d=d,
                    time=time, seed=seed + rep)
        task["events"] = sim.events_for_time(task)
        r = sim.run(task)
        rows.append({"policy": "batch_filling", "engine": "occupancy", "status": "ok", "n_servers": n,
                     "lam": lam, **{m: r[m] for m in METRICS}, **{f"{m}_se": r[f"{m}_se"] for m in METRICS},
                     "drop_prob": r["drop_prob"], "tail": r["tail"]})
    row = cv(pl.DataFrame(rows)).row(0, named=True)
    assert row["ci_method"] == CV_METHOD
    limit = meanfield_ratio(lam, k, d)["queueing_ratio"]
    assert abs(row["queueing_ratio"] - limit) <= 4.0 * row["queueing_ratio_se"] + allowance, (
        what, n, row["queueing_ratio"], row["queueing_ratio_se"], limit)


def assert_on_path(n: int, arm: str, allowance: float, seed: int, reps: int = 6) -> None:
    """Batch-filling at N = n on the headline path (runs of 30 time units) against the mean field."""
    lam, k = 1.0 - n ** -0.3, math.ceil(math.log(n) ** 2)
    assert_near_meanfield(n, lam, k, path_d(n, arm), allowance, seed, reps, what=arm)


def test_rules_give_the_path_of_the_sweep():
    assert {arm: path_d(N5, arm) for arm in PATH5} == {arm: d for arm, (d, _) in PATH5.items()}


@pytest.mark.parametrize("arm", sorted(PATH5))
def test_occupancy_agrees_with_the_mean_field_on_the_path(arm):
    assert_on_path(N5, arm, PATH5[arm][1], seed=9000)
