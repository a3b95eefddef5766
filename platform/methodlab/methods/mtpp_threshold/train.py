"""mtpp_threshold training loop, top to bottom: data, model, Adam on the joint NLL (density by autograd
through Gamma*), validation NLL early stopping (after min_epochs), per-mark thresholds learned after training
on the threshold split, final evaluation of the method and its baselines, checkpoints and resume."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.mtpp_threshold import tpp
from methodlab.methods.mtpp_threshold.config import Config
from methodlab.methods.mtpp_threshold.data import batches, build_data, n_targets, take
from methodlab.methods.mtpp_threshold.evaluate import calibrate, evaluate, split_nll, val_mark_nll
from methodlab.methods.mtpp_threshold.model import IFNMTPP, LogNormMix

SLUG = "mtpp_threshold"


def build_model(cfg: Config, n_marks: int):
    if cfg.model == "lognormmix":
        return LogNormMix(n_marks, cfg.d_history, cfg.n_components)
    return IFNMTPP(n_marks, cfg.d_history, cfg.d_intensity, cfg.mlp_layers, cfg.tanh_parameter, cfg.activation,
                   cfg.removes_tail, cfg.eps, cfg.init)


def batch_loss(model, marks, gaps, mask, wgap, stats, cfg: Config, *, norm: float | None = None, counts=None):
    """Mean NLL per target event (+ survival per sequence when on); batch_balanced reweights every event by
    (count of the rarest mark present in the batch) / (count of its own mark).

    Data parallel (a rank's shard of the global batch): `norm` is the global batch's target count over the world
    size and `counts` the global batch's mark counts, so that DDP's mean of the ranks' losses (and gradients) is
    the whole batch's; None (one worker): both come from this batch, as always."""
    nll, surv = tpp.event_nll(model, marks, gaps, mask, stats, create_graph=True, eps=cfg.eps,
                              window_gap=wgap if cfg.survival else None)
    tmask = mask[:, 1:]
    if cfg.loss_weighting == "batch_balanced":  # masks and one-hot counts: no data-dependent shapes, no host read
        tgt = marks[:, 1:].clamp(max=model.M - 1)
        if counts is None:
            counts = mark_counts(marks, mask, model.M)
        rarest = counts.masked_fill(counts == 0, float("inf")).min()
        w = torch.where(tmask, rarest / counts[tgt], torch.zeros_like(nll))
        nll = nll * w
    total = nll.sum() + (surv.sum() if surv is not None else 0.0)
    return total / (tmask.sum().clamp_min(1) if norm is None else norm)


def make_optimizer(cfg: Config, params):
    """Adam (the spec) or AdamW at cfg.weight_decay (the research code's, issue 44)."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr)


def lr_factor(step: int, total: int, warmup: int) -> float:
    """The research code's LambdaLR factor of optimiser step `step` (from 0): linear warm-up from 0 over `warmup`
    steps, then half a cosine from 1 to 0 at `total` (clipped at 0 beyond it)."""
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def mark_counts(marks, mask, n_marks: int):
    """Target events per mark of a batch [M] (float)."""
    tgt = marks[:, 1:].clamp(max=n_marks - 1)
    return (F.one_hot(tgt, n_marks) * mask[:, 1:].unsqueeze(-1)).sum((0, 1)).float()


class Objective(torch.nn.Module):
    """The training loss as one module forward. The model has no single forward (the loss calls its parts and
    takes the density by an inner autograd.grad(create_graph=True): a double backward), so DDP wraps this: the
    training forward then runs through the wrapper and the outer backward averages the gradients over the ranks
    (the inner grad is taken w.r.t. the gaps, not the parameters, so it fires none of DDP's hooks)."""

    def __init__(self, model, stats, cfg: Config):
        super().__init__()
        self.model, self.stats, self.cfg = model, stats, cfg

    def forward(self, marks, gaps, mask, wgap, norm=None, counts=None):
        return batch_loss(self.model, marks, gaps, mask, wgap, self.stats, self.cfg, norm=norm, counts=counts)


def meta(data, thresholds) -> dict:
    """Everything a Predictor needs besides the weights (JSON)."""
    s = data.stats
    return {"n_marks": data.n_marks, "mark_names": data.mark_names, "prior": data.prior.tolist(),
            "thresholds": None if thresholds is None else np.asarray(thresholds).tolist(), "rare": data.rare,
            "stats": {"mean": s.mean, "std": s.std, "log_mean": s.log_mean, "log_std": s.log_std}}


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)  # a config only narrows the runner's threads
    seed_everything(cfg.seed)
    data = build_data(cfg, ctx.device)  # padded sequences and masks on ctx.device, moved once
    with ctx.init_module():
        model = build_model(cfg, data.n_marks)
    opt = make_optimizer(cfg, model.parameters())
    epoch, best_nll, bad, best_state, thresholds = 0, math.inf, 0, None, None
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        model.load_state_dict(ck.weights)
        opt.load_state_dict(ck.torch_state["optimizer"])  # after the model is on its device: the state follows
        best_state = ck.torch_state.get("best_state")
        epoch, best_nll, bad = int(ck.state["epoch"]), float(ck.state["best_nll"]), int(ck.state["bad"])
        ctx.history[:] = list(ck.extras.get("history", []))
        if ck.state.get("final"):  # resumed after the end: nothing left to train
            return ctx.history[-1]
    # the training forward goes through `objective` (DDP-wrapped on several ranks: gradients averaged in backward);
    # `model` is the same parameters, for evaluation, projection and checkpoints
    objective = ctx.prepare_model(Objective(model, data.stats, cfg))

    def writer(final: bool = False):
        def write(d: Path) -> None:
            save_checkpoint(d, method=SLUG, config=cfg, weights=model.state_dict(),
                            torch_state={"optimizer": opt.state_dict(), "best_state": best_state or model.state_dict()},
                            state={"step": epoch, "epoch": epoch, "best_nll": best_nll, "bad": bad, "final": final,
                                   "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"meta": meta(data, thresholds), "history": ctx.history})
        return write

    model.train()
    params = list(model.parameters())
    n_train = data.train.marks.shape[0]
    per_epoch = math.ceil(n_train / cfg.batch_size)  # optimiser steps per epoch (batches() yields this many)
    total_steps = cfg.max_epochs * per_epoch
    warmup = int(cfg.warmup_fraction * total_steps) if cfg.lr_schedule == "warmup_cosine" else 0
    stop, skipped = False, 0
    while epoch < cfg.max_epochs and not stop:
        tot, n_ev = torch.zeros((), dtype=torch.float64, device=ctx.device), 0  # summed on the device
        for k_batch, idx in enumerate(batches(n_train, cfg.batch_size, cfg.seed, epoch)):
            if cfg.lr_schedule == "warmup_cosine":  # the step index comes from (epoch, batch): resume-safe
                for group in opt.param_groups:
                    group["lr"] = cfg.lr * lr_factor(epoch * per_epoch + k_batch, total_steps, warmup)
            k = n_targets(data.train, idx)  # of the global batch, from the host lengths
            # data parallel: every rank draws the same global batch (seeded by epoch) and takes its shard (all of
            # it on one worker); the loss is normalised by the global batch's targets, so DDP's gradient mean is
            # the whole batch's gradient whatever the shards' lengths
            mine, norm, counts, scale = ctx.shard(idx), None, None, 1.0
            if ctx.world_size > 1:
                norm = max(k, 1) / ctx.world_size
                if cfg.loss_weighting == "batch_balanced":  # the rarest mark of the global batch
                    gm, _, gmask, _ = take(data.train, idx)
                    counts = mark_counts(gm, gmask, model.M)
                if len(mine) == 0:  # a last batch smaller than the world: a zero-weight row keeps DDP in step
                    mine, scale = idx[:1], 0.0
            marks, gaps, mask, wgap = take(data.train, mine)
            with ctx.autocast():
                loss = objective(marks, gaps, mask, wgap, norm, counts)
                if scale != 1.0:
                    loss = loss * scale
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            # the step's one host read: a non-finite loss or gradient would write NaN into every weight, so the
            # update is skipped (under fp16 the GradScaler makes this call itself, and lowers its scale); the
            # gradients are the ranks' mean here, so every rank skips alike
            if ctx.precision != "fp16" and not bool(
                    torch.stack([torch.isfinite(p.grad).all() for p in params if p.grad is not None]).all()):
                skipped += 1
                continue
            if cfg.grad_clip:
                ctx.clip_grad_norm_(params, cfg.grad_clip, opt)
            ctx.optimizer_step(opt)
            if cfg.nonneg_weights == "project" and isinstance(model, IFNMTPP):
                model.project_()
            tot, n_ev = tot + loss.detach().double() * k, n_ev + k
        epoch += 1
        last = epoch >= cfg.max_epochs
        if epoch % cfg.eval_every and not last:
            continue
        # validation: NLL drives early stopping; macro-F1 after calibrating thresholds is the sweep objective
        val_nll = split_nll(model, data.val, data.stats, cfg.eps)
        if epoch * per_epoch < warmup:  # warmup_cosine: no best weights and no patience during warm-up
            pass
        elif val_nll < best_nll:
            best_nll, bad, best_state = val_nll, 0, copy.deepcopy(model.state_dict())
        else:
            bad += cfg.eval_every
        stop = epoch >= cfg.min_epochs and bad >= cfg.patience
        ev = {}
        if cfg.epoch_val_f1 or stop or last:
            thresholds = calibrate(model, data, cfg)
            ev = evaluate(model, data, cfg, thresholds, split="val", time_eval=False, nll=False, oracle=False,
                          timefirst=False)
        if ctx.world_size > 1:  # the ranks' losses average to the global batch's: the curve of one worker
            tot = ctx.all_reduce(tot.float().reshape(1))
        metrics = {"epoch": epoch, "step": epoch, "train/nll": float(tot) / max(n_ev, 1), "val/nll": val_nll,
                   **({"val/best_nll": best_nll} if math.isfinite(best_nll) else {}),  # none yet during warm-up
                   **{k: v for k, v in ev.items() if "_m" not in k or "oracle" in k}}
        if cfg.lr_schedule != "constant":
            metrics["train/lr"] = float(opt.param_groups[0]["lr"])
        if isinstance(model, IFNMTPP):
            metrics["train/negative_weight_share"] = model.dead_fraction()
        metrics["train/skipped_steps"] = skipped
        if "val/mark_nll" not in metrics:  # mark part of the likelihood, -log p*(m | history): cheap, no thresholds
            metrics["val/mark_nll"] = val_mark_nll(model, data)
        save = (epoch % cfg.checkpoint_every == 0) and not (stop or last)
        ctx.report(metrics, checkpoint=writer() if save else None)

    # final: best-validation weights, thresholds learned outside back-propagation, full evaluation
    if best_state is not None:
        model.load_state_dict(best_state)
    thresholds = calibrate(model, data, cfg)
    final = {"epoch": epoch, "step": epoch, "best_epoch_nll": best_nll}
    if isinstance(model, IFNMTPP):
        final["train/negative_weight_share"] = model.dead_fraction()
    final["train/skipped_steps"] = skipped
    final.update(evaluate(model, data, cfg, thresholds, split="val", time_eval=False, oracle=False, timefirst=False))
    final.update(evaluate(model, data, cfg, thresholds, split="test"))
    for m, e in enumerate(thresholds):
        final[f"threshold/m{m}"] = float(e)
    ctx.report(final, checkpoint=writer(final=True))
    return final
