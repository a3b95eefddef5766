"""Binary Bayesian networks for discrete_structure: random-DAG generators with known ground truth
(random_cpt / logistic / noisy_or / xor mechanisms, the conditional-influence check), the XOR triple,
a numpy ancestral sampler, and the real-format loaders (CSV / Parquet of 0/1 columns, adjacency CSV).

Representation (`BinaryNet`): node j has a parent list `parents[j]` (indices) and a CPT `cpt[j]`, an array of
length 2**len(parents[j]) holding P(x_j = 1 | parent configuration); the configuration index is
sum_i x_{parents[j][i]} << i. Adjacency matrices are d x d with row = cause, column = effect."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MECHANISMS = ("random_cpt", "logistic", "noisy_or", "xor")


@dataclass
class BinaryNet:
    names: list[str]
    parents: list[list[int]]
    cpt: list[np.ndarray]
    mechanism: list[str] = field(default_factory=list)

    @property
    def d(self) -> int:
        return len(self.names)

    def adjacency(self) -> np.ndarray:
        a = np.zeros((self.d, self.d), dtype=np.int64)
        for j, pa in enumerate(self.parents):
            a[pa, j] = 1
        return a


def topological_order(adj: np.ndarray) -> list[int]:
    """Kahn's algorithm; raises ValueError on a cycle."""
    adj = np.asarray(adj) != 0
    indeg = adj.sum(0).astype(int)
    order, ready = [], [i for i in range(len(adj)) if indeg[i] == 0]
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in np.flatnonzero(adj[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(int(j))
    if len(order) != len(adj):
        raise ValueError("graph has a cycle")
    return order


def is_dag(adj: np.ndarray) -> bool:
    try:
        topological_order(adj)
        return True
    except ValueError:
        return False


def random_dag(d: int, exp_degree: float, rng: np.random.Generator) -> np.ndarray:
    """Erdos-Renyi DAG with expected degree `exp_degree` (edges ~ exp_degree * d / 2) in a random topological order."""
    p = min(1.0, exp_degree / max(1, d - 1))
    lower = np.tril(rng.random((d, d)) < p, k=-1).astype(np.int64)  # i > j: j -> i in the identity order
    perm = rng.permutation(d)
    adj = np.zeros((d, d), dtype=np.int64)
    src, dst = np.nonzero(lower.T)  # lower[i, j] = 1 means j -> i
    adj[perm[src], perm[dst]] = 1
    return adj


def configs(k: int) -> np.ndarray:
    """All 2**k parent configurations as rows (bit i = parent i), index = sum x_i << i."""
    idx = np.arange(2 ** k)
    return ((idx[:, None] >> np.arange(k)[None, :]) & 1).astype(np.int64)


def conditional_influence(cpt: np.ndarray, k: int) -> np.ndarray:
    """max_z |P(1 | x_i = 1, z) - P(1 | x_i = 0, z)| for each parent i over the other parents' configurations z."""
    cpt = np.asarray(cpt, dtype=float)
    out = np.zeros(k)
    idx = np.arange(2 ** k)
    for i in range(k):
        off = idx[((idx >> i) & 1) == 0]
        out[i] = np.max(np.abs(cpt[off | (1 << i)] - cpt[off])) if len(off) else 0.0
    return out


def passes_influence(cpt: np.ndarray, k: int, minimum: float) -> bool:
    return k == 0 or bool(np.all(conditional_influence(cpt, k) >= minimum))


def draw_cpt(mechanism: str, k: int, rng: np.random.Generator, xor_flip: float = 0.1) -> np.ndarray:
    """P(x = 1 | configuration) for one node with k parents under a mechanism."""
    cfg = configs(k)
    if mechanism == "random_cpt":
        return rng.beta(0.5, 0.5, size=2 ** k)
    if mechanism == "logistic":
        w = rng.uniform(1.0, 3.0, size=k) * rng.choice([-1.0, 1.0], size=k)
        b = rng.uniform(-1.0, 1.0) - 0.5 * w.sum()
        return 1.0 / (1.0 + np.exp(-(b + cfg @ w)))
    if mechanism == "noisy_or":
        leak = rng.uniform(0.05, 0.2)
        q = rng.uniform(0.6, 0.95, size=k)  # activation probability of each parent
        return 1.0 - (1.0 - leak) * np.prod(np.where(cfg == 1, 1.0 - q[None, :], 1.0), axis=1)
    if mechanism == "xor":
        if k == 0:
            return np.array([0.5])
        parity = cfg.sum(1) % 2
        return np.where(parity == 1, 1.0 - xor_flip, xor_flip)
    raise ValueError(f"unknown mechanism {mechanism!r}; allowed: {', '.join(MECHANISMS)}")


def random_network(d: int, exp_degree: float, mechanism: str, seed: int, *, influence_min: float = 0.05,
                   min_multi_parent: int = 0, xor_flip: float = 0.1, max_tries: int = 100,
                   max_graph_tries: int = 1000) -> BinaryNet:
    """Random ER DAG + CPTs. Every non-xor node's CPT passes the conditional-influence check (redrawn up to
    `max_tries` times, then ValueError). The graph is redrawn until >= `min_multi_parent` nodes have 2+ parents."""
    rng = np.random.default_rng(seed)
    for _ in range(max_graph_tries):
        adj = random_dag(d, exp_degree, rng)
        if int((adj.sum(0) >= 2).sum()) >= min_multi_parent:
            break
    else:
        raise ValueError(f"seed {seed}: no graph with >= {min_multi_parent} multi-parent nodes in {max_graph_tries} draws")
    parents = [sorted(int(i) for i in np.flatnonzero(adj[:, j])) for j in range(d)]
    cpts = []
    for j in range(d):
        k = len(parents[j])
        for _ in range(max_tries):
            cpt = draw_cpt(mechanism, k, rng, xor_flip)
            if mechanism == "xor" or passes_influence(cpt, k, influence_min):
                break
        else:
            raise ValueError(f"seed {seed}: node {j} ({mechanism}, {k} parents) failed the conditional-influence "
                             f"check (>= {influence_min}) {max_tries} times")
        cpts.append(np.asarray(cpt, dtype=float))
    return BinaryNet([f"x{j}" for j in range(d)], parents, cpts, [mechanism] * d)


def xor_triple(flip: float = 0.1) -> BinaryNet:
    """a, b ~ Bernoulli(0.5); c = a XOR b flipped with probability `flip`."""
    return BinaryNet(["a", "b", "c"], [[], [], [0, 1]],
                     [np.array([0.5]), np.array([0.5]), np.array([flip, 1 - flip, 1 - flip, flip])], ["root", "root", "xor"])


def sample(net: BinaryNet, n: int, seed: int) -> np.ndarray:
    """Ancestral sampling: n x d int8 array of 0/1."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, net.d), dtype=np.int64)
    for j in topological_order(net.adjacency()):
        pa = net.parents[j]
        idx = (x[:, pa] << np.arange(len(pa))[None, :]).sum(1) if pa else np.zeros(n, dtype=np.int64)
        x[:, j] = rng.random(n) < net.cpt[j][idx]
    return x.astype(np.int8)


def exact_loglik(net: BinaryNet, x: np.ndarray) -> np.ndarray:
    """Per-row log-likelihood of 0/1 rows under the network."""
    x = np.asarray(x, dtype=np.int64)
    out = np.zeros(len(x))
    for j, pa in enumerate(net.parents):
        idx = (x[:, pa] << np.arange(len(pa))[None, :]).sum(1) if pa else np.zeros(len(x), dtype=np.int64)
        p = np.clip(net.cpt[j][idx], 1e-12, 1 - 1e-12)
        out += np.where(x[:, j] == 1, np.log(p), np.log1p(-p))
    return out


# ----------------------------------------------------------------------------------------------------------
# real on-disk formats
# ----------------------------------------------------------------------------------------------------------

def load_table(path: str | Path, binarize: str = "none") -> tuple[list[str], np.ndarray]:
    """CSV or Parquet with a header of variable names and 0/1 columns. Any other column is rejected naming the
    column, unless binarize='first_state_vs_rest' (the column's first state in sorted order -> 0, the rest -> 1)."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file {path} does not exist")
    df = pd.read_parquet(path) if path.suffix.lower() in (".parquet", ".pq") else pd.read_csv(path)
    if df.shape[1] < 2:
        raise ValueError(f"{path}: need at least 2 variable columns, got {df.shape[1]}")
    cols = []
    for name in df.columns:
        col = df[name]
        if col.isna().any():
            raise ValueError(f"column {name!r} has missing values")
        values = set(pd.unique(col).tolist())
        if values <= {0, 1} or values <= {True, False}:
            cols.append(col.astype(int).to_numpy())
        elif binarize == "first_state_vs_rest":
            first = sorted(values, key=str)[0]
            cols.append((col != first).astype(int).to_numpy())
        else:
            raise ValueError(f"column {name!r} is not binary (values {sorted(map(str, values))[:5]}); "
                             "set binarize: first_state_vs_rest to map its first state to 0 and the rest to 1")
    return [str(c) for c in df.columns], np.stack(cols, 1).astype(np.int8)


def load_adjacency_csv(path: str | Path, names: list[str]) -> np.ndarray:
    """d x d 0/1 ground-truth adjacency, row = cause, column = effect; with or without a header row of names."""
    import pandas as pd

    raw = pd.read_csv(path, header=None)
    if raw.shape == (len(names) + 1, len(names)) or not np.issubdtype(raw.dtypes.iloc[0], np.number):
        raw = pd.read_csv(path)
        if list(map(str, raw.columns)) != names:
            raise ValueError(f"{path}: header {list(raw.columns)} does not match the data columns {names}")
    a = raw.to_numpy()
    if a.shape != (len(names), len(names)) or not np.isin(a, (0, 1)).all():
        raise ValueError(f"{path}: expected a {len(names)}x{len(names)} 0/1 matrix, got shape {a.shape}")
    return a.astype(np.int64)
