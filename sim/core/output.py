"""Output analysis for one simulation run: MSER-5 warm-up truncation and batch means.

Plain numpy functions on per-window accumulators (no numba): a run is split into ``W`` fine
windows, each holding sums (jobs completed, sum of responses, queue area, ...). The warm-up is
cut with MSER-5 on one window series, and the rest is grouped into contiguous batches.

References
----------
- K. P. White Jr. (1997), "An effective truncation heuristic for bias reduction in simulation
  output", Simulation 69(6), 323-334.
- W. W. Franklin and K. P. White Jr. (2008), "Stationarity tests and MSER-5: exploring the
  intuition behind mean-squared-error-reduction in warm-up period determination", Proc. Winter
  Simulation Conference.
- Batch means: e.g. Law, "Simulation Modeling and Analysis", ch. 9.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.core.settings import DEFAULTS

__all__ = ["mser", "mser5", "BatchMeans", "batch_means", "contiguous_batches", "warmup_cut",
           "tail_estimate", "ci_label", "epilogue"]


def mser(y, batch_size: int = 5, max_fraction: float = 0.5) -> int:
    """Warm-up truncation point of a series by MSER-``batch_size`` (MSER-5 by default).

    The series is grouped into ``n = len(y) // batch_size`` non-overlapping batch means
    ``Z_1..Z_n`` (a trailing remainder shorter than a batch is ignored). For each candidate
    truncation ``k`` (number of batches dropped) in ``0 .. floor(max_fraction * n)`` the statistic

        MSER(k) = sum_{j > k} (Z_j - Zbar_k)^2 / (n - k)^2,   Zbar_k = mean(Z_{k+1..n}),

    is computed, and the minimizing ``k`` (the smallest one on ties) is chosen. Restricting ``k``
    to the first half follows White (1997): a minimum near the end of the run means the run is
    too short to tell, not that the tail is stationary.

    Parameters
    ----------
    y : array_like, 1-D
        Output series, e.g. per-window mean queue length.
    batch_size : int
        Observations per MSER batch (5 for MSER-5).
    max_fraction : float
        Largest fraction of the batches that may be cut.

    Returns
    -------
    int
        Number of observations of ``y`` to discard from the start (``batch_size * k``).
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be >= 1")
    n = y.size // batch_size
    if n < 2:
        return 0
    z = y[: n * batch_size].reshape(n, batch_size).mean(axis=1)
    if not np.all(np.isfinite(z)):
        raise ValueError("y contains non-finite values")
    z = z - z.mean()  # centring keeps the one-pass sums of squares accurate
    # suffix sums: s1[k] = sum_{j >= k} z_j (0-based), likewise for squares
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    m = np.arange(n, 0, -1, dtype=np.float64)  # n - k
    ss = np.maximum(s2 - s1 * s1 / m, 0.0)
    stat = ss / (m * m)
    k_max = int(np.floor(max_fraction * n))
    k_max = min(max(k_max, 0), n - 2)
    k = int(np.argmin(stat[: k_max + 1]))
    return k * batch_size


def mser5(y) -> int:
    """MSER-5: :func:`mser` with batches of 5 observations (see there)."""
    return mser(y, batch_size=5)


def contiguous_batches(n_items: int, n_batches: int) -> np.ndarray:
    """Start indices (length ``n_batches + 1``, last = ``n_items``) of ``n_batches`` contiguous
    groups of ``n_items`` items whose sizes differ by at most one (as ``numpy.array_split``)."""
    if n_batches < 1 or n_items < n_batches:
        raise ValueError(f"cannot split {n_items} items into {n_batches} non-empty batches")
    q, r = divmod(n_items, n_batches)
    sizes = np.full(n_batches, q, dtype=np.int64)
    sizes[:r] += 1
    return np.concatenate(([0], np.cumsum(sizes)))


class BatchMeans(NamedTuple):
    """Batch-means estimate of a ratio of long-run sums."""

    estimate: float  #: pooled ratio sum(numerator) / sum(denominator) over all kept windows
    se: float  #: standard error: std(batch ratios, ddof=1) / sqrt(n_batches)
    batch_values: np.ndarray  #: the per-batch ratios


