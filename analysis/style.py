"""One place for what every figure shares: axis words and units, the palette, log and integer axes.

Every plotting function in ``analysis/`` takes its axis labels from :func:`label` (words with
units, never a column name), its colours from :data:`PALETTE` (at most :data:`MAX_SERIES` series
in a panel: callers split panels beyond that, :func:`split_series`), and formats its axes with
:func:`log_axis` and :func:`integer_axis`. Two marks carry meaning a referee must not miss:

* :func:`mark_ci_to_zero`: on a log axis a 95% interval whose lower end is <= 0 cannot be drawn;
  the lower bar is replaced by an arrow from the point to the bottom of the panel, with a legend
  entry "95% CI reaches 0" (:func:`ci_zero_handle`), instead of a bar clipped at some positive value.
* :func:`mark_max_level`: a tail recorded only up to ``max_level`` (the run setting) whose last
  level is still positive is cut there, not ended: a dotted vertical line at ``max_level`` says so.

Two rules keep the figures of one run consistent and honest:

* one colour (and marker) per rule: :class:`RuleStyles` maps each rule of a run (the sweep's
  variant, such as the rule for d, else the arm's parameter values: :func:`rule_of`) to one
  colour and marker, and every figure of the run that draws a rule takes them from it;
* a fitted line spans only the points it was fitted on (:func:`fitted_line`), never the axis.

Nothing here computes a statistic.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, MaxNLocator, NullFormatter

from analysis import declared
from analysis.fmt import short
from analysis.fmt import value as _value

__all__ = ["LABELS", "SYMBOLS", "PALETTE", "MARKERS", "MAX_SERIES",
           "label", "gap_label", "symbol", "policy_name", "short", "with_d", "engine_name", "param_text", "time_unit",
           "color", "marker", "log_axis", "errorbar_log", "integer_axis", "is_integer_valued", "mark_ci_to_zero",
           "ci_zero_handle", "CI_ZERO_LABEL", "mark_max_level", "tail_is_cut", "split_series",
           "legend_outside", "legend_below", "reference_slope", "dodge", "rule_of", "RuleStyles", "fitted_line"]

#: Okabe & Ito's colour-blind-safe palette, yellow swapped for brown (black is kept for the
#: mean-field / limit curves)
PALETTE: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                            "#8C510A", "#7F7F7F")  # Okabe-Ito's yellow is too pale on white: brown
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "h")
#: a panel never holds more series than there are distinct colours
MAX_SERIES = len(PALETTE)
LIMIT_COLOR = "black"

_TIME = "{unit}"

#: axis words and units of the columns that are not model parameters (estimates, and the
#: variables of the sweeps' formulas); a parameter's words are its declaration's
#: (``Param.label``, read through :mod:`analysis.declared`). ``{unit}`` is the time unit
#: (:func:`time_unit`: mean service times, or slots for the slotted engine)
LABELS: dict[str, str] = {
    # variables of the sweeps' formulas
    "alpha": "\u03b1 (exponent in \u03bb = 1 \u2212 \u03b2 N^\u2212\u03b1)",
    "beta": "\u03b2 (constant in \u03bb = 1 \u2212 \u03b2 N^\u2212\u03b1)",
    "c": "c (constant of the probe rule)",
    "T": "run length T ({unit})",
    "eps": "\u03b5 = \u03bc\u03a3 \u2212 \u03bb\u03a3 (spare capacity, tasks per slot)",
    "one_over_1_minus_lam": "1/(1 \u2212 \u03bb) (log scale)",
    # estimates
    "mean_response": "mean response time ({unit})",
    "mean_wait": "mean waiting time ({unit})",
    "prob_wait": "probability that a job waits",
    "mean_queue": "mean queue length (tasks per server)",
    "mean_total_queue": "mean total queue length E[\u03a3 Q] (tasks)",
    "queueing_ratio": "queueing ratio (E[T] \u2212 H_k) / H_k",
    "ht_ratio": "heavy-traffic ratio \u03b5 E[\u03a3 Q] / \u03b6",
    "p0": "p\u2080 (fraction of empty I-queues)",
    "s_2": "s\u2082 (fraction of servers with \u2265 2 tasks)",
    "tail": "$s_i$ (fraction of servers with \u2265 i tasks)",
    "tail_central": "$s_i$ (fraction of stations with \u2265 i tasks)",
    "level": "queue length i (tasks)",
    "messages_per_job": "one-way messages per arriving task",
    "msg_rate": "messages per server per {unit}",
    "distance": "distance to the invariant tail (fraction of stations)",
}

#: short symbols for panel titles and legends (``\u03bb = 0.9``) of the columns that are not
#: model parameters (a parameter's is its declaration's ``Param.symbol``)
SYMBOLS: dict[str, str] = {"alpha": "\u03b1", "beta": "\u03b2", "eps": "\u03b5"}


def time_unit(engines: Sequence[str] = ()) -> str:
    """``slots`` when every engine is the discrete-time one, else the mean service time."""
    engines = [e for e in engines if e is not None]
    if engines and all(e == "slotted" for e in engines):
        return "slots"
    return "mean service times"


#: labels that differ for the discrete-time (slotted, LED) model, where ``lam`` is the load
_SLOTTED_LABELS: dict[str, str] = {
    "lam": "load \u03c1 = \u03bb\u03a3 / \u03bc\u03a3 (arrivals over service capacity)",
}


def label(col: str, engines: Sequence[str] = ()) -> str:
    """Axis words with units for column ``col`` (the column name itself only if unknown)."""
    text = declared.param_label(col) or LABELS.get(col)
    if time_unit(engines) == "slots":
        text = _SLOTTED_LABELS.get(col, text)
    if text is None:
        return col.replace("_", " ")
    return text.replace("{unit}", time_unit(engines))


def gap_label(col: str, engines: Sequence[str] = ()) -> str:
    """``|mean response time - mean field| (mean service times)``: the absolute gap's axis."""
    text = label(col, engines)
    words, unit = (text.rsplit(" (", 1) + [""])[:2] if text.endswith(")") else (text, "")
    unit = f" ({unit}" if unit else ""
    return f"|{words} \u2212 mean field|{unit}"


