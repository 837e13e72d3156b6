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
