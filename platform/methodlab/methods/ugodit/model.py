"""Networks of UGoDIT: the DIP skip net split into SkipEncoder + SkipDecoder (natural images) and the U-Net split
into UNetEncoder + UNetDecoder (MRI, 2 channels = real/imag). Every BatchNorm normalises with batch statistics
(as DIP with batch size 1); a frozen encoder's BN does not touch its running buffers, so its whole state_dict
stays bit-identical. Init: conv weights N(0, 0.02), BN weight N(1, 0.02), biases 0."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class BatchStatNorm(nn.BatchNorm2d):
    """BatchNorm that always normalises with the batch's statistics; updates running buffers only while
    `update_buffers` (False for a frozen encoder)."""

    update_buffers: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        upd = self.update_buffers
        if upd and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(x, self.running_mean if upd else None, self.running_var if upd else None,
                            self.weight, self.bias, True, self.momentum, self.eps)


def init_weights(module: nn.Module, generator: torch.Generator | None = None) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            with torch.no_grad():
                m.weight.normal_(0.0, 0.02, generator=generator)
                if m.bias is not None:
                    m.bias.zero_()
        elif isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.normal_(1.0, 0.02, generator=generator)
                m.bias.zero_()


def freeze(module: nn.Module, frozen: bool = True) -> None:
    for p in module.parameters():
        p.requires_grad_(not frozen)
    for m in module.modules():
        if isinstance(m, BatchStatNorm):
            m.update_buffers = not frozen


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Module:
    pad = (k - 1) // 2
    layers = [nn.ReflectionPad2d(pad)] if pad else []
    return nn.Sequential(*layers, nn.Conv2d(cin, cout, k, stride=stride))


def _cbl(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(_conv(cin, cout, k, stride), BatchStatNorm(cout), nn.LeakyReLU(0.2))


class SkipEncoder(nn.Module):
    """Per scale: skip = conv1x1 -> BN -> LReLU (skip_ch) of the scale's input; down = conv3x3/2 -> BN -> LReLU ->
    conv3x3 -> BN -> LReLU. Returns (deepest feature, [skip_0 .. skip_{S-1}])."""

    def __init__(self, in_ch: int = 1, ch: int = 128, scales: int = 5, skip_ch: int = 4):
        super().__init__()
        self.scales, self.skip_ch = scales, skip_ch
        self.skip = nn.ModuleList([_cbl(in_ch if s == 0 else ch, skip_ch, 1) for s in range(scales)]) if skip_ch else None
        self.down = nn.ModuleList([nn.Sequential(_cbl(in_ch if s == 0 else ch, ch, 3, 2), _cbl(ch, ch, 3))
                                   for s in range(scales)])

    def forward(self, z: torch.Tensor):
        skips, h = [], z
        for s in range(self.scales):
            skips.append(self.skip[s](h) if self.skip is not None else h[:, :0])
            h = self.down[s](h)
        return h, skips


class SkipDecoder(nn.Module):
    """Deepest first: bilinear x2 -> concat skip -> conv3x3 -> BN -> LReLU -> conv1x1 -> BN -> LReLU; final conv1x1
    to out_ch + sigmoid."""

    def __init__(self, ch: int = 128, scales: int = 5, skip_ch: int = 4, out_ch: int = 1):
        super().__init__()
        self.scales = scales
        self.up = nn.ModuleList([nn.Sequential(_cbl(ch + skip_ch, ch, 3), _cbl(ch, ch, 1)) for _ in range(scales)])
        self.out = nn.Conv2d(ch, out_ch, 1)

    def forward(self, feats) -> torch.Tensor:
        h, skips = feats
        for s in reversed(range(self.scales)):
            h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            h = self.up[s](torch.cat([h, skips[s]], 1))
        return torch.sigmoid(self.out(h))


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, mid: int | None = None):
        mid = mid or cout
        super().__init__(nn.Conv2d(cin, mid, 3, padding=1, bias=False), BatchStatNorm(mid), nn.ReLU(inplace=True),
                         nn.Conv2d(mid, cout, 3, padding=1, bias=False), BatchStatNorm(cout), nn.ReLU(inplace=True))


class UNetEncoder(nn.Module):
    """DoubleConv(2 -> w0), Down(w0 -> w1), Down(w1 -> w2), Down(w2 -> w3) (max-pool + DoubleConv)."""

    def __init__(self, in_ch: int = 2, widths=(64, 128, 256, 256)):
        super().__init__()
        w0, w1, w2, w3 = widths
        self.inc = DoubleConv(in_ch, w0)
        self.downs = nn.ModuleList([DoubleConv(w0, w1), DoubleConv(w1, w2), DoubleConv(w2, w3)])

    def forward(self, z: torch.Tensor):
        x = self.inc(z)
        skips = [x]
        for d in self.downs:
            x = d(F.max_pool2d(x, 2))
            skips.append(x)
        return skips[-1], skips[:-1]


class UNetDecoder(nn.Module):
    """Up(w3+w2 -> w1), Up(2 w1 -> w0), Up(2 w0 -> w0) with bilinear upsampling (DoubleConv mid = in/2),
    OutConv(w0 -> 2). No output non-linearity (k-space scale factor handles the intensity)."""

    def __init__(self, widths=(64, 128, 256, 256), out_ch: int = 2):
        super().__init__()
        w0, w1, w2, w3 = widths
        ins, outs = [w3 + w2, w1 + w1, w0 + w0], [w1, w0, w0]
        self.ups = nn.ModuleList([DoubleConv(i, o, i // 2) for i, o in zip(ins, outs)])
        self.out = nn.Conv2d(w0, out_ch, 1)

    def forward(self, feats) -> torch.Tensor:
        x, skips = feats
        for up, skip in zip(self.ups, reversed(skips)):
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=True)
            x = up(torch.cat([skip, x], 1))
        return self.out(x)


def multiple_of(cfg) -> int:
    return 8 if cfg.task == "mri_multicoil" else 2 ** cfg.scales


def make_encoder(cfg, generator: torch.Generator) -> nn.Module:
    """The encoder, built on the generator's device and initialised from it (the init draws happen there)."""
    with torch.device(generator.device):
        e = UNetEncoder(2, tuple(cfg.unet_widths)) if cfg.task == "mri_multicoil" else \
            SkipEncoder(1, cfg.channels, cfg.scales, cfg.skip_channels)
    init_weights(e, generator)
    return e


