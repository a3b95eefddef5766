"""Data of weakshot_keypoint: the synthetic set or MP-100 as tensors, behind a label guard.

`KPData.labels(idx)` is the only way to read keypoints / visibility / boxes. Inside `with data.training():`
reading any novel-class label (novel_train, novel_val, novel_test; and the novel supports when support_shots
is 0) raises NovelLabelLeak, so a training loop cannot use novel labels by mistake.

Devices: `build_data` returns the set on the host; a fit moves the data pool (images, keypoints, visibility, boxes)
to its device once with `KPData.to(device)`. The bookkeeping (class, split, keypoint count per image) stays on the
host: `index()` returns host index tensors (episode sampling is host work), `take(idx)` / `labels(idx)` gather on
the pool's device."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

from methodlab.data.weakshot_keypoint_synth import SPLIT_IDS


class NovelLabelLeak(RuntimeError):
    """A novel-class label was read during training."""


@dataclass
class KPData:
    images: torch.Tensor  # (N, S, S, 3) uint8
    cls: torch.Tensor
    split: torch.Tensor
    kcount: torch.Tensor
    k_of_class: dict
    base_classes: list
    novel_classes: list
    _kps: torch.Tensor = field(repr=False)
    _vis: torch.Tensor = field(repr=False)
    _bbox: torch.Tensor = field(repr=False)
    guarded_splits: frozenset = frozenset({SPLIT_IDS["novel_train"], SPLIT_IDS["novel_val"], SPLIT_IDS["novel_test"]})
    _training: int = 0
    reads_in_training: int = 0

    @property
    def size(self) -> int:
        return int(self.images.shape[1])

    @property
    def k_max(self) -> int:
        return int(self._kps.shape[1])

    @property
    def device(self) -> torch.device:
        return self.images.device

    def to(self, device) -> "KPData":
        """The same set (and guard state) with the data pool on `device`; bookkeeping stays on the host."""
        device = torch.device(device)
        return dataclasses.replace(self, images=self.images.to(device), _kps=self._kps.to(device),
                                   _vis=self._vis.to(device), _bbox=self._bbox.to(device))

    def take(self, idx) -> torch.Tensor:
        """Images idx (host or device indices) from the pool, on its device."""
        idx = torch.as_tensor(idx, device="cpu") if not isinstance(idx, torch.Tensor) else idx
        return self.images[idx.to(self.device, non_blocking=True)]

    def index(self, split: str, cls: int | None = None) -> torch.Tensor:
        """Host indices of the images of `split` (and class `cls`)."""
        m = self.split == SPLIT_IDS[split]
        if cls is not None:
            m &= self.cls == cls
        return torch.nonzero(m)[:, 0]

    @contextlib.contextmanager
    def training(self, support_shots: int = 1):
        """Guard: novel labels (and, with support_shots 0, the novel supports' labels) may not be read."""
        old = self.guarded_splits
        if support_shots == 0:
            self.guarded_splits = old | {SPLIT_IDS["novel_support"]}
        self._training += 1
        try:
            yield self
        finally:
            self._training -= 1
            self.guarded_splits = old

    def labels(self, idx: torch.Tensor):
        """(keypoints (n, K, 2) px, vis (n, K) bool, bbox (n, 4)) on the pool's device; raises NovelLabelLeak in
        training for novel ids (checked on the host)."""
        idx = torch.as_tensor(idx, device="cpu").reshape(-1)
        if self._training:
            bad = [int(i) for i in idx if int(self.split[i]) in self.guarded_splits]
            if bad:
                raise NovelLabelLeak(f"novel-class labels of images {bad[:5]} read during training")
            self.reads_in_training += len(idx)
        idx = idx.to(self.device, non_blocking=True)
        return self._kps[idx], self._vis[idx] > 0, self._bbox[idx]


def from_arrays(d: dict) -> KPData:
    return KPData(images=torch.from_numpy(np.ascontiguousarray(d["image"])), cls=torch.from_numpy(d["cls"]).long(),
                  split=torch.from_numpy(d["split"]).long(), kcount=torch.from_numpy(d["kcount"]).long(),
                  k_of_class={int(k): int(v) for k, v in d["k_of_class"].items()},
                  base_classes=[int(c) for c in d["base_classes"]], novel_classes=[int(c) for c in d["novel_classes"]],
                  _kps=torch.from_numpy(d["keypoints"]).float(), _vis=torch.from_numpy(d["vis"]).long(),
                  _bbox=torch.from_numpy(d["bbox"]).float())


@lru_cache(maxsize=4)
def _synthetic(n_base, n_novel, base_images, novel_unlabeled, novel_val, novel_test, size, data_seed) -> dict:
    from methodlab.data.weakshot_keypoint_synth import generate

    return generate(n_base=n_base, n_novel=n_novel, base_images=base_images, novel_unlabeled=novel_unlabeled,
                    novel_val=novel_val, novel_test=novel_test, size=size, data_seed=data_seed)


def build_data(cfg) -> KPData:
    if cfg.data == "synthetic":
        d = _synthetic(cfg.n_base, cfg.n_novel, cfg.base_images, cfg.novel_unlabeled, cfg.novel_val, cfg.novel_test,
                       cfg.image_size, cfg.data_seed)
    else:
        from methodlab.data.weakshot_keypoint_mp100 import load_mp100

        src = "test_half" if cfg.novel_unlabeled_source == "train_split" else cfg.novel_unlabeled_source
        d = load_mp100(cfg.data_root, cfg.split, cfg.image_size, cfg.max_per_category, src)
    return from_arrays(d)
