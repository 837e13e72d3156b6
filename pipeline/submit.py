"""``python -m pipeline.submit [--address URL] [--results-dir DIR] [OVERRIDES ...]``: run a sweep
as a Ray job on a cluster and keep its results and provenance.

What ``ray job submit --working-dir . -- python -m pipeline ...`` alone loses, this keeps:

- the config is composed and validated here first (bad input: exit 2, nothing submitted);
- the git commit, dirty flag and diff are recorded here, before the upload (which has no
  ``.git``), and travel with the job in ``.lbsweep-submit/<job id>/``, where the archive
  takes them from;
- the job writes its output folder (``output_dir=DIR/NAME/STAMP``, unless given: it must not
  exist), its Hydra log (``DIR/.log/JOB_ID`` until the run folder is made, as for a local run)
  and MLflow runs to absolute paths chosen here:
  by default this project's ``outputs/`` and ``mlflow.db``, which the head node must see (the same
  machine, or a shared filesystem mounted at the same path); ``--results-dir`` and
  ``mlflow.tracking_uri=...`` point elsewhere (e.g. a folder on the head's disk fetched back with
  ``ray rsync-down cluster.yaml``, and an MLflow server on the head). See docs/cluster.md.

The job is an ordinary Ray job: ``ray job logs|status|stop JOB_ID`` work on it. By default this
command follows its logs and exits with the driver's exit code (that of ``python -m pipeline``);
``--no-wait`` returns after submission. Ctrl-C while following leaves the job running.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.execute import PROJECT_ROOT, ClusterError, check_reachable, configure_auth
from pipeline.runfolder import LOG_DIR, check_new

log = logging.getLogger("pipeline.submit")

#: not uploaded with the working directory: outputs, stores, caches and git's own folder
EXCLUDES = [".git/", "outputs/", "multirun/", "mlflow.db", "mlflow.db-journal", "mlartifacts/",
            "__pycache__/", "*.egg-info/", ".venv/", ".pytest_cache/", "benchmarks/pod_limit/"]
#: (not in .gitignore: Ray's upload skips ignored files; it is removed right after the upload)
PROVENANCE_DIR = ".lbsweep-submit"
#: environment variable naming the provenance folder inside the job's working directory
PROVENANCE_ENV = "LBSWEEP_PROVENANCE"


def dashboard_address(arg: str | None) -> str:
    address = arg or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError("no cluster given: pass --address http://HEAD:8265 (the dashboard's "
                          "address) or set RAY_API_SERVER_ADDRESS")
    if "://" not in address:
        address = f"http://{address}"
    return address


def compose(overrides: list[str], output_dir: str) -> dict:
    """The sweep's config as ``python -m pipeline`` composes it, validated (exit 2 on bad input)."""
    from pipeline.config import compose as compose_config
    from pipeline.plan import make_plan
    from pipeline.run import to_plain

    cfg = compose_config([*overrides, f"output_dir={output_dir}"], PROJECT_ROOT / "conf")
    conf = to_plain(cfg)
    make_plan(conf)
    return conf


def record_provenance(job_id: str) -> Path:
    """Write the project's git state (commit, dirty flag, diff) where the upload takes it."""
    from pipeline.archive import git_state

    state, diff = git_state(PROJECT_ROOT)
    state["recorded_by"] = "pipeline.submit, before the upload"
    folder = PROJECT_ROOT / PROVENANCE_DIR / job_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "git.json").write_text(json.dumps(state, indent=1))
    (folder / "git.diff").write_text(diff)
    return folder


