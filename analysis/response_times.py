"""Response-time distributions: quantiles against N and the CCDF, simulation beside mean field.

Listed in ``analysis.catalog`` as ``response_times`` (a sweep's ``extra_analyses``); it reads
the rows of a run with ``run.responses: true`` (columns ``response_p50 .. response_p999`` with
their ``_se``, ``response_grid``, ``response_ccdf``, ``response_ccdf_se``; docs/responses.md).

- Quantiles per point: mean over the replications with a 95% interval
  (:func:`analysis.aggregate.aggregate`: t over R >= 2 replications, else the run's
  batch-means SE of the per-batch quantiles).
- CCDF per point: the element-wise mean over the replications of ``response_ccdf``; its
  interval from the spread over replications (R >= 2) or the run's ``response_ccdf_se``.
- Mean field: the exact law at N = infinity, read from the sweep's ``meanfield`` rows (they
  carry ``response_p50 .. response_p999`` and ``response_ccdf`` on the simulators' grid when
  the sweep ran with ``run.responses: true``), matched to a simulated point as
  :func:`analysis.aggregate.compare_to_meanfield` does (policy and every parameter but ``x``
  and ``n_servers`` that the meanfield rows carry). Only where no such row exists is it
  computed here, as a fallback, from the response law the point's model declares
  (:attr:`sim.core.declare.Model.response_law`; the dispatch and JIQ models have one, with no
  mean field for a finite buffer or outside 0 < lam < 1).

Plots: ``ccdf_<arm>.png`` (P(T > t) on a log axis, one curve per N, the mean field dashed) and
``quantiles_vs_n_<policy>.png`` (each quantile against N, log x, the mean field as horizontal
dashed lines). ``report.md`` lists the quantiles per point against the mean field.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from analysis import style
from analysis.aggregate import aggregate, check_params
from analysis.fit import arm_columns
from analysis.fmt import num_significant as _num

#: the quantile columns' names in words, for axis labels
_QUANTILE_WORDS = {"p50": "median", "p90": "90th percentile", "p99": "99th percentile",
                   "p999": "99.9th percentile"}

QUANTILE_NAMES = ("p50", "p90", "p99", "p999")
QUANTILES = (0.5, 0.9, 0.99, 0.999)
METRICS = tuple(f"response_{q}" for q in QUANTILE_NAMES)
MAX_CCDF_FIGURES = 12


def meanfield_law(row: dict):
    """The N = infinity response-time law of a point, from its model's declared
    :attr:`~sim.core.declare.Model.response_law` (the model is the row's ``model``, or inferred
    from its engine and policy); None where the model has none."""
    from analysis.declared import response_law

    return response_law(row)


class _RowLimit:
    """The mean-field law of a point as a meanfield row holds it: quantiles and the CCDF on
    the row's grid (exact values at the grid points)."""

    source = "row"

    def __init__(self, row: dict):
        self.q = [row.get(m) for m in METRICS]
        self.grid = np.asarray(row["response_grid"], float) if row.get("response_grid") else None
        self.ccdf = (np.asarray(row["response_ccdf"], float) if row.get("response_ccdf")
                     else None)

    def quantiles(self) -> list:
        return self.q

    def curve(self, t_max: float):
        if self.grid is None or self.ccdf is None:
            return None
        keep = self.grid <= t_max
        return self.grid[keep], self.ccdf[keep]


class _ComputedLimit:
    """The fallback: the law computed from the model's declared response law (:func:`meanfield_law`)."""

    source = "computed"

    def __init__(self, law):
        self.law = law
        self._q = None

    def quantiles(self) -> list:
        if self._q is None:
            self._q = [self.law.quantile(q) for q in QUANTILES]
        return self._q

    def curve(self, t_max: float):
        tt = np.linspace(0.0, t_max, 400)
        return tt, self.law.ccdf(tt)


def _limit_rows(frame: pl.DataFrame, params: list[str], x: str):
    """The meanfield rows that carry the response columns, and the parameters that pair a
    simulated point with one of them (as :func:`analysis.aggregate.compare_to_meanfield`: a
    parameter null in every such row is not a key)."""
    if "response_p50" not in frame.columns:
        return [], []
    lim = frame.filter((pl.col("engine") == "meanfield") & pl.col("response_p50").is_not_null())
    if "status" in lim.columns:
        lim = lim.filter(pl.col("status") == "ok")
    on = [p for p in params if p not in (x, "n_servers")
          and not (lim.height and lim[p].null_count() == lim.height)]
    return lim.iter_rows(named=True), on


