"""Event sequences -> padded tensors, time statistics and the training mark prior (no network)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from methodlab.data.event_sequences import EventSplits, load_flights, load_pizzaplace, load_sequence_files
from methodlab.data.hawkes import hawkes_splits
from methodlab.methods.mtpp_threshold.threshold import mark_prior
from methodlab.methods.mtpp_threshold.tpp import TimeStats


@dataclass
class Padded:
    marks: torch.Tensor  # [S, L] long, padding = M
    gaps: torch.Tensor  # [S, L] float, gap of the first event = 0
    mask: torch.Tensor  # [S, L] bool
    window_gap: torch.Tensor  # [S] T - t_last (0 when the window ends at the last event)
    seqs: list  # the raw (times, marks) pairs
    lengths: np.ndarray | None = None  # [S] events per sequence, on the host (batch trimming without a device read)

    def __post_init__(self):
        if self.lengths is None:
            self.lengths = np.array([len(t) for t, _ in self.seqs], dtype=np.int64)

    @property
    def device(self) -> torch.device:
        return self.marks.device

    def to(self, device) -> "Padded":
        """The padded tensors on `device` (moved once, at set-up); seqs and lengths stay on the host."""
        return Padded(self.marks.to(device), self.gaps.to(device), self.mask.to(device), self.window_gap.to(device),
                      self.seqs, self.lengths)


@dataclass
class EventData:
    train: Padded
    val: Padded
    test: Padded
    n_marks: int
    mark_names: list[str]
    stats: TimeStats
    prior: np.ndarray
    rare: list[int]  # the k rarest training marks
    hawkes_params: tuple | None = None  # (mu, alpha, beta): ground truth for the oracle


def pad(seqs, n_marks: int, window_end: list[float] | None = None) -> Padded:
    """Padded host tensors (built on the CPU on purpose; build_data moves them to the run's device once)."""
    L = max(len(t) for t, _ in seqs)
    marks = torch.full((len(seqs), L), n_marks, dtype=torch.long, device="cpu")
    gaps = torch.zeros(len(seqs), L, device="cpu")
    mask = torch.zeros(len(seqs), L, dtype=torch.bool, device="cpu")
    wgap = torch.zeros(len(seqs), device="cpu")
    for i, (t, m) in enumerate(seqs):
        n = len(t)
        marks[i, :n] = torch.from_numpy(np.asarray(m, dtype=np.int64))
        gaps[i, 1:n] = torch.from_numpy(np.diff(np.asarray(t, dtype=np.float64)).astype(np.float32))
        mask[i, :n] = True
        if window_end is not None:
            wgap[i] = float(window_end[i] - t[-1])
    return Padded(marks, gaps, mask, wgap, seqs)


def load_splits(cfg) -> tuple[EventSplits, tuple | None]:
    if cfg.dataset in ("hawkes", "poisson"):
        tr, va, te, params = hawkes_splits(cfg.n_train, cfg.n_val, cfg.n_test, cfg.seq_events, cfg.data_seed,
                                           poisson=cfg.dataset == "poisson")
        return EventSplits(tr, va, te, [str(i) for i in range(5)]), params
    if cfg.dataset == "flights":
        return load_flights(seed=cfg.data_seed), None
    if cfg.dataset == "pizzaplace":
        return load_pizzaplace(), None
    from methodlab.core.paths import read_path

    path = read_path(cfg.data_path, "data_path", "a directory with train/dev/test .json|.jsonl|.csv files, or one such file",
                     "`methodlab run jobs/mtpp_threshold/simulate.yaml` writes one (results/mtpp_threshold-simulate/easytpp)")
    return load_sequence_files(path, seed=cfg.data_seed), None


def build_data(cfg, device="cpu") -> EventData:
    """The splits as padded tensors on `device` (the run's ctx.device), statistics and prior on the host."""
    splits, params = load_splits(cfg)
    M = len(splits.mark_names)
    tr, va, te = splits.train, splits.val, splits.test
    ends = splits.window_end or {}
    tr_end, va_end, te_end = ends.get("train"), ends.get("val"), ends.get("test")
    def keep(xs, n):
        if xs is None or n is None:
            return xs
        if getattr(cfg, "subset", "first") == "spread" and n < len(xs):
            return [xs[i] for i in np.unique(np.linspace(0, len(xs) - 1, n).round().astype(int))]
        return xs[:n]

    if cfg.max_train_sequences:
        tr, tr_end = keep(tr, cfg.max_train_sequences), keep(tr_end, cfg.max_train_sequences)
    if cfg.max_eval_sequences:
        k = cfg.max_eval_sequences
        va, te, va_end, te_end = keep(va, k), keep(te, k), keep(va_end, k), keep(te_end, k)
    gaps = np.concatenate([np.diff(t) for t, _ in tr])
    tgt = np.concatenate([m[1:] for _, m in tr])  # the prior counts prediction targets (events after the first)
    logs = np.log(np.maximum(gaps, 1e-6 * max(gaps.std(), 1e-12)))
    stats = TimeStats(float(gaps.mean()), float(max(gaps.std(), 1e-6)), float(logs.mean()), float(max(logs.std(), 1e-3)))
    prior = mark_prior(tgt, M)
    k = cfg.rare_marks or (2 if M <= 5 else 5)
    rare = [int(i) for i in np.argsort(prior, kind="stable")[:min(k, M)]]
    return EventData(pad(tr, M, tr_end).to(device), pad(va, M, va_end).to(device), pad(te, M, te_end).to(device), M,
                     list(splits.mark_names), stats, prior, rare, params)


def batches(n: int, batch_size: int, seed: int, epoch: int):
    """Deterministic permutation per (seed, epoch): a resumed run sees the same batches. Drawn on the host on
    purpose (the same batches on every device; `take` trims with host lengths and moves the indices)."""
    g = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g, device="cpu")
    for k in range(math.ceil(n / batch_size)):
        yield perm[k * batch_size:(k + 1) * batch_size]


def n_targets(p: Padded, idx) -> int:
    """Prediction targets (events after the first) of rows idx, from the host lengths (no device read)."""
    return int(np.maximum(p.lengths[np.asarray(idx)] - 1, 0).sum())


def take(p: Padded, idx) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows idx (host indices), trimmed to their longest sequence (less padding work): the length comes from the
    host copy, so a batch costs no device read."""
    L = int(p.lengths[np.asarray(idx)].max())
    idx = torch.as_tensor(idx, device="cpu").to(p.device, non_blocking=True)
    return p.marks[idx, :L], p.gaps[idx, :L], p.mask[idx, :L], p.window_gap[idx]
