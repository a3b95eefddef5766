"""Setting `benchmark`: the grid mechanisms x d x n x seeds x models (mvb at the job's K, the logistic K=1
baseline on the same DAGMA path, PC, GES), each cell one `fit` on the same data; one report per cell, the
final report holds the grid means. In-process and sequential: for Ray parallelism over cells run the grid as a
Tune search space with `grid` params over the same fields (each fit is a single-CPU function trial)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np

from methodlab.core import RunContext, save_checkpoint
from methodlab.methods.discrete_structure.config import Config

KEYS = ("eval/shd_cpdag", "eval/skeleton_precision", "eval/skeleton_recall", "eval/heldout_nll", "eval/n_edges",
        "eval/fit_seconds")


def model_overrides(model: str, K: int | None) -> dict:
    """mvb: the job's K; logistic: K=1 on the same path; pc / ges: causal-learn."""
    return {"mvb": {"model": "mvb", "K": K}, "logistic": {"model": "mvb", "K": 1},
            "pc": {"model": "pc"}, "ges": {"model": "ges"}}[model]


def run_cell(base: dict, mechanism: str, d: int, n: int, seed: int, model: str, device="cpu") -> dict:
    from methodlab.methods.discrete_structure.train import fit

    cfg = Config(**{**base, "mechanism": mechanism, "d": d, "n": n, "seed": seed,
                    **model_overrides(model, base.get("K"))})
    t0 = time.perf_counter()
    out = fit(cfg, RunContext(quiet=True, device=device))  # each cell on the job's device
    row = {"mechanism": mechanism, "d": d, "n": n, "seed": seed, "model": model, "wall_s": time.perf_counter() - t0}
    row.update({k: float(out[k]) for k in KEYS if k in out})
    return row


def fit_benchmark(cfg: Config, ctx: RunContext) -> dict:
    base = cfg.model_dump(exclude={"bench_mechanisms", "bench_d", "bench_n", "bench_seeds", "bench_models"})
    cells = list(itertools.product(cfg.bench_mechanisms, cfg.bench_d, cfg.bench_n, cfg.bench_seeds, cfg.bench_models))
    rows = []
    for i, cell in enumerate(ctx.progress(cells, desc="benchmark cells", unit="fit")):
        row = run_cell(base, *cell, device=ctx.device)
        rows.append(row)
        ctx.report({"step": i + 1, **{f"cell/{k}": v for k, v in row.items() if isinstance(v, float)},
                    "cell/index": float(i)})
    final = {"step": len(cells)}
    for model in cfg.bench_models:
        sel = [r for r in rows if r["model"] == model]
        for k in KEYS:
            vals = [r[k] for r in sel if k in r]
            if vals:
                final[f"bench/{model}/{k.split('/')[-1]}"] = float(np.mean(vals))
    final["eval/shd_cpdag"] = final.get(f"bench/{cfg.bench_models[0]}/shd_cpdag", float("nan"))

    def write(dd: Path) -> None:
        import torch

        save_checkpoint(dd, method="discrete_structure", config=cfg, weights={"n_cells": torch.tensor([len(rows)], device="cpu")},
                        state={"step": len(cells), "final": True, "metrics": final}, extras={"benchmark": rows})
    ctx.report(final, checkpoint=write)
    return ctx.history[-1]
