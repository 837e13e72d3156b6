"""Tests of the JIQ agent engine (sim.jiq.agent, sim.jiq._agent_kernel).

Statistical assertions are ``|estimate - truth| <= Z * SE (+ a measured finite-N allowance)``
with the engine's batch-means standard errors (tests/helpers.py); distributions are checked by
chi-square with the same two-sided tail (``ALPHA``). Seeds are fixed, so every test is
deterministic. Routing is checked on hand-built states with the kernel's own event functions
(:func:`apply_arrival`, :func:`apply_completion`, composed exactly as the event loop composes
them), the I-queue invariants after every window of whole runs (``check=True``), and the
estimates against closed forms, limits, and the mean field.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.results import RESULT_KEYS
from sim.jiq import _agent_kernel as K
from sim.jiq import check_task
from sim.jiq import meanfield as mf
from sim.jiq.agent import EXTRA_KEYS, _simulate, run_task, simulate
from sim.jiq.policies import POLICIES
from tests.checks import assert_distribution, assert_plain_row, new_state
from tests.helpers import assert_engines_agree, assert_within_se


class State:
    """A hand-built state: queue lengths and I-queue member lists."""

    def __init__(self, q, lists):
        self.q = np.array(q, dtype=np.int64)
        self.iq, self.isize, self.where, self.kshift = K.make_iqueues(lists, self.q.size)

    def lists(self):
        return K.iqueue_lists(self.iq, self.isize, self.kshift)

    def sets(self):
        return [set(x) for x in self.lists()]

    def arrival(self, policy, m, state, d=1, z=0):
        return K.apply_arrival(policy, d, z, m, self.q, self.iq, self.isize, self.where,
                               self.kshift, state)

    def completion(self, policy, n, state, d=1, z=0):
        return K.apply_completion(policy, d, z, n, self.q, self.iq, self.isize, self.where,
                                  self.kshift, state)

    def check(self, policy, z=0):
        return K.check_state(policy, z, self.q, self.iq, self.isize, self.where, self.kshift)


def arrivals_from(q, lists, policy, m, draws, seed, d=1, z=0):
    """Apply one arrival at scheduler ``m`` to fresh copies of a state ``draws`` times:
    returns [(server, joins, deletes, probes, State after)]."""
    state = new_state(seed)
    out = []
    for _ in range(draws):
        s = State(q, lists)
        n, j, de, p = s.arrival(policy, m, state, d=d, z=z)
        out.append((int(n), int(j), int(de), int(p), s))
    return out


# ------------------------------------------------------------------------------------------
# one event on hand-built states
# ------------------------------------------------------------------------------------------
def test_jiq_nonempty_iqueue_sends_to_its_last_member_which_leaves_without_message():
    # servers 0, 2, 4 idle in I-queue 0, server 1 idle in I-queue 1, server 3 busy. The
    # members are all idle, so the loop takes the row's last one instead of a uniform one
    # (same law: test_jiq_threshold_with_z_zero_equals_jiq_in_law_and_messages compares it
    # with jiq_threshold, z = 0, which draws uniformly); no random number is used
    q, lists = [0, 0, 0, 2, 0], [[0, 2, 4], [1]]
    for policy in (K.JIQ, K.JIQ_POD, K.JIQ_SQD):
        state = new_state(1)
        before = state.copy()
        s = State(q, lists)
        n, joins, deletes, probes = s.arrival(policy, 0, state, d=2)
        assert (n, joins, deletes, probes) == (4, 0, 0, 0)
        assert np.array_equal(state, before)
        assert s.q[4] == 1 and s.lists() == [[0, 2], [1]] and s.where[4] == -1
        assert s.check(policy) == []


def test_jiq_empty_iqueue_sends_to_a_uniform_server_and_deletes_an_idle_one():
    # I-queue 0 empty; idle servers 0 and 1 are listed in I-queue 1; servers 2, 3 busy
    q, lists = [0, 0, 1, 3], [[], [0, 1]]
    outs = arrivals_from(q, lists, K.JIQ, 0, 4000, seed=2)
    counts = np.bincount([o[0] for o in outs], minlength=4)
    assert_distribution(counts, [0.25] * 4)
    for n, joins, deletes, probes, s in outs:
        idle = q[n] == 0
        assert (joins, deletes, probes) == (0, int(idle), 0)
        assert s.sets() == [set(), {0, 1} - {n}]
        assert s.check(K.JIQ) == []


def test_jiq_pod_empty_iqueue_probes_d_distinct_servers_and_takes_the_shortest():
    # distinct queue lengths: server i is chosen iff sampled with d-1 longer ones, so
    # P(i) = C(n-1-rank, d-1) / C(n, d) (a law that sampling with replacement would not give)
    q = np.array([3, 0, 5, 1, 2, 4])
    n_srv, d = q.size, 2
    lists = [[], [1]]
    outs = arrivals_from(q, lists, K.JIQ_POD, 0, 6000, seed=3, d=d)
    probs = np.array([math.comb(n_srv - 1 - q[i], d - 1) for i in range(n_srv)]) / math.comb(n_srv, d)
    assert_distribution(np.bincount([o[0] for o in outs], minlength=n_srv), probs)
    for n, joins, deletes, probes, s in outs:
        assert probes == 2 * d and joins == 0
        assert deletes == int(n == 1)  # server 1 was idle (listed in I-queue 1)
        assert s.check(K.JIQ_POD) == []
    # with an I-queue of its own, jiq_pod probes nothing
    s = State(q, [[1], []])
    n, joins, deletes, probes = s.arrival(K.JIQ_POD, 0, new_state(4), d=d)
    assert (n, joins, deletes, probes) == (1, 0, 0, 0) and s.lists() == [[], []]


def test_jiq_pod_ties_are_broken_uniformly():
    # d = N: every server probed; servers 1 and 3 tie at the minimum
    q, lists = [2, 1, 4, 1], [[]]
    outs = arrivals_from(q, lists, K.JIQ_POD, 0, 3000, seed=5, d=4)
    assert_distribution(np.bincount([o[0] for o in outs], minlength=4), [0, 0.5, 0, 0.5])


def test_jiq_original_sends_to_a_busy_listed_server_and_keeps_busy_servers_listed():
    # server 3 is listed in I-queue 0 but busy (a blind task reached it): the scheduler still
    # sends there, and it leaves the I-queue
    s = State([0, 0, 1, 2], [[3], [0, 1]])
    n, joins, deletes, probes = s.arrival(K.JIQ_ORIGINAL, 0, new_state(6))
    assert (n, joins, deletes, probes) == (3, 0, 0, 0)
    assert s.q[3] == 3 and s.sets() == [set(), {0, 1}] and s.where[3] == -1
    # a blind task to an idle listed server: no delete message, it stays listed (now busy)
    outs = arrivals_from([0, 0, 1, 2], [[], [0, 1]], K.JIQ_ORIGINAL, 0, 2000, seed=7)
    assert_distribution(np.bincount([o[0] for o in outs], minlength=4), [0.25] * 4)
    for n, joins, deletes, probes, s in outs:
        assert (joins, deletes, probes) == (0, 0, 0)
        assert s.sets() == [set(), {0, 1}]
        assert s.check(K.JIQ_ORIGINAL) == []
    # completions: a listed server becoming idle does not join again; an unlisted one joins
    s = State([2, 1, 1], [[1], []])  # server 1 listed and busy, server 2 unlisted
    assert s.completion(K.JIQ_ORIGINAL, 1, new_state(8)) == (0, 0, 0)
    assert s.sets() == [{1}, set()]
    joins, deletes, probes = s.completion(K.JIQ_ORIGINAL, 2, new_state(9))
    assert (joins, deletes, probes) == (1, 0, 0)
    assert sum(map(len, s.lists())) == 2 and set().union(*s.sets()) == {1, 2}
    assert s.check(K.JIQ_ORIGINAL) == []


def test_jiq_threshold_lists_servers_with_at_most_z_tasks():
    z = 1
    # I-queue 0 holds server 0 (0 tasks) and server 1 (1 task); servers 2, 3 have 2 tasks
    q, lists = [0, 1, 2, 2], [[0, 1], []]
    outs = arrivals_from(q, lists, K.JIQ_THRESHOLD, 0, 2000, seed=10, z=z)
    assert_distribution(np.bincount([o[0] for o in outs], minlength=4), [0.5, 0.5, 0, 0])
    for n, joins, deletes, probes, s in outs:
        if n == 0:  # 0 -> 1 task: still at most z, stays listed, no message
            assert deletes == 0 and s.sets() == [{0, 1}, set()]
        else:  # 1 -> 2 tasks: unlisted; the scheduler cannot know it, so a delete message
            assert deletes == 1 and s.sets() == [{0}, set()]
        assert s.check(K.JIQ_THRESHOLD, z) == []
    # blind tasks (I-queue 1 empty): uniform server; a delete only when one rises above z
    outs = arrivals_from(q, lists, K.JIQ_THRESHOLD, 1, 4000, seed=11, z=z)
    assert_distribution(np.bincount([o[0] for o in outs], minlength=4), [0.25] * 4)
    for n, joins, deletes, probes, s in outs:
        assert deletes == int(n == 1)
        assert s.check(K.JIQ_THRESHOLD, z) == []
    # a completion to z tasks joins; to fewer, the server is already listed
    s = State([0, 1, 2, 2], [[0, 1], []])
    assert s.completion(K.JIQ_THRESHOLD, 2, new_state(12), z=z)[0] == 1
    assert s.completion(K.JIQ_THRESHOLD, 1, new_state(13), z=z)[0] == 0
    assert set().union(*s.sets()) == {0, 1, 2} and s.check(K.JIQ_THRESHOLD, z) == []
    # z = 0: the scheduler knows its listed servers are idle: no delete (as under jiq)
    s = State([0, 1], [[0], []])
    assert s.arrival(K.JIQ_THRESHOLD, 0, new_state(14), z=0) == (0, 0, 0, 0)


def test_jiq_completion_joins_a_uniform_iqueue_with_one_message():
    state = new_state(15)
    counts = np.zeros(4, dtype=np.int64)
    for _ in range(4000):
        s = State([1, 0], [[1], [], [], []])
        assert s.completion(K.JIQ, 0, state) == (1, 0, 0)
        m = [i for i, members in enumerate(s.sets()) if 0 in members]
        counts[m[0]] += 1
        assert s.check(K.JIQ) == []
    assert_distribution(counts, [0.25] * 4)
    # a completion that leaves the server busy: no join
    s = State([2], [[]])
    assert s.completion(K.JIQ, 0, state) == (0, 0, 0) and s.lists() == [[]]


def test_jiq_sqd_joins_the_shortest_of_d_sampled_iqueues():
    # lengths 2, 0, 1 with d = 3 = M: always I-queue 1; with d = 2 (distinct, uniform pair):
    # I-queue 1 iff in the pair (2/3), else I-queue 2 (1/3)
    lists = [[3, 4], [], [5]]
    q = [1, 1, 1, 0, 0, 0]
    for d, probs in ((3, [0, 1, 0]), (2, [0, 2 / 3, 1 / 3])):
        state = new_state(16 + d)
        counts = np.zeros(3, dtype=np.int64)
        for _ in range(3000):
            s = State(q, lists)
            assert s.completion(K.JIQ_SQD, 0, state, d=d) == (1, 0, 2 * d)
            counts[next(i for i, x in enumerate(s.sets()) if 0 in x)] += 1
            assert s.check(K.JIQ_SQD) == []
        assert_distribution(counts, probs)
    # M = 5, d = 2 (rejection sampling, 2d < M): distinct lengths, P(i) = C(M-1-rank, 1) / C(M, 2)
    lengths = [3, 0, 2, 1, 4]
    lists, nxt = [], 1
    for k in lengths:
        lists.append(list(range(nxt, nxt + k)))
        nxt += k
    q = [1] + [0] * (nxt - 1)
    state = new_state(19)
    counts = np.zeros(5, dtype=np.int64)
    for _ in range(4000):
        s = State(q, lists)
        assert s.completion(K.JIQ_SQD, 0, state, d=2) == (1, 0, 4)
        counts[next(i for i, x in enumerate(s.sets()) if 0 in x)] += 1
    assert_distribution(counts, [math.comb(4 - k, 1) / math.comb(5, 2) for k in lengths])
    # ties uniform: lengths 1, 1 with d = 2
    state = new_state(20)
    counts = np.zeros(2, dtype=np.int64)
    for _ in range(2000):
        s = State([1, 0, 0], [[1], [2]])
        s.completion(K.JIQ_SQD, 0, state, d=2)
        counts[next(i for i, x in enumerate(s.sets()) if 0 in x)] += 1
    assert_distribution(counts, [0.5, 0.5])


def test_check_state_detects_broken_invariants():
    assert State([0, 1], [[0], []]).check(K.JIQ) == []
    assert "a busy server is listed" in State([0, 1], [[0, 1], []]).check(K.JIQ)
    assert "an idle server is not listed" in State([0, 0], [[0], []]).check(K.JIQ)
    assert State([0, 3], [[0, 1], []]).check(K.JIQ_ORIGINAL) == []
    assert State([0, 1, 2], [[0], [1]]).check(K.JIQ_THRESHOLD, 1) == []
    s = State([0, 1], [[0], []])
    s.where[0] = 5
    assert any("where" in b for b in s.check(K.JIQ))


def test_iqueue_rows_grow_without_changing_members():
    s = State([0] * 9, [list(range(8)), [8]])
    assert s.kshift == 4  # K = 16 > 8
    iq, ks = K.grow_iqueues(s.iq, s.isize, s.where, s.kshift)
    s.iq, s.kshift = iq, ks
    assert ks == 5 and s.lists() == [list(range(8)), [8]] and s.check(K.JIQ) == []


# ------------------------------------------------------------------------------------------
# invariants over whole runs (checked after every window)
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, d, z, r", [
    ("jiq", 1, 0, 10), ("jiq_pod", 2, 0, 10), ("jiq_pod", 30, 0, 5), ("jiq_original", 1, 0, 10),
    ("jiq_threshold", 1, 2, 10), ("jiq_sqd", 2, 0, 4), ("jiq_sqd", 3, 0, 10),
    ("jiq", 1, 0, 40), ("jiq", 1, 0, 0.5),
])
def test_invariants_hold_after_every_window(policy, d, z, r):
    # N = 40 at lam = 0.95: ring buffers and, for r = 40 (M = 1), the I-queue row grow
    for init in ("meanfield", "empty"):
        res, st = _simulate(40, 0.95, policy, r, d=d, z=z, events=300_000, seed=21, init=init,
                            n_windows=100, n_batches=10, check=True)
        q = st.q
        listed = st.where >= 0
        assert int(listed.sum()) == int(st.isize.sum()) == int(st.ctr[K.LISTED])
        if policy in ("jiq", "jiq_pod", "jiq_sqd"):
            assert np.array_equal(listed, q == 0)
            # listed = idle at every event, so the time averages agree to rounding
            assert res.mean_iqueue == pytest.approx(r * (1.0 - res.tail[0]), rel=1e-9, abs=1e-12)
            assert_within_se(res.mean_iqueue, r * (1.0 - res.tail[0]), res.mean_iqueue_se,
                             what="mean I-queue = r (1 - s_1)")


@pytest.mark.parametrize("policy, d", [("jiq", 1), ("jiq_pod", 2), ("jiq_sqd", 2)])
def test_warm_start_is_the_mean_field_point_with_listed_equal_to_idle(policy, d):
    # N = 10**5, M = 10**4: at time 0 the fractions of servers with >= i tasks are binomial
    # around the mean-field tail (i.i.d. queues). The I-queue sizes are i.i.d. from the mean-
    # field law, then trimmed or topped up by |excess| slots to add up to the idle servers, which
    # moves at most |excess| I-queues out of a size class: the allowance is that bound, with
    # |excess| <= |idle - M E[size]| + 4 sd(sum of M sizes) (the same 4-SE tail).
    from sim.jiq.agent import _initial_state

    n, lam, r = 100_000, 0.9, 10
    m = n // r
    fp = mf.fixed_point(policy, lam, r, d)
    code = POLICIES[policy].code
    q, iq, isize, where, kshift, used = _initial_state(
        policy, code, lam, n, m, r, d, 0, "meanfield", new_state(35), np.random.default_rng(35))
    assert used == "meanfield"
    assert K.check_state(code, 0, q, iq, isize, where, kshift) == []
    for i in (1, 2, 3):
        frac = np.mean(q >= i)
        se = math.sqrt(fp.tail[i - 1] * (1 - fp.tail[i - 1]) / n)
        assert_within_se(frac, fp.tail[i - 1], se, what=f"s_{i} at t = 0")
    sizes = np.arange(fp.iqueue_pmf.size)
    var = float(np.dot(sizes**2, fp.iqueue_pmf)) - fp.mean_iqueue**2
    excess = abs(int(np.sum(q == 0)) - m * fp.mean_iqueue) + 4 * math.sqrt(m * var)
    for j in range(3):
        frac = np.mean(isize == j)
        p = fp.iqueue_pmf[j]
        assert_within_se(frac, p, math.sqrt(p * (1 - p) / m), allowance=excess / m,
                         what=f"I-queues of size {j}")
    assert np.mean(isize) == pytest.approx(np.mean(q == 0) * r)


@pytest.mark.parametrize("ahead", [False, True])
def test_stops_do_not_change_the_run(ahead, monkeypatch):
    # check mode stops the loop after every window, and the loop also stops to grow the ring
    # buffers and the I-queue rows; none of this may change the run: results are bitwise those
    # of one long span. M = 1 from the mean-field start (few idle servers: rows of K = 8 that
    # must grow), and jiq_original / jiq_threshold at lam = 0.97 (long queues: rings grow).
    # jiq_pod (d = 2) and jiq_sqd: the loop keeps their I-queue slots coded in the rings.
    # ahead: the loop variant of large N (draws one event ahead, kept across stops), forced on
    # for the two policies whose variants the look-ahead law test compiles anyway
    cases = (("jiq", 40), ("jiq_original", 4), ("jiq_threshold", 4), ("jiq_pod", 40),
             ("jiq_sqd", 4))
    if ahead:
        monkeypatch.setattr(K, "AHEAD_MIN_SERVERS", 1)
        cases = (("jiq", 40), ("jiq_pod", 40))
    for policy, r in cases:
        kw = {"d": 2 if policy in ("jiq_pod", "jiq_sqd") else 1, "z": 1, "events": 300_000,
              "seed": 34, "n_windows": 50, "n_batches": 10}
        a, sa = _simulate(40, 0.97, policy, r, **kw)
        b, sb = _simulate(40, 0.97, policy, r, check=True, **kw)
        for field, x, y in zip(a._fields, a, b):
            assert np.array_equal(x, y), (policy, field)
        assert np.array_equal(sa.q, sb.q) and np.array_equal(sa.where, sb.where)
        if r == 40:
            assert sa.kshift > 3  # the row grew


def test_coded_slots_fall_back_to_int64_stamps(monkeypatch):
    # an idle server's I-queue slot is kept in its ring as -2 - slot: with int32 stamps that
    # needs M K < 2**31 - 2 (after one more doubling of the rows); beyond, the kernel switches
    # the rings to int64, which changes nothing in the run
    assert K._codes_fit(np.dtype(np.int32), 2**20, 9)
    assert not K._codes_fit(np.dtype(np.int32), 2**20, 10)
    assert K._codes_fit(np.dtype(np.int64), 2**20, 30)
    kw = {"events": 300_000, "seed": 37, "n_windows": 50, "n_batches": 10}
    import sim.jiq.agent as agent_module

    dtypes = []
    close = agent_module.close_censored
    monkeypatch.setattr(agent_module, "close_censored",
                        lambda q, buf, *args: (dtypes.append(buf.dtype), close(q, buf, *args)))
    a, _ = _simulate(40, 0.97, "jiq", 40, **kw)
    monkeypatch.setattr(K, "_codes_fit", lambda dtype, n_sched, kshift: dtype == np.int64)
    b, _ = _simulate(40, 0.97, "jiq", 40, **kw)
    assert dtypes == [np.int32, np.int64]
    for field, x, y in zip(a._fields, a, b):
        assert np.array_equal(x, y), field


def test_look_ahead_variant_has_the_same_law(monkeypatch):
    # from AHEAD_MIN_SERVERS servers on the loop draws each event one event ahead (another
    # order of the random stream): forced on at N = 300, its estimates agree with the plain
    # loop's within standard errors
    for policy, d in (("jiq", 1), ("jiq_pod", 2)):
        a = simulate(300, 0.9, policy, 10, d=d, events=20_000_000, seed=35)
        monkeypatch.setattr(K, "AHEAD_MIN_SERVERS", 1)
        b = simulate(300, 0.9, policy, 10, d=d, events=20_000_000, seed=36)
        # the variant did switch: the same seed consumes its stream in another order
        same_seed = simulate(300, 0.9, policy, 10, d=d, events=1_000_000, seed=35)
        monkeypatch.undo()
        plain = simulate(300, 0.9, policy, 10, d=d, events=1_000_000, seed=35)
        assert same_seed.mean_response != plain.mean_response
        for key in ("mean_response", "p0", "mean_iqueue", "join_rate", "delete_rate"):
            assert_engines_agree(getattr(a, key), getattr(a, key + "_se"),
                                 getattr(b, key), getattr(b, key + "_se"), what=f"{policy} {key}")


def test_listed_equals_idle_in_time_average_at_moderate_n():
    res = simulate(500, 0.9, "jiq", 10, events=4_000_000, seed=22)
    assert_within_se(res.mean_iqueue, 10 * (1 - res.tail[0]), res.mean_iqueue_se,
                     what="mean I-queue = r (1 - s_1)")
    assert res.mean_iqueue == pytest.approx(10 * (1 - res.tail[0]), rel=1e-9)


# ------------------------------------------------------------------------------------------
# closed forms and limits
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, d, z", [
    ("jiq", 1, 0), ("jiq_pod", 2, 0), ("jiq_original", 1, 0), ("jiq_threshold", 1, 1),
    ("jiq_sqd", 2, 0),
])
def test_busy_fraction_is_lam(policy, d, z):
    # work conservation: the time-average fraction of busy servers is lam, whatever the policy
    lam = 0.8
    res = simulate(200, lam, policy, 10, d=d, z=z, events=10_000_000, seed=23)
    assert_within_se(res.tail[0], lam, res.tail_se[0], what=f"{policy} s_1")
    # Little's law: mean queue = lam * mean response
    assert_within_se(res.mean_queue, lam * res.mean_response,
                     math.hypot(res.mean_queue_se, lam * res.mean_response_se), what="Little")
    # a response is a wait plus one Exp(1) service
    assert_within_se(res.mean_response - res.mean_wait, 1.0,
                     math.hypot(res.mean_response_se, res.mean_wait_se), what="service time")


def test_low_load_response_is_one_service():
    # lam -> 0: an arriving task (almost) always finds an idle server. The mean-field excess
    # T - 1 = lam p0 / (1 - lam p0) is the allowance: not 0, as p0 tends to 2 / (pi r), not 0
    # (at low load an I-queue's length is a nearly unbiased random walk, widely spread), so
    # here it is 1.3e-3
    lam = 0.02
    res = simulate(200, lam, "jiq", 10, events=2_000_000, seed=24)
    excess = mf.fixed_point("jiq", lam, 10).mean_response - 1.0 if mf else lam
    assert 0 < excess < 2 * lam / (math.pi * 10)
    assert_within_se(res.mean_response, 1.0, res.mean_response_se, allowance=excess,
                     what="T at lam = 0.02")
    assert_within_se(res.mean_wait, 0.0, res.mean_wait_se, allowance=excess,
                     what="wait at lam = 0.02")


def test_one_scheduler_is_centralized_jiq_approaching_zero_wait():
    # M = 1 (r = N): a task waits only when all N servers are busy, so the mean response falls
    # to 1 as N grows (Stolyar). lam = 0.9: check it falls from N = 10 to N = 40.
    lam = 0.9
    small = simulate(10, lam, "jiq", 10, events=4_000_000, seed=25)
    large = simulate(40, lam, "jiq", 40, events=4_000_000, seed=26)
    assert small.n_schedulers == 1 and large.n_schedulers == 1
    gap = small.mean_response - large.mean_response
    assert gap > 4 * math.hypot(small.mean_response_se, large.mean_response_se), (small, large)
    assert large.mean_response - 1.0 < 0.5 * (small.mean_response - 1.0)
    assert large.mean_response >= 1.0 - 4 * large.mean_response_se
    # N = 20000 (r > 10**4: the warm start is the r -> infinity limit): no task waits
    huge = simulate(20_000, lam, "jiq", 20_000, events=2_000_000, seed=27)
    assert huge.init_used == "large_r_limit" and huge.n_schedulers == 1
    assert_within_se(huge.mean_response, 1.0, huge.mean_response_se, what="T, M = 1, N = 2e4")
    assert huge.prob_wait == 0.0 and huge.p0 == 0.0


def test_jiq_pod_with_d_one_equals_jiq_in_law():
    a = simulate(300, 0.9, "jiq", 10, events=20_000_000, seed=27)
    b = simulate(300, 0.9, "jiq_pod", 10, d=1, events=20_000_000, seed=28)
    for key in ("mean_response", "p0", "mean_iqueue", "join_rate", "delete_rate"):
        assert_engines_agree(getattr(a, key), getattr(a, key + "_se"),
                             getattr(b, key), getattr(b, key + "_se"), what=key)
    for i in range(3):
        assert_engines_agree(a.tail[i], a.tail_se[i], b.tail[i], b.tail_se[i], what=f"s_{i + 1}")
    # the probes of a blind task are messages under jiq_pod even for d = 1: 2 per blind task
    assert a.probe_rate == 0.0
    assert_within_se(b.probe_rate, 2 * 0.9 * b.p0, b.probe_rate_se, allowance=0.01,
                     what="jiq_pod d=1 probes = 2 lam p0")


def test_jiq_threshold_with_z_zero_equals_jiq_in_law_and_messages():
    a = simulate(300, 0.9, "jiq", 10, events=20_000_000, seed=29)
    b = simulate(300, 0.9, "jiq_threshold", 10, z=0, events=20_000_000, seed=30)
    for key in ("mean_response", "p0", "mean_iqueue", "join_rate", "delete_rate",
                "messages_per_job"):
        assert_engines_agree(getattr(a, key), getattr(a, key + "_se"),
                             getattr(b, key), getattr(b, key + "_se"), what=key)
    for i in range(3):
        assert_engines_agree(a.tail[i], a.tail_se[i], b.tail[i], b.tail_se[i], what=f"s_{i + 1}")


def test_same_seed_same_result():
    for policy, d, z in (("jiq", 1, 0), ("jiq_pod", 2, 0), ("jiq_original", 1, 0),
                         ("jiq_threshold", 1, 1), ("jiq_sqd", 2, 0)):
        a = simulate(60, 0.8, policy, 6, d=d, z=z, events=300_000, seed=31)
        b = simulate(60, 0.8, policy, 6, d=d, z=z, events=300_000, seed=31)
        for key, x, y in zip(a._fields, a, b):
            assert np.array_equal(x, y), (policy, key)


# ------------------------------------------------------------------------------------------
# against the mean field (sim.jiq.meanfield)
# ------------------------------------------------------------------------------------------
# Finite-N gaps, MEASURED with this engine (r = 10, seeds 100 + N, 4e8 events at lam = 0.9 and
# 2e8 at lam = 0.5, batch means of 40 batches): N * (agent - mean field) at N = 100, 250, 500,
# 1000, 2000 (SE in brackets), and c fitted to gap = c / N by weighted least squares:
#
#   jiq, 0.9      T   +5.75(.10) +5.97(.27) +4.84(.49) +8.78(1.0) +7.83(1.9)  c = +5.78
#                 p0  +0.47(.02) +0.57(.07) +0.29(.13) +1.30(.27) +0.93(.50)  c = +0.48
#                 s2  +0.90(.03) +0.99(.08) +0.65(.14) +1.83(.31) +1.57(.58)  c = +0.91
#                 del -0.48(.00) -0.48(.01) -0.47(.01) -0.54(.02) -0.49(.05)  c = -0.48
#   jiq, 0.5      T   -0.26(.01) -0.25(.03) -0.27(.06) -0.21(.16) -0.43(.27)  c = -0.26
#                 p0  -0.95(.01) -0.95(.02) -0.94(.04) -1.03(.08) -1.04(.15)  c = -0.95
#                 s2  -0.14(.00) -0.14(.01) -0.15(.02) -0.12(.04) -0.18(.07)  c = -0.14
#                 del -0.34(.00) -0.33(.01) -0.35(.01) -0.39(.02) -0.37(.04)  c = -0.34
#   jiq_pod, 0.9  T   +5.21(.06) +5.26(.15) +5.14(.29) +5.99(.53) +6.33(.92)  c = +5.22
#                 p0  +1.18(.03) +1.31(.07) +1.28(.14) +1.70(.27) +1.87(.46)  c = +1.21
#                 s2  +2.09(.03) +2.24(.08) +2.21(.17) +2.73(.31) +2.95(.55)  c = +2.11
#                 del -1.03(.00) -1.06(.01) -1.06(.02) -1.11(.03) -1.14(.05)  c = -1.03
#   jiq_pod, 0.5  T   +0.01(.01) +0.04(.03) -0.02(.05) -0.13(.12) -0.31(.23)  c = +0.01
#                 p0  -0.94(.01) -0.95(.02) -0.97(.03) -0.88(.07) -1.18(.13)  c = -0.95
#                 s2  +0.00(.00) +0.01(.01) +0.01(.01) -0.03(.02) -0.06(.04)  c = +0.00
#                 del -0.48(.00) -0.48(.01) -0.47(.02) -0.45(.03) -0.59(.05)  c = -0.48
#   jiq_sqd, 0.9  T   +8.44(.08) +8.54(.21) +7.53(.30) +9.85(.75) +9.81(1.4)  c = +8.42
#   (d = 2)       p0  +2.00(.03) +2.13(.09) +1.75(.13) +2.79(.31) +2.74(.62)  c = +2.01
#                 s2  +2.33(.03) +2.47(.09) +2.11(.13) +3.09(.31) +3.07(.61)  c = +2.34
#                 del -0.54(.00) -0.55(.00) -0.58(.01) -0.57(.01) -0.56(.02)  c = -0.54
#   jiq_sqd, 0.5  T   -0.08(.01) -0.07(.03) -0.13(.06) -0.22(.10) -0.13(.22)  c = -0.08
#                 p0  -0.28(.00) -0.30(.01) -0.31(.01) -0.33(.02) -0.30(.04)  c = -0.29
#                 s2  -0.04(.00) -0.04(.00) -0.05(.00) -0.05(.01) -0.06(.02)  c = -0.04
#                 del -0.10(.00) -0.11(.00) -0.11(.00) -0.12(.01) -0.11(.01)  c = -0.10
#
# so the gap shrinks like 1/N. The join rate is q_1 = s_1 - s_2 with s_1 = lam exactly (work
# conservation at any N): its gap is minus that of s_2 (measured c: -0.92, +0.14, -2.12, +0.00,
# -2.35, +0.05); the probe rate of jiq_pod is 2 d lam p0 exactly (arrivals see time averages),
# so its gap is 2 d lam times that of p0, and that of jiq_sqd is 2 d q_1 (every join samples d
# I-queues), 2 d times that of the join rate; the mean I-queue length is r (1 - s_1) =
# r (1 - lam), no gap. The
# allowance at N is the largest measured N * |gap| over N >= 250 (covering the next-order terms
# the fit misses) divided by N.
FINITE_N_GAP = {  # (policy, lam) -> quantity -> max over N >= 250 of N * |gap|
    ("jiq", 0.9): {"mean_response": 8.78, "p0": 1.30, "s_2": 1.83, "delete_rate": 0.54},
    ("jiq", 0.5): {"mean_response": 0.43, "p0": 1.04, "s_2": 0.18, "delete_rate": 0.39},
    ("jiq_pod", 0.9): {"mean_response": 6.33, "p0": 1.87, "s_2": 2.95, "delete_rate": 1.14},
    ("jiq_pod", 0.5): {"mean_response": 0.31, "p0": 1.18, "s_2": 0.06, "delete_rate": 0.59},
    ("jiq_sqd", 0.9): {"mean_response": 9.85, "p0": 2.79, "s_2": 3.09, "delete_rate": 0.58},
    ("jiq_sqd", 0.5): {"mean_response": 0.22, "p0": 0.33, "s_2": 0.06, "delete_rate": 0.12},
}


@pytest.mark.parametrize("policy, d, lam", sorted((p, 1 if p == "jiq" else 2, lam)
                                                  for p, lam in FINITE_N_GAP))
def test_agent_matches_mean_field_at_large_n(policy, d, lam):
    n = 1000
    fp = mf.fixed_point(policy, lam, 10, d)
    res = simulate(n, lam, policy, 10, d=d, events=40_000_000, seed=40)
    assert res.init_used == "meanfield"
    c = dict(FINITE_N_GAP[(policy, lam)])
    c["join_rate"] = c["s_2"]
    c["probe_rate"] = {"jiq": 0.0, "jiq_pod": 2 * d * lam * c["p0"],
                       "jiq_sqd": 2 * d * c["s_2"]}[policy]
    checks = [("mean_response", res.mean_response, res.mean_response_se, fp.mean_response),
              ("p0", res.p0, res.p0_se, fp.p0),
              ("s_2", res.tail[1], res.tail_se[1], fp.tail[1]),
              ("join_rate", res.join_rate, res.join_rate_se, fp.join_rate),
              ("delete_rate", res.delete_rate, res.delete_rate_se, fp.delete_rate),
              ("probe_rate", res.probe_rate, res.probe_rate_se, fp.probe_rate)]
    for what, est, se, truth in checks:
        if what == "probe_rate" and policy == "jiq":
            assert est == 0.0 == truth
            continue
        assert_within_se(est, truth, se, allowance=c[what] / n, what=f"{policy} {what}")
    assert_within_se(res.mean_iqueue, fp.mean_iqueue, res.mean_iqueue_se, what="mean_iqueue")
    assert fp.mean_iqueue == pytest.approx(10 * (1 - lam))


# ------------------------------------------------------------------------------------------
# API and bad input
# ------------------------------------------------------------------------------------------
def test_run_task_returns_the_schema_keys_and_extras_as_plain_values():
    task = {"engine": "agent", "policy": "jiq_pod", "n_servers": 40, "lam": 0.8, "r": 10, "d": 2,
                "events": 200_000, "seed": 32, "max_level": 16}
    out = run_task(task)
    assert_plain_row(out, RESULT_KEYS + tuple(k for k in EXTRA_KEYS if k not in RESULT_KEYS))
    assert out["drop_prob"] == 0.0
    assert out["queueing_ratio"] == pytest.approx(out["mean_response"] - 1.0)
    assert out["frac_within_h"] == pytest.approx(1.0 - out["prob_wait"])
    assert run_task(task) == out  # reproducible, bitwise
    assert run_task({**task, "h": 2})["frac_within_h"] is None
    assert run_task({**task, "n_servers": 40.0, "d": 2.0})["mean_response"] == out["mean_response"]


BASE = {"policy": "jiq", "n_servers": 20, "lam": 0.5, "r": 5}


@pytest.mark.parametrize("change, key", [
    ({"r": None}, "r"), ({"r": 0}, "r"), ({"r": -2.0}, "r"), ({"r": 3}, "r"),
    ({"r": 40}, "r"), ({"r": float("inf")}, "r"), ({"r": "5"}, "r"),
    ({"policy": "jiq_pod", "d": 0}, "d"), ({"policy": "jiq_pod", "d": 21}, "d"),
    ({"policy": "jiq_pod"}, "d"), ({"policy": "jiq_sqd", "d": 5}, "d"),
    ({"policy": "jiq_sqd", "d": 0}, "d"), ({"policy": "jiq_sqd", "d": 1.5}, "d"),
    ({"policy": "jiq_threshold"}, "z"), ({"policy": "jiq_threshold", "z": -1}, "z"),
    ({"policy": "jiq_threshold", "z": 0.5}, "z"),
    ({"lam": 1.0}, "lam"), ({"lam": -0.1}, "lam"), ({"lam": float("nan")}, "lam"),
    ({"lam": "0.5"}, "lam"), ({"policy": "pod"}, "policy"), ({"n_servers": 0}, "n_servers"),
    ({"n_servers": 2.5}, "n_servers"),
])
def test_check_task_names_the_bad_key(change, key):
    task = {**BASE, **change}
    if task.get("r", 0) is None:
        del task["r"]
    with pytest.raises(ValueError, match=rf"^{key}=") as info:
        check_task(task)
    assert "\n" not in str(info.value)


def test_check_task_accepts_good_tasks():
    for task in (BASE, {**BASE, "r": 20}, {**BASE, "r": 0.5}, {**BASE, "lam": 0.0},
                 {**BASE, "policy": "jiq_pod", "d": 20}, {**BASE, "policy": "jiq_sqd", "d": 4},
                 {**BASE, "policy": "jiq_threshold", "z": 0}, {**BASE, "n_servers": 20.0}):
        check_task(task)


@pytest.mark.parametrize("kw, key", [
    ({"r": 3}, "r"), ({"policy": "jiq_sqd", "d": 9}, "d"), ({"policy": "jiq_threshold", "z": -1}, "z"),
    ({"lam": 1.2}, "lam"), ({"events": 10}, "events"), ({"seed": -1}, "seed"),
    ({"init": "full"}, "init"), ({"n_batches": 1}, "n_batches"), ({"max_level": 0}, "max_level"),
    ({"policy": "jsq"}, "policy"),
])
def test_simulate_bad_input_names_the_key(kw, key):
    args = {"n_servers": 20, "lam": 0.5, "policy": "jiq", "r": 5, "events": 10_000, "seed": 1}
    args.update(kw)
    with pytest.raises(ValueError, match=rf"^{key}="):
        simulate(**args)


def test_zero_load_runs_and_starts_empty():
    res = simulate(20, 0.0, "jiq", 5, events=10_000, seed=33)
    assert res.init_used == "empty" and res.n_jobs == 0
    assert res.tail[0] == 0.0 and res.p0 == 0.0 and res.mean_iqueue == 5.0