def _figure(width: float = 7.0, height: float = 4.6):
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _mean_ccdf(ok: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per point: the grid, the mean CCDF and its SE (replications, or the run's own)."""
    rows = []
    for g in ok.group_by(keys, maintain_order=True):
        part = g[1]
        grids = [np.asarray(v, float) for v in part["response_grid"].to_list() if v is not None]
        ccdfs = [np.asarray(v, float) for v in part["response_ccdf"].to_list() if v is not None]
        if not ccdfs or any(gr.shape != grids[0].shape or not np.allclose(gr, grids[0])
                            for gr in grids):
            continue
        c = np.vstack(ccdfs)
        if c.shape[0] >= 2:
            se = c.std(axis=0, ddof=1) / math.sqrt(c.shape[0])
        else:
            raw = part["response_ccdf_se"].to_list()[0]
            se = np.array([np.nan if v is None else v for v in raw], float) if raw else \
                np.full(c.shape[1], np.nan)
        rows.append({**{kk: part[kk][0] for kk in keys}, "grid": grids[0].tolist(),
                     "ccdf": c.mean(axis=0).tolist(), "ccdf_se": se.tolist()})
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:100]


def _fig_label(key: dict, arm: list[str]) -> str:
    """``power-of-d (agent simulation): λ = 0.9, d = 2`` (figures; the report keeps
    :func:`_label`, whose keys are the column names)."""
    text = f"{style.policy_name(key['policy'])} ({style.engine_name(key['engine'])})"
    params = style.param_text(key, arm, [key["engine"]])
    return f"{text}: {params}" if params else text


def _label(key: dict, arm: list[str]) -> str:
    parts = [f"{p}={key[p]:.4g}" if isinstance(key[p], float) else f"{p}={key[p]}"
             for p in arm if key.get(p) is not None]
    return f"{key['policy']} [{key['engine']}] " + ", ".join(parts)


def analyze_response_times(frame, params, outdir, sweep_name: str, x: str = "n_servers") -> dict:
    """Quantiles and CCDFs per arm against the mean field; plots and ``report.md``."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    params = check_params(frame, params, x)
    has = "response_p50" in frame.columns
    sims = frame.filter((pl.col("engine") != "meanfield") & pl.col("response_p50").is_not_null()) \
        if has else frame.clear()
    if "status" in sims.columns:
        sims = sims.filter(pl.col("status") == "ok")
    report = outdir / "report.md"
    if sims.height == 0:
        report.write_text(f"# Sweep `{sweep_name}`: response-time distributions\n\nNo rows with "
                          "response-time distributions (run the sweep with `run.responses=true`; "
                          "the engines whose model records them).\n")
        return {"report": report, "plots": [], "metrics": []}
    agg = aggregate(sims, params, metrics=METRICS)
    keys = ["policy", "engine", *params]
    agg = agg.join(_mean_ccdf(sims, keys), on=keys, how="left", nulls_equal=True)
    arm = [p for p in arm_columns(agg, params, x) if p != x]
    mf_cache: dict = {}
    lim_rows, lim_on = _limit_rows(frame, params, x)
    from_rows: dict = {}
    for lr in lim_rows:  # the first row of a key wins (they hold the same numbers)
        from_rows.setdefault((lr["policy"], *(lr[p] for p in lim_on)), _RowLimit(lr))

    def mf_of(r: dict):
        row_limit = from_rows.get((r["policy"], *(r[p] for p in lim_on)))
        if row_limit is not None:
            return row_limit
        key = (r["policy"], r.get("engine"), r.get("lam"), r.get("k"), r.get("d"), r.get("b"),
               r.get("r"))
        if key not in mf_cache:
            try:
                law = meanfield_law(r)
            except (ValueError, RuntimeError):
                law = None
            mf_cache[key] = None if law is None else _ComputedLimit(law)
        return mf_cache[key]

    arms: dict[tuple, list[dict]] = {}
    for r in agg.sort(keys, nulls_last=True).iter_rows(named=True):
        arms.setdefault((r["policy"], r["engine"], *(r[p] for p in arm)), []).append(r)
    plots: list[Path] = []
    metrics = []
    lines = [f"# Sweep `{sweep_name}`: response-time distributions", "",
             "Quantiles of the job response time (exact mixture of Gamma laws over the queue "
             "positions arriving jobs take; docs/responses.md), mean over replications with a 95% "
             "interval (t over R replications, or the run's batch means of per-batch quantiles "
             "when R = 1), against the mean-field (N = infinity) law: from the sweep's "
             "meanfield rows, or, marked (computed), from the theory functions where the sweep "
             "has no such row.", ""]
    for n_fig, (akey, pts) in enumerate(arms.items()):
        pts = sorted(pts, key=lambda r: r[x])
        label = _label(pts[0], arm)
        name = _slug("_".join(str(v) for v in akey if v is not None))
        lines += [f"## {label}", "",
                  f"| {x} | R | " + " | ".join(f"{q} (95% CI)" for q in QUANTILE_NAMES)
                  + " | mean field " + " / ".join(QUANTILE_NAMES) + " |",
                  "|---|---|" + "---|" * len(QUANTILE_NAMES) + "---|"]
        mf_by_point = []
        for r in pts:
            mf = mf_of(r)
            mfq = mf.quantiles() if mf is not None else None
            mf_by_point.append((mf, mfq))
            cells = [f"{_num(r[m])} +- {_num(r[f'{m}_hw'], 2)}" for m in METRICS]
            mft = " / ".join(_num(v) for v in mfq) if mfq else "-"
            if mf is not None and mf.source == "computed":
                mft += " (computed)"
            lines.append(f"| {r[x]} | {r['n_rep']} | " + " | ".join(cells) + f" | {mft} |")
            for m in METRICS:
                if r[m] is not None:
                    metrics.append((f"{m}/{name}", float(r[m]), int(r[x])))
        lines.append("")
        if n_fig < MAX_CCDF_FIGURES:
            fig, ax = _figure()
            colors = [style.color(i) for i in range(len(pts))]
            shown_mf = set()
            for i, (r, (mf, _)) in enumerate(zip(pts, mf_by_point)):
                if r.get("ccdf") is None:
                    continue
                g = np.asarray(r["grid"], float)
                c = np.asarray(r["ccdf"], float)
                se = np.asarray(r["ccdf_se"], float)
                keep = c > 1e-7
                hw = 1.96 * np.nan_to_num(se[keep])
                ax.errorbar(g[keep], c[keep], yerr=[np.minimum(hw, 0.999 * c[keep]), hw],
                            marker="o", ms=3, lw=1, capsize=2, color=colors[i],
                            label=f"{style.symbol(x)} = {r[x]} (simulation)")
                cur = None if mf is None or id(mf) in shown_mf else mf.curve(
                    float(g[keep].max()) * 1.15 if keep.any() else 20.0)
                if cur is not None:
                    shown_mf.add(id(mf))
                    tt, cc = cur
                    pos = cc > 0  # a log axis
                    ax.plot(tt[pos], cc[pos], "--", color="k" if len(shown_mf) == 1 else colors[i],
                            lw=1.2, zorder=5,  # over the markers of the simulations
                            label="mean field (N \u2192 \u221e)" + (
                                "" if len(shown_mf) == 1 else f" ({style.symbol(x)} = {r[x]})"))
            ax.set_yscale("log")
            ax.set_ylim(bottom=1e-6)
            ax.set_xlabel("t (mean service times)")
            ax.set_ylabel("P(response time T > t)")
            ax.set_title(f"{_fig_label(pts[0], arm)}: response-time CCDF (95% CI)", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            p = outdir / f"ccdf_{name}.png"
            fig.savefig(p, dpi=110)
            plots.append(p)
    # quantiles against N, one figure per policy
    for policy in sorted({k[0] for k in arms}):
        fig = Figure(figsize=(11.0, 7.0), layout="constrained")
        FigureCanvasAgg(fig)
        axes = [fig.add_subplot(2, 2, i + 1) for i in range(4)]
        for i, (akey, pts) in enumerate((k, v) for k, v in arms.items() if k[0] == policy):
            pts = sorted(pts, key=lambda r: r[x])
            lab = _fig_label(pts[0], arm)
            for ax, m, q in zip(axes, METRICS, QUANTILES):
                good = [r for r in pts if r[m] is not None]
                if not good:
                    continue
                xs = np.array([r[x] for r in good], float)
                y = np.array([r[m] for r in good], float)
                hw = np.array([r[f"{m}_hw"] if r[f"{m}_hw"] is not None else np.nan
                               for r in good], float)
                ax.errorbar(xs, y, yerr=np.nan_to_num(hw), marker="o", ms=4, capsize=3,
                            color=style.color(i), label=lab)
                mfs = {}
                for r in good:
                    mf = mf_of(r)
                    if mf is not None and mf.quantiles()[METRICS.index(m)] is not None:
                        mfs[r[x]] = mf.quantiles()[METRICS.index(m)]
                if mfs:
                    vals = list(mfs.values())
                    if max(vals) - min(vals) <= 1e-9 * max(1.0, abs(max(vals))):
                        ax.axhline(vals[0], ls="--", lw=1, color="k")
                    else:  # the limit moves along the arm (e.g. lam a function of N)
                        ax.plot(list(mfs), vals, ls="--", lw=1, color="k")
        for ax, qn in zip(axes, QUANTILE_NAMES):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(style.label(x))
            ax.set_title(f"{_QUANTILE_WORDS.get(qn, qn)} of the response time", fontsize=9)
            ax.set_ylabel("mean service times")
            ax.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"{style.policy_name(policy)}: response-time quantiles against "
                     f"{style.label(x)} (95% CI; dashed: mean field)", fontsize=10)
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(fontsize=6)
        p = outdir / f"quantiles_vs_n_{_slug(policy)}.png"
        fig.savefig(p, dpi=110)
        plots.append(p)
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    report.write_text("\n".join(lines) + "\n")
    summary = outdir / "summary.parquet"
    agg.write_parquet(summary)
    return {"report": report, "plots": plots, "metrics": metrics, "summary": summary}


#: the analyses this module serves (``extra_analyses`` names; analysis collects them)
