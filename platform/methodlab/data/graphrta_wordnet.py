"""WordNet open-set graph for graph domain adaptation (real data, no download).

Nodes: per lexname class the `per_class` synsets with the most same-class descendants (ties: depth to
entity.n.01, then offset); edges: the @ / @i links among chosen synsets, undirected. Two feature views of the
same synsets are the two domains: the gloss definition (source) and the lemma words + quoted examples
(target; ~45 % of its rows are empty, so propagation must fill them in).

    wordnet_open_set(path=None, known=..., unknown=..., per_class=400, vocab_size=1000, target_view="lemma") -> dict

Target views (`target_view`): "lemma" (the spec's view: lemma words + quoted examples), "lemma_hyper1" / "lemma_hyper2"
(the same plus the lemma words of the synset's hypernyms (@ / @i) up to 1 / 2 links up, read from the whole of
WordNet, so every node gets the words a dictionary would define it by; an option added for issue 22, item 7).
"""

from __future__ import annotations

import re
from collections import deque
from functools import lru_cache

import numpy as np

from methodlab.data.wordnet import LEXNAMES, noun_synsets

KNOWN = ("noun.artifact", "noun.person", "noun.plant", "noun.animal", "noun.act", "noun.communication")
UNKNOWN = ("noun.state", "noun.location", "noun.attribute", "noun.substance")

