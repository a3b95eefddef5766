"""`methodlab tune SPACE.yaml [k=v ...]` and `methodlab tune resume DIR`."""

from __future__ import annotations

from typing import List, Optional

import typer

from methodlab.cli.common import console, example, friendly

app = typer.Typer(help="Ray Tune sweeps (Optuna search, ASHA early stopping).", invoke_without_command=True,
                  no_args_is_help=True)


def interrupted(sweep_dir) -> None:
    """After Ctrl-C: one line saying what was kept and how to continue, then exit 130 (Ray stopped at once)."""
    from methodlab.cli.common import err_console
    from methodlab.runners.ray_session import exit_now

    err_console.print(f"interrupted: the sweep state and trial checkpoints are kept in {sweep_dir}; continue with "
                      f"`methodlab tune resume {sweep_dir}`", highlight=False)
    exit_now(130)


def print_outcome(out: dict) -> None:
    from methodlab.cli.results_cmd import show_table

    console.print(f"[bold green]sweep finished[/]: {out['num_trials']} trials, {out['errors']} errored")
    show_table(out["sweep_dir"])
    console.print(f"sweep folder: {out['sweep_dir']}\nserve the best: methodlab serve --from-sweep {out['sweep_dir']}")


@app.command("run", epilog=example("methodlab tune run search_spaces/grokking_flatness/regularizers.yaml num_samples=8"))
@friendly
def tune_run(
    space_file: str = typer.Argument(..., help="search_spaces/<method>/<name>.yaml"),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value on the search-space file, applied last "
                                                    "(config.x=... for the trials' config)."),
    name: Optional[str] = typer.Option(None, help="Sweep folder name (default <method>-<space>)."),
    storage: Optional[str] = typer.Option(None, help="Storage path or URI; on a multi-node cluster one every node reaches."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS", help="Ray cluster address (default: an embedded local Ray)."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    autoscaling: bool = typer.Option(False, "--autoscaling",
                                     help="The cluster adds GPU nodes on demand: do not refuse a GPU request it cannot meet now."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or per-trial lines (errors still print)."),
) -> None:
    """Start a sweep (also reachable as `methodlab tune SPACE.yaml`)."""
    from methodlab.cli.common import checked_storage
    from methodlab.runners.tune import run_tune
    from methodlab.specs.files import load_search_space

    loaded = load_search_space(space_file, overrides or [])
    sweep = name or loaded.space.name or f"{loaded.base.job.method}-{loaded.path.stem}"
    store = checked_storage(loaded.space.storage_path, storage, where=space_file, field="storage_path")
    try:
        out = run_tune(loaded, sweep, store, address=address, quiet=quiet,
                       assume_shared_storage=assume_shared_storage,
                       autoscaling=autoscaling)
    except KeyboardInterrupt:
        from pathlib import Path

        interrupted(Path(store) / sweep if "://" not in store else f"{store.rstrip('/')}/{sweep}")
    print_outcome(out)


@app.command("resume", epilog=example("methodlab tune resume results/grokking_flatness-regularizers"))
@friendly
def tune_resume(
    sweep_dir: str = typer.Argument(..., help="A folder written by `methodlab tune`."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS", help="Ray cluster address (default: an embedded local Ray)."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    autoscaling: bool = typer.Option(False, "--autoscaling",
                                     help="The cluster adds GPU nodes on demand: do not refuse a GPU request it cannot meet now."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or per-trial lines (errors still print)."),
) -> None:
    """Finish an interrupted sweep: errored and unfinished trials continue from their checkpoints."""
    from methodlab.runners.tune import resume_tune

    try:
        out = resume_tune(sweep_dir, address=address, quiet=quiet, assume_shared_storage=assume_shared_storage,
                          autoscaling=autoscaling)
    except KeyboardInterrupt:
        interrupted(sweep_dir)
    print_outcome(out)
