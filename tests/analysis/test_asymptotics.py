"""analysis.asymptotics: the verdict calibrated for slow rates, humps and rounding steps (issues
35 and 44), on the battery of tests/analysis/asymptotics_battery.py (fast: 8 draws of a few
families; slow: 40 of all).

The bounds are the issue's (wrong calls of either kind in <= 10% of draws; the clear families
right in >= 80%, undecided in <= 20%) with a binomial margin: a family fails when its count is
beyond the 99% quantile of a binomial at the bound (for 40 draws: more than 9 wrong, fewer than
26 right, more than 14 undecided; for the fast suite's 8: more than 3 wrong, fewer than 3
right), so a family whose true rate sits exactly at the bound fails with probability < 1%.
The seeds are fixed: the same code gives the same counts."""
import math

import numpy as np
import pytest
from scipy import stats

from analysis.asymptotics import CONVERGES, NOT_VANISHING, RIVALS, UNDECIDED, VANISHING, asymptotic_verdict, rival_from_points
from analysis.models.zero_queueing.verdicts import heavy_traffic_shape
from tests.analysis.asymptotics_battery import FAMILIES, NS, REL, draw, run_family, table

FAST = ("power N^-0.1", "0.05 + N^-0.3", "growing 0.36 -> 0.88", "hump 2/(t + 1/t), peak 10^9",
        "mean field batch_sampling c1_loglog")
#: the draws of the slow test per family
SLOW_DRAWS = 40
#: the binomial margin: counts beyond this quantile of Binomial(draws, bound) fail
MARGIN_Q = 0.99


def check_rates(res: dict):
    """The issue's bounds on one family's rates, with the binomial margin of the module docstring."""
    name, d = res["name"], res["draws"]
    truth, cls, floor, shift, clear = FAMILIES[name]
    wrong = round(res["wrong"] * d)
    if clear:  # right in >= 80%, undecided in <= 20%
        assert round(res["right"] * d) >= stats.binom.ppf(1 - MARGIN_Q, d, 0.8), res
        assert round(res["undecided"] * d) <= stats.binom.ppf(MARGIN_Q, d, 0.2), res
    # decays to zero (slow ones, humps, the mean-field paths) are never a level, floors never
    # vanishing, and no single point decides: wrong in <= 10% for every family
    assert wrong <= stats.binom.ppf(MARGIN_Q, d, 0.1), res
    if floor is not None and res["levels"] >= 10:
        assert res["covered"] >= stats.binom.ppf(1 - MARGIN_Q, res["levels"], 0.9), res


@pytest.mark.parametrize("name", FAST)
def test_battery_fast(name):
    check_rates(run_family(name, 8))


@pytest.mark.slow
def test_battery_slow(capsys):
    results = [run_family(name, SLOW_DRAWS) for name in FAMILIES]
    with capsys.disabled():
        print("\n" + table(results))
    for res in results:
        check_rates(res)


def test_the_margin_is_what_the_docstring_says():
    assert stats.binom.ppf(MARGIN_Q, SLOW_DRAWS, 0.1) == 9 and stats.binom.ppf(1 - MARGIN_Q, SLOW_DRAWS, 0.8) == 26
    assert stats.binom.ppf(MARGIN_Q, SLOW_DRAWS, 0.2) == 14 and stats.binom.ppf(MARGIN_Q, 8, 0.1) == 3


def test_same_seed_same_verdict_and_the_seed_matters():
    n, r, se = draw("3 / ln N", 3)
    a, b = asymptotic_verdict(n, r, se, seed=[7, 1]), asymptotic_verdict(n, r, se, seed=[7, 1])
    assert a.as_dict() == b.as_dict()
    c = asymptotic_verdict(n, r, se, seed=[8, 1])
    assert (c.p_zero, c.p_level) != (a.p_zero, a.p_level)


def test_rivals_are_named_and_fitted():
    truth = 0.4 * NS ** -0.3
    v = asymptotic_verdict(NS, truth, REL * truth, seed=1)
    by = {x["name"]: x for x in v.rivals}
    assert set(by) == {rv.name for rv in RIVALS} >= {"power to zero", "a/(ln N)^p", "a lnln N/ln N", "a/(ln ln N)^q",
                                                     "hump", "rise then fall", "floor + power", "floor + a/(ln N)^p",
                                                     "floor - power", "floor + hump", "flat or growing"}
    p = by["power to zero"]
    assert abs(p["theta"] + 0.3) < 1e-3 and p["chi2"] < 1e-2 and v.outcome == VANISHING
    assert "power to zero" not in v.note or "a N^b" in v.note  # rivals named by formula
    # the general module holds no path's form: the heavy-traffic form comes from the model
    assert not any("ln k" in rv.formula for rv in RIVALS)


