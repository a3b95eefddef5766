"""Train/eval tensors for both tasks, built from methodlab.data sources (no network)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methodlab.data.digits import load_digits_split
from methodlab.data.modular import Vocab, split_equations


@dataclass
class TaskData:
    x_train: torch.Tensor  # modular: [N, 7] token rows; digits: [N, 64] floats
    y_train: torch.Tensor  # class of the answer (c, or the digit)
    x_val: torch.Tensor
    y_val: torch.Tensor
    vocab_size: int | None = None


def build_data(cfg) -> TaskData:
    split_seed = cfg.seed if cfg.split_seed is None else cfg.split_seed
    if cfg.task == "digits":
        xtr, ytr, xte, yte = load_digits_split(split_seed, train_subset=cfg.digits_train_subset)
        return TaskData(torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte), torch.from_numpy(yte))
    train, val = split_equations(cfg.p, cfg.op, cfg.train_frac, split_seed)
    tr, va = torch.from_numpy(train), torch.from_numpy(val)
    return TaskData(tr, tr[:, 5].clone(), va, va[:, 5].clone(), Vocab(cfg.p).size)
