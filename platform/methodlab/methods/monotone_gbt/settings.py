"""The settings besides gbt.fit: gbt.sweep_synthetic (nMSE against N over seeds, every model on the same instances),
gbt.monotonicity_map (share of Gaussian embeddings passing the 100-Laplacian test over an A x D x alpha grid),
gbt.monotonicity_check (the test for one proposed embedding matrix) and gbt.cv_real (k-fold squared error of
E[r|s] on real comparisons). Each is a plain loop of millisecond fits; Ray's parallelism is across Tune trials
(e.g. a grid over `seed`). Each reports, and checkpoints its results (resuming skips finished parts)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import ConfigError, RunContext, load_checkpoint, save_checkpoint
from methodlab.methods.monotone_gbt import data as data_mod
from methodlab.methods.monotone_gbt.config import Config
from methodlab.methods.monotone_gbt.evaluate import sq_err
from methodlab.methods.monotone_gbt.model import (gram_with_alpha, monotonicity_test, nmse, predict_r)
from methodlab.methods.monotone_gbt.train import SLUG, blas_limit, fit_model, write_fit_checkpoint

VARIANTS = {"gbt_embedding": ("gbt_embedding", None), "gbt": ("gbt", None), "embedding": ("embedding", None),
            "binary_law": ("gbt_embedding", "binary")}


def _resume(ctx: RunContext, kind: str) -> dict:
    if ctx.checkpoint is None:
        return {}
    ck = load_checkpoint(ctx.checkpoint, method=SLUG)
    if ck.state.get("setting", ck.state.get("kind")) != kind:
        return {}
    ctx.history[:] = list(ck.extras.get("history", []))
    return dict(ck.extras.get("results", {}))


def _writer(cfg, kind: str, step: int, results: dict, history: list, final: bool, summary: np.ndarray):
    def write(d: Path) -> None:
        save_checkpoint(d, method=SLUG, config=cfg, weights={"summary": torch.from_numpy(np.atleast_1d(summary).astype(np.float64))},
                        state={"step": step, "final": final, "kind": kind}, extras={"results": results, "history": history})
    return write


# ------------------------------------------------------------------------------------------- sweep_synthetic
def sweep_instance(cfg: Config, seed: int, n: int, models: list[str]) -> dict:
    """Every model on one synthetic instance: nMSE and held-out squared error (one row of the sweep)."""
    t0 = time.perf_counter()
    rd = data_mod.synthetic(cfg, seed, n)
    row = {"seed": seed, "N": n, "n_used": len(rd.train)}
    for name in models:
        kind, law_name = VARIANTS[name]
        if kind == "embedding" and (rd.x_feat is None or rd.x_feat.shape[0] == 0):
            continue
        x, res, law = fit_model(cfg, kind, law_name, rd)
        row[f"nmse/{name}"] = nmse(res.theta, rd.theta_true)
        row[f"sq_err/{name}"] = sq_err(res.theta, rd.test, law) if rd.test is not None else float("nan")
        row[f"converged/{name}"] = bool(res.converged)
    row["time_s"] = time.perf_counter() - t0
    return row


def summarise(rows: list[dict], models: list[str]) -> dict:
    out = {}
    for name in models:
        v = np.array([r[f"nmse/{name}"] for r in rows if f"nmse/{name}" in r])
        if len(v):
            out[f"eval/nmse/{name}"] = float(v.mean())
            out[f"eval/nmse_median/{name}"] = float(np.median(v))
            out[f"eval/nmse_std/{name}"] = float(v.std())
            sq = np.array([r[f"sq_err/{name}"] for r in rows], dtype=float)  # NaN without held-out comparisons
            out[f"eval/sq_err/{name}"] = float(np.nanmean(sq)) if np.isfinite(sq).any() else float("nan")
    out["eval/n_used"] = float(np.mean([r["n_used"] for r in rows]))  # comparisons entering the loss
    if "gbt_embedding" in models and "gbt" in models:
        out["eval/lgbtd_better_share"] = float(np.mean([r["nmse/gbt_embedding"] < r["nmse/gbt"] for r in rows]))
    return out


def sweep_synthetic(cfg: Config, ctx: RunContext) -> dict:
    results = _resume(ctx, "gbt.sweep_synthetic")  # {"N": [rows]}
    seeds = range(cfg.seed, cfg.seed + cfg.sweep_seeds)
    last = {}
    with blas_limit(cfg):
        for i, n in enumerate(cfg.sweep_n):
            key = str(n)
            t0 = time.perf_counter()
            if key not in results:
                results[key] = [sweep_instance(cfg, s, n, cfg.sweep_models) for s in ctx.progress(seeds, desc=f"N={n}", unit="seed")]
            rows = results[key]
            m = {"step": i + 1, "N": n, "seeds": len(rows), **summarise(rows, cfg.sweep_models),
                 "time/s": time.perf_counter() - t0}
            name = cfg.model if cfg.root_law == "uniform" else "binary_law"
            m["eval/sq_err"] = m.get(f"eval/sq_err/{name}", float("nan"))
            m["eval/nmse"] = m.get(f"eval/nmse/{name}", float("nan"))
            done = i == len(cfg.sweep_n) - 1
            if any(h.get("N") == n for h in ctx.history):
                last = next(h for h in ctx.history if h.get("N") == n)
                continue
            summary = np.array([m.get(f"eval/nmse/{k}", np.nan) for k in cfg.sweep_models])
            history = list(ctx.history) + [m]
            ctx.report(m, checkpoint=_writer(cfg, "gbt.sweep_synthetic", i + 1, results, history, done, summary))
            last = m
    return last


# ---------------------------------------------------------------------------------------- monotonicity_map
def density_grid(cfg: Config, alpha: float) -> list[dict]:
    """Share of good Gaussian embeddings per (A, D) cell at one alpha (seeded per cell: cells are independent)."""
    grid = []
    for a_n in cfg.map_items:
        for d in cfg.map_features:
            rng = np.random.default_rng([cfg.seed, a_n, d, int(round(alpha * 1000))])
            good = [monotonicity_test(gram_with_alpha(rng.standard_normal((d, a_n)), alpha), rng, cfg.nb_iter,
                                      cfg.laplacian, cfg.mono_tol, cfg.sigma)["good"] for _ in range(cfg.map_instances)]
            grid.append({"A": a_n, "D": d, "good_share": float(np.mean(good))})
    return grid


def monotonicity_map(cfg: Config, ctx: RunContext) -> dict:
    """P(good) of Gaussian embeddings x_feat ~ N(0, 1)^{D x A}, Gram x^T x + alpha I, per (alpha, A, D) cell."""
    results = _resume(ctx, "gbt.monotonicity_map")
    last = {}
    with blas_limit(cfg):
        for i, alpha in enumerate(cfg.map_alphas):
            key = f"{alpha:g}"
            if key not in results:
                results[key] = density_grid(cfg, alpha)
            grid = results[key]
            shares = np.array([c["good_share"] for c in grid])
            m = {"step": i + 1, "alpha": alpha, "map/good_share_mean": float(shares.mean()),
                 "map/cells_all_good": float(np.mean(shares == 1.0)), "eval/sq_err": float("nan")}
            history = list(ctx.history) + [m]
            ctx.report(m, checkpoint=_writer(cfg, "gbt.monotonicity_map", i + 1, results, history,
                                             i == len(cfg.map_alphas) - 1, shares))
            last = m
    return last


# -------------------------------------------------------------------------------------- monotonicity_check
def load_embedding(cfg: Config) -> np.ndarray:
    if cfg.embedding is not None:
        x = np.array(cfg.embedding, dtype=float)
    elif cfg.embedding_path:
        p = Path(cfg.embedding_path)
        if not p.is_file():
            raise ConfigError(f"{p}: file not found", field="config.embedding_path")
        x = np.load(p, allow_pickle=False) if p.suffix == ".npy" else np.loadtxt(p, delimiter=",", ndmin=2)
    else:
        raise ConfigError("gbt.monotonicity_check needs `embedding` (D rows of A floats) or `embedding_path`",
                          field="config.embedding")
    if x.ndim != 2 or x.shape[1] < 2 or not np.all(np.isfinite(x)):
        raise ConfigError(f"embedding must be a finite D x A matrix with A >= 2, got shape {x.shape}", field="config.embedding")
    return x


def monotonicity_check(cfg: Config, ctx: RunContext) -> dict:
    """The 100-Laplacian test of one embedding x (D x A): Gram x^T x + alpha I, the prior's sigma and Laplacian."""
    x = load_embedding(cfg)
    rng = np.random.default_rng(cfg.seed)
    lap = data_mod.prior_laplacian(cfg, x)
    with blas_limit(cfg):
        res = monotonicity_test(gram_with_alpha(x, cfg.alpha), rng, cfg.nb_iter, cfg.laplacian, cfg.mono_tol, cfg.sigma, lap)
    m = {"step": 1, "mono/good": float(res["good"]), "mono/worst_violation": res["worst"],
         "mono/failing_draws": res["failing_draws"], "mono/draws": res["draws"], "mono/n_items": x.shape[1],
         "mono/n_features": x.shape[0], "eval/sq_err": float("nan")}
    if cfg.fd_check:
        with blas_limit(cfg):
            m.update(fd_report(cfg, x, rng, lap))
        res["fd"] = {k: v for k, v in m.items() if k.startswith("fd/")}
    ctx.report(m, checkpoint=_writer(cfg, "gbt.monotonicity_check", 1, {"test": res}, [m], True,
                                     np.array([float(res["good"]), res["worst"]])))
    return m


