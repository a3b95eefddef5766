"""ucan training loop (setting `train`), top to bottom: K noisy scans per shape, patch pairs cropped around a
shared seed, the multi-step path, EMD Noise2Noise + lambda_DC * consistency, Adam, evaluation on the analytic
val/test shapes, checkpoints, resume at the saved step. With world_size > 1 every rank draws its own patch pairs
(sampler seeded by seed, rank and step) and gradients are all-reduced (data parallel)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.ucan.config import Config
from methodlab.methods.ucan.data import build_data
from methodlab.methods.ucan.evaluate import evaluate
from methodlab.methods.ucan.model import build_net, denoise_cloud, ucan_loss

SLUG = "ucan"


def sample_patch_pair(scans: list[np.ndarray], patch_points: int, rng: np.random.Generator):
    """One shape, two distinct scans a != b, a seed point drawn from scan a, and the patch_points nearest points
    to that seed in EACH scan (the same ball crops both observations: same region, no correspondence)."""
    obs = scans[int(rng.integers(len(scans)))]
    a, b = rng.choice(len(obs), size=2, replace=False)
    seed = obs[a][int(rng.integers(len(obs[a])))]
    def crop(p):
        d = np.linalg.norm(p - seed, axis=1)
        return p[np.argpartition(d, patch_points - 1)[:patch_points]]
    return torch.as_tensor(crop(obs[a])), torch.as_tensor(crop(obs[b]))


def _allreduce_grads(net, world_size: int) -> None:
    import torch.distributed as dist

    if world_size > 1 and dist.is_available() and dist.is_initialized():
        for p in net.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world_size


def run_eval(net, data, cfg: Config, steps: int | None = None) -> dict[str, float]:
    net.eval()
    s = steps or cfg.steps
    out = {}
    for split, items in data.sets.items():
        agg, _ = evaluate(lambda x: denoise_cloud(net, x, s, cfg.eval_patch_size, normalise=False), items, split)
        out.update(agg)
    net.train()
    return out


def fit(cfg: Config, ctx: RunContext) -> dict:
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    data = build_data(cfg)
    net = build_net(cfg)
    if ctx.world_size > 1:  # identical start on every rank
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            for p in net.parameters():
                dist.broadcast(p.data, 0)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    step, history = 0, []
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict(ck.weights)
        opt.load_state_dict(ck.torch_state["optimizer"])
        step, history = int(ck.state["step"]), list(ck.extras.get("history", []))
    ctx.history[:] = history

    def writer(final: bool = False):
        def write(d: Path) -> None:
            save_checkpoint(d, method=SLUG, config=cfg, weights=net.state_dict(),
                            torch_state={"optimizer": opt.state_dict()},
                            state={"step": step, "final": final, "task": "pointcloud",
                                   "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"history": ctx.history})
        return write

    t0 = time.perf_counter()
    if step == 0 and cfg.eval_at_start:
        ctx.report({"step": 0, "train/loss": float("nan"), "time_s": 0.0, **run_eval(net, data, cfg)})
    window: list[dict] = []
    for _ in ctx.progress(range(step, cfg.max_steps), total=cfg.max_steps - step, desc="ucan train", unit="step"):
        rng = np.random.default_rng([cfg.seed, ctx.rank, step])
        if cfg.lr_schedule == "cosine":  # from the step counter alone: resume-safe
            for g in opt.param_groups:
                g["lr"] = cfg.lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.max_steps))
        opt.zero_grad(set_to_none=True)
        parts = {"loss": 0.0, "n2n": 0.0, "dc": 0.0}
        for _ in range(cfg.patch_pairs):
            pa, pb = sample_patch_pair(data.train, cfg.patch_points, rng)
            loss, info = ucan_loss(net, pa, pb, cfg)
            (loss / cfg.patch_pairs).backward()
            parts["loss"] += loss.item() / cfg.patch_pairs
            parts["n2n"] += info["n2n"] / cfg.patch_pairs
            parts["dc"] += info["dc"] / cfg.patch_pairs
        _allreduce_grads(net, ctx.world_size)
        opt.step()
        step += 1
        window.append(parts)
        done = step >= cfg.max_steps
        if step % cfg.eval_every == 0 or done:
            metrics = {"step": step, "train/loss": float(np.mean([w["loss"] for w in window])),
                       "train/n2n": float(np.mean([w["n2n"] for w in window])),
                       "train/dc": float(np.mean([w["dc"] for w in window])),
                       "time_s": time.perf_counter() - t0, **run_eval(net, data, cfg)}
            window = []
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(metrics, checkpoint=writer(done) if save else None)
    if not ctx.history or ctx.history[-1].get("step") != step:  # resumed at the end: report once more
        ctx.report({"step": step, **run_eval(net, data, cfg)}, checkpoint=writer(True))
    return dict(ctx.history[-1])
