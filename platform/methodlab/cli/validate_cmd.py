"""`methodlab validate FILE...`: jobs/, search_spaces/, serve/ and k8s/ files, before anything runs."""

from __future__ import annotations

from typing import List

import typer

from methodlab.cli.common import console, err_console


def validate(files: List[str] = typer.Argument(..., help="YAML files; the folder decides the kind.")) -> None:
    """Validate files fully (method config included). Exit 2 if any is invalid.

    Example: methodlab validate jobs/*/*.yaml search_spaces/*/*.yaml serve/*.yaml k8s/*.yaml
    """
    from methodlab.core.errors import MethodlabError
    from methodlab.specs.files import load_any

    bad = 0
    for f in files:
        try:
            kind = load_any(f)
            console.print(f"[green]ok[/] {f} ({kind})")
        except MethodlabError as err:
            bad += 1
            err_console.print(f"[bold red]invalid[/] {err}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(2)
