"""`methodlab submit JOB.yaml`: a Ray Job through the Jobs SDK, flags named like `ray job submit`."""

from __future__ import annotations

from typing import List, Optional

import typer

from methodlab.cli.common import console, friendly


@friendly
def submit(
    job_file: str = typer.Argument(..., help="jobs/<method>/<preset>.yaml"),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value passed to `methodlab run`"),
    address: Optional[str] = typer.Option(None, "--address", envvar="RAY_ADDRESS", help="Dashboard address (default http://127.0.0.1:8265)."),
    working_dir: str = typer.Option(".", "--working-dir", help="Uploaded as the job's working dir (.git, .venv, results excluded)."),
    submission_id: Optional[str] = typer.Option(None, "--submission-id",
                                                help="Ray Job id to submit under (default: one Ray makes up); unique per cluster."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return after submission."),
    storage: Optional[str] = typer.Option(None, help="Where the job writes results (default: ./results here for a local head)."),
    smoke: bool = typer.Option(False, "--smoke", help="Forwarded to `methodlab run`."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage",
                                               help="Forwarded: --storage is a mount every node of the cluster sees."),
    local: bool = typer.Option(False, "--local", help="Forwarded: the job's driver runs fit in-process (no Train group)."),
) -> None:
    """Submit a job to a Ray cluster (token auth: RAY_AUTH_TOKEN or ~/.ray/auth_token).

    Example: methodlab submit jobs/grokking_flatness/cpu.yaml --address http://127.0.0.1:8265 --no-wait
    """
    from urllib.parse import urlparse

    from methodlab.cluster.jobs import client, submit as do_submit
    from methodlab.cli.common import check_storage_scheme
    from methodlab.runners.paths import resolve_storage
    from methodlab.specs.files import load_job

    loaded = load_job(job_file, overrides=overrides or [], smoke=smoke)  # validated before anything is sent
    if storage:  # a path on the cluster: only its URI scheme can be checked from here
        check_storage_scheme(storage, field="--storage")
    _, addr = client(address)
    host = urlparse(addr).hostname
    if storage is None and host in ("127.0.0.1", "localhost"):
        storage = resolve_storage(loaded.job.run.storage_path)
    flags = (["--smoke"] if smoke else []) + (["--local"] if local else []) + \
        (["--assume-shared-storage"] if assume_shared_storage else [])
    out = do_submit(job_file, [*(overrides or []), *flags], address=address, working_dir=working_dir, submission_id=submission_id,
                    no_wait=no_wait, storage=storage, runtime_env=loaded.job.runtime_env, echo=console.print)
    if out["status"] and out["status"] != "SUCCEEDED" and not no_wait:
        raise typer.Exit(1)
