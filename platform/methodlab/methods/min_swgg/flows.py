"""Gradient flows of particles x towards a fixed target y, driven by DGSWP (the slice warm-started across
flow steps) or by a baseline loss, in R^d or on the Poincare ball. Every method goes through `step()`,
so DGSWP and the baselines share the data, the step rule and the W2 evaluation.

Particles, target, slices and the flow's generator live on the device of the particles given to Flow; a
step leaves its loss and inner h on the device (read them at report time). POT's exact solvers (the
exact_ot baseline and the W2 evaluation) are numpy: their cost matrices go to the host."""

from __future__ import annotations

import numpy as np
import ot
import torch

from methodlab.methods.min_swgg.swgg import (BusemannSlice, SphereSGD, build_slice, dgswp, lifted_cost,
                                             poincare_dist2_pairs, sort_perm)


def exact_w2(x: torch.Tensor, y: torch.Tensor, space: str = "euclidean") -> float:
    """W2^2 with uniform weights (POT's exact solver) on ||.||^2 or d_H^2."""
    x, y = x.detach().double(), y.detach().double()
    M = (poincare_dist2_pairs(x[:, None], y[None]) if space == "poincare" else torch.cdist(x, y).pow(2)).cpu().numpy()
    n, m = M.shape
    return float(ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), M, numItermax=10_000_000))


def emd_permutation(M: np.ndarray) -> np.ndarray:
    """Exact OT between two uniform n-point clouds is a permutation (Birkhoff); read it off ot.emd's plan."""
    n = M.shape[0]
    P = ot.emd(np.full(n, 1 / n), np.full(n, 1 / n), M, numItermax=10_000_000)
    return P.argmax(1)


