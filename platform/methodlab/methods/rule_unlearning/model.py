"""The tiny decoder-only GPT, batch packing (left-padded prompts, right-padded responses), sampling / greedy
generation, and per-token log-probabilities of response tokens."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x, mask):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Pre-LN decoder-only transformer with learned positions counted from the first non-pad token."""

    def __init__(self, vocab_size: int, n_layers: int = 4, d_model: int = 128, n_heads: int = 4, context: int = 48,
                 pad_id: int = 0):
        super().__init__()
        self.context, self.pad_id = context, pad_id
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        valid = ids != self.pad_id
        pos = (valid.long().cumsum(1) - 1).clamp(0, self.context - 1)
        causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
        mask = causal[None] & valid[:, None, :]
        mask = mask | torch.eye(T, dtype=torch.bool, device=ids.device)[None]  # no empty rows (pads)
        x = self.tok(ids) + self.pos(pos)
        for b in self.blocks:
            x = b(x, mask[:, None])
        return self.head(self.ln(x))


def build_model(cfg, vocab_size: int, pad_id: int = 0, device=None) -> nn.Module:
    """The tiny GPT (random init, its parameters created on `device`; device None: CPU or the surrounding
    `with ctx.init_module():`). Backbone smollm2 is train._new_model's (hf_backbone.load_smollm2)."""
    if device is None:
        return TinyGPT(vocab_size, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.context, pad_id)
    with torch.device(device):
        return TinyGPT(vocab_size, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.context, pad_id)


def device_of(model: nn.Module) -> torch.device:
    """The device of a model's parameters (where its inputs are built)."""
    return next(model.parameters()).device


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for n, p in model.named_parameters())


def pack(prompts: list[list[int]], responses: list[list[int]], pad: int,
         device=None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """ids [B, P + R]: prompts left-padded to P, responses right-padded to R; mask [B, P + R] marks response
    tokens; P is returned (responses start there). Packed on the host, moved to `device` (None: CPU) once."""
    P = max(len(p) for p in prompts)
    R = max(1, max(len(r) for r in responses))
    ids = torch.full((len(prompts), P + R), pad, dtype=torch.long, device="cpu")
    mask = torch.zeros(len(prompts), P + R, dtype=torch.bool, device="cpu")
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, P - len(p):P] = torch.tensor(p, dtype=torch.long, device="cpu")
        if r:
            ids[i, P:P + len(r)] = torch.tensor(r, dtype=torch.long, device="cpu")
            mask[i, P:P + len(r)] = True
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask, P


def token_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t >= 1, as [B, T] with column 0 = 0."""
    logits = model(ids)[:, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


def lm_loss(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the masked target tokens."""
    lp = token_logprobs(model, ids)
    return -(lp * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def next_tokens(logits: torch.Tensor, done: torch.Tensor, pad: int, temperature: float,
                generator: torch.Generator | None) -> torch.Tensor:
    """One decoding step shared by both generators: never emit pad; greedy at temperature 0, else sample;
    rows already finished get pad."""
    logits = logits.float()
    logits[:, pad] = -math.inf
    if temperature <= 0:
        nxt = logits.argmax(-1)
    else:
        nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
    return torch.where(done, torch.full_like(nxt, pad), nxt)


def generate(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, temperature: float = 0.0,
             generator: torch.Generator | None = None, batch: int = 512) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Greedy (temperature 0) or sampled continuations. Returns (ids [B, P + max_new], response mask, P): the
    response mask covers generated tokens up to and including the first <eos>; later positions are pad.
    A model with its own `generate_ids` (the KV-cached SmolLM2 wrapper) is delegated to, same contract."""
    if hasattr(model, "generate_ids"):
        return model.generate_ids(prompts, max_new, eos, pad, temperature, generator)
    was = model.training
    model.eval()
    dev = device_of(model)
    P = max(len(p) for p in prompts)
    ids, _, _ = pack(prompts, [[pad] * max_new] * len(prompts), pad, dev)  # prompts left-padded, moved once
    done = torch.zeros(len(prompts), dtype=torch.bool, device=dev)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for t in range(max_new):
        cur = ids[:, :P + t]
        logits = torch.cat([model(cur[s:s + batch])[:, -1] for s in range(0, len(prompts), batch)])
        nxt = next_tokens(logits, done, pad, temperature, generator)
        ids[:, P + t] = nxt
        mask[:, P + t] = ~done
        done = done | (nxt == eos)
        if bool(done.all()):
            break
    model.train(was)
    return ids, mask, P


def _tied(model: nn.Module) -> set[str]:
    return set(getattr(model, "tied_keys", {"head.weight"}))


def weights(model: nn.Module, prefix: str = "") -> dict:
    """state_dict without the tied output head (safetensors refuses shared storage; loading re-ties it)."""
    tied = _tied(model)
    return {prefix + k: v for k, v in model.state_dict().items() if k not in tied}


def load_weights(model: nn.Module, w: dict) -> nn.Module:
    tied = _tied(model)
    missing, unexpected = model.load_state_dict({k: v for k, v in w.items() if k not in tied}, strict=False)
    if unexpected or set(missing) - tied:
        raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
    return model
