"""Progress for long work: a bar with rate and time left on a terminal, a line every few seconds in a log
or a Ray job. `--quiet` (or METHODLAB_QUIET=1, which the CLI sets so reproduction subprocesses inherit it)
silences it. In core so that methods reach it through `RunContext.progress` (they never import runners)."""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def env_quiet() -> bool:
    return os.environ.get("METHODLAB_QUIET", "") not in ("", "0", "false")


def _hms(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class Progress:
    """`update(metrics)` once per report. With `total` (steps), shows a bar, rate and ETA; on a
    terminal it redraws one line, elsewhere (logs, CI) it prints a line every `every_s` seconds."""

    def __init__(self, label: str, key_metric: str | None = None, quiet: bool = False, every_s: float = 2.0,
                 total: int | None = None, unit: str = "step", start: float = 0.0):
        self.label, self.key, self.every, self.total, self.unit = label, key_metric, every_s, total, unit
        self.quiet = quiet or env_quiet()
        self.tty = sys.stderr.isatty()
        self.t0 = self.last = time.time()
        self.n = 0
        self.first_pos = float(start)  # a resumed run starts past 0: the rate counts this process's work only
        self._drawn = False

    def note(self, text: str) -> None:
        if not self.quiet:
            self._clear()
            print(f"[{self.label}] {text}", file=sys.stderr, flush=True)

    def line(self, pos: float, metrics: dict | None = None) -> str:
        """The text of one progress line at position `pos` (pure: unit-tested)."""
        now = time.time()
        elapsed = max(now - self.t0, 1e-9)
        rate = max(pos - self.first_pos, 0) / elapsed
        val = (metrics or {}).get(self.key) if self.key else None
        shown = f"  {self.key}={_fmt(val)}" if isinstance(val, (int, float)) else ""
        if self.total:
            frac = min(max(pos / self.total, 0.0), 1.0)
            width = 24
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            eta = (self.total - pos) / rate if rate > 0 else float("nan")
            left = _hms(eta) if eta == eta else "--:--"
            return (f"[{self.label}] |{bar}| {frac * 100:5.1f}% {int(pos)}/{self.total} {self.unit}s"
                    f"{shown}  {rate:.3g} {self.unit}/s  {_hms(elapsed)} elapsed, {left} left")
        return f"[{self.label}] {self.unit} {int(pos)}{shown}  {rate:.3g} {self.unit}/s  {_hms(elapsed)} elapsed"

    def update(self, metrics: dict | None = None, pos: float | None = None) -> None:
        self.n += 1
        metrics = metrics or {}
        if pos is None:
            pos = metrics.get("step", metrics.get("epoch", self.n))
        if self.quiet:
            return
        now = time.time()
        final = bool(self.total) and pos >= self.total
        if not final and now - self.last < (0.2 if self.tty else self.every):
            return
        self.last = now
        text = self.line(float(pos), metrics)
        if self.tty:
            print("\r" + text[:200].ljust(100), end="", file=sys.stderr, flush=True)
            self._drawn = True
        else:
            print(text, file=sys.stderr, flush=True)

    def _clear(self) -> None:
        if self._drawn:
            print(file=sys.stderr, flush=True)
            self._drawn = False

    def done(self, ok: bool = True) -> None:
        self._clear()
        self.note(f"{'finished' if ok else 'stopped'} in {time.time() - self.t0:.1f}s")


def track(items: Iterable[T], label: str, total: int | None = None, quiet: bool = False, unit: str = "item") -> Iterator[T]:
    """`for x in track(xs, "rollouts"):` a progress bar over any loop (dataset generation, rollouts)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    bar = Progress(label, quiet=quiet, total=total, unit=unit)
    i = 0
    for i, item in enumerate(items, 1):
        yield item
        bar.update(pos=i)
    bar._clear()
