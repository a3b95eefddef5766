"""Train / validation / test tensors of a more_longtail run, the class prior pi (from the WHOLE training split,
never a worker's shard) and the Many / Medium / Few groups. Built from methodlab.data sources only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methodlab.data import more_longtail_lt as lt


@dataclass
class LTData:
    x_train: torch.Tensor
    y_train: torch.Tensor  # [n] int64 (multi-class) or [n, C] float multi-hot
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    counts: np.ndarray  # training images (or positive labels) per class
    groups: np.ndarray  # 0 Many / 1 Medium / 2 Few per class
    class_names: list[str]
    multilabel: bool

    @property
    def prior(self) -> torch.Tensor:
        """pi_c = n_c / sum n (multi-label: share of positive labels, so sum pi = 1 and C * w is O(1)), on the
        device of the training tensors."""
        c = self.counts.astype(np.float64)
        return torch.tensor(c / max(c.sum(), 1.0), dtype=torch.float32, device=self.x_train.device)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def raw(cfg) -> dict:
    seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    if cfg.dataset == "digits_lt":
        return lt.digits_lt(seed, cfg.imbalance, cfg.n_max or 120, cfg.test_per_class, cfg.val_per_class,
                            cfg.shuffle_classes)
    if cfg.dataset == "fmnist_lt":
        return lt.fmnist_lt(seed, cfg.imbalance, cfg.n_max or 6000, max(cfg.val_per_class, 0), cfg.data_root,
                            cfg.shuffle_classes)
    if cfg.dataset == "digits_mosaic":
        return lt.digit_mosaics(seed, cfg.imbalance, cfg.mosaic_train, cfg.mosaic_test, cfg.test_per_class)
    if cfg.dataset in ("cifar10_lt", "cifar100_lt"):
        return lt.cifar_lt(cfg.data_root, 10 if cfg.dataset == "cifar10_lt" else 100, seed, cfg.imbalance,
                           max(cfg.val_per_class, 1))
    return lt.list_file_lt(cfg.data_root, cfg.train_list, cfg.test_list, cfg.val_list, cfg.image_size,
                           cfg.max_images, seed)


def build_data(cfg, device="cpu") -> LTData:
    """The splits as tensors on `device` (the run's; the host by default), copied there once."""
    d = raw(cfg)
    c = int(d["n_classes"])
    ml = bool(d.get("multilabel", False))
    ytr = d["y_train"]
    counts = ytr.sum(0).astype(np.int64) if ml else np.bincount(ytr, minlength=c)
    ydt = torch.float32 if ml else torch.int64
    t = lambda a, dt=torch.float32: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=device)  # noqa: E731
    return LTData(t(d["x_train"]), t(ytr, ydt), t(d["x_val"]), t(d["y_val"], ydt), t(d["x_test"]), t(d["y_test"], ydt),
                  c, counts, lt.make_groups(counts, cfg.groups), list(d["class_names"]), ml)
