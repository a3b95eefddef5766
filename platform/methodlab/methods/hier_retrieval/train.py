"""hier_retrieval training loop, top to bottom.

standard:           softmax CE on ordinary (query, relevant doc) pairs for `steps` steps, T = scale_pretrain.
rebalanced:         the same, with loss weight w_long on pairs with dist >= delta_long (sampling unchanged).
pretrain_finetune:  standard pretraining, then finetuning on long-distance pairs ONLY at T = scale_finetune and
                    lr x finetune_lr_ratio (Adam moments carried over), keeping the finetune state with the best
                    validation short/long mean recall (checked every finetune_eval_every steps).
Every step draws its pairs from a generator seeded by (seed, step), so a resumed run continues exactly. The pairs,
the tables and that generator live on ctx.device (a CUDA run draws other random numbers than a CPU run of the
same seed); the loss is read back to the host only when a report is written.
Data parallel: every rank draws the same global batch (the same generator) and computes the loss rows of its
ctx.shard against the whole batch's candidates; DDP averages the gradients; the reported train/loss is the mean
over the ranks of their shares (the global batch's loss); validation runs on every rank (identical tables)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.hier_retrieval.config import Config
from methodlab.methods.hier_retrieval.data import HRData, build_data, sample_pairs
from methodlab.methods.hier_retrieval.evaluate import evaluate
from methodlab.methods.hier_retrieval.model import DualEncoder

SLUG = "hier_retrieval"


def use_full_softmax(cfg: Config, m: int) -> bool:
    """The negatives are config, never the device found: full | sampled | by_size (full when m <= full_softmax_max_nodes)."""
    if cfg.negatives == "by_size":
        return m <= cfg.full_softmax_max_nodes
    return cfg.negatives == "full"


def other_positive_mask(data: HRData, device):
    """mask_other_positives: candidate c is relevant to q iff the key q*m + c is a relevant pair."""
    keys = (data.q * data.m + data.d).to(device)  # sorted, because pairs are sorted by (q, d)

    def mask(q: torch.Tensor, cand: torch.Tensor | None) -> torch.Tensor:
        c = torch.arange(data.m, device=device)[None, :] if cand is None else cand[None, :]
        k = q[:, None] * data.m + c
        pos = torch.searchsorted(keys, k).clamp_(max=len(keys) - 1)
        return keys[pos] == k
    return mask


def draw_batch(cfg: Config, data: HRData, stage: str, gen: torch.Generator) -> torch.Tensor:
    """Pair indices for one step. Finetune: long pairs only, except a `finetune_mix` share of ordinary pairs."""
    if stage == "pretrain":
        return sample_pairs(data, "pretrain", cfg.batch_size, gen)
    idx = sample_pairs(data, "long", cfg.batch_size, gen)
    if cfg.finetune_mix > 0:
        replay = torch.rand(cfg.batch_size, generator=gen, device=idx.device) < cfg.finetune_mix
        idx[replay] = sample_pairs(data, "pretrain", int(replay.sum()), gen)  # a sync, only with finetune_mix > 0
    return idx


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    device = ctx.device
    data = build_data(cfg, ctx.progress, device=device)
    full = use_full_softmax(cfg, data.m)
    with ctx.init_module():
        model = DualEncoder(data.m, cfg.dim, cfg.std, cfg.shared_tables)
    train_step = ctx.prepare_model(model)  # the same tables on ctx.device (DDP with several ranks); forward = the loss
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    pre, ft = cfg.stage_steps()
    if cfg.recipe == "pretrain_finetune" and "long" not in data.cdf:
        raise ValueError(f"no pair has dist >= delta_long={cfg.delta_long}: nothing to finetune on")
    other = other_positive_mask(data, device) if cfg.mask_other_positives else None

    step, best, best_score, best_step, fresh_opt = 0, None, -1.0, -1, False
    if cfg.pretrain_from and ctx.checkpoint is None:  # finetune a finished standard run (its final state)
        ck = load_checkpoint(cfg.pretrain_from, method=SLUG, load_torch_state=True)
        model.load_tables({k: v.to(device) for k, v in ck.weights.items()})
        opt.load_state_dict(ck.torch_state["optimizer"])
        pre = step = int(ck.state["step"])
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        model.load_tables({k: v.to(device) for k, v in ck.weights.items() if not k.startswith("best.")})
        fresh_opt = bool(ck.torch_state.get("fresh_finetune_opt", False))
        opt.load_state_dict(ck.torch_state["optimizer"])
        step, pre = int(ck.state["step"]), int(ck.state["pretrain_steps"])
        best_score, best_step = float(ck.state.get("best_score", -1.0)), int(ck.state.get("best_step", -1))
        if any(k.startswith("best.") for k in ck.weights):
            best = {k[5:]: v.to(device) for k, v in ck.weights.items() if k.startswith("best.")}
        ctx.history[:] = list(ck.extras.get("history", []))
    if cfg.pretrain_from and cfg.finetune_steps is None and not cfg.equal_total_steps:
        # the cap is a fraction of the pretraining the checkpoint did (a wall-clock-capped standard run stops
        # early, `steps` is then only its bound): as before when that run did all of `steps`; a resume too
        ft = int(round(cfg.max_finetune_fraction * pre))
    total = pre + ft
    ft_lr = cfg.lr * cfg.finetune_lr_ratio

    def enter_finetune():
        """Switch optimiser settings for the finetune stage (idempotent; also after a resume)."""
        nonlocal opt, fresh_opt
        if cfg.finetune_fresh_optimizer and not fresh_opt:
            opt, fresh_opt = torch.optim.Adam(model.parameters(), lr=ft_lr), True
        for group in opt.param_groups:
            group["lr"] = ft_lr

    def writer(final: bool):
        def write(d: Path) -> None:
            w = model.tables()
            if best is not None and not final:
                w.update({f"best.{k}": v for k, v in best.items()})
            w["edges"] = torch.stack([torch.from_numpy(data.h.child), torch.from_numpy(data.h.parent)], 1)
            save_checkpoint(d, method=SLUG, config=cfg, weights=w,
                            torch_state={"optimizer": opt.state_dict(), "fresh_finetune_opt": fresh_opt},
                            state={"step": step, "pretrain_steps": pre, "stage": stage_of(step), "final": final,
                                   "best_score": best_score, "best_step": best_step,
                                   "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"history": ctx.history, "nodes": {"names": data.h.names, "texts": data.h.texts},
                                    "recipe": cfg.recipe})
        return write

    def stage_of(s: int) -> str:
        return "pretrain" if s < pre else "finetune"

    def global_loss() -> float:
        """The last step's loss of the whole global batch: the ranks' shares averaged (as is at world size 1)."""
        return float(ctx.all_reduce(loss_v.float().reshape(1).clone(), op="mean")) if ctx.world_size > 1 \
            else float(loss_v)

    def report(extra: dict, ckpt: bool, final: bool = False) -> dict:
        model.eval()
        m = {"step": step, "stage": stage_of(step - 1) if step else "pretrain", **extra,
             **evaluate(model, data, cfg, data.val_q, "val")}
        model.train()
        ctx.report(m, checkpoint=writer(final) if ckpt else None)
        return m

    def over_budget(over: bool) -> bool:
        """Rank 0's clock decides for every rank (they must end pretraining at the same step)."""
        if ctx.world_size <= 1:
            return over
        return bool(ctx.broadcast(torch.tensor([float(over)], device=device), src=0).item())

    if step >= pre and ft > 0:
        enter_finetune()
    loss_v = torch.full((), float("nan"), device=device)  # the last step's loss, read on the host at reports only
    t_train, t_pre = time.perf_counter(), None
    while step < total:
        stage = stage_of(step)
        if stage == "finetune" and step == pre and best is None:
            enter_finetune()  # first finetune step: the pretrained model is the first candidate (0 finetune steps)
            m = report({"train/loss": global_loss(), "lr": ft_lr}, ckpt=False)
            best, best_score, best_step = model.tables(), m["val/short_long_mean"], step
        gen = torch.Generator(device=device).manual_seed(cfg.seed * 1_000_003 + step)
        idx = draw_batch(cfg, data, stage, gen)  # the global batch, the same on every rank
        q, d, dist = data.q[idx], data.d[idx], data.dist[idx]
        weight = None
        if cfg.recipe == "rebalanced":
            weight = torch.where(dist >= cfg.delta_long, cfg.w_long, 1.0)
        T = cfg.scale_pretrain if stage == "pretrain" else cfg.scale_finetune
        # data parallel: this rank's rows of the batch (all of it on one worker, where the loss is the plain mean)
        _, rows = ctx.shard(idx, torch.arange(len(idx), device=idx.device))
        part = {} if ctx.world_size == 1 else {"rows": rows, "world": ctx.world_size}
        with ctx.autocast():
            loss = train_step(q, d, T=T, temperature_mode=cfg.temperature_mode, full=full,
                              num_negatives=cfg.num_negatives, gen=gen, weight=weight, other_pos=other,
                              in_batch=cfg.in_batch_negatives, **part)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        if stage == "finetune" and cfg.freeze_doc_tower and model.doc is not None:
            model.doc.grad = None  # Adam skips parameters without a gradient
        ctx.optimizer_step(opt)
        step += 1
        loss_v = loss.detach()
        if stage == "pretrain" and step < pre and cfg.max_pretrain_s is not None \
                and over_budget(time.perf_counter() - t_train > cfg.max_pretrain_s):
            pre, total = step, step + ft  # the wall-clock budget ends pretraining here; the steps reached are reported
        if stage == "pretrain" and step == pre:
            t_pre = time.perf_counter() - t_train

        if stage == "pretrain" and (step % cfg.eval_every == 0 or step == pre):
            report({"train/loss": global_loss(), "lr": cfg.lr, "train/long_share": float((dist >= cfg.delta_long).float().mean())},
                   ckpt=step % cfg.checkpoint_every == 0 and step < total)
        elif stage == "finetune" and ((step - pre) % cfg.finetune_eval_every == 0 or step == total):
            m = report({"train/loss": global_loss(), "lr": ft_lr, "train/long_share": float((dist >= cfg.delta_long).float().mean())},
                       ckpt=(step - pre) % cfg.checkpoint_every == 0 and step < total)
            if m["val/short_long_mean"] > best_score:
                best, best_score, best_step = model.tables(), m["val/short_long_mean"], step

    if best is not None:  # early stopping: the best validated finetune state is the result
        model.load_tables(best)
    model.eval()
    final = {"step": step, "stage": "final", "train/loss": global_loss(), "finetune/best_step": best_step,
             "finetune/steps_used": max(0, best_step - pre) if best is not None else 0,
             "negatives/full_softmax": float(full), "pretrain/steps": pre,
             "time/pretrain_s": t_pre if t_pre is not None else 0.0, "time/train_s": time.perf_counter() - t_train,
             **evaluate(model, data, cfg, data.val_q, "val"), **evaluate(model, data, cfg, data.eval_q, "eval")}
    ctx.report(final, checkpoint=writer(final=True))
    return final
