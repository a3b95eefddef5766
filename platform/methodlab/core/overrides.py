"""`key=value` overrides on nested dicts, values parsed as YAML scalars/lists (`lr=3e-3`, `reg=none`)."""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping

import yaml

from methodlab.core.errors import ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} is not of the form key=value")
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
    return key, value


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
