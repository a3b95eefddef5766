"""Multi-coil MRI for UGoDIT: simulated coil maps, smooth phases, variable-density Cartesian masks and k-space
from a magnitude image (all from one numpy Generator), plus readers of the real formats: fastMRI multi-coil
HDF5 (`kspace` [slices, coils, H, W]), sensitivity maps (.npy / .h5 key `sens_maps`), masks (.npy). Every .npy
is read with allow_pickle=False. Centred orthonormal FFT: fftshift(fft2(ifftshift(.)))."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError


def fft2c(x: np.ndarray) -> np.ndarray:
    return np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(x, axes=(-2, -1)), norm="ortho"), axes=(-2, -1))


def ifft2c(k: np.ndarray) -> np.ndarray:
    return np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(k, axes=(-2, -1)), norm="ortho"), axes=(-2, -1))


def vd_mask(ny: int, rng: np.random.Generator, frac: float = 0.25, center_frac: float = 0.08) -> np.ndarray:
    """Variable-density random Cartesian lines over ny phase encodes: round(frac*ny) lines in all, of which
    round(center_frac*ny) contiguous central ones; the rest drawn without replacement with density falling
    quadratically with the distance to the centre. Returns bool [ny] (64: 16 lines, 5 central)."""
    n_total, n_centre = int(round(frac * ny)), max(1, int(round(center_frac * ny)))
    mask = np.zeros(ny, dtype=bool)
    c0 = ny // 2 - n_centre // 2
    mask[c0:c0 + n_centre] = True
    rest = np.flatnonzero(~mask)
    d = np.abs(rest - ny / 2) / (ny / 2)
    p = (1.0 - d) ** 2 + 1e-3
    k = max(0, n_total - n_centre)
    mask[rng.choice(rest, size=k, replace=False, p=p / p.sum())] = True
    return mask


def coil_maps(n_coils: int, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian-blob sensitivities centred around the image border (random jitter, random phase ramp),
    normalised so that sum_c |S_c|^2 = 1 at every pixel. complex64 [C, H, W]."""
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    maps = []
    for c in range(n_coils):
        ang = 2 * np.pi * c / n_coils + rng.uniform(-0.3, 0.3)
        cy, cx = 1.2 * np.sin(ang), 1.2 * np.cos(ang)
        width = rng.uniform(0.8, 1.2)
        mag = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width ** 2))
        phase = rng.uniform(-np.pi, np.pi) + rng.uniform(-1, 1) * yy + rng.uniform(-1, 1) * xx
        maps.append(mag * np.exp(1j * phase))
    s = np.stack(maps)
    s /= np.sqrt((np.abs(s) ** 2).sum(0, keepdims=True))
    return s.astype(np.complex64)


def smooth_phase(h: int, w: int, rng: np.random.Generator, amplitude: float = np.pi / 2) -> np.ndarray:
    """A smooth random phase map: a random low-order polynomial in (y, x), peak |phase| <= amplitude."""
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    c = rng.normal(size=6)
    ph = c[0] + c[1] * yy + c[2] * xx + c[3] * yy * xx + c[4] * yy ** 2 + c[5] * xx ** 2
    return amplitude * ph / max(np.abs(ph).max(), 1e-12)


def simulate_multicoil(image: np.ndarray, rng: np.random.Generator, n_coils: int = 4, noise_rel: float = 0.01,
                       frac: float = 0.25, center_frac: float = 0.08) -> dict:
    """k_c = M * F(S_c x) + complex noise (sigma = noise_rel * max|F(S_c x)|), x = image * exp(i phase).
    Returns {"kspace" complex64 [C,H,W] (masked), "mask" bool [H,W], "sens_maps", "image" complex64 [H,W]}."""
    h, w = image.shape
    x = image.astype(np.float64) * np.exp(1j * smooth_phase(h, w, rng))
    s = coil_maps(n_coils, h, w, rng)
    k = fft2c(s * x[None])
    sigma = noise_rel * np.abs(k).max()
    k = k + sigma * (rng.normal(size=k.shape) + 1j * rng.normal(size=k.shape)) / np.sqrt(2)
    line = vd_mask(w, rng, frac, center_frac)
    mask = np.broadcast_to(line[None, :], (h, w)).copy()
    return {"kspace": (k * mask).astype(np.complex64), "mask": mask, "sens_maps": s, "image": x.astype(np.complex64)}


