"""Metrics: PSNR / SSIM of a reconstruction against the ground truth (both divided by the ground truth's max,
data range 1) and the data-consistency PSNR between A(x) and y (no ground truth needed)."""

from __future__ import annotations

import math

import numpy as np


def psnr(x: np.ndarray, gt: np.ndarray) -> float:
    m = float(np.max(np.abs(gt))) or 1.0
    mse = float(np.mean((np.asarray(x, np.float64) / m - np.asarray(gt, np.float64) / m) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def ssim(x: np.ndarray, gt: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    m = float(np.max(np.abs(gt))) or 1.0
    a, b = np.asarray(x, np.float64) / m, np.asarray(gt, np.float64) / m
    win = min(7, min(a.shape) // 2 * 2 - 1)
    return float(structural_similarity(a, b, data_range=1.0, win_size=max(win, 3)))


def measurement_psnr(ax, y) -> float:
    """PSNR between A(x) and y over the measured entries (MRI: sampled k-space), peak = max |y|."""
    import torch

    ax, y = ax.detach(), y.detach()
    if torch.is_complex(y):
        sel = y != 0
        d = (ax - y).abs()[sel] if bool(sel.any()) else (ax - y).abs().flatten()
        peak = float(y.abs().max()) or 1.0
    else:
        d = (ax - y).abs().flatten()
        peak = float(y.abs().max()) or 1.0
    mse = float((d.double() ** 2).mean())
    return 10 * math.log10(peak ** 2 / max(mse, 1e-30))


def evaluate(x: np.ndarray, gt: np.ndarray, prefix: str = "eval/") -> dict[str, float]:
    return {f"{prefix}psnr": psnr(x, gt), f"{prefix}ssim": ssim(x, gt)}
