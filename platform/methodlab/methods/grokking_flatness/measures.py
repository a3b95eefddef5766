"""Geometry of the last layer: relative flatness (trace and neuron-wise forms), CDNV, NC1,
and the three regularizer terms. All take the readout W [K, d], features phi [N, d], logits [N, K]."""

from __future__ import annotations

import torch


def relative_flatness_trace(W: torch.Tensor, phi: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """RF = ||W||_F^2 * mean_x sum_k p_k (1 - p_k) ||phi(x)||^2  (= ||W||^2 Tr of the CE Hessian w.r.t. W)."""
    p = torch.softmax(logits, dim=-1)
    per_x = (p * (1 - p)).sum(-1) * phi.pow(2).sum(-1)
    return W.pow(2).sum() * per_x.mean()


def relative_flatness_neuronwise(W: torch.Tensor, phi: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Petzka et al.'s kappa = sum_{i,j} <w_i, w_j> Tr(H_ij) for cross-entropy in closed form:
    Tr(H_ij) = mean_x (p_i delta_ij - p_i p_j) ||phi||^2, so kappa = <W W^T, T>."""
    p = torch.softmax(logits.double(), dim=-1)
    sq = phi.double().pow(2).sum(-1)
    T = (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]) * sq[:, None, None]
    G = W.double() @ W.double().T
    return (G * T.mean(0)).sum()


def class_stats(phi: torch.Tensor, y: torch.Tensor, min_count: int = 1):
    """Class means [C, d], within-class variances [C] (mean squared distance to the mean), class ids."""
    classes, inv, counts = torch.unique(y, return_inverse=True, return_counts=True)
    C, d = len(classes), phi.shape[1]
    sums = torch.zeros(C, d, dtype=phi.dtype, device=phi.device).index_add_(0, inv, phi)
    mu = sums / counts[:, None].to(phi.dtype)
    dev = (phi - mu[inv]).pow(2).sum(-1)
    var = torch.zeros(C, dtype=phi.dtype, device=phi.device).index_add_(0, inv, dev) / counts.to(phi.dtype)
    keep = counts >= min_count
    return mu[keep], var[keep], classes[keep]


def cdnv(phi: torch.Tensor, y: torch.Tensor, min_count: int = 1) -> torch.Tensor:
    """Class-distance normalised variance (Galanti et al.), averaged over ordered pairs c != c'."""
    mu, var, _ = class_stats(phi, y, min_count)
    C = len(mu)
    if C < 2:
        return phi.new_zeros(())
    dist2 = torch.cdist(mu, mu).pow(2)
    off = ~torch.eye(C, dtype=torch.bool, device=phi.device)
    ratio = (var[:, None] + var[None, :]) / (2 * dist2.clamp_min(1e-12))
    return ratio[off].mean()


def nc1(phi: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Tr(Sigma_W Sigma_B^+) / K (Papyan et al.)."""
    phi = phi.double()
    mu, _, classes = class_stats(phi, y)
    _, inv = torch.unique(y, return_inverse=True)
    centred = phi - mu[inv]
    sigma_w = centred.T @ centred / len(phi)
    mb = mu - mu.mean(0)
    sigma_b = mb.T @ mb / len(mu)
    return torch.trace(sigma_w @ torch.linalg.pinv(sigma_b)) / len(mu)


def anti_flat_term(W: torch.Tensor, phi: torch.Tensor, logits: torch.Tensor, tau: float) -> torch.Tensor:
    """mean_x ||W||^2 sum_k pt_k (1 - pt_k) ||phi/||phi|| ||^2, pt = softmax(z / tau). Not detached:
    the gradient flows into W, the features and the logits (the regularizer subtracts it)."""
    pt = torch.softmax(logits / tau, dim=-1)
    phin = phi / (phi.norm(dim=-1, keepdim=True) + 1e-8)
    return (W.pow(2).sum() * (pt * (1 - pt)).sum(-1) * phin.pow(2).sum(-1)).mean()


def batch_cdnv(phi: torch.Tensor, y: torch.Tensor, num_classes: int | None = None) -> torch.Tensor:
    """CDNV inside the regularizer: only classes with >= 2 samples in the batch (the value of
    cdnv(phi, y, min_count=2)). It runs every training step, so it keeps every class id in 0..num_classes-1
    and masks the absent ones instead of torch.unique / boolean indexing, whose output sizes would need a
    host round trip. num_classes None: read from y (one host sync; for ad-hoc calls, not the training loop)."""
    k = int(y.max()) + 1 if num_classes is None else num_classes
    zeros = lambda *shape: torch.zeros(*shape, dtype=phi.dtype, device=phi.device)  # noqa: E731
    counts = zeros(k).index_add_(0, y, torch.ones_like(y, dtype=phi.dtype))
    mu = zeros(k, phi.shape[1]).index_add_(0, y, phi) / counts.clamp_min(1)[:, None]
    var = zeros(k).index_add_(0, y, (phi - mu[y]).pow(2).sum(-1)) / counts.clamp_min(1)
    keep = counts >= 2
    pairs = keep[:, None] & keep[None, :] & ~torch.eye(k, dtype=torch.bool, device=phi.device)
    ratio = (var[:, None] + var[None, :]) / (2 * torch.cdist(mu, mu).pow(2).clamp_min(1e-12))
    return torch.where(pairs, ratio, 0.0).sum() / pairs.sum().clamp_min(1)  # 0 with < 2 classes kept
