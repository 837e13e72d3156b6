"""The task keys of a service law, declared once: ``service`` and its parameters as
:class:`~sim.core.declare.Param` records with their domains, and the laws' names and ranges.

Kept apart from :mod:`sim.core.service` (which compiles the sampler with numba and imports
scipy) so that a model's declaration, which the plan imports before any compute, stays light.
:mod:`sim.core.service` takes its names and ranges from here; :func:`law_of` builds the law of
a task (importing :mod:`sim.core.service` only when a task names one).

A law parameter's domain here is the union over the laws that take it (``service_scv`` > 0:
the lognormal's (0, 100] and the hyperexponential's [1, inf)); the law's own range is checked
when the law is built (:func:`sim.core.service.service_law`), in one line naming key and value.
"""
from __future__ import annotations

import math

from sim.core.declare import Param

__all__ = ["LAW_NAMES", "EXPONENTIAL_NAME", "LAW_KEYS", "SERVICE_KEYS", "SERVICE_PARAMS", "MAX_PHASES",
           "MAX_LOGNORMAL_SCV", "MAX_PARETO_ALPHA", "MAX_PARETO_UPPER", "law_of", "is_exponential"]

#: the laws by name, in the order of their kernel codes (``exponential`` first: the default)
LAW_NAMES = ("exponential", "deterministic", "erlang", "hyperexponential", "lognormal",
             "bounded_pareto")
EXPONENTIAL_NAME = LAW_NAMES[0]

#: a law record's field -> the task key of that parameter
LAW_KEYS = {"scv": "service_scv", "phases": "service_phases", "alpha": "service_alpha",
            "upper": "service_upper"}

#: most phases of an erlang law: the sampler sums ``phases`` exponential draws per size
MAX_PHASES = 1000
#: largest SCV of the lognormal: beyond it the draws that make E[S^3] need normals beyond the
#: sampler's reach (docs/service.md, "Lognormal")
MAX_LOGNORMAL_SCV = 100.0
#: largest shape and upper bound of the bounded Pareto (docs/service.md, "Bounded Pareto")
MAX_PARETO_ALPHA = 20.0
MAX_PARETO_UPPER = 1e12

#: the declarations of the service law's task keys (a model that takes a law lists them)
SERVICE_PARAMS: dict[str, Param] = {
    "service": Param("choice", "the law of task sizes, mean 1 (absent: exponential; "
                     "docs/service.md)", choices=LAW_NAMES, label="service-time law"),
    "service_scv": Param("float", "squared coefficient of variation of the sizes "
                         "(hyperexponential: >= 1; lognormal: <= 100)", label="service SCV",
                         symbol="c\u00b2", domain=(0.0, math.inf), inclusive=(False, True)),
    "service_phases": Param("int", "phases of the erlang law", label="erlang phases",
                            domain=(1, MAX_PHASES)),
    "service_alpha": Param("float", "shape of the bounded Pareto law", label="Pareto shape",
                           symbol="\u03b1_S", domain=(0.0, MAX_PARETO_ALPHA), inclusive=(False, True)),
    "service_upper": Param("float", "upper bound of the bounded Pareto law (mean 1)",
                           label="Pareto upper bound", domain=(1.0, MAX_PARETO_UPPER),
                           inclusive=(False, True)),
}
#: every task key of a service law, ``service`` first
SERVICE_KEYS: tuple[str, ...] = tuple(SERVICE_PARAMS)


def is_exponential(task: dict) -> bool:
    """The task's sizes are Exp(1): no ``service`` key, or ``service: exponential``."""
    return task.get("service") in (None, EXPONENTIAL_NAME)


def law_of(task: dict):
    """The :class:`sim.core.service.ServiceLaw` a task's keys name (exponential where it names
    none); ``ValueError`` in one line naming key and value for a law parameter the law does not
    take, one it needs and lacks, or a value outside the law's range."""
    from sim.core.service import service_law

    given = {key: task[key] for key in SERVICE_KEYS[1:] if task.get(key) is not None}
    return service_law(task.get("service") or EXPONENTIAL_NAME, **given)
