"""E[max of independent Gamma(p_i, 1)]: closed forms and a Monte Carlo check."""
import numpy as np
import pytest

from sim.core.jobdelay import GL_W, GL_X, expected_job_delay, expected_max_gamma_wide, harmonic, log_cdf_product
from tests.helpers import assert_within_se


@pytest.mark.parametrize("m", [1, 2, 5, 40, 400])
def test_all_at_position_one_is_harmonic(m):
    assert expected_job_delay([1] * m) == pytest.approx(sum(1 / j for j in range(1, m + 1)), abs=1e-13)


@pytest.mark.parametrize("p", [1, 2, 3, 10, 50])
def test_single_queue_is_its_position(p):
    assert expected_job_delay([p]) == pytest.approx(p, abs=1e-10)


def test_two_queues_closed_form():
    # E[max(Gamma(2,1), Exp(1))] = 2 + 1 - (1/2 + 1/4) = 2.25
    assert expected_job_delay([2, 1]) == pytest.approx(2.25, abs=1e-12)
    # E[max of two Gamma(2,1)] = 4 - E[min] ; E[min] = int (e^-t (1+t))^2 dt = 1/2 + 1/2 + 1/4 = 1.25
    assert expected_job_delay([2, 2]) == pytest.approx(4 - 1.25, abs=1e-12)


def test_monte_carlo():
    pos = [1, 1, 2, 3, 3, 5, 8]
    rng = np.random.default_rng(7)
    x = np.maximum.reduce([rng.gamma(p, 1.0, size=400_000) for p in pos])
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert abs(expected_job_delay(pos) - x.mean()) <= 4 * se


def test_bad_positions():
    with pytest.raises(ValueError, match="positions"):
        expected_job_delay([0, 1])
    assert expected_job_delay([]) == 0.0
    assert harmonic(0) == 0.0


def test_wide_expected_max_gamma_agrees_with_jobdelay():
    # the end-of-run correction of the k-task agent engine uses a windowed quadrature for high
    # positions; it must equal expected_max_gamma (itself checked against closed forms and Monte Carlo)
    rng = np.random.default_rng(9)
    for _ in range(150):
        top = int(rng.integers(1, 60))
        pos = rng.integers(1, top + 1, size=int(rng.integers(1, 17)))
        ps, cs = np.unique(pos, return_counts=True)
        got = expected_max_gamma_wide(ps.astype(np.int64), cs.astype(np.int64), GL_X, GL_W)
        assert got == pytest.approx(expected_job_delay(pos), rel=1e-12, abs=1e-12), pos
    # far out (where jobdelay is too slow): a single queue is its position, and Monte Carlo
    assert expected_max_gamma_wide(np.array([3000]), np.array([1]), GL_X, GL_W) == \
        pytest.approx(3000.0, rel=1e-12)
    pos = np.array([400, 380, 380, 300, 5])
    x = np.maximum.reduce([rng.gamma(p, 1.0, size=100_000) for p in pos])
    ps, cs = np.unique(pos, return_counts=True)
    assert_within_se(expected_max_gamma_wide(ps, cs, GL_X, GL_W), x.mean(),
                  x.std(ddof=1) / np.sqrt(x.size), what="Monte Carlo")


def test_log_cdf_product_against_scipy():
    # (sum_i c_i log P(Gamma(p_i) <= x), sum_i c_i P(Gamma(p_i) > x)) over the first nd shapes
    from scipy.special import gammainc, gammaincc

    ps = np.array([1, 3, 7, 12, 0], dtype=np.int64)  # the last entry is beyond nd
    cs = np.array([2, 1, 3, 1, 5], dtype=np.int64)
    for x in (2.0, 9.5, 35.0, 80.0):
        logp, tail = log_cdf_product(ps, cs, 4, x)
        assert logp == pytest.approx(float(np.dot(cs[:4], np.log(gammainc(ps[:4], x)))),
                                     rel=1e-9, abs=1e-14)
        assert tail == pytest.approx(float(np.dot(cs[:4], gammaincc(ps[:4], x))), rel=1e-9,
                                     abs=1e-14)
    assert log_cdf_product(ps, cs, 4, 0.0) == (-np.inf, 7.0)


# ------------------------------------------------------------------------------------------
# the shared grid of the simulation loops (expected_max_gamma_table)
# ------------------------------------------------------------------------------------------
def _table_value(counts):
    from sim.core.jobdelay import delay_table, expected_max_gamma_table

    counts = np.asarray(counts, dtype=np.int64)
    return expected_max_gamma_table(counts, counts.size - 1, *delay_table())


def test_table_closed_forms():
    from sim.core.jobdelay import expected_job_delay_table

    for m in (1, 2, 40, 400, 5000):
        assert _table_value([0, m]) == pytest.approx(harmonic(m), abs=1e-12)
    for p in (1, 2, 3, 10, 50, 64):
        assert _table_value([0] * p + [1]) == pytest.approx(p, abs=1e-11)
    assert _table_value([0, 1, 1]) == pytest.approx(2.25, abs=1e-12)
    assert _table_value([0, 0, 2]) == pytest.approx(2.75, abs=1e-12)
    # E[max(Gamma(3), Exp(1))] = 3 + 1 - E[min] = 4 - int e^-2t (1 + t + t^2/2) dt = 4 - 7/8
    assert _table_value([0, 1, 0, 1]) == pytest.approx(4 - 7 / 8, abs=1e-12)
    assert expected_job_delay_table([3, 1]) == pytest.approx(4 - 7 / 8, abs=1e-12)


