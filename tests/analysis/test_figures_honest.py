"""Figures that do not mislead (issue 43, part 4), on synthetic frames: a fitted line spans only
the points it was fitted on; a mean field beside a simulation is the one at the simulation's own
point (or says which point it is); a rule has one colour in every figure of a run."""
from __future__ import annotations

import re

import numpy as np
import pytest
from matplotlib.figure import Figure

from analysis import compare_to_meanfield, fit_gap_rate, plots, style
from analysis.aggregate import aggregate
from analysis.summary import analyze
from tests.analysis.test_analysis import PARAMS, _frame, _row, _sweep


@pytest.fixture
def saved(monkeypatch):
    """Every figure saved while the test runs, by file name."""
    seen: dict[str, Figure] = {}
    save = Figure.savefig

    def keep(self, fname, *a, **kw):
        seen[str(getattr(fname, "name", fname)).rsplit("/", 1)[-1]] = self
        return save(self, fname, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    return seen


def _fit_lines(ax):
    """The fitted power laws of a gap panel: solid lines of 50 points."""
    return [ln for ln in ax.get_lines() if ln.get_linestyle() == "-" and len(ln.get_xdata()) == 50]


def test_fitted_line_spans_the_fitted_points_only():
    xx, yy = style.fitted_line([300.0, 100.0, 3000.0], np.log(2.0), -0.5)
    assert xx.min() == pytest.approx(100.0) and xx.max() == pytest.approx(3000.0)
    assert np.allclose(yy, 2.0 * xx ** -0.5)
    one, _ = style.fitted_line([50.0], 0.0, -1.0)
    assert list(one) == [50.0]


def test_gap_fit_line_stays_within_the_points_it_was_fitted_on(tmp_path, saved):
    """Significant gaps 5/N at N = 10..1000, noise only beyond (10^4, 10^5): the fit has the
    small N only, and its line must end at N = 1000, not run across the axis to 10^5."""
    rng = np.random.default_rng(11)
    rows = (_sweep(rng, lambda n: 5.0 / n, 1e-4, ns=[10, 100, 1000])
            + _sweep(rng, lambda n: 5.0 / n, 1.0, ns=[10_000, 100_000]))
    agg = aggregate(_frame(rows), PARAMS)
    cmp = compare_to_meanfield(agg, PARAMS)
    fits = fit_gap_rate(cmp, PARAMS)
    fit = fits.row(0, named=True)
    assert fit["slope"] is not None and fit["x_max"] == 1000.0  # the frame is the case it claims
    plots.plot_gaps(cmp, fits, PARAMS, tmp_path)
    (ax,) = [a for a in saved["gap_mean_response_vs_n_servers_pod.png"].axes if a.get_visible()]
    (line,) = _fit_lines(ax)
    xs = np.asarray(line.get_xdata(), float)
    assert xs.min() >= fit["x_min"] * (1 - 1e-12) and xs.max() <= fit["x_max"] * (1 + 1e-12)
    assert ax.get_xlim()[1] > 1e5 * 0.9  # the axis goes on past the fit: the line does not


def test_no_fit_line_where_the_significant_gaps_have_both_signs(tmp_path, saved):
    rng = np.random.default_rng(12)
    rows = _sweep(rng, lambda n: 5.0 / n if n < 500 else -5.0 / n, 1e-5, ns=[10, 100, 1000, 10_000])
    agg = aggregate(_frame(rows), PARAMS)
    cmp = compare_to_meanfield(agg, PARAMS)
    fits = fit_gap_rate(cmp, PARAMS)
    assert fits["sign"][0] == "mixed" and fits["slope"][0] is not None
    plots.plot_gaps(cmp, fits, PARAMS, tmp_path)
    fig = saved["gap_mean_response_vs_n_servers_pod.png"]
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert _fit_lines(ax) == []
    assert any("no fit line" in t.get_text() for lg in fig.legends for t in lg.get_texts())


def _path_rows(ns_sim, ns_mf, lam_of):
    """A path whose lam changes with N, as in sub_halfin_whitt: simulations at ``ns_sim``, the
    mean field at ``ns_mf``, each mean-field tail its own (s_2 = 0.1 + lam / 10)."""
    rows = []
    for n in ns_mf:
        lam = lam_of(n)
        rows.append(_row("meanfield", "pod", n, lam, 2, 0, 2.0, None, tail=[lam, 0.1 + lam / 10, 0.0]))
    for n in ns_sim:
        for r in range(2):
            rows.append(_row("agent", "pod", n, lam_of(n), 2, r, 2.1, 0.01, tail=[0.9, 0.2, 0.01]))
    return rows


def _limit_lines(fig):
    return [ln for a in fig.axes for ln in a.get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]


def test_tail_mean_field_is_the_one_at_the_simulations_point(tmp_path, saved):
    lam_of = lambda n: 1 - n ** -0.3  # noqa: E731
    rows = _path_rows([100, 1000], [100, 1000, 10**15], lam_of)
    agg = aggregate(_frame(rows), PARAMS)
    plots.plot_tails(agg, PARAMS, tmp_path)
    fig = saved["tail_pod.png"]
    (line,) = _limit_lines(fig)
    # s_2 of the mean field at N = 1000 (the largest simulated N), not at 10^15
    assert np.asarray(line.get_ydata(), float)[1] == pytest.approx(0.1 + lam_of(1000) / 10)
    assert "simulation's parameters" in line.get_label()


def test_a_mean_field_at_another_point_says_which(tmp_path, saved):
    rows = _path_rows([100, 1000], [10**15], lambda n: 1 - n ** -0.3)
    agg = aggregate(_frame(rows), PARAMS)
    plots.plot_tails(agg, PARAMS, tmp_path)
    (line,) = _limit_lines(saved["tail_pod.png"])
    assert "another point" in line.get_label() and "not the simulation's" in line.get_label()


def _variant_rows():
    """Three rules for d, as variants: the first (a buffered arm) has no mean field, so it is
    absent from the gap figure but present in the zero-queueing ones."""
    rng = np.random.default_rng(13)
    rows = []
    for variant, mf in (("a_buffered", False), ("c1", True), ("c4", True)):
        for n in (100, 1000, 10_000):
            lam, k = 1 - n ** -0.3, int(np.ceil(np.log(n) ** 2))
            base = {"variant": variant, "k": k, "queueing_ratio_se": 0.002, "drop_prob": 0.0, "drop_prob_se": 0.0,
                    "frac_within_h": 0.9}
            if mf:
                rows.append({**_row("meanfield", "batch_filling", n, lam, 3, 0, 4.0, None),
                             **base, "queueing_ratio": 0.3, "queueing_ratio_se": None})
            for r in range(3):
                v = 0.3 + 1.0 / np.sqrt(n) + rng.normal(0, 0.002)
                rows.append({**_row("occupancy", "batch_filling", n, lam, 3, r, 4.0 * (1 + v), 0.004),
                             **base, "queueing_ratio": v})
    return _frame(rows)


def _colours_by_rule(fig, rules):
    """The colour of each rule's series in ``fig`` (by the rule's name in the label: ``variant
    c1`` in the generic figures, ``c1`` or ``c1: d = ...`` in the zero-queueing ones)."""
    out: dict[str, set] = {}
    for ax in fig.axes:
        labelled = [(c.get_label(), c.lines[0]) for c in ax.containers
                    if hasattr(c, "lines") and c.lines[0] is not None]
        labelled += [(ln.get_label(), ln) for ln in ax.get_lines()]
        for lab, ln in labelled:
            for rule in rules:
                if re.search(rf"(^|variant ){rule}($|[,:;\s])", str(lab)):
                    out.setdefault(rule, set()).add(ln.get_color())
    return out


def test_a_rule_has_one_colour_in_every_figure_of_a_run(tmp_path, saved):
    from analysis.models.zero_queueing import analyze_zero_queueing

    frame = _variant_rows()
    params = ["n_servers", "variant", "k", "d", "lam"]
    analyze(frame, params, tmp_path, "t")
    analyze_zero_queueing(frame, params, tmp_path / "zero_queueing", "t")
    rules = ("a_buffered", "c1", "c4")
    gap = _colours_by_rule(saved["gap_mean_response_vs_n_servers_batch_filling.png"], rules)
    ratio = _colours_by_rule(saved["ratio_vs_n_batch_filling.png"], rules)
    d_fig = _colours_by_rule(saved["d_vs_n.png"], rules)
    assert set(gap) == {"c1", "c4"} and set(ratio) == set(rules)  # the gap figure lacks the buffered arm
    for rule in rules:
        colours = [c for fig in (gap, ratio, d_fig) for c in fig.get(rule, set())]
        assert len(set(colours)) == 1, (rule, gap, ratio, d_fig)
    assert len({next(iter(ratio[r])) for r in rules}) == 3  # and the rules differ


def test_no_fit_line_where_one_power_law_misses_its_points(tmp_path, saved):
    """Gaps that stay flat and then fall (0.5 to N = 10^3, then 0.05 and 0.01) are significant
    at every N but are not one power law: the fit's reduced chi-square is far above
    POOR_FIT_CHI2, and a line through them would show a trend they do not have (the headline's
    single-task rule: a line near 0.45 at 10^7 where the gap is 0.055)."""
    rng = np.random.default_rng(13)
    shape = {10: 0.5, 100: 0.5, 1000: 0.5, 10_000: 0.05, 100_000: 0.01}
    rows = _sweep(rng, lambda n: shape[n], 1e-4, ns=list(shape))
    agg = aggregate(_frame(rows), PARAMS)
    cmp = compare_to_meanfield(agg, PARAMS)
    fits = fit_gap_rate(cmp, PARAMS)
    assert fits["slope"][0] is not None and fits["red_chi2"][0] > plots.POOR_FIT_CHI2
    plots.plot_gaps(cmp, fits, PARAMS, tmp_path)
    fig = saved["gap_mean_response_vs_n_servers_pod.png"]
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert _fit_lines(ax) == []
    assert any("no line (not one power law)" in t.get_text() for lg in fig.legends for t in lg.get_texts())


def test_more_rules_than_colours_keep_distinct_styles_and_legend_entries(tmp_path, saved):
    """Nine arms (3 loads x 3 values of d, as pod_mean_field) split into one panel per load: each
    series keeps its own colour and marker pair (the palette has 8 colours), and the figure's one
    legend names each series' load, so no entry stands for two series or goes missing."""
    rng = np.random.default_rng(13)
    rows = [r for lam in (0.7, 0.9, 0.95) for d in (1, 2, 3)
            for r in _sweep(rng, lambda n: 5.0 / n, 1e-4, ns=[10, 100, 1000], lam=lam, d=d)]
    agg = aggregate(_frame(rows), PARAMS)
    cmp = compare_to_meanfield(agg, PARAMS)
    plots.plot_gaps(cmp, fit_gap_rate(cmp, PARAMS), PARAMS, tmp_path)
    fig = saved["gap_mean_response_vs_n_servers_pod.png"]
    assert len([a for a in fig.axes if a.get_visible()]) == 3
    (legend,) = fig.legends
    entries = [(t.get_text(), h) for t, h in zip(legend.get_texts(), legend.legend_handles)
               if t.get_text().startswith("\u03bb")]
    assert len(entries) == 9
    assert len({lab.split(";")[0] for lab, _ in entries}) == 9
    assert len({(h.get_color(), h.get_marker()) for _, h in entries}) == 9
    assert len({(style.color(i), style.marker(i)) for i in range(64)}) == 64
