"""The settings other than `train` (the platform's convention: every entry point but `train` lives in
settings.py). `constructive`: the feasibility construction (Algorithm 1; constructive.py) on the configured
hierarchy, no training: precision / recall of the threshold and recall@|R(q)| by distance, the embeddings saved
as a servable dual-encoder checkpoint. `eval`: the bucketed recall of a saved checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from methodlab.core import ConfigError, RunContext, load_checkpoint, save_checkpoint
from methodlab.methods.hier_retrieval.constructive import construct, theory_dim, threshold_quality
from methodlab.methods.hier_retrieval.data import build_data
from methodlab.methods.hier_retrieval.evaluate import bucket_counts, evaluate, summarise


def fit_constructive(cfg, ctx: RunContext) -> dict:
    """Setting 'constructive': no training. dim = constructive_dim or ceil(C * s * ln m)."""
    ctx.limit_threads(cfg.torch_threads)
    data = build_data(cfg, ctx.progress, device=ctx.device)
    dim = cfg.constructive_dim or theory_dim(data, cfg.constructive_c)
    f_raw, g = construct(data, dim, cfg.seed)
    thr = threshold_quality(f_raw, g, data, data.eval_q, cfg.constructive_threshold, cfg.eval_chunk)
    fq = F.normalize(f_raw, dim=-1)  # ranking per query is unchanged by normalising f
    metrics = {"step": 0, "constructive/dim": dim, "constructive/s": data.s, "constructive/m": data.m,
               "constructive/theory_dim_c1": data.s * math.log(data.m),
               "constructive/precision": thr["precision"], "constructive/recall": thr["recall"]}
    for prefix, qs in (("val", data.val_q), ("eval", data.eval_q)):
        metrics.update(summarise(*bucket_counts(fq, g, data, qs, cfg.eval_chunk), len(qs), cfg, prefix))

    def write(d: Path) -> None:
        edges = torch.stack([torch.from_numpy(data.h.child), torch.from_numpy(data.h.parent)], 1)
        save_checkpoint(d, method="hier_retrieval", config=cfg, weights={"query": f_raw, "doc": g, "edges": edges},
                        state={"step": 0, "final": True, "metrics": metrics},
                        extras={"nodes": {"names": data.h.names, "texts": data.h.texts}, "recipe": "constructive"})
    ctx.report(metrics, checkpoint=write)
    return metrics


def fit_eval(cfg, ctx: RunContext) -> dict:
    """Setting 'eval': bucketed recall of a saved checkpoint on its config's evaluation queries."""
    from methodlab.methods.hier_retrieval.config import Config
    from methodlab.methods.hier_retrieval.model import DualEncoder

    if not cfg.eval_from:
        raise ConfigError("setting 'eval' needs config.eval_from = a checkpoint directory", field="config.eval_from")
    ctx.limit_threads(cfg.torch_threads)
    ck = load_checkpoint(cfg.eval_from, method="hier_retrieval")
    trained = Config.model_validate(ck.config)
    data = build_data(trained, device=ctx.device)
    with ctx.init_module():
        model = DualEncoder(data.m, trained.dim, trained.std, trained.shared_tables)
    model = ctx.prepare_model(model)
    ctx.unwrap(model).load_tables(ck.weights)
    metrics = {"step": int(ck.state.get("step", 0)), **evaluate(model, data, trained, data.eval_q, "eval"),
               **evaluate(model, data, trained, data.val_q, "val")}
    ctx.report(metrics)
    return metrics
