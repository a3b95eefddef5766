"""The settings other than `train` (the platform's convention: every entry point but `train` lives in
settings.py): `calibrate` (re-learn the per-mark thresholds of a trained checkpoint on a chosen split, then
evaluate), `evaluate` (evaluate a checkpoint with its stored thresholds) and `simulate` (write the Hawkes
generator's splits as EasyTPP JSON files, readable back with dataset=file)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from methodlab.core import ConfigError, RunContext, load_checkpoint, save_checkpoint
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.data.hawkes import hawkes_splits
from methodlab.core.paths import read_path
from methodlab.methods.mtpp_threshold.config import Config
from methodlab.methods.mtpp_threshold.data import build_data
from methodlab.methods.mtpp_threshold.evaluate import calibrate as learn, evaluate
from methodlab.methods.mtpp_threshold.train import SLUG, build_model, meta


def _load(cfg: Config, device="cpu"):
    path = read_path(cfg.checkpoint_path, "checkpoint_path", "a checkpoint directory written by the train setting, or its "
                     "run folder", "train one first: `methodlab run jobs/mtpp_threshold/hawkes.yaml --local`")
    if not (path / "config.json").exists():  # a run directory or checkpoints root: take its newest checkpoint
        found = latest_checkpoint(path)
        if found is None:
            raise ConfigError(f"{cfg.checkpoint_path}: no checkpoint in this folder (a checkpoint directory or a run "
                              "folder of the train setting expected)", field="config.checkpoint_path")
        path = found
    ck = load_checkpoint(path, method=SLUG)
    trained = Config.model_validate(ck.config)
    # the data and network come from the trained config; the evaluation knobs from this job
    keep = {k: getattr(cfg, k) for k in ("threshold_split", "threshold_candidates", "n_quantiles", "min_positives", "threshold_fallback",
                                         "n_time_samples", "bisect_tol", "bisect_max_steps", "time_eval",
                                         "max_time_eval_events", "torch_threads", "seed")}
    run_cfg = trained.model_copy(update=keep)
    data = build_data(run_cfg, device)
    with torch.device(device):  # the network is built on the run's device; the host weights load into it
        model = build_model(run_cfg, data.n_marks)
    model.load_state_dict(ck.weights)
    return run_cfg, data, model.eval(), ck


def _finish(run_cfg, data, model, thresholds, ctx: RunContext, epoch: int) -> dict:
    metrics = {"epoch": epoch, "step": epoch}
    metrics.update(evaluate(model, data, run_cfg, thresholds, split="val", time_eval=False, oracle=False, timefirst=False))
    metrics.update(evaluate(model, data, run_cfg, thresholds, split="test"))

    def write(d: Path) -> None:
        save_checkpoint(d, method=SLUG, config=run_cfg, weights=model.state_dict(),
                        state={"step": epoch, "epoch": epoch, "final": True, "best_nll": float("nan"), "bad": 0,
                               "metrics": metrics}, extras={"meta": meta(data, thresholds), "history": [metrics]})

    ctx.report(metrics, checkpoint=write)
    return metrics


def calibrate(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    run_cfg, data, model, ck = _load(cfg, ctx.device)
    return _finish(run_cfg, data, model, learn(model, data, run_cfg), ctx, int(ck.state.get("epoch", 0)))


def evaluate_only(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    run_cfg, data, model, ck = _load(cfg, ctx.device)
    thr = ck.extra("meta").get("thresholds")
    thresholds = np.zeros(data.n_marks) if thr is None else np.asarray(thr)
    return _finish(run_cfg, data, model, thresholds, ctx, int(ck.state.get("epoch", 0)))


def simulate(cfg: Config, ctx: RunContext) -> dict:
    """Generator -> EasyTPP JSON (train.json, dev.json, test.json), one object per sequence."""
    if not cfg.simulate_out:
        raise ConfigError("the simulate setting needs simulate_out (a directory)", field="config.simulate_out")
    out = ctx.write_path(cfg.simulate_out)  # relative: inside the run folder
    if ctx.is_main:  # side files: one writer (rank 0); every rank reports the same metrics
        out.mkdir(parents=True, exist_ok=True)
    tr, va, te, _ = hawkes_splits(cfg.n_train, cfg.n_val, cfg.n_test, cfg.seq_events, cfg.data_seed,
                                  poisson=cfg.dataset == "poisson")
    counts = np.zeros(5)
    for name, seqs in (("train", tr), ("dev", va), ("test", te)):
        rows = []
        for k, (t, m) in enumerate(seqs):
            rows.append({"dim_process": 5, "seq_len": len(t), "seq_idx": k, "time_since_start": t.tolist(),
                         "time_since_last_event": np.diff(t, prepend=0.0).tolist(), "type_event": m.tolist()})
            counts += np.bincount(m, minlength=5)
        if ctx.is_main:
            (out / f"{name}.json").write_text(json.dumps(rows))
    metrics = {"step": 0, "sequences": len(tr) + len(va) + len(te), "events": float(counts.sum()),
               **{f"share/m{i}": float(c / counts.sum()) for i, c in enumerate(counts)}}
    ctx.report(metrics)
    return metrics