#: symbols that differ for the discrete-time (slotted, LED) model, where ``lam`` is the load
_SLOTTED_SYMBOLS: dict[str, str] = {"lam": "\u03c1"}


def symbol(col: str, engines: Sequence[str] = ()) -> str:
    """Short symbol of ``col`` (``\u03bb``; ``\u03c1`` for ``lam`` when every engine is the slotted one)."""
    if time_unit(engines) == "slots" and col in _SLOTTED_SYMBOLS:
        return _SLOTTED_SYMBOLS[col]
    return declared.param_symbol(col) or SYMBOLS.get(col, col)


def policy_name(policy: str, model: str | None = None, engine: str | None = None) -> str:
    """A policy's name in words, as its model declares it (:func:`analysis.declared.policy_label`;
    ``model`` or ``engine`` settle a name two models share)."""
    from analysis.declared import policy_label

    return policy_label(policy, model, engine)


def with_d(name: str, d) -> str:
    """A label with its d filled in: ``power-of-d`` -> ``power-of-2``, ``JIQ-Po2`` and
    ``JIQ-SQ(2)`` -> ``JIQ-Po3`` and ``JIQ-SQ(3)`` for d = 3; other labels unchanged."""
    d = int(d)
    name = name.replace("power-of-d", f"power-of-{d}")
    return name.replace("-Po2", f"-Po{d}").replace("SQ(2)", f"SQ({d})")


def engine_name(engine: str) -> str:
    """An engine in words, as its declaration gives them (``Engine.label``; the name itself for
    an engine no loaded model declares)."""
    return declared.engine_label(engine) or engine


def param_text(row: dict, cols: Sequence[str], engines: Sequence[str] = ()) -> str:
    """``\u03bb = 0.9, d = 2`` for the given parameter columns of ``row`` (nulls left out)."""
    parts = [f"{symbol(c, engines)} = {_value(row[c])}" if c != "variant" else f"variant {row[c]}"
             for c in cols if row.get(c) is not None]
    return ", ".join(parts)


#: columns that never make a rule: a rule is drawn for each policy and engine
_NOT_RULE = frozenset({"policy", "engine", "variant"})


def rule_of(row: dict, cols: Sequence[str] = ()) -> tuple:
    """The rule a series belongs to: ``(variant,)`` where the variant is among the arm
    parameters ``cols`` (the rules for d of ``sub_halfin_whitt``; not where a variant is a point
    along N, as in ``transients``), else its values of ``cols`` but policy and engine (``(d,)``
    in a sweep over d). Policies and engines of one rule share its colour."""
    v = row.get("variant")
    if v is not None and "variant" in cols:
        return (v,)
    return tuple(row.get(c) for c in cols if c not in _NOT_RULE)


def _rule_sort_key(rule: tuple) -> tuple:
    return tuple((v is None, not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else str(v))
                 for v in rule)


