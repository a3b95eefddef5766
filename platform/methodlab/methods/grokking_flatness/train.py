"""grokking_flatness training loop, top to bottom: data, model, AdamW with decoupled weight decay,
the regularizers, measurements at log steps, checkpoints, resume, grokking summary metrics.

The reference loop for the device contract (CONTRIBUTING.md "Devices, precision, threads"): data and
model on ctx.device, the optimiser's state restored after the model is there, batches drawn where they
are used, the forward under ctx.autocast(), and scalars read only at log steps."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.grokking_flatness import measures
from methodlab.methods.grokking_flatness.config import Config
from methodlab.methods.grokking_flatness.data import build_data
from methodlab.methods.grokking_flatness.evaluate import evaluate, forward_task
from methodlab.methods.grokking_flatness.model import build_model
from methodlab.methods.grokking_flatness.summary import grokking_summary

SLUG = "grokking_flatness"


def param_groups(model, cfg: Config) -> list[dict]:
    """wd_params=weights: decay weight matrices only. Measured on the CPU preset (lr 3e-3): decaying
    LayerNorm gains, biases and embeddings as well makes train accuracy collapse for hundreds of steps."""
    if cfg.wd_params == "all":
        return [{"params": list(model.parameters()), "weight_decay": cfg.weight_decay, "decayed": True}]
    decay = lambda n, p: p.ndim >= 2 and not n.startswith("embed")  # noqa: E731
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if decay(n, p)], "weight_decay": cfg.weight_decay, "decayed": True},
            {"params": [p for n, p in named if not decay(n, p)], "weight_decay": 0.0, "decayed": False}]


def make_optimizer(model, cfg: Config):
    groups = param_groups(model, cfg)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)


def base_lr_at(step: int, cfg: Config) -> float:
    """Linear warm-up, constant, and (lr_decay_start set) a cosine anneal to lr_min shared by every arm."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_decay_start is not None and step >= cfg.lr_decay_start:
        frac = min(1.0, (step - cfg.lr_decay_start) / cfg.lr_decay_steps)
        return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * frac))
    return cfg.lr


def lr_at(step: int, cfg: Config) -> float:
    """base_lr_at; for anti_flat after cancellation: bump, then (cancel_cosine) cosine to 1e-4."""
    if cfg.reg == "anti_flat" and step >= cfg.cancel_at and cfg.cancel_at < cfg.max_steps:
        if not cfg.cancel_cosine:
            return base_lr_at(step, cfg) * cfg.lr_bump
        bumped = cfg.lr * cfg.lr_bump
        frac = (step - cfg.cancel_at) / max(1, cfg.max_steps - cfg.cancel_at)
        return 1e-4 + 0.5 * (bumped - 1e-4) * (1 + math.cos(math.pi * frac))
    return base_lr_at(step, cfg)


def batch_indices(step: int, n: int, batch: int, seed: int, device="cpu") -> torch.Tensor:
    """Deterministic epoch permutations, so a resumed run sees the same batches as an uninterrupted one.
    Drawn on `device` (the data's) by a generator there: on the CPU the same batches as ever; a GPU's
    generator gives other (equally deterministic) permutations."""
    per_epoch = math.ceil(n / batch)
    epoch, k = divmod(step, per_epoch)
    g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g, device=device)
    return perm[k * batch:(k + 1) * batch]


def is_log_step(step: int, last_log: int, cfg: Config) -> bool:
    if step == cfg.max_steps:
        return True
    if step <= cfg.log_dense_until or cfg.log_growth == 1.0:
        return step % cfg.log_every == 0
    return step - last_log >= max(cfg.log_every, int(last_log * (cfg.log_growth - 1)))


def regularizer(cfg: Config, step: int, model, logits, hidden, y) -> torch.Tensor | None:
    """The term added to the cross-entropy (None when off). phi = features at the answer position.
    Float32 maths whatever the forward's precision (no-op casts under fp32), and no host round trip."""
    if cfg.reg == "none":
        return None
    phi = (hidden if cfg.task == "digits" else hidden[:, 0]).float()  # the model returns RHS positions only
    z = (logits if cfg.task == "digits" else logits[:, 0]).float()
    n_classes = z.shape[-1] if cfg.task == "digits" else cfg.p  # answers are residues 0..p-1
    lam = cfg.lam_value
    if cfg.reg == "collapse_prevent":
        return -lam * measures.batch_cdnv(phi, y, n_classes)
    if cfg.reg == "collapse_encourage":
        return lam * measures.batch_cdnv(phi, y, n_classes)
    if step < cfg.cancel_at:  # anti_flat: pushes the model away from relative flatness
        return -lam * measures.anti_flat_term(model.W, phi, z, cfg.tau)
    return None


