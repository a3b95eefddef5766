"""Networks: grok's decoder-only transformer for `a op b = c`, and the digits MLP.

Both return (logits, phi) where phi are the penultimate features that the readout W (no bias)
maps to logits at the measured position: the relative-flatness and collapse measures use exactly
that W and phi.
"""

from __future__ import annotations

import math

import torch
from torch import nn

ANSWER_POS = 4  # input `<eos> a op b = c`: position 4 ("=") predicts c, position 5 (c) predicts <eos>


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class DecoderBlock(nn.Module):
    """Causal multi-head self-attention and a ReLU FFN, each with a residual and LayerNorm
    (post-LN as in grok, or pre-LN). Written out so the readable maths is the code that runs."""

    def __init__(self, d_model: int, n_heads: int, ffn_mult: int, dropout: float, norm_first: bool):
        super().__init__()
        self.n_heads, self.norm_first, self.dropout = n_heads, norm_first, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn_mult * d_model), nn.ReLU(), nn.Linear(ffn_mult * d_model, d_model))
        self.norm_attn, self.norm_ffn = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def attend(self, x: torch.Tensor, q_from: int) -> torch.Tensor:
        b, t, d = x.shape
        h = d // self.n_heads
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, h).permute(2, 0, 3, 1, 4)
        drop = self.dropout if self.training else 0.0
        if q_from == 0:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        else:  # queries of the last positions only, still attending causally to every earlier key
            allowed = torch.arange(t, device=x.device)[None, :] <= torch.arange(q_from, t, device=x.device)[:, None]
            y = nn.functional.scaled_dot_product_attention(q[:, :, q_from:], k, v, attn_mask=allowed, dropout_p=drop)
        return self.proj(y.transpose(1, 2).reshape(b, t - q_from, d))

    def forward(self, x: torch.Tensor, q_from: int = 0) -> torch.Tensor:
        """Outputs for positions q_from.. only: the last block skips positions nobody reads."""
        res = x[:, q_from:]
        if self.norm_first:
            y = res + self.attend(self.norm_attn(x), q_from)
            return y + self.ffn(self.norm_ffn(y))
        y = self.norm_attn(res + self.attend(x, q_from))
        return self.norm_ffn(y + self.ffn(y))


class GrokTransformer(nn.Module):
    """Post-LayerNorm decoder blocks (causal self-attention + ReLU FFN), readout without bias."""

    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, ffn_mult: int, dropout: float,
                 norm_first: bool = False, max_len: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pos", sinusoidal_positions(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, n_heads, ffn_mult, dropout, norm_first) for _ in range(n_layers))
        self.readout = nn.Linear(d_model, vocab, bias=False)

    @property
    def W(self) -> torch.Tensor:
        return self.readout.weight

    def forward(self, tokens: torch.Tensor, from_pos: int = ANSWER_POS) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, T] -> logits [B, T - from_pos, V], final hidden states [B, T - from_pos, d].

        Only the right-hand side is trained and measured, so by default only positions from
        ANSWER_POS on are computed in the last block (earlier blocks need every position)."""
        t = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:t]
        for i, block in enumerate(self.blocks):
            h = block(h, from_pos if i == len(self.blocks) - 1 else 0)
        return self.readout(h), h


class DigitsMLP(nn.Module):
    """64 -> h -> h -> 10 with ReLU; penultimate = h-dimensional features."""

    def __init__(self, hidden: int = 256, n_in: int = 64, n_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.readout = nn.Linear(hidden, n_classes, bias=False)

    @property
    def W(self) -> torch.Tensor:
        return self.readout.weight

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        phi = self.body(x)
        return self.readout(phi), phi


def build_model(cfg, vocab_size: int | None = None) -> nn.Module:
    if cfg.task == "digits":
        return DigitsMLP(cfg.digits_hidden)
    return GrokTransformer(vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ffn_mult, cfg.dropout, cfg.norm_first)
