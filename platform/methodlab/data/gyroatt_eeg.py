"""EEG trials for gyroatt: the montage-based motor-imagery generator `synthetic_mi` (fixed parameters in
shared/methods/gyroatt.md, "Data") and loaders for the real on-disk formats (.npz arrays, MNE -epo.fif).
No EEG recording ships in any package and nothing downloads: positions come from MNE's built-in montage."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from methodlab.core.errors import ConfigError, MissingSourceError

MI_CHANNELS = ("FC3", "FC1", "FCz", "FC2", "FC4", "C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP3", "CPz", "CP4", "Pz")
SSVEP_CHANNELS = ("PO7", "PO3", "POz", "PO4", "PO8", "O1", "Oz", "O2")
SSVEP_FREQS = (6.66, 7.5, 8.57, 10.0, 12.0)
# class -> {source index: power factor g}; sources 0, 1, 2 sit at C3, C4, Cz (ERD x(1 - rho), ERS x(1 + rho))
MI_CLASSES = ({1: -1}, {0: -1}, {2: -1}, {0: +1, 1: +1})


@lru_cache(maxsize=4)
def montage_positions(names: tuple[str, ...]) -> np.ndarray:
    """Electrode positions (m) from MNE's built-in 10-20 montage (colin27_1020 on MNE >= 1.13)."""
    try:
        import mne
    except ImportError:
        raise MissingSourceError("gyroatt's EEG generator needs electrode positions from MNE: pip install mne") from None
    builtin = mne.channels.get_builtin_montages()
    name = "colin27_1020" if "colin27_1020" in builtin else "standard_1020"
    pos = mne.channels.make_standard_montage(name).get_positions()["ch_pos"]
    lower = {k.lower(): v for k, v in pos.items()}
    return np.stack([np.asarray(lower[n.lower()], dtype=np.float64) for n in names])


def _band_noise(rng, n: int, t: int, fs: float, lo: float, hi: float) -> np.ndarray:
    """White Gaussian noise band-limited by FFT masking, each row scaled to unit variance."""
    spec = np.fft.rfft(rng.standard_normal((n, t)), axis=-1)
    f = np.fft.rfftfreq(t, 1 / fs)
    spec[:, (f < lo) | (f > hi)] = 0
    x = np.fft.irfft(spec, n=t, axis=-1)
    x -= x.mean(-1, keepdims=True)
    return x / x.std(-1, keepdims=True)


def _pink(rng, shape: tuple[int, ...], fs: float) -> np.ndarray:
    """Power ~ 1/f from 1 Hz (nothing below), unit variance along the last axis."""
    t = shape[-1]
    spec = np.fft.rfft(rng.standard_normal(shape), axis=-1)
    f = np.fft.rfftfreq(t, 1 / fs)
    gain = np.where(f >= 1.0, 1.0 / np.sqrt(np.maximum(f, 1.0)), 0.0)
    x = np.fft.irfft(spec * gain, n=t, axis=-1)
    x -= x.mean(-1, keepdims=True)
    return x / x.std(-1, keepdims=True)


def segment_bounds(t: int, m: int) -> list[tuple[int, int]]:
    """m nearly equal contiguous segments; the first t mod m get one extra sample (the E2R split)."""
    base, extra = divmod(t, m)
    out, start = [], 0
    for s in range(m):
        ln = base + (1 if s < extra else 0)
        out.append((start, start + ln))
        start += ln
    return out


