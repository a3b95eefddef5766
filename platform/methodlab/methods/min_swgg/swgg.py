"""The maths of DGSWP: slices, the lifted SWGG cost h(theta), its Gaussian-smoothed (Stein) gradient,
and the standalone solver with warm start and roll-back.

h(theta) = (1/n) sum_k c(x_{sigma(k)}, y_{tau(k)}), sigma/tau = argsort of g_theta on each cloud.
h is piecewise constant in theta, so we minimise h_eps(theta) = E_Z[h(theta + eps Z)] whose gradient is
(1/eps) E[(h(theta + eps Z) - h(theta)) Z]: N+1 evaluations of h, no autograd through the sort.

Everything runs in torch on the clouds' device: slices are built under the caller's device context
(ctx.init_module()), the Gaussian perturbations are drawn there by the caller's generator, and the solver
loop keeps h, the roll-back choice and its best parameters on the device (no host round trip per
iteration); FitResult's scalars are read from the device when a caller asks for them."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import functional_call, vmap


# ----------------------------------------------------------------------------------------------- slices
class BusemannSlice(nn.Module):
    """g_theta(x) = log(||theta - x||^2 / (1 - ||x||^2)) on the Poincare ball, theta an ideal boundary point
    (a unit vector). Perturbed copies leave the sphere, as in the official code; the optimiser re-projects."""

    def __init__(self, d: int, generator: torch.Generator | None = None):
        super().__init__()
        device = generator.device if generator is not None else None  # None: the current default device
        v = torch.randn(1, d, dtype=torch.float64, generator=generator, device=device)
        self.direction = nn.Parameter(v / v.norm())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        num = (self.direction - x).pow(2).sum(-1)
        den = (1 - x.pow(2).sum(-1)).clamp_min(1e-10)
        return torch.log(num / den)


def build_slice(kind: str, d: int, *, activation: str = "relu", dtype=torch.float32,
                generator: torch.Generator | None = None) -> nn.Module:
    """linear: nn.Linear(d, 1) with torch's default init; mlpH: d -> H -> H -> 1 with He init (official flows).
    Built on the current default device (call it under ctx.init_module() or `with device:`); `generator`,
    when given, must live on that device."""
    if kind == "busemann":
        return BusemannSlice(d, generator)
    if kind == "linear":
        g = nn.Linear(d, 1)
        if generator is not None:  # torch's default init, but drawn from our generator (reproducible per run)
            bound = 1 / d ** 0.5
            with torch.no_grad():
                g.weight.uniform_(-bound, bound, generator=generator)
                g.bias.uniform_(-bound, bound, generator=generator)
        return g.to(dtype)
    hidden = {"mlp64": 64, "mlp256": 256}[kind]
    act = nn.ReLU if activation == "relu" else nn.SELU
    g = nn.Sequential(nn.Linear(d, hidden), act(), nn.Linear(hidden, hidden), act(), nn.Linear(hidden, 1))
    with torch.no_grad():
        for m in g:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu", generator=generator)
                m.bias.zero_()
    return g.to(dtype)


# ------------------------------------------------------------------------------------------ lifted cost
def sqeuclidean_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sum over coordinates of squared differences (the paper's c; no square root)."""
    return (a - b).pow(2).sum(-1)


def poincare_dist2_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """d_H^2 on the Poincare ball: arccosh(1 + 2||a-b||^2 / ((1-||a||^2)(1-||b||^2)))^2, clamped as in the paper."""
    num = 2 * (a - b).pow(2).sum(-1)
    den = ((1 - a.pow(2).sum(-1)) * (1 - b.pow(2).sum(-1))).clamp_min(1e-15)
    return torch.arccosh((1 + num / den).clamp_min(1 + 1e-15)).pow(2)


PAIR_COSTS = {"sqeuclidean": sqeuclidean_pairs, "poincare": poincare_dist2_pairs}


def sort_perm(values: torch.Tensor) -> torch.Tensor:
    """Stable argsort along the last axis (ties resolved by index: reproducible plans)."""
    return torch.sort(values, dim=-1, stable=True).indices


