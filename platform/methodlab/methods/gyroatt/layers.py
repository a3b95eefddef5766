"""Manifold layers: Stiefel/orthogonal parameters with the Riemannian Adam wrapper (MAtt's
StiefelMetaOptimizer: project, step, QR retract), the GyroAtt block and MAtt's attention block."""

from __future__ import annotations

import torch
from torch import nn

from methodlab.methods.gyroatt import linalg as la
from methodlab.methods.gyroatt.spd import LEM

STIEFEL_SUFFIX = "_st"  # parameters named *_st live on a Stiefel manifold (orthonormal columns)


def random_stiefel(n: int, k: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """Drawn on the host from a CPU generator (the same initial maps on every device); the module moves them
    to the run's device with its other parameters."""
    return la.qr_orth(torch.randn(n, k, dtype=torch.float64, generator=gen, device="cpu"))


def stiefel_params(module: nn.Module) -> list[nn.Parameter]:
    return [p for n, p in module.named_parameters() if n.split(".")[-1].endswith(STIEFEL_SUFFIX)]


class RiemannianAdam:
    """Adam for everything; on Stiefel parameters the Euclidean gradient is first projected onto the
    tangent space (G - W sym(W^T G)) and the updated point is retracted with a sign-fixed QR."""

    def __init__(self, model: nn.Module, lr: float, weight_decay: float, euclidean_decay_only: bool = True):
        st = {id(p) for p in stiefel_params(model)}
        manifold_bias = {id(p) for n, p in model.named_parameters() if n.split(".")[-1].startswith("bias_m")}
        decay = [p for p in model.parameters() if id(p) not in st and id(p) not in manifold_bias]
        other = [p for p in model.parameters() if id(p) in manifold_bias]
        self.stiefel = [p for p in model.parameters() if id(p) in st]
        groups = [{"params": decay, "weight_decay": weight_decay}]
        if other:
            groups.append({"params": other, "weight_decay": 0.0 if euclidean_decay_only else weight_decay})
        if self.stiefel:
            groups.append({"params": self.stiefel, "weight_decay": 0.0})
        self.opt = torch.optim.Adam(groups, lr=lr)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    @torch.no_grad()
    def step(self):
        for w in self.stiefel:
            if w.grad is not None:
                w.grad.sub_(w @ la.sym(w.transpose(-1, -2) @ w.grad))
        self.opt.step()
        for w in self.stiefel:
            w.copy_(la.qr_orth(w))

    def state_dict(self):
        return self.opt.state_dict()

    def load_state_dict(self, sd):
        self.opt.load_state_dict(sd)


def score_fn(d2: torch.Tensor, score: str, squared: bool) -> torch.Tensor:
    """MAtt's 1/(1 + log(1 + d)) (d squared or not, a setting) or -d^2."""
    if score == "neg_sq_dist":
        return -d2
    d = d2 if squared else (d2 + 1e-12).sqrt()
    return 1.0 / (1.0 + torch.log1p(d))


class GyroAttention(nn.Module):
    """Q/K/V = gyro homomorphisms, scores from geodesic distances, output = weighted Frechet mean."""

    def __init__(self, geom, geometry: str, n: int, p: int, qkv_maps: str = "separate", attention: str = "gyro",
                 score: str = "matt", dist_squared: bool = True, score_scale: bool = False,
                 gen: torch.Generator | None = None):
        super().__init__()
        self.geom, self.geometry, self.n, self.p = geom, geometry, n, p
        self.attention, self.score, self.dist_squared = attention, score, dist_squared
        self.names = ("q", "k", "v") if qkv_maps == "separate" else ("q",)
        for name in self.names:
            for i, (a, b) in enumerate(self._shapes()):
                self.register_parameter(f"{name}{i}_st", nn.Parameter(random_stiefel(a, b, gen)))
        self.log_scale = nn.Parameter(torch.zeros((), dtype=torch.float64)) if score_scale else None

    def _shapes(self):
        n, p = self.n, self.p
        if self.geometry.startswith("spd-"):
            return [(n, n)]
        if self.geometry == "grassmann":
            return [(p, p), (n - p, n - p)]
        return [(p, p), (n - p, n - p), (p, p)]  # SPSD: Gr maps, then the SPD(p) map

    def _map(self, name: str, x):
        name = name if name in self.names else self.names[0]
        mats = [getattr(self, f"{name}{i}_st") for i in range(len(self._shapes()))]
        return self.geom.hom(x, mats[0] if len(mats) == 1 else tuple(mats))

    def forward(self, x):
        """x: geometry rep with token axis 1 ([B, m, ...]). Returns (output rep, attention [B, m, m])."""
        first = x[0] if isinstance(x, tuple) else x
        b, m = first.shape[:2]
        q, k, v = self._map("q", x), self._map("k", x), self._map("v", x)
        if self.attention == "uniform":
            attn = torch.full((b, m, m), 1.0 / m, dtype=first.dtype, device=first.device)
        else:
            s = score_fn(self.geom.dist2(q, k), self.score, self.dist_squared)
            if self.log_scale is not None:
                s = s * self.log_scale.exp()
            attn = torch.softmax(s, -1)
        return self.geom.wfm(v, attn), attn


class MAttAttention(nn.Module):
    """MAtt (NeurIPS 2022): Q/K/V = Stiefel BiMaps W^T X W (d_in -> d_out), LEM distance, LEM mean.
    Plain linear maps of the covariance, not gyro homomorphisms of the attention's own space."""

    def __init__(self, d_in: int, d_out: int, attention: str = "gyro", score: str = "matt", dist_squared: bool = True,
                 gen: torch.Generator | None = None):
        super().__init__()
        self.lem, self.attention, self.score, self.dist_squared = LEM(), attention, score, dist_squared
        for name in ("q", "k", "v"):
            self.register_parameter(f"{name}_st", nn.Parameter(random_stiefel(d_in, d_out, gen)))

    def forward(self, x):
        """x: SPD tokens [B, m, d_in, d_in] -> (log-domain tokens [B, m, d_out, d_out], attention)."""
        bimap = lambda w: la.logm(w.transpose(-1, -2) @ x @ w)  # noqa: E731
        q, k, v = bimap(self.q_st), bimap(self.k_st), bimap(self.v_st)
        b, m = x.shape[:2]
        if self.attention == "uniform":
            attn = torch.full((b, m, m), 1.0 / m, dtype=x.dtype, device=x.device)
        else:
            attn = torch.softmax(score_fn(self.lem.dist2(q, k), self.score, self.dist_squared), -1)
        return self.lem.wfm(v, attn), attn