def synthetic_mi(n_per_class: int, *, seed: int = 0, fs: float = 128.0, n_samples: int = 256, rho: float = 0.5,
                 snr: float = 0.2, sensor_noise: float = 0.1, sigma_m: float = 0.03, evidence: str = "ramp",
                 n_segments: int = 3, subject_shift: float = 0.0, subject: int = 0, paradigm: str = "mi"):
    """Returns X [N, C, T] float32, y [N] int64, evidence segment [N] int64 (-1 for ramp), channel names."""
    rng = np.random.default_rng(seed)
    if paradigm == "ssvep":
        names, src_names, n_classes = SSVEP_CHANNELS, ("O1", "Oz", "O2"), len(SSVEP_FREQS)
    else:
        names, src_names, n_classes = MI_CHANNELS, ("C3", "C4", "Cz"), 4
    pos = montage_positions(names)
    src = montage_positions(src_names).copy()
    gains = np.ones(len(names))
    if subject_shift:
        srng = np.random.default_rng(10_000 + subject)  # a subject's shift is fixed across data seeds
        src += subject_shift * 0.01 * srng.standard_normal(src.shape)
        gains = np.exp(subject_shift * 0.1 * srng.standard_normal(len(names)))
    kern = lambda a, b: np.exp(-((a[:, None] - b[None]) ** 2).sum(-1) / (2 * sigma_m**2))  # noqa: E731
    a_task, a_bg = kern(pos, src), kern(pos, pos)
    n, t = n_per_class * n_classes, n_samples
    y = np.repeat(np.arange(n_classes), n_per_class)
    rng.shuffle(y)
    tt = np.arange(t) / fs
    seg = np.full(n, -1)
    if evidence == "ramp":
        env = np.broadcast_to(np.minimum(1.0, tt / 1.0), (n, t))
    elif evidence == "one_segment":
        seg = rng.integers(0, n_segments, n)
        bounds = segment_bounds(t, n_segments)
        env = np.zeros((n, t))
        for i, s in enumerate(seg):
            env[i, bounds[s][0]:bounds[s][1]] = 1.0
    else:
        raise ConfigError(f"unknown evidence profile {evidence!r}; allowed: ramp, one_segment", field="evidence_profile")
    if paradigm == "ssvep":
        phase = rng.uniform(0, 2 * np.pi, (n, 3))
        f = np.asarray(SSVEP_FREQS)[y]
        s = np.sin(2 * np.pi * f[:, None, None] * tt[None, None] + phase[..., None]) * np.sqrt(2)
        unmod = s
        s = s * env[:, None]
    else:
        unmod = (_band_noise(rng, n * 3, t, fs, 8, 13) + 0.5 * _band_noise(rng, n * 3, t, fs, 18, 26)).reshape(n, 3, t)
        g = np.ones((n, 3))
        for c, mods in enumerate(MI_CLASSES):
            for k, sign in mods.items():
                g[y == c, k] = 1 + sign * rho
        s = unmod * np.sqrt(1 + (g[..., None] - 1) * env[:, None])
    task = np.einsum("jk,nkt->njt", a_task, s)
    task_unmod_var = np.einsum("jk,nkt->njt", a_task, unmod).var(-1).mean(-1)
    bg = np.einsum("jk,nkt->njt", a_bg, _pink(rng, (n, len(names), t), fs))
    bg *= np.sqrt(task_unmod_var / snr / bg.var(-1).mean(-1))[:, None, None]
    x = task + bg
    x = x + sensor_noise * x.std(-1, keepdims=True) * rng.standard_normal(x.shape)
    x = x * gains[None, :, None]
    return x.astype(np.float32), y.astype(np.int64), seg.astype(np.int64), list(names)


def load_npz(path: str | Path):
    """.npz with X [trials, channels, samples], y [trials], optional subject, recording, sfreq, ch_names.
    Loaded with allow_pickle=False: object arrays are refused, never unpickled."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such .npz file", field="data_path")
    with np.load(path, allow_pickle=False) as z:
        if "X" not in z or "y" not in z:
            raise ConfigError(f"{path}: needs arrays X [trials, channels, samples] and y [trials]", field="data_path")
        out = {"X": z["X"].astype(np.float32), "y": z["y"].astype(np.int64)}
        for key in ("subject", "recording"):
            if key in z:
                out[key] = z[key]
        out["sfreq"] = float(z["sfreq"]) if "sfreq" in z else None
        out["ch_names"] = [str(c) for c in z["ch_names"]] if "ch_names" in z else None
    if out["X"].ndim != 3 or len(out["X"]) != len(out["y"]):
        raise ConfigError(f"{path}: X must be [trials, channels, samples] with one label per trial", field="data_path")
    return out


def load_epochs_fif(path: str | Path):
    """MNE Epochs file (-epo.fif): data from get_data(), labels from events[:, 2] mapped through event_id."""
    import mne

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such -epo.fif file", field="data_path")
    ep = mne.read_epochs(str(path), preload=True, verbose="error")
    codes = sorted(set(ep.event_id.values()))
    lut = {c: i for i, c in enumerate(codes)}
    y = np.array([lut[c] for c in ep.events[:, 2]], dtype=np.int64)
    return {"X": ep.get_data().astype(np.float32), "y": y, "sfreq": float(ep.info["sfreq"]), "ch_names": list(ep.ch_names)}


def bandpass(x: np.ndarray, fs: float, lo: float, hi: float, order: int = 4) -> np.ndarray:
    """Zero-phase Butterworth band-pass along the last axis (scipy sosfiltfilt)."""
    from scipy.signal import butter, sosfiltfilt

    sos = butter(order, [lo, hi], btype="bandpass", fs=fs, output="sos")
    return sosfiltfilt(sos, x, axis=-1).astype(np.float32)


def resample(x: np.ndarray, fs: float, new_fs: float) -> np.ndarray:
    from scipy.signal import resample_poly
    from fractions import Fraction

    fr = Fraction(new_fs / fs).limit_denominator(1000)
    return resample_poly(x, fr.numerator, fr.denominator, axis=-1).astype(np.float32)
