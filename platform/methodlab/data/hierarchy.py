"""Hierarchies as DAGs with child -> parent edges: synthetic trees, an edge-list loader, and the
(query, ancestor-or-self, distance) pairs of hierarchical retrieval.

    perfect_tree(branching, depth, dag_p, seed) -> Hierarchy
    load_edge_list(edges_tsv, texts_tsv=None)   -> Hierarchy   (`child \\t parent`, `node \\t text`)
    wordnet_nouns(path=None)                     -> Hierarchy   (82,115 synsets, `@` + `@i` edges)
    relevant_pairs(h)                            -> (q, d, dist) int arrays sorted by q, d
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError


@dataclass
class Hierarchy:
    n: int
    child: np.ndarray  # [E] int64
    parent: np.ndarray  # [E] int64
    names: list[str] = field(default_factory=list)  # short id per node ("entity.n.01", "3.1.2")
    texts: list[str] = field(default_factory=list)  # readable text per node (lemmas, product title)
    level: np.ndarray | None = None  # depth of each node when known (synthetic trees)

    def parents_of(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for c, p in zip(self.child.tolist(), self.parent.tolist()):
            out[c].append(p)
        return out


def perfect_tree(branching: int = 3, depth: int = 6, dag_p: float = 0.0, seed: int = 0) -> Hierarchy:
    """Perfect tree (b^(D+1)-1)/(b-1) nodes in BFS order, root 0. With dag_p > 0 every non-root node
    below level 1 gets a second parent, with probability dag_p, drawn uniformly from the level above."""
    level_start = [0]
    for lv in range(depth + 1):
        level_start.append(level_start[-1] + branching ** lv)
    n = level_start[-1]
    child = np.arange(1, n, dtype=np.int64)
    parent = (child - 1) // branching
    level = np.zeros(n, dtype=np.int64)
    for lv in range(depth + 1):
        level[level_start[lv]:level_start[lv + 1]] = lv
    extra_c, extra_p = [], []
    if dag_p > 0:
        rng = np.random.default_rng(seed)
        for v in range(1, n):
            lv = level[v]
            if lv >= 2 and rng.random() < dag_p:
                choices = np.arange(level_start[lv - 1], level_start[lv])
                choices = choices[choices != parent[v - 1]]
                extra_c.append(v)
                extra_p.append(int(rng.choice(choices)))
    child = np.concatenate([child, np.asarray(extra_c, dtype=np.int64)])
    parent = np.concatenate([parent, np.asarray(extra_p, dtype=np.int64)])
    names = [f"n{v}" for v in range(n)]
    return Hierarchy(n, child, parent, names, [f"node {v} (level {level[v]})" for v in range(n)], level)


def load_edge_list(edges: str | Path, texts: str | Path | None = None) -> Hierarchy:
    """Real-format loader: a TSV of `child_id<TAB>parent_id` rows (a header row `child parent` is
    skipped) plus an optional TSV `node_id<TAB>text`. Ids are arbitrary strings; nodes are numbered in
    order of first appearance (text file first, so its order is kept)."""
    edges = Path(edges)
    if not edges.is_file():
        raise MissingSourceError(f"{edges}: edge-list file not found (TSV child_id<TAB>parent_id)")
    ids: dict[str, int] = {}
    text_of: dict[str, str] = {}

    def nid(x: str) -> int:
        return ids.setdefault(x, len(ids))

    if texts:
        tp = Path(texts)
        if not tp.is_file():
            raise MissingSourceError(f"{tp}: node-text file not found (TSV node_id<TAB>text)")
        with tp.open(newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh, delimiter="\t"):
                if len(row) >= 2 and row[0] and row[0] not in ("node_id", "id"):
                    nid(row[0])
                    text_of[row[0]] = row[1]
    child, parent = [], []
    with edges.open(newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.reader(fh, delimiter="\t")):
            if len(row) < 2 or (i == 0 and row[0] in ("child", "child_id")):
                continue
            c, p = nid(row[0]), nid(row[1])
            if c != p:
                child.append(c)
                parent.append(p)
    names = list(ids)
    h = Hierarchy(len(names), np.asarray(child, np.int64), np.asarray(parent, np.int64), names,
                  [text_of.get(x, x) for x in names])
    topological_order(h)  # raises on a cycle
    return h


def _no_progress(items, **_):
    return items


def wordnet_nouns(path: str | Path | None = None, instance: bool = True, progress=_no_progress) -> Hierarchy:
    """The WordNet 3.0 noun hierarchy (see methodlab.data.wordnet for the sources). `progress(iterable, total=,
    desc=, unit=)` reports the parse (RunContext.progress in a run)."""
    from methodlab.data import wordnet

    syn = wordnet.noun_synsets(path, progress)
    c, p = wordnet.hypernym_edges(syn, instance=instance)
    return Hierarchy(len(syn), c, p, wordnet.synset_names(syn, path), [wordnet.lemma_text(s) for s in syn])


def topological_order(h: Hierarchy) -> list[int]:
    """Nodes with every parent before its children (Kahn); ValueError on a cycle."""
    parents = h.parents_of()
    n_par = np.array([len(p) for p in parents])
    kids: list[list[int]] = [[] for _ in range(h.n)]
    for c, p in zip(h.child.tolist(), h.parent.tolist()):
        kids[p].append(c)
    order = [v for v in range(h.n) if n_par[v] == 0]
    left = n_par.copy()
    i = 0
    while i < len(order):
        for k in kids[order[i]]:
            left[k] -= 1
            if left[k] == 0:
                order.append(k)
        i += 1
    if len(order) != h.n:
        raise ValueError(f"hierarchy has a cycle ({h.n - len(order)} nodes on or below it)")
    return order


def relevant_pairs(h: Hierarchy, progress=_no_progress) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (q, d, dist) with d in R(q) = {q} + ancestors(q), dist = shortest upward path length.
    Dynamic programme in topological order: anc(v) = {v: 0} merged with anc(p) + 1 over parents p."""
    parents = h.parents_of()
    anc: list[dict[int, int] | None] = [None] * h.n
    for v in progress(topological_order(h), total=h.n, desc=f"ancestor closure of {h.n:,} nodes", unit="node"):
        a = {v: 0}
        for p in parents[v]:
            for d, k in anc[p].items():
                if k + 1 < a.get(d, 1 << 30):
                    a[d] = k + 1
        anc[v] = a
    sizes = np.fromiter((len(a) for a in anc), dtype=np.int64, count=h.n)
    q = np.repeat(np.arange(h.n, dtype=np.int64), sizes)
    d = np.fromiter((x for a in anc for x in sorted(a)), dtype=np.int64, count=int(sizes.sum()))
    dist = np.fromiter((a[x] for a in anc for x in sorted(a)), dtype=np.int64, count=int(sizes.sum()))
    return q, d, dist
