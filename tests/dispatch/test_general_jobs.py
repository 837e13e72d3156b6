"""The general-size engine for k-task jobs (sim/dispatch/general_jobs.py) against the
exponential k-task engine, the single-task general engine and a literal reference.

- With exponential sizes every policy the exponential engine has (batch-filling,
  batch-sampling, power-of-(kd) per task, random, JSQ) agrees with
  :mod:`sim.dispatch.agent_jobs` at N = 20, lam = 0.7, k = 2 and 4, on the job response, the
  queueing ratio, the task wait, P(wait), the mean queue and s_1, s_2, within 4 combined SE
  (independent runs; no finite-N allowance: one model at one N).
- With k = 1, batch-filling is power-of-d and ll_filling is LL(d) of the single-task engine.
- ll_filling (water-filling by work) against a literal Python simulation of its definition.
- Random routing with a heavy-tailed law: each server is an M^X/G/1 queue whose mean work is
  known in closed form (checked through the mean task wait).
"""
import math

import numpy as np
import pytest

from sim.core.service import sample, service_law
from sim.dispatch import agent_jobs, general
from sim.dispatch.general_jobs import JOBS_POLICIES, simulate
from tests.checks import assert_refused
from tests.helpers import assert_engines_agree, assert_within_se

N, LAM, JOBS = 20, 0.7, 200_000


def _agree(g, e, what, keys):
    for key in keys:
        assert_engines_agree(getattr(g, key), getattr(g, key + "_se"), getattr(e, key),
                             getattr(e, key + "_se"), f"{key}, {what}")
    for i in range(2):
        assert_engines_agree(g.tail[i], g.tail_se[i], e.tail[i], e.tail_se[i], f"s_{i + 1}, {what}")


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("policy", ["batch_filling", "batch_sampling", "pod_per_task", "random",
                                    "jsq"])
def test_exponential_sizes_agree_with_the_exponential_jobs_engine(policy, k):
    d = 2
    g = simulate(N, LAM, policy, k=k, d=d, jobs=JOBS, seed=11)
    e = agent_jobs.simulate(N, LAM, policy, k=k, d=d, events=int(JOBS * (1 + k / LAM)),
                            seed=12, init="empty")
    assert g.expected_max == pytest.approx(sum(1 / j for j in range(1, k + 1)), rel=1e-12)
    _agree(g, e, f"{policy}, k={k}", ("mean_response", "queueing_ratio", "mean_wait",
                                       "mean_task_response", "prob_wait", "mean_queue"))
    assert g.messages_per_job == e.messages_per_job


@pytest.mark.parametrize("jobs_policy, single_policy", [("batch_filling", "pod"),
                                                         ("ll_filling", "ll")])
def test_one_task_jobs_are_the_single_task_policies(jobs_policy, single_policy):
    law = service_law("hyperexponential", service_scv=4)
    g = simulate(N, 0.8, jobs_policy, k=1, d=3, jobs=300_000, service=law, seed=21)
    s = general.simulate(N, 0.8, single_policy, d=3, jobs=300_000, service=law, seed=22)
    _agree(g, s, jobs_policy, ("mean_response", "mean_wait", "prob_wait", "mean_queue"))


