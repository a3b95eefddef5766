"""gbt.fit (the default setting), top to bottom: build the comparisons -> embeddings of the chosen model -> MAP fit
of beta by L-BFGS (a strictly convex problem; no epochs) -> metrics -> one checkpoint (item ids, embeddings x, beta,
root law) that serving loads. A run resumed from its final checkpoint re-reports it without refitting."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint
from methodlab.methods.monotone_gbt import data as data_mod
from methodlab.methods.monotone_gbt.config import Config
from methodlab.methods.monotone_gbt.evaluate import evaluate
from methodlab.methods.monotone_gbt.model import embeddings, fit_map, n_identity_rows

SLUG = "monotone_gbt"


def blas_limit(cfg):
    """Narrow the BLAS / OpenMP threads for the run to cfg.blas_threads (None: leave the runner's count, which
    follows the job's cpus_per_worker). A config only narrows, never widens a pool."""
    n = cfg.blas_threads
    if not n:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn brings it
        return contextlib.nullcontext()
    limits = {p["prefix"]: int(n) for p in threadpool_info() if int(n) < p.get("num_threads", 0)}
    return threadpool_limits(limits) if limits else contextlib.nullcontext()


def model_x(kind: str, a_n: int, x_feat, identity_weight: float) -> np.ndarray:
    return embeddings(kind, a_n, x_feat, identity_weight)


def fit_model(cfg: Config, kind: str, law_name: str | None, rd: "data_mod.RunData", train=None):
    """Fit one model kind on rd (or on `train`, a subset of its comparisons). Returns (x, FitResult, law)."""
    law = data_mod.law_of(cfg, law_name)
    a_n = len(rd.item_ids)
    x = model_x(kind, a_n, rd.x_feat, cfg.identity_weight)
    lap = data_mod.prior_laplacian(cfg, rd.x_feat)  # the graph comes from the features for every kind (gbt + L too)
    res = fit_map(x, train if train is not None else rd.train, law, cfg.sigma, lap, cfg.solver, cfg.tol, cfg.max_iter)
    return x, res, law


def write_fit_checkpoint(d: Path, cfg: Config, rd, x: np.ndarray, res, metrics: dict, history: list, step: int = 1,
                         setting: str = "gbt.fit", results: dict | None = None) -> None:
    """A servable checkpoint: item ids, x, beta, theta. gbt.cv_real writes one too (its model refitted on every
    comparison) so that `methodlab serve --from-sweep` serves the best trial of a prior sweep."""
    kind = cfg.model
    a_n = len(rd.item_ids)
    save_checkpoint(d, method=SLUG, config=cfg,
                    weights={"x": torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)),
                             "beta": torch.from_numpy(np.ascontiguousarray(res.beta, dtype=np.float64)),
                             "theta": torch.from_numpy(np.ascontiguousarray(res.theta, dtype=np.float64))},
                    state={"step": step, "final": True, "kind": "gbt.fit", "setting": setting, "model": kind,
                           "root_law": cfg.root_law,
                           "n_items": a_n, "n_identity": n_identity_rows(kind, a_n),
                           "n_features": int(x.shape[0] - n_identity_rows(kind, a_n)), "metrics": metrics},
                    extras={"items": rd.item_ids, "feature_names": rd.feature_names if kind != "gbt" else [],
                            "history": history, **({"results": results} if results is not None else {})})


def fit(cfg: Config, ctx: RunContext) -> dict:
    if ctx.checkpoint is not None:  # one-shot fit: a resumed run re-reports its final checkpoint
        ck = load_checkpoint(ctx.checkpoint, method=SLUG)
        if ck.state.get("final") and ck.state.get("setting", "gbt.fit") == "gbt.fit":
            ctx.history[:] = list(ck.extras.get("history", []))
            return ck.state["metrics"]
    t0 = time.perf_counter()
    with blas_limit(cfg):
        rd = data_mod.build(cfg)
        t_data = time.perf_counter() - t0
        x, res, law = fit_model(cfg, cfg.model, None, rd)
        t_fit = time.perf_counter() - t0 - t_data
        m = {"step": 1, **evaluate(res.theta, law, rd.train, rd.test, rd.theta_true),
             "train/loss": res.loss, "train/iterations": res.iterations, "train/grad_norm": res.grad_norm,
             "train/converged": float(res.converged), "data/n_items": len(rd.item_ids), "data/n_train": len(rd.train),
             "data/n_test": len(rd.test) if rd.test is not None else 0, "time/data_s": t_data, "time/fit_s": t_fit}
    history = list(ctx.history) + [m]
    ctx.report(m, checkpoint=lambda d: write_fit_checkpoint(d, cfg, rd, x, res, m, history))
    return m
