"""Shared checks of the simulator tests: a kernel's RNG state, a chi-square of draws, a result
row's keys and types, reproducibility by seed, refused input, the M/M/1 closed forms, finite
differences of a drift, and a p99 approaching its mean field. The statistical ones use
:func:`tests.helpers.assert_within_se` and its tail ``ALPHA``."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tests.helpers import ALPHA, assert_within_se


def new_state(seed):
    """A kernel's RNG state (four uint64 words) from ``seed``."""
    return np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)


def assert_distribution(counts, probs):
    """Chi-square goodness of fit of ``counts`` on the cells with positive probability (p-value
    above ``ALPHA``); zero-probability cells must be empty. With one positive cell the empty
    cells are the whole check."""
    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    assert np.all(counts[probs == 0] == 0), (counts, probs)
    pos = probs > 0
    if pos.sum() < 2:
        return
    expected = counts.sum() * probs[pos] / probs[pos].sum()
    p = sps.chisquare(counts[pos], expected).pvalue
    assert p > ALPHA, (counts, expected, p)


def assert_plain_row(out: dict, keys, *, max_level: int = 16, ci_method: str = "overlapping batch means"):
    """A simulator's result row: exactly ``keys`` in order, the tails lists of ``max_level``
    floats, the counts ints, ``ci_method`` a string starting with ``ci_method``, every other
    value a float."""
    assert tuple(out) == tuple(keys)
    for key, value in out.items():
        if key in ("tail", "tail_se"):
            assert type(value) is list and len(value) == max_level
            assert all(type(x) is float for x in value)
        elif key in ("n_jobs", "events_run"):
            assert type(value) is int
        elif key == "ci_method":
            assert type(value) is str and value.startswith(ci_method), value
        else:
            assert type(value) is float, key


def assert_refused(*cases):
    """Each ``(call, pattern)``: ``call()`` raises ``ValueError`` whose message matches
    ``pattern``."""
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


def assert_refused_naming_the_key(func, kwargs: dict, key: str, value):
    """``func(**kwargs)`` with ``kwargs[key]`` set to ``value`` raises ``ValueError`` naming
    ``key``."""
    assert_refused((lambda: func(**{**kwargs, key: value}), key))


def task_factory(**defaults):
    """A function making a task dict: ``defaults`` updated by its keyword arguments."""
    def task(**kw):
        return {**defaults, **kw}
    return task


def assert_seed_decides(run_task, task):
    """``run_task`` of ``task(seed=7)`` twice gives bitwise the same row (floats compared
    exactly); with seed 8 the mean response and the tail differ."""
    a = run_task(task(seed=7))
    b = run_task(task(seed=7))
    c = run_task(task(seed=8))
    assert a == b
    assert a["mean_response"] != c["mean_response"] and a["tail"] != c["tail"]


def assert_mm1(r, lam):
    """A simulator's result under random routing with single tasks, Exp(1) service: every
    server an M/M/1 queue of load ``lam`` (response, wait, P(wait), queue, s_1..s_6 within
    4 SE), and no messages."""
    assert_within_se(r.mean_response, 1 / (1 - lam), r.mean_response_se, what="mean_response")
    assert_within_se(r.mean_wait, lam / (1 - lam), r.mean_wait_se, what="mean_wait")
    assert_within_se(r.prob_wait, lam, r.prob_wait_se, what="prob_wait")
    assert_within_se(r.mean_queue, lam / (1 - lam), r.mean_queue_se, what="mean_queue")
    for i in range(1, 7):
        assert_within_se(r.tail[i - 1], lam**i, r.tail_se[i - 1], what=f"s_{i}")
    assert r.messages_per_job == 0.0


def fd_jacobian(f, x, h=1e-6):
    """The Jacobian of ``f`` at ``x`` by central differences of step ``h``."""
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        cols.append((f(x + e) - f(x - e)) / (2 * h))
    return np.array(cols).T


def fd_hessian_contract(f, x, w, h=1e-4):
    """``B : W = sum_m mu_m D^2 f[u_m, u_m]`` over the eigenpairs ``(mu_m, u_m)`` of the
    symmetric ``w``, each second derivative by central differences of step ``h``."""
    mu, u = np.linalg.eigh(w)
    out = np.zeros_like(x)
    f0 = f(x)
    for m in range(mu.size):
        out += mu[m] * (f(x + h * u[:, m]) - 2 * f0 + f(x - h * u[:, m])) / h**2
    return out


def assert_p99_approaches_the_mean_field(task: dict, events: dict, gaps: dict, seed: int = 11):
    """The occupancy engine's p99 response time at each N of ``events`` (N -> events) is the mean
    field's (of ``task`` with N = 1000) within 4 SE plus the measured gap ``gaps[N] = (gap, its
    SE)`` (an allowance of ``|gap| + 2 SE``); at N = 100 the finite-N gap must be resolved
    (more than 4 SE above the limit). Returns N -> (gap, SE) as measured here."""
    import sim

    mf = sim.run({"engine": "meanfield", "n_servers": 1000, **task, "responses": True})
    truth = mf["response_p99"]
    measured = {}
    for n, n_events in events.items():
        run = sim.run({"engine": "occupancy", "n_servers": n, **task, "events": n_events,
                       "seed": seed, "responses": True})
        gap, gap_se = gaps[n]
        assert_within_se(run["response_p99"], truth, run["response_p99_se"], f"p99 at N={n}",
                         allowance=abs(gap) + 2 * gap_se)
        measured[n] = (run["response_p99"] - truth, run["response_p99_se"])
    assert measured[100][0] > 4 * measured[100][1], measured
    return measured
