"""`methodlab reproduce SLUG`: the method's acceptance experiment -> reports/<slug>.md + PNG."""

from __future__ import annotations

import typer

from methodlab.cli.common import console, friendly


@friendly
def reproduce(
    slug: str = typer.Argument(..., help="Method slug."),
    out_dir: str = typer.Option("reports", help="Where <slug>.md and its plot go."),
    workers: int = typer.Option(2, min=1, help="Runs in parallel (processes)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer seeds/steps: a fast look, not the acceptance run."),
    full: bool = typer.Option(False, "--full", help="Also the long claims a method runs only on request "
                              "(ctsketch: Claim D, sum-1024 on MNIST, ~75 min more)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or per-run lines (errors still print)."),
) -> None:
    """Run the spec's acceptance experiment (method vs baselines, per seed) and write the report.

    Example: methodlab reproduce grokking_flatness
    """
    import os

    from methodlab.core.errors import ConfigError
    from methodlab.core.registry import get_spec

    if quiet:  # read by runners.progress, here and in the reproduction's worker processes
        os.environ["METHODLAB_QUIET"] = "1"

    spec = get_spec(slug)
    if not spec.reproduce:
        raise ConfigError(f"{slug} has no reproduction experiment yet")
    from methodlab.cli.common import writable_folder

    writable_folder(out_dir, field="--out-dir")  # before hours of runs, not at the report's write
    from methodlab.core.method import import_object

    import inspect

    run = import_object(spec.reproduce)
    kwargs = {"out_dir": out_dir, "workers": workers, "quick": quick}
    if full:
        if "full" not in inspect.signature(run).parameters:
            raise ConfigError(f"--full: {slug}'s reproduction has no long claims to add; drop --full")
        kwargs["full"] = True
    report = run(**kwargs)
    console.print(f"[bold green]report[/]: {report}")
