"""`methodlab validate FILE...`: jobs/, search_spaces/, serve/ and k8s/ files, before anything runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import List

import typer

from methodlab.cli.common import console, err_console


def load_any(path: str | Path) -> str:
    """Validate a file by where it lives (search_spaces/, serve/, k8s/, else a job file); returns its kind."""
    from methodlab.cluster.k8s import validate_manifest_file
    from methodlab.core.errors import ConfigError
    from methodlab.specs.files import load_job, load_search_space, load_serve_file, read_yaml_docs

    p = Path(path)
    if not p.is_file():
        raise ConfigError("not a file" if p.exists() else "file not found", where=str(p))
    parts = p.resolve().parts
    if "search_spaces" in parts:
        load_search_space(p)
        return "search_space"
    if "serve" in parts:
        load_serve_file(p)
        return "serve"
    if "k8s" in parts:
        read_yaml_docs(p)  # unreadable or not YAML: one line
        validate_manifest_file(p)
        return "k8s"
    load_job(p)
    return "job"


def validate(
    files: List[str] = typer.Argument(..., help="YAML files; the folder decides the kind."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list each valid file (default: one summary line)."),
) -> None:
    """Validate files fully (method config included). Invalid files print one line each; a summary ends the output.
    Exit 2 if any is invalid.

    Example: methodlab validate jobs/*/*.yaml search_spaces/*/*.yaml serve/*.yaml k8s/*.yaml
    """
    from methodlab.core.errors import MethodlabError

    bad = 0
    kinds: Counter = Counter()
    for f in files:
        try:
            kind = load_any(f)
            kinds[kind] += 1
            if verbose:
                console.print(f"[green]ok[/] {f} ({kind})")
        except MethodlabError as err:
            bad += 1
            err_console.print(f"[bold red]invalid[/] {err}", highlight=False, soft_wrap=True)
    if bad:
        if len(files) > 1:  # one file: its error line says it all
            console.print(f"{bad} of {len(files)} files invalid", highlight=False)
        raise typer.Exit(2)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    console.print(f"[green]ok[/]: {len(files)} file{'s' if len(files) != 1 else ''} valid ({counts})", highlight=False)
