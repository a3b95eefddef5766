"""Where derived data is cached on this machine: one place the platform reads the environment for it, so no
method does (`METHODLAB_DATA_DIR` for generated datasets and unpacked archives, `METHODLAB_CACHE` for model-side
caches such as embeddings). Read when called, never at import time."""

from __future__ import annotations

import os
from pathlib import Path

HOME_CACHE = Path.home() / ".cache" / "methodlab"


def data_dir(sub: str = "") -> Path:
    """METHODLAB_DATA_DIR (default ~/.cache/methodlab/data), optionally a subfolder of it."""
    root = Path(os.environ.get("METHODLAB_DATA_DIR") or HOME_CACHE / "data")
    return root / sub if sub else root


def cache_dir(sub: str = "") -> Path:
    """METHODLAB_CACHE (default ~/.cache/methodlab), optionally a subfolder of it."""
    root = Path(os.environ.get("METHODLAB_CACHE") or HOME_CACHE)
    return root / sub if sub else root


def hub_offline() -> None:
    """Hugging Face libraries never reach the network (DATA.md: no network at run time) and stay quiet; set
    here so no method touches the environment."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
