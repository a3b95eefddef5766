"""discrete_structure, top to bottom: data -> (two-stage candidates) -> DAGMA path / NOTEARS on the MVB objective
-> threshold + cycle removal -> CPDAG -> unpenalised refit on the DAG -> scores; checkpoints along the path and
resume at the saved step. Baselines (PC, GES) are the `model` setting of the same fit. Extra settings:
`simulate` (generator -> data + ground truth) and `equivalence_class` (enumerate the learned MEC)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint
from methodlab.methods.discrete_structure import graphs, learner
from methodlab.methods.discrete_structure import model as M
from methodlab.methods.discrete_structure.config import Config
from methodlab.methods.discrete_structure.data import build_data
from methodlab.methods.discrete_structure.evaluate import evaluate

SLUG = "discrete_structure"


def _problem(cfg: Config, x: np.ndarray, candidates, device="cpu"):
    d = x.shape[1]
    K = cfg.order(d)
    subs, mask = M.feature_plan(d, K, candidates=candidates, K_cand=K if candidates is None else d - 1)
    return learner.Problem.build(x, subs, mask, cfg.w_scale, device=device)


def stage_one(cfg: Config, x: np.ndarray, device="cpu") -> list[list[int]]:
    """BiNOTEARS stage 1: a low-order (K=1, or K=2 for dagma_interactions) fit with acyclicity -> candidates."""
    d = x.shape[1]
    k1 = 1 if cfg.stage1 == "mvb_lowK" else min(2, d - 1)
    subs, mask = M.feature_plan(d, k1)
    prob = learner.Problem.build(x, subs, mask, cfg.w_scale, device=device)
    st = learner.new_state(prob, cfg.lr)
    st = (learner.run_dagma if cfg.acyclicity == "dagma" else learner.run_notears)(prob, cfg, st)
    return learner.candidates_from(learner.weights(prob, st), cfg.stage1_threshold, cfg.max_candidates)


def _finish(cfg: Config, data, W: np.ndarray, dag: np.ndarray, C: np.ndarray, K_refit: int, t0: float, step: int,
            extra: dict | None = None, device="cpu"):
    subs, mask, RB, Rb = learner.refit(data.x_train, dag, K_refit, cfg.refit_steps, device=device)
    metrics = {"step": step, **evaluate(data, dag, C, subs, RB, Rb, learner.n_params(RB, mask)),
               "eval/fit_seconds": time.perf_counter() - t0, **(extra or {})}
    model = {"names": data.names, "dag": dag.astype(int).tolist(), "cpdag": C.astype(int).tolist(),
             "W": np.round(W, 6).tolist(), "refit_subs": [list(s) for s in subs], "refit_order": K_refit}
    return metrics, {"refit_B": RB, "refit_b": Rb, "refit_mask": torch.as_tensor(mask, device="cpu")}, model


def fit_baseline(cfg: Config, ctx: RunContext, data, t0: float) -> dict:
    from methodlab.methods.discrete_structure import baselines

    C = baselines.run_pc(data.x_train, cfg.pc_alpha) if cfg.model == "pc" else baselines.run_ges(data.x_train)
    dag = baselines.dag_extension(C)
    d = len(data.names)
    metrics, tensors, model = _finish(cfg, data, C.astype(float), dag, C, max(1, min(d - 1, int(dag.sum(0).max(initial=1)))), t0, 0,
                                      device=ctx.device)

    def write(dd: Path) -> None:
        save_checkpoint(dd, method=SLUG, config=cfg, weights=tensors, state={"step": 0, "final": True, "metrics": metrics},
                        extras={"model": model, "history": ctx.history})
    ctx.report(metrics, checkpoint=write)
    return ctx.history[-1]


def fit(cfg: Config, ctx: RunContext, hook=None) -> dict:
    ctx.limit_threads(cfg.torch_threads)  # a config only narrows the runner's threads
    dev = ctx.device  # the design, the path's parameters and Adam's state live here
    t0 = time.perf_counter()
    data = build_data(cfg)
    if cfg.model != "mvb":
        return fit_baseline(cfg, ctx, data, t0)
    d = len(data.names)
    K = cfg.order(d)

    st, candidates, elapsed0 = None, None, 0.0
    restart, best = 0, None  # best = (F, B, b, restart)
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        p = ck.extras["path"]
        candidates = p["candidates"]
        wt = {k: v.to(dev, torch.float64) for k, v in ck.weights.items()}
        # Adam's state (host tensors from the checkpoint) is loaded into an optimiser over B, b already on `dev`:
        # torch moves it to the parameters' device (learner.run_dagma)
        st = learner.PathState(B=wt["B"], b=wt["b"], stage=p["stage"], k=p["k"],
                               step=p["step"], lr=p["lr"], prev_obj=p["prev_obj"], B0=wt["B0"],
                               b0=wt["b0"], rho=p["rho"], alpha=p["alpha"], h_prev=p["h_prev"],
                               opt_state=(ck.torch_state or {}).get("optimizer"), done=p["done"],
                               s=p.get("s"), backtracks=int(p.get("backtracks", 0)), retries=int(p.get("retries", 0)))
        restart = int(p.get("restart", 0))
        if p.get("best_F") is not None:
            best = (p["best_F"], wt["best_B"], wt["best_b"], p["best_restart"])
        elapsed0 = float(p.get("elapsed", 0.0))
        ctx.history[:] = list(ck.extras.get("history", []))
    elif cfg.use_two_stage(d):
        candidates = stage_one(cfg, data.x_train, dev)
    prob = _problem(cfg, data.x_train, candidates, dev)
    if st is None:
        st = learner.new_state(prob, cfg.lr)

    def path_extras(s: learner.PathState) -> dict:
        return {"candidates": candidates, "stage": s.stage, "k": s.k, "step": s.step, "lr": s.lr, "prev_obj": s.prev_obj,
                "rho": s.rho, "alpha": s.alpha, "h_prev": s.h_prev if np.isfinite(s.h_prev) else 1e300,
                "done": s.done, "elapsed": elapsed0 + time.perf_counter() - t0, "restart": restart,
                "s": s.s, "backtracks": s.backtracks, "retries": s.retries,
                "best_F": None if best is None else best[0], "best_restart": None if best is None else best[3]}

    def writer(s: learner.PathState, metrics: dict, final_tensors=None, model=None):
        def write(dd: Path) -> None:
            w = {"B": s.B, "b": s.b, "B0": s.B0 if s.B0 is not None else s.B, "b0": s.b0 if s.b0 is not None else s.b,
                 "mask": prob.mask, **(final_tensors or {})}
            if best is not None:
                w.update(best_B=best[1], best_b=best[2])
            extras = {"path": path_extras(s), "history": ctx.history, "subs": [list(t) for t in prob.subs]}
            if model is not None:
                extras["model"] = model
            save_checkpoint(dd, method=SLUG, config=cfg, weights=w,
                            torch_state={"optimizer": s.opt_state} if s.opt_state is not None else None,
                            state={"step": s.step, "final": model is not None, "metrics": metrics}, extras=extras)
        return write

    def on_step(s: learner.PathState, info: dict) -> None:
        if not info.get("stage_end") and s.step % cfg.log_every and s.step % cfg.checkpoint_every:
            return
        W = learner.weights(prob, s)
        metrics = {"step": s.step, "stage": s.stage, "restart": restart,
                   "train/n_edges_above_omega": float((W > cfg.omega).sum()),
                   **{k: v for k, v in info.items() if k != "stage_end"}}
        save = info.get("stage_end") or s.step % cfg.checkpoint_every == 0
        ctx.report(metrics, checkpoint=writer(s, metrics) if save else None)

    run = learner.run_dagma if cfg.acyclicity == "dagma" else learner.run_notears
    while True:
        if not st.done:
            st = run(prob, cfg, st, on_step)
        if cfg.restarts > 1:  # multi-start: keep the solution with the lowest penalised objective after refit
            F = learner.selection_objective(data.x_train, M.threshold_to_dag(learner.weights(prob, st), cfg.omega),
                                            K, cfg, device=dev)
            if best is None or F < best[0] - 1e-12:
                best = (F, st.B.clone(), st.b.clone(), restart)
        if restart + 1 >= cfg.restarts:
            break
        restart += 1
        st = learner.new_state(prob, cfg.lr, init_seed=1_000 * cfg.seed + restart, init_scale=cfg.init_scale,
                               step=st.step)
    final_B, final_b = (best[1], best[2]) if best is not None else (st.B, st.b)

    W = learner.weights_of(prob, final_B)
    dag = M.threshold_to_dag(W, cfg.omega)
    C = graphs.cpdag(dag)
    metrics, tensors, model = _finish(cfg, data, W, dag, C, K, t0, st.step,
                                      {"eval/two_stage": float(candidates is not None),
                                       "eval/best_restart": float(best[3]) if best is not None else 0.0}, device=dev)
    metrics["eval/fit_seconds"] += elapsed0
    if cfg.acyclicity == "dagma" and cfg.dagma_domain == "dagma_linear":  # the official rule's domain events
        metrics["eval/domain_backtracks"], metrics["eval/domain_retries"] = float(st.backtracks), float(st.retries)
    if data.truth is not None and cfg.report_objective:
        # the penalised objective F (refit BCE + lambda * pen) at the learned DAG and at the true DAG: F(truth) <
        # F(learned) means the path stopped in a local minimum, not that the objective prefers the wrong graph
        metrics["eval/F_learned"] = learner.selection_objective(data.x_train, dag, K, cfg, device=dev)
        metrics["eval/F_truth"] = learner.selection_objective(data.x_train, np.asarray(data.truth), K, cfg, device=dev)
    if hook is not None:
        more, extra_model = hook(C, data.names, cfg)
        metrics.update(more)
        model.update(extra_model)
    ctx.report(metrics, checkpoint=writer(st, metrics, tensors, model))
    return ctx.history[-1]


def _mec(C: np.ndarray, names: list[str], cfg: Config) -> tuple[dict, dict]:
    try:
        dags = graphs.mec_dags(C)
    except ValueError:
        return {"eval/mec_size": float("nan")}, {"mec_dags": None}
    listed = [[[names[i], names[j]] for i, j in zip(*np.nonzero(A))] for A in dags[:cfg.max_mec_dags]]
    return {"eval/mec_size": float(len(dags))}, {"mec_dags": listed}


def fit_equivalence_class(cfg: Config, ctx: RunContext) -> dict:
    """Fit, then enumerate the DAGs of the learned Markov equivalence class (brute force, <= 16 undirected edges);
    the list is stored in the checkpoint's model extra (`mec_dags`), its size reported as eval/mec_size."""
    return fit(cfg, ctx, hook=_mec)
