"""Turn pydantic errors into one readable ConfigError naming the file and the field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from methodlab.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def describe(err: ValidationError, prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{loc or '<root>'}: {msg}")
    return "; ".join(lines)


def validate_model(cls: type[M], data: Any, *, where: str | None = None, prefix: str = "") -> M:
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe(err, prefix), where=where) from None


def allowed_fields(cls: type[BaseModel]) -> list[str]:
    return sorted(cls.model_fields)


def check_dotted_path(cls: type[BaseModel], path: str, *, where: str | None = None) -> None:
    """Raise unless `path` (a.b.c) names a field of the (nested) pydantic model `cls`."""
    node: Any = cls
    walked = []
    for part in path.split("."):
        fields = getattr(node, "model_fields", None)
        if fields is None or part not in fields:
            allowed = ", ".join(sorted(fields)) if fields else "(not a nested config)"
            raise ConfigError(f"unknown config field {part!r}; allowed: {allowed}", where=where,
                              field=".".join([*walked, part]))
        walked.append(part)
        node = fields[part].annotation
