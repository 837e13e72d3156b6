"""E[max of independent Gamma(p_i, 1)]: closed forms and a Monte Carlo check."""
import numpy as np
import pytest

from sim.core.jobdelay import expected_job_delay, harmonic


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