def fd_report(cfg: Config, x: np.ndarray, rng: np.random.Generator, lap=None) -> dict:
    """Finite differences against M on a random comparison set for the embedding [sqrt(alpha) I ; x]."""
    from methodlab.data.monotone_gbt_synthetic import sample_pairs
    from methodlab.methods.monotone_gbt.model import Comparisons, fd_check

    a_n = x.shape[1]
    xe = np.vstack([np.sqrt(cfg.alpha) * np.eye(a_n), x]) if cfg.alpha > 0 else x
    law = data_mod.law_of(cfg)
    theta = xe.T @ rng.standard_normal(xe.shape[0])
    a, b = sample_pairs(rng, a_n, cfg.n_comparisons)
    data = Comparisons(a, b, law.sample(theta[a] - theta[b], rng), a_n)
    pairs = [(i, j) for i in range(a_n) for j in range(a_n) if i != j]
    if len(pairs) > cfg.fd_max_pairs:
        pairs = [pairs[k] for k in rng.choice(len(pairs), cfg.fd_max_pairs, replace=False)]
    r = fd_check(xe, data, law, cfg.sigma, lap, pairs=pairs)
    return {"fd/pairs": r["pairs"], "fd/agree": r["agree"], "fd/violations": r["fd_violations"],
            "fd/m_violations": r["m_violations"], "fd/max_rel_err": r["max_rel_err"]}


