"""Checkpoint directories: config.json + weights.safetensors (+ torch_state.pt) + state.json + extras.

Nothing is unpickled: tensors come from safetensors, optimizer state from torch.load(weights_only=True),
everything else is JSON. Writes are atomic: a sibling temp dir is filled, then renamed into place.
The last file written is manifest.json (sha256 and size of every other file): loading verifies it, so a
corrupted byte that still parses is caught and named, and resume skips to the previous good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from methodlab.core import faults
from methodlab.core.errors import CheckpointError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.safetensors"
TORCH_STATE_FILE = "torch_state.pt"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"


@dataclass
class LoadedCheckpoint:
    path: Path
    method: str
    version: str
    config: dict
    weights: dict  # name -> tensor
    state: dict
    torch_state: dict | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def extra(self, name: str) -> Any:
        if name not in self.extras:
            raise CheckpointError(f"{self.path}: checkpoint has no extra {name!r}")
        return self.extras[name]


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=1, default=_json_default, allow_nan=True))


def save_checkpoint(
    directory: str | Path,
    *,
    method: str,
    config: Any,
    weights: dict,
    state: dict,
    torch_state: dict | None = None,
    extras: dict[str, Any] | None = None,
    version: str = "1",
) -> Path:
    """Write a checkpoint atomically into `directory` (replaced if it exists)."""
    from safetensors.torch import save_file
    import torch

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config)
        write_json(tmp / CONFIG_FILE, {"method": method, "version": version, "config": cfg})
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in weights.items()}
        save_file(tensors, str(tmp / WEIGHTS_FILE))
        if torch_state is not None:  # CPU copies: a checkpoint written on a GPU loads anywhere
            from methodlab.core.device import to_cpu

            torch.save(to_cpu(torch_state), tmp / TORCH_STATE_FILE)
        write_json(tmp / STATE_FILE, state)
        for name, value in (extras or {}).items():
            write_json(tmp / f"extra_{name}.json", value)
        _fsync_dir(tmp)
        write_manifest(tmp)  # last: a manifest present means every file it lists was complete
        faults.on_checkpoint_write("before_rename", directory)  # no-op unless METHODLAB_FAULT_* is set
        if directory.exists():
            if _exchange(tmp, directory):  # one atomic swap: `directory` is never missing
                faults.on_checkpoint_write("mid_replace", directory)
                shutil.rmtree(tmp, ignore_errors=True)  # now holds the old checkpoint
            else:  # no renameat2: two renames; a crash between them leaves the old folder as `.old-*`
                old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
                os.replace(directory, old)
                faults.on_checkpoint_write("mid_replace", directory)
                os.replace(tmp, directory)
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: str | Path) -> Path:
    """manifest.json: {"files": {relative path: {"sha256", "size"}}} for every file of the checkpoint."""
    directory = Path(directory)
    files = {str(f.relative_to(directory)): {"sha256": _sha256(f), "size": f.stat().st_size}
             for f in sorted(directory.rglob("*")) if f.is_file() and f.name != MANIFEST_FILE}
    path = directory / MANIFEST_FILE
    write_json(path, {"algorithm": "sha256", "files": files})
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
    return path


def verify_checkpoint(directory: str | Path) -> bool:
    """Check every file against manifest.json; CheckpointError names the first that differs.
    Returns False (and checks nothing) for a checkpoint written before manifests existed."""
    directory = Path(directory)
    mpath = directory / MANIFEST_FILE
    if not mpath.exists():
        return False
    try:
        files = json.loads(mpath.read_text())["files"]
        items = [(str(k), int(v["size"]), str(v["sha256"])) for k, v in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{mpath}: corrupted ({err.__class__.__name__})") from None
    for rel, size, digest in items:
        f = directory / rel
        if not f.is_file():
            raise CheckpointError(f"{f}: missing (listed in {MANIFEST_FILE})")
        if f.stat().st_size != size:
            raise CheckpointError(f"{f}: size {f.stat().st_size} bytes, the manifest says {size} (truncated or overwritten)")
        if _sha256(f) != digest:
            raise CheckpointError(f"{f}: sha256 differs from {MANIFEST_FILE} (corrupted)")
    return True


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def read_config(directory: str | Path) -> dict:
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; not a methodlab checkpoint directory")
    try:
        data = json.loads(path.read_text())
        return {"method": data["method"], "version": str(data.get("version", "1")), "config": data["config"]}
    except (ValueError, KeyError, TypeError) as err:  # ValueError: bad JSON or bytes that are not UTF-8
        raise CheckpointError(f"{path}: corrupted ({err.__class__.__name__}: {err})") from None


def load_checkpoint(directory: str | Path, *, method: str | None = None, load_torch_state: bool = False) -> LoadedCheckpoint:
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    import torch

    directory = Path(directory)
    head = read_config(directory)
    if not verify_checkpoint(directory):
        _warn_once(f"{directory}: no {MANIFEST_FILE} (written before checksums); loading it unverified")
    if method is not None and head["method"] != method:
        raise CheckpointError(f"{directory}: checkpoint of method {head['method']!r}, expected {method!r}")
    wpath = directory / WEIGHTS_FILE
    try:
        weights = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{wpath}: unreadable or truncated ({_first_line(err)})") from None
    spath = directory / STATE_FILE
    try:
        state = json.loads(spath.read_text()) if spath.exists() else {}
    except ValueError as err:  # bad JSON or bytes that are not UTF-8
        raise CheckpointError(f"{spath}: corrupted ({err})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{spath}: corrupted (a JSON object expected, got {type(state).__name__})")
    torch_state = None
    tpath = directory / TORCH_STATE_FILE
    if load_torch_state and tpath.exists():
        try:
            torch_state = torch.load(tpath, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated zip, foreign pickle: never fall back to full unpickling
            # torch's own text spans lines and suggests weights_only=False: keep the first line only
            raise CheckpointError(f"{tpath}: unreadable ({err.__class__.__name__}: {_first_line(err)})") from None
    extras = {}
    for f in sorted(directory.glob("extra_*.json")):
        try:
            extras[f.stem[len("extra_"):]] = json.loads(f.read_text())
        except ValueError as err:
            raise CheckpointError(f"{f}: corrupted ({err})") from None
    return LoadedCheckpoint(directory, head["method"], head["version"], head["config"], weights, state, torch_state, extras)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else err.__class__.__name__


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr, flush=True)


def latest_checkpoint(root: str | Path) -> Path | None:
    """Newest good checkpoint directory under root (by state.json step, then time). A checkpoint whose files
    differ from its manifest is skipped with a warning naming the file: resume falls back to the one before."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = []
    for d in root.rglob(CONFIG_FILE):
        cdir = d.parent
        if any(p.startswith(".") for p in cdir.relative_to(root).parts):
            continue  # temp dirs of an interrupted write
        try:
            step = float(json.loads((cdir / STATE_FILE).read_text()).get("step", -1))
        except (OSError, ValueError, TypeError, AttributeError):  # unreadable state: not a candidate
            continue
        found.append(((step, cdir.stat().st_mtime), cdir))
    for _, cdir in sorted(found, key=lambda kv: kv[0], reverse=True):
        try:
            verify_checkpoint(cdir)
            return cdir
        except CheckpointError as err:
            _warn_once(f"skipping corrupted checkpoint ({err}); falling back to the previous one")
    return None
