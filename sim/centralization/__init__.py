"""Partial centralization (Tsitsiklis & Xu, "On the power of (even a little) centralization in
distributed processing"): the model.

- :mod:`~sim.centralization.theory`: closed-form invariant state and fluid model (pure scipy;
  the analysis imports it too).
- :mod:`~sim.centralization.simulate`: agent and occupancy simulators and the three engine
  runners (``agent``, ``occupancy``, ``meanfield``).
- :mod:`~sim.centralization._kernel`: their compiled event loops.

Model
-----
N stations. Station n receives tasks as a Poisson process of rate ``lam`` (0 <= lam < 1) and has
a *local* server, a Poisson clock of rate ``1 - p``: at a tick, if its queue is non-empty one task
(the head, FIFO) leaves, else the tick is wasted. A *central* server, a Poisson clock of rate
``N * p``, removes at each tick the head task of a station drawn uniformly among those with a
longest queue (wasted when the whole system is empty). ``p`` in [0, 1] is the central fraction of
the processing. A task leaves at the tick that serves it: service takes no time, so a task's
*wait* is its whole sojourn and ``mean_wait == mean_response`` here.

State: ``s_i`` = fraction of stations with at least ``i`` tasks (``s_0 = 1``),
``v_i = sum_{j >= i} s_j`` (``v_1`` = mean queue length per station).

Invariant state (Theorem 2 of the paper)
----------------------------------------
* ``p = 0``: ``s_i = lam**i`` (independent M/M/1 queues);
* ``lam <= p``: ``s_i = 0`` for ``i >= 1``;
* ``0 < p < lam``: ``s_i = (lam * s_{i-1} - p) / (1 - p)`` from ``s_0 = 1`` while positive, 0 after;
  for ``lam != 1 - p`` this is ``s_i = (1-lam)/(1-p-lam) * (lam/(1-p))**i - p/(1-p-lam)`` up to
  ``i*(p, lam) = floor(log_{lam/(1-p)} (p / (1-lam)))`` (``floor((1-p)/p)`` at ``lam = 1 - p``).
* Corollary 3: for ``p > 0``, ``v_1 ~ log_{1/(1-p)} (1/(1-lam))`` as ``lam -> 1`` (against
  ``lam/(1-lam)`` at ``p = 0``).

Fluid model and its discontinuity
---------------------------------
In ``v`` coordinates (paper, eq. 3.3-3.6)::

    dv_i/dt = lam (v_{i-1} - v_i) - (1-p)(v_i - v_{i+1}) - g_i(v),   v_0 = v_1 + 1,
    g_i = p                     if v_i > 0,
          min(lam v_{i-1}, p)   if v_i = 0 < v_{i-1},
          0                     if v_i = v_{i-1} = 0,

implemented literally in :func:`fluid_drift_v`. The drift jumps where a level empties, so it is not
integrated as one smooth ODE. In tail coordinates, with ``m`` the highest non-empty level
(``s_m > 0 = s_{m+1}``), the central term of level ``i`` is ``g_i - g_{i+1}``: 0 below ``m``,
``p - min(lam s_m, p)`` at ``m``, and level ``m + 1`` stays at 0 as long as ``lam s_m <= p``
(the central server removes the tasks that would start level ``m + 1`` as fast as they arrive:
the *sliding mode*, ``g_{m+1} = lam v_m``). Between switches the system is therefore *linear* of
dimension ``m`` (a "regime")::

    ds_i/dt = lam (s_{i-1} - s_i) - (1-p)(s_i - s_{i+1}),          i < m,
    ds_m/dt = lam s_{m-1} - (1-p) s_m - p                         (sliding: lam s_m <= p),

and :func:`solve_fluid` integrates one regime at a time with ``scipy.integrate.solve_ivp``
(BDF, exact tridiagonal Jacobian), locating the two switching surfaces with terminal events:

* ``s_m`` reaches 0 from above: the top level empties, ``m -> m - 1``;
* ``lam s_m - p`` crosses 0 upwards: arrivals to the top queues outrun the central server,
  level ``m + 1`` starts to fill from 0, ``m -> m + 1``.

The sliding mode is thus implemented exactly (level ``m + 1`` is identically 0, not a stiff
approximation), and the paper's case ``g_i = min(lam v_{i-1}, p)`` is what holds it there. Two
small tolerances (a level opens when ``lam s_m - p > 1e-12``, the top level is dropped at
``s_m = 1e-14``) stop the infinitely many switches (Zeno) of the degenerate case ``s_{i*} = 0``
(e.g. ``lam = 1 - p`` with ``(1-p)/p`` an integer); see :func:`solve_fluid`. With
``p = 0`` the drift is continuous (no central term): one linear regime, cut at a level ``L`` with
``s_{L+1} = 0`` where the invariant tail is below 1e-16 (as :mod:`sim.dispatch.meanfield` does). From any
finite start the solution converges to the invariant state (Theorem 5); the tests check that
from several starts, and :func:`fluid_fixed_point` finds the drift's zero without the closed form
(solving each regime's linear equations for its equilibrium and keeping the first consistent one).

"""
from __future__ import annotations

__all__ = ["check_task"]


def check_task(task: dict) -> None:
    """``ValueError`` naming the key and value if a partial-centralization task cannot run."""
    lam, p = task["lam"], task["p"]
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"lam={lam!r} must satisfy 0 <= lam < 1")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p={p!r} must be a number in [0, 1]")
    if task["engine"] == "agent" and task["n_servers"] > 2**31 - 1:
        raise ValueError(f"n_servers={task['n_servers']!r}: the agent engine needs n_servers < 2**31")
