"""Networks and the IVR / Uni-RL maths: twin Q (one batched ensemble), V with LayerNorm, the
tanh-mean Gaussian actor with a state-independent log-std [IVR], SAC's squashed actor, the SQL/EQL
value losses and the policy-extraction weights."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(inp: int, hidden: list[int], out: int, layernorm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inp, h)] + ([nn.LayerNorm(h)] if layernorm else []) + [nn.ReLU()]
        inp = h
    return nn.Sequential(*layers, nn.Linear(inp, out))


class EnsembleLinear(nn.Module):
    """k independent linear layers applied in one batched matmul (x: [k, B, in])."""

    def __init__(self, k: int, inp: int, out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, inp, out))
        self.bias = nn.Parameter(torch.empty(k, 1, out))
        bound = 1.0 / math.sqrt(inp)  # nn.Linear's default init, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class TwinQ(nn.Module):
    """Q1, Q2: MLP(obs ++ act -> 256 -> 256 -> 1), ReLU, no LayerNorm, evaluated together. Returns [2, B]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], k: int = 2):
        super().__init__()
        dims = [obs_dim + act_dim, *hidden]
        self.hidden = nn.ModuleList(EnsembleLinear(k, i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.out = EnsembleLinear(k, dims[-1], 1)
        self.k = k

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], -1).unsqueeze(0).expand(self.k, -1, -1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x).squeeze(-1)


class ValueNet(nn.Module):
    def __init__(self, obs_dim: int, hidden: list[int], layernorm: bool = True):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 1, layernorm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)


class GaussianActor(nn.Module):
    """IVR's actor: mean = tanh(MLP(s)), state-independent log-std clipped to [min, max]; not tanh-squashed."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], log_std_min: float = -5.0, log_std_max: float = 2.0):
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = torch.tanh(self.net(obs))
        log_std = self.log_std.clamp(self.log_std_min, self.log_std_max).expand_as(mean)
        return mean, log_std

    def log_prob(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        mean, log_std = self(obs)
        return gaussian_log_prob(act, mean, log_std)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool, generator: torch.Generator | None = None) -> torch.Tensor:
        mean, log_std = self(obs)
        if deterministic:
            return mean
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return (mean + noise * log_std.exp()).clamp(-1.0, 1.0)


class SquashedGaussianActor(nn.Module):
    """SAC's actor: state-dependent mean and log-std, a = tanh(u), u ~ N(mean, std)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], log_std_min: float = -5.0, log_std_max: float = 2.0):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 2 * act_dim)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, -1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action and its log-probability (with the tanh change of variables)."""
        mean, log_std = self(obs)
        u = mean + torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype) * log_std.exp()
        a = torch.tanh(u)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), numerically stable
        logp = gaussian_log_prob(u, mean, log_std) - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return a, logp

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool, generator: torch.Generator | None = None) -> torch.Tensor:
        if deterministic:
            return torch.tanh(self(obs)[0])
        return self.sample(obs, generator)[0]


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density summed over the last dimension."""
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


# --- IVR / Uni-RL maths -------------------------------------------------------------------------

EQL_CLAMP = 5.0


def eql_shift(u: torch.Tensor, alpha: float) -> torch.Tensor:
    """EQL's stabilising shift m = stopgrad(max(max_batch min(u/alpha, 5), -1)) of a (shard of a) batch."""
    return torch.clamp(torch.clamp(u / alpha, max=EQL_CLAMP).max(), min=-1.0).detach()


def value_loss(u: torch.Tensor, v: torch.Tensor, alpha: float, alg: str, m: torch.Tensor | None = None) -> torch.Tensor:
    """u = Qbar(s, a_ref) - V(s) (grad through V only), v = V(s).
    SQL: mean(1[z>0] z^2 + V/alpha), z = 1 + u/(2 alpha).
    EQL: mean(exp(z - m) + exp(-m) V/alpha), z = min(u/alpha, 5), m = stopgrad(max(max_batch z, -1)); `m` given:
    the whole batch's shift (data parallel: the max over every rank's shard), else this batch's own."""
    if alg == "SQL":
        z = 1.0 + u / (2.0 * alpha)
        return ((z > 0).float() * z.pow(2) + v / alpha).mean()
    z = torch.clamp(u / alpha, max=EQL_CLAMP)
    if m is None:
        m = torch.clamp(z.max(), min=-1.0).detach()
    return (torch.exp(z - m) + torch.exp(-m) * v / alpha).mean()


def extraction_weights(u: torch.Tensor, alpha: float, alg: str, extractor: str, clip: float, normalize: bool) -> torch.Tensor:
    """Weights of the weighted log-likelihood (u detached).
    closed_form [RECON]: pi* = mu * w with w = max(0, 1 + u/(2 alpha)) (SQL) or exp(u/alpha) (EQL), clipped, self-normalised.
    ivr_awr [IVR]: SQL max(u, 0), EQL exp(10 u / alpha), clipped at `clip`, not normalised."""
    if extractor == "closed_form":
        w = torch.clamp(1.0 + u / (2.0 * alpha), min=0.0) if alg == "SQL" else torch.exp(torch.clamp(u / alpha, max=math.log(clip)))
        w = w.clamp(0.0, clip)
        if normalize:
            w = w / w.mean().clamp_min(1e-8)
        return w
    w = torch.clamp(u, min=0.0) if alg == "SQL" else torch.exp(torch.clamp(10.0 * u / alpha, max=math.log(clip)))
    return w.clamp(0.0, clip)


@torch.no_grad()
def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)
