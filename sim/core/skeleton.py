"""The skeleton every simulator's ``simulate`` follows, its shared steps written once.

A simulator's run has five steps. Three are the same in every engine and are here; two are the
model's own and stay in its ``simulate``:

1. **validate**: the model's values against its declarations (``MODEL.checked(...)``, which
   refuses in one line naming key and value) and the relations between them (``k <= N``), in
   the model's ``simulate``; then the run settings, here (:class:`Run`, :class:`PathRun`), so
   that nothing starts on bad input;
2. **seed**: the kernel's xoshiro256+ words and any numpy stream of the start, from the one
   seed (:meth:`Run.xoshiro`, :meth:`Run.generator`);
3. **window bounds**: the run's windows of ``2**j`` events and their zeroed per-window series
   (:attr:`Run.bounds`, :meth:`Run.zeros`, :meth:`Run.tail_zeros`, :meth:`Run.recorder`), or a
   path's time grid (:attr:`PathRun.t`, :meth:`PathRun.record`);
4. **the kernel call**, with the model's state and its own arrays: the model's ``simulate``;
5. **epilogue**: the warm-up cut, batch means of the model's ratios, the queue, the tail, the
   response distribution and the CI label (:func:`sim.core.output.epilogue`) with the fields
   every result has (``n_jobs``, ``events_run``, ``sim_time``, ``warmup_time``):
   :meth:`Run.epilogue`; for a path, its sup distance to the limit (:meth:`PathRun.result`).
   The model adds its own fields (messages, counts, what its start was) and builds its result.

So a ``simulate`` reads, top to bottom: the model's checks, ``run = Run(...)``, the start
(``run.xoshiro()``), the arrays (``run.zeros()``), the kernel, ``run.epilogue(...)``, the
result. The draws happen in the order the model's code makes them: :meth:`Run.xoshiro` and
:meth:`Run.generator` only name streams of ``numpy.random.SeedSequence(seed)``, so results are
those of the same seed before.

Nothing here knows a model or an engine, and nothing here is compiled.
"""
from __future__ import annotations

import numpy as np

from sim.core.output import epilogue
from sim.core.settings import DEFAULTS, N_WINDOWS, check_run_args
from sim.core.trajectory import TRAJ_LEVELS, cap_events, check_init_tail, check_trajectory_args, sup_distance, time_grid
from sim.core.windows import window_bounds

__all__ = ["Run", "PathRun"]


