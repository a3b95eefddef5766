"""Everything a run needs from the hierarchy: relevant pairs (CSR by query), the training-pair
distributions of each stage, and the fixed validation / evaluation query sets. No network."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methodlab.core.errors import ConfigError
from methodlab.data import hierarchy as hier

EVAL_SPLIT_SEED = 0  # query subsets do not move with the run seed: every mode is scored on the same queries


@dataclass
class HRData:
    h: hier.Hierarchy
    q: torch.Tensor  # [P] query of each relevant pair, sorted by query
    d: torch.Tensor  # [P] relevant doc (the query itself or an ancestor)
    dist: torch.Tensor  # [P] upward distance
    offsets: torch.Tensor  # [m+1] CSR: pairs of query v are offsets[v]:offsets[v+1]
    sizes: torch.Tensor  # [m] |R(q)|
    cdf: dict[str, torch.Tensor]  # stage -> float64 cumulative distribution over pairs ("pretrain", "long")
    val_q: torch.Tensor
    eval_q: torch.Tensor

    @property
    def m(self) -> int:
        return self.h.n

    @property
    def s(self) -> int:
        return int(self.sizes.max())


def load_hierarchy(cfg, progress=lambda items, **_: items) -> hier.Hierarchy:
    if cfg.data == "synthetic":
        h = hier.perfect_tree(cfg.branching, cfg.depth, cfg.dag_p, seed=cfg.seed)
    elif cfg.data == "wordnet":
        h = hier.wordnet_nouns(cfg.wordnet_path, progress=progress)  # MissingSourceError (one line) when absent
    else:
        h = hier.load_edge_list(cfg.edges_path, cfg.texts_path)
    if h.n > cfg.max_nodes:
        raise ConfigError(f"hierarchy has {h.n} nodes > max_nodes={cfg.max_nodes}", field="config.max_nodes")
    return h


def pair_probabilities(q: np.ndarray, dist: np.ndarray, m: int, sizes: np.ndarray, sampling: str, gamma: float) -> np.ndarray:
    """P(pair) of the ordinary training distribution.
    geometric: q uniform; delta ~ gamma^delta over the distances present in R(q); d uniform at delta.
    uniform:   q uniform; d uniform in R(q)."""
    if sampling == "uniform":
        return 1.0 / (m * sizes[q])
    maxd = int(dist.max()) + 1
    key = q * maxd + dist
    uniq, inv, n_at = np.unique(key, return_inverse=True, return_counts=True)
    w_delta = gamma ** (uniq % maxd).astype(np.float64)  # one weight per (q, delta) present
    z = np.bincount(uniq // maxd, weights=w_delta, minlength=m)  # sum over the deltas present in R(q)
    return (w_delta / n_at)[inv] / z[q] / m


def _cdf(p: np.ndarray, device) -> torch.Tensor:
    c = np.cumsum(p)
    return torch.from_numpy(c / c[-1]).to(device)


def build_data(cfg, progress=lambda items, **_: items, device="cpu") -> HRData:
    """`progress` (RunContext.progress in a run) reports the WordNet parse and the ancestor closure. The pairs,
    sampling distributions and query sets are built on the host (numpy) and live on `device` (ctx.device in a
    run), so batches are drawn there."""
    h = load_hierarchy(cfg, progress)
    q, d, dist = hier.relevant_pairs(h, progress)
    sizes = np.bincount(q, minlength=h.n)
    p = pair_probabilities(q, dist, h.n, sizes, cfg.pair_sampling, cfg.gamma)
    long = dist >= cfg.delta_long
    cdf = {"pretrain": _cdf(p, device)}
    if long.any():  # finetune stage: the same distribution restricted to long-distance pairs
        cdf["long"] = _cdf(np.where(long, p, 0.0), device)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    perm = np.random.default_rng(EVAL_SPLIT_SEED).permutation(h.n)
    n_eval = h.n if cfg.eval_queries is None else min(cfg.eval_queries, h.n)
    eval_q = np.sort(perm[:n_eval])
    if cfg.val_queries is None:
        val_q = np.arange(h.n)
    else:  # disjoint from the evaluation queries when the hierarchy is large enough
        rest = perm[n_eval:] if h.n - n_eval >= cfg.val_queries else perm
        val_q = np.sort(rest[:cfg.val_queries])
    t = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
    return HRData(h, t(q), t(d), t(dist), t(offsets), t(sizes), cdf, t(val_q), t(eval_q))


def sample_pairs(data: HRData, stage: str, n: int, gen: torch.Generator) -> torch.Tensor:
    """Indices of n training pairs drawn (with replacement) from the stage's distribution (on the device of the
    data, which `gen` must share)."""
    u = torch.rand(n, generator=gen, dtype=torch.float64, device=data.cdf[stage].device)
    return torch.searchsorted(data.cdf[stage], u).clamp_(max=len(data.q) - 1)
