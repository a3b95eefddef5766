"""The regressor (MLP on standardised inputs and targets), its training, and the base-kernel features:
last-layer activations (ll), a sketched NTK (per-layer per-sample gradients delta_l (x) a_{l-1}, each Kronecker
factor projected at random and multiplied elementwise, the bmdal_reg construction) and random Fourier features
of an input RBF (rbf). Training batches, predictions and features are computed on the network's device (ctx.device
in a run) and come back to numpy once per call: the selection maths (propagation, LCMD, MaxDet) is numpy."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: list[int], activation: str = "silu"):
        super().__init__()
        dims = [d_in, *hidden, 1]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = nn.SiLU() if activation == "silu" else nn.ReLU()

    def forward(self, x: torch.Tensor, return_hidden: bool = False):
        h = x
        for layer in self.layers[:-1]:
            h = self.act(layer(h))
        out = self.layers[-1](h).squeeze(-1)
        return (out, h) if return_hidden else out


def build_net(d_in: int, hidden: list[int], activation: str, seed: int) -> MLP:
    """Seeded initialisation; build it under ctx.init_module() to create it on the run's device (a CUDA run
    draws its initial weights from the CUDA generator, seeded alike)."""
    torch.manual_seed(seed)
    return MLP(d_in, list(hidden), activation)


def _device(net: nn.Module) -> torch.device:
    return next(net.parameters()).device


def train_net(net: MLP, x: np.ndarray, y: np.ndarray, *, epochs: int, batch: int, lr: float, weight_decay: float,
              seed: int, sample_weight: np.ndarray | None = None, ctx=None, model: nn.Module | None = None) -> MLP:
    """Adam on the (weighted) MSE of standardised targets, cosine-decayed lr over all steps. The data move once to
    the network's device; batches are drawn there. `ctx` (a RunContext) supplies autocast / backward / optimiser
    step (fp16: GradScaler); `model` is the prepared module to call (default: net). Data parallel (ctx.world_size
    > 1, `model` DDP-wrapped): every rank draws the same global batches and trains on its `ctx.shard` of each;
    DDP averages the gradients, so the ranks hold identical weights after every step."""
    dev = _device(net)
    xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(y, dtype=torch.float32, device=dev)
    wt = None if sample_weight is None else torch.as_tensor(sample_weight, dtype=torch.float32, device=dev)
    fwd = net if model is None else model
    if ctx is None:  # a plain fp32 context on the network's device (baselines and tests call without a run)
        from methodlab.core import RunContext

        ctx = RunContext(device=dev)
    n = len(xt)
    batch = max(1, min(batch, n))
    per_epoch = math.ceil(n / batch)
    total = epochs * per_epoch
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    g = torch.Generator(device=dev).manual_seed(seed)  # batches drawn where they are used (CUDA: another order)
    world = ctx.world_size
    fwd.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g, device=dev)  # the same global order on every rank
        for k in range(per_epoch):
            idx = perm[k * batch:(k + 1) * batch]  # the global mini-batch
            loc = ctx.shard(idx)  # data parallel: this rank's part (all of it on one worker)
            with ctx.autocast():
                err = (fwd(xt[loc]).float() - yt[loc]) ** 2
            if world == 1:  # the 1-worker expressions, bit for bit
                loss = err.mean() if wt is None else (wt[idx] * err).sum() / wt[idx].sum().clamp_min(1e-12)
            else:  # this rank's share of the global batch's loss: DDP's mean over the ranks is that loss exactly,
                # also when the last batch of an epoch splits unevenly (the denominator is the global batch's)
                den = float(len(idx)) if wt is None else wt[idx].sum().clamp_min(1e-12)
                loss = (err if wt is None else wt[loc] * err).sum() * (world / den)
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            ctx.optimizer_step(opt)
            sched.step()
    fwd.eval()
    return net


@torch.no_grad()
def predict(net: MLP, x: np.ndarray, chunk: int = 8192) -> np.ndarray:
    dev = _device(net)
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float32, device=dev)
    out = [net(xt[i:i + chunk]) for i in range(0, len(xt), chunk)] or [torch.zeros(0, device=dev)]
    return torch.cat(out).double().cpu().numpy()


# ------------------------------------------------------------------------------------------------- features
class FeatureMap:
    """Base-kernel features phi(x) with k(x, x') = <phi(x), phi(x')>; the random projections are fixed by `seed`
    (the same map for pool, labelled, auxiliary and served inputs). The sketches live on the network's device
    (drawn there: a CUDA map differs from a CPU map of the same seed); features come back as numpy."""

    def __init__(self, net: MLP, kind: str, sketch_dim: int, seed: int, d_in: int, rbf_lengthscale: float = 1.0):
        self.net, self.kind, self.m = net, kind, sketch_dim
        dev = self.device = _device(net)
        g = torch.Generator(device=dev).manual_seed(10_007 + seed)
        if kind == "ntk":
            dims = [layer.in_features for layer in net.layers]
            outs = [layer.out_features for layer in net.layers]
            per = max(1, sketch_dim // len(dims))
            self.proj = []
            for i, (a, b) in enumerate(zip(dims, outs)):
                if b == 1:  # output layer: delta = 1, the gradient is [a, 1] itself (exact, no sketch)
                    self.proj.append(None)
                else:
                    self.proj.append((torch.randn(a + 1, per, generator=g, device=dev),
                                      torch.randn(b, per, generator=g, device=dev)))
        elif kind == "rbf":
            self.w = torch.randn(d_in, sketch_dim, generator=g, dtype=torch.float64, device=dev) / rbf_lengthscale
            self.b = torch.rand(sketch_dim, generator=g, dtype=torch.float64, device=dev) * 2 * math.pi

    def __call__(self, x: np.ndarray, chunk: int = 4096) -> np.ndarray:
        x = np.asarray(x)
        if len(x) == 0:
            return np.zeros((0, self.dim(x.shape[1] if x.ndim == 2 else 1)))
        return np.concatenate([self._one(x[i:i + chunk]) for i in range(0, len(x), chunk)])

    def dim(self, d_in: int) -> int:
        if self.kind == "ll":
            return self.net.layers[-1].in_features
        if self.kind == "rbf":
            return self.m
        return sum((p[0].shape[1] if p is not None else self.net.layers[-1].in_features + 1) for p in self.proj)

    def _one(self, x: np.ndarray) -> np.ndarray:
        dev = self.device
        if self.kind == "rbf":
            z = torch.as_tensor(x, dtype=torch.float64, device=dev) @ self.w + self.b
            return (math.sqrt(2.0 / self.m) * torch.cos(z)).cpu().numpy()
        xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
        if self.kind == "ll":
            with torch.no_grad():
                return self.net(xt, return_hidden=True)[1].double().cpu().numpy()
        # sketched NTK: activations a_{l-1} and backpropagated deltas delta_l of the scalar output
        acts, pres = [xt], []
        with torch.enable_grad():
            h = xt
            for layer in self.net.layers[:-1]:
                z = layer(h)
                z.retain_grad()
                pres.append(z)
                h = self.net.act(z)
                acts.append(h)
            out = self.net.layers[-1](h).squeeze(-1)
            out.sum().backward()  # rows are independent: row i of z.grad is d out_i / d z_i
        feats = []
        ones = torch.ones(len(xt), 1, device=dev)
        for i, p in enumerate(self.proj):
            a = torch.cat([acts[i].detach(), ones], 1)
            if p is None:
                feats.append(a)
            else:
                delta = pres[i].grad
                feats.append((a @ p[0]) * (delta @ p[1]) / math.sqrt(p[0].shape[1]))
        self.net.zero_grad(set_to_none=True)
        return torch.cat(feats, 1).double().cpu().numpy()
