"""What a sweep sends to MLflow (driver only): built from the plan and the analysis outputs.

The layout is chosen so that the UI's compare view, metric overlays and search work across
sweeps, not only within one:

**Parent run** (one per sweep, :func:`start_sweep`), named ``<sweep>-<run id>``.

- *Parameters*, flat and each its own key: ``sweep``, ``seed``, ``replications``, ``engines``,
  ``policies``, ``n_points``, ``n_tasks``, ``output_dir``; every axis as ``axis.<name>`` (its
  list of values, e.g. ``axis.n_servers = [20, 200]``); every constant or formula of ``params``
  as ``param.<name>`` but only when no axis overrides it and some (engine, policy) of the sweep
  uses it (the config's defaults such as ``N = 1000`` do not show where N is an axis);
  ``variant.<variant>.<name>``; ``run.<setting>``; ``extra_analyses``; ``overrides`` (the
  command line's overrides, when run by ``python -m pipeline``).
- *Tags*: ``sweep``, ``run_id`` (the output folder's run id), ``mlflow.user``,
  ``mlflow.source.name``/``type``, ``mlflow.source.git.commit`` and ``git_dirty`` (from
  :func:`pipeline.archive.git_state`, so also right under ``ray job submit``; the commit the run
  started with), ``code_commits`` (every code that computed rows of the run folder, in order,
  comma-separated: one entry, or more after resumes with ``--allow-code-change``; the labels of
  the rows' ``code_commit``, :func:`code_commits_tag`), ``overrides`` and
  ``command``, and ``mlflow.note.content``: the sweep's description while it runs, then its
  report (the model's own analyses first, then the generic mean-field report; cut at MLflow's
  8000 characters, the full text is in the artefacts).
- *Metrics*: while the tasks run, ``tasks_done``, ``tasks_failed`` and
  ``task/<engine>/mean_response`` at step = tasks completed
  (:meth:`pipeline.tracking.SweepTracker.log_task`); at the end ``tasks``, ``failed_tasks``,
  ``wall_time_s`` and the extra analyses' sweep-level metrics.
- *Artefacts*: ``results.parquet``, ``config.yaml``, ``archive.tar.gz``, ``analysis/``,
  ``overrides.txt``.

**Child runs** (``tags.mlflow.parentRunId`` = the parent): one per (arm, policy, engine), where
the arm is every point parameter except N and except what the sweep derives from N along the
arm (``lam = 1 - beta * N**-0.5``): the columns :func:`analysis.fit.arm_columns` finds on the
plan's points. So N is never part of a key and arm values are never part of a metric name.

- *Parameters*: ``policy``, ``engine`` and every parameter that is constant in the arm and
  used by that engine and policy (a model parameter the engine does not read, e.g. ``d`` for
  the mean field of ``central``, is left out; auxiliary formula variables such as ``T`` are
  kept on every child), each as its own key: ``params.lam = '0.9'``
  finds every arm at load 0.9 of every sweep. Values are Python's ``str`` of the plan's value
  (``0.9``, ``20``, lists such as ``service_rates`` as ``[1.0, 2.0]``).
- *Tags*: ``sweep``, ``run_id``, ``arm`` (a readable label), the sweep's ``mlflow.user`` and
  ``mlflow.source.*`` tags and, where the arm has a scaling fit, ``verdict`` (the verdict of
  ``verdict_quantity``, e.g. ``gap of mean_response to the mean field``) and ``verdict_note``.
- *Metrics* at ``step = N`` (0 if the sweep has no ``n_servers``; ``log10 N`` on the child runs of
  the ``heavy_traffic`` engine, whose N passes the Int64 column), keyed by the quantity only:
  :data:`CHILD_METRICS` of the summary row, parameters that vary along the arm (``lam``,
  ``events``, ...) under their own name, and the fit (``fit_slope``, ``fit_slope_lo``,
  ``fit_slope_hi``, ``fit_slope_se``) at step 0. Two sweeps that differ in lam therefore
  overlay on one chart of ``mean_response`` against N.

An extra analysis (``analysis/catalog.py``) may return metrics as ``(key, value, step)``, logged
on the parent as they are, or as ``(key, value, step, arm)`` with ``arm`` a dict of ``engine``,
``policy`` and parameter values: such a metric goes to the child runs whose values match
(all given keys equal), so that its key need not carry the arm.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import polars as pl

from pipeline.plan import ALIASES, MODEL_PARAMS, Plan
from pipeline.tracking import SweepTracker, clip, command_line_overrides

#: summary columns logged in each child run (those present and finite)
CHILD_METRICS = ("mean_response", "mean_response_lo", "mean_response_hi", "mean_response_hw",
                 "mean_wait", "prob_wait", "mean_queue", "messages_per_job", "n_rep",
                 "mean_response_mf", "mean_response_gap", "mean_response_gap_lo",
                 "mean_response_gap_hi", "mean_response_rel_gap")
#: the scaling variable: the step of every child metric
X = "n_servers"
#: the fit's numbers logged on the child run of its arm
FIT_METRICS = ("slope", "slope_lo", "slope_hi", "slope_se")


def _num(v) -> float | None:
    if v is None or isinstance(v, (str, list, bool)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def param_text(v) -> str:
    """A parameter value as MLflow stores it (and as a search compares it): ``str`` of the
    value, lists as JSON."""
    if isinstance(v, (list, tuple)):
        return json.dumps(list(v))
    return str(v)


def _canon(name: str) -> str:
    return ALIASES.get(name, name)


# ---- the parent run
def sweep_params(conf: dict, plan: Plan, out_dir: Path, overrides: list[str] | None) -> dict:
    """Flat parameters of the sweep-level settings (module docstring)."""
    out = {"sweep": plan.sweep, "seed": plan.root_seed, "replications": conf["replications"],
           "engines": ",".join(conf["engines"]), "policies": ",".join(conf["policies"]),
           "n_points": len(plan.points), "n_tasks": len(plan.tasks), "output_dir": str(out_dir)}
    axes = conf.get("axes") or {}
    for name, values in axes.items():
        out[f"axis.{_canon(name)}"] = param_text(values)
    on_axis = {_canon(a) for a in axes}
    # model parameters that some task reads (a task holds exactly the parameters its engine uses)
    used = {k for t in plan.tasks for k in t if k in MODEL_PARAMS}
    variants = conf.get("variants") or {}
    overridden = set.intersection(*({_canon(k) for k in v} for v in variants.values())) if variants else set()
    for name, value in (conf.get("params") or {}).items():
        c = _canon(name)
        if c in on_axis or c in overridden or (c in MODEL_PARAMS and c not in used):
            continue
        out[f"param.{c}"] = param_text(value)
    for vname, over in variants.items():
        for name, value in (over or {}).items():
            out[f"variant.{vname}.{_canon(name)}"] = param_text(value)
    for key, value in (conf.get("run") or {}).items():
        out[f"run.{key}"] = param_text(value)
    if conf.get("extra_analyses"):
        out["extra_analyses"] = ",".join(conf["extra_analyses"])
    if overrides is not None:
        out["overrides"] = " ".join(overrides) or "(none)"
    return out


def sweep_tags(conf: dict, plan: Plan, run_id: str, project_root: Path,
               overrides: list[str] | None) -> dict:
    """Tags of the parent run (module docstring); ``mlflow.user`` is added by the tracker."""
    from pipeline.archive import git_state

    state, _ = git_state(project_root)
    description = conf.get("description") or ""
    tags = {
        "sweep": plan.sweep,
        "run_id": run_id,
        "mlflow.source.name": "pipeline",
        "mlflow.source.type": "LOCAL",
        "mlflow.note.content": (f"**{plan.sweep}**: {description}\n\n" if description else "")
        + "Running; the sweep's report replaces this note when it ends.",
    }
    if state.get("commit"):
        tags["mlflow.source.git.commit"] = state["commit"]
        tags["git_dirty"] = str(bool(state.get("dirty")))
    if overrides is not None:
        tags["overrides"] = " ".join(overrides)
        tags["command"] = " ".join(["python -m pipeline", *overrides])
    return tags


def code_commits_tag(history: list[dict] | None) -> str | None:
    """The parent's ``code_commits`` tag: each code of run.json's ``code`` (every code that
    computed rows of the folder) as the rows' ``code_commit`` names it, in order, comma-separated;
    ``unknown`` where its commit is (outside a git checkout, or a folder that predates the
    record). None without a history."""
    from pipeline.archive import code_label

    if not isinstance(history, list) or not history:
        return None
    return ", ".join(code_label(c) or "unknown" for c in history)


def start_sweep(tracker: SweepTracker, conf: dict, plan: Plan, run_id: str, out_dir: Path,
                project_root: Path, extra_tags: dict | None = None) -> str:
    """Create the parent run of a new sweep (with ``extra_tags`` beside :func:`sweep_tags`);
    record the command line's overrides (a parameter, two tags and the artefact
    ``overrides.txt``). Returns the parent run's id."""
    overrides = command_line_overrides()
    parent = tracker.start(run_name=f"{plan.sweep}-{run_id[:6]}",
                           params=sweep_params(conf, plan, out_dir, overrides),
                           tags={**sweep_tags(conf, plan, run_id, project_root, overrides), **(extra_tags or {})})
    if overrides is not None:
        tracker.log_text("\n".join(overrides) + "\n", "overrides.txt")
    return parent


