"""`methodlab run JOB.yaml [k=v ...]`: Ray Train by default, in-process with --local."""

from __future__ import annotations

from typing import List, Optional

import typer

from methodlab.cli.common import console, example, friendly


@friendly
def run(
    job_file: str = typer.Argument(..., help="jobs/<method>/<preset>.yaml"),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value; bare keys mean config.<key>"),
    local: bool = typer.Option(False, "--local", help="Run in this process (no Ray)."),
    smoke: bool = typer.Option(False, "--smoke", help="Apply the method's smoke preset (seconds)."),
    name: Optional[str] = typer.Option(None, help="Run name (default <method>-<preset>); same name resumes."),
    storage: Optional[str] = typer.Option(None, help="Storage path or URI (default METHODLAB_STORAGE or ./results)."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS", help="Ray cluster address (default: embedded)."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard an existing run of this name instead of resuming."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Run one job. Config precedence: method defaults < job file < key=value."""
    from methodlab.runners.paths import default_run_name, resolve_storage
    from methodlab.specs.files import load_job

    loaded = load_job(job_file, overrides=overrides or [], smoke=smoke)  # validated before Ray starts
    job = loaded.job
    run_name = name or job.run.name or default_run_name(job.method, loaded.path, job.setting, smoke)
    store = resolve_storage(job.run.storage_path, storage)
    if local:
        from methodlab.runners.local import run_local

        out = run_local(loaded, run_name, store, quiet=quiet, fresh=fresh)
    else:
        import shutil
        from pathlib import Path

        if fresh and (Path(store) / run_name).exists():
            shutil.rmtree(Path(store) / run_name)
        from methodlab.runners.train import run_train

        out = run_train(loaded, run_name, store, address=address, quiet=quiet, assume_shared_storage=assume_shared_storage)
    metric = type(loaded.config).primary_metric
    console.print(f"[bold green]done[/] {run_name}: {metric} = {out['metrics'].get(metric)}")
    console.print(f"run folder: {out['run_dir']}   (methodlab results {out['run_dir']})")


HELP_EPILOG = example("methodlab run jobs/grokking_flatness/cpu.yaml --local max_steps=2000 reg=anti_flat")
