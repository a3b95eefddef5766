"""`key=value` overrides on nested dicts, values parsed as YAML scalars/lists (`lr=3e-3`, `reg=none`)."""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping

import yaml

from methodlab.core.errors import ConfigError


def split_override(text: str) -> tuple[str, str]:
    """"key=value" -> (key, the raw value text)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} is not of the form key=value", where="command line")
    return key, raw


def parse_override(text: str, model: Any = None) -> tuple[str, Any]:
    """"key=value" -> (key, value parsed as YAML). With `model` (a pydantic model class the dotted key is a path
    of), a field that takes text keeps the raw text: `two_stage=on` is 'on', not YAML's boolean True."""
    key, raw = split_override(text)
    if model is not None:
        ann = field_annotation(model, key)
        if takes_text(ann):
            try:
                loaded = yaml.safe_load(raw)
            except yaml.YAMLError:
                loaded = raw
            if isinstance(loaded, str):  # YAML's own reading: quotes removed
                return key, loaded
            if loaded is None and type(None) in _members(ann):  # `name=null` still clears an optional field
                return key, None
            return key, raw.strip()
    return key, parse_value(raw)


def parse_value(raw: str) -> Any:
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    # YAML reads "1e-3" as a string (it wants "1.0e-3"); researchers write the short form.
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value.lower() for c in ".e") else int(value)
        except ValueError:
            pass
    return value


def _members(annotation: Any) -> list[Any]:
    import types
    from typing import Union, get_args, get_origin

    return list(get_args(annotation)) if get_origin(annotation) in (Union, types.UnionType) else [annotation]


def _unwrap_optional(annotation: Any) -> list[Any]:
    """The members of a Union / Optional annotation (NoneType dropped); [annotation] for anything else."""
    import types
    from typing import Union, get_args, get_origin

    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def field_annotation(model: Any, dotted: str) -> Any:
    """The annotation of the field a dotted path names in a (nested) pydantic model, or None if it names none."""
    node = model
    ann = None
    for part in dotted.split("."):
        fields = None
        for member in _unwrap_optional(node):
            fields = getattr(member, "model_fields", None)
            if fields is not None:
                break
        if fields is None or part not in fields:
            return None
        ann = node = fields[part].annotation
    return ann


def takes_text(annotation: Any) -> bool:
    """True when every non-None member of the annotation is str or a Literal of strings (or a str Enum)."""
    import enum
    from typing import Literal, get_args, get_origin

    if annotation is None:
        return False
    members = _unwrap_optional(annotation)
    for m in members:
        if m is str:
            continue
        if get_origin(m) is Literal and all(isinstance(v, str) for v in get_args(m)):
            continue
        if isinstance(m, type) and issubclass(m, enum.Enum) and all(isinstance(e.value, str) for e in m):
            continue
        return False
    return bool(members)


def nearest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a mistyped name (difflib), or None."""
    import difflib

    found = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return found[0] if found else None


def set_dotted(data: dict, key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {key!r}: {part!r} is not a mapping", field=key)
        node = nxt
    node[parts[-1]] = value


def get_dotted(data: Mapping, key: str, default: Any = None) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def apply_overrides(data: Mapping, overrides: Iterable[str] | Mapping[str, Any]) -> dict:
    """Return a deep copy of `data` with dotted overrides applied (strings "k=v" or a mapping)."""
    out = copy.deepcopy(dict(data))
    items = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    for key, value in items:
        set_dotted(out, key, value)
    return out


def deep_merge(base: Mapping, top: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
