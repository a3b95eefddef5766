"""strategic_causal entry points, top to bottom.

- `fit` (setting train; jobs design.yaml, design_l1.yaml): build the problem, fit the principal's design
  (causal | unaware (C = I in the constraints) | accuracy_only), evaluate it under the TRUE C beside the
  accuracy-only LR baseline, report and checkpoint. Convex designs are one step; the penalty (non-convex) design
  reports and checkpoints after every restart and resumes at the saved restart.
- `fit_best_response`: a given classifier (weights by name) -> best-response effort, feature change, q, and the
  generic convex solver's answer beside the closed form.
- `fit_uncertainty_sweep`: a fixed classifier (default: the causal l2 design, ||w|| = 1) -> effort shares and q
  of mean-variance (or acceptance-probability) individuals over `sigma_grid`, then at the config's sigma, lambda.
- `fit_audit`: which features individuals push under a deployed classifier (the Cleveland demo).
Every checkpoint holds a servable classifier (w, b, C and the feature flags).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from methodlab.core import ConfigError, RunContext, load_checkpoint, save_checkpoint
from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.data import Problem, build_problem, given_classifier
from methodlab.methods.strategic_causal.evaluate import (config_scales, effort_metrics, evaluate, grid_scales,
                                                         uncertain_effort)
from methodlab.methods.strategic_causal.model import (Design, _normalise, accuracy_only, best_response,
                                                      best_response_numeric, design_general, design_l1, design_l2,
                                                      desirable_share, gains)

SLUG = "strategic_causal"


# --------------------------------------------------------------------------------------------------
# designs
# --------------------------------------------------------------------------------------------------
def uses_penalty(cfg: Config, p: float) -> bool:
    if cfg.solver == "convex" and p not in (1.0, 2.0):
        raise ConfigError(f"no convex design for cost_p={p}: use solver auto or penalty", field="config.solver")
    return p != 1 and (cfg.solver == "penalty" or (cfg.solver == "auto" and p != 2))


def fit_design(cfg: Config, prob: Problem, kind: str, p: float, on_restart=None, state=None) -> Design:
    """The principal's program for one design kind; C in the constraints is the true C (causal) or I (unaware)."""
    X, y = prob.X_train, prob.y_train
    if kind == "accuracy_only":
        return accuracy_only(X, y)
    C = prob.C if kind == "causal" else np.eye(prob.d)
    if not np.any(prob.mutable & prob.desirable):
        raise ConfigError("the data has no desirable mutable feature: only design=accuracy_only applies",
                          field="config.design")
    if p == 1:
        des = design_l1(X, y, C, prob.abilities, prob.mutable, prob.desirable, cfg.l1_margin, cfg.slsqp_ftol)
    elif uses_penalty(cfg, p):
        des = design_general(X, y, C, prob.abilities, prob.mutable, prob.desirable, cfg.beta, p, cfg.restarts,
                             cfg.seed, start=accuracy_only(X, y), on_restart=on_restart, state=state)
    else:
        des = design_l2(X, y, C, prob.abilities, prob.mutable, prob.desirable, cfg.beta, cfg.slsqp_ftol)
    des.kind = kind
    return des


# --------------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------------
def model_record(cfg: Config, prob: Problem, des: Design) -> dict:
    """Everything the Predictor needs besides the tensors (JSON)."""
    return {"names": prob.names, "sign": prob.sign.tolist(), "mutable": prob.mutable.tolist(),
            "desirable": prob.desirable.tolist(), "abilities": prob.abilities.tolist(), "cost_p": cfg.cost_p,
            "budget": cfg.budget, "design": des.kind, "scm": cfg.scm, "risk_aversion": cfg.risk_aversion,
            "sigma_w": cfg.sigma_w, "design_info": _jsonable(des.info), "train_loss": des.train_loss}


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


def writer(cfg: Config, prob: Problem, des: Design, metrics: dict, step: int, final: bool, extra_state: dict | None = None):
    def write(d: Path) -> None:
        import torch

        host = {"dtype": torch.float64, "device": "cpu"}  # numpy method: checkpoint tensors are host data
        weights = {"w": torch.tensor(des.w, **host), "b": torch.tensor([des.b], **host),
                   "C": torch.tensor(prob.C, **host), "B": torch.tensor(prob.B, **host)}
        save_checkpoint(d, method=SLUG, config=cfg, weights=weights,
                        state={"step": step, "final": final, "metrics": metrics, **(extra_state or {})},
                        extras={"model": model_record(cfg, prob, des)})

    return write


