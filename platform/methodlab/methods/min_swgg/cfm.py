"""Sliced-OT conditional flow matching (DGSWP-CFM) and its baselines in one code path.

A super-batch of R x B noise points x0 and data points x1 is coupled at once (independent pairs = I-CFM;
exact OT per minibatch = OT-CFM; DGSWP slice sorted ranks; a fixed random slice), then the vector field
is trained on R minibatches of B pairs with the CFM loss ||v(t, x_t) - (x1 - x0)||^2.

Devices: the vector field, the slice, the super-batches and every draw live on the run's device; coupling
costs stay there as tensors until a report reads them. The exact_ot baseline's solver (POT) is numpy."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from methodlab.methods.min_swgg.flows import emd_permutation
from methodlab.methods.min_swgg.swgg import build_slice, dgswp, sort_perm


class VectorField(nn.Module):
    """v_phi(t, x): MLP on [x, t] (torchcfm's time-varying MLP, SELU)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, hidden), nn.SELU(), nn.Linear(hidden, hidden), nn.SELU(),
                                 nn.Linear(hidden, dim))

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, t.reshape(-1, 1).expand(len(x), 1)], -1))


@torch.no_grad()
def euler_sample(v: nn.Module, x0: torch.Tensor, steps: int) -> torch.Tensor:
    x, dt = x0.clone(), 1.0 / steps
    for k in range(steps):
        x = x + dt * v(torch.full((1,), k * dt, device=x.device), x)
    return x


def pair_cost(x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    """Mean squared distance of matched pairs, a 0-d tensor on their device (read it at report time)."""
    return (x0 - x1).pow(2).sum(-1).mean()


def fixed_directions(k: int, dim: int, seed: int, device="cpu") -> torch.Tensor:
    """k seeded random unit directions, drawn on the host (the same on every device), then on `device`."""
    th = torch.randn(k, dim, generator=torch.Generator().manual_seed(seed + 99_991), device="cpu")
    return (th / th.norm(dim=1, keepdim=True)).to(device)


class Coupler:
    """Turns a super-batch (x0, x1) into matched pairs. DGSWP's slice is warm-started across calls; it is
    built on the generator's device."""

    def __init__(self, cfg, dim: int, gen: torch.Generator):
        self.cfg, self.kind, self.gen, self.calls = cfg, cfg.coupling, gen, 0
        self.g, self.opt = None, None
        self.last_h = torch.tensor(float("nan"), device=gen.device)  # h of the last DGSWP fit (report time)
        if self.kind.startswith("dgswp"):
            kind = "linear" if self.kind == "dgswp_linear" else (cfg.slice_model if cfg.slice_model != "linear" else "mlp256")
            with gen.device:
                self.g = build_slice(kind, dim, activation="selu", generator=gen)  # official CFM slice MLP: SELU
            self.opt = torch.optim.Adam(self.g.parameters(), lr=cfg.lr_inner)
        if self.kind == "fixed_slice":  # one seeded random unit direction kept for the whole run
            self.theta = fixed_directions(1, dim, cfg.seed, gen.device)[0]

    def __call__(self, x0: torch.Tensor, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        if self.kind == "independent":
            out = x0, x1
        elif self.kind == "exact_ot":  # OT-CFM: exact plan per minibatch of B (a permutation for uniform B points)
            B, parts0, parts1 = cfg.cfm_batch, [], []
            for i in range(0, len(x0), B):
                a, b = x0[i:i + B], x1[i:i + B]
                perm = emd_permutation(torch.cdist(a.double(), b.double()).pow(2).cpu().numpy())  # POT: numpy
                parts0.append(a)
                parts1.append(b[torch.as_tensor(perm, device=b.device)])
            out = torch.cat(parts0), torch.cat(parts1)
        elif self.kind == "fixed_slice":
            out = x0[sort_perm(x0 @ self.theta)], x1[sort_perm(x1 @ self.theta)]
        else:
            iters = cfg.cfm_init_iters if self.calls == 0 else cfg.cfm_finetune_iters
            res = dgswp(x0, x1, self.g, self.opt, n_iter=iters, eps=cfg.eps, n_samples=cfg.n_samples,
                        variance_reduction=cfg.variance_reduction, rollback=cfg.rollback, generator=self.gen,
                        rollback_on=cfg.rollback_on)
            self.last_h = res.h_t
            out = x0[res.sigma], x1[res.tau]
        self.calls += 1
        return out


def cfm_loss(v: nn.Module, x0: torch.Tensor, x1: torch.Tensor, sigma: float, gen: torch.Generator,
             ctx=None) -> torch.Tensor:
    """The CFM regression loss; t and the path noise drawn on x0's device (by `gen`, which lives there).

    With a RunContext (data parallel), t and the noise are drawn for the whole minibatch on every rank (the same
    draws as one worker) and the rank keeps its shard of the pairs (ctx.shard); its loss is its shard's sum over
    B times the world size, so that DDP's mean over the ranks is the whole minibatch's mean (gradient and value)."""
    t = torch.rand(len(x0), generator=gen, device=x0.device)
    noise = torch.randn(x0.shape, generator=gen, device=x0.device)
    n = len(x0)
    if ctx is not None:  # the whole minibatch (the same objects) at world size 1
        _, x0, x1, t, noise = ctx.shard(torch.arange(n, device=x0.device), x0, x1, t, noise)
    xt = t[:, None] * x1 + (1 - t[:, None]) * x0 + sigma * noise
    err = (v(t, xt) - (x1 - x0)).pow(2).sum(-1)
    if ctx is None or ctx.world_size <= 1:
        return err.mean()
    return err.sum() * (ctx.world_size / n)  # the shard's share of the minibatch mean (shards may differ by one)


def w2_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    import ot

    M = torch.cdist(a.double(), b.double()).pow(2).cpu().numpy()
    return float(np.sqrt(ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), M, numItermax=10_000_000)))
