"""Forward operators A (torch, differentiable) and the problem record a fit works on.

super_resolution: area (average-pool) down-sampling by s.  deblur_nonlinear: y = g(k * x), k = a linear motion
kernel (random angle) convolved with a Gaussian, g(u) = (1 - exp(-a u)) / (1 - exp(-a)).  mri_multicoil:
y_c = M . F(S_c x), x complex from the 2 output channels; centred orthonormal FFT.

Devices and precision: a Problem is built on the host (data.py) and moved once to the run's device
(`Problem.to`); the operators run on the device of their tensors, always in float32 / complex64 (the network
output is cast to float32 before A: complex FFTs have no bfloat16 kernels)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


def fft2c(x: torch.Tensor) -> torch.Tensor:
    return torch.fft.fftshift(torch.fft.fft2(torch.fft.ifftshift(x, dim=(-2, -1)), norm="ortho"), dim=(-2, -1))


def ifft2c(k: torch.Tensor) -> torch.Tensor:
    return torch.fft.fftshift(torch.fft.ifft2(torch.fft.ifftshift(k, dim=(-2, -1)), norm="ortho"), dim=(-2, -1))


def to_complex(x: torch.Tensor) -> torch.Tensor:
    """[B, 2, H, W] real/imag -> complex [B, H, W]."""
    return torch.complex(x[:, 0], x[:, 1])


def to_channels(c: torch.Tensor) -> torch.Tensor:
    """complex [B, H, W] -> [B, 2, H, W]."""
    return torch.stack([c.real, c.imag], 1)


def motion_kernel(length: int, angle: float, sigma: float) -> np.ndarray:
    """A line of `length` px at `angle` (rad), rasterised with bilinear weights, convolved with a Gaussian of
    `sigma` px; normalised to sum 1. Odd square support."""
    half = (length - 1) / 2 + math.ceil(3 * sigma)
    n = 2 * int(math.ceil(half)) + 1
    c = n // 2
    k = np.zeros((n, n))
    for t in np.linspace(-(length - 1) / 2, (length - 1) / 2, 8 * length):
        y, x = c + t * math.sin(angle), c + t * math.cos(angle)
        y0, x0 = int(math.floor(y)), int(math.floor(x))
        fy, fx = y - y0, x - x0
        for dy, wy in ((0, 1 - fy), (1, fy)):
            for dx, wx in ((0, 1 - fx), (1, fx)):
                if 0 <= y0 + dy < n and 0 <= x0 + dx < n:
                    k[y0 + dy, x0 + dx] += wy * wx
    r = np.arange(n) - c
    g = np.exp(-r ** 2 / (2 * sigma ** 2))
    g /= g.sum()
    k = np.apply_along_axis(lambda v: np.convolve(v, g, mode="same"), 0, k)
    k = np.apply_along_axis(lambda v: np.convolve(v, g, mode="same"), 1, k)
    return (k / k.sum()).astype(np.float32)


def response(u: torch.Tensor, a: float) -> torch.Tensor:
    return (1 - torch.exp(-a * u)) / (1 - math.exp(-a))


@dataclass
class Problem:
    """One measurement: y, its operator, the network input z0, ground truth (evaluation only) and the trivial
    reconstruction. MRI tensors are in units normalised by c = max |zero-filled image|."""

    task: str
    y: torch.Tensor  # natural [1, 1, h, w]; MRI complex [C, H, W] (masked)
    z0: torch.Tensor  # [1, C_in, H, W]
    shape: tuple[int, int]  # reconstruction size H, W
    gt: np.ndarray | None = None  # [H, W] magnitude, same units as the reconstruction
    trivial: np.ndarray | None = None  # bilinear / zero-filled / degraded image
    name: str = ""
    scale: int = 1  # SR factor
    kernel: torch.Tensor | None = None  # deblur [1, 1, k, k]
    response_a: float = 3.0
    mask: torch.Tensor | None = None  # MRI [H, W] float
    sens: torch.Tensor | None = None  # MRI complex [C, H, W]
    extra: dict = field(default_factory=dict)

    def A(self, x: torch.Tensor) -> torch.Tensor:
        """x: [1, 1, H, W] (natural) or [1, 2, H, W] (MRI) -> the measurement domain of y."""
        if self.task == "super_resolution":
            return F.avg_pool2d(x, self.scale)
        if self.task == "deblur_nonlinear":
            p = self.kernel.shape[-1] // 2
            mode = "reflect" if min(x.shape[-2:]) > p else "replicate"
            return response(F.conv2d(F.pad(x, (p, p, p, p), mode=mode), self.kernel), self.response_a)
        return self.mask * fft2c(self.sens * to_complex(x)[0][None])

    def A_full(self, x: torch.Tensor) -> torch.Tensor:
        """MRI: F(S x) on every k-space entry (no mask), complex [C, H, W]."""
        return fft2c(self.sens * to_complex(x)[0][None])

    def combine(self, k: torch.Tensor) -> torch.Tensor:
        """MRI: sum_c conj(S_c) IFFT(k_c) as [1, 2, H, W]."""
        return to_channels((self.sens.conj() * ifft2c(k)).sum(0)[None])

    def image(self, x: torch.Tensor, s: float = 1.0) -> np.ndarray:
        """Network output -> the reconstructed image [H, W] on the host (magnitude / s for MRI)."""
        if self.task == "mri_multicoil":
            return (to_complex(x)[0].abs() / s).detach().cpu().numpy().astype(np.float64)
        return x[0, 0].detach().cpu().numpy().astype(np.float64)

    @property
    def device(self) -> torch.device:
        return self.z0.device

    def to(self, device) -> "Problem":
        """A copy with every tensor (y, z0, kernel, mask, coil maps) on `device`; host arrays stay host arrays."""
        device = torch.device(device)
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)


def natural_input(y: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """z0 = bilinear resize of the degraded image to the target size (a cheap A^+ y)."""
    if tuple(y.shape[-2:]) == tuple(shape):
        return y.clone()
    return F.interpolate(y, size=shape, mode="bilinear", align_corners=False).clamp(0, 1)
