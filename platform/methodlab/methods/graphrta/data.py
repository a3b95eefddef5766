"""Source / target graphs of an open-set domain pair, relabelled to the K+1 label space, plus the source
train/val/test split (80/10/10 [S]), the labelled target validation split (20 %, stratified) and the
candidate set of edge flips for graph reprogramming. Built from methodlab.data sources only (no network)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Graph:
    x: torch.Tensor  # [n, f] float32
    edge_index: torch.Tensor  # [2, E] int64, both directions
    y: torch.Tensor  # [n] in 0..K (K = unknown; the source has no K)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])


@dataclass
class DomainPair:
    source: Graph
    target: Graph
    n_known: int
    src_train: torch.Tensor  # index tensors
    src_val: torch.Tensor
    tgt_val: torch.Tensor  # labelled target validation split (threshold baseline only)
    tgt_test: torch.Tensor  # every method is scored here


def _raw(cfg, data_seed: int, progress) -> dict:
    if cfg.data == "csbm":
        from methodlab.data.graphrta_csbm import csbm_pair

        return csbm_pair(data_seed, cfg.n_source, cfg.n_target, cfg.n_features, cfg.n_classes, cfg.n_known,
                         cfg.deg_source, cfg.deg_target, cfg.homophily_source, cfg.homophily_target,
                         cfg.shift_strength, cfg.shift_bias, cfg.mean_scale, cfg.unknown_noise, cfg.unknown_fraction,
                         progress=progress)
    if cfg.data == "wordnet":
        from methodlab.data.graphrta_wordnet import wordnet_open_set

        return wordnet_open_set(cfg.wordnet_path, cfg.known_lexnames, cfg.unknown_lexnames, cfg.per_class,
                                cfg.vocab_size, cfg.wordnet_target_view)
    from methodlab.data import graphrta_loaders as L

    if cfg.data == "citation":
        s, t = L.load_citation(cfg.data_dir, cfg.source_name), L.load_citation(cfg.data_dir, cfg.target_name)
    elif cfg.data == "webkb":
        s = L.load_webkb(f"{cfg.data_dir}/{cfg.source_name}" if cfg.source_name else cfg.data_dir)
        t = L.load_webkb(f"{cfg.data_dir}/{cfg.target_name}")
    elif cfg.data == "npz":
        s, t = L.load_npz(cfg.source_name), L.load_npz(cfg.target_name)
    else:
        s = L.load_ogbn_arxiv(cfg.data_dir, cfg.source_years)
        t = L.load_ogbn_arxiv(cfg.data_dir, cfg.target_years)
    return open_set_from_files(s, t, cfg.known_classes)


def open_set_from_files(s, t, known_classes):
    """Source keeps only the known classes; known ids are mapped to 0..K-1 in the order given."""
    n_cls = int(max(s[1].max(), t[1].max())) + 1
    known = list(known_classes) if known_classes else list(range(math.ceil(n_cls / 2)))
    if s[0].shape[1] != t[0].shape[1]:
        raise ValueError(f"source has {s[0].shape[1]} features, target {t[0].shape[1]}: the domains need one feature space")
    order = known + [c for c in range(n_cls) if c not in known]
    relabel = np.empty(n_cls, dtype=np.int64)
    relabel[order] = np.arange(n_cls)
    xs, ys, es = s
    keep = np.flatnonzero(np.isin(ys, known))
    remap = np.full(len(ys), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    es = remap[es]
    es = es[:, (es[0] >= 0) & (es[1] >= 0)]
    return {"source": (xs[keep], relabel[ys[keep]], es), "target": (t[0], relabel[t[1]], t[2]),
            "n_known": len(known), "n_classes": n_cls}


def stratified_split(y: np.ndarray, frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """frac of every class (at least one node when the class has two or more) -> first array."""
    a, b = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(frac * len(idx))) if frac > 0 else 0
        k = min(max(k, 1 if frac > 0 and len(idx) > 1 else 0), len(idx))
        a.append(idx[:k])
        b.append(idx[k:])
    return np.sort(np.concatenate(a)), np.sort(np.concatenate(b))


def build_pair(cfg, progress=lambda items, **_: items, device="cpu") -> DomainPair:
    """`progress` (RunContext.progress in a run) reports the 10^6-node generation step by step. The graphs are
    generated on the host (numpy) and land once on `device` (ctx.device in a run): features, edge indices,
    labels and the split indices."""
    data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    raw = _raw(cfg, data_seed, progress)
    k = raw["n_known"]
    xs, ys, es = raw["source"]
    xt, yt, et = raw["target"]
    yt = np.where(yt >= k, k, yt)  # every target-private class is "unknown" = K
    rng = np.random.default_rng(data_seed + 7919)
    perm = rng.permutation(len(ys))
    n_tr, n_va = int(0.8 * len(ys)), int(0.1 * len(ys))
    tgt_val, tgt_test = stratified_split(yt, cfg.target_val_frac, rng)
    t = lambda a, dt=torch.long: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=device)  # noqa: E731
    return DomainPair(Graph(t(xs, torch.float32), t(es), t(ys)), Graph(t(xt, torch.float32), t(et), t(yt)), k,
                      t(np.sort(perm[:n_tr])), t(np.sort(perm[n_tr:n_tr + n_va])), t(tgt_val), t(tgt_test))


def flip_candidates(edge_index: torch.Tensor, n: int, nonedge_ratio: float, gen: torch.Generator):
    """Undirected candidate pairs for edge flips: all existing edges (u < v) + ratio x |E| sampled non-edges.
    Returns (pairs [2, m] with u < v, exists [m] bool). O(|E|) memory: non-edges are drawn by rejection, on the
    device of edge_index (`gen` lives there too)."""
    dev = edge_index.device
    u, v = edge_index
    und = edge_index[:, u < v]
    m_e = und.shape[1]
    want = int(round(nonedge_ratio * m_e))
    existing = und[0] * n + und[1]
    picked = torch.empty(0, dtype=torch.long, device=dev)
    for _ in range(20):  # rejection rounds; on sparse graphs the first round almost always suffices
        if picked.numel() >= want or n < 2:
            break
        draw = max(64, int(1.2 * (want - picked.numel())) + 16)
        a = torch.randint(0, n, (draw,), generator=gen, device=dev)
        b = torch.randint(0, n, (draw,), generator=gen, device=dev)
        lo, hi = torch.minimum(a, b), torch.maximum(a, b)
        key = lo * n + hi
        key = key[(lo != hi) & ~torch.isin(key, existing) & ~torch.isin(key, picked)]
        picked = torch.cat([picked, torch.unique(key)])
    picked = picked[:want]
    non = torch.stack([picked // n, picked % n])
    pairs = torch.cat([und, non], 1)
    exists = torch.cat([torch.ones(m_e, dtype=torch.bool, device=dev), torch.zeros(non.shape[1], dtype=torch.bool, device=dev)])
    return pairs, exists