def _resume(ctx: RunContext):
    """(state, design) of the checkpoint to resume from, or (None, None)."""
    if ctx.checkpoint is None:
        return None, None
    ck = load_checkpoint(ctx.checkpoint, method=SLUG)
    rec = ck.extra("model")
    des = Design(w=ck.weights["w"].numpy().astype(float), b=float(ck.weights["b"][0]), kind=rec["design"],
                 train_loss=float(rec.get("train_loss", float("nan"))), info=rec.get("design_info", {}))
    return ck.state, des


def _finished(cfg: Config, ctx: RunContext, prob: Problem) -> dict | None:
    """A run whose last checkpoint is final reports its metrics again (at the saved step) and stops."""
    state, des = _resume(ctx)
    if state is None or not state.get("final"):
        return None
    metrics = dict(state.get("metrics", {}))
    ctx.report(metrics, checkpoint=writer(cfg, prob, des, metrics, int(state["step"]), True))
    return metrics


# --------------------------------------------------------------------------------------------------
# setting: train (the design jobs)
# --------------------------------------------------------------------------------------------------
def fit(cfg: Config, ctx: RunContext) -> dict:
    prob = build_problem(cfg)
    done = _finished(cfg, ctx, prob)
    if done is not None:
        return done
    p = cfg.cost_p
    kind = cfg.design
    penalty = kind != "accuracy_only" and uses_penalty(cfg, p)
    state = None
    if penalty and ctx.checkpoint is not None:
        st, _ = _resume(ctx)
        state = (st or {}).get("penalty")

    def on_restart(r: int, best) -> None:  # penalty design: report + checkpoint after every restart
        des_r = _normalise(np.asarray(best[1], float), prob.X_train, prob.y_train, kind, {"restart": r})
        m = {"step": r, "train/best_value": float(best[0]), **evaluate(des_r, prob, cfg)}
        if r < cfg.restarts:
            ctx.report(m, checkpoint=writer(cfg, prob, des_r, m, r, False,
                                            {"penalty": {"restart": r, "best": [float(best[0]), list(map(float, best[1]))]}}))

    des = fit_design(cfg, prob, kind, p, on_restart=on_restart if penalty else None, state=state)
    step = cfg.restarts if penalty else 1
    metrics = {"step": step, **evaluate(des, prob, cfg)}
    if kind != "accuracy_only":
        lr = accuracy_only(prob.X_train, prob.y_train)
        base = evaluate(lr, prob, cfg, prefix="baseline_lr")
        metrics.update(base)
        metrics["eval/accuracy_loss_vs_lr"] = base["baseline_lr/accuracy"] - metrics["eval/accuracy"]
    if cfg.with_l1:
        des1 = fit_design(cfg, prob, kind, 1.0)
        metrics.update(evaluate(des1, prob, cfg, p=1.0, prefix="l1"))
    if penalty:
        metrics["train/feasible"] = float(des.info.get("feasible", False))
    ctx.report(metrics, checkpoint=writer(cfg, prob, des, metrics, step, True))
    return metrics


# --------------------------------------------------------------------------------------------------
# setting: best_response
# --------------------------------------------------------------------------------------------------
def classifier_of(cfg: Config, prob: Problem) -> Design:
    """The given classifier (cfg.weights, natural coordinates) or the config's design fitted on the data."""
    if cfg.weights is not None:
        w, b = given_classifier(cfg, prob)
        theta = np.concatenate([w, [b]])
        from methodlab.methods.strategic_causal.model import logistic_loss

        return Design(w=w, b=b, kind="given", train_loss=logistic_loss(theta, prob.X_train, prob.y_train)[0])
    return fit_design(cfg, prob, cfg.design, cfg.cost_p)


