"""Metrics of a design under the true C, and the effort of uncertain individuals."""

from __future__ import annotations

import numpy as np

from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.data import Problem
from methodlab.methods.strategic_causal.model import (Design, desirable_share, evaluate_design,
                                                      mean_variance_response, moments_mc, moments_w, prob_response)


def evaluate(des: Design, prob: Problem, cfg: Config, p: float | None = None, prefix: str = "eval") -> dict[str, float]:
    """Test accuracy (pre-manipulation), desirable share q and effort shares under the TRUE C; for the unaware
    design also the q it believes (C = I); for l1 the gain ratio max_U ag / max_D ag, whether the feature chosen
    under the true C is desirable, and the target the l1 design aimed at (its index)."""
    p = cfg.cost_p if p is None else p
    r = evaluate_design(des, prob.C, prob.abilities, prob.mutable, prob.desirable, p, cfg.budget,
                        prob.X_test, prob.y_test, prob.names)
    out = {f"{prefix}/accuracy": r["accuracy"], f"{prefix}/q": r["q"],
           f"{prefix}/train_loss": des.train_loss,  # the fitted (unnormalised) classifier's mean logistic loss
           f"{prefix}/train_accuracy": float(np.mean((prob.X_train @ des.w + des.b >= 0) == prob.y_train))}
    for j, n in enumerate(prob.names):
        if prob.mutable[j]:
            out[f"{prefix}/share_{n}"] = r["shares"][n]
    if des.kind == "unaware":
        rb = evaluate_design(des, np.eye(prob.d), prob.abilities, prob.mutable, prob.desirable, p, cfg.budget,
                             prob.X_test, prob.y_test, prob.names)
        out[f"{prefix}/believed_q"] = rb["q"]
    if p == 1:
        out[f"{prefix}/gain_ratio"] = r["gain_ratio"]
        out[f"{prefix}/target_desirable"] = float(r["target"] is not None and prob.desirable[prob.index(r["target"])])
    if "target" in des.info:  # the l1 design's chosen target (an index into the feature names)
        out[f"{prefix}/designed_target"] = float(des.info["target"])
    return out


def belief_sigma_w(prob: Problem, cfg: Config, sigma: float) -> np.ndarray:
    """Sigma_w = sigma^2 on the diagonal entries of the uncertain features (all when None)."""
    names = cfg.uncertain_features if cfg.uncertain_features is not None else prob.names
    diag = np.array([sigma ** 2 if n in names else 0.0 for n in prob.names])
    return np.diag(diag)


def grid_scales(cfg: Config, sigma: float) -> tuple[float, float]:
    """(sigma_w, sigma_c) of one sweep point: uncertainty w varies sigma_w, C varies sigma_c, full both."""
    return (sigma if cfg.uncertainty in ("w", "full") else 0.0, sigma if cfg.uncertainty in ("C", "full") else 0.0)


def config_scales(cfg: Config) -> tuple[float, float]:
    """(sigma_w, sigma_c) of the config's own belief model."""
    return (cfg.sigma_w if cfg.uncertainty in ("w", "full") else 0.0, cfg.sigma_c if cfg.uncertainty in ("C", "full") else 0.0)


def uncertain_effort(prob: Problem, w: np.ndarray, b: float, cfg: Config, sw: float, sc: float, lam: float) -> np.ndarray:
    """Aggregate effort of uncertain individuals with weight-belief scale sw, edge-belief scale sc and risk
    aversion lam. mean_variance: one profile (it does not depend on x); prob: the sum over the first
    `prob_individuals` test individuals."""
    Sigma_w = belief_sigma_w(prob, cfg, sw)
    if cfg.responder_objective == "prob":
        X = prob.X_test[: cfg.prob_individuals]
        return np.sum([prob_response(x, prob.C, w, Sigma_w, b, prob.abilities, cfg.cost_p, cfg.budget, prob.mutable,
                                     seed=cfg.seed + i) for i, x in enumerate(X)], axis=0)
    if sc == 0.0:
        m, S = moments_w(prob.C, w, Sigma_w)
    else:
        m, S = moments_mc(prob.B_tilde, w, Sigma_w, sc, cfg.mc_samples, cfg.seed)
    return mean_variance_response(m, S, prob.abilities, lam, cfg.cost_p, cfg.budget, prob.mutable)


def effort_metrics(e: np.ndarray, prob: Problem, prefix: str) -> dict[str, float]:
    tot = float(e.sum())
    out = {f"{prefix}/q": desirable_share(e, prob.desirable), f"{prefix}/total_effort": tot}
    for j, n in enumerate(prob.names):
        if prob.mutable[j]:
            out[f"{prefix}/share_{n}"] = float(e[j] / tot) if tot > 0 else float("nan")
    return out