class Gram:
    """Precomputed <x_i, y_j> and squared norms: h(sigma, tau) = (|X|^2 + |Y|^2)/n - 2 mean_k G[sigma_k, tau_k],
    so one evaluation after the sorts is n scalar look-ups instead of an [n, d] gather. One-off O(n^2 d)
    (like the cost matrix of ot.emd), used only up to `GRAM_MAX_N` points; per evaluation it stays O(n log n)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        xd, yd = x.double(), y.double()
        self.G = xd @ yd.T if len(x) <= 2048 else (x @ y.T)
        self.const = (xd.pow(2).sum() + yd.pow(2).sum()) / len(x)  # float64 on the device

    def cost(self, sx: torch.Tensor, sy: torch.Tensor) -> torch.Tensor:
        return (self.const - 2 * self.G[sx, sy].double().mean(-1)).clamp_min(0.0)


GRAM_MAX_N = 4096


def maybe_gram(x: torch.Tensor, y: torch.Tensor, cost: str, use_gram: bool = True) -> Gram | None:
    return Gram(x, y) if use_gram and cost == "sqeuclidean" and len(x) <= GRAM_MAX_N else None


def lifted_cost(x: torch.Tensor, y: torch.Tensor, px: torch.Tensor, py: torch.Tensor,
                cost: str = "sqeuclidean", chunk: int = 1 << 24, gram: Gram | None = None) -> torch.Tensor:
    """h for S slices at once: px, py [S, n] projections -> [S] mean matched costs in the original space."""
    pair = PAIR_COSTS[cost]
    sx, sy = sort_perm(px), sort_perm(py)
    if gram is not None:
        return gram.cost(sx, sy)
    per = max(1, chunk // max(1, x.shape[0] * x.shape[1]))  # bound the [S, n, d] gathers' memory
    out = [pair(x[sx[i:i + per]], y[sy[i:i + per]]).mean(-1) for i in range(0, sx.shape[0], per)]
    return torch.cat(out)


def project(g: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return g(x).reshape(x.shape[0])


@torch.no_grad()
def h_value(g: nn.Module, x: torch.Tensor, y: torch.Tensor, cost: str = "sqeuclidean") -> float:
    return float(lifted_cost(x, y, project(g, x)[None], project(g, y)[None], cost)[0])


@torch.no_grad()
def sorting_plan(g: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigma, tau): x[sigma[k]] is matched to y[tau[k]], mass 1/n."""
    return sort_perm(project(g, x)), sort_perm(project(g, y))


