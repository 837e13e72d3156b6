"""Combine replications into point estimates with confidence intervals, and compare with the limit.

Both functions take and return Polars frames; the rules are written out in ``docs/analysis.md``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import stats

from analysis import declared

__all__ = [
    "METRICS",
    "LIMIT_ENGINES",
    "METHOD_T",
    "METHOD_BATCH",
    "METHOD_EXACT",
    "METHOD_NO_SE",
    "METHOD_NO_OK",
    "check_params",
    "aggregate",
    "compare_to_meanfield",
]

#: estimates that are aggregated (each with ``<m>_se`` in the result rows)
METRICS: tuple[str, ...] = ("mean_response", "mean_wait", "prob_wait", "mean_queue")

#: engines whose rows are exact limits, not estimates: they pass through with zero-width
#: intervals (the engines the models declare of kind ``limit``)
LIMIT_ENGINES: tuple[str, ...] = declared.limit_engines()
#: limit engines whose value depends on N (the refined mean field x* + V/N): exact rows, but
#: never the N = infinity counterpart of :func:`compare_to_meanfield` (docs/refined.md)
N_DEPENDENT_LIMITS: tuple[str, ...] = ("refined",)

METHOD_T = "t over R replications"
METHOD_BATCH = "batch means"
METHOD_EXACT = "exact (mean field)"
METHOD_NO_SE = "none (one replication without a standard error)"
METHOD_NO_OK = "none (no successful replication)"

#: columns that identify a task rather than a point: never valid as parameters
_RESERVED = {
    "sweep", "run_id", "task_id", "point_id", "replication", "engine", "policy", "seed",
    "status", "error", "tail", "ci_method", "wall_time", *METRICS, *(f"{m}_se" for m in METRICS),
}


def check_params(frame: pl.DataFrame, params: Sequence[str], x: str | None = None) -> list[str]:
    """Validate the caller's list of parameter columns against ``frame``; return it as a list.

    Raises ``ValueError`` naming the problem: not a list of names, duplicates, a column that
    identifies tasks rather than points (``seed``, ``replication``, ...), a column missing from
    the frame, or ``x`` not among ``params``.
    """
    if isinstance(params, str) or not all(isinstance(p, str) for p in params):
        raise ValueError(f"params={params!r} must be a list of column names")
    params = list(params)
    if len(set(params)) != len(params):
        raise ValueError(f"params={params!r} has duplicates")
    bad = [p for p in params if p in _RESERVED]
    if bad:
        raise ValueError(f"params {bad} are task or result columns, not point parameters")
    missing = [p for p in params if p not in frame.columns]
    if missing:
        raise ValueError(f"params {missing} are not columns of the frame; it has {frame.columns}")
    if x is not None and x not in params:
        raise ValueError(f"x={x!r} must be one of params={params!r}")
    for col in ("policy", "engine"):
        if col not in frame.columns:
            raise ValueError(f"the frame has no {col!r} column")
    return params


def _normalize(df: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """Add the optional columns a frame may lack, as nulls of the right type."""
    add = []
    if "status" not in df.columns:
        add.append(pl.lit("ok").alias("status"))
    for m in metrics:
        if m not in df.columns:
            add.append(pl.lit(None, dtype=pl.Float64).alias(m))
        if f"{m}_se" not in df.columns:
            add.append(pl.lit(None, dtype=pl.Float64).alias(f"{m}_se"))
    if "tail" not in df.columns:
        add.append(pl.lit(None, dtype=pl.List(pl.Float64)).alias("tail"))
    if add:
        df = df.with_columns(add)
    casts = {m: pl.Float64 for m in metrics}
    casts.update({f"{m}_se": pl.Float64 for m in metrics})
    casts["tail"] = pl.List(pl.Float64)
    return df.with_columns([pl.col(c).cast(t) for c, t in casts.items()])


def _mean_tail(ok: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Element-wise mean of the ``tail`` lists over the replications of each point."""
    t = ok.select([*keys, "tail"]).filter(pl.col("tail").is_not_null())
    if t.height == 0:
        return ok.select(keys).unique().with_columns(pl.lit(None, dtype=pl.List(pl.Float64)).alias("tail"))
    t = t.with_columns(pl.int_ranges(0, pl.col("tail").list.len()).alias("_level")).explode(
        ["tail", "_level"]
    )
    t = t.group_by([*keys, "_level"]).agg(pl.col("tail").mean()).sort("_level")
    return t.group_by(keys, maintain_order=True).agg(pl.col("tail"))


