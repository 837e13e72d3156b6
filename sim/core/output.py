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
- Overlapping batch means: M. S. Meketon and B. Schmeiser (1984), "Overlapping batch means:
  something for nothing?", Proc. Winter Simulation Conference; C. Alexopoulos and A. F. Seila
  (1998), "Output data analysis", in J. Banks (ed.), Handbook of Simulation, ch. 7.

Two standard-error methods (the run setting ``se_method``, :data:`SE_METHODS`):

- ``batch_means`` (the method of every run before it became a setting, and of an archive
  whose config lacks it): ``n_batches`` contiguous batches, the sd of the batch ratios over
  sqrt(n_batches), Student's t with ``n_batches - 1`` degrees of freedom.
- ``obm`` (the default): the first :data:`OBM_WARMUP` of the windows cut (a fixed fraction,
  not MSER-5: a data-chosen cut drops the run's early upward excursions and biased the mean
  low by up to 0.4 of its sd on the exact small chains, docs/analysis.md), then overlapping batch
  means of the linearised ratio series ``z_w = num_w - R den_w`` (the delta method), batches
  of a tenth of the kept windows, every window a batch start, and Student's t with
  ``1.5 (n / b - 1)`` = :data:`OBM_DOF` degrees of freedom (Meketon and Schmeiser). The
  windows are a fixed count (:data:`~sim.core.settings.N_WINDOWS`), so the batch grows in
  proportion to the run. The SE is trusted only for a run long against its relaxation time:
  the run estimates its integrated autocorrelation time (IAT = OBM variance / lag-0 variance,
  in windows) and :func:`ci_label` flags a run shorter than :data:`MIN_RUN_PER_IAT` times it;
  :func:`sim.run_too_short` also asks for :data:`MIN_RUN_RELAX` / (1 - lam)^2 time units
  (measured against exact small chains: docs/analysis.md, benchmarks/se_coverage.py).
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np

from sim.core.settings import DEFAULTS, SE_METHOD_CHOICES

__all__ = ["mser", "mser5", "BatchMeans", "batch_means", "contiguous_batches", "warmup_cut",
           "tail_estimate", "ci_label", "epilogue", "SE_METHODS", "LEGACY_SE_METHOD", "OBM_BATCHES",
           "OBM_DOF", "OBM_WARMUP", "MIN_RUN_PER_IAT", "MIN_RUN_RELAX", "TOO_SHORT", "OBM_LABEL", "obm_batch", "se_dof",
           "run_per_iat", "label_run_per_iat", "obm_cut", "cut_words"]

#: the standard-error methods of a simulation run (the run setting ``se_method``)
SE_METHODS = SE_METHOD_CHOICES
#: the method of runs and archives made before ``se_method`` existed
LEGACY_SE_METHOD = "batch_means"
#: ``obm``: the batch is ``n // OBM_BATCHES`` kept windows (a tenth of the kept run)
OBM_BATCHES = 10
#: ``obm``: degrees of freedom of its t interval, ``1.5 (OBM_BATCHES - 1)`` (Meketon and
#: Schmeiser): the fewest any run has (``n // b >= OBM_BATCHES``)
OBM_DOF = 1.5 * (OBM_BATCHES - 1)
#: ``obm``: the shortest run, in multiples of its estimated integrated autocorrelation time, whose
#: standard error is trusted. The estimate is noisy (its 5% and 75% quantiles differ 3-fold) and
#: a rule that stops when it happens to read low keeps runs whose SE happens to be low, so this
#: is a guard for models whose relaxation :data:`MIN_RUN_RELAX` misjudges, set below what the
#: exact small chains show at that length (5% quantile 115-250 at 300 / (1 - lam)^2): they
#: stop on the deterministic length, not on this
MIN_RUN_PER_IAT = 100
#: ``obm``: the shortest kept run, in units of ``1 / (1 - lam)^2`` (the relaxation time of a
#: queue near saturation, of one M/M/1 queue and so of random routing at any N; shorter for
#: JSQ and power-of-d at large N), whose SE is trusted: the length at which the 95% intervals
#: covered the exact small-N values in 0.935-0.975 of 200 seeds (7 chains; docs/analysis.md; :func:`sim.run`
#: checks it, as it knows ``lam`` and the kept time)
MIN_RUN_RELAX = 300
#: ``obm``: the fraction of the windows cut as warm-up (the start is within a few relaxation
#: times of steady state, and a run is at least :data:`MIN_RUN_RELAX` of them long)
OBM_WARMUP = 0.1
#: the words :func:`ci_label` and :func:`sim.run` put in ``ci_method`` for a run too short
TOO_SHORT = "run too short"
#: the first words of an ``obm`` label
OBM_LABEL = "overlapping batch means"


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
    se: float  #: standard error (``batch_means``: std(batch ratios, ddof=1) / sqrt(n_batches))
    batch_values: np.ndarray  #: the per-batch ratios (``obm``: of its non-overlapping batches)
    iat: float = math.nan  #: ``obm``: integrated autocorrelation time, in windows (NaN otherwise)
    batch: int = 0  #: ``obm``: windows per batch (0 otherwise)
    windows: int = 0  #: ``obm``: kept windows (0 otherwise)


