"""The tie rule of the slotted engine's true-state policies (``ties`` of ``jsq`` and ``pod``).

``independent`` (the default) must reproduce the engine's numbers from before the rule existed,
bit for bit; ``shared`` must make every dispatcher that sees the same candidates pick the same
server (JSQ: the paper's "single shortest queue"), uniformly among the tied ones; with one
dispatcher the two rules are the same policy. Every run here is small (well under a second
once compiled).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from sim.core.rng import seed_state
from sim.led import _slotted_kernel as K
from sim.led.slotted import run_task, simulate
from tests.helpers import ALPHA, assert_engines_agree

RATES = [1.0] * 50 + [3.0] * 50  # led_heterogeneous's servers
BASE = dict(engine="slotted", n_servers=100, m_dispatchers=10, service_rates=RATES,
            events=50000, n_batches=20, max_level=64)

# (task, mean_total_queue, mean_response, messages_per_job) as the engine returned them before
# the tie rule was added (same code path, recorded with this seed and these settings): the
# default must still give exactly these floats
GOLDEN = [
    (dict(BASE, policy="jsq", lam=0.5, seed=11),
     343.7983844911147, 4.438534818036837, 20.002536803853356),
    (dict(BASE, policy="pod", d=2, lam=0.5, seed=11),
     467.4252415458937, 5.675286773749267, 0.40005725710675655),
    (dict(engine="slotted", policy="jsq", n_servers=6, m_dispatchers=3, lam=0.8, events=30000,
          seed=5, service_dist="geometric", n_batches=20, max_level=64),
     17.0057, 4.545061067959816, 5.98415984660062),
]


def _same_rows(a: dict, b: dict) -> None:
    for key in a:
        if key == "wall_time":
            continue
        va, vb = a[key], b[key]
        if isinstance(va, float) and np.isnan(va):
            assert isinstance(vb, float) and np.isnan(vb), key
        else:
            assert va == vb, (key, va, vb)


@pytest.mark.parametrize("task, total_q, response, msgs", GOLDEN,
                         ids=["jsq-N100", "pod-N100", "jsq-N6-geometric"])
def test_default_reproduces_the_engine_before_the_tie_rule(task, total_q, response, msgs):
    row = run_task(task)
    assert (row["mean_total_queue"], row["mean_response"], row["messages_per_job"]) == (
        total_q, response, msgs)
    # and the default is the independent rule, named or not
    _same_rows(row, run_task({**task, "ties": "independent"}))


def test_shared_rule_changes_the_run():
    task = GOLDEN[0][0]
    shared = run_task({**task, "ties": "shared"})
    assert shared["mean_response"] != GOLDEN[0][2]


@pytest.mark.parametrize("policy, kw", [("jsq", {}), ("pod", dict(d=8))])
def test_shared_rule_sends_every_dispatcher_to_one_server(policy, kw):
    # at load 0.3 many queues are tied at the minimum in most slots: the independent rule spreads
    # the dispatchers over them, the shared one never does (pod with d = N samples every server,
    # so every dispatcher compares the same candidates)
    rates = [1.0] * 4 + [2.0] * 4
    run = dict(events=2**13, n_windows=64, seed=3, debug=True, **kw)
    shared = simulate(rates, 0.3, policy, 4, ties="shared", **run)
    indep = simulate(rates, 0.3, policy, 4, ties="independent", **run)
    assert shared.herd_splits == 0
    assert indep.herd_splits > 0.1 * 2**13
    # the counter is a debug output of the true-state policies only
    assert simulate(rates, 0.3, policy, 4, ties="shared", **{**run, "debug": False}).herd_splits == -1


@pytest.mark.parametrize("policy", [K.JSQ, K.POD])
def test_shared_pick_is_one_uniform_tied_server(policy):
    # five tied shortest queues (value 1) among ten; six dispatchers per slot, 4000 slots
    q = np.array([3, 1, 4, 1, 5, 1, 2, 1, 6, 1], dtype=np.int64)
    tied = np.flatnonzero(q == 1)
    state = seed_state(21)
    counts = np.zeros(q.size, dtype=np.int64)
    for _ in range(4000):
        picks = K.choose_true(policy, q, q.size, K.SHARED, 6, state)
        assert len(set(picks)) == 1  # the same server at every dispatcher
        counts[picks[0]] += 1
    assert counts.sum() == counts[tied].sum()  # always a shortest queue
    assert sps.chisquare(counts[tied]).pvalue > ALPHA  # uniform among the tied ones


def test_independent_pick_spreads_over_the_ties():
    q = np.array([3, 1, 4, 1, 5, 1, 2, 1, 6, 1], dtype=np.int64)
    state = seed_state(22)
    picks = [K.choose_true(K.JSQ, q, 2, K.INDEPENDENT, 6, state) for _ in range(200)]
    assert all(q[n] == 1 for p in picks for n in p)
    assert sum(len(set(p)) > 1 for p in picks) > 150  # P(all 6 equal) = 5**-5


def test_pod_shared_ties_only_within_its_own_sample():
    # distinct samples still differ: the shared rule orders tied servers, it does not herd
    q = np.zeros(10, dtype=np.int64)
    state = seed_state(23)
    picks = [K.choose_true(K.POD, q, 2, K.SHARED, 6, state) for _ in range(200)]
    assert sum(len(set(p)) > 1 for p in picks) > 150


def test_one_dispatcher_jsq_rules_coincide_bitwise():
    # with M = 1 the shared draw is the dispatcher's own draw, at the same place in the stream
    task = dict(engine="slotted", policy="jsq", n_servers=5, service_rates=[1, 1, 2, 2, 3],
                m_dispatchers=1, lam=0.8, events=2**14, seed=9, n_batches=20, max_level=64)
    _same_rows(run_task({**task, "ties": "shared"}), run_task(task))


def test_one_dispatcher_pod_rules_agree():
    # with M = 1 the tie-break of pod's sample is a uniform choice either way (same law, other
    # random numbers): the means agree within their standard errors
    kw = dict(events=2**16, d=2)
    a = simulate([1, 1, 2, 2, 3], 0.8, "pod", 1, ties="shared", seed=1, **kw)
    b = simulate([1, 1, 2, 2, 3], 0.8, "pod", 1, ties="independent", seed=2, **kw)
    assert_engines_agree(a.mean_total_queue, a.mean_total_queue_se, b.mean_total_queue,
                         b.mean_total_queue_se, "pod, M = 1: shared vs independent ties")
