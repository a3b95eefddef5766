"""`methodlab reproduce SLUG`: the method's acceptance experiment -> reports/<slug>.md + PNG."""

from __future__ import annotations

import typer

from methodlab.cli.common import console, friendly


@friendly
def reproduce(
    slug: str = typer.Argument(..., help="Method slug."),
    out_dir: str = typer.Option("reports", help="Where <slug>.md and its plot go."),
    workers: int = typer.Option(2, help="Runs in parallel (processes)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer seeds/steps: a fast look, not the acceptance run."),
) -> None:
    """Run the spec's acceptance experiment (method vs baselines, per seed) and write the report.

    Example: methodlab reproduce grokking_flatness
    """
    from methodlab.core.errors import ConfigError
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    if not spec.reproduce:
        raise ConfigError(f"{slug} has no reproduction experiment yet")
    from methodlab.core.method import import_object

    report = import_object(spec.reproduce)(out_dir=out_dir, workers=workers, quick=quick)
    console.print(f"[bold green]report[/]: {report}")
