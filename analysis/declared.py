"""The one door from analysis/ to sim/: what the models declare, read for the analyses.

Every other module of analysis/ reads rows (Polars frames) and asks this module what the
models say about them: policy labels and entries (:mod:`sim.registry`, assembled from each
model's :class:`~sim.core.declare.Model`), the N = infinity response law a model declares
(``Model.response_law``), the analyses it declares (``Model.analyses``) and the theory it
declares for analysis (``Model.theory``: closed forms and asymptotics, ``"module:function"``,
imported here when first asked for). No other file of analysis/ imports ``sim``
(``tests/analysis/test_boundary.py`` checks), so a model's internals can move without an
analysis noticing, as long as its declaration names them.
"""
from __future__ import annotations

import importlib
from typing import Callable

from sim import registry as _registry

__all__ = ["models", "model", "entry", "policy", "policy_where", "limit_engines", "single_run_interval", "policy_label", "param_label", "param_symbol",
           "engine_label", "response_law", "theory"]


def models() -> dict:
    """Every registered model's declaration, by name (an out-of-tree model once loaded)."""
    return _registry.MODELS


def model(name: str):
    """The declaration of model ``name`` (``ValueError`` if none is registered)."""
    return _registry.model(name)


def entry(engine: str, policy: str, model: str | None = None):
    """The declared (engine, policy) entry (``model`` settles a name two models share)."""
    return _registry.entry(engine, policy, model)


def limit_engines() -> tuple[str, ...]:
    """The engines the registered models declare of kind ``limit`` (their rows are exact for
    their parameters: no seed, no replications), in declaration order."""
    return tuple(_registry.LIMIT_ENGINES)


def path_engines() -> tuple[str, ...]:
    """The engines that record a path to a horizon (``Engine.path``: ``trajectory``,
    ``population_trajectory``), in declaration order."""
    return tuple(_registry.PATH_ENGINES)


def policy_label(policy: str, model: str | None = None, engine: str | None = None) -> str:
    """A policy's name in words, as its model declares it (``Model.labels``)."""
    return _registry.policy_label(policy, model, engine)


def param_label(name: str) -> str:
    """Axis words of parameter ``name`` as its declaration gives them (``Param.label``; ``""``
    for a column no loaded model declares or one declared without a label)."""
    par = _registry.PARAMS.get(name)
    return par.label if par is not None else ""


def param_symbol(name: str) -> str:
    """The short symbol of parameter ``name`` (``Param.symbol``; ``""`` where none is declared)."""
    par = _registry.PARAMS.get(name)
    return par.symbol if par is not None else ""


def engine_label(engine: str) -> str:
    """Engine ``engine`` in words, as its declaration gives it (``Engine.label``; ``""`` for an
    engine no loaded model declares)."""
    decl = _registry.DECLARED_ENGINES.get(engine)
    return decl.label if decl is not None else ""


def response_law(row: dict):
    """The N = infinity response-time law of a row's point, from its model's declared
    ``response_law`` (the model is the row's ``model``, or inferred from its engine and
    policy); None where the model declares none or no model serves the row."""
    try:
        decl = (_registry.model(row["model"]) if row.get("model")
                else _registry.model_of({"engine": row.get("engine"), "policy": row.get("policy")}))
    except ValueError:
        return None
    if decl.response_law is None:
        return None
    return decl.response_law(row["policy"], row)


_THEORY: dict[tuple[str, str], Callable] = {}


def theory(model: str, name: str) -> Callable:
    """The theory function ``name`` that model ``model`` declares for analysis
    (``Model.theory``), imported on first use. ``KeyError`` naming what the model declares
    if it declares no such function."""
    key = (model, name)
    if key not in _THEORY:
        refs = _registry.model(model).theory
        if name not in refs:
            raise KeyError(f"model {model!r} declares no theory {name!r}; it declares: "
                           f"{', '.join(refs) or '(none)'}")
        module, _, func = refs[name].partition(":")
        _THEORY[key] = getattr(importlib.import_module(module), func)
    return _THEORY[key]


def policy(model: str, name: str):
    """The declared record of ``model``'s policy ``name`` (a :class:`sim.core.declare.Policy`
    whose attributes say what the policy does), or None where the model declares none."""
    decl = _registry.MODELS.get(model)
    return next((p for p in (decl.policy_decls if decl else ()) if p.name == name), None)


def policy_where(model: str, **attributes) -> str:
    """The name of the one policy of ``model`` whose record has these attribute values
    (``policy_where("jiq", probes=True)``: JIQ-Po(d)), for an analysis that names a policy by
    what it does; ``KeyError`` unless exactly one matches."""
    decl = _registry.MODELS.get(model)
    found = [p.name for p in (decl.policy_decls if decl else ())
             if all(getattr(p, a) == v for a, v in attributes.items())]
    if len(found) != 1:
        raise KeyError(f"model {model!r}: {len(found)} policies have {attributes}, not one")
    return found[0]


def single_run_interval() -> tuple[str, float]:
    """How a single run's interval is made under the ``obm`` standard error: the first words of
    its ``ci_method`` and the degrees of freedom of its Student's t (:mod:`sim.core.output`)."""
    from sim.core.output import OBM_DOF, OBM_LABEL

    return OBM_LABEL, OBM_DOF
