"""The method contract and the helpers every method may use (no Ray here)."""

from methodlab.core.checkpoint import LoadedCheckpoint, load_checkpoint, save_checkpoint
from methodlab.core.context import RunContext
from methodlab.core.errors import CheckpointError, ConfigError, FieldError, MethodlabError, MissingSourceError
from methodlab.core.method import MethodConfig, MethodSpec
from methodlab.core.seeding import seed_everything

__all__ = [
    "CheckpointError", "ConfigError", "FieldError", "LoadedCheckpoint", "MethodConfig", "MethodSpec",
    "MethodlabError", "MissingSourceError", "RunContext", "load_checkpoint", "save_checkpoint", "seed_everything",
]