class Run:
    """The run settings of one windowed simulation, checked (``ValueError`` naming key and
    value, :func:`sim.core.settings.check_run_args`), as plain ints, and what a simulator takes
    from them: its seed's streams, its window bounds and zeroed per-window series, and the
    epilogue.

    ``events`` is the run length in the engine's own unit (events, jobs or slots), split into
    :attr:`n_win` windows of ``2**j`` of them (:func:`sim.core.windows.window_bounds`: between
    ``n_windows`` and ``2 * n_windows``)."""

    def __init__(self, *, events, seed=DEFAULTS.seed, init=DEFAULTS.init,
                 n_batches=DEFAULTS.n_batches, max_level=DEFAULTS.max_level,
                 n_windows=N_WINDOWS, h=DEFAULTS.h, responses=DEFAULTS.responses,
                 se_method=DEFAULTS.se_method):
        check_run_args(events=events, seed=seed, init=init, n_batches=n_batches,
                       max_level=max_level, n_windows=n_windows, h=h, responses=responses,
                       se_method=se_method)
        self.events, self.seed, self.init = int(events), int(seed), init
        self.n_batches, self.max_level, self.h = int(n_batches), int(max_level), int(h)
        self.responses, self.se_method = bool(responses), se_method
        #: window boundaries in the run's unit, ``bounds[0] = 0``, ``bounds[-1] = events``
        self.bounds = window_bounds(self.events, int(n_windows))
        #: windows of the run
        self.n_win = self.bounds.size - 1

    # ---- seed
    def xoshiro(self, words: int = 4) -> np.ndarray:
        """The kernel's xoshiro256+ state: ``words`` uint64 words of ``SeedSequence(seed)``
        (4: one stream; 8: two, ``state[:4]`` and ``state[4:]``)."""
        return np.random.SeedSequence(self.seed).generate_state(words, dtype=np.uint64)

    def generator(self, key: int = 0) -> np.random.Generator:
        """A numpy ``Generator`` on the child ``key`` of ``SeedSequence(seed)`` (the same
        stream as ``SeedSequence(seed).spawn(key + 1)[key]``), for draws of the start that the
        kernel's stream does not make."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(key,)))

    # ---- windows
    def zeros(self, dtype=np.int64) -> np.ndarray:
        """A per-window series of zeros."""
        return np.zeros(self.n_win, dtype=dtype)

    def tail_zeros(self, dtype=np.int64) -> np.ndarray:
        """Per-window level areas of zeros, one column per level ``1..max_level``."""
        return np.zeros((self.n_win, self.max_level), dtype=dtype)

    def recorder(self, k: int = 1):
        """The response-time recorder of jobs of ``k`` tasks (:mod:`sim.core.responses`) when
        the run records responses, else None."""
        if not self.responses:
            return None
        from sim.core.responses import new_recorder

        return new_recorder(self.n_win, k)

    # ---- epilogue
    def epilogue(self, *, n_servers: int, ratios: dict, w_qarea, w_tail, jobs, dt=None,
                 w_time=None, cut=None, rec=None, k: int = 1, ci_note: str = "",
                 little=None) -> dict:
        """:func:`sim.core.output.epilogue` of the filled windows and the fields every result
        has: ``n_jobs`` (the window series ``jobs`` summed after the cut), ``events_run``
        (:attr:`events`), ``sim_time`` and ``warmup_time``.

        The clock is either uniformized, ``dt`` time units per event (the windows weigh their
        events; ``sim_time = events * dt``, the warm-up ``bounds[cut] * dt``), or the
        windows' own times ``w_time`` (a jump chain's expected holding times: the windows weigh
        their time). The other arguments are :func:`~sim.core.output.epilogue`'s. Returns the
        fields as a dict; the model adds its own (or replaces one it counts otherwise) and
        builds its result."""
        if (dt is None) == (w_time is None):
            raise TypeError("Run.epilogue takes one clock: dt (uniformized) or w_time")
        weights = np.diff(self.bounds) if w_time is None else w_time
        est = epilogue(n_servers=n_servers, n_batches=self.n_batches, weights=weights,
                       w_qarea=w_qarea, w_tail=w_tail, ratios=ratios, cut=cut, rec=rec, k=k,
                       ci_note=ci_note, little=little, se_method=self.se_method)
        cut = est["warmup_windows"]
        if w_time is None:
            sim_time, warmup_time = self.events * dt, float(self.bounds[cut]) * dt
        else:
            sim_time, warmup_time = float(w_time.sum()), float(w_time[:cut].sum())
        est.update(n_jobs=int(jobs[cut:].sum()), events_run=self.events, sim_time=sim_time,
                   warmup_time=warmup_time)
        return est


class PathRun:
    """The run settings of one sample path to a horizon (a trajectory engine), checked
    (``ValueError`` naming key and value, :func:`sim.core.trajectory.check_trajectory_args`
    and :func:`~sim.core.trajectory.check_init_tail`), and what a path engine takes from them:
    the time grid, the levels it records, the event cap, its seed's stream and the result."""

    def __init__(self, *, time, grid, seed, init, max_level, events=None, init_tail=None):
        check_trajectory_args(time=time, grid=grid, seed=seed, init=init, max_level=max_level,
                              events=events)
        #: the configured start (a float array), or None
        self.init_tail = check_init_tail(init_tail, init)
        self.time, self.grid, self.seed, self.init = float(time), int(grid), int(seed), init
        #: the levels recorded, ``s_1..s_levels``
        self.levels = min(int(max_level), TRAJ_LEVELS)
        #: the time grid, ``grid`` points from 0 to ``time``
        self.t = time_grid(self.time, self.grid)
        #: the event cap the kernel stops at (no cap: :data:`~sim.core.declare.INT_LIMIT`)
        self.cap = cap_events(events)

    def xoshiro(self) -> np.ndarray:
        """The kernel's xoshiro256+ state (four uint64 words of ``SeedSequence(seed)``)."""
        return np.random.SeedSequence(self.seed).generate_state(4, dtype=np.uint64)

    def record(self, levels: bool = True) -> np.ndarray:
        """NaN rows for the path to fill on the grid: ``(grid, levels)``, or ``(grid,)`` for
        one number per time (``levels=False``); rows after an event cap stay NaN."""
        return np.full((self.grid, self.levels) if levels else self.grid, np.nan)

    def result(self, result_type, *, tail, ode, events_run, sim_time, **own):
        """The path's result: the grid, the path ``tail`` and the limit ``ode`` from the same
        start, the levels, their sup distance, the run length, and the model's ``own`` fields."""
        return result_type(t=self.t, tail=tail, ode=ode, levels=self.levels,
                           sup_dist=sup_distance(tail, ode), events_run=events_run,
                           sim_time=sim_time, **own)