def random_directions(k: int, d: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """k random unit directions, drawn on the generator's device."""
    th = torch.randn(k, d, generator=gen, dtype=dtype, device=gen.device)
    return th / th.norm(dim=1, keepdim=True)


def busemann(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[k, n] Busemann projections of ball points x on ideal points theta (unit rows)."""
    num = (theta[:, None] - x[None]).pow(2).sum(-1)
    return torch.log(num / (1 - x.pow(2).sum(-1)).clamp_min(1e-10)[None])


def mobius_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ab, a2, b2 = (a * b).sum(-1, keepdim=True), a.pow(2).sum(-1, keepdim=True), b.pow(2).sum(-1, keepdim=True)
    return ((1 + 2 * ab + b2) * a + (1 - a2) * b) / (1 + 2 * ab + a2 * b2).clamp_min(1e-15)


def exp_poincare(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exponential map of the Poincare ball at x, projected strictly inside (geoopt's float64 margin)."""
    vn = v.norm(dim=-1, keepdim=True).clamp_min(1e-15)
    lam = 2 / (1 - x.pow(2).sum(-1, keepdim=True)).clamp_min(1e-10)
    out = mobius_add(x, torch.tanh(lam * vn / 2) * v / vn)
    norm = out.norm(dim=-1, keepdim=True)
    return torch.where(norm > 1 - 1e-5, out / norm * (1 - 1e-5), out)


class Flow:
    """One particle system on the device of x0. `step()` = one outer iteration; `state()`/`load()` for
    checkpoints."""

    def __init__(self, cfg, x0: torch.Tensor, y: torch.Tensor, seed: int):
        self.cfg, self.method, self.space = cfg, cfg.flow_method, cfg.flow_space
        self.poincare = self.space == "poincare"
        dtype = torch.float64 if self.poincare else torch.float32  # the ball is fragile near its border
        self.device = x0.device
        self.x, self.y = x0.to(dtype).clone(), y.to(self.device, dtype).clone()
        self.gen = torch.Generator(device=self.device).manual_seed(seed + 7)  # slices and directions: drawn there
        self.lr = cfg.flow_lr
        self.it = 0
        d = self.x.shape[1]
        self.g, self.opt = None, None
        if self.method.startswith("dgswp"):
            with self.device:  # the slice's parameters on the particles' device
                if self.poincare:
                    self.g = BusemannSlice(d, self.gen)
                else:
                    kind = "linear" if self.method == "dgswp_linear" else (
                        cfg.slice_model if cfg.slice_model != "linear" else "mlp256")
                    self.g = build_slice(kind, d, activation=cfg.mlp_activation, generator=self.gen)
            self.opt = (SphereSGD(self.g.parameters(), lr=cfg.lr_busemann) if self.poincare
                        else torch.optim.Adam(self.g.parameters(), lr=cfg.lr_inner))
        elif self.method == "maxsw":
            th = torch.randn(d, generator=self.gen, device=self.device)
            self.theta = (th / th.norm()).requires_grad_(True)
            self.opt = torch.optim.Adam([self.theta], lr=cfg.lr_inner)
        self.last_inner_h = torch.tensor(float("nan"), device=self.device)  # read at report time

    # ------------------------------------------------------------------------------------ losses
    def _pair_cost(self, a, b):
        return poincare_dist2_pairs(a, b) if self.poincare else (a - b).pow(2).sum(-1)

    def _matching(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(sigma, tau) for the lifted-plan methods; None for the sliced (SW-type) losses."""
        cfg, x, y = self.cfg, self.x.detach(), self.y
        cost = "poincare" if self.poincare else "sqeuclidean"
        if self.method.startswith("dgswp"):
            eps = cfg.eps_busemann if self.poincare else cfg.eps
            res = dgswp(x, y, self.g, self.opt, n_iter=cfg.n_iter_inner, eps=eps, n_samples=cfg.n_samples,
                        variance_reduction=cfg.variance_reduction, rollback=cfg.rollback, generator=self.gen,
                        cost=cost, rollback_on=cfg.rollback_on)
            self.last_inner_h = res.h_t
            return res.sigma, res.tau
        if self.method == "minswgg_rs":  # min-SWGG random search: best of n_proj random directions
            th = random_directions(cfg.n_proj, x.shape[1], self.gen, x.dtype)
            hs = lifted_cost(x, y, th @ x.T, th @ y.T, cost)
            best = th.index_select(0, hs.argmin()[None])[0]  # on the device: no host read of the argmin
            self.last_inner_h = hs.min()
            return sort_perm(best @ x.T), sort_perm(best @ y.T)
        if self.method == "exact_ot":  # POT's exact solver is numpy: the cost matrix goes to the host
            M = self._pair_cost(x[:, None].double(), y[None].double()).cpu().numpy()
            return (torch.arange(len(x), device=self.device),
                    torch.as_tensor(emd_permutation(M), device=self.device))
        return None

    def _sliced_loss(self, x: torch.Tensor) -> torch.Tensor:
        cfg, y, d = self.cfg, self.y, self.x.shape[1]
        if self.method == "maxsw":  # inner ascent on the direction, then the flow loss along it
            for _ in range(cfg.n_iter_inner):
                u = self.theta / self.theta.norm()
                loss = -(torch.sort(x.detach() @ u).values - torch.sort(y @ u).values).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
            th = (self.theta / self.theta.norm()).detach()[None]
        else:
            th = random_directions(cfg.n_proj, d, self.gen, x.dtype)
        if self.method == "hhsw":  # horospherical projections (Busemann functions of random ideal points)
            px, py = busemann(th, x), busemann(th, y)
        else:
            px, py = th @ x.T, th @ y.T
        return (torch.sort(px, -1).values - torch.sort(py, -1).values).pow(2).mean()

    def step(self) -> torch.Tensor:
        """One flow iteration; returns the step's loss (a 0-d tensor on the device)."""
        x = self.x.clone().requires_grad_(True)
        match = self._matching()
        if match is not None:
            sigma, tau = match
            loss = self._pair_cost(x[sigma], self.y[tau]).mean()  # lifted cost h(theta), x differentiable
        else:
            loss = self._sliced_loss(x)
        (grad,) = torch.autograd.grad(loss, x)
        with torch.no_grad():
            if self.poincare:  # Riemannian SGD: Euclidean gradient rescaled by (1-|x|^2)^2/4, exp-map retraction
                z = (1 - self.x.pow(2).sum(-1, keepdim=True)).pow(2) / 4
                new = exp_poincare(-self.lr * z * grad, self.x)
                bad = ~torch.isfinite(new).all(-1, keepdim=True)
                self.x = torch.where(bad, self.x, new)  # a particle that turns NaN keeps its previous position
            else:
                self.x = self.x - self.lr * grad
        self.it += 1
        return loss.detach()

    def w2(self) -> float:
        return exact_w2(self.x, self.y, self.space)

    # -------------------------------------------------------------------------------- checkpoints
    def state(self) -> tuple[dict, dict]:
        weights = {"x": self.x, "y": self.y}
        if self.g is not None:
            weights.update({f"slice.{k}": v for k, v in self.g.state_dict().items()})
        if self.method == "maxsw":
            weights["theta"] = self.theta.detach()
        ts = {"gen": self.gen.get_state(), "it": self.it}
        if self.opt is not None:
            ts["opt"] = self.opt.state_dict()
        return weights, ts

    def load(self, weights: dict, ts: dict) -> None:
        self.x, self.y = weights["x"].to(self.device).clone(), weights["y"].to(self.device).clone()
        if self.g is not None:
            self.g.load_state_dict({k[6:]: v for k, v in weights.items() if k.startswith("slice.")})
        if self.method == "maxsw":
            with torch.no_grad():
                self.theta.copy_(weights["theta"])
        if self.opt is not None and "opt" in ts:
            self.opt.load_state_dict(ts["opt"])
        self.gen.set_state(ts["gen"])
        self.it = int(ts["it"])
