"""Shared CLI plumbing: one-line errors instead of tracebacks, a rich console."""

from __future__ import annotations

import functools
import os
import sys

import typer
from rich.console import Console

from methodlab.core.errors import MethodlabError

# Piped into a log file, rich would assume 80 columns and cut sweep tables to "tri…"; a log has no width.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
console = Console(stderr=False, soft_wrap=True, width=_WIDTH)
err_console = Console(stderr=True, soft_wrap=True)


def friendly(fn):
    """Known errors (bad files, missing checkpoints, unknown methods) print one line and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MethodlabError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted; re-run the same command to resume from the last checkpoint")
            raise typer.Exit(130) from None

    return wrapper


def example(text: str) -> str:
    """Help epilog with an example invocation."""
    return f"Example:\n\n  {text}"


def exit_code(ok: bool) -> None:
    if not ok:
        sys.exit(1)
