"""Response-time distributions (sim/core/responses.py, docs/responses.md): the mixture maths,
the recording in the agent (sim.dispatch.agent for single-task jobs, sim.dispatch.agent_jobs) and
occupancy engines, and the mean field.

Statistical checks use ``assert_within_se`` (4 estimated SEs). No finite-N allowance is needed
where one appears: random routing with k = 1 makes every server an M/M/1 queue at any N, and
the engines compared with each other simulate the same finite-N system.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import sim
from sim.core import responses as R
from sim.dispatch import agent, agent_jobs, occupancy
from tests.helpers import assert_engines_agree, assert_within_se

Q = np.array(R.QUANTILES)


# ---------------------------------------------------------------------------------------------
# the mixture maths (deterministic)
# ---------------------------------------------------------------------------------------------
def test_mixture_of_one_gamma_and_of_a_max():
    g3 = R.Mixture.of_positions([0.0, 0.0, 1.0])  # Gamma(3, 1)
    for q in R.QUANTILES:
        assert g3.quantile(q) == pytest.approx(stats.gamma.ppf(q, 3), rel=1e-9)
    t = np.array([0.5, 2.0, 7.0, 20.0])
    assert np.allclose(g3.ccdf(t), stats.gamma.sf(t, 3), rtol=1e-10, atol=0)
    # max of Gamma(1) and two Gamma(2): CDF F1 * F2**2; mixed 1:3 with Gamma(1)
    mix = R.Mixture([1.0, 3.0], [([1, 2], [1, 2]), ([1], [1])])
    cdf = (stats.gamma.cdf(t, 1) * stats.gamma.cdf(t, 2) ** 2 + 3 * stats.gamma.cdf(t, 1)) / 4
    assert np.allclose(mix.ccdf(t), 1 - cdf, rtol=1e-10, atol=1e-15)
    assert mix.mean() == pytest.approx(
        0.25 * float(np.trapezoid(1 - stats.gamma.cdf(np.linspace(0, 60, 600001), 1)
                                  * stats.gamma.cdf(np.linspace(0, 60, 600001), 2) ** 2,
                                  np.linspace(0, 60, 600001))) + 0.75, rel=1e-8)


def test_grid_path_matches_scipy():
    tcnt = np.zeros(60, dtype=np.int64)
    tcnt[[3, 40, 41]] = [2, 1, 5]  # deep positions: beyond SIG_MAX_POS
    out = np.zeros(R.RESPONSE_GRID.size)
    ps, cs = np.zeros(8, np.int64), np.zeros(8, np.int64)
    R.grid_add(tcnt, 41, R.RESPONSE_GRID, ps, cs, out)
    g = R.RESPONSE_GRID
    want = stats.gamma.cdf(g, 3) ** 2 * stats.gamma.cdf(g, 40) * stats.gamma.cdf(g, 41) ** 5
    assert np.allclose(out, want, rtol=1e-9, atol=1e-14)


def test_signature_table_numbers_signatures_once():
    rec = R.new_recorder(4, k=3, max_sig=2)
    tcnt = np.zeros(10, dtype=np.int64)
    args = (rec.sig_keys, rec.sig_pos, rec.sig_slot_id, rec.sig_counts, rec.n_sig, rec.key0)
    tcnt[[1, 2]] = [1, 2]
    assert R.sig_id(tcnt, 2, *args) == 0
    assert R.sig_id(tcnt, 2, *args) == 0
    tcnt[:] = 0
    tcnt[2] = 3
    assert R.sig_id(tcnt, 2, *args) == 1
    tcnt[:] = 0
    tcnt[1] = 3
    assert R.sig_id(tcnt, 1, *args) == -1  # table full: the grid path takes it
    assert list(rec.sig_counts[0, :3]) == [0, 1, 2] and list(rec.sig_counts[1, :3]) == [0, 0, 3]


# ---------------------------------------------------------------------------------------------
# simulation: M/M/1, means, engines, and nothing else changes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["occupancy", "agent", "single"])
def test_mm1_response_is_exponential(engine):
    """Random routing (pod d = 1 on the single-task agent engine), k = 1: each server is M/M/1,
    so T ~ Exp(1 - lam) at any N."""
    lam = 0.5
    if engine == "single":
        r = agent.simulate(50, lam, "pod", d=1, events=400_000, seed=3, responses=True)
    else:
        f = occupancy.simulate if engine == "occupancy" else agent_jobs.simulate
        r = f(50, lam, "random", k=1, events=400_000, seed=3, responses=True)
    d = r.responses
    truth = -np.log(1 - Q) / (1 - lam)
    for name, est, se, tr in zip(R.QUANTILE_NAMES, d.quantiles, d.quantiles_se, truth):
        assert_within_se(est, tr, se, f"{engine} {name}")
    for t in (1.0, 5.0, 10.0):
        i = int(np.argmin(abs(d.grid - t)))
        assert_within_se(d.ccdf[i], math.exp(-(1 - lam) * d.grid[i]), d.ccdf_se[i],
                         f"{engine} P(T > {d.grid[i]:g})")
    assert d.n_jobs == r.n_jobs and d.grid_only_fraction == 0.0


@pytest.mark.parametrize("policy,k", [("pod", 1), ("batch_filling", 4)])
def test_mean_of_distribution_is_the_measured_mean(policy, k):
    # occupancy: mean_response is E[T | positions] averaged over the same jobs, so the mean of
    # the recorded mixture must equal it up to quadrature error
    r = occupancy.simulate(100, 0.9, policy, k=k, d=2, events=300_000, seed=5, responses=True)
    assert r.responses.n_jobs == r.n_jobs
    assert r.responses.mixture.mean() == pytest.approx(r.mean_response, rel=1e-9)
    # agent: the response is measured per job; the mixture's mean is its conditional
    # expectation given the positions, so Var(measured - mixture) <= Var(measured): the
    # measured mean's SE bounds the SE of the difference
    pol = "batch_filling"  # pod is batch-filling with k = 1 in this engine
    a = agent_jobs.simulate(100, 0.9, pol, k=k, d=2, events=600_000, seed=5, responses=True)
    assert a.responses.n_jobs == a.n_jobs
    assert_within_se(a.responses.mixture.mean(), a.mean_response, a.mean_response_se,
                     f"agent {policy}: mean of the distribution vs measured mean")
    if k == 1:  # the single-task agent engine, likewise
        s = agent.simulate(100, 0.9, "pod", d=2, events=600_000, seed=5, responses=True)
        assert s.responses.n_jobs == s.n_jobs
        assert_within_se(s.responses.mixture.mean(), s.mean_response, s.mean_response_se,
                         "single-task agent pod: mean of the distribution vs measured mean")


@pytest.mark.parametrize("policy,k", [("pod", 1), ("batch_filling", 4)])
def test_agent_and_occupancy_agree(policy, k):
    o = occupancy.simulate(50, 0.85, policy, k=k, d=2, events=600_000, seed=11, responses=True)
    a = agent_jobs.simulate(50, 0.85, "batch_filling", k=k, d=2, events=1_000_000, seed=12,
                          responses=True)
    for name, x, sx, y, sy in zip(R.QUANTILE_NAMES, a.responses.quantiles,
                                  a.responses.quantiles_se, o.responses.quantiles,
                                  o.responses.quantiles_se):
        assert_engines_agree(x, sx, y, sy, f"{policy} k={k} {name}: agent vs occupancy")


def test_single_task_agent_and_occupancy_agree():
    """sim.dispatch.agent (pod d = 2) against the occupancy engine: the same finite-N chain."""
    o = occupancy.simulate(50, 0.85, "pod", d=2, events=600_000, seed=11, responses=True)
    a = agent.simulate(50, 0.85, "pod", d=2, events=1_000_000, seed=13, responses=True)
    assert a.responses.grid_only_fraction == 0.0
    for name, x, sx, y, sy in zip(R.QUANTILE_NAMES, a.responses.quantiles,
                                  a.responses.quantiles_se, o.responses.quantiles,
                                  o.responses.quantiles_se):
        assert_engines_agree(x, sx, y, sy, f"pod d=2 {name}: single-task agent vs occupancy")
    for t in (1.0, 3.0, 6.0):
        i = int(np.argmin(abs(a.responses.grid - t)))
        assert_engines_agree(a.responses.ccdf[i], a.responses.ccdf_se[i], o.responses.ccdf[i],
                             o.responses.ccdf_se[i], f"pod d=2 P(T > {t:g}): agent vs occupancy")


def assert_recording_changes_nothing(off, on):
    """``on`` (a run recording responses) has them, ``off`` (the same run without) not, and
    every other field is bitwise the same (``ci_method`` may add to its text)."""
    assert off.responses is None and on.responses is not None
    assert on.responses.n_jobs == on.n_jobs
    for field in off._fields:
        if field in ("responses", "ci_method"):
            continue
        assert np.array_equal(np.asarray(getattr(off, field)), np.asarray(getattr(on, field))), field
    assert on.ci_method.startswith(off.ci_method)


# one policy in the fast suite; each further one compiles its own recording loop (2-3 s each
# with an empty numba cache), so they run with -m slow
@pytest.mark.parametrize("policy,d,lam", [("pod", 2, 0.9), pytest.param("jsq", 1, 0.9, marks=pytest.mark.slow),
                                          pytest.param("random", 1, 0.9, marks=pytest.mark.slow)])
def test_single_task_recording_changes_no_other_estimate(policy, d, lam):
    # random at lam = 0.9 grows the rings (queues beyond 8 tasks) during the run
    assert_recording_changes_nothing(
        agent.simulate(40, lam, policy, d=d, events=100_000, seed=2),
        agent.simulate(40, lam, policy, d=d, events=100_000, seed=2, responses=True))
    with pytest.raises(ValueError, match="responses"):
        agent.simulate(40, lam, policy, d=d, events=10_000, seed=2, responses=True,
                       service_rates=[1.0] * 20 + [2.0] * 20)
    with pytest.raises(ValueError, match="responses"):
        agent.simulate(40, lam, policy, d=d, events=10_000, seed=2, responses=1)


def test_single_task_kernel_deep_positions_go_to_the_grid():
    """With room for 3 exact positions only, deeper arrivals are recorded on the grid: the
    exact counts of positions 1..3 are those of a full recorder, and the grid sums equal the
    Gamma CDFs of the deeper positions that the full recorder counted (random routing at
    lam = 0.95: queues beyond 8 tasks grow the rings mid-run)."""
    from sim.core.rng import seed_state, threshold
    from sim.core.windows import window_bounds
    from sim.dispatch import _agent_kernel as K

    def run(max_sig):
        n, lam = 20, 0.95
        q = np.zeros(n, dtype=np.int64)
        buf = np.full((n, 8), -1, dtype=np.int32)
        bounds = window_bounds(100_000, 20)
        w = bounds.size - 1
        outs = [np.zeros(w, np.int64), np.zeros(w), np.zeros(w, np.int64), np.zeros(w),
                np.zeros(w, np.int64), np.zeros(w, np.int64), np.zeros(w, np.int64),
                np.zeros((w, 8), np.int64), np.zeros(w, np.int64)]
        rec = R.new_recorder(w, 1, max_sig=max_sig)
        b = K.agent_kernel(K.RANDOM, 1, False, threshold(lam / (1 + lam)), False,
                           np.zeros(1, np.uint64), np.zeros(1, np.int64), q, buf,
                           np.zeros(n, dtype=np.int64), bounds, seed_state(9), *outs, rec)
        return b.shape[1], outs, rec

    c_full, outs_full, full = run(R.MAX_SIG_K1)
    c_small, outs_small, small = run(3)
    assert c_full > 8 and c_full == c_small
    for x, y in zip(outs_full, outs_small):
        assert np.array_equal(x, y)
    assert full.w_over.sum() == 0 and full.w_sig[:, R.MAX_SIG_K1 - 1].sum() == 0
    assert np.array_equal(small.w_sig, full.w_sig[:, :3])
    assert np.array_equal(small.w_over, full.w_sig[:, 3:].sum(axis=1))
    assert small.w_over.sum() > 100
    p = np.arange(4, R.MAX_SIG_K1 + 1)
    want = full.w_sig[:, 3:].astype(float) @ stats.gamma.cdf(R.RESPONSE_GRID[None, :], p[:, None])
    assert np.allclose(small.w_grid, want, rtol=1e-9, atol=1e-9)
    assert np.array_equal(full.w_sig.sum(axis=1), outs_full[4])  # every arrival, once


@pytest.mark.parametrize("engine", ["occupancy", "agent"])
@pytest.mark.parametrize("policy,lam", [("batch_filling", 0.8),  # random: its own loops (-m slow)
                                        pytest.param("random", 0.9, marks=pytest.mark.slow)])
def test_recording_changes_no_other_estimate(engine, policy, lam):
    # random at lam = 0.9 grows the agent engine's rings mid-commit (queues beyond 12 tasks)
    # and puts jobs on the grid-only path (positions beyond 32)
    f = occupancy.simulate if engine == "occupancy" else agent_jobs.simulate
    assert_recording_changes_nothing(f(40, lam, policy, k=3, d=2, events=100_000, seed=2),
                                     f(40, lam, policy, k=3, d=2, events=100_000, seed=2, responses=True))


def test_quantiles_of_summary_are_roots_of_its_mixture():
    """Random routing with k = 4 at high load: many signatures, some jobs on the grid only;
    the vectorised bisection agrees with brentq on the pooled mixture."""
    r = occupancy.simulate(100, 0.8, "random", k=4, events=100_000, seed=1, responses=True)
    d = r.responses
    assert 0.0 < d.grid_only_fraction < 1.0
    for q, est in zip(R.QUANTILES, d.quantiles):
        assert est == pytest.approx(d.mixture.quantile(q), rel=1e-9)
    assert np.allclose(d.ccdf, d.mixture.ccdf(d.grid), rtol=1e-9, atol=1e-13)
    assert np.all(np.diff(d.ccdf) <= 1e-15) and d.ccdf[0] == pytest.approx(1.0)


def test_run_task_row_has_the_declared_columns():
    from sim.registry import RESULTS

    base = {"engine": "occupancy", "policy": "pod", "n_servers": 30, "lam": 0.7, "d": 2,
            "events": 50_000, "seed": 1}
    row = sim.run({**base, "responses": True})
    for c in R.RESPONSE_COLUMNS:
        assert c in RESULTS and c in row
    assert len(row["response_ccdf"]) == len(row["response_grid"]) == R.RESPONSE_GRID.size
    assert row["response_p50"] < row["response_p90"] < row["response_p99"] < row["response_p999"]
    plain = sim.run(base)
    assert not any(c in plain for c in R.RESPONSE_COLUMNS)
    # single-task pod on the agent engine records on the single-task engine (sim.dispatch.agent)
    arow = sim.run({**base, "engine": "agent", "responses": True})
    assert arow["response_p999"] is not None
    for key in ("wall_time", "rel_halfwidth", "runs"):  # added by sim.run
        arow.pop(key, None)
    direct = agent.run_task({**base, "engine": "agent", "responses": True})
    # sim.run adds its run-length check to the engine's ci_method (here: too short)
    assert arow.pop("ci_method").startswith(direct.pop("ci_method"))
    assert arow == direct
    with pytest.raises(ValueError, match="responses"):
        sim.run({**base, "engine": "agent", "responses": True, "service_rates": [1.0] * 30})
    with pytest.raises(ValueError, match="responses"):
        sim.run({**base, "responses": "yes"})


def test_plan_passes_run_responses_to_the_simulations_and_the_mean_field():
    from pipeline.plan import make_plan
    from pipeline.run import to_plain
    from tests.helpers import compose

    plan = make_plan(to_plain(compose(["output_dir=/tmp/unused", "run.responses=true",
                                       "engines=[agent,occupancy,meanfield]"])))
    for t in plan.tasks:  # meanfield rows carry the exact law (docs/responses.md)
        assert t.get("responses") is True
    plan = make_plan(to_plain(compose(["output_dir=/tmp/unused", "run.responses=true",
                                       "policies=[jiq]", "+params.r=10",
                                       "engines=[agent,occupancy,meanfield]"])))
    for t in plan.tasks:  # both JIQ simulators record, and the JIQ mean field has the law
        assert t.get("responses") is True
    plan = make_plan(to_plain(compose(["output_dir=/tmp/unused"])))
    assert all("responses" not in t for t in plan.tasks)


# ---------------------------------------------------------------------------------------------
# mean field
# ---------------------------------------------------------------------------------------------
def test_meanfield_pod_and_random():
    from sim.dispatch.meanfield.pod import pod_mean_response, response_law

    m = response_law("random", 0.6)
    for q, est in zip(R.QUANTILES, [m.quantile(q) for q in R.QUANTILES]):
        assert est == pytest.approx(-math.log(1 - q) / 0.4, rel=1e-9)
    pod = response_law("pod", 0.9, 3)
    assert pod.total == pytest.approx(1.0, abs=1e-15)
    assert pod.mean() == pytest.approx(pod_mean_response(0.9, 3), rel=1e-12)
    assert response_law("jsq", 0.9).quantile(0.5) == pytest.approx(math.log(2), rel=1e-9)


def test_meanfield_batch_filling_law():
    from sim.dispatch.meanfield import batch_filling as bm
    from sim.dispatch.meanfield.pod import response_law as pod_response_law

    one = bm.response_law(0.8, 1, 2)  # k = 1: power-of-2
    ref = pod_response_law("pod", 0.8, 2)
    for q in R.QUANTILES:
        assert one.quantile(q) == pytest.approx(ref.quantile(q), rel=1e-8)
    s = bm.fixed_point(0.7, 3, 2)
    mix = bm.response_law(0.7, 3, 2, s)
    assert mix.total == pytest.approx(1.0, abs=1e-12)
    mc, mc_se = bm.mean_job_delay(s, 3, 2, n_jobs=20_000, seed=3)  # water-filling by sampling
    assert_within_se(mix.mean(), mc, mc_se, "exact mean-field E[T] vs Monte Carlo")


# ---------------------------------------------------------------------------------------------
# JIQ (agent and occupancy engines, mean field)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy,d,z", [("jiq_pod", 2, 0),  # jiq_threshold compiles its own loop
                                        pytest.param("jiq_threshold", 1, 2, marks=pytest.mark.slow)])
def test_jiq_agent_records_positions(policy, d, z):
    """Recording changes nothing else (all fields bitwise), counts every task once, and the
    mixture's mean agrees with the measured mean response within its SE (as for the dispatch
    agent engine: the mixture is the measured response's conditional expectation)."""
    from sim.jiq import agent as jagent

    off = jagent.simulate(200, 0.9, policy, r=10, d=d, z=z, events=300_000, seed=4)
    on = jagent.simulate(200, 0.9, policy, r=10, d=d, z=z, events=300_000, seed=4,
                         responses=True)
    assert off.responses is None and on.responses is not None
    for field in off._fields:
        if field in ("responses", "ci_method"):
            continue
        assert np.array_equal(np.asarray(getattr(off, field)), np.asarray(getattr(on, field))), field
    assert on.ci_method.startswith(off.ci_method)
    dist = on.responses
    assert dist.n_jobs == on.n_jobs and dist.grid_only_fraction == 0.0
    assert_within_se(dist.mixture.mean(), on.mean_response, on.mean_response_se,
                     f"JIQ agent {policy}: mean of the distribution vs measured mean")


