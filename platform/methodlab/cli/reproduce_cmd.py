"""`methodlab reproduce SLUG`: the method's acceptance experiment -> reports/<slug>.md (+ .json, PNG).

Every method's `reproduce` module declares `study()`, run by the harness (methodlab.reproduce: runs on Ray or
local processes, a keyed store, claims as data, the report rendered whole from the store)."""

from __future__ import annotations

from typing import Optional

import typer

from methodlab.cli.common import console, friendly


def study_of(slug: str):
    """The method's Study (its reproduce module's `study()`)."""
    import importlib

    from methodlab.core.errors import ConfigError
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    if not spec.reproduce:
        raise ConfigError(f"{slug} has no reproduction experiment yet", field="slug")
    return getattr(importlib.import_module(spec.reproduce.split(":")[0]), spec.reproduce.split(":")[1])()


@friendly
def reproduce(
    slug: Optional[str] = typer.Argument(None, help="Method slug (or --all)."),
    all_methods: bool = typer.Option(False, "--all", help="Every registered method, one after the other."),
    out_dir: Optional[str] = typer.Option(None, help="Where <slug>.md, <slug>.json and its plots go (default reports/; "
                                          "a --quick look: results/reproduce/<slug>/quick-report/)."),
    workers: int = typer.Option(2, min=1, help="Runs in parallel without Ray (--no-ray)."),
    quick: bool = typer.Option(False, "--quick", help="One seed, the arms' quick overrides: a fast look, marked as a "
                               "reduced recipe in the report."),
    full: bool = typer.Option(False, "--full", help="The unreduced recipe: the arms' full overrides and the long arms "
                              "a method runs only on request (GPU-sized where the spec's recipe is)."),
    claims: str = typer.Option("", "--claims", metavar="A,B", help="Only these claims' runs (others read NOT RUN)."),
    seeds: str = typer.Option("all", "--seeds", metavar="reported|dev|all|0,1", help="Which seeds to run."),
    render_only: bool = typer.Option(False, "--render-only", help="Redraw the report from reports/<slug>.json alone."),
    from_store: bool = typer.Option(False, "--from-store", help="Render what the run store holds now, starting "
                                    "nothing (unfinished runs read NOT RUN): an interim report of a long reproduction."),
    no_reuse: bool = typer.Option(False, "--no-reuse", help="Run every arm in the store, even where the committed "
                                  "report (<out-dir>/<slug>.json) holds a finished run under the same key."),
    budget: Optional[float] = typer.Option(None, "--budget", metavar="SECONDS", min=1,
                                           help="Stop starting runs after this long (unfinished ones resume next time)."),
    address: Optional[str] = typer.Option(None, "--address", envvar="RAY_ADDRESS",
                                          help="Ray cluster for the runs (default: an embedded local Ray)."),
    no_ray: bool = typer.Option(False, "--no-ray", help="Local processes through the same runner (no Ray needed)."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Run store (default results/reproduce/<slug>; on "
                                          "a cluster a path every node mounts)."),
    assume_shared_storage: bool = typer.Option(False, "--assume-shared-storage",
                                               help="The store is a mount every node sees (skip the multi-node check)."),
    scoreboard: bool = typer.Option(False, "--scoreboard", help="Only rewrite reports/index.md, reports/index.html and "
                                    "README's methods table from the committed reports/<slug>.json."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or per-run lines (errors still print)."),
) -> None:
    """Run the spec's acceptance experiment (method vs baselines, per seed) and write the report.

    Example: methodlab reproduce grokking_flatness --quick
    """
    import os

    from methodlab.cli.common import writable_folder
    from methodlab.core.errors import ConfigError
    from methodlab.core.registry import get_spec, method_slugs

    if scoreboard:
        if slug or all_methods:
            raise ConfigError("--scoreboard takes no method: it reads every committed report", field="--scoreboard")
        from methodlab.reproduce.scoreboard import write

        console.print(f"[bold green]scoreboard[/]: {write(out_dir or 'reports')}")
        return
    if all_methods == bool(slug):
        raise ConfigError("give one method slug or --all", field="slug")
    if quiet:  # read by runners.progress, here and in the reproduction's worker processes
        os.environ["METHODLAB_QUIET"] = "1"
    if out_dir is not None:
        writable_folder(out_dir, field="--out-dir")  # before hours of runs, not at the report's write
    slugs = method_slugs() if all_methods else [slug]
    for s in slugs:
        get_spec(s)  # an unknown slug: one line naming it
    from methodlab.reproduce.run import reproduce as run_study

    for s in slugs:
        report = run_study(study_of(s), out_dir=out_dir, storage=storage if not all_methods else None, seeds=seeds,
                           quick=quick, full=full, claims=claims, render_only=render_only, from_store=from_store,
                           reuse=not no_reuse, budget_s=budget, address=address, use_ray=not no_ray, workers=workers,
                           assume_shared_storage=assume_shared_storage,
                           log=(lambda m: None) if quiet else (lambda m: console.print(m, highlight=False)))
        if report is not None:
            console.print(f"[bold green]report[/]: {report}")

