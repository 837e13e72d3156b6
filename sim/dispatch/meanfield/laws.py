"""The ``meanfield`` engine's rows of single-task jobs under a service law other than the
exponential, and of ``ll`` under any law: the limits of docs/service.md ("Limits"), one per
policy that has one here.

- ``random``: each server is an M/G/1 queue at every N (Poisson thinning): E[W] by
  Pollaczek-Khinchine (:func:`sim.core.service.mg1_wait`), P(W > 0) = lam, the mean queue
  lam E[T]; the tail of the queue length by the cavity queue at ``d = 1``, which is the M/G/1
  queue (:func:`sim.dispatch.meanfield.cavity.fixed_point`).
- ``pod`` (SQ(d)): the cavity queue solved to its fixed point
  (:mod:`sim.dispatch.meanfield.cavity`; Bramson, Lu & Prabhakar): E[T], E[W], P(W > 0) = u_1^d,
  the mean queue and the tail u_i.
- ``ll`` (LL(d), least work of ``d`` sampled servers): the workload fixed point
  (:mod:`sim.dispatch.meanfield.least_loaded`; Hellemans & Van Houdt), every law the
  exponential included (it has no other limit here): E[T] = 1 + E[W], P(W > 0) = lam^d, the
  mean queue lam E[T] (Little's law per server). The queue lengths are not modelled (the state
  is the workload): the row's tail is None, and so is ``frac_within_h`` but at ``h = 1``
  (1 - P(W > 0)).

The exponential law of ``random`` and ``pod`` stays with :mod:`sim.dispatch.meanfield.pod`
(closed forms), whose rows this module never writes. The sweep's checks (``sim.dispatch.
check_task``) have refused what these limits do not model (k-task jobs, a buffer, responses,
``lam = 0``) before any compute.
"""
from __future__ import annotations

from sim.core.declare import POSITIVE_LOAD_BELOW_ONE
from sim.core.results import exact_row
from sim.core.service import mg1_wait
from sim.core.service_keys import law_of
from sim.core.settings import RunSettings
from sim.dispatch.meanfield import cavity, least_loaded
from sim.dispatch.meanfield._common import _check_d
from sim.dispatch.policies import policy_of

__all__ = ["run_task"]


def _tail(u, max_level: int) -> list[float]:
    """``u_1 .. u_max_level`` of a tail ``u`` (``u_0 = 1`` first), zeros past its end."""
    vals = [float(v) for v in u[1:max_level + 1]]
    return vals + [0.0] * (max_level - len(vals))


def _at(u, i: int) -> float:
    return float(u[i]) if i < len(u) else 0.0


def run_task(task: dict) -> dict:
    """The limit row of one task (module docstring; keys of docs/results-schema.md)."""
    pol = policy_of(task)
    lam = POSITIVE_LOAD_BELOW_ONE.check("lam", task["lam"])
    law = law_of(task)
    settings = RunSettings.from_task(task)
    max_level, h = settings.max_level, settings.h
    d = _check_d(task["d"]) if pol.samples else 1
    messages = pol.messages(int(task["n_servers"]), 1, d)
    if pol.by_work:  # ll: the workload fixed point
        fp = least_loaded.workload_fixed_point(law, lam, d)
        return exact_row(
            mean_response=float(fp.mean_response), mean_wait=float(fp.mean_wait),
            prob_wait=float(fp.prob_wait), mean_queue=lam * float(fp.mean_response), tail=None,
            queueing_ratio=float(fp.mean_wait), drop_prob=0.0,
            frac_within_h=1.0 - float(fp.prob_wait) if h == 1 else None,
            messages_per_job=messages,
            ci_method=f"LL(d) workload fixed point (N = infinity; numerical error {fp.num_error:.1g})")
    cav = cavity.fixed_point(law, lam, d)
    if not pol.samples:  # random: M/G/1 per server, exact at every N
        wait = mg1_wait(law, lam)[0]
        return exact_row(
            mean_response=1.0 + wait, mean_wait=wait, prob_wait=lam, mean_queue=lam * (1.0 + wait),
            tail=_tail(cav.tail, max_level), queueing_ratio=wait, drop_prob=0.0,
            frac_within_h=1.0 - _at(cav.tail, h), messages_per_job=messages,
            ci_method="closed form (M/G/1 per server, Pollaczek-Khinchine; tail by the cavity "
                      f"queue at d = 1, numerical error {cav.num_error:.1g})")
    return exact_row(
        mean_response=float(cav.mean_response), mean_wait=float(cav.mean_wait),
        prob_wait=float(cav.prob_wait), mean_queue=float(cav.mean_queue),
        tail=_tail(cav.tail, max_level), queueing_ratio=float(cav.mean_wait), drop_prob=0.0,
        frac_within_h=1.0 - _at(cav.tail, h) ** d, messages_per_job=messages,
        ci_method=f"cavity queue (mean field, N = infinity; numerical error {cav.num_error:.1g})")
