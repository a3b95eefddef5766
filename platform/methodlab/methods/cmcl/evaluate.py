"""Retrieval recall with the deterministic tie rule, zero-shot accuracy, the metric matrix and BWT.

Rank of the true partner = #candidates with a strictly higher score + #with an equal score and a smaller
index; R@k counts rank < k. So constant scores give R@1 = 1/n, never 1. Zero-shot argmax ties go to the
smallest class index."""

from __future__ import annotations

import numpy as np
import torch

KS = (1, 5, 10)


def true_ranks(scores: torch.Tensor) -> torch.Tensor:
    """scores [n, n], row i's true candidate is column i -> rank of i among the row's candidates."""
    n = scores.shape[0]
    diag = scores.diagonal().unsqueeze(1)
    idx = torch.arange(n, device=scores.device)
    higher = (scores > diag).sum(1)
    tied_before = ((scores == diag) & (idx.unsqueeze(0) < idx.unsqueeze(1))).sum(1)
    return higher + tied_before


def recall_at(scores: torch.Tensor, ks=KS) -> dict[int, float]:
    r = true_ranks(scores)
    return {k: float((r < k).float().mean()) for k in ks}


def zero_shot_accuracy(emb: torch.Tensor, class_emb: torch.Tensor, labels: np.ndarray, classes: np.ndarray) -> float:
    """argmax over the given classes' text embeddings (first maximal index on ties, as torch.argmax)."""
    s = emb @ class_emb[torch.as_tensor(classes, device=class_emb.device)].T
    pred = classes[s.argmax(1).cpu().numpy()]
    return float((pred == labels).mean())


@torch.no_grad()
def evaluate_task(heads, task, cfg, text_mod: str | None = "text") -> dict[str, float]:
    """R@1/5/10 (mean of A->B and B->A, over min(eval_pool, n_test)-pair subsets) and zero-shot Acc, on the heads'
    device (the scalars are read here, at evaluation time)."""
    dt, dev = heads.W[task.mod_a].dtype, heads.W[task.mod_a].device
    xa, xb = torch.as_tensor(task.xa_test, dtype=dt, device=dev), torch.as_tensor(task.xb_test, dtype=dt, device=dev)
    ea, eb = heads(task.mod_a, xa), heads(task.mod_b, xb)
    n = len(xa)
    pool = min(cfg.eval_pool, n)
    if pool == n:
        subsets = [np.arange(n)]  # every draw would be the whole set
    else:
        rng = np.random.default_rng(cfg.seed * 7919 + n)  # fixed eval RNG
        subsets = [np.sort(rng.choice(n, size=pool, replace=False)) for _ in range(cfg.eval_subsets)]
    acc = {k: 0.0 for k in KS}
    for sub in subsets:
        sub = torch.as_tensor(sub, device=dev)
        s = ea[sub] @ eb[sub].T
        for direction in (s, s.T):
            for k, v in recall_at(direction).items():
                acc[k] += v / (2 * len(subsets))
    out = {f"r{k}": 100.0 * v for k, v in acc.items()}
    out["pool"] = float(pool)
    if task.class_bank is not None and task.y_test is not None and text_mod in heads.W:
        bank = heads(text_mod, torch.as_tensor(task.class_bank, dtype=dt, device=dev))
        classes = np.unique(task.y_test)
        accs = [zero_shot_accuracy(e, bank, task.y_test, classes)
                for m, e in ((task.mod_a, ea), (task.mod_b, eb)) if m != text_mod]
        if accs:
            out["acc"] = 100.0 * float(np.mean(accs))
    return out


def evaluate_all(heads, tasks, cfg) -> list[dict[str, float]]:
    return [evaluate_task(heads, t, cfg) for t in tasks]


def bwt(matrix: list[list[dict]], key: str, T: int) -> float | None:
    """(1/(T-1)) sum_{i<T} (R_{T,i} - R_{i,i}); matrix[j][i] = metric on task i after step j (row 0: untrained)."""
    if T < 2 or len(matrix) <= T:
        return None
    vals = [matrix[T][i][key] - matrix[i + 1][i][key] for i in range(T - 1) if key in matrix[T][i]]
    return float(np.mean(vals)) if vals else None


def summary(row: list[dict], T: int) -> dict[str, float]:
    """Mean over the T tasks seen so far of one evaluation row."""
    out = {}
    for key in ("r1", "r5", "r10", "acc"):
        vals = [row[i][key] for i in range(T) if key in row[i]]
        if vals:
            out[f"eval/{key}"] = float(np.mean(vals))
    return out


def step_metrics(matrix: list[list[dict]], T: int) -> dict[str, float]:
    """Metrics after step T: final means over seen tasks, BWT for R@1/5/10 and Acc, candidate pool size."""
    out = summary(matrix[T], T)
    for key in ("r1", "r5", "r10", "acc"):
        b = bwt(matrix, key, T)
        if b is not None:
            out[f"eval/bwt_{key}"] = b
    out["eval/pool"] = float(min(r["pool"] for r in matrix[T][:T]))
    return out


def evaluate(heads, tasks, cfg) -> dict[str, float]:
    """Mean R@1/5/10 and Acc over every task's test set for the current heads (namespaced eval/*)."""
    row = evaluate_all(heads, tasks, cfg)
    return {**summary(row, len(tasks)), "eval/pool": float(min(r["pool"] for r in row))}