class RuleStyles:
    """One colour and one marker per rule, the same in every figure of a run.

    Built from the rules of the run's simulated rows (:func:`rule_of`), sorted (numbers by
    value, names alphabetically), so that two figures built from the same rows give a rule the
    same colour whatever subset of the rules each of them draws. A rule not among them (a limit
    only) gets the next free colours."""

    def __init__(self, rules):
        self.rules: list[tuple] = sorted(dict.fromkeys(tuple(r) for r in rules), key=_rule_sort_key)

    @classmethod
    def from_rows(cls, rows, cols: Sequence[str] = ()) -> RuleStyles:
        """From dicts (or a Polars frame's rows) with the columns of :func:`rule_of`."""
        if hasattr(rows, "iter_rows"):
            rows = rows.iter_rows(named=True)
        return cls(rule_of(r, cols) for r in rows)

    def index(self, rule: tuple) -> int:
        rule = tuple(rule)
        if rule not in self.rules:
            self.rules.append(rule)
        return self.rules.index(rule)

    def color(self, rule: tuple) -> str:
        return color(self.index(rule))

    def marker(self, rule: tuple) -> str:
        return marker(self.index(rule))


def fitted_line(x_fitted, intercept: float, slope: float, n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """``(x, exp(intercept) x^slope)`` for a power law fitted on the points ``x_fitted``: x runs
    from their smallest to their largest value only (log-spaced), never beyond: a fit says
    nothing about N where it had no point."""
    xs = np.asarray(x_fitted, dtype=float)
    xs = xs[np.isfinite(xs) & (xs > 0)]
    if xs.size == 0:
        return np.array([]), np.array([])
    xx = np.geomspace(xs.min(), xs.max(), n) if xs.max() > xs.min() else xs[:1]
    return xx, np.exp(intercept) * xx ** slope


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def marker(i: int) -> str:
    """The marker of series ``i``: with :func:`color`, a pair no other of the first 64 series
    shares (past the palette's end the colours repeat, the markers shift by one)."""
    return MARKERS[(i + i // len(PALETTE)) % len(MARKERS)]


def is_integer_valued(values) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool(np.all(np.abs(v - np.round(v)) < 1e-9))


def _plain(v: float, _pos=None) -> str:
    if v <= 0 or not math.isfinite(v):
        return ""
    e = math.log10(v)
    if abs(e - round(e)) < 1e-9 and abs(e) >= 4:
        return f"$10^{{{round(e)}}}$"
    return f"{v:g}"


def log_axis(ax, which: str, values=None) -> None:
    """Put ``which`` (``"x"`` or ``"y"``) on a log scale whose labels never overlap.

    Two decades or more: labels at powers of ten only (unlabelled minor ticks). Less: labels at
    1, 2 and 5 times powers of ten, written plainly (``20, 50, 100``), never the default
    ``2x10^1 3x10^1 ...`` minor labels that run into each other.
    """
    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    span = None
    if values is not None:
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            span = math.log10(v.max() / v.min())
    if span is not None and span < 2.0:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if span >= 0.7 else
                                          (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0), numticks=30))
        axis.set_major_formatter(FuncFormatter(_plain))
    else:
        # at most about 7 labelled decades (every other one beyond that)
        axis.set_major_locator(LogLocator(base=10, numticks=7))
        axis.set_major_formatter(LogFormatterSciNotation(base=10))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10)), numticks=12))
    axis.set_minor_formatter(NullFormatter())


def integer_axis(ax, which: str) -> None:
    """Integer ticks only on a linear axis (queue lengths, counts)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(MaxNLocator(integer=True, nbins="auto"))


CI_ZERO_LABEL = "95% CI reaches 0 (arrow: off the log axis)"


def mark_ci_to_zero(ax, xs, ys, color_: str, lw: float = 0.8) -> int:
    """Arrows from each point ``(x, y)`` down to the bottom of the panel: its interval reaches 0.

    The arrow ends at the axes' bottom whatever the final limits (axes coordinates), so it does
    not change the autoscaling. Returns how many points were marked.
    """
    n = 0
    for x, y in zip(np.asarray(xs, float), np.asarray(ys, float)):
        if not (np.isfinite(x) and np.isfinite(y) and y > 0):
            continue
        ax.annotate("", xy=(x, 0.0), xycoords=("data", "axes fraction"), xytext=(x, y),
                    textcoords="data", annotation_clip=False,
                    arrowprops={"arrowstyle": "-|>", "color": color_, "lw": lw, "shrinkA": 3, "shrinkB": 0,
                                    "mutation_scale": 8, "linestyle": (0, (3, 2))})
        n += 1
    return n


def errorbar_log(ax, xs, ys, hw_lo, hw_hi=None, color_: str = "k", **kw) -> bool:
    """``ax.errorbar`` for a log y axis: where the lower half-width reaches the value (the 95%
    interval contains 0) the lower bar is an arrow to the bottom of the panel
    (:func:`mark_ci_to_zero`). Non-finite half-widths draw no bar. Returns whether any point
    was so marked (the caller adds :func:`ci_zero_handle` to the legend once)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    lo = np.nan_to_num(np.asarray(hw_lo, dtype=float), nan=0.0)
    hi = lo if hw_hi is None else np.nan_to_num(np.asarray(hw_hi, dtype=float), nan=0.0)
    zero = (lo >= ys) & (ys > 0)
    ax.errorbar(xs, ys, yerr=[np.where(zero, 0.0, lo), hi], color=color_, **kw)
    if zero.any():
        mark_ci_to_zero(ax, xs[zero], ys[zero], color_)
    return bool(zero.any())


