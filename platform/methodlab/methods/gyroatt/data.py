"""Train / val / test trials for gyroatt from methodlab.data.gyroatt_eeg (generator or real-format file)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from methodlab.core.errors import ConfigError
from methodlab.data import gyroatt_eeg as eeg


@dataclass
class EEGData:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    sfreq: float
    ch_names: list[str] | None
    n_classes: int
    seg_test: torch.Tensor | None = None  # evidence segment per test trial (one_segment profile)
    raw: dict = field(default_factory=dict)  # numpy copies for the pyriemann baselines

    @property
    def n_channels(self) -> int:
        return self.x_train.shape[1]

    @property
    def n_samples(self) -> int:
        return self.x_train.shape[2]


def _stratified(y: np.ndarray, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keep, held = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.where(y == c)[0])
        k = max(1, int(round(frac * len(idx))))
        held.append(idx[:k])
        keep.append(idx[k:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(held))


def _synthetic(cfg):
    per = cfg.n_train_per_class + cfg.n_val_per_class + cfg.n_test_per_class
    x, y, seg, names = eeg.synthetic_mi(per, seed=cfg.data_seed, fs=cfg.sfreq, n_samples=cfg.n_samples, rho=cfg.rho,
                                        snr=cfg.snr, sensor_noise=cfg.sensor_noise, sigma_m=cfg.sigma_m,
                                        evidence=cfg.evidence_profile, n_segments=cfg.segments,
                                        subject_shift=cfg.subject_shift, subject=cfg.subject, paradigm=cfg.paradigm)
    parts = {"train": [], "val": [], "test": []}
    for c in np.unique(y):  # y is already shuffled: take each class's trials in order
        idx = np.where(y == c)[0]
        a, b = cfg.n_train_per_class, cfg.n_train_per_class + cfg.n_val_per_class
        parts["train"].append(idx[:a])
        parts["val"].append(idx[a:b])
        parts["test"].append(idx[b:])
    split = {k: np.sort(np.concatenate(v)) for k, v in parts.items()}
    return x, y, seg, cfg.sfreq, names, split


def _real(cfg):
    from methodlab.core.paths import read_path

    path = read_path(cfg.data_path, "data_path", "an .npz (X, y, sfreq) or -epo.fif file of EEG trials")
    raw = eeg.load_npz(path) if cfg.dataset == "npz" else eeg.load_epochs_fif(path)
    x, y, fs = raw["X"], raw["y"], raw["sfreq"]
    if fs is None and (cfg.bandpass or cfg.resample):
        raise ConfigError("the file has no sfreq; band-pass / resampling need it", field="data_path")
    if cfg.bandpass:
        x = eeg.bandpass(x, fs, *cfg.bandpass)
    if cfg.resample:
        x, fs = eeg.resample(x, fs, cfg.resample), cfg.resample
    rec = raw.get("recording")
    if rec is not None and len(np.unique(rec)) > 1:  # MAtt protocol: first recording trains, the later ones test
        first = np.unique(rec)[0]
        train_all, test = np.where(rec == first)[0], np.where(rec != first)[0]
    else:
        keep, test = _stratified(y, 0.2, cfg.data_seed)
        train_all = keep
    tr, va = _stratified(y[train_all], cfg.val_fraction, cfg.data_seed + 1)
    split = {"train": train_all[tr], "val": train_all[va], "test": test}
    return x, y, np.full(len(y), -1), fs or cfg.sfreq, raw.get("ch_names"), split


def build_data(cfg, device="cpu") -> EEGData:
    """Trials built on the host (numpy), moved once to `device` (ctx.device in a run); `raw` keeps the numpy copies."""
    x, y, seg, fs, names, split = _synthetic(cfg) if cfg.dataset == "synthetic_mi" else _real(cfg)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    n_classes = int(y.max()) + 1
    return EEGData(t(x[split["train"]]), t(y[split["train"]]), t(x[split["val"]]), t(y[split["val"]]),
                   t(x[split["test"]]), t(y[split["test"]]), float(fs), names, n_classes, t(seg[split["test"]]),
                   raw={"x": x, "y": y, "split": split})