# ---- the child runs
def _plan_rows(plan: Plan) -> dict[tuple[int, str], dict]:
    """(point id, engine) -> the parameters of its rows (a parameter the engine does not use
    is None, as in the result rows)."""
    rows = {}
    for t in plan.tasks:
        key = (t["_meta"]["point_id"], t["engine"])
        if key not in rows:
            rows[key] = dict(t["_meta"]["params"])
    return rows


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def child_arms(plan: Plan, params: list[str]) -> list[str]:
    """The columns of ``params`` that label an arm of the plan: all but N and what derives from
    N (:func:`analysis.fit.arm_columns` on the planned points, one row per point and engine)."""
    from analysis.fit import arm_columns

    if X not in params:
        return list(params)
    by_id = {pt.point_id: pt for pt in plan.points}
    rows = [{"policy": by_id[pid].policy, "engine": eng, **{p: vals.get(p) for p in params}}
            for (pid, eng), vals in _plan_rows(plan).items()]
    schema = {"policy": pl.String, "engine": pl.String}
    frame = pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)
    # rows off the N axis (heavy_traffic: N as log10_n) and the columns only they set do not
    # decide what labels an arm; those rows' arms are labelled by the same columns
    on_axis = frame.filter(pl.col(X).is_not_null())
    if 0 < on_axis.height < frame.height:
        params = [p for p in params if p == X or on_axis[p].null_count() < on_axis.height]
        frame = on_axis
    return arm_columns(frame, params, X)


