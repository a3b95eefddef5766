"""The spec's deterministic exactness experiment: old inputs span 8 of 64 dims, old partner outputs span
8 dims; after 50 SGD updates (lr 0.1, no weight decay, float64) on a new pair sharing modality `vision`,
DNS must leave every old similarity score unchanged (max|ds| <= 1e-4 max|s|) while Vanilla moves them.
Runs through the same train_step as every job."""

from __future__ import annotations

import numpy as np
import torch

from methodlab.data.cmcl_synthetic import PairSet
from methodlab.methods.cmcl.config import Config
from methodlab.methods.cmcl.model import EWC, DNSState, Heads
from methodlab.methods.cmcl.train import train_step

D, RANK, N_OLD, BATCH, UPDATES = 64, 8, 256, 32, 50


def _low_rank(rng, n: int, rank: int) -> np.ndarray:
    U = np.linalg.qr(rng.standard_normal((D, rank)))[0]
    x = rng.standard_normal((n, rank)) @ U.T
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # still inside span(U)


def _full(rng, n: int) -> np.ndarray:
    x = rng.standard_normal((n, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def tasks(seed: int = 0, shared: str = "vision") -> tuple[PairSet, PairSet]:
    """Old pair (vision, text), low rank on both sides; new pair (shared, audio), full rank, 50 x 32 pairs."""
    rng = np.random.default_rng(seed)
    old = PairSet("old", "vision", "text", _low_rank(rng, N_OLD, RANK), _low_rank(rng, N_OLD, RANK),
                  _low_rank(rng, 16, RANK), _low_rank(rng, 16, RANK))
    new_a, new_b = _full(rng, UPDATES * BATCH), _full(rng, UPDATES * BATCH)
    a, b = (shared, "audio") if shared == "vision" else ("text", "audio")
    new = PairSet("new", a, b, new_a, new_b, new_a[:16], new_b[:16])
    return old, new


def config(method: str = "dns", **kw) -> Config:
    base = dict(method=method, optimizer="sgd", lr=0.1, weight_decay=0.0, momentum=0.0, batch_size=BATCH,
                epochs=1, lr_schedule="constant", lambda_min=1e-6, lambda_partner=1e-6, dtype="float64",
                data="synthetic")
    base.update(kw)
    return Config(**base)


def old_scores(heads: Heads, old: PairSet) -> torch.Tensor:
    xa = torch.as_tensor(old.xa_train, dtype=torch.float64)
    xb = torch.as_tensor(old.xb_train, dtype=torch.float64)
    return heads("vision", xa) @ heads("text", xb).T


def run(method: str = "dns", seed: int = 0, shared: str = "vision", **kw) -> dict:
    """Train the old pair, then the new pair with `method`; returns max|ds| / max|s| on all old pairs."""
    cfg = config(method, seed=seed, **kw)
    old, new = tasks(seed, shared)
    mods = ["vision", "text", "audio"]
    heads = Heads(mods, D, torch.float64)
    for m in mods:
        heads.b[m].requires_grad_(cfg.train_bias)
    state, ewc = DNSState(mods, D), EWC()
    train_step(heads, old, 1, cfg, state, ewc)
    with torch.no_grad():
        s0 = old_scores(heads, old)
    info = train_step(heads, new, 2, cfg, state, ewc)
    with torch.no_grad():
        s1 = old_scores(heads, old)
    ratio = float((s1 - s0).abs().max() / s0.abs().max())
    return {"ratio": ratio, "loss_drop": info["train/loss_drop"],
            "rank_in": info.get(f"dns/rank_in_{shared}"), "rank_partner": info.get(f"dns/rank_partner_{shared}")}