def batch_means(numerator, denominator=None, n_batches: int = DEFAULTS.n_batches) -> BatchMeans:
    """Batch-means estimate and standard error of ``sum(numerator) / sum(denominator)``.

    The window series (already truncated) are grouped into ``n_batches`` contiguous batches
    (:func:`contiguous_batches`); in each batch ``b`` the ratio estimator
    ``R_b = sum_b numerator / sum_b denominator`` is formed (e.g. sum of responses / jobs completed,
    or queue area / time). The point estimate is the pooled ratio over all windows and the
    standard error is the sample standard deviation of the ``R_b`` over ``sqrt(n_batches)``;
    for long enough batches the ``R_b`` are approximately i.i.d. normal, so a confidence interval
    uses Student's t with ``n_batches - 1`` degrees of freedom.

    ``denominator=None`` means one unit per window (plain batch means of the window values).
    A batch with a zero denominator gives a NaN ratio and hence a NaN standard error.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.ones_like(num) if denominator is None else np.asarray(denominator, dtype=np.float64)
    if num.ndim != 1 or num.shape != den.shape:
        raise ValueError(
            f"numerator {num.shape} and denominator {den.shape} must be equal 1-D shapes")
    if n_batches < 2:
        raise ValueError(f"n_batches={n_batches!r} must be >= 2")
    starts = contiguous_batches(num.size, n_batches)
    bnum = np.add.reduceat(num, starts[:-1])
    bden = np.add.reduceat(den, starts[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = bnum / bden
        total_den = den.sum()
        estimate = float(num.sum() / total_den) if total_den != 0 else float("nan")
    se = float(np.std(ratios, ddof=1) / np.sqrt(n_batches))
    return BatchMeans(estimate, se, ratios)


def warmup_cut(w_qarea, weights, n_servers: int, n_batches: int) -> int:
    """Windows to cut: MSER-5 on the per-window mean queue length (queue area over window
    length times N), leaving at least ``n_batches`` windows for batch means."""
    series = np.asarray(w_qarea, dtype=np.float64) / (np.asarray(weights, dtype=np.float64) * n_servers)
    return min(mser5(series), series.size - n_batches)


def tail_estimate(w_tail, weights, n_servers: int, n_batches: int):
    """Time-average tail ``s_i`` and its batch-means SE from kept windows.

    ``w_tail[w, i-1]``: window ``w``'s area of the number of servers with >= i tasks;
    ``weights[w]``: the window's length (events or time). Returns ``(tail, tail_se)``.
    """
    w_tail = np.asarray(w_tail, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    tail = w_tail.sum(axis=0) / (float(weights.sum()) * n_servers)
    starts = contiguous_batches(weights.size, n_batches)[:-1]
    batch_tail = (np.add.reduceat(w_tail, starts, axis=0)
                  / (np.add.reduceat(weights, starts)[:, None] * n_servers))
    return tail, batch_tail.std(axis=0, ddof=1) / np.sqrt(n_batches)


def ci_label(n_batches: int, batch_values: np.ndarray) -> str:
    """How the standard errors were made, with a warning when the batch means are correlated
    (lag-1 autocorrelation above its 95% null bound 2/sqrt(B)): the run is then not long
    compared with the system's relaxation time, and the within-run SE is too small -- use
    the spread over independent replications instead (the analysis does when R >= 2)."""
    text = f"batch means, {n_batches} batches after MSER-5 cut"
    v = np.asarray(batch_values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size >= 4 and v[:-1].std() > 0 and v[1:].std() > 0:
        r1 = float(np.corrcoef(v[:-1], v[1:])[0, 1])
        if r1 > 2.0 / math.sqrt(v.size):
            text += f"; batches correlated (lag-1 r={r1:.2f}): SE understated, run longer"
    return text



def epilogue(*, n_servers: int, n_batches: int, weights, w_qarea, w_tail, ratios: dict,
             cut: int | None = None, rec=None, k: int = 1, ci_note: str = "",
             little: float | None = None) -> dict:
    """The end of a simulation, after its kernel filled the per-window series: what every
    simulator's ``simulate`` did in its own words before (issue 37 item 4).

    - the warm-up cut: ``cut`` windows (default :func:`warmup_cut` on the mean queue length;
      an engine with a second series to settle passes the larger cut);
    - the batch means of the kept windows: each entry ``name: (numerator, denominator)`` of
      ``ratios`` (whole-run window series; the windows are kept here) gives the fields ``name``
      and ``name_se``; the queue area over ``weights`` (window lengths, events or time) times N
      gives ``mean_queue``, and the level areas ``w_tail`` the ``tail`` (both with their SEs);
    - with ``little`` (the arrival rate per server) and no ``mean_response`` ratio, the mean
      response by Little's law, ``mean_queue / little`` (NaN where ``little`` is 0);
    - the response-time distribution of a recorder ``rec`` (:mod:`sim.core.responses`; None:
      not recorded) of jobs of ``k`` tasks;
    - the CI label: :func:`ci_label` of ``mean_response``'s batches (the first ratio where there
      is none), then ``ci_note``, then the distribution's method.

    Returns the result fields as a dict: those above and ``warmup_windows``, ``n_windows``,
    ``n_batches``, ``ci_method``, ``responses``. The engine adds its own (counts, run length,
    times) and builds its result."""
    weights = np.asarray(weights, dtype=np.float64)
    n_windows = weights.size
    if cut is None:
        cut = warmup_cut(w_qarea, weights, n_servers, n_batches)
    keep = slice(cut, n_windows)
    out, labelled = {}, None
    for name, (num, den) in ratios.items():
        bm = batch_means(np.asarray(num)[keep], np.asarray(den)[keep], n_batches)
        out[name], out[f"{name}_se"] = bm.estimate, bm.se
        if labelled is None or name == "mean_response":
            labelled = bm
    queue = batch_means(np.asarray(w_qarea)[keep], weights[keep] * n_servers, n_batches)
    tail, tail_se = tail_estimate(np.asarray(w_tail)[keep], weights[keep], n_servers, n_batches)
    out.update(mean_queue=queue.estimate, mean_queue_se=queue.se, tail=tail, tail_se=tail_se)
    label_values = (labelled or queue).batch_values
    if little is not None and "mean_response" not in ratios:
        if little > 0:
            out["mean_response"], out["mean_response_se"] = queue.estimate / little, queue.se / little
            label_values = queue.batch_values / little
        else:
            out["mean_response"], out["mean_response_se"] = math.nan, math.nan
            label_values = queue.batch_values
    dist = None
    if rec is not None:
        from sim.core.responses import summarize

        dist = summarize(rec, k, cut, n_batches)
    ci = ci_label(n_batches, label_values) + ci_note
    if dist is not None:
        ci += "; " + dist.method()
    out.update(warmup_windows=int(cut), n_windows=int(n_windows), n_batches=int(n_batches),
               ci_method=ci, responses=dist)
    return out
