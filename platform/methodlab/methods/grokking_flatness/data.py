"""Train/eval tensors for both tasks, built from methodlab.data sources (no network) and moved once to the
run's device: every batch is then an index into tensors that already live there."""

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


def build_data(cfg, device="cpu") -> TaskData:
    """The split as numpy (methodlab.data), then one copy to `device` (ctx.device in a run)."""
    split_seed = cfg.seed if cfg.split_seed is None else cfg.split_seed
    if cfg.task == "digits":
        xtr, ytr, xte, yte = load_digits_split(split_seed, train_subset=cfg.digits_train_subset)
        return TaskData(*(torch.as_tensor(a, device=device) for a in (xtr, ytr, xte, yte)))
    train, val = split_equations(cfg.p, cfg.op, cfg.train_frac, split_seed)
    tr, va = torch.as_tensor(train, device=device), torch.as_tensor(val, device=device)
    return TaskData(tr, tr[:, 5].clone(), va, va[:, 5].clone(), Vocab(cfg.p).size)
