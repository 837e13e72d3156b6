"""The tables of the JIQ analysis: tails with their intervals, convergence to the mean field in
N (:func:`convergence_table`), the q_i prediction errors (:func:`q_table`).
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import stats

from analysis.fit import gap_rate_verdict

#: q_0..Q_LEVELS_MAX are tabulated (Table II quotes q_5)
Q_LEVELS_MAX = 6


def _tail_stats(ok: pl.DataFrame, keys: list[str], levels: int) -> dict:
    """(point key) -> (mean tail, SE of the mean over replications or the run's SE) per level."""
    out = {}
    for grp in ok.partition_by(keys, as_dict=False, maintain_order=True):
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if not tails:
            continue
        m = min(levels, min(len(t) for t in tails))
        arr = np.array([t[:m] for t in tails], dtype=float)
        mean = arr.mean(axis=0)
        if arr.shape[0] >= 2:
            se = arr.std(axis=0, ddof=1) / math.sqrt(arr.shape[0])
        elif "tail_se" in grp.columns and grp["tail_se"][0] is not None:
            se = np.asarray(grp["tail_se"][0][:m], dtype=float)
        else:
            se = np.zeros(m)
        key = tuple(grp.row(0, named=True)[k] for k in keys)
        out[key] = (mean, se)
    return out


def convergence_table(agg: pl.DataFrame, tails: dict, keys: list[str], x: str = "n_servers") -> list[dict]:
    """Per arm (policy and every parameter but N) and quantity: gaps to the mean field, fit and
    verdict by the rule in the module docstring."""
    sims = agg.filter(pl.col("engine") != "meanfield")
    mf = agg.filter(pl.col("engine") == "meanfield")
    arm_keys = [k for k in keys if k not in ("engine", x)]
    rows = []
    for arm in sims.select(arm_keys + ["engine"]).unique(maintain_order=True).iter_rows(named=True):
        pts = sims.filter(*[pl.col(k).eq_missing(arm[k]) for k in arm_keys + ["engine"]]).sort(x)
        limit = mf.filter(*[pl.col(k).eq_missing(arm[k]) for k in arm_keys])
        if pts.height == 0 or limit.height == 0:
            continue
        lim = limit.row(0, named=True)
        lim_tail = tails.get(tuple(lim[k] for k in keys))
        for q in ("p0", "mean_response", "s_2"):
            ns, gaps, ses = [], [], []
            for p in pts.iter_rows(named=True):
                if q == "s_2":
                    t = tails.get(tuple(p[k] for k in keys))
                    if t is None or lim_tail is None or len(t[0]) < 2 or len(lim_tail[0]) < 2:
                        continue
                    est, se, truth = float(t[0][1]), float(t[1][1]), float(lim_tail[0][1])
                else:
                    est, se, truth = p[q], p[f"{q}_se"], lim[q]
                if est is None or se is None or truth is None:
                    continue
                ns.append(p[x]), gaps.append(est - truth), ses.append(se)
            if not ns:
                continue
            rows.append({**{k: arm[k] for k in arm_keys}, "engine": arm["engine"], "quantity": q,
                         **gap_rate_verdict(np.array(ns, float), np.array(gaps), np.array(ses))})
    return rows


def q_table(ok: pl.DataFrame, keys: list[str], on: list[str], levels: int = Q_LEVELS_MAX) -> list[dict]:
    """Table II as printed: q_i = s_i - s_{i+1} (q_0 = 1 - s_1), the fraction of servers with
    exactly i tasks, per simulated point beside the mean field row of the same arm.

    The simulated q_i is the mean over replications of each replication's own q_i (the
    difference is taken inside a run, where s_i and s_{i+1} are strongly correlated, so the SE
    is that of the difference); the interval is t with R - 1 degrees of freedom. Returns one dict
    per point and level: ``sim, se, hw, mf, rel_err = (sim - mf) / mf, rel_hw = hw / mf,
    z = (sim - mf) / se``."""
    sims = ok.filter(pl.col("engine") != "meanfield")
    mfs = ok.filter(pl.col("engine") == "meanfield")
    out = []
    for grp in sims.partition_by(keys, as_dict=False, maintain_order=True):
        row = grp.row(0, named=True)
        lim = mfs.filter(*[pl.col(k).eq_missing(row[k]) for k in on if k != "engine" and k in mfs.columns])
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if lim.height == 0 or not tails or lim["tail"][0] is None:
            continue
        m = min(levels + 1, min(len(t) for t in tails), len(lim["tail"][0]))
        # q_i from s_0 = 1, s_1, ..., s_m (the last tabulated q needs s_{i+1})
        s_sim = np.array([[1.0, *t[:m]] for t in tails], dtype=float)
        s_mf = np.array([1.0, *lim["tail"][0][:m]], dtype=float)
        q_sim = s_sim[:, :-1] - s_sim[:, 1:]
        q_mf = s_mf[:-1] - s_mf[1:]
        r = q_sim.shape[0]
        mean = q_sim.mean(axis=0)
        se = q_sim.std(axis=0, ddof=1) / math.sqrt(r) if r >= 2 else np.full(mean.size, np.nan)
        tq = stats.t.ppf(0.975, r - 1) if r >= 2 else np.nan
        for i in range(mean.size):
            mf = float(q_mf[i])
            rel = (mean[i] - mf) / mf if mf > 0 else None
            out.append({**{k: row[k] for k in keys}, "level": i, "n_rep": r, "sim": float(mean[i]),
                        "se": float(se[i]), "hw": float(tq * se[i]), "mf": mf, "rel_err": rel,
                        "rel_hw": float(tq * se[i] / mf) if mf > 0 else None,
                        "z": float((mean[i] - mf) / se[i]) if se[i] > 0 else None})
    return out


def _tail_hw(ok: pl.DataFrame, agg: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``agg`` with a ``_tail_hw`` column: the 95% t half-width of the mean tail per level over
    the replications (null for meanfield rows and single runs)."""
    hws = {}
    for grp in ok.filter(pl.col("engine") != "meanfield").partition_by(keys, as_dict=False, maintain_order=True):
        tails = [t for t in grp["tail"].to_list() if t is not None]
        if len(tails) < 2:
            continue
        m = min(len(t) for t in tails)
        arr = np.array([t[:m] for t in tails], dtype=float)
        hw = stats.t.ppf(0.975, arr.shape[0] - 1) * arr.std(axis=0, ddof=1) / math.sqrt(arr.shape[0])
        hws[tuple(grp.row(0, named=True)[k] for k in keys)] = [float(v) for v in hw]
    col = [hws.get(tuple(r[k] for k in keys)) for r in agg.iter_rows(named=True)]
    return agg.with_columns(pl.Series("_tail_hw", col, dtype=pl.List(pl.Float64)))
