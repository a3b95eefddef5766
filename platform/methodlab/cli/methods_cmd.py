"""`methodlab methods list|show`."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from methodlab.cli.common import console, example, friendly

app = typer.Typer(help="The registered methods.", no_args_is_help=True)


@app.command("list", epilog=example("methodlab methods list"))
@friendly
def list_methods() -> None:
    """List registered method slugs (imports no method code)."""
    from methodlab.methods import REGISTRY

    for slug in sorted(REGISTRY):
        console.print(slug)


@app.command("show", epilog=example("methodlab methods show grokking_flatness"))
@friendly
def show(slug: str, as_json: bool = typer.Option(False, "--json", help="Print the config JSON schema.")) -> None:
    """Show a method's paper, settings, primary metric and config fields with defaults."""
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    cls = spec.config_cls()
    if as_json:
        console.print_json(json.dumps(cls.model_json_schema()))
        return
    console.print(f"[bold]{spec.slug}[/] — {spec.title}\n{spec.paper}")
    console.print(f"settings: {', '.join(spec.setting_names())}   primary metric: {cls.primary_metric} ({cls.mode})")
    table = Table("field", "type", "default", "description")
    for name, f in cls.model_fields.items():
        ann = getattr(f.annotation, "__name__", str(f.annotation)).replace("typing.", "")
        table.add_row(name, ann, repr(f.default), f.description or "")
    console.print(table)
