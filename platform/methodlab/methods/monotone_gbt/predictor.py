"""Serve a gbt.fit checkpoint: pairs of item ids -> E[r | a, b] = Phi'(theta_a - theta_b), P(a preferred) = P(r > 0 | s)
and the scores. Items not in the checkpoint are scored from a feature vector given in `items`:
theta_new = x_new^T beta_feat (identity coordinate 0, the prior mean). An id neither in the checkpoint nor in `items`,
a feature vector of the wrong length or a pair of identical ids answers 422 naming the field; non-finite or
out-of-range numbers are refused by the schema (422). No uncertainty is returned; the monotonicity report for a
proposed embedding is the gbt.monotonicity_check job."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from methodlab.core import CheckpointError, FieldError, load_checkpoint
from methodlab.methods.monotone_gbt.config import Config
from methodlab.methods.monotone_gbt.rootlaw import make_law

MAX_PAIRS = 10_000
MAX_NEW_ITEMS = 10_000
MAX_ENUM = 5_000  # item ids listed in /schema up to this many
FEATURE_BOUND = 1e6

ItemId = Annotated[str, Field(min_length=1, max_length=256)]
FeatureValue = Annotated[float, Field(ge=-FEATURE_BOUND, le=FEATURE_BOUND, allow_inf_nan=False)]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pairs: list[Annotated[list[ItemId], Field(min_length=2, max_length=2)]] = Field(
        ..., min_length=1, max_length=MAX_PAIRS, description="[[a_id, b_id], ...]: 1 to 10,000 pairs of different ids.")
    items: dict[ItemId, list[FeatureValue]] | None = Field(
        None, max_length=MAX_NEW_ITEMS, description="Feature vectors (length D of the checkpoint) of items it has not seen.")
    return_scores: bool = Field(True, description="Also return the score of every item named in the request.")


class Output(BaseModel):
    pred_r: list[float] = Field(..., description="E[r | a, b] per pair, in [-1, 1] for bounded root laws.")
    p_a_preferred: list[float] = Field(..., description="P(r > 0 | a, b) per pair.")
    scores: dict[str, float] | None = Field(None, description="theta of every item named in the request.")
    model_version: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, items: list[str], theta: np.ndarray, beta_feat: np.ndarray, version: str):
        self.cfg, self.items, self.theta, self.beta_feat, self.version = cfg, items, theta, beta_feat, version
        self.index = {k: i for i, k in enumerate(items)}
        self.law = make_law(cfg.root_law, cfg.kary_k, cfg.gaussian_var)
        self.device = "cpu"  # numpy scores: answers on the host

    @property
    def n_features(self) -> int:
        return int(len(self.beta_feat))

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """`device` is taken for the common predictor interface; this predictor is numpy (SPEC.cpu_only) and
        answers on the host whatever device a deployment has."""
        ck = load_checkpoint(directory, method="monotone_gbt")
        if ck.state.get("kind") != "gbt.fit":
            raise CheckpointError(f"{directory}: a {ck.state.get('kind')!r} checkpoint; serving needs a gbt.fit one "
                                  "(methodlab run jobs/monotone_gbt/fit.yaml --local)")
        cfg = Config.model_validate(ck.config)
        beta = ck.weights["beta"].double().numpy()
        theta = ck.weights["theta"].double().numpy()
        n_id = int(ck.state["n_identity"])
        items = [str(v) for v in ck.extra("items")]
        if len(items) != len(theta):
            raise CheckpointError(f"{directory}: {len(items)} item ids for {len(theta)} scores")
        version = f"monotone_gbt-{cfg.model}-{cfg.root_law}-{cfg.data}-A{len(items)}"
        return cls(cfg, items, theta, beta[n_id:], version)

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: pair ids are its item ids (listed when at most 5,000), feature vectors have its
        length D; the conditions JSON Schema cannot state are in the docstring."""
        d, n = self.n_features, len(self.items)
        listed = n <= MAX_ENUM
        id_schema = {"type": "string", "minLength": 1, "maxLength": 256}
        if listed:
            id_schema = {"enum": list(self.items), "description": "An item id of this checkpoint (or a key of `items`)."}
        pid = Annotated[str, Field(min_length=1, max_length=256), WithJsonSchema(id_schema)]
        pair = Annotated[list[pid], Field(min_length=2, max_length=2, json_schema_extra={"uniqueItems": True})]
        vec = Annotated[list[FeatureValue], Field(min_length=d, max_length=d)]
        doc = (f"Pairs of different item ids of this checkpoint ({n} items" + ("" if listed else ", too many to list") +
               f"); an item it has not seen may be named if `items` gives its {d} features (|value| <= 1e6), and is "
               "scored x^T beta_feat. Features given for an id the checkpoint knows are checked and not used (its fitted "
               "score is). An unknown id without features or a pair of identical ids answers 422.")
        return create_model("Input", __config__=ConfigDict(extra="forbid"), __doc__=doc,
                            pairs=(list[pair], Field(..., min_length=1, max_length=MAX_PAIRS)),
                            items=(dict[ItemId, vec] | None, Field(None, max_length=MAX_NEW_ITEMS)),
                            return_scores=(bool, Field(True)))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        if cfg.data == "synthetic":
            ids, d = [str(k) for k in range(cfg.n_items)], cfg.n_features
        else:
            from methodlab.methods.monotone_gbt.data import real

            rd = real(cfg)
            ids, d = rd.item_ids, (0 if rd.x_feat is None else rd.x_feat.shape[0])
        d = 0 if cfg.model == "gbt" else d
        new = [1.0 if j == 0 else 0.0 for j in range(d)]
        return [Input(pairs=[[ids[0], ids[1]], [ids[1], ids[0]]]),
                Input(pairs=[[ids[0], "new-item"]], items={"new-item": new}, return_scores=True)]

    def _one(self, i: int, x) -> Output:
        new: dict[str, float] = {}
        for key, v in (x.items or {}).items():
            if len(v) != self.n_features:
                raise FieldError(f"[{i}].items.{key}", f"expected {self.n_features} features (this checkpoint's D), got {len(v)}")
            f = np.asarray(v, dtype=float)
            if not np.all(np.isfinite(f)):
                raise FieldError(f"[{i}].items.{key}", "features must be finite")
            if key not in self.index:
                new[key] = float(f @ self.beta_feat) if self.n_features else 0.0
        s = np.empty(len(x.pairs))
        named: dict[str, float] = {}
        for j, pair in enumerate(x.pairs):
            if len(pair) != 2:
                raise FieldError(f"[{i}].pairs[{j}]", "a pair is [a_id, b_id]")
            if pair[0] == pair[1]:
                raise FieldError(f"[{i}].pairs[{j}]", f"a pair needs two different ids, got {pair[0]!r} twice")
            th = []
            for k, key in enumerate(pair):
                if key in self.index:
                    t = float(self.theta[self.index[key]])
                elif key in new:
                    t = new[key]
                else:
                    raise FieldError(f"[{i}].pairs[{j}][{k}]", f"unknown id {key[:64]!r}: not one of this checkpoint's "
                                     f"{len(self.items)} items and not given with features in `items`")
                named[key] = t
                th.append(t)
            s[j] = th[0] - th[1]
        pred = self.law.dphi(s)
        p = self.law.p_positive(s)
        scores = None
        if x.return_scores:
            scores = {**named, **new}
        return Output(pred_r=[float(v) for v in pred], p_a_preferred=[float(v) for v in p], scores=scores,
                      model_version=self.version)

    def __call__(self, inputs: list) -> list[Output]:
        return [self._one(i, x) for i, x in enumerate(inputs)]