def fit_best_response(cfg: Config, ctx: RunContext) -> dict:
    prob = build_problem(cfg)
    des = classifier_of(cfg, prob)
    g = gains(prob.C, des.w)
    e = best_response(g, prob.abilities, cfg.cost_p, cfg.budget, prob.mutable)
    e_num = best_response_numeric(g, prob.abilities, cfg.cost_p, cfg.budget, prob.mutable)
    dx = prob.sign * (prob.C @ e)  # natural coordinates
    metrics = {"step": 1, "eval/accuracy": float(np.mean((prob.X_test @ des.w + des.b >= 0) == prob.y_test)),
               "eval/q": desirable_share(e, prob.desirable), "eval/solver_max_abs_diff": float(np.max(np.abs(e - e_num))),
               "eval/score_gain": float(des.w @ (prob.C @ e))}
    for j, n in enumerate(prob.names):
        metrics[f"eval/gain_{n}"] = float(g[j])
        metrics[f"eval/change_{n}"] = float(dx[j])
        if prob.mutable[j]:
            metrics[f"eval/effort_{n}"] = float(e[j])
    ctx.report(metrics, checkpoint=writer(cfg, prob, des, metrics, 1, True))
    return metrics


# --------------------------------------------------------------------------------------------------
# setting: uncertainty_sweep
# --------------------------------------------------------------------------------------------------
def fit_uncertainty_sweep(cfg: Config, ctx: RunContext) -> dict:
    prob = build_problem(cfg)
    des = classifier_of(cfg, prob)
    if cfg.normalise_weights and np.linalg.norm(des.w) > 0:
        nrm = float(np.linalg.norm(des.w))
        des = Design(w=des.w / nrm, b=des.b / nrm, kind=des.kind, train_loss=des.train_loss, info=des.info)
    acc = float(np.mean((prob.X_test @ des.w + des.b >= 0) == prob.y_test))
    shares = []
    for i, s in enumerate(cfg.sigma_grid):
        e = uncertain_effort(prob, des.w, des.b, cfg, *grid_scales(cfg, s), cfg.risk_aversion)
        m = {"step": i + 1, "eval/accuracy": acc, "sweep/sigma": float(s), **effort_metrics(e, prob, "sweep")}
        shares.append(m)
        ctx.report(m)
    e0 = uncertain_effort(prob, des.w, des.b, cfg, 0.0, 0.0, cfg.risk_aversion)
    e = uncertain_effort(prob, des.w, des.b, cfg, *config_scales(cfg), cfg.risk_aversion)
    metrics = {"step": len(cfg.sigma_grid) + 1, "eval/accuracy": acc, **effort_metrics(e, prob, "eval"),
               "eval/complete_information_q": desirable_share(e0, prob.desirable)}
    unc = cfg.uncertain_features or []
    if len(unc) == 1 and len(shares) >= 2:
        key = f"sweep/share_{unc[0]}"
        seq = [m.get(key, float("nan")) for m in shares]
        metrics["eval/uncertain_share_strictly_decreasing"] = float(all(b < a for a, b in zip(seq, seq[1:])))
        metrics["eval/uncertain_share_ratio"] = seq[-1] / seq[0] if seq[0] > 0 else float("nan")
        metrics["eval/q_at_max_sigma"] = shares[-1]["sweep/q"]
    ctx.report(metrics, checkpoint=writer(cfg, prob, des, metrics, metrics["step"], True))
    return metrics


# --------------------------------------------------------------------------------------------------
# setting: audit
# --------------------------------------------------------------------------------------------------
def fit_audit(cfg: Config, ctx: RunContext) -> dict:
    prob = build_problem(cfg)
    des = classifier_of(cfg, prob) if cfg.weights is not None else accuracy_only(prob.X_train, prob.y_train)
    g = gains(prob.C, des.w)
    e2 = best_response(g, prob.abilities, 2.0, cfg.budget, prob.mutable)
    e1 = best_response(g, prob.abilities, 1.0, cfg.budget, prob.mutable)
    metrics = {"step": 1, "eval/accuracy": float(np.mean((prob.X_test @ des.w + des.b >= 0) == prob.y_test)),
               "eval/n_pushed_l2": float(np.sum(e2 > 0)), "eval/q": desirable_share(e2, prob.desirable)}
    tot2 = float(e2.sum())
    for j, n in enumerate(prob.names):
        metrics[f"eval/gain_{n}"] = float(g[j])
        if prob.mutable[j]:
            metrics[f"eval/share_l2_{n}"] = float(e2[j] / tot2) if tot2 > 0 else float("nan")
            metrics[f"eval/l1_{n}"] = float(e1[j] > 0)
    ctx.report(metrics, checkpoint=writer(cfg, prob, des, metrics, 1, True))
    return metrics
