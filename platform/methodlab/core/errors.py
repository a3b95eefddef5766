"""Errors that cross layers: config problems (before Ray starts) and field errors (4xx in serving)."""

from __future__ import annotations


class MethodlabError(Exception):
    """Base class; the CLI prints these as one line without a traceback."""


class ConfigError(MethodlabError):
    """A config, job, search-space or serve file is invalid. `where` names the file, `field` the path."""

    def __init__(self, message: str, *, where: str | None = None, field: str | None = None):
        self.where, self.field, self.message = where, field, message
        prefix = ": ".join(p for p in (where, field) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class FieldError(MethodlabError):
    """A request field is out of the method's domain. Serving answers 422 naming `field`."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


class CheckpointError(MethodlabError):
    """A checkpoint directory is missing, truncated or from another method."""


class StorageError(MethodlabError):
    """The storage path cannot hold a run on this cluster (e.g. a local disk on a multi-node cluster)."""


class MissingSourceError(MethodlabError):
    """An optional data source is not installed; the message names the package or file."""
