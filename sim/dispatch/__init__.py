"""The dispatch model: N FIFO servers, Poisson jobs of k tasks, one dispatching policy.

Model
-----
N servers with FIFO queues and exponential service (rate 1, or per-server rates for single-task
jobs on the agent engine). Jobs arrive as a Poisson process of rate ``lam * N / k``; each job has
``k`` tasks (``k = 1``: single-task jobs), placed on arrival by the policy:

- ``random``: each task to a uniformly chosen server; ``jsq``: each task to a shortest queue
  (ties uniform); ``pod``: power-of-d, ``d`` distinct queues sampled without replacement, join the
  shortest (``k = 1`` only);
- ``batch_filling`` (Weng & Wang; Ying, Srikant & Kang): ``k * d`` distinct queues sampled, the
  ``k`` tasks water-filled into them one by one, each to the currently shortest;
  ``batch_sampling``: the ``k`` tasks to the ``k`` shortest of the ``k * d`` sampled queues;
  ``pod_per_task``: each task samples its own ``k * d`` queues and joins the shortest.

A finite buffer ``b`` (tasks per server, in service included) drops a whole job any of whose
tasks would exceed it. A job's response is the time until its last task completes.

Engines
-------
- ``agent`` (:mod:`~sim.dispatch.agent`, :mod:`~sim.dispatch.parallel`): one entry per server,
  uniformized continuous time, responses measured per job.
- ``occupancy`` (:mod:`~sim.dispatch.occupancy`): counts of servers per queue length; cost per
  event independent of N; job delays by Rao-Blackwell from the queue positions.
- ``meanfield`` (:mod:`~sim.dispatch.meanfield`, :mod:`~sim.dispatch.batch_meanfield`): the
  supermarket ODE and its closed forms; the batch-filling limit for fixed ``k`` and ``d``.

"""