def aggregate(
    df: pl.DataFrame,
    params: Sequence[str],
    metrics: Sequence[str] = METRICS,
    level: float = 0.95,
) -> pl.DataFrame:
    """Combine the replications of each (policy, engine, *params) point.

    Rules (also in ``docs/analysis.md``):

    * Only rows with ``status == "ok"`` are combined (a frame without ``status`` counts as all
      ok); ``n_tasks`` and ``n_error`` count every row of the point, ``n_rep`` the ok ones.
    * Estimate = mean over the ok replications of each metric (and element-wise of ``tail``).
    * ``R = n_rep >= 2`` (simulation engines): standard error = sample sd / sqrt(R), interval
      = mean +- t_{(1+level)/2, R-1} * se  -> ``ci_method = "t over R replications"``.
    * ``R == 1``: the run's own batch-means standard error ``<m>_se``, interval
      = value +- q * se  -> ``"batch means"`` (null interval if that SE is null), where q is
      Student's t with ``OBM_DOF`` degrees of freedom for a run whose ``ci_method`` says
      overlapping batch means (the ``obm`` SE method), else the normal quantile z_{(1+level)/2}.
    * Mean-field rows (``engine in LIMIT_ENGINES``) are exact: se = 0, lo = hi = value.

    Returns one row per point with the key columns, ``n_tasks, n_error, n_rep, ci_method``,
    and for each metric ``m``: ``m, m_se, m_hw`` (half-width), ``m_lo, m_hi``; plus ``tail``
    (element-wise mean) and, when present in ``df``, ``messages_per_job`` (mean), ``n_jobs`` and
    ``wall_time`` (sums).  Sorted by the keys.
    """
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    params = check_params(df, params)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level!r} must lie in (0, 1)")
    metrics = list(metrics)
    keys = ["policy", "engine", *params]
    df = _normalize(df, metrics)

    counts = df.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n_tasks"),
        (pl.col("status") != "ok").fill_null(True).sum().cast(pl.Int64).alias("n_error"),
    )
    ok = df.filter(pl.col("status") == "ok")
    extra = []
    if "messages_per_job" in df.columns:
        extra.append(pl.col("messages_per_job").cast(pl.Float64).mean())
    if "n_jobs" in df.columns:
        extra.append(pl.col("n_jobs").cast(pl.Int64).sum())
    if "wall_time" in df.columns:
        extra.append(pl.col("wall_time").cast(pl.Float64).sum())
    scal = ok.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n_rep"),
        *[pl.col(m).mean().alias(m) for m in metrics],
        *[pl.col(m).std(ddof=1).alias(f"_{m}_sd") for m in metrics],
        *[pl.col(f"{m}_se").first().alias(f"_{m}_bse") for m in metrics],
        *([pl.col("ci_method").first().alias("_run_ci")] if "ci_method" in df.columns else []),
        *extra,
    )
    out = counts.join(scal, on=keys, how="left", nulls_equal=True)
    out = out.join(_mean_tail(ok, keys), on=keys, how="left", nulls_equal=True)
    out = out.with_columns(pl.col("n_rep").fill_null(0))

    # quantiles: t with R - 1 dof for R >= 2; for one run, t with obm's degrees of freedom under its SE
    # method (its interval), normal otherwise (computed once per row)
    n_rep = out["n_rep"].to_numpy()
    q = 0.5 + level / 2.0
    obm = np.zeros(n_rep.size, dtype=bool)
    obm_label, obm_dof = declared.single_run_interval()
    if "_run_ci" in out.columns:
        obm = out["_run_ci"].cast(pl.Utf8).str.starts_with(obm_label).fill_null(False).to_numpy()
    single = np.where(obm, stats.t.ppf(q, obm_dof), stats.norm.ppf(q))
    tq = np.where(n_rep >= 2, stats.t.ppf(q, np.maximum(n_rep - 1, 1)), single)
    out = out.with_columns(pl.Series("_q", tq, dtype=pl.Float64))

    is_limit = pl.col("engine").is_in(list(LIMIT_ENGINES))
    n = pl.col("n_rep")
    first = metrics[0]
    out = out.with_columns(
        pl.when(n == 0).then(pl.lit(METHOD_NO_OK))
        .when(is_limit).then(pl.lit(METHOD_EXACT))
        .when(n >= 2).then(pl.lit(METHOD_T))
        .when(pl.col(f"_{first}_bse").is_not_null()).then(pl.lit(METHOD_BATCH))
        .otherwise(pl.lit(METHOD_NO_SE))
        .alias("ci_method")
    )
    se_exprs = []
    for m in metrics:
        se_exprs.append(
            pl.when(n == 0).then(None)
            .when(is_limit).then(0.0)
            .when(n >= 2).then(pl.col(f"_{m}_sd") / n.cast(pl.Float64).sqrt())
            .otherwise(pl.col(f"_{m}_bse"))
            .alias(f"{m}_se")
        )
    out = out.with_columns(se_exprs)
    out = out.with_columns([(pl.col("_q") * pl.col(f"{m}_se")).alias(f"{m}_hw") for m in metrics])
    out = out.with_columns(
        [(pl.col(m) - pl.col(f"{m}_hw")).alias(f"{m}_lo") for m in metrics]
        + [(pl.col(m) + pl.col(f"{m}_hw")).alias(f"{m}_hi") for m in metrics]
    )
    metric_cols = [c for m in metrics for c in (m, f"{m}_se", f"{m}_hw", f"{m}_lo", f"{m}_hi")]
    extra_cols = [c for c in ("messages_per_job", "n_jobs", "wall_time") if c in out.columns]
    cols = [*keys, "n_tasks", "n_error", "n_rep", "ci_method", *metric_cols, "tail", *extra_cols]
    return out.select(cols).sort(keys, nulls_last=True)


