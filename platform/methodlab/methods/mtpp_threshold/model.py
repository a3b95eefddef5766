"""IFNMTPP (integration-free neural MTPP) and the LogNormMix baseline.

IFNMTPP parameterises the per-mark tail integral Gamma*(m, tau) = int_tau^inf p*(m, s) ds with a network
that is non-increasing in tau by construction (non-negative weights, monotone activations, sigmoid(-x)),
so p*(m) = Gamma*(m, 0), F*(tau | m) = 1 - Gamma*(m, tau) / Gamma*(m, 0) are closed form and the density
p*(m, tau) = -dGamma*/dtau comes from autograd. Times enter standardised: tau~ = (tau - mean) / std.
"""

from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


class NonNegLinear(nn.Module):
    """Linear map with non-negative weights, so it is non-decreasing in every input; the bias is free.

    The forward pass uses weight.clamp_min(0), whose gradient passes where weight >= 0 (zero included). The
    research code keeps the STORED weights non-negative (relu on weight.data before every use: projected
    gradient descent), so a weight driven to 0 gets a gradient again and can come back; `project_()` does that
    projection and the training loop calls it after every optimiser step (`nonneg_weights: project`). Without
    it (`clamp`) a weight that one Adam step pushes below 0 gets no gradient ever after: it is dead for good.

    init 'research': nn.Linear's default (kaiming-uniform weights U(+-1/sqrt(d_in)) and bias) with the weights
    then set to relu(weight), as the research code's NonNegLinear does (about half start at 0, alive under the
    projection); 'positive': weights U(0, 1/d_in), bias 0 (every unit starts near the mean of its inputs)."""

    def __init__(self, d_in: int, d_out: int, init: str = "positive"):
        super().__init__()
        if init == "research":
            lin = nn.Linear(d_in, d_out)
            self.weight = nn.Parameter(lin.weight.detach().clamp_min(0.0).clone())
            self.bias = nn.Parameter(lin.bias.detach().clone())
        elif init == "positive":
            self.weight = nn.Parameter(torch.rand(d_out, d_in) / d_in)  # a clipped-to-0 init is dead under clamp
            self.bias = nn.Parameter(torch.zeros(d_out))
        else:
            raise ValueError(f"NonNegLinear init must be 'research' or 'positive', got {init!r}")

    def pos_weight(self) -> torch.Tensor:
        return self.weight.clamp_min(0.0)

    @torch.no_grad()
    def project_(self) -> None:
        self.weight.clamp_(min=0.0)

    def forward(self, x):
        return F.linear(x, self.pos_weight(), self.bias)


class HistoryEncoder(nn.Module):
    """Mark embedding (index M = padding) + standardised gap -> 1-layer LSTM; h_i summarises events 0..i."""

    def __init__(self, n_marks: int, d_history: int):
        super().__init__()
        self.embed = nn.Embedding(n_marks + 1, d_history, padding_idx=n_marks)
        self.lstm = nn.LSTM(d_history + 1, d_history, batch_first=True)

    def forward(self, marks, gaps_std):
        x = torch.cat([self.embed(marks), gaps_std.unsqueeze(-1)], -1)
        return self.lstm(x)[0]


