"""RunContext: all a method's `fit` sees of the runtime (local process, Ray Train worker, Tune trial)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from methodlab.core import faults

CheckpointWriter = Callable[[Path], None]
ReportFn = Callable[[dict, Optional[Path]], None]


@dataclass
class RunContext:
    """`report(metrics, checkpoint=writer)`: the writer fills a fresh directory (rank 0 only);
    the runner persists it atomically. `checkpoint` is the directory to resume from, or None."""

    rank: int = 0
    world_size: int = 1
    device: Any = "cpu"
    seed: int = 0
    checkpoint: Path | None = None
    report_fn: ReportFn | None = None
    prepare_model_fn: Callable[[Any], Any] | None = None
    prepare_loader_fn: Callable[[Any], Any] | None = None
    history: list[dict] = field(default_factory=list)
    quiet: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def report(self, metrics: dict, checkpoint: CheckpointWriter | None = None) -> None:
        faults.on_report(metrics, self.rank, len(self.history))  # no-op unless METHODLAB_FAULT_* is set
        clean = {k: _scalar(v) for k, v in metrics.items()}
        self.history.append(clean)
        tmp = None
        try:
            if checkpoint is not None and self.is_main:
                tmp = Path(tempfile.mkdtemp(prefix="methodlab-ckpt-"))
                checkpoint(tmp)
            if self.report_fn is not None:
                self.report_fn(clean, tmp)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def progress(self, iterable=None, total: int | None = None, desc: str = "working", unit: str = "item"):
        """`for x in ctx.progress(xs, desc="rollouts"):` a bar with rate and time left on a terminal, a line
        every few seconds in a log or Ray job; silent under --quiet and on every rank but 0. Without an
        iterable, loops over range(total)."""
        from methodlab.core.progress import track

        items = range(total) if iterable is None else iterable
        return track(items, desc, total=total, quiet=self.quiet or not self.is_main, unit=unit)

    def prepare_model(self, model):
        return self.prepare_model_fn(model) if self.prepare_model_fn and self.world_size > 1 else model

    def prepare_loader(self, loader):
        return self.prepare_loader_fn(loader) if self.prepare_loader_fn and self.world_size > 1 else loader


def _scalar(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