def test_a_hump_is_fitted_to_its_peak_and_turning_beyond_the_range_is_not_a_level():
    # exactly (ln N)^1 N^-0.05 (a rival's own form, off its grid): the refinement reaches it
    truth = 0.02 * np.log(NS) * NS ** -0.05
    v = asymptotic_verdict(NS, truth, REL * truth, seed=2, leave_one_out=False)
    rf = {x["name"]: x for x in v.rivals}["rise then fall"]
    assert rf["chi2"] < 1e-6 and abs(rf["params"]["p"] - 1) < 1e-3 and abs(rf["params"]["b"] - 0.05) < 1e-4
    assert abs(rf["params"]["log10 N_peak"] - 20 / math.log(10)) < 0.01
    # a hump peaking at 10^9 whose rise flattens over 10^2..10^7: never a level or "not vanishing"
    t = np.log(NS) / (9 * math.log(10))
    truth = 0.6 / (t + 1 / t)
    v = asymptotic_verdict(NS, truth, REL * truth, seed=3)
    assert v.outcome in (VANISHING, UNDECIDED), v.note


def test_model_rivals_are_fitted_beside_the_general_ones():
    # the heavy-traffic form at the path's own k and a limit path, given as values at the N
    k = np.ceil(np.log(NS) ** 2)
    truth = 0.7 * heavy_traffic_shape(k)
    ht = rival_from_points("a lnln k/ln k", "zero", "a ln ln k / ln k at the arm's own k", NS, heavy_traffic_shape(k))
    v = asymptotic_verdict(NS, truth, REL * truth, seed=1, rivals=[ht])
    by = {x["name"]: x for x in v.rivals}
    assert by["a lnln k/ln k"]["chi2"] < 1e-12 and v.best_zero == "a lnln k/ln k" and v.outcome != CONVERGES
    # a path known only at some N is no rival where it has no value (not fitted: chi2 inf)
    part = rival_from_points("limit path", "zero", "a x the limit path", NS[:5], truth[:5])
    v = asymptotic_verdict(NS, truth, REL * truth, seed=1, rivals=[part], leave_one_out=False)
    assert math.isinf({x["name"]: x for x in v.rivals}["limit path"]["chi2"])
    with pytest.raises(ValueError, match="differ"):
        asymptotic_verdict(NS, truth, REL * truth, seed=1, rivals=[part, part])
    assert math.isnan(heavy_traffic_shape([2.0])[0])


def test_a_slow_decay_and_a_floor_that_fit_alike_are_undecided_with_both_named():
    ln = np.log(NS)
    truth = np.log(ln) / ln
    v = asymptotic_verdict(NS, truth, REL * truth, seed=2)  # no noise: the rivals' best fits
    assert v.outcome == UNDECIDED and "fit alike" in v.note
    assert "ln ln N / ln N" in v.note and "c0 + a" in v.note and "p(zero)" in v.note


def test_a_floor_gets_a_level_interval():
    truth = 0.12 + 0.3 * NS ** -0.5
    v = asymptotic_verdict(NS, truth, REL * truth, seed=3)
    assert v.outcome == CONVERGES
    assert v.level_lo <= 0.12 <= v.level_hi and abs(v.level - 0.12) < 1e-3


def test_one_point_never_decides():
    # the case: a flat sequence whose last point alone is tiny is not vanishing
    truth = np.r_[np.full(NS.size - 1, 0.33), 1e-4]
    v = asymptotic_verdict(NS, truth, np.maximum(REL * truth, 1e-6), seed=4)
    assert v.outcome != VANISHING
    # without the largest N it is a level (all flat) or undecided: either way that point alone
    # decided, and the note names it
    assert NS[-1] in v.fragile and v.note.startswith("fragile: ") and "N = 1e+07" in v.note
    # a power law to zero with a last point 10 SE high: no floor is invented
    truth = 0.4 * NS ** -0.3
    r = truth.copy()
    r[-1] += 10 * REL[-1] * truth[-1]
    v = asymptotic_verdict(NS, r, REL * truth, seed=5)
    assert v.outcome in (VANISHING, UNDECIDED)
    if v.outcome == UNDECIDED:
        assert v.fragile and v.note.startswith("fragile: ")


def test_growth_and_too_few_points():
    truth = 0.02 * NS ** 0.3
    assert asymptotic_verdict(NS, truth, REL * truth, seed=6).outcome == NOT_VANISHING
    v = asymptotic_verdict(NS[:3], truth[:3], REL[:3] * truth[:3], seed=6)
    assert v.outcome == UNDECIDED and "3 point(s)" in v.note and not v.rivals
