"""One file per data-parallel method: its `CASE` for tests/reliability/test_data_parallel.py (a 1-worker run and
a 2-worker Ray Train run of the same job, compared). Methods that refuse num_workers > 1 have no file here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    job: str  # the job file both runs start from (smoke preset on)
    over: tuple[str, ...]  # overrides that keep both runs short (each test well under 30 s)
    curve: tuple[str, ...]  # metrics.jsonl keys compared report by report (the loss curve)
    rel: float  # relative tolerance on every compared value ...
    why: str  # ... and why that tolerance (float summation order, BatchNorm statistics per rank, sampling)
    abs: float = 0.0  # absolute tolerance added to rel (for values near 0)
    final_only: bool = False  # compare only the last report (methods whose ranks sample independently)
    same_batches: bool = True  # the ranks' shards of each call make up exactly the 1-worker batch
    default: bool = False  # runs in `make test`; the others are `slow` (make reliability)