def ci_zero_handle(color_: str = "0.3") -> Line2D:
    """A legend handle for :func:`mark_ci_to_zero`."""
    return Line2D([], [], color=color_, lw=0.8, ls=(0, (3, 2)), marker="v", ms=5, label=CI_ZERO_LABEL)


def mark_max_level(ax, max_level: int) -> Line2D:
    """A dotted vertical line at ``max_level``: the tail is cut there (levels above not recorded)."""
    return ax.axvline(max_level, color="0.35", ls=":", lw=1.2,
                      label=f"max_level = {max_level}: tail cut here (not recorded above)")


def tail_is_cut(tail, floor: float = 0.0) -> bool:
    """A recorded tail whose last level is still above ``floor``: it goes on past max_level."""
    t = np.asarray(tail, dtype=float)
    return bool(t.size) and bool(np.isfinite(t[-1])) and t[-1] > floor


def split_series(series: list[dict], cols: Sequence[str], limit: int = MAX_SERIES) -> list[tuple[dict, list[dict]]]:
    """Split ``series`` into panels of at most ``limit``: ``[(fixed values, series), ...]``.

    One panel when they fit. Otherwise by the values of one column of ``cols`` (the one giving
    the fewest panels that all fit); failing that, consecutive chunks.
    """
    if len(series) <= limit:
        return [({}, series)]
    best = None
    for c in cols:
        vals = []
        for s in series:
            if s.get(c) not in vals:
                vals.append(s.get(c))
        if len(vals) < 2:
            continue
        groups = [[s for s in series if s.get(c) == v] for v in vals]
        if max(len(g) for g in groups) <= limit and (best is None or len(groups) < len(best[1])):
            best = (c, groups)
    if best is not None:
        c, groups = best
        return [({c: g[0].get(c)}, g) for g in groups]
    return [({}, series[i:i + limit]) for i in range(0, len(series), limit)]


def figure_legend(fig, axes, ncol: int = 4) -> None:
    """One legend for the whole figure, below the panels (never over data): each label once,
    from the visible axes, in as many columns as fit the figure's width (about 3 inches each)."""
    seen: dict = {}
    for ax in axes:
        if not ax.get_visible():
            continue
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    if seen:
        fit = max(1, int(fig.get_figwidth() // 3.0))
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=7,
                   ncol=min(ncol, len(seen), fit), frameon=False)


def legend_outside(ax, fig=None, **kw) -> None:
    """A legend beside the panel (right), so that it never covers data."""
    kw.setdefault("fontsize", 7)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  frameon=False, **kw)


def legend_below(ax, ncol: int = 1, **kw) -> None:
    """A legend under the panel (below its x label), so that it never covers data and leaves
    the panel its full width (constrained layout makes room for it)."""
    kw.setdefault("fontsize", 7)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=ncol, frameon=False, **kw)


def reference_slope(ax, xs, ys, slope: float = -1.0, text: str = "reference slope 1/N") -> Line2D | None:
    """A thin dark dashed line of the given log-log ``slope`` over the range of ``xs``, through
    the geometric centre of the points ``(xs, ys)`` (so it stays among the data)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    ok = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
    if ok.sum() < 2 or np.unique(xs[ok]).size < 2:
        return None
    lx, ly = np.log(xs[ok]), np.log(ys[ok])
    xx = np.array([xs[ok].min(), xs[ok].max()])
    yy = np.exp(ly.mean() + slope * (np.log(xx) - lx.mean()))
    return ax.plot(xx, yy, color="0.2", ls="--", lw=0.9, label=text)[0]


def dodge(xs, i: int, n: int, step: float = 0.025):
    """``xs`` shifted by a small factor on a log axis so that ``n`` series at the same x do not
    hide each other: series ``i`` of ``n`` moves by ``10^(step (i - (n-1)/2))``."""
    return np.asarray(xs, dtype=float) * 10.0 ** (step * (i - (n - 1) / 2.0))
