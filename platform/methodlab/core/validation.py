"""Turn pydantic errors into one readable ConfigError naming the file and the field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from methodlab.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def describe(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    return describe_errors(err.errors(), prefix, model)


def describe_errors(errors: list[dict], prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """pydantic error dicts -> "loc: message; ..."; with `model`, an unknown field names the nearest real one."""
    lines = []
    for e in errors:
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
            guess = nearest(str(e["loc"][-1]), fields_at(model, e["loc"][:-1])) if model and e["loc"] else None
            if guess:
                msg += f"; did you mean {guess}?"
        lines.append(f"{loc or '<root>'}: {msg}")
    return "; ".join(lines)


def fields_at(model: Any, loc: tuple) -> list[str]:
    """Field names of the (nested) model a location points into; [] when it is not a model."""
    from methodlab.core.overrides import _unwrap_optional, field_annotation

    node = field_annotation(model, ".".join(str(p) for p in loc)) if loc else model
    for member in _unwrap_optional(node):
        fields = getattr(member, "model_fields", None)
        if fields is not None:
            return list(fields)
    return []


def nearest(name: str, candidates) -> str | None:
    from methodlab.core.overrides import nearest as _nearest

    return _nearest(name, candidates)


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
