"""One sweep from a composed config to results, analysis, MLflow and the archive.

Order matters for bad input: the whole plan is validated (:func:`pipeline.plan.make_plan`)
before anything is written or started, so a refused config leaves only Hydra's log behind.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.execute import PROJECT_ROOT, execute, ray_address
from pipeline.plan import Plan, make_plan
from pipeline.store import read_results, schema_for, write_row

log = logging.getLogger("pipeline")


def to_plain(cfg: DictConfig | dict) -> dict:
    """The composed config as plain, resolved Python values (Hydra's own section dropped)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = dict(cfg)
    cfg.pop("hydra", None)
    return cfg


def tasks_document(plan: Plan) -> dict:
    return {
        "sweep": plan.sweep,
        "root_seed": plan.root_seed,
        "param_columns": plan.param_columns,
        "varying": plan.varying,
        "tasks": plan.tasks,
    }


def run_sweep(cfg: DictConfig | dict, project_root: Path = PROJECT_ROOT, quiet: bool = False) -> dict:
    """Validate, execute, record, analyse, track and archive one sweep; return what was made."""
    conf = to_plain(cfg)
    plan = make_plan(conf)
    if not conf.get("output_dir"):
        raise ConfigError("output_dir is not set (it defaults to Hydra's run folder)")
    out_dir = Path(conf["output_dir"]).resolve()
    results_dir = out_dir / "results"
    if results_dir.exists() and any(results_dir.iterdir()):
        raise ConfigError(f"output_dir={str(out_dir)!r} already holds results; choose a new folder")

    run_id = uuid.uuid4().hex[:16]
    t0 = time.perf_counter()
    n_sim = sum(t["engine"] != "meanfield" for t in plan.tasks)
    log.info("sweep %r: %d points, %d tasks (%d simulations), output %s", plan.sweep,
             len(plan.points), len(plan.tasks), n_sim, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(conf)))
    (out_dir / "tasks.json").write_text(json.dumps(tasks_document(plan), indent=1))

    tracker = None
    if conf["mlflow"]["enabled"]:
        from pipeline.tracking import SweepTracker

        tracker = SweepTracker(conf["mlflow"]["tracking_uri"], conf["mlflow"]["experiment"], project_root)
        tracker.start(
            run_name=f"{plan.sweep}-{run_id[:6]}",
            params={"sweep": plan.sweep, "seed": plan.root_seed, "replications": conf["replications"],
                    "engines": ",".join(conf["engines"]), "policies": ",".join(conf["policies"]),
                    "axes": json.dumps(conf["axes"]), "params": json.dumps(conf["params"]),
                    "n_tasks": len(plan.tasks), "output_dir": str(out_dir)},
            tags={"sweep": plan.sweep, "run_id": run_id},
        )
    status = "FAILED"
    try:
        schema = schema_for(plan.param_types)
        errors = execute(
            plan.tasks, conf["execution"],
            on_row=lambda row: write_row(results_dir, {**row, "sweep": plan.sweep, "run_id": run_id}, schema),
            desc=plan.sweep,
        )
        frame = read_results(results_dir)
        frame.write_parquet(out_dir / "results.parquet")
        if errors:
            log.warning("%d of %d tasks failed; see the 'error' column of results.parquet", errors, len(plan.tasks))

        from analysis import analyze

        params = analysis_params(plan)
        analysis = analyze(frame, params, out_dir / "analysis", plan.sweep)
        analysis["params"] = params
        analysis["extra"] = {}
        from analysis import ANALYSES

        for name in conf.get("extra_analyses") or []:
            analysis["extra"][name] = ANALYSES[name](frame, params, out_dir / "analysis" / name, plan.sweep)
        elapsed = time.perf_counter() - t0

        from pipeline.archive import write_archive

        archive = write_archive(out_dir, {
            "config.yaml": out_dir / "config.yaml",
            "tasks.json": out_dir / "tasks.json",
            "results": results_dir,
            "analysis": out_dir / "analysis",
        }, project_root)
        if tracker is not None:
            from pipeline.mlflow_log import log_sweep

            log_sweep(tracker, plan, analysis, [out_dir / "results.parquet", out_dir / "config.yaml",
                                                 out_dir / "analysis", archive], elapsed, errors)
        status = "FINISHED"
    finally:
        if tracker is not None:
            tracker.end(status)
    if not quiet:
        print_summary(analysis, plan)
        print(f"\n{len(plan.tasks)} tasks ({errors} failed) in {elapsed:.1f} s"
              f"{' on cluster ' + str(ray_address(conf['execution'])) if ray_address(conf['execution']) else ''}")
        print(f"results:  {out_dir / 'results.parquet'}\nreport:   {analysis.get('report')}\narchive:  {archive}")
        if tracker is not None:
            print(f"mlflow:   {tracker.uri}  (run {tracker.parent_id})")
    return {"output_dir": out_dir, "frame": frame, "analysis": analysis, "archive": archive,
            "errors": errors, "run_id": run_id, "plan": plan,
            "mlflow_run_id": tracker.parent_id if tracker else None}


def analysis_params(plan: Plan) -> list[str]:
    """The parameter columns that define a point (run length only where it is an axis; list
    parameters such as service_rates are left out: a list is not a group key, and a sweep that
    varies one does so through a variant, whose name is a column)."""
    return [p for p in plan.param_columns
            if (p != "events" or "events" in plan.varying) and plan.param_types.get(p) is not list]


def print_summary(analysis: dict, plan: Plan) -> None:
    """A small table: each point's estimate with its 95% CI next to the mean-field value."""
    summary = pl.read_parquet(analysis["summary"])
    if summary.height == 0:
        print("no successful results")
        return
    if "mean_response_mf" in summary.columns and (summary["engine"] != "meanfield").any():
        summary = summary.filter(pl.col("engine") != "meanfield")  # shown as a column instead
    shown = [p for p in analysis["params"] if p in plan.varying] or [
        p for p in analysis["params"] if p != "events"]
    cols = ["policy", *shown, "engine", "n_rep", "mean_response", "mean_response_hw"]
    cols += [c for c in ("mean_response_mf", "mean_response_gap", "prob_wait", "mean_queue") if c in summary.columns]
    table = summary.select([c for c in cols if c in summary.columns]).rename(
        {"mean_response_hw": "ci95_halfwidth", "mean_response_mf": "meanfield", "mean_response_gap": "gap"},
        strict=False,
    )
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_hide_dataframe_shape=True, float_precision=4,
                   tbl_width_chars=200, tbl_hide_column_data_types=True):
        print(table)
    for fit in analysis.get("fits", []):
        arm = " ".join(f"{p}={fit.get(p)}" for p in analysis.get("arm_params", []))
        print(f"{fit.get('policy')} {arm}: {fit.get('verdict')}")
    for name, extra in (analysis.get("extra") or {}).items():
        for v in extra.get("verdicts", []):
            slope = "" if v.get("slope") is None else (
                f"  (slope {v['slope']:.2f} [{v['slope_lo']:.2f}, {v['slope_hi']:.2f}])")
            print(f"{name}: {v['label']}: {v['verdict']}{slope}")
