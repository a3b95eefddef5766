"""Open-set metrics on the target test nodes (K+1 label space, K = unknown) and the threshold baseline's
tau selection on the labelled target validation split."""

from __future__ import annotations

import numpy as np
import torch

TAU_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 ... 0.95


def open_set_metrics(pred, y, k: int, micro_known: bool = False) -> dict:
    """acc over all nodes; a_k = known accuracy (class-averaged, or micro); a_u = unknown recall;
    H = 2 a_k a_u / (a_k + a_u)."""
    pred, y = np.asarray(pred), np.asarray(y)
    acc = float((pred == y).mean()) if len(y) else 0.0
    known = y < k
    per_class = [float((pred[y == c] == c).mean()) for c in range(k) if (y == c).any()]
    a_k_macro = float(np.mean(per_class)) if per_class else 0.0
    a_k_micro = float((pred[known] == y[known]).mean()) if known.any() else 0.0
    a_k = a_k_micro if micro_known else a_k_macro
    a_u = float((pred[~known] == k).mean()) if (~known).any() else 0.0
    h = 2 * a_k * a_u / (a_k + a_u) if a_k + a_u > 0 else 0.0
    return {"eval/acc": acc, "eval/h_score": h, "eval/acc_known": a_k, "eval/acc_unknown": a_u,
            "eval/acc_known_micro": a_k_micro, "eval/pred_unknown_rate": float((pred == k).mean()) if len(pred) else 0.0}


def threshold_predict(probs_k: torch.Tensor, tau: float) -> torch.Tensor:
    """K-way softmax -> label K (unknown) where the max probability is below tau."""
    conf, arg = probs_k.max(-1)
    return torch.where(conf < tau, torch.full_like(arg, probs_k.shape[1]), arg)


def choose_tau(probs_k, y, val_idx) -> tuple[float, float]:
    """Grid tau maximising H-score on the labelled target validation nodes (optimistic: uses target labels)."""
    k = probs_k.shape[1]
    best = (TAU_GRID[0], -1.0)
    for tau in TAU_GRID:
        h = open_set_metrics(threshold_predict(probs_k[val_idx], tau).cpu().numpy(), y[val_idx].cpu().numpy(), k)["eval/h_score"]
        if h > best[1]:
            best = (tau, h)
    return best
