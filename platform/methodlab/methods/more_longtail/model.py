"""MORE's maths: W = W_g + B A per wrapped layer (B = 0 at init), one forward call that returns both the full
logits z_full = f(x; W_g + BA) and the general logits z_gen = f(x; W_g) (shared dropout masks, identical BN mode,
BN running stats updated by the full path only), the prior-weighted discrepancy loss, the schedules, the task
losses (CE / logit adjustment / balanced softmax / BCE / asymmetric loss) and the merge W <- W_g + BA."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ------------------------------------------------------------------------------------------- low-rank layers
class _LowRank(nn.Module):
    """Shared parts of the wrapped layers: A [r, fan_in] Kaiming-uniform, B [out, r] zeros, a `use_tail` flag."""

    def _init_lowrank(self, out_f: int, fan_in: int, rank: int, a_init: str = "kaiming", b_init_std: float = 0.0):
        self.rank = rank
        dev = self.weight.device  # beside W_g (the run's device)
        self.A = nn.Parameter(torch.empty(rank, fan_in, device=dev))
        self.B = nn.Parameter(torch.zeros(out_f, rank, device=dev))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5) if a_init == "kaiming_sqrt5" else 0.0)
        if b_init_std > 0:  # a hypothesis arm only: the paper's B = 0 makes step-0 full == general
            nn.init.normal_(self.B, std=b_init_std)
        self.use_tail = True

    def delta(self) -> torch.Tensor:
        return (self.B @ self.A).view_as(self.weight)

    def effective_weight(self) -> torch.Tensor:
        return self.weight + self.delta() if self.use_tail else self.weight


class LowRankLinear(_LowRank):
    def __init__(self, base: nn.Linear, rank: int, a_init: str = "kaiming", b_init_std: float = 0.0):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = nn.Parameter(base.weight.detach().clone())
        self.bias = None if base.bias is None else nn.Parameter(base.bias.detach().clone())
        self._init_lowrank(base.out_features, base.in_features, rank, a_init, b_init_std)

    def forward(self, x):
        return F.linear(x, self.effective_weight(), self.bias)

    def merged(self) -> nn.Linear:
        m = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=self.weight.device)
        with torch.no_grad():
            m.weight.copy_(self.weight + self.delta())
            if self.bias is not None:
                m.bias.copy_(self.bias)
        return m


class LowRankConv2d(_LowRank):
    def __init__(self, base: nn.Conv2d, rank: int, a_init: str = "kaiming", b_init_std: float = 0.0):
        super().__init__()
        self.conv_args = dict(in_channels=base.in_channels, out_channels=base.out_channels, kernel_size=base.kernel_size,
                              stride=base.stride, padding=base.padding, dilation=base.dilation, groups=base.groups)
        self.weight = nn.Parameter(base.weight.detach().clone())
        self.bias = None if base.bias is None else nn.Parameter(base.bias.detach().clone())
        fan_in = self.weight[0].numel()
        self._init_lowrank(base.out_channels, fan_in, rank, a_init, b_init_std)

    def forward(self, x):
        a = self.conv_args
        return F.conv2d(x, self.effective_weight(), self.bias, a["stride"], a["padding"], a["dilation"], a["groups"])

    def merged(self) -> nn.Conv2d:
        m = nn.Conv2d(**self.conv_args, bias=self.bias is not None, device=self.weight.device)
        with torch.no_grad():
            m.weight.copy_(self.weight + self.delta())
            if self.bias is not None:
                m.bias.copy_(self.bias)
        return m


def layer_rank(out_f: int, fan_in: int, rank: int | None, ratio: float | None) -> int:
    """rank r, or ratio * min(out, fan_in) (at least 1), never above min(out, fan_in)."""
    full = min(out_f, fan_in)
    r = rank if ratio is None else max(1, int(round(ratio * full)))
    return max(1, min(int(r), full))


def _targets(net: nn.Module, which: str) -> list[str]:
    names = [n for n, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    if which == "all":
        return names
    if which == "classifier":
        return names[-1:]
    if which == "last_stage":  # the classifier and the modules of the last top-level block that holds a layer
        tops = [n.split(".")[0] for n in names]
        last_block = tops[-2] if len(set(tops)) > 1 else tops[-1]
        return [n for n, t in zip(names, tops) if t == last_block] + names[-1:]
    raise ValueError(f"unknown layer selection {which!r}")


def wrap_lowrank(net: nn.Module, rank: int | None = 8, ratio: float | None = None, which: str = "all",
                 a_init: str = "kaiming", b_init_std: float = 0.0) -> nn.Module:
    """Replace the selected Linear / Conv2d modules of `net` (in place) by their W_g + B A versions."""
    for name in dict.fromkeys(_targets(net, which)):
        parent, _, leaf = name.rpartition(".")
        holder = net.get_submodule(parent) if parent else net
        base = getattr(holder, leaf)
        if isinstance(base, nn.Linear):
            new = LowRankLinear(base, layer_rank(base.out_features, base.in_features, rank, ratio), a_init,
                                b_init_std)
        else:
            new = LowRankConv2d(base, layer_rank(base.out_channels, base.weight[0].numel(), rank, ratio), a_init,
                                b_init_std)
        setattr(holder, leaf, new)
    return net


def lowrank_modules(net: nn.Module) -> list[_LowRank]:
    return [m for m in net.modules() if isinstance(m, _LowRank)]


def set_tail(net: nn.Module, on: bool) -> None:
    for m in lowrank_modules(net):
        m.use_tail = on


def merge_lowrank(net: nn.Module) -> nn.Module:
    """Fold B A into W (in place on `net`, which is returned): plain Linear / Conv2d, no A, B left."""
    for name, m in list(net.named_modules()):
        if isinstance(m, _LowRank):
            parent, _, leaf = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, leaf, m.merged())
    assert not lowrank_modules(net), "low-rank modules remain after the merge"
    return net


# ------------------------------------------------------------------------------------------- backbones
class Standardize(nn.Module):
    """(x - mean) / std with buffers (from the training split), so a served checkpoint takes [0, 1] pixels."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.clone().float())
        self.register_buffer("std", std.clone().float().clamp_min(1e-6))

    def forward(self, x):
        return (x - self.mean) / self.std


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: list[int], n_classes: int, dropout: float = 0.0):
        super().__init__()
        layers, d = [], in_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
            d = h
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(d, n_classes)

    def forward(self, x):
        return self.fc(self.body(x.flatten(1)))


