"""`methodlab methods list|show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def device_policy(spec) -> str:
    """One line: where the method runs and which precisions / compilation it takes (SPEC's device policy)."""
    if spec.cpu_only:
        return f"devices: CPU only ({spec.cpu_only})"
    note = f" ({spec.precision_note})" if spec.precision_note else ""
    comp = f"no ({spec.no_compile})" if spec.no_compile else "yes"
    return f"devices: CPU or GPU   precision: {' | '.join(spec.precisions)}{note}   compile: {comp}"


def parallel_policy(spec) -> str:
    """One line: whether scaling.num_workers > 1 trains data-parallel, or why it is refused."""
    if spec.single_worker:
        return f"data parallel: no, num_workers 1 ({spec.single_worker})"
    refused = "; ".join(f"setting {k!r} refused: {v}" for k, v in spec.single_worker_settings.items())
    return "data parallel: yes (scaling.num_workers > 1 shards each global batch over the ranks)" + \
        (f"; {refused}" if refused else "")


def type_text(ann: Any) -> str:
    """A config field's type as a reader wants it: choices spelled out ('none' | 'anti_flat'), Optional as
    `| None`, containers with their element type, classes by name."""
    import enum
    import types
    from typing import Literal, Union, get_args, get_origin

    origin, args = get_origin(ann), get_args(ann)
    if ann is type(None) or ann is None:
        return "None"
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return " | ".join(repr(m.value) for m in ann)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if a is Ellipsis else type_text(a) for a in args)
        return f"{name}[{inner}]" if args else name
    return getattr(ann, "__name__", str(ann).replace("typing.", ""))


def default_text(field) -> str:
    """The value a field takes when nothing sets it: a default_factory's value, a nested config as its values,
    `(required)` when there is none (never pydantic's PydanticUndefined)."""
    from pydantic import BaseModel

    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str)
    return repr(value)


def jobs_dir() -> Path:
    """The repo's jobs/ folder (absent in an installed wheel)."""
    import methodlab

    return Path(methodlab.__file__).resolve().parents[2] / "jobs"


def job_presets(slug: str) -> list[tuple[str, str]]:
    """(path relative to the repo, description) of each jobs/<slug>/*.yaml; [] where there is no jobs/ folder."""
    import yaml

    folder = jobs_dir() / slug
    out = []
    for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            desc = (yaml.safe_load(f.read_text()) or {}).get("description") or ""
        except (yaml.YAMLError, OSError, UnicodeDecodeError, AttributeError):
            desc = "(unreadable: methodlab validate it)"
        out.append((f"jobs/{slug}/{f.name}", " ".join(str(desc).split())))
    return out


@app.command("show", epilog=example("methodlab methods show grokking_flatness"))
@friendly
def show(slug: str = typer.Argument(..., help="Method slug (`methodlab methods list`)."),
         as_json: bool = typer.Option(False, "--json", help="Print the config JSON schema.")) -> None:
    """Show a method's paper, settings, primary metric, job presets, smoke preset and config fields
    (type with its allowed values, default, description)."""
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    cls = spec.config_cls()
    if as_json:
        console.print_json(json.dumps(cls.model_json_schema()))
        return
    console.print(f"[bold]{spec.slug}[/] — {spec.title}\n{spec.paper}")
    console.print(f"settings: {', '.join(spec.setting_names())}   primary metric: {cls.primary_metric} ({cls.mode})")
    console.print(device_policy(spec), highlight=False)
    console.print(parallel_policy(spec), highlight=False)
    presets = job_presets(slug)
    if presets:
        table = Table("job preset (methodlab run ...)", "description", title="job presets", title_justify="left")
        for path, desc in presets:
            table.add_row(path, desc)
        console.print(table)
    smoke = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in cls.smoke.items())
    console.print(f"smoke preset (--smoke): {smoke or '(none)'}", highlight=False)
    table = Table("field", "type", "default", "description", title="config fields", title_justify="left")
    for name, f in cls.model_fields.items():
        table.add_row(name, type_text(f.annotation), default_text(f), f.description or "")
    console.print(table)
