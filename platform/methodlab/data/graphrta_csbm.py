"""Contextual stochastic block model (CSBM) with a controllable domain shift and unseen classes.

Plain numpy, O(n + E) time and memory at every size, so a 200-node smoke graph and a 10^6-node benchmark graph
follow one law (PyG's `stochastic_blockmodel_graph` enumerates all n(n-1)/2 pairs and is used only as a test
reference).

    sbm_edges(labels, avg_degree, homophily, rng)          -> undirected edge_index [2, 2m] (both directions)
    class_means(n_classes, n_known, f, rng, ...)            -> [C, f] means (unknown means between two known ones)
    csbm_domain(n, classes, means, avg_degree, homophily, rng, shift=None) -> (x [n,f] float32, y [n], edge_index)
    csbm_pair(...)                                          -> dict with source / target graphs
"""

from __future__ import annotations

import numpy as np


def block_probabilities(n: int, n_blocks: int, avg_degree: float, homophily: float) -> tuple[float, float]:
    """p_in, p_out such that a node has on average h*d same-block and (1-h)*d other-block neighbours."""
    size = n / n_blocks
    p_in = homophily * avg_degree / max(size, 1.0)
    p_out = (1.0 - homophily) * avg_degree / max(n - size, 1.0)
    return min(p_in, 1.0), min(p_out, 1.0)


def _no_progress(items, **_):
    return items


def sbm_edges(labels: np.ndarray, avg_degree: float, homophily: float, rng: np.random.Generator,
              progress=_no_progress) -> np.ndarray:
    """Block-pair edge counts m_ab ~ Binomial(N_ab, p_ab), endpoints uniform in block a x block b; self-loops
    dropped, pairs canonicalised (min, max), deduplicated, then symmetrised. Returns int64 [2, 2m].
    `progress(iterable, total=, desc=, unit=)` wraps the loop over blocks (RunContext.progress in a run)."""
    labels = np.asarray(labels)
    n = len(labels)
    present = np.unique(labels)
    p_in, p_out = block_probabilities(n, len(present), avg_degree, homophily)
    members = [np.flatnonzero(labels == c) for c in present]
    us, vs = [], []
    for a in progress(range(len(present)), total=len(present), desc=f"sampling SBM edges of {n:,} nodes", unit="block"):
        for b in range(a, len(present)):
            na, nb = len(members[a]), len(members[b])
            pairs = na * (na - 1) // 2 if a == b else na * nb
            if pairs == 0:
                continue
            m = int(rng.binomial(np.int64(pairs), p_in if a == b else p_out))
            if m == 0:
                continue
            us.append(members[a][rng.integers(0, na, m)])
            vs.append(members[b][rng.integers(0, nb, m)])
    if not us:
        return np.zeros((2, 0), dtype=np.int64)
    u, v = np.concatenate(us).astype(np.int64), np.concatenate(vs).astype(np.int64)
    keep = u != v
    u, v = u[keep], v[keep]
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    key = np.unique(lo * n + hi)  # a within-block draw can hit the same pair twice: dedupe
    lo, hi = key // n, key % n
    return np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])])


def class_means(n_classes: int, n_known: int, n_features: int, rng: np.random.Generator,
                mean_scale: float = 0.6, unknown_noise: float = 0.3) -> np.ndarray:
    """Known means N(0, I) * scale; each unknown mean is the midpoint of two random known means plus noise,
    so unknown nodes sit between known classes instead of being trivial outliers."""
    mu = np.zeros((n_classes, n_features))
    mu[:n_known] = rng.standard_normal((n_known, n_features)) * mean_scale
    for c in range(n_known, n_classes):
        a, b = rng.choice(n_known, size=2, replace=False)
        mu[c] = 0.5 * (mu[a] + mu[b]) + unknown_noise * rng.standard_normal(n_features)
    return mu


def covariate_shift(n_features: int, rng: np.random.Generator, strength: float = 0.3, bias: float = 0.5):
    """x -> (I + strength * G / sqrt(f)) x + bias * b, fixed per seed."""
    g = rng.standard_normal((n_features, n_features))
    b = rng.standard_normal(n_features)
    return np.eye(n_features) + strength * g / np.sqrt(n_features), bias * b


def csbm_domain(n: int, classes: np.ndarray, means: np.ndarray, avg_degree: float, homophily: float,
                rng: np.random.Generator, shift=None, chunk: int = 200_000, progress=_no_progress):
    """Labels uniform over `classes`, x = mu_y + N(0, I) (then shifted), SBM edges. Built in chunks so a
    10^6 x 64 graph never holds float64 copies of the whole feature matrix."""
    y = np.asarray(classes)[rng.integers(0, len(classes), n)]
    f = means.shape[1]
    x = np.empty((n, f), dtype=np.float32)
    chunks = range(0, n, chunk)
    for s in progress(chunks, total=len(chunks), desc=f"generating {n:,} x {f} node features", unit="chunk"):
        e = min(n, s + chunk)
        xc = means[y[s:e]] + rng.standard_normal((e - s, f))
        if shift is not None:
            xc = xc @ shift[0].T + shift[1]
        x[s:e] = xc
    edge_index = sbm_edges(y, avg_degree, homophily, rng, progress)
    return x, y.astype(np.int64), edge_index


def csbm_pair(seed: int, n_source: int = 1500, n_target: int = 1500, n_features: int = 64, n_classes: int = 7,
              n_known: int = 4, deg_source: float = 8.0, deg_target: float = 6.0, homophily_source: float = 0.8,
              homophily_target: float = 0.6, shift_strength: float = 0.3, shift_bias: float = 0.5,
              mean_scale: float = 0.6, unknown_noise: float = 0.3, unknown_fraction: float | None = None,
              progress=_no_progress) -> dict:
    """Source: known classes only; target: all classes (unknown share = (C-K)/C unless unknown_fraction is set).
    Labels are the original class ids 0..C-1 (relabelling to K+1 happens in the method)."""
    rng = np.random.default_rng(seed)
    means = class_means(n_classes, n_known, n_features, rng, mean_scale, unknown_noise)
    shift = covariate_shift(n_features, rng, shift_strength, shift_bias)
    xs, ys, es = csbm_domain(n_source, np.arange(n_known), means, deg_source, homophily_source, rng, progress=progress)
    if unknown_fraction is None:
        xt, yt, et = csbm_domain(n_target, np.arange(n_classes), means, deg_target, homophily_target, rng, shift,
                                 progress=progress)
    else:  # weight the class draw so a given share of target nodes is unknown
        n_unk = n_classes - n_known
        probs = np.r_[np.full(n_known, (1 - unknown_fraction) / n_known), np.full(n_unk, unknown_fraction / n_unk)]
        yt = rng.choice(n_classes, size=n_target, p=probs)
        xt = ((means[yt] + rng.standard_normal((n_target, n_features))) @ shift[0].T + shift[1]).astype(np.float32)
        et = sbm_edges(yt, deg_target, homophily_target, rng, progress)
    return {"source": (xs, ys, es), "target": (xt, yt.astype(np.int64), et), "n_known": n_known,
            "n_classes": n_classes}
