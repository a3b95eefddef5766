"""The run store of a reproduction: results/reproduce/<slug>/ (or --storage). Each arm x seed is a run folder
of the platform's runner named by its key, a hash of the resolved job (method, setting, config) and of the code
it runs (the method's package and the data modules it imports); `record.json` beside the runner's files says
the run finished, when, in how long and with how much memory. A finished key is never run again; a killed run
resumes from its newest checkpoint under the same name."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

RECORD = "record.json"
PLATFORM = Path(__file__).resolve().parents[1]  # platform/methodlab


# A method's study and side studies: they declare and read runs, never run inside one, so editing a report
# section must not invalidate the fits (a task's key includes them: a task's function lives there).
REPORT_ONLY = frozenset({"reproduce.py", "diagnostics.py"})


@lru_cache(maxsize=64)
def code_hash(package_dir: str, with_reports: bool = False) -> str:
    """sha256 over the .py files of a method package (its study files only `with_reports`) and the
    methodlab.data modules they import."""
    root = Path(package_dir)
    files = sorted(f for f in root.rglob("*.py") if with_reports or f.name not in REPORT_ONLY)
    data = set()
    for f in files:
        try:
            tree = ast.parse(f.read_text())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["methodlab", "data"] and len(parts) > 2:
                    cand = PLATFORM / "data" / f"{parts[2]}.py"
                    if cand.exists():
                        data.add(cand)
    h = hashlib.sha256()
    for f in files + sorted(data):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def method_dir(slug: str) -> Path:
    """The folder of a registered method's package."""
    import importlib

    from methodlab.core.registry import _table

    return Path(importlib.import_module(_table()[slug].split(":")[0]).__file__).resolve().parent


def run_key(loaded, arm_id: str) -> str:
    """16 hex digits of sha256(resolved job + the method's code)."""
    job = {"method": loaded.job.method, "setting": loaded.job.setting,
           "config": loaded.config.model_dump(mode="json")}
    h = hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode())
    h.update(code_hash(str(method_dir(loaded.job.method))).encode())
    return f"{arm_id}-{h.hexdigest()[:16]}"


def task_key(slug: str, task_id: str, seed: int, version: str, inputs: dict, mode: str = "default") -> str:
    key = {"task": task_id, "seed": seed, "version": version, "inputs": inputs}
    if mode != "default":  # (default keys as before: finished tasks stay valid)
        key["mode"] = mode
    h = hashlib.sha256(json.dumps(key,
                                  sort_keys=True, default=str).encode())
    h.update(code_hash(str(method_dir(slug)), with_reports=True).encode())
    return f"{task_id}-s{seed}-{h.hexdigest()[:16]}"


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=1, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_record(run_dir: Path) -> dict | None:
    try:
        rec = json.loads((Path(run_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return rec if rec.get("finished") else None


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