@torch.no_grad()
def cap_norm_(W: torch.Tensor, cap: float) -> None:
    """W *= min(1, cap / ||W||_F) in place, on the device (no host round trip to compare the norm)."""
    W.mul_((cap / W.norm()).clamp(max=1.0))


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)  # a config may narrow the job's threads, never widen them
    seed_everything(cfg.seed)
    data = build_data(cfg, ctx.device)  # train and validation tensors, moved once to the run's device
    with ctx.init_module():  # parameters are created on ctx.device
        model = build_model(cfg, data.vocab_size)
    opt = make_optimizer(model, cfg)
    batch = min(cfg.batch_size, math.ceil(len(data.y_train) / 2))

    step, history = 0, []
    if ctx.checkpoint is not None:  # the model is on its device: Adam's state follows its parameters there
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        model.load_state_dict(ck.weights)
        opt.load_state_dict(ck.torch_state["optimizer"])
        step, history = int(ck.state["step"]), list(ck.extras.get("history", []))
    ctx.history[:] = history  # curves stay continuous across a resume
    model = ctx.prepare_model(model)  # DDP when world_size > 1, torch.compile when the job asks
    core = ctx.unwrap(model)  # the plain module: state_dict, the readout W, evaluation

    def writer(final: bool = False):
        def write(d: Path) -> None:
            save_checkpoint(d, method=SLUG, config=cfg, weights=core.state_dict(),
                            torch_state={"optimizer": opt.state_dict()},
                            state={"step": step, "final": final, "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"history": ctx.history})
        return write

    last_log, stop_at = (history[-1]["step"] if history else 0), None
    for h in history:
        if cfg.stop_at_val_acc and h["val/accuracy"] >= cfg.stop_at_val_acc and stop_at is None:
            stop_at = max(h["step"] + cfg.stop_after_steps, cfg.stop_not_before)
    while step < cfg.max_steps and (stop_at is None or step < stop_at):
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
            if cfg.reg == "anti_flat" and step >= cfg.cancel_at and cfg.cancel_weight_decay is not None \
                    and group["decayed"]:
                group["weight_decay"] = cfg.cancel_weight_decay
        # data parallel: every rank draws the same global batch and takes its shard (all of it on one worker)
        idx = ctx.shard(batch_indices(step, len(data.y_train), batch, cfg.seed, ctx.device))
        xb = (data.x_train[idx], data.y_train[idx]) if cfg.task == "digits" else data.x_train[idx]
        with ctx.autocast():  # bf16 / fp16 forward when the job asks; the loss itself is float32
            loss, _, logits, hidden, y = forward_task(model, xb, cfg.task)
        reg = regularizer(cfg, step, core, logits, hidden, y)
        total = loss if reg is None else loss + reg
        opt.zero_grad(set_to_none=True)
        ctx.backward(total)
        if cfg.grad_clip is not None:
            ctx.clip_grad_norm_(model.parameters(), cfg.grad_clip, opt)
        ctx.optimizer_step(opt)
        if cfg.reg == "anti_flat":  # Frobenius cap: without it the anti-flat term diverges by inflating W
            cap_norm_(core.W, cfg.w_cap)
        step += 1

        if is_log_step(step, last_log, cfg):  # the only place scalars leave the device
            last_log = step
            metrics = {"step": step, "lr": lr, "train/batch_loss": loss.item(),
                       "reg/term": 0.0 if reg is None else reg.item(),
                       "reg/active": float(reg is not None), **evaluate(core, data, cfg)}
            metrics.update(grokking_summary(ctx.history + [metrics]))
            if stop_at is None and cfg.stop_at_val_acc and metrics["val/accuracy"] >= cfg.stop_at_val_acc:
                stop_at = max(step + cfg.stop_after_steps, cfg.stop_not_before)
            done = step >= cfg.max_steps or (stop_at is not None and step >= stop_at)
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(metrics, checkpoint=writer(final=done) if save else None)
    if not ctx.history or ctx.history[-1]["step"] != step:  # resumed at the very end: report once
        metrics = {"step": step, **evaluate(core, data, cfg)}
        metrics.update(grokking_summary(ctx.history + [metrics]))
        ctx.report(metrics, checkpoint=writer(final=True))
    return ctx.history[-1]
