"""Tests of sim.core.output (MSER-5 truncation and batch means) on synthetic series."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.output import batch_means, contiguous_batches, mser, mser5
from tests.helpers import ALPHA, Z


def test_step_transient_is_cut_and_its_bias_removed():
    # the first 200 of 1000 points are shifted by 3 sigma (6.7 sigma of a 5-point batch mean):
    # MSER-5 must drop all of them, and the kept mean must be unbiased within 4 SE
    rng = np.random.default_rng(1)
    for _ in range(20):
        y = rng.normal(size=1000)
        y[:200] += 3.0
        cut = mser5(y)
        assert 200 <= cut <= 500
        kept = y[cut:]
        assert abs(kept.mean()) <= Z * kept.std(ddof=1) / math.sqrt(kept.size)


def test_exponential_transient_is_cut_near_it():
    # bias 5 exp(-t/50): above one batch-mean sigma (0.45) until t = 50 ln(5/0.45) = 120
    rng = np.random.default_rng(2)
    t = np.arange(1000)
    cuts = []
    for _ in range(20):
        y = rng.normal(size=t.size) + 5.0 * np.exp(-t / 50.0)
        cut = mser5(y)
        cuts.append(cut)
        kept = y[cut:]
        assert abs(kept.mean()) <= Z * kept.std(ddof=1) / math.sqrt(kept.size)
    assert 50 <= np.median(cuts) <= 250, cuts


def test_iid_series_is_cut_near_zero():
    rng = np.random.default_rng(3)
    cuts = np.array([mser5(rng.normal(size=1000)) for _ in range(50)])
    # on stationary data MSER-5 keeps everything most of the time and cuts little otherwise
    assert np.mean(cuts == 0) >= 0.5, cuts
    assert cuts.mean() <= 0.05 * 1000, cuts


def test_mser_edge_cases():
    assert mser5(np.full(100, 2.0)) == 0  # constant: nothing to cut
    assert mser5(np.arange(7.0)) == 0  # fewer than 2 batches
    assert mser(np.r_[np.full(10, 9.0), np.zeros(90)], batch_size=1) == 10
    assert mser5(np.r_[np.full(500, 9.0), np.zeros(500)]) <= 500  # at most half is cut
    with pytest.raises(ValueError):
        mser5(np.ones((3, 3)))
    with pytest.raises(ValueError):
        mser5(np.r_[np.nan, np.ones(20)])


def test_contiguous_batches():
    starts = contiguous_batches(103, 20)
    sizes = np.diff(starts)
    assert starts[0] == 0 and starts[-1] == 103 and sizes.size == 20
    assert sizes.max() - sizes.min() <= 1
    with pytest.raises(ValueError):
        contiguous_batches(5, 20)


def test_batch_means_se_of_iid_data_matches_sigma_over_sqrt_n():
    # (B-1) se^2 / (sigma^2 / n) ~ chi2(B-1) for i.i.d. normal data: check it with the 4-SE tail
    rng = np.random.default_rng(4)
    sigma, n, b = 2.0, 20_000, 20
    y = 1.0 + sigma * rng.normal(size=n)
    bm = batch_means(y, n_batches=b)
    assert bm.batch_values.size == b
    assert abs(bm.estimate - 1.0) <= Z * sigma / math.sqrt(n)
    stat = (b - 1) * bm.se**2 / (sigma**2 / n)
    lo, hi = sps.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], b - 1)
    assert lo <= stat <= hi, (bm.se, sigma / math.sqrt(n))
    # pooled over many series the mean squared SE is unbiased for sigma^2 / n
    se2 = np.array([batch_means(sigma * rng.normal(size=2_000), n_batches=b).se ** 2
                    for _ in range(400)])
    truth = sigma**2 / 2_000
    assert abs(se2.mean() - truth) <= Z * se2.std(ddof=1) / math.sqrt(se2.size)


def test_batch_means_ratio_estimator():
    rng = np.random.default_rng(5)
    jobs = rng.integers(50, 150, size=1000).astype(float)
    total = np.array([rng.exponential(2.0, size=int(k)).sum() for k in jobs])
    bm = batch_means(total, jobs, n_batches=20)
    assert bm.estimate == pytest.approx(total.sum() / jobs.sum())
    assert abs(bm.estimate - 2.0) <= Z * bm.se
    # a batch without jobs makes the SE undefined, not silently wrong
    jobs[:60] = 0.0
    total[:60] = 0.0
    assert math.isnan(batch_means(total, jobs, n_batches=20).se)
    with pytest.raises(ValueError):
        batch_means(total, jobs[:-1])
    with pytest.raises(ValueError):
        batch_means(total, jobs, n_batches=1)


def test_epilogue_is_the_hand_written_end_of_a_run():
    """sim.core.output.epilogue gives, bit for bit, what an engine computed by hand: the MSER-5
    cut, batch means of each ratio over the kept windows, mean queue, tail, the CI label."""
    from sim.core.output import batch_means, ci_label, epilogue, tail_estimate, warmup_cut

    rng = np.random.default_rng(5)
    n, nb, n_servers = 400, 20, 50
    lengths = np.full(n, 64.0)
    w_qarea = rng.integers(1000, 2000, n) + np.concatenate([np.linspace(3000, 0, 40), np.zeros(n - 40)]).astype(np.int64)
    w_tail = rng.integers(0, 3000, (n, 5))
    w_resp, w_jobs = rng.random(n) * 100, rng.integers(40, 60, n)
    w_waited, w_arr = rng.integers(0, 30, n), rng.integers(40, 60, n)
    est = epilogue(n_servers=n_servers, n_batches=nb, weights=lengths, w_qarea=w_qarea, w_tail=w_tail,
                   ratios={"mean_response": (w_resp * 0.5, w_jobs), "prob_wait": (w_waited, w_arr)},
                   ci_note="; note")
    cut = warmup_cut(w_qarea, lengths, n_servers, nb)
    assert cut > 0 and est["warmup_windows"] == cut and est["n_windows"] == n and est["n_batches"] == nb
    keep = slice(cut, n)
    resp = batch_means(w_resp[keep] * 0.5, w_jobs[keep], nb)
    pwait = batch_means(w_waited[keep], w_arr[keep], nb)
    queue = batch_means(w_qarea[keep], lengths[keep] * n_servers, nb)
    tail, tail_se = tail_estimate(w_tail[keep], lengths[keep], n_servers, nb)
    assert (est["mean_response"], est["mean_response_se"]) == (resp.estimate, resp.se)
    assert (est["prob_wait"], est["prob_wait_se"]) == (pwait.estimate, pwait.se)
    assert (est["mean_queue"], est["mean_queue_se"]) == (queue.estimate, queue.se)
    assert np.array_equal(est["tail"], tail) and np.array_equal(est["tail_se"], tail_se)
    assert est["ci_method"] == ci_label(nb, resp.batch_values) + "; note" and est["responses"] is None
    later = epilogue(n_servers=n_servers, n_batches=nb, weights=lengths, w_qarea=w_qarea, w_tail=w_tail,
                     ratios={"mean_response": (w_resp, w_jobs)}, cut=cut + 7)
    assert later["warmup_windows"] == cut + 7
    assert later["mean_response"] == batch_means(w_resp[cut + 7:], w_jobs[cut + 7:], nb).estimate


def test_epilogue_by_littles_law():
    """Without a measured mean response, ``little`` gives it as mean queue / arrival rate, and
    the CI label is made from the queue's batches over that rate."""
    from sim.core.output import batch_means, ci_label, epilogue, warmup_cut

    rng = np.random.default_rng(8)
    n, nb = 200, 10
    lengths = np.full(n, 32.0)
    w_qarea, w_tail = rng.integers(500, 900, n), rng.integers(0, 900, (n, 3))
    w_waited, w_arr = rng.integers(0, 20, n), rng.integers(20, 40, n)
    kw = dict(n_servers=10, n_batches=nb, weights=lengths, w_qarea=w_qarea, w_tail=w_tail,
              ratios={"prob_wait": (w_waited, w_arr)})
    est = epilogue(**kw, little=0.7)
    keep = slice(warmup_cut(w_qarea, lengths, 10, nb), n)
    queue = batch_means(w_qarea[keep], lengths[keep] * 10, nb)
    assert (est["mean_response"], est["mean_response_se"]) == (queue.estimate / 0.7, queue.se / 0.7)
    assert est["ci_method"] == ci_label(nb, queue.batch_values / 0.7)
    assert math.isnan(epilogue(**kw, little=0.0)["mean_response"])
    assert "mean_response" not in epilogue(**kw)
