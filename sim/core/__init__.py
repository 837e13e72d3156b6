"""Model-free machinery that every kernel uses (no model knowledge lives here).

- :mod:`~sim.core.rng`: xoshiro256+, bounded draws, Bernoulli thresholds, seeding.
- :mod:`~sim.core.windows`: run windows of ``2**k`` events and lazily integrated areas (the
  window flush of the agent and of the occupancy engines).
- :mod:`~sim.core.output`: output analysis of one run (MSER-5, batch means, warm-up cut, tails,
  the label of the CI method).
- :mod:`~sim.core.results`: run-argument checks and the plain-typed result row.
- :mod:`~sim.core.sampling`: sampling without replacement (from arrays and from counts), alias
  tables.
- :mod:`~sim.core.buckets`: servers bucket-sorted by queue length (O(1) shortest / longest queue).
- :mod:`~sim.core.fifo`: FIFO ring buffers of arrival times, unbiased closing of a run.
- :mod:`~sim.core.jobdelay`: the expected delay of a job of k tasks from its queue positions
  (and the Gamma-CDF product the response recording uses).
- :mod:`~sim.core.refined`: the refined mean-field expansion ``x* + V/N`` and the row of a refined
  single-task model.
- ``sim/core/_trajectory_kernel.py``: compiled helpers of the trajectory kernels (the top level,
  the tail written at a grid time).

core/ imports nothing from sim/ outside core/.
"""
