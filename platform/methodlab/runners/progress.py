"""One-line progress for long local work: the step, the method's key metric, rate and time used."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, key_metric: str, quiet: bool = False, every_s: float = 2.0):
        self.label, self.key, self.quiet, self.every = label, key_metric, quiet, every_s
        self.t0 = self.last = time.time()
        self.n = 0

    def note(self, text: str) -> None:
        if not self.quiet:
            print(f"[{self.label}] {text}", file=sys.stderr, flush=True)

    def update(self, metrics: dict) -> None:
        self.n += 1
        now = time.time()
        if self.quiet or now - self.last < self.every:
            return
        self.last = now
        step = metrics.get("step", metrics.get("epoch", self.n))
        val = metrics.get(self.key)
        shown = f"{self.key}={val:.4g}" if isinstance(val, (int, float)) else ""
        rate = self.n / max(now - self.t0, 1e-9)
        print(f"[{self.label}] step {step}  {shown}  ({rate:.1f} reports/s, {now - self.t0:.0f}s)", file=sys.stderr, flush=True)

    def done(self) -> None:
        self.note(f"finished in {time.time() - self.t0:.1f}s")
