"""`methodlab run JOB.yaml [k=v ...]`: Ray Train by default, in-process with --local."""

from __future__ import annotations

from typing import List, Optional

import typer

from methodlab.cli.common import console, example, friendly


@friendly
def run(
    job_file: str = typer.Argument(..., help="jobs/<method>/<preset>.yaml"),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value, applied last; bare keys mean config.<key> "
                                                    "(a text field keeps the text: two_stage=on)."),
    local: bool = typer.Option(False, "--local", help="Run in this process (no Ray)."),
    smoke: bool = typer.Option(False, "--smoke", help="Apply the method's smoke preset (seconds)."),
    name: Optional[str] = typer.Option(None, help="Run name (default: the job's run.name, else <method>-<preset>; "
                                       "-smoke added under --smoke); same name resumes."),
    storage: Optional[str] = typer.Option(None, help="Storage path or URI (default METHODLAB_STORAGE or ./results)."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS", help="Ray cluster address (default: embedded)."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard an existing run of this name instead of resuming."),
    autoscaling: bool = typer.Option(False, "--autoscaling",
                                     help="The cluster adds GPU nodes on demand: do not refuse a GPU request it cannot meet now."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or per-report lines (errors still print)."),
) -> None:
    """Run one job. Config precedence: method defaults < job file < --smoke preset < key=value.

    The job file is validated alone first: --smoke cannot hide a bad value in it.
    """
    from pathlib import Path

    from methodlab.cli.common import checked_storage
    from methodlab.runners.lifecycle import finished_run
    from methodlab.runners.paths import is_uri, run_name as resolve_run_name
    from methodlab.specs.files import load_job

    loaded = load_job(job_file, overrides=overrides or [], smoke=smoke)  # validated before Ray starts
    job = loaded.job
    # a smoke run of a job that names its run gets its own folder (<run.name>-smoke), never the full run's
    run_name = resolve_run_name(name, job.run.name, job.method, loaded.path, job.setting, smoke)
    store = checked_storage(job.run.storage_path, storage, where=job_file)
    if not fresh and not is_uri(store) and finished_run(Path(store) / run_name, loaded.config):
        done = Path(store) / run_name
        console.print(f"{run_name} is already complete: results in {done} (methodlab results {done}); "
                      "--fresh runs it again", highlight=False)
        return
    try:
        _dispatch(loaded, run_name, store, local=local, fresh=fresh, quiet=quiet, address=address,
                  assume_shared_storage=assume_shared_storage, autoscaling=autoscaling)
    except KeyboardInterrupt:
        from methodlab.cli.common import err_console
        from methodlab.core.checkpoint import latest_checkpoint

        if is_uri(store):
            newest = None
        elif local:
            newest = latest_checkpoint(Path(store) / run_name / "checkpoints")
        else:  # the one Ray Train restores (a killed run can leave newer folders it never registered)
            from methodlab.runners.train import resume_point

            newest = resume_point(Path(store) / run_name)
        err_console.print(f"interrupted: the same command resumes from {newest}" if newest else
                          "interrupted before the first checkpoint; the same command starts the run again",
                          highlight=False)
        if not local:  # Ray ran in this process: stop it and exit now (no teardown of its native threads)
            from methodlab.runners.ray_session import exit_now

            exit_now(130)
        raise typer.Exit(130) from None


def _dispatch(loaded, run_name: str, store: str, *, local: bool, fresh: bool, quiet: bool, address, assume_shared_storage,
              autoscaling) -> None:
    if local:
        from methodlab.runners.local import run_local

        out = run_local(loaded, run_name, store, quiet=quiet, fresh=fresh)
    else:
        import shutil
        from pathlib import Path

        if fresh and (Path(store) / run_name).exists():
            shutil.rmtree(Path(store) / run_name)
        from methodlab.runners.train import run_train

        out = run_train(loaded, run_name, store, address=address, quiet=quiet, assume_shared_storage=assume_shared_storage,
                   autoscaling=autoscaling)
    metric = type(loaded.config).primary_metric
    console.print(f"[bold green]done[/] {run_name}: {metric} = {out['metrics'].get(metric)}")
    console.print(f"run folder: {out['run_dir']}   (methodlab results {out['run_dir']})")


HELP_EPILOG = example("methodlab run jobs/grokking_flatness/cpu.yaml --local max_steps=2000 reg=anti_flat")
