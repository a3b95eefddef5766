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
ALL = (KILL_AT_STEP, RANK, KILL_IN_CHECKPOINT, CHECKPOINT_PHASE, ONCE_FILE, MODE)

_saves = 0  # save_checkpoint calls in this process (per process: a restarted worker counts from 0)


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
