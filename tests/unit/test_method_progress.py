"""The long steps inside methods report through RunContext.progress (methods never import the runners):
ctsketch's sketch tree, graphrta's cSBM generation and hier_retrieval's WordNet build. A recorder stands in
for ctx.progress; the loops must pass every item through it and say what they are doing."""

from __future__ import annotations

import pytest


class Recorder:
    def __init__(self):
        self.calls: list[tuple[str, int | None, int]] = []  # (desc, total, items seen)

    def __call__(self, items, total=None, desc="", unit="item"):
        seen = 0
        for x in items:
            seen += 1
            yield x
        self.calls.append((desc, total, seen))


def test_ctsketch_sum_tree_reports_each_level():
    from methodlab.methods.ctsketch.tree import make_tree

    rec = Recorder()
    tree = make_tree("sum_N", 16, "tt", 2, 1234, 4.0, progress=rec)
    (desc, total, seen), = rec.calls
    assert "16-digit sum tree" in desc and total == seen == len(tree.sketches) == 4


def test_graphrta_csbm_generation_reports_features_and_edges():
    from methodlab.data.graphrta_csbm import csbm_pair

    rec = Recorder()
    csbm_pair(0, 300, 500, n_features=8, progress=rec)
    descs = [d for d, _, _ in rec.calls]
    assert any("300 x 8 node features" in d for d in descs) and any("500 x 8 node features" in d for d in descs)
    assert any("SBM edges of 500 nodes" in d for d in descs)
    assert all(total == seen for _, total, seen in rec.calls)  # every chunk / block went through it


def test_hier_retrieval_wordnet_build_reports_parse_and_closure():
    from methodlab.core.errors import MissingSourceError
    from methodlab.data import hierarchy, wordnet

    wordnet._PARSED.clear()
    rec = Recorder()
    try:
        h = hierarchy.wordnet_nouns(progress=rec)
    except MissingSourceError as err:
        pytest.skip(f"WordNet not installed here: {err}")
    hierarchy.relevant_pairs(h, progress=rec)
    (parse, total, seen), (closure, n, nodes) = rec.calls
    assert "data.noun" in parse and seen == total  # every line of the file
    assert "ancestor closure" in closure and n == nodes == h.n == 82_115
