"""Serve GraphRTA: a graph in (node features + an edge list of [src, dst] pairs), K+1 labels out, with
unknown flags. With `reprogram: true` the server first runs E' graph-reprogramming steps (Delta X and budgeted
edge flips, model frozen) on the submitted graph. Out-of-range node ids and a wrong feature width answer
FieldError (422). Node ids < n is the one condition a JSON schema cannot state: `violated_conditions` names it
for a raw body, and the served schema's description states it. No threshold anywhere: `pred` is the argmax of the returned K+1 probabilities (a
threshold-baseline checkpoint instead flags nodes whose max K-way probability is below its tau)."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.graphrta import maths
from methodlab.methods.graphrta.config import Config
from methodlab.methods.graphrta.evaluate import threshold_predict

MAX_NODES, MAX_EDGES = 5000, 100_000
Feature = Annotated[float, Field(ge=-1e6, le=1e6)]
NodeId = Annotated[int, Field(ge=0, le=MAX_NODES - 1)]
Edge = Annotated[list[NodeId], Field(min_length=2, max_length=2)]  # not a tuple: prefixItems is draft 2020-12 only
EDGE_CONDITION = "every node id in `edges` is < n, the number of rows of `x`"


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    x: list[list[Feature]] = Field(..., min_length=1, max_length=MAX_NODES,
                                   description="Node features [n, f]; f must equal the checkpoint's feature width.")
    edges: list[Edge] = Field(default_factory=list, max_length=MAX_EDGES,
                              description="[[src, dst], ...]: 0-based node ids < n; undirected. "
                                          "Empty: isolated nodes (features only).")
    reprogram: bool = Field(True, description="Run E' graph-reprogramming steps on this graph before predicting.")
    reprogram_steps: int | None = Field(None, ge=0, le=200, description="E'; None: the checkpoint's serve_reprogram_steps.")
    return_probs: bool = Field(True, description="Also return the K+1 probabilities per node.")
    seed: int = Field(0, ge=0, lt=2**31, description="Seed of the candidate non-edges.")


class Output(BaseModel):
    pred: list[int] = Field(description="Label per node in 0..K; K = unknown.")
    is_unknown: list[bool]
    probs: list[list[float]] | None = None
    unknown_class_index: int
    n_flipped_edges: int = 0
    method: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, net, n_features: int, n_known: int, bmm: maths.BetaMixture, tau):
        self.cfg, self.net, self.f, self.k, self.bmm, self.tau = cfg, net, n_features, n_known, bmm, tau
        self.device = next(net.parameters()).device

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The network and its Beta mixture on `device` (a str or torch.device; None: the CPU)."""
        from methodlab.methods.graphrta.model import build_net

        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="graphrta")
        cfg = Config.model_validate(ck.config)
        f, k = int(ck.state["n_features"]), int(ck.state["n_known"])
        with device:
            net = build_net(cfg, f, k)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        net.eval()
        return cls(cfg, net, f, k, maths.BetaMixture.from_state(ck.state["bmm"], device), ck.state["info"].get("tau"))

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: node feature rows of exactly its width f."""
        row = Annotated[list[Feature], Field(min_length=self.f, max_length=self.f)]
        return create_model(
            "Input", __base__=Input,
            __doc__=f"A graph of n nodes with {self.f} features each; {EDGE_CONDITION} (a condition JSON Schema "
                    f"cannot state). Labels 0..{self.k - 1} are known classes, {self.k} is unknown.",
            x=(list[row], Field(..., min_length=1, max_length=MAX_NODES, description=f"Node features [n, {self.f}].")))

    @staticmethod
    def violated_conditions(body: dict) -> list[str]:
        """The schema description's conditions a raw request body breaks (what JSON Schema cannot check)."""
        n = len(body.get("x") or [])
        ids = [v for e in body.get("edges") or [] if isinstance(e, list) for v in e if isinstance(v, int)]
        return [EDGE_CONDITION] if any(v >= n for v in ids) else []

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.data.graphrta_csbm import csbm_pair

        f = {"csbm": cfg.n_features, "wordnet": cfg.vocab_size}.get(cfg.data, 64)  # file data: width unknown here
        g = csbm_pair(1, 40, 40, n_features=f)["target"]
        return [Input(x=g[0].tolist(), edges=g[2].T.tolist(), reprogram=True, reprogram_steps=5),
                Input(x=g[0][:10].tolist(), edges=[[0, 1], [1, 2], [2, 3]], reprogram=False)]

    def _check(self, i: int, item: Input):
        n = len(item.x)
        if any(len(r) != self.f for r in item.x):
            bad = next(j for j, r in enumerate(item.x) if len(r) != self.f)
            raise FieldError(f"[{i}].x[{bad}]", f"has {len(item.x[bad])} features; this model takes {self.f}")
        if not all(math.isfinite(v) for r in item.x for v in r):
            raise FieldError(f"[{i}].x", "features must be finite")
        for j, edge in enumerate(item.edges):
            if min(edge) < 0 or max(edge) >= n:
                raise FieldError(f"[{i}].edges[{j}]", f"node ids must lie in 0..{n - 1} (the graph has {n} nodes)")

    def _one(self, item: Input) -> Output:
        from methodlab.methods.graphrta.reprogram import GraphReprogram

        dev = self.device  # the request's graph moves to the model's device once, here
        x = torch.tensor(item.x, dtype=torch.float32, device=dev)
        ei = torch.tensor(item.edges, dtype=torch.long, device=dev).reshape(-1, 2).T
        ei = torch.cat([ei, ei.flip(0)], 1)
        key = torch.unique(torch.minimum(ei[0], ei[1]) * len(x) + torch.maximum(ei[0], ei[1]))
        key = key[key // len(x) != key % len(x)]
        lo, hi = key // len(x), key % len(x)
        ei = torch.stack([torch.cat([lo, hi]), torch.cat([hi, lo])])
        cfg, steps = self.cfg, (self.cfg.serve_reprogram_steps if item.reprogram_steps is None else item.reprogram_steps)
        flipped = 0
        unknown_head = cfg.method != "source_threshold"
        if item.reprogram and unknown_head and steps > 0:
            rp = GraphReprogram(x, ei, budget_frac=cfg.edge_budget, nonedge_ratio=cfg.candidate_nonedge_ratio,
                                lr_feat=cfg.lr_feat, lr_adj=cfg.lr_adj, gen=torch.Generator(device=dev).manual_seed(item.seed),
                                enabled=True)
            bmm, equal = self.bmm, cfg.bmm_prior == "equal"
            for _ in range(steps):
                _, u = rp.step(self.net, lambda u_, b=bmm: b.posterior(u_, equal), w_ent=cfg.w_ent, w_adv=cfg.w_adv,
                               w_unk=cfg.w_unk, lambda_x=cfg.lambda_x, grl_split=cfg.grl_split, unk_mode=cfg.unk_loss,
                               form=cfg.adv_form)
                bmm = maths.BetaMixture(dev).fit(u, cfg.bmm_iters) if len(u) >= 4 else bmm
            x, ei, ew = rp.hard(cfg.edge_eval, cfg.flip_min_prob)
            flipped = rp.n_flips(cfg.edge_eval, cfg.flip_min_prob)
        else:
            ew = None
        with torch.no_grad():
            _, logits = self.net(x, ei, ew)
            probs = torch.nan_to_num(logits.softmax(-1), nan=0.0)
        pred = probs.argmax(-1) if unknown_head else threshold_predict(probs, float(self.tau or 0.5))
        pred, probs = pred.cpu(), probs.cpu()
        return Output(pred=pred.tolist(), is_unknown=(pred == self.k).tolist(),
                      probs=probs.tolist() if item.return_probs else None, unknown_class_index=self.k,
                      n_flipped_edges=max(flipped, 0), method=cfg.method)

    def __call__(self, inputs: list[Input]) -> list[Output]:
        for i, item in enumerate(inputs):
            self._check(i, item)
        return [self._one(item) for item in inputs]
