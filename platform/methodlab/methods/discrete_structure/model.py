"""The maths of discrete_structure: multivariate-Bernoulli (multilinear interaction) conditionals, the group-norm
adjacency, quasi-MCP, DAGMA / NOTEARS acyclicity, thresholding to a DAG, the Moebius expansion of a CPT.

Design: one global list of interaction subsets S (|S| in 1..K, or subsets of a node's candidate parents in the
two-stage mode) and a mask M[S, j] = 1 if node j may use S (j not in S). With Phi[i, S] = prod_{k in S} x_ik,
all logits are Phi @ (B * M) + b. The data are binary, so the loss is computed on the unique rows with their
counts (exact, and at most 2^d rows)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F

LOGIT_CLIP = math.log((1 - 1e-4) / 1e-4)  # probabilities in [1e-4, 1 - 1e-4] at evaluation


def subsets_up_to(d: int, K: int) -> list[tuple[int, ...]]:
    return [s for k in range(1, K + 1) for s in itertools.combinations(range(d), k)]


def feature_plan(d: int, K: int, candidates: list[list[int]] | None = None, K_cand: int | None = None):
    """(subsets, mask[F, d]). Without candidates: all subsets of size 1..K not containing j for node j.
    With candidates: for node j the subsets (size <= K_cand) of cand(j) only."""
    if candidates is None:
        subs = subsets_up_to(d, K)
        mask = np.array([[0.0 if j in s else 1.0 for j in range(d)] for s in subs], dtype=np.float64).reshape(-1, d)
        return subs, mask
    kc = K_cand if K_cand is not None else d - 1
    per_node = [set(s for k in range(1, min(kc, len(c)) + 1) for s in itertools.combinations(sorted(c), k))
                for c in candidates]
    subs = sorted(set().union(*per_node), key=lambda s: (len(s), s)) if per_node else []
    mask = np.array([[1.0 if s in per_node[j] else 0.0 for j in range(d)] for s in subs], dtype=np.float64)
    return subs, mask.reshape(-1, d)


def design(x: np.ndarray | torch.Tensor, subs: list[tuple[int, ...]], device=None) -> torch.Tensor:
    """Phi[i, S] = prod_{k in S} x_ik (float64), on `device` (default: x's device for a tensor, else the CPU)."""
    if isinstance(x, torch.Tensor):
        x = x.to(device=device or x.device, dtype=torch.float64)
    else:
        x = torch.as_tensor(np.asarray(x), dtype=torch.float64, device=device or "cpu")
    if not subs:
        return torch.zeros(len(x), 0, dtype=torch.float64, device=x.device)
    cols = [x[:, list(s)].prod(1) for s in subs]
    return torch.stack(cols, 1)


def membership(subs: list[tuple[int, ...]], d: int, device="cpu") -> torch.Tensor:
    """Mem[S, k] = 1 if k in S (built on the host, moved to `device` once)."""
    m = torch.zeros(len(subs), d, dtype=torch.float64, device="cpu")
    for i, s in enumerate(subs):
        m[i, list(s)] = 1.0
    return m.to(device)


def unique_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, counts = np.unique(np.asarray(x, dtype=np.int8), axis=0, return_counts=True)
    return u, counts.astype(np.float64)


def group_weights(B: torch.Tensor, mem: torch.Tensor, scale: torch.Tensor | None = None, eps: float = 1e-12) -> torch.Tensor:
    """W[k, j] = sqrt(sum_{S ni k} B[S, j]^2 + eps) (optionally divided by sqrt(group size)), zero diagonal."""
    d = B.shape[1]
    sq = mem.T @ (B * B)  # (d, d): k, j
    W = torch.sqrt(sq + eps)
    if scale is not None:
        W = W / scale
    return W * (1.0 - torch.eye(d, dtype=W.dtype, device=W.device))


def qmcp(w: torch.Tensor, delta: float) -> torch.Tensor:
    """Quasi-MCP: |w| - w^2 / (2 delta) for |w| <= delta, delta / 2 otherwise."""
    a = w.abs()
    return torch.where(a <= delta, a - a * a / (2 * delta), torch.full_like(a, delta / 2))


def penalty(W: torch.Tensor, kind: str, delta: float) -> torch.Tensor:
    if kind == "qmcp":
        return qmcp(W, delta).sum()
    return W.abs().sum()  # l1 / group_l1 (W already holds group norms)


def h_dagma(W: torch.Tensor, s: float = 1.0) -> torch.Tensor:
    """-log det(sI - W o W) + d log s; +inf when sI - W o W is not an M-matrix (det <= 0). No host sync: the
    domain test is a torch.where, read by the caller (one sync per step, with its own check)."""
    d = W.shape[0]
    sign, logabs = torch.linalg.slogdet(s * torch.eye(d, dtype=W.dtype, device=W.device) - W * W)
    return torch.where(sign > 0, -logabs + d * math.log(s), torch.full_like(logabs, float("inf")))


def h_notears(W: torch.Tensor) -> torch.Tensor:
    d = W.shape[0]
    return torch.trace(torch.matrix_exp(W * W)) - d


def logits(phi: torch.Tensor, B: torch.Tensor, mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return phi @ (B * mask) + bias


def bce(z: torch.Tensor, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(1/n) sum_i counts_i sum_j BCE(x_ij, sigmoid(z_ij)) via log-sigmoid."""
    ll = x * F.logsigmoid(z) + (1 - x) * F.logsigmoid(-z)
    return -(counts[:, None] * ll).sum() / counts.sum()


def threshold_to_dag(W: np.ndarray, omega: float) -> np.ndarray:
    """Keep W > omega, then while a cycle remains drop the smallest edge on it."""
    from methodlab.data.discrete_structure_sim import is_dag

    W = np.asarray(W, dtype=float).copy()
    np.fill_diagonal(W, 0.0)
    A = (W > omega).astype(np.int64)
    while not is_dag(A):
        cyc = find_cycle(A)
        edges = list(zip(cyc, cyc[1:] + cyc[:1]))
        i, j = min(edges, key=lambda e: W[e])
        A[i, j] = 0
    return A


def find_cycle(A: np.ndarray) -> list[int]:
    """One directed cycle of A (list of nodes), by depth-first search."""
    d = len(A)
    color = [0] * d
    stack: list[int] = []

    def dfs(u):
        color[u] = 1
        stack.append(u)
        for v in np.flatnonzero(A[u]):
            v = int(v)
            if color[v] == 1:
                return stack[stack.index(v):]
            if color[v] == 0:
                c = dfs(v)
                if c:
                    return c
        stack.pop()
        color[u] = 2
        return None

    for s in range(d):
        if color[s] == 0:
            c = dfs(s)
            if c:
                return list(c)
    return []


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def moebius(cpt: np.ndarray, k: int) -> np.ndarray:
    """beta_S for every subset S of the k parents (index = bitmask of S), such that
    logit P(1 | x) = sum_{S subset of on(x)} beta_S: beta_S = sum_{T subset S} (-1)^{|S|-|T|} logit p(T)."""
    f = logit(cpt).astype(float).copy()
    for i in range(k):  # fast Moebius transform over the subset lattice
        bit = 1 << i
        for m in range(2 ** k):
            if m & bit:
                f[m] -= f[m ^ bit]
    return f


def moebius_logit(beta: np.ndarray, k: int) -> np.ndarray:
    """Inverse: logit p(config) = sum over subsets of the configuration's 'on' parents (zeta transform)."""
    g = np.asarray(beta, dtype=float).copy()
    for i in range(k):
        bit = 1 << i
        for m in range(2 ** k):
            if m & bit:
                g[m] += g[m ^ bit]
    return g
