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
        wrap_lowrank(bb, cfg.more.rank, cfg.more.rank_ratio, cfg.more.layers, cfg.more.a_init, cfg.more.b_init_std)
    shape = (3, 1, 1) if len(image_shape) == 3 else (1,)
    dev = next(bb.parameters()).device  # where the backbone was built (ctx.init_module() in a run)
    return TwoPathNet(bb, Standardize(torch.zeros(shape, device=dev), torch.ones(shape, device=dev)))


@torch.no_grad()
def merge_max_diff(net: TwoPathNet, x: torch.Tensor) -> tuple[TwoPathNet, float]:
    """Merged copy of `net` and max |merged logits - unmerged full logits| in float32 (on a GPU, TF32 is the
    runner's scaling.tf32, off by default: with it on, this check measures TF32 rounding too)."""
    merged = copy.deepcopy(net).eval()
    merge_lowrank(merged.net)
    assert not lowrank_modules(merged), "low-rank modules remain after the merge"
    if len(x) == 0:
        return merged, 0.0
    zf, _ = logits(net, x)
    zm, _ = logits(merged, x)
    return merged, float((zf - zm).abs().max())


def draw_shifts(n: int, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """[n, 2] random (dy, dx) in [-s, s]^2 from `gen`, on the generator's device (one draw per global batch: under
    data parallelism every rank draws the same shifts and shards them with the batch's indices)."""
    s = int(max_shift)
    return torch.randint(-s, s + 1, (n, 2), generator=gen, device=gen.device)


def apply_shifts(x: torch.Tensor, shifts: torch.Tensor, max_shift: int) -> torch.Tensor:
    """Translate image i of a batch ([n, H, W] or [n, ch, H, W]) by shifts[i] = (dy, dx), zero fill."""
    s = int(max_shift)
    n = x.shape[0]
    if s <= 0 or n == 0:
        return x
    pad = torch.nn.functional.pad(x, (s, s, s, s))
    dev = x.device
    shifts = shifts.to(dev)
    h, w = x.shape[-2], x.shape[-1]
    # one gather on x's device (no per-sample host read): out[i, ..., r, c] = pad[i, ..., s - dy_i + r, s - dx_i + c]
    rows = (s - shifts[:, 0])[:, None] + torch.arange(h, device=dev)[None]  # [n, h]
    cols = (s - shifts[:, 1])[:, None] + torch.arange(w, device=dev)[None]  # [n, w]
    i = torch.arange(n, device=dev)
    if x.dim() == 3:
        return pad[i[:, None, None], rows[:, :, None], cols[:, None, :]]
    ch = torch.arange(x.shape[1], device=dev)
    return pad[i[:, None, None, None], ch[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]]


def shift_augment(x: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Translate each image of a batch ([n, H, W] or [n, ch, H, W]) by a random (dy, dx) in [-s, s]^2, zero fill."""
    if int(max_shift) <= 0 or x.shape[0] == 0:
        return x
    return apply_shifts(x, draw_shifts(x.shape[0], max_shift, gen), max_shift)


def _lr_factor(cfg: Config, epoch: int) -> float:
    f = 1.0
    if cfg.warmup_epochs and epoch < cfg.warmup_epochs:
        f = (epoch + 1) / cfg.warmup_epochs
    if cfg.lr_schedule == "step":
        f *= 0.1 ** sum(epoch >= m for m in cfg.lr_milestones)
    elif cfg.lr_schedule == "cosine":
        f *= 0.5 * (1 + math.cos(math.pi * epoch / cfg.epochs))
    return f


def low_rank_params(net: TwoPathNet) -> list[torch.nn.Parameter]:
    return [p for m in lowrank_modules(net) for p in (m.A, m.B)]


def build_optimizer(cfg: Config, model: torch.nn.Module, net: TwoPathNet) -> torch.optim.SGD:
    """One SGD over every parameter (the paper's reading); A and B in their own group only when an item-4
    hypothesis gives them another learning rate or weight decay (one group otherwise, so checkpoints of the
    default recipe keep their optimiser layout)."""
    mc = cfg.more
    tail = low_rank_params(net)
    wd_tail = cfg.weight_decay if mc.lowrank_weight_decay is None else mc.lowrank_weight_decay
    if not tail or (mc.lowrank_lr_mult == 1.0 and wd_tail == cfg.weight_decay):
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    ids = {id(p) for p in tail}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return torch.optim.SGD([{"params": rest, "lr_mult": 1.0},
                            {"params": tail, "lr_mult": mc.lowrank_lr_mult, "weight_decay": wd_tail}],
                           lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    t0 = time.perf_counter()
    dev = ctx.device
    data = build_data(cfg, device=dev)  # every split on the run's device, copied once
    c = data.n_classes
    with ctx.init_module():
        net = build_net(cfg, data.image_shape, c)
    mean, std = norm_stats(data.x_train)
    net.std.mean.copy_(mean)
    net.std.std.copy_(std.clamp_min(1e-6))
    prior = data.prior  # the whole training split's prior, before any sharding (on the run's device)
    model = ctx.prepare_model(net)
    net = ctx.unwrap(model)
    opt = build_optimizer(cfg, model, net)
    tail_params = low_rank_params(net)
    tail_from = math.ceil(cfg.more.tail_start * cfg.epochs)  # first epoch A and B train
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 1)  # the DataLoader's host-side shuffle
    aug_gen = torch.Generator(device=dev).manual_seed(cfg.seed + 2)  # augmentation draws leave the global RNG (init,
    # dropout) alone; on the device they feed
    # The loader shuffles index batches on the host; the images stay on the device and each step gathers its batch
    # there (the same batches, in the same order, as a loader of the images themselves). Data parallel: every rank
    # runs this same loader (same generator, so the same global batches in the same order as one worker) and takes
    # its rank-strided shard of each batch with ctx.shard (the whole batch on one worker).
    index = torch.arange(len(data.x_train), device="cpu")
    loader = DataLoader(TensorDataset(index), batch_size=cfg.batch_size, shuffle=True, generator=gen)
    steps_per_epoch = max(1, len(loader))
    epoch, step = 0, 0
    zf0, zg0 = logits(net, data.x_test)
    info = {"step0_max_diff": float((zf0 - zg0).abs().max()) if len(zf0) else 0.0}

    if ctx.checkpoint is not None:  # resume at the saved epoch (the model is on its device: optimiser state follows)
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        opt.load_state_dict(ck.torch_state["opt"])
        gen.set_state(ck.torch_state["gen"])
        if "aug_gen" in ck.torch_state and ck.torch_state.get("aug_gen_device", "cpu") == dev.type:
            aug_gen.set_state(ck.torch_state["aug_gen"])  # (a generator of another device type cannot take it)
        torch.set_rng_state(ck.torch_state["rng"])
        if dev.type != "cpu" and "device_rng" in ck.torch_state:
            torch.get_device_module(dev).set_rng_state(ck.torch_state["device_rng"], dev)
        epoch, step = int(ck.state["epoch"]), int(ck.state["step"])
        info = dict(ck.state.get("info", info))
        ctx.history[:] = list(ck.extras.get("history", []))

    def writer(final: bool):
        def write(d: Path):
            ts = {"opt": opt.state_dict(), "gen": gen.get_state(), "rng": torch.get_rng_state(),
                  "aug_gen": aug_gen.get_state(), "aug_gen_device": dev.type}
            if dev.type != "cpu":  # dropout masks on an accelerator come from its own generator
                ts["device_rng"] = torch.get_device_module(dev).get_rng_state(dev)
            save_checkpoint(d, method=SLUG, config=cfg, weights={f"net.{n}": v for n, v in net.state_dict().items()},
                            torch_state=ts, state=checkpoint_state(cfg, data, epoch, step, final, merged=False, info=info),
                            extras={"history": ctx.history})
        return write

    arm = cfg.arm
    last: dict = {}
    while epoch < cfg.epochs:
        for g in opt.param_groups:
            g["lr"] = cfg.lr * g.get("lr_mult", 1.0) * _lr_factor(cfg, epoch)
        model.train()
        # summed on the device in float64 (as the Python float sums they replace); read once per report
        sums = {"task": torch.zeros((), dtype=torch.float64, device=dev),
                "more": torch.zeros((), dtype=torch.float64, device=dev), "alpha": 0.0, "n": 0}
        for (ib,) in loader:
            n_global = len(ib)
            # the global batch's shifts (one draw, as on one worker), sharded with its indices
            shifts = draw_shifts(n_global, cfg.augment_shift, aug_gen) if cfg.augment == "shift" else None
            if shifts is None:
                ib = ctx.shard(ib)
            else:
                ib, shifts = ctx.shard(ib, shifts)
            ib = ib.to(dev, non_blocking=True)
            xb, yb = data.x_train[ib], data.y_train[ib]
            if cfg.more.schedule_unit == "epoch":
                alpha = alpha_t(epoch, cfg.epochs, cfg.more.amplitude, c, cfg.more.schedule)
            else:
                alpha = alpha_t(step, cfg.epochs * steps_per_epoch, cfg.more.amplitude, c, cfg.more.schedule)
            alpha = alpha if arm == "more" else 0.0
            if shifts is not None:
                xb = apply_shifts(xb, shifts, cfg.augment_shift)
            with ctx.autocast():
                z_full, z_gen = model(xb)
            z_full, z_gen = z_full.float(), z_gen.float()  # losses in float32
            l_task = task_loss(z_full, yb, prior, cfg.base_loss, cfg.la_tau)
            l_more = more_loss(z_full, z_gen, yb, prior, data.multilabel, cfg.more.discrepancy, cfg.more.weighting)
            loss = l_task + alpha * l_more if alpha > 0 else l_task
            if ctx.world_size > 1:
                # both losses are per-sample means over this rank's shard; weighting each by its share of the global
                # batch (n_local * world / n_global, 1 for equal shards) makes DDP's gradient mean the whole batch's
                # gradient even when the last batch of an epoch splits unevenly (and the reported mean its loss)
                share = len(ib) * ctx.world_size / n_global
                if len(ib) == 0:  # a last batch smaller than the world: no samples here, zero gradients (not NaN)
                    loss = l_task = l_more = (z_full.sum() + z_gen.sum()) * 0.0
                else:
                    loss, l_task, l_more = loss * share, l_task * share, l_more * share
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            if epoch < tail_from:  # the tail switches on later: no gradient, momentum or weight decay reaches A, B
                for p_ in tail_params:
                    p_.grad = None
            ctx.optimizer_step(opt)
            step += 1
            sums["task"] += l_task.detach().double()
            sums["more"] += l_more.detach().double()
            sums["alpha"] += alpha
            sums["n"] += 1
        epoch += 1
        done = epoch >= cfg.epochs
        if epoch % cfg.log_every == 0 or done or epoch == 1:
            n = max(sums["n"], 1)
            lt_, lm_, al_ = float(sums["task"]) / n, float(sums["more"]) / n, sums["alpha"] / n
            if ctx.world_size > 1:  # the global batches' losses (mean over the ranks of their weighted shard means)
                lt_, lm_ = ctx.all_reduce(torch.tensor([lt_, lm_], dtype=torch.float32, device=dev)).tolist()
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
    unmerged full logits (test split, float32, on ctx.device), write a plain checkpoint (no A, B) and report."""
    ctx.limit_threads(cfg.torch_threads)
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
    with ctx.init_module():
        net = build_net(src, tuple(st["image_shape"]), int(st["n_classes"]), merged=bool(st.get("merged")))
    net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
    data = build_data(src, device=ctx.device)
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
