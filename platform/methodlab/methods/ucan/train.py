"""ucan training loop (setting `train`), top to bottom: K noisy scans per shape, patch pairs cropped around a
shared seed, the multi-step path, EMD Noise2Noise + lambda_DC * consistency, Adam, evaluation on the analytic
val/test shapes, checkpoints, resume at the saved step. With world_size > 1 every rank draws its own patch pairs
(sampler seeded by seed, rank and step) and gradients are all-reduced (data parallel).

Devices: the network lives on ctx.device (built under ctx.init_module()). The noisy scans stay a host pool: a patch
pair is cropped there with the step's numpy sampler (same points, same order as on every device) and copied to
the device once; the exact EMD matching is a host Hungarian step by the method's definition. Loss parts are
accumulated on the device and read at report time. Gradients are averaged by hand (ctx.all_reduce) rather than
through DDP: one optimiser step runs the network 2 * S * patch_pairs times around patch_pairs backward passes."""

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


def sample_patch_pair(scans: list[np.ndarray], patch_points: int, rng: np.random.Generator, device="cpu"):
    """One shape, two distinct scans a != b, a seed point drawn from scan a, and the patch_points nearest points
    to that seed in EACH scan (the same ball crops both observations: same region, no correspondence).
    Cropped on the host, returned on `device`."""
    obs = scans[int(rng.integers(len(scans)))]
    a, b = rng.choice(len(obs), size=2, replace=False)
    seed = obs[a][int(rng.integers(len(obs[a])))]
    def crop(p):
        d = np.linalg.norm(p - seed, axis=1)
        return p[np.argpartition(d, patch_points - 1)[:patch_points]]
    return torch.as_tensor(crop(obs[a]), device=device), torch.as_tensor(crop(obs[b]), device=device)


def _allreduce_grads(net, ctx: RunContext) -> None:
    """Mean of the gradients over the ranks (float32, on ctx.device); a no-op at world size 1."""
    if ctx.world_size > 1:
        for p in net.parameters():
            if p.grad is not None:
                ctx.all_reduce(p.grad, op="mean")


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
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    data = build_data(cfg)
    with ctx.init_module():
        net = build_net(cfg)
    if ctx.world_size > 1:  # identical start on every rank
        for p in net.parameters():
            ctx.broadcast(p.data, 0)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    step, history = 0, []
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict(ck.weights)
        opt.load_state_dict(ck.torch_state["optimizer"])  # the net is on its device: the state follows it
        step, history = int(ck.state["step"]), list(ck.extras.get("history", []))
    ctx.history[:] = history
    # no DDP (gradients are averaged with ctx.all_reduce, see the module doc): placement and compile only
    model = ctx.prepare_model(net, ddp=False)

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
        ctx.report({"step": 0, "train/loss": float("nan"), "time_s": 0.0, **run_eval(model, data, cfg)})
    window: list[torch.Tensor] = []  # per step: [loss, n2n, dc] on the device (float64, as the host sums were)
    for _ in ctx.progress(range(step, cfg.max_steps), total=cfg.max_steps - step, desc="ucan train", unit="step"):
        rng = np.random.default_rng([cfg.seed, ctx.rank, step])
        if cfg.lr_schedule == "cosine":  # from the step counter alone: resume-safe
            for g in opt.param_groups:
                g["lr"] = cfg.lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.max_steps))
        opt.zero_grad(set_to_none=True)
        parts = torch.zeros(3, dtype=torch.float64, device=ctx.device)
        for _ in range(cfg.patch_pairs):
            pa, pb = sample_patch_pair(data.train, cfg.patch_points, rng, ctx.device)
            with ctx.autocast():
                loss, info = ucan_loss(model, pa, pb, cfg)
            ctx.backward(loss / cfg.patch_pairs)
            parts += torch.stack([loss.detach(), info["n2n"], info["dc"]]).double() / cfg.patch_pairs
        _allreduce_grads(net, ctx)
        ctx.optimizer_step(opt)
        step += 1
        window.append(parts)
        done = step >= cfg.max_steps
        if step % cfg.eval_every == 0 or done:
            rows = torch.stack(window).tolist()  # the one host read of the window's losses
            metrics = {"step": step, "train/loss": float(np.mean([w[0] for w in rows])),
                       "train/n2n": float(np.mean([w[1] for w in rows])),
                       "train/dc": float(np.mean([w[2] for w in rows])),
                       "time_s": time.perf_counter() - t0, **run_eval(model, data, cfg)}
            window = []
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(metrics, checkpoint=writer(done) if save else None)
    if not ctx.history or ctx.history[-1].get("step") != step:  # resumed at the end: report once more
        ctx.report({"step": step, **run_eval(model, data, cfg)}, checkpoint=writer(True))
    return dict(ctx.history[-1])
