"""Lazy access to the registry table in methodlab.methods (slug -> "module:SPEC")."""

from __future__ import annotations

from methodlab.core.errors import ConfigError
from methodlab.core.method import MethodSpec, import_object


def _table() -> dict[str, str]:
    from methodlab.methods import REGISTRY

    return REGISTRY


def method_slugs() -> list[str]:
    return sorted(_table())


def get_spec(slug: str) -> MethodSpec:
    table = _table()
    if slug not in table:
        raise ConfigError(f"unknown method {slug!r}; registered: {', '.join(sorted(table))}", field="method")
    spec = import_object(table[slug])
    if not isinstance(spec, MethodSpec) or spec.slug != slug:
        raise ConfigError(f"registry entry {table[slug]!r} is not the MethodSpec of {slug!r}")
    return spec
