"""Stable spectral calculus for small symmetric matrices (float64).

`spectral(X, fn)` computes U f(L) U^T with a Daleckii-Krein backward: the divided differences
(f(l_i) - f(l_j)) / (l_i - l_j) replace the 1/(l_i - l_j) terms of the eigenvector gradient, and
where a gap is below GAP (repeated eigenvalues) the derivative (f'(l_i) + f'(l_j)) / 2 is used, so
gradients stay finite for repeated eigenvalues (spec: Pitfalls). `eigh_top` returns top-p eigenvectors
with a gap-clamped backward for the Grassmann / SPSD tokens."""

from __future__ import annotations

import math
from typing import Callable

import torch

GAP = 1e-8
Fn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # eigenvalues -> (f, f')


def sym(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x + x.transpose(-1, -2))


class _Spectral(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fn):
        lam, u = torch.linalg.eigh(sym(x))
        f, df = fn(lam)
        ctx.save_for_backward(lam, u, f, df)
        return (u * f.unsqueeze(-2)) @ u.transpose(-1, -2)

    @staticmethod
    def backward(ctx, g):
        lam, u, f, df = ctx.saved_tensors
        li, lj = lam.unsqueeze(-1), lam.unsqueeze(-2)
        gap = li - lj
        close = gap.abs() < GAP
        dd = torch.where(close, 0.5 * (df.unsqueeze(-1) + df.unsqueeze(-2)),
                         (f.unsqueeze(-1) - f.unsqueeze(-2)) / torch.where(close, torch.ones_like(gap), gap))
        inner = u.transpose(-1, -2) @ sym(g) @ u
        return u @ (dd * inner) @ u.transpose(-1, -2), None


def spectral(x: torch.Tensor, fn: Fn) -> torch.Tensor:
    return _Spectral.apply(x, fn)


def _log(lam):
    lam = lam.clamp_min(1e-12)
    return lam.log(), 1.0 / lam


def _exp(lam):
    e = lam.exp()
    return e, e


def _power(p: float) -> Fn:
    def fn(lam):
        lam = lam.clamp_min(1e-12)
        return lam.pow(p), p * lam.pow(p - 1)
    return fn


def logm(x):
    return spectral(x, _log)


def expm(x):
    return spectral(x, _exp)


def powm(x, p: float):
    return spectral(x, _power(p))


def sqrtm(x):
    return spectral(x, _power(0.5))


def invsqrtm(x):
    return spectral(x, _power(-0.5))


def reeig(x, eps: float = 1e-4):
    """ReEig (SPDNet): max(lambda, eps)."""
    return spectral(x, lambda lam: (lam.clamp_min(eps), (lam > eps).to(lam.dtype)))


def clamp_log_domain(s, log_eps: float = math.log(1e-4)):
    """ReEig expressed on L = logm X: max(l, log eps)."""
    return spectral(s, lambda lam: (lam.clamp_min(log_eps), (lam > log_eps).to(lam.dtype)))


class _EighTop(torch.autograd.Function):
    """Top-p eigenvectors (descending) of a symmetric matrix. Backward: only the coupling between the
    kept and the dropped eigenvectors matters downstream (every consumer is invariant to a rotation
    inside the kept block), with gaps clamped to >= GAP."""

    @staticmethod
    def forward(ctx, x, p):
        lam, u = torch.linalg.eigh(sym(x))
        lam, u = lam.flip(-1), u.flip(-1)
        ctx.save_for_backward(lam, u)
        ctx.p = p
        return u[..., :p].clone(), lam[..., :p].clone()

    @staticmethod
    def backward(ctx, gu, glam):
        lam, u = ctx.saved_tensors
        p = ctx.p
        n = lam.shape[-1]
        gap = lam.unsqueeze(-2) - lam.unsqueeze(-1)  # [.., i, j] = l_j - l_i
        sign = torch.where(gap >= 0, torch.ones_like(gap), -torch.ones_like(gap))
        f = 1.0 / (sign * gap.abs().clamp_min(GAP))
        f = f * (1 - torch.eye(n, dtype=lam.dtype, device=lam.device))
        gfull = torch.zeros_like(u)
        if gu is not None:
            gfull[..., :p] = gu
        inner = u.transpose(-1, -2) @ gfull
        mid = f * inner
        mid = mid.clone()
        mid[..., :p, :p] = 0.0  # rotations inside the kept block: gauge freedom
        if glam is not None:
            d = torch.zeros_like(lam)
            d[..., :p] = glam
            mid = mid + torch.diag_embed(d)
        return sym(u @ mid @ u.transpose(-1, -2)), None  # forward symmetrised its input


def eigh_top(x: torch.Tensor, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _EighTop.apply(x, p)


def qr_orth(x: torch.Tensor) -> torch.Tensor:
    """Q of a QR decomposition with the sign fixed so that diag(R) > 0 (a unique retraction)."""
    q, r = torch.linalg.qr(x)
    s = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    s = torch.where(s == 0, torch.ones_like(s), s)
    return q * s.unsqueeze(-2)


def tril_vec(x: torch.Tensor) -> torch.Tensor:
    """Lower triangle incl. diagonal, flattened (d(d+1)/2 entries) -- same count as the upper one."""
    n = x.shape[-1]
    i, j = torch.tril_indices(n, n, device=x.device)
    return x[..., i, j]
