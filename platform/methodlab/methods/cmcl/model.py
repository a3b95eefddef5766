"""Per-modality affine heads and the DNS maths (spec methods/cmcl.md, "The algorithm").

h_m(x) = W_m x + b_m (W_m = I, b_m = 0 at start); similarity s = h_a(x_a)^T h_b(x_b). DNS keeps, per modality,
the second moment C_m of the head's inputs and C~_m of its partners' bias-free outputs; at the start of a step
it freezes P_m = proj(C_m, lambda_min) and P~_m = proj(C~_m, lambda'), and every gradient becomes
G - P~ G P (only the doubly-projected block is removed: NOT (I - P~) G (I - P)).
"""

from __future__ import annotations

import torch
from torch import nn


class Heads(nn.Module):
    """One affine head per modality type, shared by every step in which that modality appears."""

    def __init__(self, modalities: list[str], dim: int, dtype=torch.float32, device=None):
        super().__init__()
        self.modalities = list(modalities)
        self.dim = dim
        self.W = nn.ParameterDict({m: nn.Parameter(torch.eye(dim, dtype=dtype, device=device)) for m in modalities})
        self.b = nn.ParameterDict({m: nn.Parameter(torch.zeros(dim, dtype=dtype, device=device)) for m in modalities})

    def forward(self, m: str, x: torch.Tensor) -> torch.Tensor:
        return x @ self.W[m].T + self.b[m]

    def params_of(self, m: str, with_bias: bool = True) -> list[nn.Parameter]:
        return [self.W[m], self.b[m]] if with_bias else [self.W[m]]


def rank_tol(S: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype) -> float:
    """Numerical-rank tolerance of a matrix of `shape` whose entries were computed in `dtype`, with eigen- (or
    singular) values S: max|S| * max(M, N) * eps(dtype), as numpy.linalg.matrix_rank. Below it an eigenvalue is
    round-off of that dtype, not a direction of the data."""
    if not S.numel():
        return 0.0
    return float(S.abs().max()) * max(shape) * torch.finfo(dtype).eps


def projector(Z: torch.Tensor, lam: float, rel_tol: float = 1e-7) -> tuple[torch.Tensor, int]:
    """P = U_k U_k^T over the eigenvectors of the symmetric PSD Z with eigenvalue > max(lam, rel_tol * S_max,
    tol), tol the numerical-rank tolerance of Z's own dtype (`rank_tol`).

    float64 eigh: in float32 the noise floor of a 1024x1024 matrix is above 0, so "S > 0" would keep every
    direction; and a moment matrix accumulated in float32 carries float32 round-off (eigenvalues up to ~D eps
    S_max on directions the data never had), which `tol` discards at lambda' = 0 whatever rel_tol says."""
    src = Z.dtype if Z.dtype.is_floating_point else torch.float64
    Z = Z.detach().to(torch.float64)
    S, U = torch.linalg.eigh((Z + Z.T) / 2)
    smax = float(S.max()) if S.numel() else 0.0
    keep = S > max(lam, rel_tol * smax, rank_tol(S, tuple(Z.shape), src))
    if smax <= 0 or not bool(keep.any()):
        return torch.zeros_like(Z), 0
    Uk = U[:, keep]
    return Uk @ Uk.T, int(keep.sum())


def dns_project(G: torch.Tensor, P_in: torch.Tensor, P_partner: torch.Tensor) -> torch.Tensor:
    """G - P~ G P: for old x in span(P) and old partner outputs y in span(P~), y^T (projected G) x = 0."""
    return G - P_partner @ G @ P_in


def one_sided_project(G: torch.Tensor, P_in: torch.Tensor) -> torch.Tensor:
    """The ablation: G - G P (input side only)."""
    return G - G @ P_in


def kept_share(G: torch.Tensor, G_projected: torch.Tensor) -> float:
    """Share of the gradient's Frobenius norm a projection keeps: ||G_projected||_F / ||G||_F (1 when G = 0)."""
    return float(kept_share_t(G, G_projected))


def kept_share_t(G: torch.Tensor, G_projected: torch.Tensor) -> torch.Tensor:
    """`kept_share` as a 0-dim tensor on G's device (no host read: the training loop sums these)."""
    n = torch.linalg.norm(G)
    return torch.where(n > 0, torch.linalg.norm(G_projected) / n, torch.ones_like(n))


