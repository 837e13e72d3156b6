"""The engines several models share, declared once: ``agent``, ``occupancy``, ``trajectory``,
``meanfield`` and ``refined``, and the engines of a model declared by its transitions
(``population``, ``population_meanfield``, ``population_refined`` and the paths
``population_trajectory``; :mod:`sim.core.population`, :mod:`sim.core.population_paths`); and
:data:`PROBES`, the parameter ``d`` of the models that probe queues, and :data:`LOAD_BELOW_ONE`,
the load of the models without buffers. A model lists the engines
it runs in its ``engine_decls``, so that two models cannot describe one engine differently (the
registry still refuses that, for an out-of-tree model that declares its own). ``path=True``:
the engine records a path to a horizon (docs/transients.md). Kept out of :mod:`sim.core`, which
names no engine."""
from __future__ import annotations

from sim.core.declare import INT_LIMIT, Engine, Param

__all__ = ["AGENT", "OCCUPANCY", "TRAJECTORY", "MEANFIELD", "REFINED", "POPULATION",
           "POPULATION_MEANFIELD", "POPULATION_REFINED", "POPULATION_TRAJECTORY", "PROBES",
           "AUTO_CHOICE", "LOAD_BELOW_ONE"]

AGENT = Engine("agent", "stochastic", "agent simulation", per_server=True)
OCCUPANCY = Engine("occupancy", "stochastic", "occupancy simulation")
TRAJECTORY = Engine("trajectory", "stochastic", "trajectory simulation", path=True)
MEANFIELD = Engine("meanfield", "limit", "mean field (N \u2192 \u221e)")
REFINED = Engine("refined", "limit", "refined mean field")
POPULATION = Engine("population", "stochastic", "population simulation (declared transitions)")
POPULATION_MEANFIELD = Engine("population_meanfield", "limit", "mean field of the declared transitions")
POPULATION_REFINED = Engine("population_refined", "limit",
                            "refined mean field of the declared transitions")
POPULATION_TRAJECTORY = Engine("population_trajectory", "stochastic",
                               "population paths (declared transitions)", path=True)

#: ``lam`` of the models whose queues are unbounded, restated with their domain [0, 1)
#: (centralization, jiq, led: a load at or above 1 has no steady state)
LOAD_BELOW_ONE = Param("float", "load: arrival rate per unit of total service rate, below 1",
                       domain=(0.0, 1.0), inclusive=(True, False))

#: ``d``: queues probed per job or per task (dispatch, jiq, led)
PROBES = Param("int", "queues probed per job (pod) or per task (batch policies)",
               label="d (servers probed per task)", symbol="d", domain=(1, INT_LIMIT))

#: the engines a sweep's ``engines: [auto]`` chooses between per point (pipeline.plan.auto_engine;
#: docs/sweeps.md): the per-server engine below ``run.auto_occupancy_n`` and the engine of
#: counts, whose cost per event does not grow with N, from it on
AUTO_CHOICE = (AGENT.name, OCCUPANCY.name)