def _label(values: dict) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def build_children(plan: Plan, analysis: dict, summary: pl.DataFrame, meta: dict) -> list[dict]:
    """The child runs (module docstring) as ``{"name", "params", "tags", "metrics", "key"}``;
    ``key`` is (policy, engine, {arm parameter: value}) for matching fits and extra metrics."""
    params = [p for p in analysis.get("params") or
              [c for c in plan.param_columns if plan.param_types.get(c) is not list]
              if p in plan.param_columns]
    arm = child_arms(plan, params)
    by_id = {pt.point_id: pt for pt in plan.points}
    lookup = {}
    if summary.height:
        cols = [p for p in params if p in summary.columns]
        for r in summary.iter_rows(named=True):
            lookup[(r["policy"], r["engine"], tuple(_hashable(r[p]) for p in cols))] = r
    else:
        cols = []

    groups: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
    for (pid, engine), vals in _plan_rows(plan).items():
        policy = by_id[pid].policy
        groups[(policy, engine, tuple(_hashable(vals.get(p)) for p in arm))].append((pid, vals))

    children = []
    for (policy, engine, _), members in groups.items():
        constant, varying = {}, []
        for name in plan.param_columns:
            distinct = {_hashable(v.get(name)) for _, v in members}
            if len(distinct) == 1:
                value = members[0][1].get(name)
                if value is not None:
                    constant[name] = value
            elif name != X:
                varying.append(name)
        arm_values = {p: constant[p] for p in arm if p in constant}
        metrics = []
        for pid, vals in sorted(members, key=lambda m: (m[1].get(X) or m[1].get("log10_n") or 0)):
            # N past the Int64 column (heavy_traffic rows, their own child runs): step = log10 N
            step = int(vals[X]) if vals.get(X) is not None else int(round(vals.get("log10_n") or 0))
            for name in varying:
                v = _num(vals.get(name))
                if v is not None:
                    metrics.append((name, v, step))
            row = lookup.get((policy, engine, tuple(_hashable(vals.get(p)) for p in cols)))
            if row is None:
                continue
            for m in CHILD_METRICS:
                v = _num(row.get(m))
                if v is not None:
                    metrics.append((m, v, step))
        child_params = {"policy": policy, "engine": engine}
        child_params.update({k: param_text(v) for k, v in constant.items()})
        for name in varying:  # non-numeric values that change along the arm: their list
            if any(isinstance(v.get(name), (str, list)) for _, v in members):
                child_params[name] = ",".join(sorted({param_text(v.get(name)) for _, v in members}))
        label = _label(arm_values)
        children.append({
            "name": f"{policy} {engine}" + (f" {label}" if label else ""),
            "params": child_params,
            "tags": {"sweep": plan.sweep, "run_id": meta.get("run_id", ""), "arm": label or "(all)"},
            "metrics": metrics,
            "key": (policy, engine, constant),
        })
    return children


