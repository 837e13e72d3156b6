"""The laws of the slotted engine (sim.led.distributions) and their compiled sampler.

Each law's own moments against scipy's; the table sampler against the law by a chi-square
test (p-value above ALPHA, the suite's two-sided 4-SE tail) and by its first two moments
(within Z standard errors estimated from the sample). Seeds are fixed.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from sim.led import _slotted_kernel as K
from sim.led.distributions import POISSON_PIECE, Law, build_tables, make_law
from tests.helpers import ALPHA, assert_within_se

#: (role, name, mean, trials): small and large means, every name, the Poisson split
LAWS = [
    ("arrival", "poisson", 0.3, None),
    ("arrival", "poisson", 4.7, None),
    ("arrival", "poisson", 250.0, None),
    ("arrival", "poisson", 2.5 * POISSON_PIECE, None),  # three pieces
    ("arrival", "bernoulli", 0.37, None),
    ("arrival", "binomial", 3.3, 7),
    ("service", "bernoulli", 1.0, None),
    ("service", "binomial", 12.5, 40),
    ("service", "poisson", 1.9, None),
    ("service", "geometric", 0.6, None),
    ("service", "geometric", 7.5, None),
]


def draws(law: Law, size: int, seed: int) -> np.ndarray:
    tb = build_tables([law])
    state = np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)
    return K.sample_many(tb.thr, tb.off, tb.guide, tb.goff, tb.gshift, tb.pieces, 0, size, state)


#: each law by name in scipy, whole (no pieces), from its mean ``m`` and trials ``n``; written
#: here independently of Law.scipy, which the sampler's tables use
EXACT_LAWS = {
    "poisson": lambda m, n: sps.poisson(m),
    "bernoulli": lambda m, n: sps.bernoulli(m),
    "binomial": lambda m, n: sps.binom(n, m / n),
    "geometric": lambda m, n: sps.geom(1.0 / (1.0 + m), loc=-1),  # on 0, 1, 2, ...
}


def exact_law(law: Law):
    """The whole law in scipy (no pieces)."""
    return EXACT_LAWS[law.name](law.mean, law.n)


def exact_pmf(law: Law, k: np.ndarray) -> np.ndarray:
    return exact_law(law).pmf(k)


@pytest.mark.parametrize("role, name, mean, n", LAWS)
def test_law_carries_its_moments(role, name, mean, n):
    law = make_law(name, mean, n, role=role, what="mean")
    m, v = exact_law(law).stats(moments="mv")
    assert float(m) == pytest.approx(mean, rel=1e-12)
    assert law.variance == pytest.approx(float(v), rel=1e-12)


@pytest.mark.parametrize("role, name, mean, n", LAWS)
def test_sampler_matches_law(role, name, mean, n):
    law = make_law(name, mean, n, role=role, what="mean")
    size = 200_000
    x = draws(law, size, seed=11)
    # moments: mean within Z SE (sd / sqrt(n)); variance within Z SE (sqrt((m4 - s^4) / n))
    assert_within_se(x.mean(), law.mean, np.sqrt(law.variance / size) if law.variance > 0
                     else 1e-12, f"{name}({mean}) mean")
    if law.variance > 0:
        c = x - x.mean()
        m4 = float((c ** 4).mean())
        assert_within_se(x.var(ddof=1), law.variance, np.sqrt(max(m4 - law.variance ** 2, 1e-30)
                                                              / size), f"{name}({mean}) variance")
    else:
        assert np.all(x == law.mean)
        return
    # chi-square on cells of expected count >= 5 (the rest pooled into the two tails)
    lo, hi = int(x.min()), int(x.max())
    k = np.arange(lo, hi + 1)
    expected = size * exact_pmf(law, k)
    expected[0] += size * (exact_pmf(law, np.arange(0, lo)).sum() if lo > 0 else 0.0)
    expected[-1] = size - expected[:-1].sum()
    counts = np.bincount(x - lo, minlength=k.size).astype(np.float64)
    # merge cells from both ends until each has expected >= 5
    cells_c, cells_e, acc_c, acc_e = [], [], 0.0, 0.0
    for c, e in zip(counts, expected):
        acc_c += c
        acc_e += e
        if acc_e >= 5:
            cells_c.append(acc_c)
            cells_e.append(acc_e)
            acc_c = acc_e = 0.0
    if acc_e > 0:
        cells_c[-1] += acc_c
        cells_e[-1] += acc_e
    assert len(cells_c) >= 2
    p = sps.chisquare(cells_c, np.array(cells_e) * sum(cells_c) / sum(cells_e)).pvalue
    assert p > ALPHA, (name, mean, p)


def test_poisson_piece_split_is_exact_by_additivity():
    law = make_law("poisson", 2.5 * POISSON_PIECE, role="arrival", what="mean")
    assert law.pieces == 3
    assert law.variance == pytest.approx(law.mean)


def test_degenerate_laws():
    assert np.all(draws(make_law("poisson", 0.0, role="arrival", what="m"), 100, 1) == 0)
    assert np.all(draws(make_law("bernoulli", 1.0, role="service", what="m"), 100, 1) == 1)
    assert np.all(draws(make_law("binomial", 5.0, 5, role="service", what="m"), 100, 1) == 5)


@pytest.mark.parametrize("args, message", [
    (("bernoulli", 1.2, None, "arrival"), "cannot carry the mean"),
    (("bernoulli", 3.0, None, "service"), "cannot carry the mean"),
    (("binomial", 8.0, 5, "service"), "cannot carry the mean"),
    (("binomial", 1.0, None, "arrival"), "arrival_n=None"),
    (("geometric", 1.0, None, "arrival"), "arrival_dist='geometric' is unknown"),
    (("gamma", 1.0, None, "service"), "service_dist='gamma' is unknown"),
    (("poisson", -0.5, None, "service"), "must be a finite mean >= 0"),
])
def test_bad_laws_are_refused(args, message):
    name, mean, n, role = args
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_law(name, mean, n, role=role, what="mean")
