"""fit(cfg, ctx): the whole MORE training loop. One forward call of the (possibly DDP-wrapped) module returns
z_full and z_gen; L = L_task(z_full, y) + alpha(t) L_MORE with the class prior from the whole training split.
Reports every `log_every` epochs (eval on the balanced test split, val on the balanced validation split), the
step-0 check (full == general logits) and, at the end, the merge check (merged == unmerged full logits).
`fit_merge_export` folds A, B of a trained checkpoint into W and writes a plain checkpoint."""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.more_longtail.config import Config
from methodlab.methods.more_longtail.data import LTData, build_data
from methodlab.methods.more_longtail.evaluate import evaluate, logits
from methodlab.methods.more_longtail.model import (
    Standardize, TwoPathNet, alpha_t, build_backbone, lowrank_modules, merge_lowrank, more_loss, task_loss,
    wrap_lowrank,
)

SLUG = "more_longtail"


def norm_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scalar mean/std for grey images [n, H, W], per-channel for colour [n, 3, H, W] (broadcastable)."""
    if x.dim() == 4:
        return x.mean((0, 2, 3)).view(3, 1, 1), x.std((0, 2, 3)).view(3, 1, 1)
    return x.mean().reshape(1), x.std().reshape(1)


def build_net(cfg: Config, image_shape: tuple[int, ...], n_classes: int, merged: bool = False) -> TwoPathNet:
    """The backbone (+ low-rank split unless plain or already merged) behind a Standardize layer."""
    bb = build_backbone(cfg.backbone, image_shape, n_classes, list(cfg.hidden), cfg.dropout, cfg.depth, cfg.width)
    if cfg.more.enabled and not merged:
        wrap_lowrank(bb, cfg.more.rank, cfg.more.rank_ratio, cfg.more.layers, cfg.more.a_init)
    shape = (3, 1, 1) if len(image_shape) == 3 else (1,)
    return TwoPathNet(bb, Standardize(torch.zeros(shape), torch.ones(shape)))


@torch.no_grad()
def merge_max_diff(net: TwoPathNet, x: torch.Tensor) -> tuple[TwoPathNet, float]:
    """Merged copy of `net` and max |merged logits - unmerged full logits| in float32 (TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    merged = copy.deepcopy(net).eval()
    merge_lowrank(merged.net)
    assert not lowrank_modules(merged), "low-rank modules remain after the merge"
    if len(x) == 0:
        return merged, 0.0
    zf, _ = logits(net, x)
    zm, _ = logits(merged, x)
    return merged, float((zf - zm).abs().max())


def shift_augment(x: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Translate each image of a batch ([n, H, W] or [n, ch, H, W]) by a random (dy, dx) in [-s, s]^2, zero fill."""
    s = int(max_shift)
    n = x.shape[0]
    if s <= 0 or n == 0:
        return x
    pad = torch.nn.functional.pad(x, (s, s, s, s))
    shifts = torch.randint(-s, s + 1, (n, 2), generator=gen)
    h, w = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x)
    for i in range(n):  # small batches (64-128): a Python loop over samples costs little next to two forward passes
        dy, dx = int(shifts[i, 0]), int(shifts[i, 1])
        out[i] = pad[i, ..., s - dy:s - dy + h, s - dx:s - dx + w]
    return out


def _lr_factor(cfg: Config, epoch: int) -> float:
    f = 1.0
    if cfg.warmup_epochs and epoch < cfg.warmup_epochs:
        f = (epoch + 1) / cfg.warmup_epochs
    if cfg.lr_schedule == "step":
        f *= 0.1 ** sum(epoch >= m for m in cfg.lr_milestones)
    elif cfg.lr_schedule == "cosine":
        f *= 0.5 * (1 + math.cos(math.pi * epoch / cfg.epochs))
    return f


def fit(cfg: Config, ctx: RunContext) -> dict:
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    t0 = time.perf_counter()
    data = build_data(cfg)
    c = data.n_classes
    net = build_net(cfg, data.image_shape, c)
    mean, std = norm_stats(data.x_train)
    net.std.mean.copy_(mean)
    net.std.std.copy_(std.clamp_min(1e-6))
    prior = data.prior  # the whole training split's prior, before any sharding
    model = ctx.prepare_model(net)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    aug_gen = torch.Generator().manual_seed(cfg.seed + 2)  # augmentation draws leave the global RNG (init, dropout) alone
    loader = ctx.prepare_loader(DataLoader(TensorDataset(data.x_train, data.y_train), batch_size=cfg.batch_size,
                                           shuffle=True, generator=gen))
    steps_per_epoch = max(1, len(loader))
    epoch, step = 0, 0
    zf0, zg0 = logits(net, data.x_test)
    info = {"step0_max_diff": float((zf0 - zg0).abs().max()) if len(zf0) else 0.0}

    if ctx.checkpoint is not None:  # resume at the saved epoch
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        opt.load_state_dict(ck.torch_state["opt"])
        gen.set_state(ck.torch_state["gen"])
        if "aug_gen" in ck.torch_state:
            aug_gen.set_state(ck.torch_state["aug_gen"])
        torch.set_rng_state(ck.torch_state["rng"])
        epoch, step = int(ck.state["epoch"]), int(ck.state["step"])
        info = dict(ck.state.get("info", info))
        ctx.history[:] = list(ck.extras.get("history", []))

    def writer(final: bool):
        def write(d: Path):
            save_checkpoint(d, method=SLUG, config=cfg, weights={f"net.{n}": v for n, v in net.state_dict().items()},
                            torch_state={"opt": opt.state_dict(), "gen": gen.get_state(), "rng": torch.get_rng_state(),
                                         "aug_gen": aug_gen.get_state()},
                            state=checkpoint_state(cfg, data, epoch, step, final, merged=False, info=info),
                            extras={"history": ctx.history})
        return write

    arm = cfg.arm
    last: dict = {}
    while epoch < cfg.epochs:
        for g in opt.param_groups:
            g["lr"] = cfg.lr * _lr_factor(cfg, epoch)
        model.train()
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):  # DistributedSampler (multi-worker): a new shuffle every epoch
            sampler.set_epoch(epoch)
        sums = {"task": 0.0, "more": 0.0, "alpha": 0.0, "n": 0}
        for xb, yb in loader:
            if cfg.more.schedule_unit == "epoch":
                alpha = alpha_t(epoch, cfg.epochs, cfg.more.amplitude, c, cfg.more.schedule)
            else:
                alpha = alpha_t(step, cfg.epochs * steps_per_epoch, cfg.more.amplitude, c, cfg.more.schedule)
            alpha = alpha if arm == "more" else 0.0
            if cfg.augment == "shift":
                xb = shift_augment(xb, cfg.augment_shift, aug_gen)
            z_full, z_gen = model(xb)
            l_task = task_loss(z_full, yb, prior, cfg.base_loss, cfg.la_tau)
            l_more = more_loss(z_full, z_gen, yb, prior, data.multilabel, cfg.more.discrepancy, cfg.more.weighting)
            loss = l_task + alpha * l_more if alpha > 0 else l_task
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            sums["task"] += float(l_task.detach())
            sums["more"] += float(l_more.detach())
            sums["alpha"] += alpha
            sums["n"] += 1
        epoch += 1
        done = epoch >= cfg.epochs
        if epoch % cfg.log_every == 0 or done or epoch == 1:
            n = max(sums["n"], 1)
            lt_, lm_, al_ = sums["task"] / n, sums["more"] / n, sums["alpha"] / n
            m = {"epoch": epoch, "train/step": step, "train/loss_task": lt_, "train/loss_more": lm_, "train/alpha": al_,
                 "train/more_over_task": al_ * lm_ / lt_ if lt_ > 0 else 0.0,
                 "train/finite": float(math.isfinite(lt_) and math.isfinite(lm_)),
                 "check/step0_max_diff": info["step0_max_diff"], "time/s": time.perf_counter() - t0}
            lr_mods = lowrank_modules(net)
            if lr_mods:  # size of the low-rank part: sum ||B A||_F / sum ||W_g||_F over the wrapped layers
                with torch.no_grad():
                    m["train/lowrank_rel"] = (sum(float(x.delta().norm()) for x in lr_mods)
                                              / max(sum(float(x.weight.norm()) for x in lr_mods), 1e-12))
            m.update(evaluate(net, data, "eval", "test"))
            m.update(evaluate(net, data, "val", "val"))
            if done:
                _, diff = merge_max_diff(net, data.x_test)
                info["merge_max_diff"] = diff
                m["check/merge_max_diff"] = diff
            save = done or epoch % cfg.checkpoint_every == 0
            ctx.report(m, checkpoint=writer(done) if save else None)
            last = m
    return ctx.history[-1] if ctx.history else last


def checkpoint_state(cfg: Config, data: LTData, epoch: int, step: int, final: bool, merged: bool, info: dict) -> dict:
    return {"step": step, "epoch": epoch, "final": final, "merged": merged, "n_classes": data.n_classes,
            "image_shape": list(data.image_shape), "counts": data.counts.tolist(), "groups": data.groups.tolist(),
            "class_names": data.class_names, "multilabel": data.multilabel, "arm": cfg.arm, "info": info}


def fit_merge_export(cfg: Config, ctx: RunContext) -> dict:
    """Setting `merge_export`: read `source_checkpoint`, fold B A into W, check the merged logits against the
    unmerged full logits (test split, float32, TF32 off), write a plain checkpoint (no A, B) and report."""
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    if not cfg.source_checkpoint:
        from methodlab.core import ConfigError

        raise ConfigError("merge_export needs source_checkpoint (a more_longtail checkpoint folder)",
                          field="source_checkpoint")
    src_dir = Path(cfg.source_checkpoint)
    if src_dir.is_dir() and not (src_dir / "config.json").exists():  # a run folder: its newest good checkpoint
        from methodlab.core.checkpoint import latest_checkpoint

        src_dir = latest_checkpoint(src_dir) or src_dir
    ck = load_checkpoint(src_dir, method=SLUG)
    src = Config.model_validate(ck.config)
    st = ck.state
    net = build_net(src, tuple(st["image_shape"]), int(st["n_classes"]), merged=bool(st.get("merged")))
    net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
    data = build_data(src)
    merged, diff = merge_max_diff(net, data.x_test)
    m = {"epoch": int(st.get("epoch", 0)), "train/step": int(st.get("step", 0)), "check/merge_max_diff": diff,
         "params/unmerged": sum(p.numel() for p in net.parameters()),
         "params/merged": sum(p.numel() for p in merged.parameters())}
    m.update(evaluate(merged, data, "eval", "test"))
    info = dict(st.get("info", {}), merge_max_diff=diff, source=str(cfg.source_checkpoint))

    def write(d: Path):
        save_checkpoint(d, method=SLUG, config=src, weights={f"net.{n}": v for n, v in merged.state_dict().items()},
                        state={**checkpoint_state(src, data, m["epoch"], m["train/step"], True, merged=True, info=info)},
                        extras={"history": ctx.history})

    ctx.report(m, checkpoint=write)
    return m
