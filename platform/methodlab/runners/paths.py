"""Run names and storage locations, resolved to absolute paths in the driver before Ray starts
(Tune runs each trial in its own working directory, so relative paths would move)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def is_uri(path: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path))


def resolve_storage(configured: str | None, cli: str | None = None) -> str:
    raw = cli or configured or os.environ.get("METHODLAB_STORAGE") or "./results"
    return raw if is_uri(raw) else str(Path(raw).expanduser().resolve())


def default_run_name(slug: str, job_path: Path | None, setting: str, smoke: bool) -> str:
    stem = job_path.stem if job_path else setting
    return f"{slug}-{stem}" + ("-smoke" if smoke else "")
