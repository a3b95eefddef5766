"""Fault injection for reliability tests: kill the current process at a chosen report or inside a
checkpoint write. Driven only by environment variables, so the same hooks fire in a local run, a Ray
Train worker or a Tune trial (Ray workers inherit the environment of the `ray.init` / `ray start`
process that launched their raylet, or get it from a runtime_env's env_vars). With none of the
variables set every hook returns at once and nothing changes.

METHODLAB_FAULT_KILL_AT_STEP=N
    `RunContext.report` dies at the first report whose `step` (else `epoch`, else the number of
    reports so far in this process) is >= N, before the report or its checkpoint reach the runner:
    that report and its checkpoint are lost, as in a real crash.
METHODLAB_FAULT_RANK=R
    Only rank R fires (default 0; `any`: every rank).
METHODLAB_FAULT_KILL_IN_CHECKPOINT=K
    The K-th `save_checkpoint` of this process dies after the temp folder is written and synced.
METHODLAB_FAULT_CHECKPOINT_PHASE=before_rename|mid_replace
    Where inside the write (default before_rename). mid_replace: when an existing checkpoint folder
    is replaced, between the two halves of the replace (after the atomic swap, before the old copy
    is deleted; or, without renameat2, after the old folder was renamed aside).
METHODLAB_FAULT_ONCE_FILE=PATH
    Fire only if PATH does not exist; it is created (O_EXCL) just before dying and holds one JSON
    record of what was injected (kind, step, rank, pid, cwd: a Tune trial runs in its trial folder).
    A restarted worker or retried trial finds the file and runs on. Without it, every process fires.
METHODLAB_FAULT_MODE=kill|raise
    kill (default): SIGKILL this process, no cleanup, no atexit. raise: raise InjectedFault instead,
    for in-process tests of the hooks themselves.

Probes (they change nothing; the data-parallel tests read what they write):
METHODLAB_FAULT_SAMPLE_LOG=DIR
    `RunContext.shard` appends the indices each rank takes to DIR/samples-<pid>.jsonl (one line per
    call: rank, world size, call number, the shard as a list), so a test counts what every rank saw.
METHODLAB_FAULT_COLLECTIVE_LOG=DIR
    The Train worker wraps torch.distributed's all_reduce / broadcast / all_gather / reduce_scatter (and
    their tensor forms): each call is recorded in DIR/collectives-<pid>.jsonl, and one on a tensor off the
    run's device or in float64 raises instead of reaching the backend.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

KILL_AT_STEP = "METHODLAB_FAULT_KILL_AT_STEP"
RANK = "METHODLAB_FAULT_RANK"
KILL_IN_CHECKPOINT = "METHODLAB_FAULT_KILL_IN_CHECKPOINT"
CHECKPOINT_PHASE = "METHODLAB_FAULT_CHECKPOINT_PHASE"
ONCE_FILE = "METHODLAB_FAULT_ONCE_FILE"
MODE = "METHODLAB_FAULT_MODE"
SAMPLE_LOG = "METHODLAB_FAULT_SAMPLE_LOG"
COLLECTIVE_LOG = "METHODLAB_FAULT_COLLECTIVE_LOG"
ALL = (KILL_AT_STEP, RANK, KILL_IN_CHECKPOINT, CHECKPOINT_PHASE, ONCE_FILE, MODE, SAMPLE_LOG, COLLECTIVE_LOG)

_saves = 0  # save_checkpoint calls in this process (per process: a restarted worker counts from 0)
_shards = 0  # RunContext.shard calls in this process
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_gather_into_tensor",
               "reduce_scatter_tensor")


class InjectedFault(RuntimeError):
    """Raised instead of dying when METHODLAB_FAULT_MODE=raise."""


def active() -> bool:
    return bool(os.environ.get(KILL_AT_STEP) or os.environ.get(KILL_IN_CHECKPOINT))


def on_report(metrics: dict, rank: int, reports_so_far: int) -> None:
    """Hook at the top of RunContext.report."""
    target = os.environ.get(KILL_AT_STEP)
    if not target or not _rank_matches(rank):
        return
    step = metrics.get("step", metrics.get("epoch", reports_so_far + 1))
    try:
        due = float(step) >= float(target)
    except (TypeError, ValueError):
        return
    if due:
        _fire({"kind": "kill_at_step", "step": _plain(step), "rank": rank})


def on_checkpoint_write(phase: str, directory: Any) -> None:
    """Hook inside save_checkpoint: phase 'before_rename' (counted) or 'mid_replace'."""
    global _saves
    target = os.environ.get(KILL_IN_CHECKPOINT)
    if not target:
        return
    if phase == "before_rename":
        _saves += 1
    if phase != os.environ.get(CHECKPOINT_PHASE, "before_rename") or str(_saves) != target.strip():
        return
    _fire({"kind": "kill_in_checkpoint", "phase": phase, "save": _saves, "directory": str(directory)})


def _rank_matches(rank: int) -> bool:
    want = os.environ.get(RANK, "0").strip()
    return want == "any" or want == str(rank)


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _fire(record: dict) -> None:
    once = os.environ.get(ONCE_FILE)
    record = {**record, "pid": os.getpid(), "cwd": os.getcwd(), "time": time.time()}
    if once:
        try:  # O_EXCL: of two ranks or trials racing to the marker, exactly one fires
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    if os.environ.get(MODE, "kill") == "raise":
        raise InjectedFault(json.dumps(record))
    os.kill(os.getpid(), signal.SIGKILL)


def on_shard(part: Any, rank: int, world_size: int) -> None:
    """Hook in RunContext.shard: record this rank's indices (the sample probe)."""
    global _shards
    folder = os.environ.get(SAMPLE_LOG)
    if not folder:
        return
    _shards += 1
    values = part.tolist() if hasattr(part, "tolist") else list(part)
    _append(folder, "samples", {"rank": rank, "world": world_size, "call": _shards, "idx": values})


def install_collective_guard(device: Any, rank: int) -> None:
    """Wrap torch.distributed's collectives in this process (the collective probe), checking every tensor
    against the run's `device` and refusing float64. Idempotent; a no-op unless the probe is on."""
    folder = os.environ.get(COLLECTIVE_LOG)
    if not folder:
        return
    import torch
    import torch.distributed as dist

    def tensors_of(args, kwargs):
        out = []
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                out.append(a)
            elif isinstance(a, (list, tuple)):
                out.extend(x for x in a if isinstance(x, torch.Tensor))
        return out

    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, "_methodlab_guard", False):
            continue

        def guarded(*args, _fn=fn, _name=name, **kwargs):
            ts = tensors_of(args, kwargs)
            bad = [f"{t.device}/{t.dtype}" for t in ts if t.device != device or t.dtype == torch.float64]
            _append(folder, "collectives", {"rank": rank, "op": _name, "device": str(device),
                                            "tensors": [f"{t.device}/{t.dtype}" for t in ts], "bad": bad})
            if bad:
                raise RuntimeError(f"collective {_name} on {', '.join(bad)}; the run's device is {device} and "
                                   "float64 is refused")
            return _fn(*args, **kwargs)

        guarded._methodlab_guard = True
        setattr(dist, name, guarded)


def read_probe(folder, kind: str) -> dict[int, list[dict]]:
    """A probe's records ("samples" or "collectives") by rank, each rank's in call order (one file per process)."""
    from pathlib import Path

    by_rank: dict[int, list[dict]] = {}
    for f in sorted(Path(folder).glob(f"{kind}-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            by_rank.setdefault(r["rank"], []).append(r)
    return by_rank


def _append(folder: str, kind: str, record: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{kind}-{os.getpid()}.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")
