"""Build UGoDIT's problems from methodlab.data sources: M training measurements, one validation and one test
measurement, all degraded from data_seed (identical for every training seed). Never touches the network.
Problems are built on the host (device="cpu", numpy draws); a fit moves them once with `Problem.to(device)`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from methodlab.data import ugodit_images as imgs
from methodlab.data import ugodit_mri as mri
from methodlab.methods.ugodit.operators import Problem, motion_kernel, natural_input


def _rng(cfg, role: int) -> np.random.Generator:
    return np.random.default_rng([cfg.data_seed, 7919, role])


def natural_problem(cfg, image: np.ndarray, role: int, name: str = "") -> Problem:
    """Degrade a [H, W] image in [0, 1] with the task's operator + Gaussian noise (sigma noise_sigma)."""
    rng = _rng(cfg, role)
    x = torch.as_tensor(np.asarray(image, np.float32), device="cpu")[None, None]
    H, W = image.shape
    if cfg.task == "super_resolution":
        p = Problem(cfg.task, torch.zeros(0, device="cpu"), torch.zeros(0, device="cpu"), (H, W), scale=cfg.sr_scale,
                    name=name)
        if H % cfg.sr_scale or W % cfg.sr_scale:
            raise ValueError(f"{name}: size {H}x{W} not a multiple of sr_scale {cfg.sr_scale}")
    else:
        angle = float(rng.uniform(0, np.pi))
        k = torch.as_tensor(motion_kernel(cfg.blur_length, angle, cfg.blur_sigma), device="cpu")[None, None]
        p = Problem(cfg.task, torch.zeros(0, device="cpu"), torch.zeros(0, device="cpu"), (H, W), kernel=k,
                    response_a=cfg.blur_response, name=name, extra={"angle": angle})
    with torch.no_grad():
        clean = p.A(x)
    noise = torch.as_tensor(rng.normal(size=tuple(clean.shape)), dtype=torch.float32, device="cpu")
    y = clean + cfg.noise_sigma * noise
    p.y = y
    p.z0 = natural_input(y, (H, W))
    p.gt = np.asarray(image, np.float64)
    p.trivial = p.z0[0, 0].numpy().astype(np.float64)  # bilinear (SR) / the degraded image (deblur)
    return p


def mri_problem(kspace: np.ndarray, mask: np.ndarray, sens: np.ndarray, gt: np.ndarray | None = None,
                name: str = "") -> Problem:
    """k-space [C,H,W] (masked), mask [H,W], maps [C,H,W]; everything divided by c = max |zero-filled|."""
    zf = mri.zero_filled(kspace, mask, sens)
    c = float(np.abs(zf).max()) or 1.0
    m = torch.as_tensor(mask.astype(np.float32), device="cpu")
    s = torch.as_tensor(sens.astype(np.complex64), device="cpu")
    y = torch.as_tensor((kspace * mask / c).astype(np.complex64), device="cpu")
    p = Problem("mri_multicoil", y, torch.zeros(0, device="cpu"), tuple(kspace.shape[-2:]), mask=m, sens=s, name=name,
                extra={"c": c})
    p.z0 = p.combine(y).float()
    p.gt = None if gt is None else np.abs(gt).astype(np.float64) / c
    p.trivial = np.abs(zf) / c
    return p


def simulated_mri_problem(cfg, image: np.ndarray, role: int, name: str = "") -> Problem:
    sim = mri.simulate_multicoil(image, _rng(cfg, role), cfg.n_coils, cfg.mri_noise, cfg.mask_fraction,
                                 cfg.center_fraction)
    return mri_problem(sim["kspace"], sim["mask"], sim["sens_maps"], np.abs(image), name)


def fastmri_problem(cfg, path: Path, role: int) -> Problem:
    d = mri.load_fastmri(path, cfg.fastmri_slice)
    k = d["kspace"]
    if cfg.sens_maps_path:
        sens = mri.read_sens_maps(cfg.sens_maps_path, cfg.fastmri_slice)
    elif cfg.sens_estimator == "espirit":
        sens = mri.espirit_maps(k)
    else:
        sens = mri.lowres_sens_maps(k)
    if sens.shape != k.shape:
        raise ValueError(f"sens_maps shape {sens.shape} != kspace shape {k.shape}")
    mask = mri.read_mask(cfg.mask_path, k.shape[-2:]) if cfg.mask_path else \
        np.broadcast_to(mri.vd_mask(k.shape[-1], _rng(cfg, role), cfg.mask_fraction, cfg.center_fraction)[None],
                        k.shape[-2:]).copy()
    full = (np.conj(sens) * mri.ifft2c(k)).sum(0)  # fully sampled combined image: the reference
    return mri_problem(k * mask, mask, sens, full, path.stem)


def build_problems(cfg) -> dict:
    """{"train": [Problem] * M, "val": Problem, "test": Problem}."""
    M = cfg.value("n_train")
    if cfg.data == "fastmri":
        files = sorted(Path(cfg.data_dir).glob("*.h5"))
        if len(files) < M + 2:
            raise ValueError(f"{cfg.data_dir}: {len(files)} .h5 files, need n_train + 2 = {M + 2}")
        ps = [fastmri_problem(cfg, f, i) for i, f in enumerate(files[:M + 2])]
        return {"train": ps[:M], "val": ps[M], "test": ps[M + 1]}
    if cfg.data == "skimage":
        names = list(imgs.TRAIN_IMAGES[:M]) + [imgs.VAL_IMAGE, cfg.test_image or imgs.TEST_IMAGE[cfg.task]]
        images = [imgs.skimage_image(n, cfg.image_size) for n in names]
    elif cfg.data == "fashion_mnist":
        arr = imgs.fashion_mnist(7, M + 2)
        images, names = list(arr), [f"fmnist_sneaker_{i}" for i in range(M + 2)]
    else:
        images = imgs.png_folder(cfg.data_dir, M + 2)
        names = [f"png_{i}" for i in range(len(images))]
        if len(images) < M + 2:
            raise ValueError(f"{cfg.data_dir}: {len(images)} PNGs, need n_train + 2 = {M + 2}")
    make = simulated_mri_problem if cfg.task == "mri_multicoil" else natural_problem
    ps = [make(cfg, im, i, n) for i, (im, n) in enumerate(zip(images, names))]
    return {"train": ps[:M], "val": ps[M], "test": ps[M + 1]}