def zero_filled(kspace: np.ndarray, mask: np.ndarray, sens_maps: np.ndarray) -> np.ndarray:
    """Coil-combined zero-filled image sum_c conj(S_c) IFFT(M k_c), complex [H, W]."""
    return (np.conj(sens_maps) * ifft2c(kspace * mask)).sum(0)


def read_npy(path: str | Path) -> np.ndarray:
    return np.load(Path(path), allow_pickle=False)


def read_mask(path: str | Path, shape: tuple[int, int]) -> np.ndarray:
    """A mask .npy, bool [H, W] or [W] (lines broadcast over rows)."""
    m = read_npy(path).astype(bool)
    if m.ndim == 1:
        if m.shape[0] != shape[1]:
            raise ValueError(f"mask of {m.shape[0]} lines for width {shape[1]}")
        m = np.broadcast_to(m[None], shape).copy()
    if m.shape != tuple(shape):
        raise ValueError(f"mask shape {m.shape} != k-space shape {tuple(shape)}")
    return m


def lowres_sens_maps(kspace: np.ndarray, n_acs: int = 16, eps: float = 1e-6) -> np.ndarray:
    """Sensitivities from the fully sampled centre: low-resolution coil images over their root-sum-of-squares
    (a cheap stand-in for ESPIRiT; `espirit_maps` needs sigpy)."""
    c, h, w = kspace.shape
    win = np.zeros((h, w))
    cw = w // 2
    win[:, max(0, cw - n_acs // 2): cw + n_acs // 2] = 1.0
    imgs = ifft2c(kspace * win)
    rss = np.sqrt((np.abs(imgs) ** 2).sum(0, keepdims=True))
    return (imgs / (rss + eps * rss.max())).astype(np.complex64)


def espirit_maps(kspace: np.ndarray, calib_width: int = 24) -> np.ndarray:  # pragma: no cover - optional dep
    try:
        import sigpy.mri as mr
    except ImportError:
        raise MissingSourceError("ESPIRiT sensitivity maps need sigpy (pip install sigpy); or give sens_maps "
                                 "(.npy/.h5 key 'sens_maps') or sens_estimator=lowres") from None
    return np.asarray(mr.app.EspiritCalib(kspace, calib_width=calib_width, show_pbar=False).run(), np.complex64)


def read_sens_maps(path: str | Path, slice_idx: int | None = None) -> np.ndarray:
    p = Path(path)
    if p.suffix == ".npy":
        s = read_npy(p)
    else:
        import h5py

        with h5py.File(p, "r") as f:
            if "sens_maps" not in f:
                raise ValueError(f"{p}: no dataset 'sens_maps'")
            s = np.asarray(f["sens_maps"])
    if s.ndim == 4:
        s = s[0 if slice_idx is None else slice_idx]
    return s.astype(np.complex64)


def load_fastmri(path: str | Path, slice_idx: int | None = None) -> dict:
    """One slice of a fastMRI multi-coil HDF5 file: {"kspace" complex64 [C,H,W], "max" (attr, or None),
    "rss" float32 [h, w] reference (or None), "n_slices"}. The middle slice when slice_idx is None."""
    try:
        import h5py
    except ImportError:  # pragma: no cover
        raise MissingSourceError("h5py is not installed: pip install h5py") from None
    p = Path(path)
    if not p.is_file():
        raise MissingSourceError(f"fastMRI file {p} not found")
    with h5py.File(p, "r") as f:
        if "kspace" not in f:
            raise ValueError(f"{p}: no dataset 'kspace'")
        ds = f["kspace"]
        if ds.ndim != 4:
            raise ValueError(f"{p}: kspace must be [slices, coils, H, W] (multi-coil), got {ds.shape}")
        n = ds.shape[0]
        i = n // 2 if slice_idx is None else int(slice_idx)
        if not 0 <= i < n:
            raise ValueError(f"slice {i} out of range 0..{n - 1}")
        k = np.asarray(ds[i]).astype(np.complex64)
        rss = np.asarray(f["reconstruction_rss"][i], np.float32) if "reconstruction_rss" in f else None
        mx = float(f.attrs["max"]) if "max" in f.attrs else None
    return {"kspace": k, "max": mx, "rss": rss, "n_slices": n}


def center_crop(a: np.ndarray, h: int, w: int) -> np.ndarray:
    H, W = a.shape[-2:]
    t, l = max(0, (H - h) // 2), max(0, (W - w) // 2)
    return a[..., t:t + h, l:l + w]