class _Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class ResNetCifar(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs (ResNet-32: n = 5), widths 16/32/64, the LT protocols' backbone."""

    def __init__(self, in_ch: int, n_classes: int, depth: int = 32, width: int = 16):
        super().__init__()
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(in_ch, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                blocks.append(_Basic(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(1)
        out = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))


def build_backbone(kind: str, in_shape: tuple[int, ...], n_classes: int, hidden: list[int], dropout: float = 0.0,
                   depth: int = 32, width: int = 16) -> nn.Module:
    if kind == "mlp":
        return MLP(int(math.prod(in_shape)), hidden, n_classes, dropout)
    if kind == "resnet_cifar":
        return ResNetCifar(in_shape[0] if len(in_shape) == 3 else 1, n_classes, depth, width)
    raise ValueError(f"unknown backbone {kind!r}")


class TwoPathNet(nn.Module):
    """The trained module: `forward(x)` returns (z_full, z_gen) from ONE call (DDP sees one forward per backward).
    Without low-rank layers (the plain baseline) z_gen is z_full. `paths="full"` returns z_full only."""

    def __init__(self, backbone: nn.Module, standardize: Standardize):
        super().__init__()
        self.std = standardize
        self.net = backbone

    def _bn_momentum(self, frozen: bool, saved: dict | None = None) -> dict:
        out = {}
        for m in self.net.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                out[m] = m.momentum
                m.momentum = 0.0 if frozen else (saved or {}).get(m, m.momentum)
        return out

    def forward(self, x, paths: str = "both"):
        x = self.std(x)
        lowrank = lowrank_modules(self.net)
        if paths == "full" or not lowrank:
            set_tail(self.net, True)
            z = self.net(x)
            return z if paths == "full" else (z, z)
        if paths == "gen":
            set_tail(self.net, False)
            try:
                return self.net(x)
            finally:
                set_tail(self.net, True)
        rng = _get_rng(x.device)  # the general path replays the same dropout masks (the RNG of x's device)
        set_tail(self.net, True)
        z_full = self.net(x)
        after = _get_rng(x.device)
        _set_rng(x.device, rng)
        saved = self._bn_momentum(frozen=True)  # running stats: the full path's update only (same batch stats)
        set_tail(self.net, False)
        try:
            z_gen = self.net(x)
        finally:
            set_tail(self.net, True)
            self._bn_momentum(frozen=False, saved=saved)
            _set_rng(x.device, after)
        return z_full, z_gen


def _get_rng(device: torch.device) -> torch.Tensor:
    """State of the default generator that draws dropout masks on `device` (CPU or an accelerator)."""
    if device.type == "cpu":
        return torch.get_rng_state()
    return torch.get_device_module(device).get_rng_state(device)


def _set_rng(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cpu":
        torch.set_rng_state(state)
    else:
        torch.get_device_module(device).set_rng_state(state, device)


# ------------------------------------------------------------------------------------------- MORE loss
def alpha_t(t: float, total: float, amplitude: float, n_classes: int, schedule: str = "sin") -> float:
    """alpha(t) with peak A = a * C: sin(pi t/T) (paper), const, linear-up (t/T), cos-decay (0.5 (1 + cos pi t/T))."""
    peak = amplitude * n_classes
    u = min(max(t / max(total, 1e-12), 0.0), 1.0)
    if schedule == "sin":
        return peak * math.sin(math.pi * u)
    if schedule == "const":
        return peak
    if schedule == "linear":
        return peak * u
    if schedule == "cos":
        return peak * 0.5 * (1.0 + math.cos(math.pi * u))
    raise ValueError(f"unknown schedule {schedule!r}")


def discrepancy(z_full: torch.Tensor, z_gen: torch.Tensor, metric: str = "sq_l2") -> torch.Tensor:
    """Per-sample discrepancy: squared L2 of the logit difference (paper default), L1, or KL(p_full || p_gen)."""
    d = z_full - z_gen
    if metric == "sq_l2":
        return (d ** 2).sum(1)
    if metric == "l1":
        return d.abs().sum(1)
    if metric == "kl":
        lp, lq = F.log_softmax(z_full, 1), F.log_softmax(z_gen, 1)
        return (lp.exp() * (lp - lq)).sum(1)
    raise ValueError(f"unknown discrepancy {metric!r}")


def sample_weights(y: torch.Tensor, prior: torch.Tensor, multilabel: bool = False) -> torch.Tensor:
    """w(y) = pi_y (multi-class); multi-label: the mean prior of the sample's positive labels (1/C if none)."""
    if not multilabel:
        return prior[y]
    pos = y.float()
    n = pos.sum(1)
    w = (pos * prior[None]).sum(1) / n.clamp_min(1.0)
    return torch.where(n > 0, w, torch.full_like(w, 1.0 / prior.numel()))


def more_loss(z_full, z_gen, y, prior, multilabel: bool = False, metric: str = "sq_l2", weighting: str = "prior"):
    """L_MORE = mean_i w(y_i) || z_full(x_i) - z_gen(x_i) ||^2 (weighting 'uniform': w = 1/C, an ablation)."""
    disc = discrepancy(z_full, z_gen, metric)
    if weighting == "uniform":
        w = torch.full_like(disc, 1.0 / prior.numel())
    else:
        w = sample_weights(y, prior, multilabel)
    return (w * disc).mean()


def task_loss(z: torch.Tensor, y: torch.Tensor, prior: torch.Tensor, kind: str = "ce", tau: float = 1.0,
              asl_gamma_neg: float = 4.0, asl_gamma_pos: float = 0.0, asl_clip: float = 0.05) -> torch.Tensor:
    """ce; la: CE on z + tau log pi (Menon et al.); bs: CE on z + log pi (balanced softmax); bce; asl (Ridnik et al.)."""
    logp = prior.clamp_min(1e-12).log()
    if kind == "ce":
        return F.cross_entropy(z, y)
    if kind == "la":
        return F.cross_entropy(z + tau * logp, y)
    if kind == "bs":
        return F.cross_entropy(z + logp, y)
    y = y.float()
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(z, y, reduction="sum") / z.shape[0]
    if kind == "asl":
        p = torch.sigmoid(z)
        p_neg = (p - asl_clip).clamp(min=0) if asl_clip > 0 else p
        lpos = y * torch.log(p.clamp(min=1e-8)) * (1 - p) ** asl_gamma_pos
        lneg = (1 - y) * torch.log((1 - p_neg).clamp(min=1e-8)) * p_neg ** asl_gamma_neg
        return -(lpos + lneg).sum() / z.shape[0]
    raise ValueError(f"unknown task loss {kind!r}")
