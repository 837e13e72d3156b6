"""Tests of the agent engine for k-task jobs (sim.dispatch.agent_jobs, sim.dispatch._agent_jobs_kernel),
through the agent engine's runner (sim.dispatch.agent.run_task).

Statistical assertions use ``|estimate - truth| <= Z * SE`` with the standard error estimated by
the engine (batch means), ``Z = 4``; frequency tests use a p-value threshold with the same
two-sided tail (``ALPHA``). Seeds are fixed, so every test is deterministic.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.jobdelay import GL_W, GL_X, expected_job_delay, harmonic
from sim.core.results import RESULT_KEYS
from sim.dispatch import _agent_jobs_kernel as K
from sim.dispatch.agent import _single_task_row as single_task_row
from sim.dispatch.agent import run_task
from sim.dispatch.agent import simulate as agent_simulate
from sim.dispatch.agent_jobs import assign_tasks, place_job, simulate
from sim.dispatch.meanfield.pod import pod_mean_response
from tests.checks import assert_distribution, assert_plain_row, assert_refused_naming_the_key, assert_seed_decides, new_state, task_factory
from tests.helpers import ALPHA, Z, assert_within_se


# ------------------------------------------------------------------------------------------
# one job's placement on hand-built states
# ------------------------------------------------------------------------------------------
def reference_plan(policy, lengths, k, b=None):
    """Literal definitions: batch_filling places the tasks one by one into the currently
    shortest sampled queue; batch_sampling sends one task to each of the k shortest; ties go to
    the queue listed first. None if some task would make a queue exceed b."""
    q = list(lengths)
    counts = [0] * len(q)
    if policy == "batch_filling":
        for _ in range(k):
            i = min(range(len(q)), key=lambda j: (q[j], j))
            if b is not None and q[i] >= b:
                return None
            q[i] += 1
            counts[i] += 1
    else:
        for i in sorted(range(len(q)), key=lambda j: (q[j], j))[:k]:
            if b is not None and q[i] >= b:
                return None
            counts[i] = 1
    return counts


def test_batch_filling_and_batch_sampling_differ_on_a_hand_built_sample():
    # one empty queue among long ones: filling stacks both tasks on it (positions 1, 2);
    # sampling spreads them (positions 1 and 4)
    assert assign_tasks("batch_filling", [3, 0, 3, 3], 2).tolist() == [0, 2, 0, 0]
    assert assign_tasks("batch_sampling", [3, 0, 3, 3], 2).tolist() == [1, 1, 0, 0]
    # filling: the two empty queues first, then a tie among all three at length 1
    assert assign_tasks("batch_filling", [1, 0, 2, 0], 3).tolist() == [1, 1, 0, 1]
    assert assign_tasks("batch_sampling", [1, 0, 2, 0], 3).tolist() == [1, 1, 0, 1]
    assert assign_tasks("batch_filling", [5, 1, 1], 4).tolist() == [0, 2, 2]
    assert assign_tasks("batch_sampling", [5, 1, 1], 3).tolist() == [1, 1, 1]


def test_batch_plans_match_the_literal_definitions():
    # the engine fills by a threshold in O(k*d) instead of k scans; it must agree with the
    # task-by-task definition exactly (ties by sample order), including the buffer rule
    rng = np.random.default_rng(1)
    for _ in range(3000):
        m = int(rng.integers(1, 12))
        lengths = rng.integers(0, 6, size=m)
        k = int(rng.integers(1, m + 1))
        b = None if rng.random() < 0.3 else int(rng.integers(1, 8))
        for policy in ("batch_filling", "batch_sampling"):
            got = assign_tasks(policy, lengths, k, b)
            want = reference_plan(policy, lengths.tolist(), k, b)
            assert (got is None and want is None) or got.tolist() == want, (
                policy, lengths, k, b, got, want)


def test_buffer_drops_the_whole_job():
    # filling: only one space below b = 2 for two tasks -> dropped; b = 3 admits
    assert assign_tasks("batch_filling", [2, 2, 1], 2, b=2) is None
    assert assign_tasks("batch_filling", [2, 2, 1], 2, b=3).tolist() == [1, 0, 1]  # tie at 2
    # sampling: the 2nd shortest is full at b = 2 even though queue 0 is empty
    assert assign_tasks("batch_sampling", [0, 2, 2], 2, b=2) is None
    assert assign_tasks("batch_sampling", [0, 2, 2], 2, b=3).tolist() == [1, 1, 0]
    # through the engine's full plan (d*k = N, so the sample is every server)
    q = np.array([1, 1, 0, 1])
    assert place_job(q, "batch_filling", 2, d=2, b=1) is None
    assert place_job(q, "batch_sampling", 2, d=2, b=1) is None
    assert place_job(q, "batch_filling", 1, d=4, b=1).tolist() == [0, 0, 1, 0]
    assert place_job(q, "jsq", 2, b=1) is None
    assert place_job(q, "jsq", 1, b=1).tolist() == [0, 0, 1, 0]
    assert place_job(np.array([1, 1]), "random", 1, b=1) is None
    assert place_job(np.array([1, 1]), "pod_per_task", 1, d=2, b=1) is None
    assert place_job(np.array([1, 0]), "pod_per_task", 1, d=2, b=1).tolist() == [0, 1]


def test_random_with_buffer_admits_only_distinct_servers():
    # b = 1, three empty servers, two tasks: admitted iff they go to different servers (2/3)
    state = new_state(3)
    q = np.zeros(3, dtype=np.int64)
    n = 6000
    admitted = sum(place_job(q, "random", 2, b=1, state=state) is not None for _ in range(n))
    assert sps.binomtest(admitted, n, 2 / 3).pvalue > ALPHA
    assert np.array_equal(q, np.zeros(3))  # a plan never changes the state


def test_batch_filling_breaks_ties_uniformly():
    # q = [0, 1, 1, 1], k = 2, sample = all servers: the first task takes the empty queue, the
    # second finds four queues of length 1 and picks one uniformly (filling can stack two tasks
    # on server 0); batch-sampling never does: its second task is uniform over servers 1-3
    q = np.array([0, 1, 1, 1])
    state = new_state(4)
    n = 8000
    extra_fill = np.zeros(4, dtype=np.int64)
    extra_samp = np.zeros(4, dtype=np.int64)
    for _ in range(n):
        c = place_job(q, "batch_filling", 2, d=2, state=state)
        assert c.sum() == 2 and c[0] >= 1
        c[0] -= 1
        extra_fill += c
        c = place_job(q, "batch_sampling", 2, d=2, state=state)
        assert c.sum() == 2 and c[0] == 1 and c.max() == 1
        c[0] -= 1
        extra_samp += c
    assert_distribution(extra_fill, [0.25] * 4)
    assert_distribution(extra_samp, [0, 1 / 3, 1 / 3, 1 / 3])


@pytest.mark.parametrize("policy", ["batch_filling", "batch_sampling", "pod_per_task"])
def test_sample_without_replacement_k1(policy):
    # k = 1 is power-of-d with d distinct queues: with distinct lengths, server i is chosen iff
    # sampled with d-1 longer ones, P(i) = C(n-1-rank_i, d-1) / C(n, d) (rejection sampling:
    # 2d <= n)
    n, d = 20, 3
    rng = np.random.default_rng(5)
    q = np.empty(n, dtype=np.int64)
    q[rng.permutation(n)] = np.arange(n)
    probs = np.array([math.comb(n - 1 - q[i], d - 1) for i in range(n)]) / math.comb(n, d)
    state = new_state(6)
    counts = sum(place_job(q, policy, 1, d=d, state=state) for _ in range(20_000))
    assert_distribution(counts, probs)


def test_pod_per_task_tasks_see_their_predecessors():
    # the second task sees the first one's queue raised: 1 < 5, so both go to server 0
    assert place_job(np.array([0, 5, 5, 5]), "pod_per_task", 2, d=2).tolist() == [2, 0, 0, 0]
    # whereas with two idle servers each task starts at once
    assert place_job(np.array([0, 5, 0, 5]), "pod_per_task", 2, d=2).tolist() == [1, 0, 1, 0]


def test_jsq_places_tasks_one_after_another():
    # q = [2, 0, 1, 0], k = 3: servers 1 and 3 get a task each, then the third task is uniform
    # over the three queues of length 1 (servers 1, 2, 3)
    q = np.array([2, 0, 1, 0])
    state = new_state(7)
    third = np.zeros(4, dtype=np.int64)
    for _ in range(6000):
        c = place_job(q, "jsq", 3, state=state)
        assert c[1] >= 1 and c[3] >= 1 and c[0] == 0 and c.sum() == 3
        c[1] -= 1
        c[3] -= 1
        third += c
    assert_distribution(third, [0, 1 / 3, 1 / 3, 1 / 3])


# ------------------------------------------------------------------------------------------
# end-of-run correction on a hand-built state
# ------------------------------------------------------------------------------------------
def test_close_censored_credits_exact_expected_remaining_times():
    rate = 5.0
    bounds = np.array([0, 128, 256])  # two windows of 128 events; last event 255
    jobtab = np.zeros(2 * 4, dtype=np.int64)
    jobtab[0:2] = (10, 3)  # job 0 arrived at event 10, 3 tasks left
    jobtab[2:4] = (200, 1)  # job 1 arrived at event 200 (window 1)
    srv = K.new_servers(np.zeros(2, dtype=np.int64), K.RECORD)
    # server 0: job 0 (in service), job 1, job 0; ring starting at the end to test wrapping
    c = K.RECORD - K.RING0
    srv[0, K.Q] = 3
    srv[0, K.HEAD] = c - 1
    srv[0, K.RING0 + c - 1], srv[0, K.RING0 + 0], srv[0, K.RING0 + 1] = 0, 1, 0
    # server 1: a task present at time 0 (unknown job), then job 0
    srv[1, K.Q] = 2
    srv[1, K.RING0 + 0], srv[1, K.RING0 + 1] = -1, 0
    w = [np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2, dtype=np.int64), np.zeros(2),
         np.zeros(2, dtype=np.int64), np.zeros(2)]
    K.close_censored(srv, jobtab, rate, bounds, *w, GL_X, GL_W)
    w_jobs, w_resp, w_tasks, w_tresp, w_starts, w_wait = w
    el0, el1 = 255 - 10, 255 - 200
    assert w_jobs.tolist() == [1, 1]
    # job 0: its last tasks sit at position 3 (server 0) and 2 (server 1)
    assert w_resp[0] == pytest.approx(el0 + rate * expected_job_delay([3, 2]), rel=1e-12)
    assert w_resp[1] == pytest.approx(el1 + rate * 2, rel=1e-12)
    assert w_tasks.tolist() == [3, 1]
    assert w_tresp[0] == pytest.approx(3 * el0 + rate * (1 + 3 + 2))
    assert w_tresp[1] == pytest.approx(el1 + rate * 2)
    assert w_starts.tolist() == [2, 1]  # tasks not yet in service
    assert w_wait[0] == pytest.approx(2 * el0 + rate * (2 + 1))
    assert w_wait[1] == pytest.approx(el1 + rate * 1)


# ------------------------------------------------------------------------------------------
# closed forms and laws
# ------------------------------------------------------------------------------------------
@pytest.mark.slow  # fast suite under 5 min cold: see README
def test_k1_batch_policies_are_pod_and_match_agent_and_mean_field():
    # with k = 1 all three policies are power-of-d on the same random stream: bitwise equal
    n, lam, d, events = 1000, 0.8, 2, 20_000_000
    runs = {p: simulate(n, lam, p, k=1, d=d, events=1_000_000, seed=21)
            for p in ("batch_filling", "batch_sampling", "pod_per_task")}
    for other in ("batch_sampling", "pod_per_task"):
        for key in ("mean_response", "mean_wait", "mean_queue", "prob_wait", "tail"):
            assert np.array_equal(getattr(runs["batch_filling"], key),
                                  getattr(runs[other], key)), (other, key)
    r = simulate(n, lam, "batch_filling", k=1, d=d, events=events, seed=21)
    # the single-task engine (independent run) and the mean field (finite-N bias below 5/N,
    # see tests/test_agent.py::test_pod_large_n_matches_mean_field)
    a = agent_simulate(n, lam, "pod", d=d, events=events, seed=22)
    assert_within_se(r.mean_response, a.mean_response, math.hypot(r.mean_response_se,
                  a.mean_response_se), what="vs agent")
    assert_within_se(r.mean_response, pod_mean_response(lam, d), r.mean_response_se,
                  allowance=5 / n, what="vs mean field")
    assert_within_se(r.mean_queue, lam * pod_mean_response(lam, d), r.mean_queue_se,
                  allowance=5 / n, what="L vs mean field")
    assert r.queueing_ratio == r.mean_response - 1.0
    assert r.frac_within_h == pytest.approx(1 - r.prob_wait, abs=1e-15)
    assert r.messages_per_job == 2 * d and r.drop_prob == 0.0 and r.init_used == "meanfield"


@pytest.mark.parametrize("k", [1, 6])
def test_random_routing_task_level_is_batch_mm1(k):
    # Each server receives the job's tasks that land on it, Binomial(k, 1/N), at job rate
    # N lam / k: an M^X/M/1 queue with load lam, whose mean length is
    #   L = lam (1 + (k - 1) / (2 N)) / (1 - lam)
    # (= lam / (1 - lam), the M/M/1 value, only for k = 1 or N -> infinity, since tasks of a job
    # may share a server). Task sojourn L / lam (Little), service Exp(1).
    n, lam = 12, 0.7
    r = simulate(n, lam, "random", k=k, events=20_000_000, seed=31, init="empty")
    length = lam * (1 + (k - 1) / (2 * n)) / (1 - lam)
    assert_within_se(r.mean_queue, length, r.mean_queue_se, what="L")
    assert_within_se(r.mean_task_response, length / lam, r.mean_task_response_se, what="task T")
    assert_within_se(r.mean_task_response - r.mean_wait, 1.0,
                  math.hypot(r.mean_task_response_se, r.mean_wait_se), what="service")
    assert_within_se(r.tail[0], lam, r.tail_se[0], what="s_1 = utilisation")
    # the job waits for its slowest task
    assert r.mean_response >= r.mean_task_response and r.mean_response >= harmonic(k)
    assert r.messages_per_job == 0.0


@pytest.mark.parametrize("policy, b", [
    ("batch_filling", None), ("batch_sampling", None), ("pod_per_task", None), ("jsq", None),
    ("random", None), ("batch_filling", 2), ("random", 3),
])
def test_littles_law(policy, b):
    # tasks arrive at rate lam * (1 - drop) per server; each stays mean_task_response
    n, lam, k = 16, 0.75, 4
    r = simulate(n, lam, policy, k=k, d=2, b=b, events=6_000_000, seed=41, init="empty")
    admitted = lam * (1 - r.drop_prob)
    rhs = admitted * r.mean_task_response
    se = math.hypot(r.mean_queue_se, admitted * r.mean_task_response_se,
                    lam * r.mean_task_response * r.drop_prob_se)
    assert_within_se(r.mean_queue, rhs, se, what="Little")
    # FIFO, Exp(1) service: a task's sojourn is its wait plus one service
    assert_within_se(r.mean_task_response - r.mean_wait, 1.0,
                  math.hypot(r.mean_task_response_se, r.mean_wait_se), what="service")
    assert r.mean_response >= harmonic(k) and 0.0 <= r.prob_wait <= 1.0
    if b is None:
        assert r.drop_prob == 0.0
    else:
        assert 0.0 < r.drop_prob < 1.0
        assert max(i for i in range(1, r.tail.size + 1) if r.tail[i - 1] > 0) <= b


@pytest.mark.parametrize("lam", [0.5, 2.0])
def test_buffer_one_is_erlang_loss(lam):
    # k = 1, random, b = 1: each server is M/M/1/1 with arrival rate lam: blocked with
    # probability lam / (1 + lam) (Erlang B, one server), busy the same fraction of time, and
    # an admitted job never waits
    r = simulate(10, lam, "random", k=1, b=1, events=4_000_000, seed=51)
    assert_within_se(r.drop_prob, lam / (1 + lam), r.drop_prob_se, what="drop")
    assert_within_se(r.mean_queue, lam / (1 + lam), r.mean_queue_se, what="busy")
    assert_within_se(r.mean_response, 1.0, r.mean_response_se, what="T")
    assert r.prob_wait == 0.0 and r.mean_wait == 0.0 and r.frac_within_h == 1.0
    assert r.tail[1] == 0.0


@pytest.mark.parametrize("policy", ["random", "batch_filling", "jsq"])
def test_buffer_one_admits_only_jobs_served_at_once(policy):
    # b = 1: every task of an admitted job starts service on arrival, so the job response is the
    # max of k independent Exp(1) services, H_k exactly (end-to-end check of the job-level
    # measurement, end-of-run correction included)
    k = 3
    r = simulate(12, 0.6, policy, k=k, d=2, b=1, events=4_000_000, seed=55)
    assert_within_se(r.mean_response, harmonic(k), r.mean_response_se, what="T = H_k")
    assert_within_se(r.queueing_ratio, 0.0, r.queueing_ratio_se, what="ratio")
    assert r.mean_wait == 0.0 and r.prob_wait == 0.0 and r.frac_within_h == 1.0
    assert 0.0 < r.drop_prob < 1.0


def test_short_runs_at_large_n_are_unbiased():
    # k = 1 from the mean-field point, runs ~50 time units long at N = 20000: without the
    # end-of-run correction the long responses of the jobs still present would be missing
    # (as tests/test_agent.py::test_short_runs_at_large_n_are_unbiased); replications give
    # an honest SE
    n, lam, d = 20_000, 0.7, 2
    truth = pod_mean_response(lam, d)
    reps = [simulate(n, lam, "batch_filling", k=1, d=d, events=2_000_000, seed=s)
            for s in range(6)]
    for key, exact in (("mean_response", truth), ("mean_wait", truth - 1.0)):
        v = np.array([getattr(r, key) for r in reps])
        se = v.std(ddof=1) / np.sqrt(v.size)
        assert abs(v.mean() - exact) <= Z * se + 5.0 / n, (key, v.mean(), exact, se)


def test_queueing_ratio_vanishes_at_light_load():
    # batch-filling, k = 4, d = 2: at lam = 0.03 a task waits only if fewer than 4 of the 8
    # sampled servers are idle (probability of order lam**5): the ratio must be 0 within its
    # SE, and clearly positive at lam = 0.7
    light = simulate(100, 0.03, "batch_filling", k=4, d=2, events=8_000_000, seed=61)
    heavy = simulate(100, 0.7, "batch_filling", k=4, d=2, events=2_000_000, seed=62)
    assert_within_se(light.queueing_ratio, 0.0, light.queueing_ratio_se, what="ratio at 0.03")
    assert light.prob_wait < 1e-3 and light.frac_within_h > 1 - 1e-3
    assert heavy.queueing_ratio - Z * heavy.queueing_ratio_se > 0.0
    assert heavy.queueing_ratio > light.queueing_ratio + Z * heavy.queueing_ratio_se


def test_frac_within_h_grows_with_h():
    r1 = simulate(50, 0.9, "batch_filling", k=5, d=2, h=1, events=3_000_000, seed=71)
    r3 = simulate(50, 0.9, "batch_filling", k=5, d=2, h=3, events=3_000_000, seed=71)
    assert r1.mean_response == r3.mean_response  # h only changes what is counted
    assert r1.frac_within_h == pytest.approx(1 - r1.prob_wait, abs=1e-15)
    assert r1.frac_within_h < r3.frac_within_h <= 1.0


# ------------------------------------------------------------------------------------------
# engine mechanics
# ------------------------------------------------------------------------------------------
def _kernel_run(width, slots, policy=K.RANDOM, k=4, m=1, b=K.UNBOUNDED):
    n, lam, events = 6, 0.93, 24 * 16384 + 1000
    job_rate = lam / k
    p_arrival = np.uint64(int(job_rate / (job_rate + 1) * 2.0**64))
    state = np.random.SeedSequence(81).generate_state(8, dtype=np.uint64)
    srv = K.new_servers(np.zeros(n, dtype=np.int64), width)
    jobtab = np.zeros(2 * slots, dtype=np.int64)
    nw = 25
    bounds = np.minimum(np.arange(nw + 1, dtype=np.int64) * 16384, events)
    outs = [np.zeros(nw, np.int64) for _ in range(6)] + [np.zeros(nw), np.zeros(nw, np.int64),
            np.zeros(nw), np.zeros(nw, np.int64), np.zeros(nw), np.zeros(nw, np.int64),
            np.zeros((nw, 32), np.int64)]
    srv, jobtab = K.agent_jobs_kernel(policy, k, m, b, 1, p_arrival, srv, jobtab, bounds, state,
                                    *outs)
    return srv.shape[1], jobtab.size // 2, outs, state


@pytest.mark.parametrize("policy, m", [(K.RANDOM, 1), (K.JSQ, 1), (K.BATCH_FILLING, 4)])
def test_growth_of_rings_and_job_table_gives_identical_results(policy, m):
    # small initial rings and job table (grown many times, mid-arrival) vs large ones
    w_small, j_small, outs_small, st_small = _kernel_run(16, 1, policy=policy, m=m)
    w_big, j_big, outs_big, st_big = _kernel_run(256, 4096, policy=policy, m=m)
    assert j_small > 1 and j_big == 4096 and w_big == 256
    if policy == K.RANDOM:
        assert w_small > 16  # queues passed 12 tasks
    for a, b in zip(outs_small, outs_big):
        assert np.array_equal(a, b)
    assert np.array_equal(st_small, st_big)


task = task_factory(engine="agent", policy="batch_filling", n_servers=40, lam=0.8, k=4, d=2,
                   events=200_000, seed=2024, init="meanfield", n_batches=20, max_level=16)


def test_run_task_returns_exactly_the_schema_keys_as_plain_values():
    out = run_task(task())
    assert_plain_row(out, RESULT_KEYS, ci_method="overlapping batch means, batch ")
    assert out["events_run"] == 200_000 and out["n_jobs"] > 0
    assert 0 <= out["warmup_time"] < out["sim_time"]
    assert out["messages_per_job"] == 16.0 and out["drop_prob"] == 0.0
    assert run_task(task(policy="pod_per_task"))["messages_per_job"] == 64.0
    assert run_task(task(policy="jsq"))["messages_per_job"] == 2 * 40 * 4
    assert run_task(task(policy="random", b=3))["messages_per_job"] == 0.0


def test_sim_run_dispatch():
    import sim

    out = sim.run(task(policy="batch_sampling", b=3, h=2))
    assert set(out) == set(RESULT_KEYS) | {"wall_time", "rel_halfwidth", "runs"}
    # random / jsq with k = 1 and no buffer go to the single-task engine, bit for bit
    for policy in ("random", "jsq"):
        t = task(policy=policy, k=1)
        out = sim.run(t)
        for key in ("wall_time", "rel_halfwidth", "runs"):  # added by sim.run
            del out[key]
        direct = single_task_row(t)
        # sim.run adds its run-length check to the engine's ci_method
        assert out.pop("ci_method").startswith(direct.pop("ci_method"))
        assert out == direct
    # k > 1 or a buffer: this engine
    assert sim.run(task(policy="random", k=3))["n_jobs"] > 0
    assert sim.run(task(policy="jsq", k=1, b=2))["drop_prob"] >= 0.0
    with pytest.raises(ValueError, match="service_rates"):
        run_task(task(policy="random", k=2, service_rates=[1.0] * 40))


def test_reproducible_for_a_seed_and_different_across_seeds():
    assert_seed_decides(run_task, task)


@pytest.mark.parametrize("key, value", [
    ("n_servers", 0), ("n_servers", 2.5), ("lam", 0.0), ("lam", 1.0), ("lam", -0.1),
    ("lam", float("nan")), ("policy", "pod"), ("policy", "jsw"), ("k", 0), ("k", 31),
    ("k", 2.5), ("d", 0), ("d", 8), ("b", 0), ("b", 1.5), ("h", 0), ("events", 10),
    ("seed", -1), ("init", "full"), ("n_batches", 1), ("max_level", 0),
])
def test_bad_input_raises_value_error_naming_the_key(key, value):
    kw = dict(n_servers=30, lam=0.8, policy="batch_filling", k=4, d=2, events=10_000, seed=1)
    assert_refused_naming_the_key(simulate, kw, key, value)


def test_lam_above_one_needs_a_buffer():
    r = simulate(10, 1.5, "batch_filling", k=2, d=2, b=2, events=200_000, seed=3)
    assert 0.0 < r.drop_prob < 1.0
    with pytest.raises(ValueError, match="lam"):
        simulate(10, 1.5, "batch_filling", k=2, d=2, events=200_000, seed=3)


# ------------------------------------------------------------------------------------------
# slow
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_batch_filling_beats_batch_sampling_and_random():
    # Weng & Wang (and Ying et al.): batch-filling has the smallest delay of the batch
    # policies with the same probes; random routing is far worse
    n, lam, k, d = 400, 0.9, 8, 2
    res = {p: simulate(n, lam, p, k=k, d=d, events=40_000_000, seed=91, init="empty")
           for p in ("batch_filling", "batch_sampling", "random")}
    bf, bs, rnd = res["batch_filling"], res["batch_sampling"], res["random"]
    assert bf.mean_response + Z * math.hypot(bf.mean_response_se, bs.mean_response_se) \
        < bs.mean_response
    assert bs.mean_response < rnd.mean_response


def test_pod_with_a_buffer_is_not_ignored():
    # ("agent", "pod") with b runs the k = 1 batch-filling model (the same model) with drops
    import sim

    t = dict(engine="agent", policy="pod", n_servers=20, lam=1.5, d=2, b=2, events=400_000,
             seed=3, init="empty", n_batches=20, max_level=8)
    out = sim.run(t)
    assert out["drop_prob"] > 0.1 and out["tail"][2] == 0.0
