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
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

RECORD = "record.json"
CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
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


def _plain(v: Any, depth: int = 0) -> str | None:
    """A stable text of plain data (numbers, strings, containers of them); None for anything else."""
    if depth > 6:
        return None
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, (tuple, list)):
        items = [_plain(x, depth + 1) for x in v]
        return None if None in items else f"{type(v).__name__}[{', '.join(items)}]"
    if isinstance(v, (set, frozenset)):
        items = [_plain(x, depth + 1) for x in v]
        return None if None in items else f"set[{', '.join(sorted(items))}]"
    if isinstance(v, dict):
        items = [(_plain(k, depth + 1), _plain(x, depth + 1)) for k, x in v.items()]
        return None if any(None in kv for kv in items) else "{" + ", ".join(f"{k}: {x}" for k, x in sorted(items)) + "}"
    return None


def _names(code) -> set[str]:
    """The global and attribute names a code object (and the functions nested in it) uses."""
    out = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            out |= _names(c)
    return out


def function_hash(fn: Any, package: str) -> str:
    """sha256 over the source of a task's function and, transitively, of every function and class of `package` it
    names and every plain-data constant of that package's modules it reads. The report text that shares a module
    with a task (a method's reproduce.py / diagnostics.py) is then not part of the task's key, while any code the
    task runs is. Names are matched generously (a name found in any module the function reaches): a false match only
    costs a rerun."""
    import functools
    import importlib
    import importlib.util
    import inspect
    import sys
    import types

    if isinstance(fn, str):
        module, _, name = fn.partition(":")
        fn = getattr(importlib.import_module(module), name)
    under = lambda mod: mod == package or mod.startswith(package + ".")  # noqa: E731
    parts, seen, stack = [], set(), [fn]
    while stack:
        obj = stack.pop()
        if isinstance(obj, functools.partial):
            parts.append(f"partial {_plain(list(obj.args))} {_plain(dict(obj.keywords))}")
            stack.append(obj.func)
            continue
        ident = (getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj)))
        if ident in seen:
            continue
        seen.add(ident)
        try:
            parts.append(f"{ident}\n{inspect.getsource(obj)}")
        except (OSError, TypeError):
            parts.append(repr(ident))
            continue
        codes = [obj.__code__] if hasattr(obj, "__code__") else \
            [f.__code__ for f in vars(obj).values() if hasattr(f, "__code__")] if isinstance(obj, type) else []
        names = set().union(*(_names(c) for c in codes)) if codes else set()
        home = sys.modules.get(ident[0] or "")
        modules = [home] if home is not None else []
        modules += [importlib.import_module(n) for n in sorted(names) if under(n)]  # `from <pkg module> import f`
        i = 0
        while i < len(modules):
            mod = modules[i]
            i += 1
            for n in sorted(names):
                if not hasattr(mod, n) and hasattr(mod, "__path__") and n.isidentifier():
                    # a submodule not imported yet: import it, so the key does not depend on what ran before
                    if importlib.util.find_spec(f"{mod.__name__}.{n}") is not None:
                        importlib.import_module(f"{mod.__name__}.{n}")
                if not hasattr(mod, n):
                    continue
                v = getattr(mod, n)
                v = inspect.unwrap(v) if callable(v) and hasattr(v, "__wrapped__") else v  # lru_cache, wraps
                if isinstance(v, types.ModuleType):
                    if under(v.__name__) and v not in modules:
                        modules.append(v)
                elif isinstance(v, (types.FunctionType, type)):
                    if under(getattr(v, "__module__", "") or ""):
                        stack.append(v)
                elif CONSTANT.match(n) and (data := _plain(v)) is not None:
                    # module constants by convention (UPPER_CASE): a lower-case global may be a cache that
                    # changes as the process runs, which would make the key unstable
                    parts.append(f"{mod.__name__}.{n} = {data}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def task_key(slug: str, task_id: str, seed: int, version: str, inputs: dict, mode: str, fn: Any) -> str:
    """16 hex digits of sha256(id, seed, version, inputs, mode + the method's code without its report modules + the
    task function's own code closure, `function_hash`)."""
    key = {"task": task_id, "seed": seed, "version": version, "inputs": inputs, "keyed": "function"}
    if mode != "default":
        key["mode"] = mode
    h = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode())
    pkg = method_dir(slug)
    h.update(code_hash(str(pkg)).encode())
    h.update(function_hash(fn, _package_name(pkg)).encode())
    return f"{task_id}-s{seed}-{h.hexdigest()[:16]}"


def _package_name(pkg: Path) -> str:
    """methodlab.methods.<slug> (or a test package's name) from its folder."""
    parts = [pkg.name]
    p = pkg.parent
    while (p / "__init__.py").exists():
        parts.insert(0, p.name)
        p = p.parent
    return ".".join(parts)


def legacy_task_key(slug: str, task_id: str, seed: int, version: str, inputs: dict, mode: str = "default") -> str:
    """The key tasks had before `function_hash`: the whole method package, report modules included. A result
    stored under it for the CURRENT code is still valid, so the harness adopts it under the new key."""
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
