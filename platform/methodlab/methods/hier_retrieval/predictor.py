"""Serve a trained dual encoder: a query node (id or its name / text) -> its top-k documents with cosine
scores, each marked with whether it is truly relevant (an ancestor-or-self) and at which distance.

Nearest-neighbour search is exact: the normalised document table is scored in chunks of docs with a running
top-k (benchmarks/hier_retrieval_search.py measures it on WordNet's 82,115 documents)."""

from __future__ import annotations

from typing import Literal, Union

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.hier_retrieval.config import Config

MAX_K = 1000
MAX_ENUM = 5000  # hierarchies up to this size list their node names in /schema; larger ones describe them


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query_id: int | None = Field(None, ge=0, le=100_000_000, description="Node id of the query (0 <= id < #nodes).")
    query_text: str | None = Field(None, min_length=1, max_length=256,
                                   description="A node's name ('dog.n.01'), its text, or one of its lemmas ('dog').")
    k: int | None = Field(None, ge=1, le=MAX_K, description="Documents to return (None: |R(q)|, the relevant-set size).")


class Result(BaseModel):
    doc_id: int
    score: float = Field(description="Cosine <f(q), g(d)> in [-1, 1].")
    name: str
    text: str
    relevant: bool = Field(description="d is the query or one of its ancestors.")
    distance: int | None = Field(None, description="Upward hierarchy distance q -> d when relevant.")


class Output(BaseModel):
    query_id: int
    query_name: str
    relevant_set_size: int
    results: list[Result]
    model: str = Field(description="Training recipe of the checkpoint: standard | rebalanced | pretrain_finetune | constructive.")
    model_step: int


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, F_q: torch.Tensor, G: torch.Tensor, edges: torch.Tensor, names: list[str], texts: list[str],
                 recipe: str, step: int, doc_chunk: int = 16384):
        self.F, self.G = F_q, G.to(F_q.device)
        self.device = F_q.device  # the tables' device: searches run there
        self.n = G.shape[0]
        self.names, self.texts, self.recipe, self.step, self.doc_chunk = names, texts, recipe, step, doc_chunk
        self.parents: list[list[int]] = [[] for _ in range(self.n)]
        for c, p in edges.tolist():
            self.parents[c].append(p)
        self.lookup: dict[str, int] = {}
        for i in reversed(range(self.n)):  # lemma -> its first (most frequent) sense; exact names win below
            for lemma in texts[i].split(", ") if i < len(texts) else []:
                self.lookup[lemma.lower()] = i
        for i, t in enumerate(texts):
            self.lookup.setdefault(t.lower(), i)
        for i, nm in enumerate(names):
            self.lookup[nm.lower()] = i

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The normalised tables on `device` (a str or torch.device; None: the CPU)."""
        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="hier_retrieval")
        cfg = Config.model_validate(ck.config)
        w = ck.weights
        q = w["query"]
        d = w.get("doc", q)  # shared_tables ablation: one table for both towers
        nodes = ck.extras.get("nodes", {})
        names = nodes.get("names") or [str(i) for i in range(q.shape[0])]
        texts = nodes.get("texts") or names
        recipe = ck.extras.get("recipe", cfg.recipe)
        return cls(F.normalize(q.to(device).float(), dim=-1), F.normalize(d.to(device).float(), dim=-1), w["edges"],
                   names, texts, recipe, int(ck.state.get("step", 0)))

    def input_model(self):
        """This checkpoint's request: a node id below its size, or one of its node names."""
        strict, n = ConfigDict(extra="forbid"), self.n
        k = (int | None, Field(None, ge=1, le=min(MAX_K, n), description="Documents to return (None: |R(q)|)."))
        by_id = create_model("QueryById", __config__=strict, __doc__=f"A node id of this hierarchy (0 <= id < {n}).",
                             query_id=(int, Field(..., ge=0, le=n - 1)), query_text=(None, None), k=k)
        small = len(self.lookup) <= MAX_ENUM
        text_type = Literal[tuple(sorted(self.lookup))] if small else str
        by_text = create_model("QueryByText", __config__=strict, query_id=(None, None), k=k,
                               query_text=(text_type, Field(..., min_length=1, max_length=256)),
                               __doc__="A node name, text or lemma of this hierarchy (case-insensitive)"
                                       + ("." if small else f"; {len(self.lookup)} are known, too many to list here."))
        return Union[by_id, by_text]

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        return [Input(query_id=0, k=3), Input(query_id=1)]

    def ancestors(self, v: int) -> dict[int, int]:
        """{d: distance} over R(v) by breadth-first search upward (shortest path in a DAG)."""
        dist, frontier = {v: 0}, [v]
        while frontier:
            nxt = []
            for u in frontier:
                for p in self.parents[u]:
                    if p not in dist:
                        dist[p] = dist[u] + 1
                        nxt.append(p)
            frontier = nxt
        return dist

    def _resolve(self, i: int, x: Input) -> int:
        if (x.query_id is None) == (x.query_text is None):
            raise FieldError(f"[{i}].query_id", "give exactly one of query_id or query_text")
        if x.query_id is not None:
            if x.query_id >= self.n:
                raise FieldError(f"[{i}].query_id", f"unknown node id: must be < {self.n}")
            return x.query_id
        v = self.lookup.get(x.query_text.strip().lower())
        if v is None:
            raise FieldError(f"[{i}].query_text", "unknown query: not a node name, text or lemma of this hierarchy "
                             "(lookup-table towers embed known nodes only)")
        return v

    @torch.no_grad()
    def search(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact top-k inner products of the query rows against all documents, chunked over documents."""
        best_s = torch.full((len(qv), 0), float("-inf"), device=self.G.device)
        best_i = torch.zeros((len(qv), 0), dtype=torch.long, device=self.G.device)
        for s in range(0, self.n, self.doc_chunk):
            sc = qv @ self.G[s:s + self.doc_chunk].T
            top = sc.topk(min(k, sc.shape[1]), dim=1)
            best_s = torch.cat([best_s, top.values], 1)
            best_i = torch.cat([best_i, top.indices + s], 1)
            keep = best_s.topk(min(k, best_s.shape[1]), dim=1)
            best_s, best_i = keep.values, best_i.gather(1, keep.indices)
        return best_s, best_i

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        ids = [self._resolve(i, x) for i, x in enumerate(inputs)]
        rel = [self.ancestors(v) for v in ids]
        ks = [min(self.n, x.k if x.k is not None else len(r)) for x, r in zip(inputs, rel)]
        scores, idx = self.search(self.F[torch.tensor(ids, device=self.device)], max(ks))
        scores, idx = scores.cpu(), idx.cpu()  # one copy back per batch
        out = []
        for j, (v, r, k) in enumerate(zip(ids, rel, ks)):
            res = [Result(doc_id=int(d), score=float(min(1.0, max(-1.0, s))), name=self.names[int(d)],
                          text=self.texts[int(d)], relevant=int(d) in r, distance=r.get(int(d)))
                   for s, d in zip(scores[j, :k].tolist(), idx[j, :k].tolist())]
            out.append(Output(query_id=v, query_name=self.names[v], relevant_set_size=len(r), results=res,
                              model=self.recipe, model_step=self.step))
        return out