@pytest.mark.slow  # fast suite under 5 min cold: see README
def test_jiq_agent_and_occupancy_agree():
    """jiq_pod, N = 200, r = 10: the JIQ agent and occupancy engines simulate the same
    finite-N chain, so their quantiles agree within SEs."""
    from sim.jiq import agent as jagent
    from sim.jiq import occupancy as jocc

    a = jagent.simulate(200, 0.9, "jiq_pod", r=10, d=2, events=1_000_000, seed=21,
                        responses=True)
    o = jocc.simulate(200, 0.9, "jiq_pod", r=10, d=2, events=600_000, seed=22, responses=True)
    for name, x, sx, y, sy in zip(R.QUANTILE_NAMES, a.responses.quantiles,
                                  a.responses.quantiles_se, o.responses.quantiles,
                                  o.responses.quantiles_se):
        assert_engines_agree(x, sx, y, sy, f"jiq_pod {name}: JIQ agent vs occupancy")
    row = sim.run({"engine": "agent", "policy": "jiq", "n_servers": 50, "lam": 0.8, "r": 10,
                   "events": 50_000, "seed": 1, "responses": True})
    assert all(row[c] is not None for c in R.RESPONSE_COLUMNS)


def test_jiq_occupancy_records_positions():
    from sim.jiq import occupancy as jocc

    off = jocc.simulate(200, 0.8, "jiq_pod", r=10, d=2, events=200_000, seed=4)
    on = jocc.simulate(200, 0.8, "jiq_pod", r=10, d=2, events=200_000, seed=4, responses=True)
    assert off.mean_response == on.mean_response and off.p0 == on.p0  # nothing else changes
    d = on.responses
    assert d.n_jobs == on.n_jobs
    # mean_response is the mean position over the same tasks (E[Gamma(p, 1)] = p)
    assert d.mixture.mean() == pytest.approx(on.mean_response, rel=1e-9)
    assert np.all(np.isfinite(d.quantiles_se)) and np.all(d.quantiles_se > 0)


@pytest.mark.parametrize("policy,d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_jiq_meanfield_law(policy, d):
    from sim.jiq.meanfield import fixed_point, response_law

    mix = response_law(policy, 0.9, 10.0, d)
    fp = fixed_point(policy, 0.9, 10.0, d)
    assert mix.total == pytest.approx(1.0, abs=1e-14)
    assert mix.mean() == pytest.approx(fp.mean_response, rel=1e-10)
    # P(T > t) >= the Exp(1) of a task served at once, with the excess from blind tasks
    assert np.all(mix.ccdf(np.array([1.0, 3.0])) >= np.exp(-np.array([1.0, 3.0])) - 1e-15)
