"""The network (MAtt's skeleton, spec "Pipeline"): CNN front end -> E2R (m covariance tokens) ->
optional Stiefel BiMap -> GyroAtt block -> gyro bias + power activation -> R2E -> linear.
Baselines in the same class: arch=matt (Stiefel BiMap Q/K/V, LEM) and arch=spdnet (no attention)."""

from __future__ import annotations

import torch
from torch import nn

from methodlab.methods.gyroatt import linalg as la
from methodlab.methods.gyroatt.grassmann import make_geometry
from methodlab.methods.gyroatt.layers import GyroAttention, MAttAttention, random_stiefel

BEST = "best."  # prefix of the best-validation-loss weights inside a checkpoint's weights.safetensors


def e2r(feat: torch.Tensor, m: int, eps: float = 1e-5) -> torch.Tensor:
    """[B, F, T] -> [B, m, F, F] float64: per segment, centred covariance / trace + eps I."""
    feat = feat.double()
    b, f, t = feat.shape
    base, extra = divmod(t, m)
    sizes = [base + (1 if s < extra else 0) for s in range(m)]
    covs = []
    for z in torch.split(feat, sizes, dim=-1):
        z = z - z.mean(-1, keepdim=True)
        c = z @ z.transpose(-1, -2) / max(1, z.shape[-1] - 1)
        c = c / torch.diagonal(c, dim1=-2, dim2=-1).sum(-1)[..., None, None].clamp_min(1e-30)
        covs.append(c + eps * torch.eye(f, dtype=c.dtype, device=c.device))
    return torch.stack(covs, 1)


def tangent_dim(cfg) -> int:
    n = cfg.size if cfg.arch == "gyroatt" else cfg.d_out
    tri = lambda k: k * (k + 1) // 2  # noqa: E731
    if cfg.arch == "gyroatt" and cfg.geometry.startswith("spsd-"):
        return tri(n) + tri(cfg.p_rank)
    return tri(n)


class Net(nn.Module):
    def __init__(self, cfg, n_channels: int, n_classes: int):
        super().__init__()
        self.cfg = cfg
        self.conv1 = nn.Conv2d(1, cfg.f1, (n_channels, 1))
        self.bn1 = nn.BatchNorm2d(cfg.f1)
        self.conv2 = nn.Conv2d(cfg.f1, cfg.f2, (1, cfg.kernel), padding=(0, cfg.kernel // 2))
        self.bn2 = nn.BatchNorm2d(cfg.f2)
        gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 7)  # host draws: one init on every device
        n = cfg.size
        if cfg.arch == "matt":
            self.att = MAttAttention(cfg.f2, cfg.d_out, cfg.attention, cfg.score, cfg.dist_squared, gen)
        else:
            if cfg.d_out is not None and cfg.d_out < cfg.f2:
                self.bimap_st = nn.Parameter(random_stiefel(cfg.f2, cfg.d_out, gen))
        if cfg.arch == "gyroatt":
            self.geom = make_geometry(cfg.geometry, n, cfg.p_rank, cfg.karcher_iters)
            self.att = GyroAttention(self.geom, cfg.geometry, n, cfg.p_rank, cfg.qkv_maps, cfg.attention, cfg.score,
                                     cfg.dist_squared, cfg.score_scale, gen)
            p = cfg.p_rank
            zeros = lambda *s: nn.Parameter(torch.zeros(*s, dtype=torch.float64))  # noqa: E731  (bias = identity)
            if cfg.geometry.startswith("spd-"):
                self.bias_m = zeros(n, n)
            elif cfg.geometry == "grassmann":
                self.bias_m = zeros(n - p, p)
            else:
                self.bias_m = zeros(n - p, p)
                self.bias_m2 = zeros(p, p)
        self.fc = nn.Linear(cfg.segments * tangent_dim(cfg), n_classes)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, T] -> SPD tokens [B, m, n, n] (after the optional BiMap)."""
        h = self.bn1(self.conv1(x.unsqueeze(1)))
        h = self.bn2(self.conv2(h)).squeeze(2)
        s = e2r(h, self.cfg.segments)
        if hasattr(self, "bimap_st"):
            s = self.bimap_st.transpose(-1, -2) @ s @ self.bimap_st
        return s

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        cfg = self.cfg
        s = self.tokens(x)
        attn = None
        if cfg.arch == "spdnet":
            v = la.tril_vec(la.logm(la.reeig(s)))
        elif cfg.arch == "matt":
            out, attn = self.att(s)
            v = la.tril_vec(out)
        else:
            rep = self.geom.encode(s)
            out, attn = self.att(rep)
            bias = (self.bias_m, self.bias_m2) if hasattr(self, "bias_m2") else self.bias_m
            out = self.geom.activation(self.geom.bias(out, bias), cfg.activation, cfg.power_p)
            v = self.geom.tangent(out)
        logits = self.fc(v.flatten(1).float())
        return (logits, attn) if return_attention else logits


def build_model(cfg, n_channels: int, n_classes: int) -> Net:
    return Net(cfg, n_channels, n_classes)
