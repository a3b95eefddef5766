"""Typed config of strategic_causal (methods/strategic_causal.md). Defaults are the spec's values; the designs
(causal | unaware (C = I) | accuracy_only) are settings of `design`; the settings best_response,
uncertainty_sweep and audit share this model."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from methodlab.core.method import MethodConfig

DEFAULT_SIGMA_GRID = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/accuracy"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/accuracy", "eval/q", "baseline_lr/accuracy", "eval/accuracy_loss_vs_lr")
    smoke: ClassVar[dict] = {"n": 1000, "with_l1": True}

    seed: int = Field(0, description="Seed of the data sample (numpy default_rng), restarts and Monte Carlo.")

    # --- data -------------------------------------------------------------------------------------
    scm: Literal["cvd_scm_v2", "cvd_scm_v1", "file", "cleveland"] = Field(
        "cvd_scm_v2", description="cvd_scm_v2 (unit-variance CVD SCM, default) | cvd_scm_v1 (comparison only) | "
                                  "file (your CSV + graph + flags) | cleveland (UCI table in orange3; audit demo, C = I).")
    n: int = Field(5000, ge=50, le=1_000_000, description="SCM: individuals per sample (training; a second sample "
                                                           "of the same size is the test set).")
    data_path: str | None = Field(None, description="scm=file: CSV with numeric feature columns and a binary label column.")
    label_column: str = Field("label", min_length=1, description="scm=file: the label column.")
    favourable_label: str = Field("1", description="scm=file: label value of the favourable outcome (others: 0).")
    graph_path: str | None = Field(None, description="scm=file: edge list 'cause,effect,weight' or a d x d matrix "
                                                     "(B[k, j] = effect of k on j); none: C = I.")
    flags_path: str | None = Field(None, description="scm=file: JSON {feature: {ability, sign, mutable, desirable}}.")
    test_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="scm=file / cleveland: share of rows held out.")

    # --- individuals ----------------------------------------------------------------------------
    cost_p: float = Field(2.0, ge=1.0, le=10.0, description="l_p effort cost (1: l1 as a budget; spec range {1, 1.5, 2, 3}).")
    budget: float = Field(1.0, gt=0.0, le=1e6, description="l1 budget B: sum_j e_j / a_j <= B.")
    abilities: dict[str, float] = Field(default_factory=dict, description="Per-feature ability a_j > 0 by name "
                                                                          "(others: 1, or the flags file's).")

    # --- the principal's design -----------------------------------------------------------------
    design: Literal["causal", "unaware", "accuracy_only"] = Field(
        "causal", description="causal (true C in the constraints) | unaware (C = I in the constraints, evaluated "
                              "with the true C) | accuracy_only (unpenalised logistic regression).")
    solver: Literal["auto", "convex", "penalty"] = Field(
        "auto", description="auto: the convex programs for p = 2 (sign pattern + linear beta constraint) and p = 1 "
                            "(alignment), the penalty method otherwise | penalty: the general non-convex design.")
    beta: float = Field(0.6, ge=0.0, le=1.0, description="beta-desirability target: sum_D e >= beta sum e.")
    l1_margin: float = Field(0.05, ge=0.0, le=1.0, description="kappa of the l1 alignment design: a_t g_t >= "
                                                              "(1 + kappa) a_j g_j for undesirable j.")
    restarts: int = Field(20, ge=1, le=1000, description="Starts of the non-convex penalty design (spec 5-100).")
    slsqp_ftol: float = Field(1e-12, gt=0.0, le=1e-3, description="SLSQP ftol of the convex designs.")
    with_l1: bool = Field(False, description="Also fit the l1 alignment design of the same kind (l1/* metrics).")

    # --- uncertainty ------------------------------------------------------------------------------
    uncertainty: Literal["w", "C", "full"] = Field("w", description="Beliefs: w ~ N(w, sigma_w^2 on the uncertain "
                                                                   "features) | edges of C ~ N(., sigma_c^2) | both.")
    sigma_w: float = Field(0.2, ge=0.0, le=10.0, description="Belief noise scale on classifier weights.")
    sigma_c: float = Field(0.2, ge=0.0, le=10.0, description="Belief noise scale on each edge weight of the graph.")
    risk_aversion: float = Field(1.0, ge=0.0, le=100.0, description="lambda of the mean-variance individual.")
    uncertain_features: list[str] | None = Field(None, description="Features whose weight is uncertain (None: all); "
                                                                   "claim D: ['exercise'].")
    sigma_grid: list[float] = Field(default_factory=lambda: list(DEFAULT_SIGMA_GRID),
                                    description="uncertainty_sweep: sigma values stepped through (sweep/* metrics).")
    responder_objective: Literal["mean_variance", "prob"] = Field(
        "mean_variance", description="mean_variance (semi-closed form) | prob (acceptance probability, exploratory, "
                                     "w uncertainty only).")
    mc_samples: int = Field(2000, ge=10, le=1_000_000, description="Monte Carlo draws for C / full uncertainty.")
    prob_individuals: int = Field(200, ge=1, le=100_000, description="prob objective: test individuals solved.")

    # --- a given classifier (best_response, audit, uncertainty_sweep) ---------------------------
    weights: dict[str, float] | None = Field(None, description="A deployed classifier's weights by feature name, on "
                                                               "the features as given (natural units); None: fit "
                                                               "(`design`) on the data.")
    threshold: float = Field(0.0, ge=-1e6, le=1e6, description="Given classifier: favourable iff sum_j w_j x_j >= threshold.")
    normalise_weights: bool = Field(True, description="uncertainty_sweep: scale the classifier to ||w||_2 = 1 first (claim D).")

    @field_validator("abilities")
    @classmethod
    def _abilities(cls, v: dict[str, float]) -> dict[str, float]:
        for k, a in v.items():
            if not (math.isfinite(a) and 0 < a <= 100):
                raise ValueError(f"abilities[{k!r}] = {a}: must be finite in (0, 100]")
        return v

    @field_validator("weights")
    @classmethod
    def _weights(cls, v):
        if v is not None:
            for k, w in v.items():
                if not math.isfinite(w) or abs(w) > 1e6:
                    raise ValueError(f"weights[{k!r}] = {w}: must be finite, |w| <= 1e6")
        return v

    @field_validator("sigma_grid")
    @classmethod
    def _grid(cls, v: list[float]) -> list[float]:
        if any(not math.isfinite(s) or s < 0 or s > 10 for s in v):
            raise ValueError("sigma_grid values must be finite in [0, 10]")
        return v

    @model_validator(mode="after")
    def _check(self):
        if self.scm == "file" and not self.data_path:
            raise ValueError("scm=file needs data_path (CSV), and usually graph_path and flags_path")
        if self.solver == "penalty" and self.cost_p == 1:
            raise ValueError("the penalty design needs cost_p > 1 (l1 uses the alignment design)")
        if self.responder_objective == "prob" and self.uncertainty != "w":
            raise ValueError("responder_objective=prob supports uncertainty=w only (C known)")
        if self.with_l1 and self.cost_p == 1:
            raise ValueError("with_l1 adds the l1 design to an l_p (p > 1) run; with cost_p 1 the run already is one")
        names = self.known_names()
        if names is not None:
            for label, d in (("abilities", self.abilities), ("weights", self.weights or {}),
                             ("uncertain_features", {k: 0 for k in self.uncertain_features or []})):
                bad = sorted(set(d) - set(names))
                if bad:
                    raise ValueError(f"{label}: unknown feature(s) {bad}; known: {names}")
        return self

    def known_names(self) -> list[str] | None:
        """Feature names of the built-in SCMs (None for file / cleveland: checked when the data loads)."""
        if self.scm in ("cvd_scm_v2", "cvd_scm_v1"):
            from methodlab.data.strategic_causal_scm import CVD_NAMES

            return list(CVD_NAMES)
        return None
