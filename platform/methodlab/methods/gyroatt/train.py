"""gyroatt training loop: data, model, Riemannian Adam, per-epoch evaluation, selection of the epoch
with the lowest validation loss (its test accuracy is the reported one), checkpoints and resume.

Data parallel (scaling.num_workers > 1): every rank draws the same batch order and takes its shard of each
global batch (ctx.shard); its loss is its share of the batch mean (sum * world / n) and the gradients are
averaged by ctx.average_gradients, which reduces them in one float32 bucket. No DDP wrapper: DDP would reduce
the float64 Stiefel maps' and manifold biases' gradients in a float64 bucket (and broadcast those parameters in
float64 at wrap time), which NCCL builds may refuse and the platform's collectives do not take; float32 holds
the averaged gradients to ~1e-7, far below their minibatch noise. The initial weights are identical on every
rank without a broadcast (seeded init, Stiefel maps from a seeded CPU generator). BatchNorm normalises with
each rank's shard (as DDP without SyncBatchNorm, which refuses CPU tensors); its running statistics are averaged
over the ranks before each evaluation, so every rank evaluates and checkpoints the same model."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.gyroatt.config import Config
from methodlab.methods.gyroatt.data import build_data
from methodlab.methods.gyroatt.evaluate import attention_stats, evaluate
from methodlab.methods.gyroatt.layers import RiemannianAdam
from methodlab.methods.gyroatt.model import BEST, build_model

SLUG = "gyroatt"


def batch_order(epoch: int, n: int, seed: int, device="cpu") -> torch.Tensor:
    """Deterministic per-epoch permutation, so a resumed run sees the batches of an uninterrupted one. Drawn on
    `device` (the data's): a CUDA run orders its batches differently from a CPU run of the same seed."""
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen, device=device)


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    data = build_data(cfg, device=ctx.device)
    with ctx.init_module():
        model = build_model(cfg, data.n_channels, data.n_classes)
    # float64 Stiefel maps and manifold biases move with the float32 front end; no DDP wrapper (see above)
    net = ctx.prepare_model(model, ddp=False)
    opt = RiemannianAdam(model, cfg.lr, cfg.weight_decay)
    epoch, best = 0, {"val/loss": math.inf}
    best_state = copy.deepcopy(model.state_dict())
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        model.load_state_dict({k: v for k, v in ck.weights.items() if not k.startswith(BEST)})
        best_state = {k[len(BEST):]: v for k, v in ck.weights.items() if k.startswith(BEST)}
        opt.load_state_dict(ck.torch_state["optimizer"])
        epoch, best = int(ck.state["epoch"]), dict(ck.state["best"])
        ctx.history[:] = list(ck.extras.get("history", []))

    def writer(final: bool):
        def write(d: Path) -> None:
            weights = {**model.state_dict(), **{BEST + k: v for k, v in best_state.items()}}
            save_checkpoint(d, method=SLUG, config=cfg, weights=weights, torch_state={"optimizer": opt.state_dict()},
                            state={"epoch": epoch, "step": epoch, "final": final, "best": best,
                                   "n_channels": data.n_channels, "n_samples": data.n_samples,
                                   "n_classes": data.n_classes, "sfreq": data.sfreq, "ch_names": data.ch_names},
                            extras={"history": ctx.history})
        return write

    n = len(data.y_train)
    splits = ("train", "val", "test") if cfg.eval_test else ("train", "val")
    # No autocast here: SPEC.precisions is ("fp32",) (float64 geometry). Losses are summed on the device in
    # float64 (the sum of the float32 batch losses, as a Python float sum was) and read once per epoch.
    while epoch < cfg.epochs:
        net.train()
        perm = batch_order(epoch, n, cfg.seed, ctx.device)
        loss_sum, n_batches = torch.zeros((), dtype=torch.float64, device=ctx.device), 0
        for i in range(0, n, cfg.batch_size):
            idx = perm[i:i + cfg.batch_size]
            if len(idx) < max(2, ctx.world_size):  # BatchNorm needs two trials (and every rank one)
                continue
            part = ctx.shard(idx)  # this rank's trials of the global batch (all of it on one worker)
            if ctx.world_size == 1:
                loss = F.cross_entropy(net(data.x_train[part]), data.y_train[part])
            else:  # this rank's share of the batch mean: the mean over the ranks is the whole batch's
                loss = F.cross_entropy(net(data.x_train[part]), data.y_train[part], reduction="sum") * (
                    ctx.world_size / len(idx))
            opt.zero_grad()
            ctx.backward(loss)
            ctx.average_gradients(model.parameters())  # one float32 bucket; a no-op on one worker
            ctx.optimizer_step(opt)
            loss_sum += loss.detach().double()
            n_batches += 1
        epoch += 1
        if ctx.world_size > 1:  # the global batches' losses (float32 on the wire), every epoch: all ranks agree
            loss_sum = ctx.all_reduce(loss_sum.float().reshape(1)).double()[0]  # on a non-finite one below
        if not torch.isfinite(loss_sum):  # one read per epoch (was: every step); the run still fails in this epoch
            raise FloatingPointError(f"non-finite loss at epoch {epoch - 1} ({cfg.geometry})")
        done = epoch >= cfg.epochs
        if epoch % cfg.log_every and not done:
            continue
        if ctx.world_size > 1:  # BatchNorm running statistics: the mean of the ranks' (each of its own shards)
            ctx.average_([b for k, b in model.named_buffers() if k.endswith(("running_mean", "running_var"))])
        metrics = {"epoch": epoch, "step": epoch, "train/batch_loss": float(loss_sum) / max(1, n_batches),
                   **evaluate(model, data, splits)}
        if metrics["val/loss"] < best["val/loss"]:
            best = {k: metrics[k] for k in metrics if k.startswith(("val/", "test/"))} | {"epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
        metrics.update({f"best/{k}": v for k, v in best.items()})
        if done:
            sel = copy.deepcopy(model)
            sel.load_state_dict(best_state)
            metrics.update({f"best/{k}": v for k, v in attention_stats(sel, data).items()})
        save = done or epoch % cfg.checkpoint_every == 0
        ctx.report(metrics, checkpoint=writer(done) if save else None)
    if not ctx.history or ctx.history[-1].get("epoch") != epoch:  # resumed at the very end
        ctx.report({"epoch": epoch, "step": epoch, **evaluate(model, data, splits)}, checkpoint=writer(True))
    return ctx.history[-1]
