"""Compiled loop of the general-size engine for k-task jobs (private; the public API is
:mod:`sim.dispatch.general_jobs`).

The servers are those of :mod:`sim.dispatch._general_kernel`: per server a FIFO ring of the
completion times of its queued tasks, its queue length ``q`` and the completion ``clast`` of
its last task; queue lengths are read lazily (:func:`~sim.dispatch._general_kernel.pop_done`)
for every policy but JSQ, which keeps the calendar of departures and the bucket-sorted queue
lengths (:func:`~sim.dispatch._general_kernel.apply_departures`). A job arrival is the only
event drawn.

One job arrival: its ``k`` tasks are placed one after another, each committed at once (its
size drawn, its completion ``max(t, clast) + size`` written to the ring), so a later task of
the job sees the earlier ones. Where a task goes (``m = k d`` distinct servers per sample,
drawn in uniformly random order by :func:`sim.dispatch._agent_jobs_kernel._draw_sample`, so
that "the first best in sample order" breaks ties uniformly):

- ``RANDOM``: a uniform server per task, independently (tasks may share a server);
- ``JSQ``: a currently shortest queue per task (uniform among them);
- ``BATCH_FILLING``: one sample of ``m`` per job, read lazily, then the plan of the exponential
  engine (:func:`sim.dispatch._agent_jobs_kernel._fill_plan`: each task into the currently
  shortest sampled queue);
- ``BATCH_SAMPLING``: one sample per job, one task to each of the ``k`` shortest
  (:func:`sim.dispatch._agent_jobs_kernel._sampling_plan`);
- ``POD_PER_TASK``: each task its own sample of ``m`` and the (first) shortest of it;
- ``LL_FILLING``: one sample of ``m`` per job, each task in turn to the sampled server with
  the least work (``max(clast, t)``, the time its work runs out), that work then raised by the
  task's size: a binary heap of the ``m`` keys, O(m + k log m) per job.

Everything measured is fixed at the job's arrival and credited to its window: the job's
response (the last of its tasks' completions minus ``t``) and its square, whether some task
took a position >= 2, and per task its wait, its response and the time it will spend at each
position of its queue (as in the single-task loop). The loop stops after a job that leaves a
ring with fewer than ``k + 1`` free slots, so that the next job always fits; the driver then
doubles the rings.
"""
from __future__ import annotations

import functools

from numba import njit

from sim.core.buckets import pick_lowest
from sim.core.rng import below, next_raw
from sim.core.service import draw_size, exp_draw
from sim.dispatch._agent_jobs_kernel import UNBOUNDED, _draw_sample, _fill_plan, _sampling_plan
from sim.dispatch._general_kernel import apply_departures, join, loop_sizes, pop_done, shortest_lazy

#: policy codes of this loop
RANDOM, JSQ, BATCH_FILLING, BATCH_SAMPLING, POD_PER_TASK, LL_FILLING = 0, 1, 2, 3, 4, 5
#: the policies that draw one sample of k*d servers per job (or per task)
SAMPLING = (BATCH_FILLING, BATCH_SAMPLING, POD_PER_TASK, LL_FILLING)