def follow(client, job_id: str, poll: float = 2.0) -> tuple[str, int | None]:
    """Print the job's logs as they grow until it ends; return (status, driver exit code)."""
    from ray.job_submission import JobStatus

    shown = 0
    while True:
        info = client.get_job_info(job_id)
        logs = client.get_job_logs(job_id)
        if len(logs) > shown:
            sys.stdout.write(logs[shown:])
            sys.stdout.flush()
            shown = len(logs)
        if info.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return str(info.status), info.driver_exit_code
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.submit", description=__doc__.split("\n\n")[0],
                                 epilog="Everything else is passed to python -m pipeline as Hydra "
                                        "overrides, e.g. +sweep=smoke replications=8.")
    ap.add_argument("--address", default=None,
                    help="the cluster's dashboard, http://HEAD:8265 (default: RAY_API_SERVER_ADDRESS)")
    ap.add_argument("--results-dir", type=Path, default=PROJECT_ROOT / "outputs",
                    help="absolute folder, as the head node sees it, for the output folder "
                         "(default: this project's outputs/)")
    ap.add_argument("--no-wait", action="store_true", help="return once the job is submitted")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the dashboard to answer")
    args, overrides = ap.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(message)s")
    try:
        address = dashboard_address(args.address)
        results_dir = args.results_dir.expanduser()
        if not results_dir.is_absolute():
            raise ConfigError(f"--results-dir={str(args.results_dir)!r} must be an absolute path "
                              "(the job runs in another folder)")
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        conf = compose(overrides, str(results_dir / "_validation"))
        name = conf["name"]
        given = [o.split("=", 1)[1] for o in overrides if o.startswith("output_dir=")]
        out_dir = Path(given[-1]).expanduser() if given and given[-1] not in ("", "null") \
            else results_dir / name / stamp
        if not out_dir.is_absolute():
            raise ConfigError(f"output_dir={str(out_dir)!r} must be an absolute path (the job runs "
                              "in another folder)")
        check_new(out_dir)  # the driver makes it exclusively (pipeline/runfolder.py)
        job_id = f"lbsweep-{name}-{stamp}".replace("_", "-")
        mlflow_uri = conf["mlflow"]["tracking_uri"]
        if conf["mlflow"]["enabled"] and not mlflow_uri:
            mlflow_uri = f"sqlite:///{(PROJECT_ROOT / 'mlflow.db').resolve()}"
        check_reachable(address, args.timeout)
        auth = configure_auth({"auth": conf["execution"].get("auth", "auto")}, joining=True)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except ClusterError as exc:
        log.error("cluster error: %s", exc)
        return 3

    provenance = record_provenance(job_id)
    entry = ["python", "-m", "pipeline", *overrides, f"output_dir={out_dir}",
             f"hydra.run.dir={results_dir / LOG_DIR / job_id}"]
    if mlflow_uri and not conf["mlflow"]["tracking_uri"]:
        entry.append(f"mlflow.tracking_uri={mlflow_uri}")
    import shlex

    from ray.job_submission import JobSubmissionClient

    try:
        from pipeline.models import py_modules

        runtime_env = {"working_dir": str(PROJECT_ROOT), "excludes": EXCLUDES,
                       "env_vars": {PROVENANCE_ENV: f"{PROVENANCE_DIR}/{job_id}"}}
        shipped = py_modules(conf)  # out-of-tree models: on the job driver's path and workers'
        if shipped:
            runtime_env["py_modules"] = shipped
        client = JobSubmissionClient(address)
        client.submit_job(
            entrypoint=shlex.join(entry), submission_id=job_id, runtime_env=runtime_env,
            metadata={"sweep": name, "output_dir": str(out_dir)},
        )
    except Exception as exc:
        log.error("cluster error: could not submit to %s: %s", address, str(exc).splitlines()[0])
        return 3
    finally:
        _remove_tree(provenance)  # uploaded (or not); the archive keeps it
    # Ray's CLI uses a token only when told to: the lines must work when pasted into a shell
    ray_cli = "RAY_AUTH_MODE=token ray" if auth == "token" else "ray"
    print(f"submitted job {job_id} to {address}\n"
          f"  output:  {out_dir}\n"
          f"  logs:    {ray_cli} job logs {job_id} --address {address} --follow\n"
          f"  status:  {ray_cli} job status {job_id} --address {address}\n"
          f"  stop:    {ray_cli} job stop {job_id} --address {address}", flush=True)
    if args.no_wait:
        return 0
    try:
        status, code = follow(client, job_id)
    except KeyboardInterrupt:
        print(f"\nstopped following; the job goes on ({ray_cli} job stop {job_id} --address {address})")
        return 130
    print(f"job {job_id}: {status} (driver exit code {code})")
    if status == "SUCCEEDED":
        return 0
    return code if code else (130 if status == "STOPPED" else 1)


def _remove_tree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()  # the provenance root, when empty
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