class IFNMTPP(nn.Module):
    def __init__(self, n_marks: int, d_history=64, d_intensity=64, mlp_layers=3, tanh_parameter=10.0,
                 activation="ctanh", removes_tail=True, eps=1e-8, init="positive"):
        super().__init__()
        self.M, self.c, self.activation, self.removes_tail, self.eps = n_marks, float(tanh_parameter), activation, removes_tail, eps
        self.encoder = HistoryEncoder(n_marks, d_history)
        if init == "research":  # xavier-uniform per-mark vectors, as the research code
            bound = math.sqrt(6.0 / (n_marks + d_intensity))
            self.a = nn.Parameter(torch.empty(n_marks, d_intensity).uniform_(-bound, bound))
            self.b = nn.Parameter(torch.empty(n_marks, d_intensity).uniform_(-bound, bound))
        else:
            self.a = nn.Parameter(torch.randn(n_marks, d_intensity) * 0.5)  # slope of tau, through softplus (> 0)
            self.b = nn.Parameter(torch.randn(n_marks, d_intensity) * 0.5)
        self.time_in = NonNegLinear(d_intensity, d_intensity, init)
        self.hist_in = nn.Linear(d_history, d_intensity)
        self.layers = nn.ModuleList(NonNegLinear(d_intensity, d_intensity, init) for _ in range(mlp_layers))
        self.out = NonNegLinear(d_intensity, 1, init)

    def project_(self) -> None:
        """Set every negative weight of the monotone network to 0 (projected gradient step)."""
        for mod in self.modules():
            if isinstance(mod, NonNegLinear):
                mod.project_()

    def dead_fraction(self) -> float:
        """Share of the monotone network's weights that are < 0 (no gradient under `clamp`; diagnostic)."""
        ws = [mod.weight.detach().flatten() for mod in self.modules() if isinstance(mod, NonNegLinear)]
        w = torch.cat(ws)
        return float((w < 0).float().mean())

    def g(self, x):
        """Scaled tanh, monotone increasing, saturating at +-c."""
        return self.c * torch.tanh(x) if self.activation == "ctanh" else self.c * torch.tanh(x / self.c)

    def _head(self, z):
        return torch.sigmoid(-self.out(z)).squeeze(-1)

    def g_inf(self, hist):
        """G(tau -> inf) [..., 1], the same for every mark: each first-layer unit with a positive weight path
        from tau saturates at c (the embedding slope softplus(a) is > 0); a unit whose weights from tau are all
        clipped to 0 does not see tau or the mark at all, so its value is its tau-free part."""
        layers = list(self.layers)  # mlp_layers >= 1 (config)
        reach = (layers[0].pos_weight() @ self.time_in.pos_weight()).sum(-1) > 0
        free = self.g(layers[0](self.time_in.bias + hist))
        z = torch.where(reach, torch.full_like(free, self.c), free)
        for layer in layers[1:]:
            z = self.g(layer(z))
        return self._head(z).unsqueeze(-1)

    def g_tau(self, hist, tau_std, marks=None):
        """G_m(tau) for hist [..., d_I] (mapped by hist_proj) and tau_std broadcastable to [..., K];
        marks: None (all M marks, K = M) or an index tensor [..., K] picking the mark-specific time weights."""
        # time_in(tau * a_m + b_m) = tau * (W a_m) + (W b_m + bias): map the per-mark vectors once, not every tau
        w = self.time_in.pos_weight()
        a, b = F.softplus(self.a) @ w.T, self.b @ w.T + self.time_in.bias
        if marks is not None:
            a, b = a[marks], b[marks]  # [..., K, d_I]
        z = tau_std.unsqueeze(-1) * a + b + hist.unsqueeze(-2)
        for layer in self.layers:
            z = self.g(layer(z))
        return self._head(z)

    def gamma_hat(self, hist, tau_std, marks=None, ginf=None):
        """Unnormalised tail Gamma_hat_m(tau) = G_m(tau) - G(inf) (removes_tail), >= 0 and non-increasing."""
        G = self.g_tau(hist, tau_std, marks)
        if not self.removes_tail:
            return G
        return (G - (self.g_inf(hist) if ginf is None else ginf)).clamp_min(0.0)

    # ---- the quantities of the method, all for history states h [..., d_h] ------------------------
    def hist_proj(self, h):
        return self.hist_in(h)

    def mass0(self, hist, tau0_std, ginf=None):
        """Gamma_hat_m(0) for all marks [..., M] and the normaliser sum_n (Gamma_hat_n(0) + eps) [..., 1]."""
        g0 = self.gamma_hat(hist, tau0_std.expand(*hist.shape[:-1], 1), ginf=ginf)
        return g0, (g0 + self.eps).sum(-1, keepdim=True)

    def mark_probs(self, hist, tau0_std):
        g0, norm = self.mass0(hist, tau0_std)
        return g0 / norm

    def gamma_star(self, hist, tau_std, tau0_std, marks=None):
        """Gamma*(m, tau): tau_std [..., K] (K = M for all marks, else `marks` [..., K])."""
        ginf = self.g_inf(hist) if self.removes_tail else None
        _, norm = self.mass0(hist, tau0_std, ginf)
        return self.gamma_hat(hist, tau_std, marks, ginf) / norm


class LogNormMix(nn.Module):
    """Baseline: LSTM history -> mark softmax and a log-normal mixture over the gap (Shchur et al. 2020),
    mark and time conditionally independent given the history (as in their marked variant)."""

    def __init__(self, n_marks: int, d_history=64, n_components=8):
        super().__init__()
        self.M, self.K = n_marks, n_components
        self.encoder = HistoryEncoder(n_marks, d_history)
        self.mark_head = nn.Linear(d_history, n_marks)
        self.mix_head = nn.Linear(d_history, 3 * n_components)

    def params(self, h):
        logits_w, mu, log_s = self.mix_head(h).chunk(3, -1)
        return torch.log_softmax(logits_w, -1), mu, log_s.clamp(-5.0, 3.0)

    def log_time_density(self, h, tau, log_mean, log_std):
        """log p(tau) with y = (log tau - log_mean) / log_std ~ mixture of normals."""
        logw, mu, log_s = self.params(h)
        y = ((torch.log(tau) - log_mean) / log_std).unsqueeze(-1)
        comp = -0.5 * ((y - mu) / log_s.exp()) ** 2 - log_s - 0.5 * math.log(2 * math.pi)
        return torch.logsumexp(logw + comp, -1) - math.log(log_std) - torch.log(tau)

    def expected_time(self, h, log_mean, log_std):
        logw, mu, log_s = self.params(h)
        expo = log_mean + log_std * mu + 0.5 * (log_std * log_s.exp()) ** 2
        return torch.exp(torch.logsumexp(logw + expo.clamp(max=80.0), -1))

    def quantiles(self, h, qs, log_mean, log_std, steps=60):
        """Time quantiles of the mixture by bisection on its closed-form CDF (in log-time)."""
        logw, mu, log_s = self.params(h)
        out = []
        for q in qs:
            lo = torch.full(mu.shape[:-1], -30.0, device=mu.device)
            hi = torch.full(mu.shape[:-1], 30.0, device=mu.device)
            for _ in range(steps):
                mid = (lo + hi) / 2
                cdf = (logw.exp() * 0.5 * (1 + torch.erf((mid.unsqueeze(-1) - mu) / (log_s.exp() * math.sqrt(2))))).sum(-1)
                lo, hi = torch.where(cdf < q, mid, lo), torch.where(cdf < q, hi, mid)
            out.append(torch.exp(log_mean + log_std * (lo + hi) / 2))
        return torch.stack(out, -1)
