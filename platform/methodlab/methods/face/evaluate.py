"""Ranking metrics (full ranking, training items masked), descriptor precision, reconstruction cosine and
descriptor-text profile retrieval (Claim 4)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.methods.face.backbone import PROMPTS


def group(pairs: np.ndarray, n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    for u, i in pairs:
        out[int(u)].append(int(i))
    return out


@torch.no_grad()
def rank_metrics(scores: torch.Tensor, train: np.ndarray, target: np.ndarray, ks=(5, 10, 20), prefix="eval") -> dict:
    """Recall@k = hits / |target items| and NDCG@k, averaged over users with targets."""
    n_users = scores.shape[0]
    scores = scores.clone()
    dev = scores.device
    scores[torch.as_tensor(train[:, 0], device=dev), torch.as_tensor(train[:, 1], device=dev)] = -torch.inf
    tgt = group(target, n_users)
    users = [u for u in range(n_users) if tgt[u]]
    K = max(ks)
    top = scores[torch.as_tensor(users, dtype=torch.long, device=dev)].topk(K, dim=1).indices.cpu().numpy()
    disc = 1.0 / np.log2(np.arange(2, K + 2))
    out = {f"{prefix}/recall@{k}": 0.0 for k in ks} | {f"{prefix}/ndcg@{k}": 0.0 for k in ks}
    for r, u in enumerate(users):
        s = set(tgt[u])
        hit = np.array([int(j) in s for j in top[r]], dtype=float)
        for k in ks:
            out[f"{prefix}/recall@{k}"] += hit[:k].sum() / len(s)
            out[f"{prefix}/ndcg@{k}"] += (hit[:k] * disc[:k]).sum() / disc[: min(len(s), k)].sum()
    return {k: v / max(1, len(users)) for k, v in out.items()}


def popularity_scores(train: np.ndarray, n_users: int, n_items: int) -> torch.Tensor:
    cnt = torch.bincount(torch.as_tensor(train[:, 1], device="cpu"), minlength=n_items).float()  # host baseline
    return cnt.expand(n_users, -1)


def ground_truth(rec, kind: str) -> list[set[int]]:
    conc = rec.user_concepts if kind == "user" else rec.item_concepts
    return [set(w for c in cs for w in rec.concept_words[c]) for cs in conc]


def precision(desc: np.ndarray, truth: list[set[int]]) -> float:
    W = desc.shape[1]
    return float(np.mean([len(set(d.tolist()) & g) / W for d, g in zip(desc, truth)]))


def random_descriptors(n: int, W: int, V: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(V, size=W, replace=False) for _ in range(n)]) if n else np.zeros((0, W), np.int64)


def recon_cosine(x: torch.Tensor, x_hat: torch.Tensor) -> tuple[float, float]:
    """Mean cosine(x_hat, x) and that of the constant predictor x_hat = mean of x."""
    c = F.cosine_similarity(x_hat, x, dim=1).mean().item()
    const = F.cosine_similarity(x.mean(0, keepdim=True).expand_as(x), x, dim=1).mean().item()
    return c, const


@torch.no_grad()
def text_retrieval(bb, words: list[str], desc: np.ndarray, profile_emb: torch.Tensor, noun: str, n_query: int,
                   n_cand: int, seed: int, kind: str = "item") -> float:
    """Hit@10: encode "prompt + descriptor words joined by ', '" and rank the entity's own profile among
    n_cand candidates (its own + others, fixed by seed) by cosine."""
    n = len(desc)
    rng = np.random.default_rng(seed)
    q = rng.choice(n, size=min(n_query, n), replace=False)
    prompt = PROMPTS[kind].format(noun=noun)
    texts = [prompt + " " + ", ".join(words[j] for j in desc[i]) for i in q]
    c = bb.encode_texts(texts)
    hits = 0
    for r, i in enumerate(q):
        others = rng.choice(np.delete(np.arange(n), i), size=min(n_cand - 1, n - 1), replace=False)
        cand = np.r_[i, others]
        s = profile_emb[torch.as_tensor(cand, device=profile_emb.device)] @ c[r]
        rank = int((s[1:] > s[0]).sum())
        hits += rank < 10
    return hits / len(q)