# A fixed English stop-word list (shipped, so the vocabulary never depends on an installed corpus).
STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren as at be because been before being below
between both but by can cannot could did didn do does doesn doing don down during each either etc few for from
further had has have having he her here hers herself him himself his how however into its itself just least
less let like made make many may more most much must neither nor not now off often once one only other ones
our ours ourselves out over own same shall she should since some such than that the their theirs them
themselves then there these they this those through thus too under until upon used usually very was were what
when where whether which while who whom whose why will with within without would yet you your yours yourself
especially something someone somebody anything everything often another way being any things thing
""".split())


def tokens(text: str) -> list[str]:
    """Lowercase, split on non-letters, keep length >= 3, drop stop words."""
    return [t for t in re.split(r"[^a-z]+", text.lower()) if len(t) >= 3 and t not in STOPWORDS]


def gloss_definition(gloss: str) -> str:
    """The gloss text before the first quoted example ('; "')."""
    return gloss.split('; "', 1)[0]


def gloss_examples(gloss: str) -> list[str]:
    return re.findall(r'"([^"]*)"', gloss)


def _depths(synsets, pos) -> np.ndarray:
    """Shortest @/@i path length to the root(s) (synsets without hypernyms), by BFS downward."""
    children = [[] for _ in synsets]
    for i, s in enumerate(synsets):
        for t in s.hypernyms + s.instance_hypernyms:
            children[pos[t]].append(i)
    depth = np.full(len(synsets), -1, dtype=np.int64)
    queue = deque(i for i, s in enumerate(synsets) if not s.hypernyms and not s.instance_hypernyms)
    for i in queue:
        depth[i] = 0
    while queue:
        i = queue.popleft()
        for c in children[i]:
            if depth[c] < 0:
                depth[c] = depth[i] + 1
                queue.append(c)
    return depth


def _same_class_descendant_counts(synsets, pos, members: list[int]) -> dict[int, int]:
    """For each synset of a class, the number of distinct same-class synsets below it (walking upward from
    every member through same-class ancestors, each ancestor counted once per member)."""
    lex = synsets[members[0]].lex_filenum
    count = dict.fromkeys(members, 0)
    for i in members:
        seen, stack = set(), [i]
        while stack:
            j = stack.pop()
            for t in synsets[j].hypernyms + synsets[j].instance_hypernyms:
                p = pos[t]
                if synsets[p].lex_filenum == lex and p not in seen:
                    seen.add(p)
                    stack.append(p)
        for p in seen:
            count[p] += 1
    return count


TARGET_VIEWS = ("lemma", "lemma_hyper1", "lemma_hyper2")


def _lemma_text(s) -> str:
    return " ".join(w.replace("_", " ") for w in s.words)


def _ancestors(synsets, pos, i: int, hops: int) -> list[int]:
    """Synsets reachable upward through @ / @i in 1..hops links (each once, nearest first)."""
    out, seen, frontier = [], {i}, [i]
    for _ in range(hops):
        nxt = []
        for j in frontier:
            for t in synsets[j].hypernyms + synsets[j].instance_hypernyms:
                p = pos[t]
                if p not in seen:
                    seen.add(p)
                    nxt.append(p)
        out += nxt
        frontier = nxt
    return out


def target_text(synsets, pos, g: int, view: str = "lemma") -> str:
    """Text of the target view of synset index g."""
    if view not in TARGET_VIEWS:
        raise ValueError(f"target_view {view!r}: expected one of {TARGET_VIEWS}")
    s = synsets[g]
    text = _lemma_text(s) + " " + " ".join(gloss_examples(s.gloss))
    hops = {"lemma": 0, "lemma_hyper1": 1, "lemma_hyper2": 2}[view]
    return text + "".join(" " + _lemma_text(synsets[a]) for a in _ancestors(synsets, pos, g, hops))


@lru_cache(maxsize=4)
def _build(path: str | None, known: tuple, unknown: tuple, per_class: int, vocab_size: int,
           target_view: str = "lemma") -> dict:
    synsets = noun_synsets(path)
    pos = {s.offset: i for i, s in enumerate(synsets)}
    depth = _depths(synsets, pos)
    classes = list(known) + list(unknown)
    chosen, labels = [], []
    for c, name in enumerate(classes):
        lex = LEXNAMES.index(name)
        members = [i for i, s in enumerate(synsets) if s.lex_filenum == lex]
        counts = _same_class_descendant_counts(synsets, pos, members)
        order = sorted(members, key=lambda i: (-counts[i], depth[i], synsets[i].offset))[:per_class]
        chosen += order
        labels += [c] * len(order)
    index = {g: k for k, g in enumerate(chosen)}
    src, dst = [], []
    for k, g in enumerate(chosen):
        for t in synsets[g].hypernyms + synsets[g].instance_hypernyms:
            j = index.get(pos[t])
            if j is not None and j != k:
                src.append(min(k, j))
                dst.append(max(k, j))
    n = len(chosen)
    key = np.unique(np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64))
    lo, hi = key // n, key % n
    edge_index = np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])])

    src_docs = [set(tokens(gloss_definition(synsets[g].gloss))) for g in chosen]
    tgt_docs = [set(tokens(target_text(synsets, pos, g, target_view))) for g in chosen]
    df: dict[str, int] = {}
    for doc in src_docs + tgt_docs:  # document frequency over both views (8,000 documents)
        for t in doc:
            df[t] = df.get(t, 0) + 1
    vocab = sorted(df, key=lambda t: (-df[t], t))[:vocab_size]
    col = {t: j for j, t in enumerate(vocab)}

    def bow(docs):
        x = np.zeros((n, len(vocab)), dtype=np.float32)
        for i, doc in enumerate(docs):
            idx = [col[t] for t in doc if t in col]
            if idx:
                x[i, idx] = 1.0 / len(idx)
        return x

    return {"x_source_view": bow(src_docs), "x_target_view": bow(tgt_docs), "y": np.asarray(labels, dtype=np.int64),
            "edge_index": edge_index, "vocab": vocab, "classes": classes, "offsets": [synsets[g].offset for g in chosen]}


def wordnet_open_set(path=None, known=KNOWN, unknown=UNKNOWN, per_class: int = 400, vocab_size: int = 1000,
                     target_view: str = "lemma") -> dict:
    """Source = known-class nodes with gloss features and the edges among them; target = all nodes with lemma +
    example features (+ hypernym lemmas for the lemma_hyper* views). Labels are class ids in `known + unknown`
    order (known first: 0..K-1)."""
    if target_view not in TARGET_VIEWS:
        raise ValueError(f"target_view {target_view!r}: expected one of {TARGET_VIEWS}")
    g = _build(str(path) if path else None, tuple(known), tuple(unknown), per_class, vocab_size, target_view)
    y, ei = g["y"], g["edge_index"]
    k = len(known)
    keep = np.flatnonzero(y < k)
    remap = np.full(len(y), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    mask = (remap[ei[0]] >= 0) & (remap[ei[1]] >= 0)
    es = remap[ei[:, mask]]
    return {"source": (g["x_source_view"][keep], y[keep], es), "target": (g["x_target_view"], y, ei),
            "n_known": k, "n_classes": len(known) + len(unknown), "vocab": g["vocab"], "classes": g["classes"]}