def assignment(sigma: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Plan as a permutation: source i -> target assignment[i]."""
    out = torch.empty_like(sigma)
    out[sigma] = tau
    return out


def dense_plan(sigma: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """P[sigma(k), tau(k)] = 1/n (only for small n: tests and serving use permutations)."""
    n = sigma.shape[0]
    P = torch.zeros(n, n, dtype=torch.float64, device=sigma.device)
    P[sigma, tau] = 1.0 / n
    return P


# ------------------------------------------------------------------------------- smoothed gradient
def _params(g: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in g.named_parameters()}


def perturbed_h(g: nn.Module, x: torch.Tensor, y: torch.Tensor, noise: dict[str, torch.Tensor], eps: float,
                cost: str = "sqeuclidean", gram: Gram | None = None) -> torch.Tensor:
    """h at theta + eps Z_s for every row s of `noise` (Z_0 = 0 gives h(theta)), batched with vmap."""
    base = _params(g)
    stacked = {k: base[k][None] + eps * noise[k] for k in base}  # every parameter tensor perturbed jointly
    if isinstance(g, nn.Linear):  # fast path: one matmul for all S slices (the bias shifts both clouds alike)
        with torch.no_grad():
            W = stacked["weight"][:, 0, :]  # [S, d]
            return lifted_cost(x, y, W @ x.T, W @ y.T, cost, gram=gram)
    if isinstance(g, BusemannSlice):  # fast path: all S perturbed ideal points at once
        with torch.no_grad():
            th = stacked["direction"][:, 0, :]  # [S, d]
            proj = lambda p: torch.log((th[:, None] - p[None]).pow(2).sum(-1)  # noqa: E731
                                       / (1 - p.pow(2).sum(-1)).clamp_min(1e-10)[None])
            return lifted_cost(x, y, proj(x), proj(y), cost, gram=gram)

    def proj(p, pts):
        return functional_call(g, p, (pts,)).reshape(pts.shape[0])

    with torch.no_grad():
        px = vmap(proj, in_dims=(0, None))(stacked, x)
        py = vmap(proj, in_dims=(0, None))(stacked, y)
        return lifted_cost(x, y, px, py, cost, gram=gram)


def draw_noise(g: nn.Module, n_samples: int, generator: torch.Generator | None) -> dict[str, torch.Tensor]:
    """N standard normal draws per parameter tensor, with a zero row 0 (the unperturbed theta), drawn on the
    parameters' device (the generator must live there)."""
    out = {}
    for k, v in g.named_parameters():
        z = torch.randn((n_samples, *v.shape), generator=generator, dtype=v.dtype, device=v.device)
        out[k] = torch.cat([torch.zeros_like(z[:1]), z])
    return out


@dataclass
class GradEstimate:
    grads: dict[str, torch.Tensor]
    h0: torch.Tensor  # h(theta), unperturbed (report this); a 0-d tensor on the device
    smoothed: torch.Tensor  # mean_s h(theta + eps Z_s) (the official logged loss, used by the roll-back)


def smoothed_grad(g: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: float, n_samples: int,
                  generator: torch.Generator | None = None, variance_reduction: bool = True,
                  cost: str = "sqeuclidean", gram: Gram | None = None) -> GradEstimate:
    """Monte Carlo Stein estimate g_hat = 1/(N eps) sum_s (h(theta + eps Z_s) - h(theta)) Z_s."""
    noise = draw_noise(g, n_samples, generator)
    hs = perturbed_h(g, x, y, noise, eps, cost, gram)
    h0, hp = hs[0], hs[1:]
    w = (hp - h0) if variance_reduction else hp
    grads = {}
    for k, z in noise.items():
        zs = z[1:]
        grads[k] = (w.reshape(-1, *[1] * (zs.dim() - 1)).to(zs.dtype) * zs).mean(0) / eps
    return GradEstimate(grads, h0, hp.mean())


# ------------------------------------------------------------------------------------------- solver
class SphereSGD:
    """Riemannian SGD for unit-vector parameters: project the gradient on the tangent space, step, retract
    by normalisation (geoopt.Sphere's retraction); the Busemann direction stays an ideal point."""

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            u = p / p.norm()
            rg = p.grad - (p.grad * u).sum() * u
            p.sub_(self.lr * rg)
            p.div_(p.norm())

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None

    def state_dict(self):
        return {"lr": self.lr}

    def load_state_dict(self, state):
        self.lr = state["lr"]


@dataclass
class FitResult:
    """A fit's outcome. The scalars stay on the device as tensors (`*_t`); the float / list properties read
    them (one host sync each: read them at report time, not inside a training loop)."""
    h_init_t: torch.Tensor
    h_t: torch.Tensor  # h at the returned slice
    sigma: torch.Tensor
    tau: torch.Tensor
    best_iter_t: torch.Tensor
    history_t: torch.Tensor  # [n_iter] h(theta_t), unperturbed
    smoothed_t: torch.Tensor  # [n_iter] smoothed loss of theta_t
    evaluations: int = 0

    @property
    def h_init(self) -> float:
        return float(self.h_init_t)

    @property
    def h(self) -> float:
        return float(self.h_t)

    @property
    def best_iter(self) -> int:
        return int(self.best_iter_t)

    @property
    def history(self) -> list[float]:
        return self.history_t.tolist()

    @property
    def smoothed(self) -> list[float]:
        return self.smoothed_t.tolist()


def dgswp(x: torch.Tensor, y: torch.Tensor, g: nn.Module, opt, *, n_iter: int = 1000, eps: float = 0.05,
          n_samples: int = 10, variance_reduction: bool = True, rollback: bool = True,
          generator: torch.Generator | None = None, cost: str = "sqeuclidean",
          rollback_on: str = "smoothed", use_gram: bool = True) -> FitResult:
    """Fit the slice g (warm-started from its current parameters; `opt` keeps its state across calls).

    Roll-back keeps a DEEP copy of the parameters with the smallest smoothed loss (rollback_on="smoothed",
    the paper's rule) or the smallest unperturbed h(theta_t) (rollback_on="h", free: h(theta_t) is the
    control variate). The official code keeps state_dict() references, which alias the live tensors,
    so its roll-back never changes anything. The comparison and the copy are device ops (torch.where), so
    the loop never waits for the host; a fit whose losses are all NaN keeps its last iterate, as before."""
    x, y = x.detach(), y.detach()
    gram = maybe_gram(x, y, cost, use_gram) if n_iter > 0 else None
    hist, smooth = [], []
    best_loss = torch.full((), float("inf"), dtype=torch.float64, device=x.device)
    best_iter = torch.full((), -1, dtype=torch.long, device=x.device)
    best_state = {k: v.detach().clone() for k, v in g.state_dict().items()} if rollback and n_iter > 0 else None
    for it in range(n_iter):
        est = smoothed_grad(g, x, y, eps=eps, n_samples=n_samples, generator=generator,
                            variance_reduction=variance_reduction, cost=cost, gram=gram)
        hist.append(est.h0)
        smooth.append(est.smoothed)
        if rollback:  # theta_t is the iterate this loss belongs to (before the step)
            score = (est.h0 if rollback_on == "h" else est.smoothed).to(torch.float64)
            better = score < best_loss
            best_loss = torch.where(better, score, best_loss)
            best_iter = torch.where(better, it, best_iter)
            best_state = {k: torch.where(better, v.detach(), best_state[k]) for k, v in g.state_dict().items()}
        opt.zero_grad(set_to_none=True)
        for k, p in g.named_parameters():
            p.grad = est.grads[k].to(p.dtype)
        opt.step()
    if best_state is not None:  # back to the best iterate (if any loss was finite: best_iter >= 0)
        found = best_iter >= 0
        with torch.no_grad():
            for k, v in g.state_dict().items():
                v.copy_(torch.where(found, best_state[k], v))
        best_iter = torch.where(found, best_iter, n_iter)
    else:
        best_iter = torch.full((), n_iter, dtype=torch.long, device=x.device)
    sigma, tau = sorting_plan(g, x, y)
    h = lifted_cost(x, y, project(g, x).detach()[None], project(g, y).detach()[None], cost, gram=gram)[0]
    empty = x.new_zeros(0, dtype=torch.float64)
    stack = lambda xs: torch.stack(xs).to(torch.float64) if xs else empty  # noqa: E731
    return FitResult(hist[0] if hist else h, h, sigma, tau, best_iter, stack(hist), stack(smooth),
                     evaluations=n_iter * (n_samples + 1))