@njit(cache=True, inline="always")
def _sift_down(hkey, hidx, i, size):
    """Restore the min-heap order of ``hkey[:size]`` (with ``hidx`` alongside) below ``i``."""
    key = hkey[i]
    idx = hidx[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and hkey[c + 1] < hkey[c]:
            c += 1
        if hkey[c] >= key:
            break
        hkey[i] = hkey[c]
        hidx[i] = hidx[c]
        i = c
    hkey[i] = key
    hidx[i] = idx


@functools.cache
def make_jobs_loop(policy: int):
    """The job-arrival loop compiled for one policy code (a closure constant)."""
    policy = int(policy)
    calendar = policy == JSQ
    batch = policy == BATCH_FILLING or policy == BATCH_SAMPLING

    @njit(cache=True)
    def loop(k, m, use_fy, rate, law, law_params, ring, head, q, clast, samp, mark, hist, dest,
             hkey, hidx, perm, pos, start, cal_head, nxt, prv, calb, inv_delta, istate, fstate,
             bounds, state, w_time, w_jobs, w_waited, w_resp, w_resp2, w_tasks, w_wait,
             w_tresp, w_tail):
        """Job arrivals from ``istate[0]`` to ``bounds[-1]``, or to the first that leaves a
        ring without room for another job. ``istate``: next job, calendar bucket of the last
        scan, sampling stamp; ``fstate``: the clock. Returns True when the run is done."""
        n_servers = q.size
        c, mask, bmask, shift, end = loop_sizes(ring, cal_head, bounds)
        s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
        a, jcur, stamp, t = istate[0], istate[1], istate[2], fstate[0]
        done = True
        while a < end:
            w = a >> shift
            e, s0, s1, s2, s3 = exp_draw(s0, s1, s2, s3)
            gap = e / rate
            t += gap
            w_time[w] += gap
            if calendar:
                jcur = apply_departures(t, jcur, mask, bmask, ring, head, q, perm, pos, start,
                                        cal_head, nxt, prv, calb, inv_delta)
            # ---- one sample for the job (batch policies)
            if batch or policy == LL_FILLING:
                stamp, s0, s1, s2, s3 = _draw_sample(samp, m, use_fy, mark, stamp,
                                                     s0, s1, s2, s3)
                if batch:
                    for i in range(m):
                        pop_done(samp[i], t, ring, head, q, mask)
                    if policy == BATCH_FILLING:
                        _fill_plan(q, samp, m, k, UNBOUNDED, hist, dest)
                    else:
                        _sampling_plan(q, samp, m, k, UNBOUNDED, hist, dest)
                else:
                    for i in range(m):
                        n = samp[i]
                        hkey[i] = max(clast[n], t)
                        hidx[i] = n
                    for i in range(m // 2 - 1, -1, -1):
                        _sift_down(hkey, hidx, i, m)
            job_end = t
            waited = False
            top = 0
            for i in range(k):
                # ---- the server of task i
                if policy == RANDOM:
                    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
                    n = below(r, n_servers)
                elif policy == JSQ:
                    n, s0, s1, s2, s3 = pick_lowest(q, perm, start, s0, s1, s2, s3)
                elif batch:
                    n = dest[i]
                elif policy == POD_PER_TASK:
                    stamp, s0, s1, s2, s3 = _draw_sample(samp, m, use_fy, mark, stamp,
                                                         s0, s1, s2, s3)
                    n = shortest_lazy(samp, m, t, ring, head, q, mask)
                else:  # LL_FILLING: the least work of the sample
                    n = hidx[0]
                # ---- task i joins server n
                if calendar:
                    lvl = q[n]
                else:
                    lvl = pop_done(n, t, ring, head, q, mask)
                size, s0, s1, s2, s3 = draw_size(law, law_params, s0, s1, s2, s3)
                wait, own = join(n, lvl, t, w, size, ring, head, q, clast, mask, w_tail, calendar,
                                 perm, pos, start, cal_head, nxt, prv, calb, inv_delta, bmask)
                if policy == LL_FILLING:
                    hkey[0] = own
                    _sift_down(hkey, hidx, 0, m)
                w_tasks[w] += 1
                w_wait[w] += wait
                w_tresp[w] += wait + size
                if own > job_end:
                    job_end = own
                if lvl > 0:
                    waited = True
                if lvl + 1 > top:
                    top = lvl + 1
            resp = job_end - t
            w_jobs[w] += 1
            w_resp[w] += resp
            w_resp2[w] += resp * resp
            if waited:
                w_waited[w] += 1
            a += 1
            if top + k >= c:  # a ring has no room for k more tasks: let the driver grow them
                done = a >= end
                if not done:
                    break
        state[0], state[1], state[2], state[3] = s0, s1, s2, s3
        istate[0], istate[1], istate[2], fstate[0] = a, jcur, stamp, t
        return done

    return loop
