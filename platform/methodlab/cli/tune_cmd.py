"""`methodlab tune SPACE.yaml [k=v ...]` and `methodlab tune resume DIR`."""

from __future__ import annotations

from typing import List, Optional

import typer

from methodlab.cli.common import console, example, friendly

app = typer.Typer(help="Ray Tune sweeps (Optuna search, ASHA early stopping).", invoke_without_command=True,
                  no_args_is_help=True)


def print_outcome(out: dict) -> None:
    from methodlab.cli.results_cmd import show_table

    console.print(f"[bold green]sweep finished[/]: {out['num_trials']} trials, {out['errors']} errored")
    show_table(out["sweep_dir"])
    console.print(f"sweep folder: {out['sweep_dir']}\nserve the best: methodlab serve --from-sweep {out['sweep_dir']}")


@app.command("run", epilog=example("methodlab tune run search_spaces/grokking_flatness/regularizers.yaml num_samples=8"))
@friendly
def tune_run(
    space_file: str = typer.Argument(..., help="search_spaces/<method>/<name>.yaml"),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value on the search-space file (config.x=... for trials)"),
    name: Optional[str] = typer.Option(None, help="Sweep folder name (default <method>-<space>)."),
    storage: Optional[str] = typer.Option(None, help="Storage path or URI; on a multi-node cluster one every node reaches."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS"),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Start a sweep (also reachable as `methodlab tune SPACE.yaml`)."""
    from methodlab.runners.paths import resolve_storage
    from methodlab.runners.tune import run_tune
    from methodlab.specs.files import load_search_space

    loaded = load_search_space(space_file, overrides or [])
    sweep = name or loaded.space.name or f"{loaded.base.job.method}-{loaded.path.stem}"
    out = run_tune(loaded, sweep, resolve_storage(loaded.space.storage_path, storage), address=address, quiet=quiet,
                   assume_shared_storage=assume_shared_storage)
    print_outcome(out)


@app.command("resume", epilog=example("methodlab tune resume results/grokking_flatness-regularizers"))
@friendly
def tune_resume(
    sweep_dir: str = typer.Argument(..., help="A folder written by `methodlab tune`."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS"),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage", envvar="METHODLAB_ASSUME_SHARED_STORAGE",
                                               help="The storage path is a mount every node sees (NFS-style): skip the multi-node check."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Finish an interrupted sweep: errored and unfinished trials continue from their checkpoints."""
    from methodlab.runners.tune import resume_tune

    print_outcome(resume_tune(sweep_dir, address=address, quiet=quiet, assume_shared_storage=assume_shared_storage))