def _ll_filling_reference(n, lam, k, d, jobs, law, seed):
    """ll_filling by its definition, in Python: per job one sample of k d distinct servers;
    the tasks in turn to the sampled server whose work runs out first (the first in sample
    order on ties), its work raised by the task's size. Returns the batch means (20) of the
    job response over the jobs after the first tenth."""
    rng = np.random.default_rng(seed)
    sizes = sample(law, jobs * k, seed=seed).reshape(jobs, k)
    gaps = rng.exponential(k / (lam * n), jobs)
    clast = np.zeros(n)
    t = 0.0
    resp = np.empty(jobs)
    for j in range(jobs):
        t += gaps[j]
        samp = rng.choice(n, k * d, replace=False)
        end = np.maximum(clast[samp], t)
        job_end = t
        for i in range(k):
            b = int(np.argmin(end))
            end[b] += sizes[j, i]
            clast[samp[b]] = end[b]
            job_end = max(job_end, end[b])
        resp[j] = job_end - t
    kept = resp[jobs // 10:]
    return kept[: kept.size // 20 * 20].reshape(20, -1).mean(axis=1)


def test_ll_filling_matches_its_literal_definition():
    law = service_law("lognormal", service_scv=2)
    n, lam, k, d = 12, 0.75, 3, 2
    batches = _ll_filling_reference(n, lam, k, d, 25_000, law, seed=31)
    ref, ref_se = batches.mean(), batches.std(ddof=1) / math.sqrt(batches.size)
    g = simulate(n, lam, "ll_filling", k=k, d=d, jobs=400_000, service=law, seed=32)
    assert_engines_agree(g.mean_response, g.mean_response_se, ref, ref_se, "ll_filling")
    # water-filling by work beats batch-filling by queue length on the same sample size
    bf = simulate(n, lam, "batch_filling", k=k, d=d, jobs=400_000, service=law, seed=33)
    assert g.mean_response + 4 * math.hypot(g.mean_response_se, bf.mean_response_se) \
        < bf.mean_response


def test_random_jobs_with_heavy_tails_are_batch_mg1():
    """Random routing of k-task jobs: a server receives X ~ Binomial(k, 1/N) tasks of each job
    (jobs at rate lam N / k), an M^X/G/1 queue of load lam. A task waits for the work found
    (the M/G/1 workload of the batches B = S_1 + ... + S_X, by PASTA lam_b E[B^2] / (2 (1 - lam)),
    E[B^2] = E[X] E[S^2] + E[X(X - 1)]) plus the tasks of its own job placed before it there
    (E[X(X - 1)] / (2 E[X]) of mean size 1): with r = E[X(X - 1)] / E[X] = (k - 1) / N,
    E[W] = (lam E[S^2] + r) / (2 (1 - lam)); r = 0 is Pollaczek-Khinchine."""
    law = service_law("bounded_pareto", service_alpha=1.5, service_upper=20)
    n, lam, k = 10, 0.6, 3
    r = simulate(n, lam, "random", k=k, jobs=600_000, service=law, seed=41)
    want = (lam * law.moment(2) + (k - 1) / n) / (2.0 * (1.0 - lam))
    assert_within_se(r.mean_wait, want, r.mean_wait_se, "E[W], M^X/G/1")
    assert_within_se(r.tail[0], lam, r.tail_se[0], "s_1 = lam")


def test_seed_decides_and_rings_grow():
    law = service_law("hyperexponential", service_scv=16)
    a = simulate(12, 0.9, "random", k=5, jobs=100_000, service=law, seed=7)
    b = simulate(12, 0.9, "random", k=5, jobs=100_000, service=law, seed=7)
    c = simulate(12, 0.9, "random", k=5, jobs=100_000, service=law, seed=8)
    assert a.mean_response == b.mean_response and np.array_equal(a.tail, b.tail)
    assert a.mean_response != c.mean_response
    assert a.tail[30] > 0  # a queue held more than the first capacity (16) minus k


def test_bad_input_is_refused_naming_the_key():
    ok = dict(n_servers=10, lam=0.5, policy="batch_filling", k=2, d=2, jobs=10_000)
    assert_refused(
        (lambda: simulate(**{**ok, "policy": "pod"}),
         r"^policy='pod' is unknown; valid: " + ", ".join(JOBS_POLICIES)),
        (lambda: simulate(**{**ok, "d": 6}), r"^d=6 must be an integer >= 1 with k\*d <= n_servers=10 \(k=2\)$"),
        (lambda: simulate(**{**ok, "k": 11}), r"^k=11 must be an integer with 1 <= k <= n_servers=10$"),
        (lambda: simulate(**{**ok, "lam": 1.2}), r"^lam=1.2 must be a number in \(0, 1\)$"),
        (lambda: simulate(**{**ok, "service": "deterministic"}), r"^service='deterministic' must be a law"),
    )
