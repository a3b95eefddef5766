"""Paths in a method's config (issue 42): what a run READS may be anywhere (a relative path starts at the
working directory the job was started from) and is checked here, failing with one line that names the field
and the file; what a run WRITES goes through `ctx.write_path(...)` (relative: inside the run folder)."""

from __future__ import annotations

from pathlib import Path

from methodlab.core.errors import ConfigError


def read_path(value: str | Path | None, field: str, what: str, hint: str = "") -> Path:
    """`value` (config field `field`, e.g. "init_from") as an existing path; a ConfigError naming the field,
    the file and what to do otherwise. `what` says what the field should point at; `hint` how to make it."""
    if value is None or str(value) == "":
        raise ConfigError(f"this setting needs {field} ({what})", field=f"config.{field}")
    path = Path(value).expanduser()
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        fix = f"; {hint}" if hint else "; fix the path"
        raise ConfigError(f"{value}: not found{where}, expected {what}{fix}", field=f"config.{field}")
    return path
