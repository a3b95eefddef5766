"""Serve a deployed design: an individual's features by name -> the classifier's decision, the best-response
effort (complete information, or mean-variance under Gaussian beliefs about the weights), the induced feature
change through the causal graph, the desirable share and the decision after responding.

Features are in natural units (standardised SCM units for cvd_scm_v2); an optional classifier's weights are on
the same features (favourable iff sum_j w_j x_j >= threshold). Unknown or missing feature names, unknown weight
names, non-finite or out-of-range values answer 422 naming the field."""

from __future__ import annotations

import math
from typing import Annotated, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.model import (best_response, desirable_share, gains, mean_variance_response,
                                                      moments_w)

SLUG = "strategic_causal"
FEATURE_LIMIT = 10.0
WEIGHT_LIMIT = 100.0
THRESHOLD_LIMIT = 1e4
SIGMA_LIMIT = 10.0
LAMBDA_LIMIT = 100.0

FeatureValue = Annotated[float, Field(ge=-FEATURE_LIMIT, le=FEATURE_LIMIT, allow_inf_nan=False)]
WeightValue = Annotated[float, Field(ge=-WEIGHT_LIMIT, le=WEIGHT_LIMIT, allow_inf_nan=False)]
SigmaValue = Annotated[float, Field(ge=0.0, le=SIGMA_LIMIT, allow_inf_nan=False)]


