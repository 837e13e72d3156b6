r"""Mean field of single-task dispatching with a finite buffer ``b`` per server (``random``,
``pod``, ``jsq``; the task in service included, a task that would exceed it is dropped).

Power-of-d (``random`` is ``d = 1``): with ``s_i`` the fraction of servers holding at least ``i``
tasks (``s_0 = 1``, ``s_{b+1} = 0``), a task probes ``d`` servers and joins a shortest one if it
holds fewer than ``b`` tasks; all ``d`` full (probability ``s_b^d``) drops it. The ODE is the
supermarket one cut at ``b``::

    ds_i/dt = lam (s_{i-1}^d - s_i^d) - (s_i - s_{i+1}),   i = 1..b,   s_{b+1} = 0

(the arrivals that would raise a server from ``b`` to ``b + 1`` are the dropped ones). Summing it
over the levels ``i >= j`` gives, at the fixed point, the flow balance through level ``j``::

    s_j = lam (s_{j-1}^d - s_b^d),   j = 1..b,

so the whole fixed point is a function of ``x = s_b``: run the recursion from ``s_0 = 1`` and solve
``s_b(x) = x``. Each ``s_j(x)`` decreases in ``x``, so ``s_b(x) - x`` decreases strictly from
``s_b(0) > 0`` to ``s_b(1) - 1 < 0``: one root in (0, 1), found by ``scipy.optimize.brentq``. Any
``lam > 0`` is allowed (the buffer keeps the system stable); ``d = 1`` is the M/M/1/b queue,
``s_i = (lam^i - lam^{b+1}) / (1 - lam^{b+1})``, which the tests check.

JSQ: below capacity (``lam < 1``) every task finds an idle server: ``s_1 = lam``, nothing queues
and nothing drops. Above it (``lam > 1``) every server is busy and the shortest queues fill level
by level: in the limit every server holds ``b`` tasks, the departures (rate 1 per server) are the
admitted flow, and a fraction ``1 - 1/lam`` of the tasks drops; an admitted task joins at position
``b``. ``lam = 1`` is the boundary: ``s_1 = 1``, no queueing, no drop (the limit from below).

Per admitted task (PASTA): the position ``p = i + 1`` of a task that joins a server with ``i``
tasks has probability ``(s_i^d - s_{i+1}^d) / (1 - s_b^d)``, ``i = 0..b-1``; its response is
Gamma(p, 1). ``mean_response = E[Q] / (lam (1 - drop))`` by Little's law (``E[Q] = sum s_i``),
which equals the mean of that law; ``prob_wait`` is the fraction of *admitted* tasks that wait
(as the simulators count it); ``frac_within_h`` that of admitted tasks at position ``<= h``.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from sim.core.responses import Mixture, exact_response_columns
from sim.core.results import exact_row
from sim.core.settings import DEFAULTS, RunSettings
from sim.dispatch import MODEL
from sim.dispatch.meanfield._common import CI_METHOD
from sim.dispatch.policies import policy as policy_record
from sim.dispatch.policies import served_by

__all__ = ["fixed_point", "buffer_values", "buffer_positions", "BUFFER_POLICIES", "run_task"]

#: the single-task policies with a buffered mean field here: those whose meanfield entry
#: takes a buffer b
BUFFER_POLICIES = served_by("meanfield", lambda p: "b" in p.engines["meanfield"])


def _check(policy, lam, d, b) -> tuple[float, int, int]:
    name = getattr(policy, "name", policy)
    if name not in BUFFER_POLICIES:
        raise ValueError(f"policy={name!r} has no buffered mean field here (only {', '.join(BUFFER_POLICIES)})")
    pol = policy_record(name)
    if b is None:
        raise ValueError("b=None: the buffered mean field needs b (tasks per server)")
    return (MODEL.param("lam").check("lam", lam), MODEL.param("d").check("d", d) if pol.samples else 1,
            MODEL.param("b").check("b", b))


def _pod_recursion(lam: float, d: int, b: int, x: float) -> np.ndarray:
    s = np.empty(b)
    prev, xd = 1.0, x**d
    for j in range(b):
        prev = lam * (max(prev, 0.0) ** d - xd)  # clamped: s_j(x) stays nonincreasing in x
        s[j] = prev
    return s


def fixed_point(policy: str, lam: float, d: int | None, b: int) -> np.ndarray:
    """Fixed point ``s_1..s_b`` (levels above ``b`` are 0)."""
    lam, d, b = _check(policy, lam, d, b)
    if lam == 0.0:
        return np.zeros(b)
    if policy_record(policy).probes_all:
        s = np.zeros(b)
        if lam <= 1.0:
            s[0] = lam
        else:
            s[:] = 1.0
        return s
    # s_b(x) - x is strictly decreasing on [0, 1] (module docstring): one root
    x = brentq(lambda x: _pod_recursion(lam, d, b, x)[-1] - x, 0.0, 1.0, xtol=1e-16, rtol=1e-15)
    s = _pod_recursion(lam, d, b, x)
    s[-1] = x
    return np.clip(s, 0.0, 1.0)


def buffer_positions(policy: str, lam: float, d: int | None, b: int) -> np.ndarray:
    """``w[p - 1]``: probability that an admitted task joins at position ``p = 1..b``."""
    lam, d, b = _check(policy, lam, d, b)
    s = fixed_point(policy, lam, d, b)
    w = np.zeros(b)
    if policy_record(policy).probes_all:
        w[b - 1 if lam > 1.0 else 0] = 1.0
        return w
    sd = np.concatenate(([1.0], s, [0.0])) ** d
    w[:] = sd[:-2] - sd[1:-1]
    return w / w.sum()


def buffer_values(policy: str, lam: float, d: int | None, b: int, h: int = DEFAULTS.h) -> dict:
    """The mean-field estimates of a buffered single-task system (the row's keys)."""
    lam, d, b = _check(policy, lam, d, b)
    s = fixed_point(policy, lam, d, b)
    if policy_record(policy).probes_all:
        drop = max(0.0, 1.0 - 1.0 / lam) if lam > 0 else 0.0
    else:
        drop = float(s[-1] ** d)
    w = buffer_positions(policy, lam, d, b)
    pos = np.arange(1, b + 1)
    mean_queue = float(s.sum())
    admitted = lam * (1.0 - drop)
    mean_response = mean_queue / admitted if admitted > 0 else 1.0
    return {
        "tail": s,
        "mean_queue": mean_queue,
        "mean_response": float(mean_response),
        "mean_wait": float(mean_response - 1.0),
        "prob_wait": float(w[1:].sum()),
        "drop_prob": float(drop),
        "frac_within_h": float(w[: min(int(h), b)].sum()),
        "positions": w,
        "mean_position": float((pos * w).sum()),
    }


def run_task(task: dict) -> dict:
    """Mean-field row of a buffered single-task ``random``/``pod``/``jsq`` task (the result keys
    of the other meanfield rows; with ``responses: true`` also the exact response columns of
    the admitted tasks' law). ``k > 1`` with a buffer is refused: a job is dropped when any
    of its tasks would exceed the buffer, which this limit does not model."""
    pol = policy_record(task["policy"])
    if (task.get("k") or 1) != 1:
        raise ValueError(f"k={task['k']!r} with b={task['b']!r}: the buffered mean field has "
                         "single-task jobs only")
    settings = RunSettings.from_task(task)
    h, max_level = settings.h, settings.max_level
    d = task.get("d") if pol.samples else None
    v = buffer_values(pol, task["lam"], d, task["b"], h)
    tail = np.zeros(max_level)
    m = min(max_level, v["tail"].size)
    tail[:m] = v["tail"][:m]
    n = int(task["n_servers"])
    out = exact_row(
        mean_response=v["mean_response"], mean_wait=v["mean_wait"], prob_wait=v["prob_wait"],
        mean_queue=v["mean_queue"], tail=tail,
        queueing_ratio=v["mean_response"] - 1.0,  # H_1 = 1
        drop_prob=v["drop_prob"], frac_within_h=v["frac_within_h"],
        messages_per_job=pol.messages(n, 1, 1 if d is None else int(d)),
        # (a fixed text naming the law: archived rows carry it, so it stays as it is)
        ci_method=CI_METHOD + "; finite buffer b (flow-balance root, sim/dispatch/buffer_meanfield.py)",
    )
    if task.get("responses"):
        out.update(exact_response_columns(Mixture.of_positions(v["positions"])))
        out["ci_method"] += "; response law exact (mean field)"
    return out
