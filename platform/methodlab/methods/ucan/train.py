"""ucan training loop (setting `train`), top to bottom: K noisy scans per shape, patch pairs cropped around a
shared seed, the multi-step path, EMD Noise2Noise + lambda_DC * consistency, Adam, evaluation on the analytic
val/test shapes, checkpoints, resume at the saved step. Data parallel (world_size > 1): every rank draws the same
global step of patch_pairs pairs (sampler seeded by seed and step, as on one worker), takes its share with
ctx.shard, and the gradients are averaged over the ranks (ctx.average_gradients), so the run follows the 1-worker
trajectory up to float summation order; the reported losses are those of the whole global step.

Devices: the network lives on ctx.device (built under ctx.init_module()). The noisy scans stay a host pool: a patch
pair is cropped there with the step's numpy sampler (same points, same order as on every device) and copied to
the device once; the exact EMD matching is a host Hungarian step by the method's definition. Loss parts are
accumulated on the device and read at report time. Gradients are averaged with ctx.average_gradients rather than
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


def draw_patch_pair(scans: list[np.ndarray], rng: np.random.Generator) -> tuple[int, int, int, int]:
    """One patch pair's draw (host, `rng`): (shape, scan a, scan b != a, seed point index in scan a), plain ints."""
    s = int(rng.integers(len(scans)))
    obs = scans[s]
    a, b = rng.choice(len(obs), size=2, replace=False)
    return s, int(a), int(b), int(rng.integers(len(obs[int(a)])))


def crop_patch_pair(scans: list[np.ndarray], pair: tuple[int, int, int, int], patch_points: int, device="cpu"):
    """The patch_points nearest points to the pair's seed point in EACH of its two scans (the same ball crops both
    observations: same region, no correspondence). Cropped on the host, returned on `device`."""
    s, a, b, j = pair
    obs = scans[s]
    seed = obs[a][j]

    def crop(p):
        d = np.linalg.norm(p - seed, axis=1)
        return p[np.argpartition(d, patch_points - 1)[:patch_points]]
    return torch.as_tensor(crop(obs[a]), device=device), torch.as_tensor(crop(obs[b]), device=device)


def sample_patch_pair(scans: list[np.ndarray], patch_points: int, rng: np.random.Generator, device="cpu"):
    """One shape, two distinct scans a != b, a seed point drawn from scan a, and the patch_points nearest points
    to that seed in EACH scan (draw_patch_pair + crop_patch_pair)."""
    return crop_patch_pair(scans, draw_patch_pair(scans, rng), patch_points, device)


def _average_grads(net, ctx: RunContext) -> None:
    """Mean of the gradients over the ranks (one float32 bucket on ctx.device); a no-op at world size 1. A rank
    whose share of the step is empty (patch_pairs < world size) has no gradients: zeros take part in the mean."""
    if ctx.world_size > 1:
        for p in net.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        ctx.average_gradients(net.parameters())


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
    ctx.broadcast_(net.parameters())  # identical start on every rank (a no-op on one worker)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    step, history = 0, []
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict(ck.weights)
        opt.load_state_dict(ck.torch_state["optimizer"])  # the net is on its device: the state follows it
        step, history = int(ck.state["step"]), list(ck.extras.get("history", []))
    ctx.history[:] = history
    # no DDP (gradients are averaged with ctx.average_gradients, see the module doc): placement and compile only
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
        # the global step's draw: the same on every rank (rank 0's stream of a 1-worker run), then this rank's share
        rng = np.random.default_rng([cfg.seed, 0, step])
        if cfg.lr_schedule == "cosine":  # from the step counter alone: resume-safe
            for g in opt.param_groups:
                g["lr"] = cfg.lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.max_steps))
        opt.zero_grad(set_to_none=True)
        parts = torch.zeros(3, dtype=torch.float64, device=ctx.device)
        pairs = ctx.shard([draw_patch_pair(data.train, rng) for _ in range(cfg.patch_pairs)])
        for pair in pairs:
            pa, pb = crop_patch_pair(data.train, pair, cfg.patch_points, ctx.device)
            with ctx.autocast():
                loss, info = ucan_loss(model, pa, pb, cfg)
            # / patch_pairs: the step's mean; * world_size: undone by the mean over the ranks (x 1 on one worker)
            ctx.backward(loss / cfg.patch_pairs * ctx.world_size)
            parts += torch.stack([loss.detach(), info["n2n"], info["dc"]]).double() / cfg.patch_pairs
        _average_grads(net, ctx)
        ctx.optimizer_step(opt)
        step += 1
        window.append(parts)
        done = step >= cfg.max_steps
        if step % cfg.eval_every == 0 or done:
            rows = torch.stack(window).tolist()  # the one host read of the window's losses
            means = [float(np.mean([w[i] for w in rows])) for i in range(3)]
            if ctx.world_size > 1:  # each rank holds its pairs' share of the step means: their sum is the whole step's
                means = ctx.all_reduce(torch.tensor(means, dtype=torch.float32, device=ctx.device), op="sum").tolist()
            metrics = {"step": step, "train/loss": means[0], "train/n2n": means[1], "train/dc": means[2],
                       "time_s": time.perf_counter() - t0, **run_eval(model, data, cfg)}
            window = []
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(metrics, checkpoint=writer(done) if save else None)
    if not ctx.history or ctx.history[-1].get("step") != step:  # resumed at the end: report once more
        ctx.report({"step": step, **run_eval(model, data, cfg)}, checkpoint=writer(True))
    return dict(ctx.history[-1])