class Classifier(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weights: dict[str, WeightValue] = Field(default_factory=dict, description="Weights by feature name (missing: 0), |w| <= 100.")
    threshold: float = Field(0.0, ge=-THRESHOLD_LIMIT, le=THRESHOLD_LIMIT, allow_inf_nan=False,
                             description="Favourable iff sum_j w_j x_j >= threshold.")


class Beliefs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sigma_w: Union[SigmaValue, dict[str, SigmaValue]] = Field(0.2, description="Std of the belief about each weight "
                                                                              "(one value, or by feature name; missing: 0).")
    risk_aversion: float = Field(1.0, ge=0.0, le=LAMBDA_LIMIT, allow_inf_nan=False, description="lambda >= 0.")


class Input(BaseModel):
    """The generic request (every checkpoint): the served schema (`input_model()`) names the checkpoint's features."""

    model_config = ConfigDict(extra="forbid")
    features: dict[str, FeatureValue] = Field(..., description="Every feature of the checkpoint by name, in [-10, 10].")
    classifier: Optional[Classifier] = Field(None, description="A classifier to respond to; none: the deployed design.")
    beliefs: Optional[Beliefs] = Field(None, description="Gaussian beliefs about the weights; none: complete information.")


class Output(BaseModel):
    score: float = Field(..., description="w^T x~ + b of the classifier (>= 0: favourable).")
    decision: int = Field(..., description="1 = favourable (low risk for the CVD SCMs), 0 otherwise.")
    best_response_effort: dict[str, float] = Field(..., description="Effort e_j >= 0 on each mutable feature (improvement direction).")
    feature_change: dict[str, float] = Field(..., description="Induced change of every feature, natural units (C e through the graph).")
    desirable_share: Optional[float] = Field(..., description="Share of effort on desirable features; null without effort.")
    post_response_decision: int = Field(..., description="Decision after the best response.")


def _ident(j: int) -> str:
    return f"f{j}"


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, rec: dict, w: np.ndarray, b: float, C: np.ndarray):
        self.cfg, self.rec = cfg, rec
        self.names: list[str] = list(rec["names"])
        self.sign = np.asarray(rec["sign"], float)
        self.mutable = np.asarray(rec["mutable"], bool)
        self.desirable = np.asarray(rec["desirable"], bool)
        self.abilities = np.asarray(rec["abilities"], float)
        self.p, self.budget = float(rec["cost_p"]), float(rec["budget"])
        self.w, self.b, self.C = w, b, C
        self._input_model = None
        self.device = "cpu"  # numpy: answers on the host

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """`device` is taken for the common predictor interface; this predictor is numpy (SPEC.cpu_only) and
        answers on the host whatever device a deployment has."""
        ck = load_checkpoint(directory, method=SLUG)
        cfg = Config.model_validate(ck.config)
        rec = ck.extra("model")
        return cls(cfg, rec, ck.weights["w"].numpy().astype(float), float(ck.weights["b"][0]),
                   ck.weights["C"].numpy().astype(float))

    # -- schema of this checkpoint ---------------------------------------------------------------
    def input_model(self) -> type[BaseModel]:
        """Features of this checkpoint required by name; weight / sigma maps restricted to its names."""
        if self._input_model is not None:
            return self._input_model
        strict = ConfigDict(extra="forbid")
        nm = self.names
        feats = create_model("Features", __config__=strict, __doc__="Every feature of the checkpoint, natural units, in [-10, 10].",
                             **{_ident(j): (FeatureValue, Field(..., alias=n)) for j, n in enumerate(nm)})
        weights = create_model("Weights", __config__=strict, __doc__="Classifier weights by feature name (missing: 0).",
                               **{_ident(j): (Optional[WeightValue], Field(None, alias=n)) for j, n in enumerate(nm)})
        sigmas = create_model("SigmaByFeature", __config__=strict, __doc__="Belief std by feature name (missing: 0).",
                              **{_ident(j): (Optional[SigmaValue], Field(None, alias=n)) for j, n in enumerate(nm)})
        clf = create_model("Classifier", __config__=strict,
                           weights=(weights, Field(default_factory=weights)),
                           threshold=(float, Field(0.0, ge=-THRESHOLD_LIMIT, le=THRESHOLD_LIMIT, allow_inf_nan=False)))
        bel = create_model("Beliefs", __config__=strict,
                           sigma_w=(Union[SigmaValue, sigmas], Field(0.2)),
                           risk_aversion=(float, Field(1.0, ge=0.0, le=LAMBDA_LIMIT, allow_inf_nan=False)))
        mut = [n for n, m in zip(nm, self.mutable) if m]
        des = [n for n, d in zip(nm, self.desirable) if d]
        doc = (f"An individual of this checkpoint ({self.rec.get('scm')}, design {self.rec.get('design')}, cost p = "
               f"{self.p:g}): features by name in natural units; effort goes to the mutable features {mut} "
               f"(desirable: {des}). A classifier, if given, is favourable iff sum_j w_j x_j >= threshold. Beliefs "
               f"make the individual mean-variance risk averse about the weights. Answers 422 only if the response "
               f"overflows (a non-finite effort).")
        self._input_model = create_model("Input", __config__=strict, __doc__=doc,
                                         features=(feats, Field(...)),
                                         classifier=(Optional[clf], Field(None)),
                                         beliefs=(Optional[bel], Field(None)))
        return self._input_model

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        names = cfg.known_names()
        if names is None:
            from methodlab.methods.strategic_causal.data import load_table

            names = load_table(cfg).names
        feats = {n: 0.0 for n in names}
        feats2 = {n: (0.5 if j % 2 else -0.3) for j, n in enumerate(names)}
        return [Input(features=feats),
                Input(features=feats2, beliefs=Beliefs(sigma_w=0.5, risk_aversion=2.0)),
                Input(features=feats2, classifier=Classifier(weights={names[-1]: -1.0}, threshold=0.5),
                      beliefs=Beliefs(sigma_w={names[0]: 1.0}))]

    # -- answering -------------------------------------------------------------------------------
    def _by_name(self, where: str, values, limit: float | None, required: bool) -> np.ndarray:
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise FieldError(where, "an object by feature name expected")
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise FieldError(f"{where}.{unknown[0]}", f"unknown feature; known: {self.names}")
        out = np.zeros(len(self.names))
        for j, n in enumerate(self.names):
            v = values.get(n)
            if v is None:
                if required:
                    raise FieldError(f"{where}.{n}", "missing: every feature of the checkpoint is required")
                continue
            if not isinstance(v, (int, float)) or not math.isfinite(v) or (limit is not None and abs(v) > limit):
                raise FieldError(f"{where}.{n}", f"must be a finite number{'' if limit is None else f' with |value| <= {limit:g}'}")
            out[j] = float(v)
        return out

    def _answer(self, i: int, item: dict) -> Output:
        where = f"[{i}]"
        x = self._by_name(f"{where}.features", item.get("features"), FEATURE_LIMIT, True)
        xt = self.sign * x
        clf = item.get("classifier")
        if clf is not None:
            w = self.sign * self._by_name(f"{where}.classifier.weights", clf.get("weights"), WEIGHT_LIMIT, False)
            t = clf.get("threshold", 0.0)
            if not math.isfinite(t) or abs(t) > THRESHOLD_LIMIT:
                raise FieldError(f"{where}.classifier.threshold", f"must be finite, |threshold| <= {THRESHOLD_LIMIT:g}")
            b = -float(t)
        else:
            w, b = self.w, self.b
        bel = item.get("beliefs")
        g = gains(self.C, w)
        if bel is None:
            e = best_response(g, self.abilities, self.p, self.budget, self.mutable)
        else:
            sw = bel.get("sigma_w", 0.2)
            if isinstance(sw, dict):
                sig = self._by_name(f"{where}.beliefs.sigma_w", sw, SIGMA_LIMIT, False)
                if np.any(sig < 0):
                    raise FieldError(f"{where}.beliefs.sigma_w", "must be >= 0")
            else:
                if not math.isfinite(sw) or not 0 <= sw <= SIGMA_LIMIT:
                    raise FieldError(f"{where}.beliefs.sigma_w", f"must be in [0, {SIGMA_LIMIT:g}]")
                sig = np.full(len(self.names), float(sw))
            lam = bel.get("risk_aversion", 1.0)
            if not math.isfinite(lam) or not 0 <= lam <= LAMBDA_LIMIT:
                raise FieldError(f"{where}.beliefs.risk_aversion", f"must be in [0, {LAMBDA_LIMIT:g}]")
            m, S = moments_w(self.C, w, np.diag(sig ** 2))
            e = mean_variance_response(m, S, self.abilities, float(lam), self.p, self.budget, self.mutable)
        change = self.C @ e
        score = float(w @ xt + b)
        post = float(w @ (xt + change) + b)
        if not (np.all(np.isfinite(e)) and np.all(np.isfinite(change)) and math.isfinite(score) and math.isfinite(post)):
            raise FieldError(where, "the best response overflows for these weights (cost p close to 1)")
        q = desirable_share(e, self.desirable)
        return Output(score=score, decision=int(score >= 0), post_response_decision=int(post >= 0),
                      best_response_effort={n: float(e[j]) for j, n in enumerate(self.names) if self.mutable[j]},
                      feature_change={n: float(self.sign[j] * change[j]) + 0.0 for j, n in enumerate(self.names)},
                      desirable_share=None if not math.isfinite(q) else q)

    def __call__(self, inputs: list) -> list[Output]:
        outs = []
        for i, x in enumerate(inputs):
            item = x.model_dump(by_alias=True) if isinstance(x, BaseModel) else dict(x)
            outs.append(self._answer(i, item))
        return outs
