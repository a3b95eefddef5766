"""Markov equivalence: DAG -> CPDAG (v-structures + Meek rules R1-R3), CPDAG SHD, skeleton precision / recall,
enumeration of the DAGs of a CPDAG's class, and the conversion of causal-learn's graph encoding.

A CPDAG is a d x d 0/1 matrix C: C[i, j] = 1 and C[j, i] = 0 is i -> j; C[i, j] = C[j, i] = 1 is i - j."""

from __future__ import annotations

import itertools

import numpy as np


def cpdag(dag: np.ndarray) -> np.ndarray:
    A = (np.asarray(dag) != 0).astype(np.int64)
    d = len(A)
    skel = ((A + A.T) > 0).astype(np.int64)
    C = skel.copy()  # start all undirected
    # v-structures: a -> c <- b with a, b non-adjacent
    for c in range(d):
        pa = np.flatnonzero(A[:, c])
        for a, b in itertools.combinations(pa, 2):
            if not skel[a, b]:
                C[c, a] = 0
                C[c, b] = 0
    return meek(C)


def meek(C: np.ndarray) -> np.ndarray:
    C = C.copy()
    d = len(C)

    def directed(i, j):
        return C[i, j] == 1 and C[j, i] == 0

    def undirected(i, j):
        return C[i, j] == 1 and C[j, i] == 1

    def adjacent(i, j):
        return C[i, j] == 1 or C[j, i] == 1

    changed = True
    while changed:
        changed = False
        for i in range(d):
            for j in range(d):
                if i == j or not undirected(i, j):
                    continue
                # R1: k -> i - j, k and j non-adjacent  =>  i -> j
                r1 = any(directed(k, i) and not adjacent(k, j) for k in range(d) if k not in (i, j))
                # R2: i -> k -> j and i - j  =>  i -> j
                r2 = any(directed(i, k) and directed(k, j) for k in range(d) if k not in (i, j))
                # R3: i - k1 -> j, i - k2 -> j, k1, k2 non-adjacent  =>  i -> j
                ks = [k for k in range(d) if k not in (i, j) and undirected(i, k) and directed(k, j)]
                r3 = any(not adjacent(a, b) for a, b in itertools.combinations(ks, 2))
                if r1 or r2 or r3:
                    C[j, i] = 0
                    changed = True
    return C


def edge_type(C: np.ndarray, i: int, j: int) -> int:
    """0 none, 1 i->j, 2 j->i, 3 undirected."""
    a, b = C[i, j] != 0, C[j, i] != 0
    return {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}[(bool(a), bool(b))]


def shd_cpdag(C1: np.ndarray, C2: np.ndarray) -> int:
    """Number of node pairs whose CPDAG edge (none / either direction / undirected) differs."""
    d = len(C1)
    return sum(edge_type(C1, i, j) != edge_type(C2, i, j) for i in range(d) for j in range(i + 1, d))


def skeleton_scores(C_est: np.ndarray, C_true: np.ndarray) -> tuple[float, float]:
    """(precision, recall) of the skeleton (1.0 precision for an empty estimate)."""
    e = np.triu(((C_est + C_est.T) > 0), 1)
    t = np.triu(((C_true + C_true.T) > 0), 1)
    tp = int((e & t).sum())
    prec = tp / e.sum() if e.sum() else 1.0
    rec = tp / t.sum() if t.sum() else 1.0
    return float(prec), float(rec)


def mec_dags(C: np.ndarray, max_undirected: int = 16) -> list[np.ndarray]:
    """All DAGs whose CPDAG is C (brute force over the orientations of C's undirected edges)."""
    from methodlab.data.discrete_structure_sim import is_dag

    C = (np.asarray(C) != 0).astype(np.int64)
    und = [(i, j) for i in range(len(C)) for j in range(i + 1, len(C)) if C[i, j] and C[j, i]]
    if len(und) > max_undirected:
        raise ValueError(f"{len(und)} undirected edges: more than {max_undirected} to enumerate")
    base = C * (1 - C.T)  # directed part
    out = []
    for bits in itertools.product((0, 1), repeat=len(und)):
        A = base.copy()
        for (i, j), b in zip(und, bits):
            A[i, j], A[j, i] = (1, 0) if b == 0 else (0, 1)
        if is_dag(A) and np.array_equal(cpdag(A), C):
            out.append(A)
    return out


def from_causallearn(G: np.ndarray) -> np.ndarray:
    """causal-learn: G[j, i] = 1 and G[i, j] = -1 is i -> j; -1/-1 undirected; 1/1 bidirected (-> undirected)."""
    G = np.asarray(G)
    d = len(G)
    C = np.zeros((d, d), dtype=np.int64)
    for i in range(d):
        for j in range(i + 1, d):
            a, b = G[i, j], G[j, i]
            if a == 0 and b == 0:
                continue
            if a == -1 and b == 1:
                C[i, j] = 1
            elif a == 1 and b == -1:
                C[j, i] = 1
            else:
                C[i, j] = C[j, i] = 1
    return C


def edge_lists(C: np.ndarray, names: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    d = len(C)
    directed = [[names[i], names[j]] for i in range(d) for j in range(d) if C[i, j] and not C[j, i]]
    undirected = [[names[i], names[j]] for i in range(d) for j in range(i + 1, d) if C[i, j] and C[j, i]]
    return directed, undirected