def _signatures(rng, n):
    out = []
    for i in range(n):
        kind = i % 5
        if kind == 0:  # batch-sampling-like: a few adjacent positions, counts up to hundreds
            p0, w = int(rng.integers(1, 20)), int(rng.integers(1, 8))
            cnt = np.zeros(p0 + w, np.int64)
            cnt[p0:] = rng.multinomial(int(rng.integers(2, 400)), rng.dirichlet(np.ones(w)))
        elif kind == 1:  # a handful of queues anywhere up to the table's top
            cnt = np.bincount(rng.integers(1, int(rng.integers(2, 65)), size=int(rng.integers(1, 30))))
        elif kind == 2:  # positions 1 and 2 (batch-filling-like), large counts
            cnt = np.array([0, rng.integers(1, 3000), rng.integers(0, 3000)])
        elif kind == 3:  # many at one deep position, some at 1
            p = int(rng.integers(2, 65))
            cnt = np.zeros(p + 1, np.int64)
            cnt[p] = rng.integers(1, 3000)
            cnt[1] = rng.integers(0, 300)
        else:  # three scattered positions
            cnt = np.zeros(65, np.int64)
            cnt[rng.integers(1, 65, size=3)] = rng.integers(1, 300, size=3)
            cnt = np.trim_zeros(cnt, "b")
        out.append(cnt.astype(np.int64))
    return out


def test_table_agrees_with_the_quadrature_per_signature():
    # expected_max_gamma (unit panels, ~1e-12 absolute) on 500 signatures of every shape the
    # engine produces; the difference is that of the two quadratures
    from sim.core.jobdelay import expected_max_gamma

    rng = np.random.default_rng(36)
    worst = 0.0
    for cnt in _signatures(rng, 500):
        got = _table_value(cnt)
        assert got >= 0.0, cnt  # inside the table
        worst = max(worst, abs(got - expected_max_gamma(cnt, GL_X, GL_W)))
    assert worst < 2e-12, worst


@pytest.mark.parametrize("sig", [
    {2: 10, 3: 90, 4: 100, 5: 45, 6: 12, 7: 3},  # batch-sampling at N = 10**7, d = 2
    {1: 4, 2: 256},                           # batch-filling on the path
    {1: 31, 59: 2691},
    {26: 74, 28: 220, 50: 23},
    {1: 1, 64: 1},
    {5: 1, 6: 3000},
])
def test_table_against_mpmath(sig):
    # 30-digit quadrature of int_0^inf (1 - prod_p P(Gamma(p) <= t)**c_p) dt
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 30
    top = max(sig)
    counts = np.zeros(top + 1, np.int64)
    for p, c in sig.items():
        counts[p] = c

    def f(t):
        return 1 - mp.fprod([mp.gammainc(p, 0, t, regularized=True) ** c for p, c in sig.items()])

    pts = sorted({0, *(top * q for q in (0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5))}) + [mp.inf]
    ref = mp.quad(f, pts)
    assert abs(_table_value(counts) - ref) < 1e-11, (float(ref), _table_value(counts))


def test_table_monte_carlo():
    # simulated job delays: max of independent Gamma(p, 1) draws
    sig = {2: 10, 3: 90, 4: 100, 5: 45, 6: 12, 7: 3}
    rng = np.random.default_rng(37)
    x = np.zeros(200_000)
    for p, c in sig.items():
        x = np.maximum(x, rng.gamma(p, 1.0, size=(c, x.size)).max(axis=0))
    counts = np.zeros(8, np.int64)
    for p, c in sig.items():
        counts[p] = c
    assert_within_se(_table_value(counts), x.mean(), x.std(ddof=1) / np.sqrt(x.size),
                     what="Monte Carlo")


def test_table_declines_what_it_does_not_cover():
    # a position above the table's top: -1 (the engine falls back to expected_max_gamma), and
    # expected_job_delay_table does so itself
    from sim.core.jobdelay import TABLE_MAX_POS, empty_delay_table, expected_job_delay_table, expected_max_gamma_table

    counts = np.zeros(TABLE_MAX_POS + 2, np.int64)
    counts[1] = 3
    counts[TABLE_MAX_POS + 1] = 1
    assert _table_value(counts) == -1.0
    assert expected_job_delay_table([TABLE_MAX_POS + 1, 1, 1, 1]) == pytest.approx(
        expected_job_delay([TABLE_MAX_POS + 1, 1, 1, 1]), abs=1e-15)
    assert expected_max_gamma_table(np.array([0, 2]), 1, *empty_delay_table()) == -1.0
    with pytest.raises(ValueError, match="positions"):
        expected_job_delay_table([0, 1])
    assert expected_job_delay_table([]) == 0.0