def make_decoder(cfg, generator: torch.Generator) -> nn.Module:
    """A decoder, built on the generator's device and initialised from it."""
    with torch.device(generator.device):
        d = UNetDecoder(tuple(cfg.unet_widths), 2) if cfg.task == "mri_multicoil" else \
            SkipDecoder(cfg.channels, cfg.scales, cfg.skip_channels, 1)
    init_weights(d, generator)
    return d


def pad_to(z: torch.Tensor, multiple: int) -> tuple[torch.Tensor, tuple[int, int, int, int]]:
    """Reflect-pad [B, C, H, W] to sides divisible by `multiple` (28 -> 32: 2 px per side)."""
    h, w = z.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    pads = (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2)
    if ph or pw:
        mode = "reflect" if min(h, w) > max(pads) else "replicate"
        z = F.pad(z, pads, mode=mode)
    return z, pads


def crop(x: torch.Tensor, pads: tuple[int, int, int, int]) -> torch.Tensor:
    l, r, t, b = pads
    h, w = x.shape[-2:]
    return x[..., t:h - b, l:w - r]


def run_net(encoder: nn.Module, decoders: list[nn.Module], z: torch.Tensor, multiple: int) -> torch.Tensor:
    """x_i = crop(D_i(E(pad(z))_i)) with one batched encoder pass over z [M, C, H, W]; len(decoders) == M."""
    zp, pads = pad_to(z, multiple)
    deep, skips = encoder(zp)
    outs = [d((deep[i:i + 1], [s[i:i + 1] for s in skips])) for i, d in enumerate(decoders)]
    return crop(torch.cat(outs, 0), pads)