# --------------------------------------------------------------------------------------------------- cv_real
def cv_real(cfg: Config, ctx: RunContext) -> dict:
    """k-fold CV over comparisons: squared error of E[r|s] on the held-out fold for every model of cv_models, also
    restricted to held-out pairs with an item never compared in the training folds (where only features can help)."""
    results = _resume(ctx, "gbt.cv_real")  # {"folds": [ {model: err, ...}, ... ]}
    folds_done = results.setdefault("folds", [])
    with blas_limit(cfg):
        rd = data_mod.build(cfg.model_copy(update={"test_frac": 0.0}))
        allc = rd.train
        order = np.random.default_rng(cfg.seed).permutation(len(allc))
        parts = np.array_split(order, cfg.folds)
        last = {}
        for k in range(len(folds_done), cfg.folds):
            t0 = time.perf_counter()
            test_idx = np.sort(parts[k])
            train_idx = np.sort(np.concatenate([p for j, p in enumerate(parts) if j != k]))
            train, test = allc.subset(train_idx), allc.subset(test_idx)
            seen = np.zeros(allc.n_items, bool)
            seen[train.a] = seen[train.b] = True
            unseen = ~(seen[test.a] & seen[test.b])
            row = {"fold": k, "n_test": len(test), "n_unseen": int(unseen.sum())}
            for name in cfg.cv_models:
                if name == "constant":
                    pred = np.zeros(len(test))
                else:
                    kind, law_name = VARIANTS[name]
                    if kind == "embedding" and rd.x_feat is None:
                        continue
                    _, res, law = fit_model(cfg, kind, law_name, rd, train=train)
                    pred = predict_r(res.theta, test.a, test.b, law)
                e = (pred - test.r) ** 2
                row[name] = float(e.mean())
                row[f"{name}/unseen"] = float(e[unseen].mean()) if unseen.any() else float("nan")
            folds_done.append(row)
            m = {"step": k + 1, "fold": k, "time/fold_s": time.perf_counter() - t0}
            for name in cfg.cv_models:
                vals = [f[name] for f in folds_done if name in f]
                if vals:
                    m[f"eval/cv/{name}"] = float(np.mean(vals))
                    m[f"eval/cv_std/{name}"] = float(np.std(vals))
                    m[f"eval/cv_unseen/{name}"] = float(np.nanmean([f[f"{name}/unseen"] for f in folds_done]))
            tuned = cfg.model if cfg.root_law == "uniform" else "binary_law"
            m["eval/sq_err"] = m.get(f"eval/cv/{tuned}", float("nan"))
            summary = np.array([m.get(f"eval/cv/{n}", np.nan) for n in cfg.cv_models])
            history = list(ctx.history) + [m]
            if k < cfg.folds - 1:
                writer = _writer(cfg, "gbt.cv_real", k + 1, results, history, False, summary)
            else:  # last fold: the model refitted on every comparison, a servable (gbt.fit-shaped) checkpoint
                x_all, res_all, _ = fit_model(cfg, cfg.model, None, rd)
                writer = (lambda d, x_all=x_all, res_all=res_all, history=history, step=k + 1:
                          write_fit_checkpoint(d, cfg, rd, x_all, res_all, history[-1], history, step=step,
                                               setting="gbt.cv_real", results=results))
            ctx.report(m, checkpoint=writer)
            last = m
    return last or (ctx.history[-1] if ctx.history else {})