def obm_batch(n: int) -> int:
    """``obm``'s batch size, in windows, for ``n`` kept windows: ``n // OBM_BATCHES`` (>= 1)."""
    return max(n // OBM_BATCHES, 1)


def se_dof(se_method: str, n_batches: int) -> float:
    """Degrees of freedom of the t interval of an SE made by ``se_method``."""
    return float(n_batches - 1) if se_method == LEGACY_SE_METHOD else OBM_DOF


def _obm_variance(z: np.ndarray, b: int) -> np.ndarray:
    """OBM estimate of the variance parameter (n Var(mean)) of each column of ``z`` (windows on
    axis 0), batch ``b``: ``n b / ((n - b)(n - b + 1)) sum_j (Zbar_j(b) - Zbar)^2`` over the
    ``n - b + 1`` overlapping batches (Alexopoulos and Seila 1998, eq. 7.27)."""
    n = z.shape[0]
    zc = z - z.mean(axis=0)
    c = np.concatenate((np.zeros((1,) + z.shape[1:]), np.cumsum(zc, axis=0)), axis=0)
    m = (c[b:] - c[:-b]) / b
    return n * b / ((n - b) * (n - b + 1)) * np.sum(m * m, axis=0)


def _obm(num: np.ndarray, den: np.ndarray) -> BatchMeans:
    """``obm`` of ``sum(num) / sum(den)`` (see the module doc)."""
    n = num.size
    if n < 2 * OBM_BATCHES:
        raise ValueError(f"obm needs at least {2 * OBM_BATCHES} windows, got {n}")
    b = obm_batch(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        total_den = den.sum()
        estimate = float(num.sum() / total_den) if total_den != 0 else float("nan")
        z = num - estimate * den
        var = float(_obm_variance(z, b))
        dbar = total_den / n
        se = float(math.sqrt(max(var, 0.0) / n) / abs(dbar)) if math.isfinite(var) else math.nan
        gamma0 = float(np.mean((z - z.mean()) ** 2))
        iat = var / gamma0 if gamma0 > 0 else math.nan
        k = n // b
        ratios = np.add.reduceat(num[: k * b], np.arange(0, k * b, b)) / np.add.reduceat(
            den[: k * b], np.arange(0, k * b, b))
    return BatchMeans(estimate, se, ratios, iat, b, n)


def batch_means(numerator, denominator=None, n_batches: int = DEFAULTS.n_batches,
                se_method: str = LEGACY_SE_METHOD) -> BatchMeans:
    """Batch-means estimate and standard error of ``sum(numerator) / sum(denominator)``.

    ``se_method="obm"``: overlapping batch means instead (module doc; ``n_batches`` unused).

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
    if se_method != LEGACY_SE_METHOD:
        if se_method not in SE_METHODS:
            raise ValueError(f"se_method={se_method!r} is unknown; valid: {', '.join(SE_METHODS)}")
        return _obm(num, den)
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


def obm_cut(n_windows: int) -> int:
    """``obm``'s warm-up cut: the first :data:`OBM_WARMUP` of ``n_windows`` windows (rounded up)."""
    return int(math.ceil(OBM_WARMUP * n_windows))


def cut_words(se_method: str) -> str:
    """The warm-up rule of ``se_method`` as ``ci_method`` names it."""
    return "MSER-5 cut" if se_method == LEGACY_SE_METHOD else f"cut of the first {OBM_WARMUP:g}"


def tail_estimate(w_tail, weights, n_servers: int, n_batches: int, se_method: str = LEGACY_SE_METHOD):
    """Time-average tail ``s_i`` and its batch-means SE from kept windows (``se_method="obm"``:
    overlapping batch means of each level's linearised series, as :func:`batch_means`).

    ``w_tail[w, i-1]``: window ``w``'s area of the number of servers with >= i tasks;
    ``weights[w]``: the window's length (events or time). Returns ``(tail, tail_se)``.
    """
    w_tail = np.asarray(w_tail, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    tail = w_tail.sum(axis=0) / (float(weights.sum()) * n_servers)
    if se_method != LEGACY_SE_METHOD:
        n = weights.size
        den = weights * n_servers
        var = _obm_variance(w_tail - den[:, None] * tail[None, :], obm_batch(n))
        return tail, np.sqrt(np.maximum(var, 0.0) / n) / (float(den.sum()) / n)
    starts = contiguous_batches(weights.size, n_batches)[:-1]
    batch_tail = (np.add.reduceat(w_tail, starts, axis=0)
                  / (np.add.reduceat(weights, starts)[:, None] * n_servers))
    return tail, batch_tail.std(axis=0, ddof=1) / np.sqrt(n_batches)


def run_per_iat(bm: BatchMeans) -> float:
    """``obm``: the kept run in multiples of its integrated autocorrelation time (NaN when the
    IAT is not known: the ``batch_means`` method, or a constant series)."""
    return bm.windows / bm.iat if bm.batch and bm.iat > 0 else math.nan


def label_run_per_iat(ci_method: str) -> float | None:
    """The "run = X x its autocorrelation time" of an ``obm`` label (NaN if X is nan); None for
    another label."""
    if not ci_method.startswith(OBM_LABEL):
        return None
    m = re.search(r"run = (\S+) x its autocorrelation time", ci_method)
    return float(m.group(1)) if m else math.nan


def ci_label(n_batches: int, batch_values: np.ndarray, bm: BatchMeans | None = None) -> str:
    """How the standard errors were made.

    ``batch_means`` (``bm`` None or without an IAT): with a warning when the batch means are
    correlated (lag-1 autocorrelation above its 95% null bound 2/sqrt(B)): the run is then not
    long compared with the system's relaxation time, and the within-run SE is too small -- use
    the spread over independent replications instead (the analysis does when R >= 2).

    ``obm``: the batch, the degrees of freedom, the run in multiples of its integrated
    autocorrelation time, and :data:`TOO_SHORT` when that is under :data:`MIN_RUN_PER_IAT`."""
    if bm is not None and bm.batch:
        ratio = run_per_iat(bm)
        text = (f"{OBM_LABEL}, batch {bm.batch} of {bm.windows} windows after {cut_words('obm')}, "
                f"t with {OBM_DOF:g} dof; run = {ratio:.0f} x its autocorrelation time")
        if not ratio >= MIN_RUN_PER_IAT:
            text += f"; {TOO_SHORT} (needs {MIN_RUN_PER_IAT}): SE not trusted, run longer"
        return text
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
             little: float | None = None, se_method: str = LEGACY_SE_METHOD) -> dict:
    """The end of a simulation, after its kernel filled the per-window series: what every
    simulator's ``simulate`` ends with, written once.

    - the warm-up cut: ``cut`` windows (default :func:`warmup_cut` on the mean queue length;
      an engine with a second series to settle passes the larger cut); under ``obm`` always
      :func:`obm_cut`, whatever ``cut`` says;
    - the batch means of the kept windows: each entry ``name: (numerator, denominator)`` of
      ``ratios`` (whole-run window series; the windows are kept here) gives the fields ``name``
      and ``name_se``; the queue area over ``weights`` (window lengths, events or time) times N
      gives ``mean_queue``, and the level areas ``w_tail`` the ``tail`` (both with their SEs);
    - with ``little`` (the arrival rate per server) and no ``mean_response`` ratio, the mean
      response by Little's law, ``mean_queue / little`` (NaN where ``little`` is 0);
    - the response-time distribution of a recorder ``rec`` (:mod:`sim.core.responses`; None:
      not recorded) of jobs of ``k`` tasks;
    - the CI label: :func:`ci_label` of ``mean_response``'s batches (the first ratio where there
      is none), then ``ci_note``, then the distribution's method;
    - every SE by ``se_method`` (:data:`SE_METHODS`; the response-time distribution's by its
      ``n_batches`` batches whatever the method).

    Returns the result fields as a dict: those above and ``warmup_windows``, ``n_windows``,
    ``n_batches``, ``ci_method``, ``responses``. The engine adds its own (counts, run length,
    times) and builds its result."""
    weights = np.asarray(weights, dtype=np.float64)
    n_windows = weights.size
    if se_method != LEGACY_SE_METHOD:
        cut = obm_cut(n_windows)
    elif cut is None:
        cut = warmup_cut(w_qarea, weights, n_servers, n_batches)
    keep = slice(cut, n_windows)
    out, labelled = {}, None
    for name, (num, den) in ratios.items():
        bm = batch_means(np.asarray(num)[keep], np.asarray(den)[keep], n_batches, se_method)
        out[name], out[f"{name}_se"] = bm.estimate, bm.se
        if labelled is None or name == "mean_response":
            labelled = bm
    queue = batch_means(np.asarray(w_qarea)[keep], weights[keep] * n_servers, n_batches, se_method)
    tail, tail_se = tail_estimate(np.asarray(w_tail)[keep], weights[keep], n_servers, n_batches,
                                  se_method)
    out.update(mean_queue=queue.estimate, mean_queue_se=queue.se, tail=tail, tail_se=tail_se)
    label_bm = labelled or queue
    label_values = label_bm.batch_values
    if little is not None and "mean_response" not in ratios:
        if little > 0:
            out["mean_response"], out["mean_response_se"] = queue.estimate / little, queue.se / little
            label_values = queue.batch_values / little
            label_bm = queue
        else:
            out["mean_response"], out["mean_response_se"] = math.nan, math.nan
            label_values = queue.batch_values
            label_bm = queue
    dist = None
    if rec is not None:
        from sim.core.responses import summarize

        dist = summarize(rec, k, cut, n_batches)
    ci = ci_label(n_batches, label_values, label_bm) + ci_note
    if dist is not None:
        ci += "; " + dist.method()
    out.update(warmup_windows=int(cut), n_windows=int(n_windows), n_batches=int(n_batches),
               ci_method=ci, responses=dist)
    return out