def compare_to_meanfield(
    agg: pl.DataFrame,
    params: Sequence[str],
    x: str = "n_servers",
    metrics: Sequence[str] = METRICS,
) -> pl.DataFrame:
    """Put each simulated point next to the mean-field value of the same point.

    ``agg`` is the output of :func:`aggregate`.  Simulation rows are those of engines not in
    ``LIMIT_ENGINES`` with ``n_rep >= 1``.  The mean field does not depend on the number of
    servers, so the join is on ``policy`` and every parameter except ``x`` and ``n_servers``
    (the mean-field row's own ``n_servers`` is ignored; if several mean-field rows match, the
    first in key order is used -- they hold the same numbers).

    Returns the simulation rows of ``agg`` (all their columns) plus, for each metric ``m``:
    ``m_mf`` (mean-field value, null without a counterpart), ``m_gap = m - m_mf``,
    ``m_gap_se`` and ``m_gap_hw`` (those of the simulation: the limit is exact),
    ``m_gap_lo, m_gap_hi`` and ``m_rel_gap = m_gap / m_mf`` (null where ``m_mf == 0``);
    and ``tail_mf``.  Empty (height 0) when there are no simulation rows.
    """
    params = check_params(agg, params, x)
    metrics = list(metrics)
    is_limit = pl.col("engine").is_in(list(LIMIT_ENGINES))
    sim = agg.filter(~is_limit & (pl.col("n_rep") >= 1))
    limit_rows = agg.filter(is_limit & ~pl.col("engine").is_in(list(N_DEPENDENT_LIMITS)) & (pl.col("n_rep") >= 1))
    # a parameter null in every limit row is not one the limit depends on (the run length
    # ``events``, even where a formula of N makes it vary): not a join key
    on = ["policy", *[p for p in params if p not in (x, "n_servers")
                      and not (limit_rows.height and limit_rows[p].null_count() == limit_rows.height)]]
    mf = (
        limit_rows
        .select([*on, *[pl.col(m).alias(f"{m}_mf") for m in metrics], pl.col("tail").alias("tail_mf")])
        .unique(subset=on, keep="first", maintain_order=True)
    )
    out = sim.join(mf, on=on, how="left", nulls_equal=True, maintain_order="left")
    gap_cols = []
    for m in metrics:
        gap_cols += [
            (pl.col(m) - pl.col(f"{m}_mf")).alias(f"{m}_gap"),
            pl.col(f"{m}_se").alias(f"{m}_gap_se"),
            pl.col(f"{m}_hw").alias(f"{m}_gap_hw"),
            (pl.col(f"{m}_lo") - pl.col(f"{m}_mf")).alias(f"{m}_gap_lo"),
            (pl.col(f"{m}_hi") - pl.col(f"{m}_mf")).alias(f"{m}_gap_hi"),
            pl.when(pl.col(f"{m}_mf") != 0.0)
            .then((pl.col(m) - pl.col(f"{m}_mf")) / pl.col(f"{m}_mf"))
            .otherwise(None)
            .alias(f"{m}_rel_gap"),
        ]
    return out.with_columns(gap_cols)
