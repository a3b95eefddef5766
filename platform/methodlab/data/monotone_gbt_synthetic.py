"""Synthetic comparison data of the LGBT-D paper (official generator, numpy only).

One instance (seed s, `numpy.random.default_rng(s)`, in this order): x_feat ~ N(0, 1) of shape [D, A]; the true
model's embeddings [I_A ; x_feat] and beta_true ~ N(0, P^{-1}) (P = sigma^-2 I + x L x^T: the prior precision;
standard normal when sigma = 1 and L = 0); theta_true = x^T beta_true; N comparisons drawn WITH replacement from the
pair sampler; one response per drawn comparison, r ~ f(r) exp(r s), s = theta_a - theta_b. Every draw is kept
(`keep_all_draws`); False reproduces the official Python script, which stores responses in an A x A matrix and keeps
only its a < b entries (a repeated pair keeps one response; about half the draws are dropped)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class SyntheticInstance:
    x_feat: np.ndarray  # [D, A]
    beta_true: np.ndarray  # [A + D]: identity coordinates first
    theta_true: np.ndarray  # [A]
    a: np.ndarray
    b: np.ndarray
    r: np.ndarray


def sample_beta(rng: np.random.Generator, x: np.ndarray, sigma: float, lap=None) -> np.ndarray:
    """beta ~ N(0, P^{-1}), P = sigma^-2 I + x L x^T the prior PRECISION (the official Julia generator passes P as
    the covariance; the same when sigma = 1 and L = 0). With L = 0: sigma * standard_normal (same random stream)."""
    z = rng.standard_normal(x.shape[0])
    if lap is None or not np.any(lap):
        return sigma * z
    import scipy.linalg

    p = np.eye(x.shape[0]) / sigma ** 2 + x @ lap @ x.T
    c = np.linalg.cholesky(p)  # P = C C^T -> beta = C^{-T} z has covariance P^{-1}
    return scipy.linalg.solve_triangular(c.T, z, lower=False)


def sample_pairs(rng: np.random.Generator, a_n: int, n: int, sampler: str = "simple", p_edge: float = 0.2,
                 groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """N ordered pairs a != b with replacement.
    simple: uniform over the A(A-1) ordered pairs. erdos_renyi: uniform over the ordered pairs of one G(A, p_edge)
    graph (drawn first). bipartite: uniform over ordered pairs across two groups (default: first half / second half)."""
    if a_n < 2:
        raise ValueError("need at least 2 alternatives")
    if sampler == "simple":
        k = rng.integers(0, a_n * (a_n - 1), size=n)
        a = k // (a_n - 1)
        b = k % (a_n - 1)
        b = b + (b >= a)  # skip the diagonal
        return a.astype(np.int64), b.astype(np.int64)
    if sampler == "erdos_renyi":
        iu, ju = np.triu_indices(a_n, 1)
        keep = rng.random(len(iu)) < p_edge
        if not keep.any():
            keep[rng.integers(len(iu))] = True
        ea = np.concatenate([iu[keep], ju[keep]])
        eb = np.concatenate([ju[keep], iu[keep]])
    elif sampler == "bipartite":
        g = np.asarray(groups) if groups is not None else (np.arange(a_n) >= a_n // 2).astype(int)
        left, right = np.flatnonzero(g == 0), np.flatnonzero(g == 1)
        la, rb = np.meshgrid(left, right, indexing="ij")
        ea = np.concatenate([la.ravel(), rb.ravel()])
        eb = np.concatenate([rb.ravel(), la.ravel()])
    else:
        raise ValueError(f"unknown pair sampler {sampler!r}; allowed: simple, erdos_renyi, bipartite")
    k = rng.integers(0, len(ea), size=n)
    return ea[k].astype(np.int64), eb[k].astype(np.int64)


def official_python_filter(a: np.ndarray, b: np.ndarray, r: np.ndarray):
    """The official script's data path: responses land in an A x A matrix (a repeated pair overwrites: the last
    draw wins) and only entries with a < b enter the loss."""
    last = {}
    for i, (ai, bi) in enumerate(zip(a.tolist(), b.tolist())):
        last[(ai, bi)] = i
    idx = np.array(sorted(i for (ai, bi), i in last.items() if ai < bi), dtype=np.int64)
    return a[idx], b[idx], r[idx]


def generate(seed: int, a_n: int, d: int, n: int, law, *, sigma: float = 1.0, lap=None, sampler: str = "simple",
             p_edge: float = 0.2, keep_all_draws: bool = True) -> SyntheticInstance:
    rng = np.random.default_rng(seed)
    x_feat = rng.standard_normal((d, a_n))
    x_true = np.vstack([np.eye(a_n), x_feat])
    beta = sample_beta(rng, x_true, sigma, lap)
    theta = x_true.T @ beta
    a, b = sample_pairs(rng, a_n, n, sampler, p_edge)
    r = law.sample(theta[a] - theta[b], rng)
    if not keep_all_draws:
        a, b, r = official_python_filter(a, b, r)
    return SyntheticInstance(x_feat, beta, theta, a, b, r)


def onehot_groups(rng: np.random.Generator, a_n: int, n_groups: int) -> np.ndarray:
    """[G, A] one-hot category membership, every group non-empty (random sizes, like the official publisher
    embeddings: multinomial(A - G) + 1 per group, then shuffled)."""
    sizes = rng.multinomial(a_n - n_groups, np.ones(n_groups) / n_groups) + 1
    labels = rng.permutation(np.repeat(np.arange(n_groups), sizes))
    g = np.zeros((n_groups, a_n))
    g[labels, np.arange(a_n)] = 1.0
    return g