def _matches(child: dict, want: dict) -> bool:
    policy, engine, values = child["key"]
    for k, v in want.items():
        have = {"policy": policy, "engine": engine}.get(k, values.get(k))
        if k not in ("policy", "engine") and k not in values:
            return False
        if isinstance(have, float) or isinstance(v, float):
            if have is None or v is None or not math.isclose(float(have), float(v), rel_tol=1e-12, abs_tol=0.0):
                return False
        elif _hashable(have) != _hashable(v):
            return False
    return True


def attach_fits(children: list[dict], analysis: dict) -> None:
    """Each fit (one per engine, policy and analysis arm) onto the child runs of its arm."""
    arm_params = analysis.get("arm_params") or []
    for fit in analysis.get("fits") or []:
        want = {"policy": fit.get("policy"), "engine": fit.get("engine"),
                **{p: fit.get(p) for p in arm_params if fit.get(p) is not None}}
        for c in children:
            if not _matches(c, want):
                continue
            c["metrics"] += [(f"fit_{m}", _num(fit.get(m)), 0) for m in FIT_METRICS
                             if _num(fit.get(m)) is not None]
            c["tags"]["verdict"] = fit.get("verdict") or ""
            c["tags"]["verdict_quantity"] = f"gap of {fit.get('metric') or 'mean_response'} to the mean field"
            if fit.get("note"):
                c["tags"]["verdict_note"] = fit["note"]


#: a Markdown image whose target is a relative path (``![plot](plot.png)``, as the reports write)
_IMAGE = re.compile(r"!\[([^\]]*)\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)([^)\s]+)\)")


def _images_as_artifacts(text: str, report: Path, analysis_dir: Path, run_id: str | None) -> str:
    """The report's relative image links pointed at the tracking server's ``get-artifact`` route
    for the parent's artefact ``analysis/...`` (relative, so a ``--static-prefix`` is kept):
    left relative to the report's folder, the UI resolved them against its own address and
    showed broken images. Links outside the analysis folder, or without a run id, are kept."""
    if not run_id:
        return text

    def repl(m: re.Match) -> str:
        try:
            rel = (report.parent / m.group(2)).resolve().relative_to(analysis_dir.resolve())
        except ValueError:
            return m.group(0)
        path = quote(f"analysis/{rel.as_posix()}", safe="/")
        return f"![{m.group(1)}](get-artifact?path={path}&run_uuid={run_id})"

    return _IMAGE.sub(repl, text)


def note_text(analysis: dict, run_id: str | None = None) -> str:
    """The parent's ``mlflow.note.content``: the extra analyses' reports (the model's own), then
    the generic report; cut at MLflow's tag limit with a pointer to the artefacts. With the
    parent's ``run_id`` the reports' figures show in the note (:func:`_images_as_artifacts`)."""
    parts = []
    main = analysis.get("report")
    analysis_dir = Path(main).parent if main else None
    reports = [extra.get("report") for extra in (analysis.get("extra") or {}).values()] + [main]
    for rep in reports:
        if rep and Path(rep).is_file():
            text = Path(rep).read_text()
            parts.append(_images_as_artifacts(text, Path(rep), analysis_dir, run_id) if analysis_dir else text)
    text = "\n\n---\n\n".join(p.strip() for p in parts) or "no report"
    return clip(text, 8000, "the full reports are in the artefacts under analysis/")


def log_sweep(tracker: SweepTracker, plan: Plan, analysis: dict, artifacts: list[Path],
              elapsed: float, errors: int, run_id: str | None = None) -> None:
    """Log the child runs, the parent's final metrics, note and artefacts of a finished sweep."""
    tracker.flush()
    summary = pl.read_parquet(analysis["summary"])
    parent_tags = tracker.client.get_run(tracker.parent_id).data.tags
    children = build_children(plan, analysis, summary, {"run_id": run_id or parent_tags.get("run_id", "")})
    attach_fits(children, analysis)

    parent = [("wall_time_s", elapsed, 0), ("failed_tasks", float(errors), 0),
              ("tasks", float(len(plan.tasks)), 0)]
    for extra in (analysis.get("extra") or {}).values():
        for item in extra.get("metrics", []):
            if _num(item[1]) is None:
                continue
            if len(item) >= 4 and isinstance(item[3], dict):
                for c in children:
                    if _matches(c, item[3]):
                        c["metrics"].append((item[0], item[1], item[2]))
            else:
                parent.append((item[0], item[1], item[2]))
    tracker.log_children(children)
    tracker.log_metrics(parent)
    tracker.set_tags({"mlflow.note.content": note_text(analysis, tracker.parent_id)})
    tracker.log_artifacts([a for a in artifacts if a.is_file()])
    for a in artifacts:
        if a.is_dir():
            tracker.log_artifacts([a], subdir=a.name)
