"""Real on-disk graph formats for open-set graph domain adaptation (a user points a job at the files).

Every loader returns (x float32 [n, f], y int64 [n], edge_index int64 [2, E] with both directions).
    load_citation(dir, name)     <name>_docs.txt (comma-separated features per line), <name>_edgelist.txt
                                 ("src,dst" 0-based), <name>_labels.txt (one int per line)  [UDAGCN/GraphCTA format]
    load_webkb(dir)              Geom-GCN: out1_node_feature_label.txt ("id<TAB>f1,f2,...<TAB>label", header line),
                                 out1_graph_edges.txt ("src<TAB>dst", header line)
    load_npz(path)               arrays x [n,f], edge_index [2,E], y [n]
    load_ogbn_arxiv(dir, years)  OGB raw CSVs (node-feat, edge, node-label, node_year; .csv or .csv.gz), nodes whose
                                 year lies in [lo, hi] and the edges among them
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError


def _need(path: Path) -> Path:
    if not path.is_file():
        raise MissingSourceError(f"{path}: not found (graphrta reads real graphs from files you provide; nothing is "
                                 "downloaded)")
    return path


def symmetrise(edge_index: np.ndarray, n: int) -> np.ndarray:
    """Undirected, no self-loops, no duplicates, both directions."""
    u, v = edge_index
    keep = (u != v) & (u >= 0) & (v >= 0) & (u < n) & (v < n)
    u, v = u[keep], v[keep]
    key = np.unique(np.minimum(u, v).astype(np.int64) * n + np.maximum(u, v))
    lo, hi = key // n, key % n
    return np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])]).astype(np.int64)


def load_citation(directory, name: str):
    d = Path(directory)
    x = np.loadtxt(_need(d / f"{name}_docs.txt"), delimiter=",", dtype=np.float32, ndmin=2)
    e = np.loadtxt(_need(d / f"{name}_edgelist.txt"), delimiter=",", dtype=np.int64, ndmin=2)
    y = np.loadtxt(_need(d / f"{name}_labels.txt"), dtype=np.int64, ndmin=1)
    if len(y) != len(x):
        raise ValueError(f"{d}/{name}: {len(x)} feature rows but {len(y)} labels")
    return x, y, symmetrise(e.T, len(x))


def load_webkb(directory):
    d = Path(directory)
    ids, feats, labels = [], [], []
    with open(_need(d / "out1_node_feature_label.txt")) as fh:
        next(fh)
        for line in fh:
            i, f, lab = line.rstrip("\n").split("\t")
            ids.append(int(i))
            feats.append(np.asarray(f.split(","), dtype=np.float32))
            labels.append(int(lab))
    order = np.argsort(ids)
    x = np.stack(feats)[order]
    y = np.asarray(labels, dtype=np.int64)[order]
    e = np.loadtxt(_need(d / "out1_graph_edges.txt"), delimiter="\t", dtype=np.int64, skiprows=1, ndmin=2)
    return x, y, symmetrise(e.T, len(x))


def load_npz(path):
    with np.load(_need(Path(path)), allow_pickle=False) as z:
        x, y, e = z["x"].astype(np.float32), z["y"].astype(np.int64), z["edge_index"].astype(np.int64)
    return x, y, symmetrise(e, len(x))


def _csv(d: Path, stem: str, dtype):
    for name in (f"{stem}.csv.gz", f"{stem}.csv"):
        if (d / name).is_file():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(d / name, "rt") as fh:
                return np.loadtxt(fh, delimiter=",", dtype=dtype, ndmin=2)
    raise MissingSourceError(f"{d}/{stem}.csv(.gz): not found (OGB raw files of ogbn-arxiv, folder raw/)")


def load_ogbn_arxiv(directory, years: tuple[int, int]):
    d = Path(directory)
    d = d / "raw" if (d / "raw").is_dir() else d
    x = _csv(d, "node-feat", np.float32)
    e = _csv(d, "edge", np.int64).T
    y = _csv(d, "node-label", np.int64)[:, 0]
    yr = _csv(d, "node_year", np.int64)[:, 0]
    keep = np.flatnonzero((yr >= years[0]) & (yr <= years[1]))
    remap = np.full(len(x), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    e = remap[e]
    e = e[:, (e[0] >= 0) & (e[1] >= 0)]
    return x[keep], y[keep], symmetrise(e, len(keep))
