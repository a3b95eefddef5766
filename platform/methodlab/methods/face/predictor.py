"""Serve a FACE checkpoint: a user or item id in, its W descriptor words (+ top-k unseen items for a user) out."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.face.config import Config
from methodlab.methods.face.model import CF, FACE, greedy_distinct, norm_adj


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entity: Literal["user", "item"] = Field("user", description="Which table the id refers to.")
    id: int = Field(..., ge=0, le=2**31 - 1, description="The dataset's own id (MovieLens userId / movieId, synthetic index).")
    k: int = Field(20, ge=0, le=100, description="Top-k unseen items (users only).")
    explain: bool = Field(True, description="Include each recommended item's descriptors.")


class Item(BaseModel):
    item_id: int
    score: float
    title: str | None = None
    descriptors: list[str] | None = None


class Output(BaseModel):
    entity: str
    id: int
    descriptors: list[str] = Field(description="The entity's W descriptor words (distinct codebook tokens).")
    items: list[Item] = Field(description="Top-k unseen items for a user (training items masked); [] for an item.")


def _with_extra(model: type[BaseModel], extra: dict) -> type[BaseModel]:
    """Add the per-entity id bounds (if/then/else) to the model's JSON schema."""
    model.model_config = {**model.model_config, "json_schema_extra": extra}
    model.model_rebuild(force=True)
    return model


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, weights: dict, extras: dict, state: dict, device=None):
        self.cfg, self.state = cfg, state
        self.device = dev = torch.device(device if device is not None else "cpu")
        ents = extras["entities"]
        self.words = extras["vocab"]["words"]
        self.user_ids = np.asarray(ents["user_ids"], dtype=np.int64)
        self.item_ids = np.asarray(ents["item_ids"], dtype=np.int64)
        self.titles = ents.get("titles")
        train = np.asarray(ents["train"], dtype=np.int64).reshape(-1, 2)
        nu, ni = len(self.user_ids), len(self.item_ids)
        fw = {k[5:]: v for k, v in weights.items() if k.startswith("face.")}
        with torch.device(dev):  # built on the serving device; the checkpoint's CPU weights are copied in
            cf = CF(nu, ni, cfg.embedding_size, cfg.layer_num, cfg.cf_model,
                    norm_adj(nu, ni, train, dev) if cfg.cf_model == "lightgcn" else None)
            fm = FACE(cfg.embedding_size, cfg.word_num, cfg.word_dim, fw["P.weight"].shape[1], cfg.ffn_dim,
                      cfg.dropout, torch.zeros(1, fw["P.weight"].shape[1], device=dev),
                      normalize_input=cfg.normalize_input)
        cf.load_state_dict({k[3:]: v for k, v in weights.items() if k.startswith("cf.")})
        fm.load_state_dict(fw)
        C = weights["codebook_mapped"].to(dev)
        cf.eval(); fm.eval()
        with torch.no_grad():
            eu, ei = cf(1.0)
            self.scores = eu @ ei.T  # (users, items) on the device; a request reads its row there
            self.scores[torch.as_tensor(train[:, 0], device=dev), torch.as_tensor(train[:, 1], device=dev)] = -torch.inf
            self.desc_u = greedy_distinct(fm.encode(eu), C).cpu().numpy()
            self.desc_i = greedy_distinct(fm.encode(ei), C).cpu().numpy()
        self.u_index = {int(v): r for r, v in enumerate(self.user_ids)}
        self.i_index = {int(v): r for r, v in enumerate(self.item_ids)}

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """Load onto `device` (None: CPU; a str or torch.device)."""
        ck = load_checkpoint(directory, method="face")
        return cls(Config.model_validate(ck.config), ck.weights, ck.extras, ck.state, device)

    def input_model(self) -> type[BaseModel]:
        hi = int(max(self.user_ids.max(initial=0), self.item_ids.max(initial=0)))
        doc = (f"A user or item of this checkpoint: {len(self.user_ids)} user ids (max {int(self.user_ids.max(initial=0))}) "
               f"and {len(self.item_ids)} item ids (max {int(self.item_ids.max(initial=0))}). Ids inside the range that "
               f"the table does not hold answer 422 naming id.")
        mu, mi = int(self.user_ids.max(initial=0)), int(self.item_ids.max(initial=0))
        extra = {"if": {"properties": {"entity": {"const": "item"}}, "required": ["entity"]},
                 "then": {"properties": {"id": {"maximum": mi}}}, "else": {"properties": {"id": {"maximum": mu}}}}
        model = create_model("Input", __base__=Input, __doc__=doc,
                             id=(int, Field(..., ge=0, le=hi, description="The dataset's own id (users <= max user id, "
                                            "items <= max item id).")))
        return _with_extra(model, extra)

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        return [Input(entity="user", id=0, k=5), Input(entity="item", id=0), Input(entity="user", id=1, k=3, explain=False)]

    def _row(self, i: int, x) -> int:
        idx = self.u_index if x.entity == "user" else self.i_index
        if x.id not in idx:
            n = len(idx)
            raise FieldError(f"[{i}].id", f"unknown {x.entity} id {x.id}: this checkpoint knows {n} {x.entity} ids")
        return idx[x.id]

    @torch.no_grad()
    def __call__(self, inputs: list) -> list[Output]:
        rows = [self._row(i, x) for i, x in enumerate(inputs)]
        out = []
        for x, r in zip(inputs, rows):
            if x.entity == "item":
                out.append(Output(entity="item", id=x.id, descriptors=[self.words[j] for j in self.desc_i[r]], items=[]))
                continue
            s = self.scores[r]
            k = min(int(x.k), int(torch.isfinite(s).sum()))
            items = []
            if k > 0:
                v, j = s.topk(k)
                v, j = v.tolist(), j.tolist()  # one read back per request
                for sc, it in zip(v, j):
                    items.append(Item(item_id=int(self.item_ids[it]), score=float(sc),
                                      title=self.titles[it] if self.titles else None,
                                      descriptors=[self.words[t] for t in self.desc_i[it]] if x.explain else None))
            out.append(Output(entity="user", id=x.id, descriptors=[self.words[j] for j in self.desc_u[r]], items=items))
        return out