class DNSState:
    """Running uncentred (or centred) second moments per modality, with the official global counter."""

    def __init__(self, modalities: list[str], dim: int, per_modality_counts: bool = False, center: bool = False,
                 device=None):
        self.device = device  # where the moments live (the run's device; None: torch's default)
        z = lambda: {m: torch.zeros(dim, dim, dtype=torch.float64, device=device) for m in modalities}  # noqa: E731
        self.C, self.C_partner = z(), z()
        self.seen = {m: False for m in modalities}
        self.count = {m: 0.0 for m in modalities}  # used when per_modality_counts
        self.global_count = 0.0
        self.per_modality_counts, self.center = per_modality_counts, center

    def _moment(self, X: torch.Tensor) -> torch.Tensor:
        X = X.detach().to(torch.float64)
        if self.center:
            X = X - X.mean(0, keepdim=True)
        return X.T @ X

    @torch.no_grad()
    def update(self, heads: Heads, a: str, b: str, Xa: torch.Tensor, Xb: torch.Tensor) -> None:
        """End of a step with pair (a, b): W taken after training. C~_b gets W_a X_a, C~_a gets W_b X_b."""
        n = float(len(Xa))
        Wa, Wb = heads.W[a].detach().to(torch.float64), heads.W[b].detach().to(torch.float64)
        Ma, Mb = self._moment(Xa), self._moment(Xb)
        if self.per_modality_counts:
            for m, M, Wp, Mp in ((a, Ma, Wb, Mb), (b, Mb, Wa, Ma)):
                old, new = self.count[m], self.count[m] + n
                self.C[m] = self.C[m] * (old / new) + M / new
                self.C_partner[m] = self.C_partner[m] * (old / new) + Wp @ (Mp / new) @ Wp.T
                self.count[m] = new
        else:  # official quirk: ONE counter shared by all modalities
            old, new = self.global_count, self.global_count + n
            self.C[a] = self.C[a] * (old / new) + Ma / new
            self.C[b] = self.C[b] * (old / new) + Mb / new
            self.C_partner[b] = self.C_partner[b] * (old / new) + Wa @ (Ma / new) @ Wa.T
            self.C_partner[a] = self.C_partner[a] * (old / new) + Wb @ (Mb / new) @ Wb.T
            self.global_count = new
        self.seen[a] = self.seen[b] = True

    def projectors(self, m: str, lambda_min: float, lambda_partner: float, rel_tol: float):
        """(P_m, P~_m, rank P, rank P~); zeros (no projection) for an unseen modality."""
        if not self.seen[m]:
            z = torch.zeros_like(self.C[m])
            return z, z, 0, 0
        P, r = projector(self.C[m], lambda_min, rel_tol)
        Pt, rt = projector(self.C_partner[m], lambda_partner, rel_tol)
        return P, Pt, r, rt

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for m in self.C:
            out[f"dns.C.{m}"] = self.C[m]
            out[f"dns.Cp.{m}"] = self.C_partner[m]
        return out

    def state_json(self) -> dict:
        return {"seen": self.seen, "count": self.count, "global_count": self.global_count}

    def load(self, tensors: dict, js: dict) -> None:
        for m in self.C:
            self.C[m] = tensors[f"dns.C.{m}"].to(self.C[m].device, torch.float64)
            self.C_partner[m] = tensors[f"dns.Cp.{m}"].to(self.C[m].device, torch.float64)
        self.seen = {m: bool(v) for m, v in js["seen"].items()}
        self.count = {m: float(v) for m, v in js["count"].items()}
        self.global_count = float(js["global_count"])


class EWC:
    """Diagonal-Fisher EWC on head weights and biases: penalty (lambda/2) sum_i F_i (theta_i - theta*_i)^2.

    Fisher = mean squared mini-batch gradient of the contrastive loss over the finished step (summed over
    steps, anchored at the parameters after each step)."""

    def __init__(self):
        self.fisher: dict[str, torch.Tensor] = {}
        self.anchor: dict[str, torch.Tensor] = {}

    def penalty(self, heads: Heads, mods: tuple[str, str], lam: float) -> torch.Tensor | None:
        terms = []
        for m in mods:
            for kind, p in (("W", heads.W[m]), ("b", heads.b[m])):
                key = f"{kind}.{m}"
                if key in self.fisher:
                    terms.append((self.fisher[key] * (p - self.anchor[key]) ** 2).sum())
        return 0.5 * lam * torch.stack(terms).sum() if terms else None

    def consolidate(self, heads: Heads, mods: tuple[str, str], grads_sq: dict[str, torch.Tensor]) -> None:
        for m in mods:
            for kind, p in (("W", heads.W[m]), ("b", heads.b[m])):
                key = f"{kind}.{m}"
                f = grads_sq[key]
                self.fisher[key] = self.fisher[key] + f if key in self.fisher else f.clone()
                self.anchor[key] = p.detach().clone()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {f"ewc.F.{k}": v for k, v in self.fisher.items()}
        out.update({f"ewc.A.{k}": v for k, v in self.anchor.items()})
        return out

    def load(self, tensors: dict, device=None) -> None:
        """From a checkpoint (host tensors), onto `device` (the heads')."""
        mv = (lambda v: v) if device is None else (lambda v: v.to(device))  # noqa: E731
        self.fisher = {k[len("ewc.F."):]: mv(v) for k, v in tensors.items() if k.startswith("ewc.F.")}
        self.anchor = {k[len("ewc.A."):]: mv(v) for k, v in tensors.items() if k.startswith("ewc.A.")}
