"""cmcl training, top to bottom: build the step sequence, then for each step t (pair A, B): freeze the DNS
projectors from the statistics of steps < t, train the two heads for `epochs` epochs (AdamW, linear decay to 0
within the step, a fresh optimizer per step) with the gradient surgery before every update, update the
statistics with the step's training features, evaluate every test set, report and checkpoint. `method=joint`
trains once on the union (same optimiser, same total number of updates, one decay) and evaluates at the end.
Data parallel: every rank draws the same mini-batches and computes the loss rows of its ctx.shard against the
whole batch's negatives (rank_loss); ctx.average_gradients makes the global batch's gradient before the surgery;
statistics, evaluation and EWC's Fisher are computed alike on every rank (identical heads)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.cmcl.config import Config
from methodlab.methods.cmcl.data import build_tasks, modalities
from methodlab.methods.cmcl.evaluate import evaluate_all, step_metrics, summary
from methodlab.methods.cmcl.model import EWC, DNSState, Heads, dns_project, kept_share_t, one_sided_project

SLUG = "cmcl"


def _dtype(cfg: Config) -> torch.dtype:
    return torch.float64 if cfg.dtype == "float64" else torch.float32


def _device(heads: Heads) -> torch.device:
    """The heads' device: every tensor of a step is built or moved there."""
    return next(iter(heads.W.values())).device


def _x(a, dt: torch.dtype, device: torch.device) -> torch.Tensor:
    """Features (numpy, or a tensor already placed by fit) as `dt` on `device` (no copy when already there)."""
    return torch.as_tensor(a, dtype=dt, device=device)


def _autocast(ctx: RunContext | None):
    import contextlib

    return ctx.autocast() if ctx is not None else contextlib.nullcontext()


def _backward(ctx: RunContext | None, loss: torch.Tensor) -> None:
    if ctx is not None:
        ctx.backward(loss)
    else:
        loss.backward()


def _step(ctx: RunContext | None, opt) -> None:
    if ctx is not None:
        ctx.optimizer_step(opt)
    else:
        opt.step()


def contrastive_loss(heads: Heads, a: str, b: str, xa: torch.Tensor, xb: torch.Tensor, cfg: Config) -> torch.Tensor:
    """CE over rows of L_ij = h_a(a_i)^T h_b(b_j) / tau (official: rows = canonical first modality only)."""
    logits = heads(a, xa) @ heads(b, xb).T / cfg.temperature
    target = torch.arange(len(xa), device=logits.device)
    loss = F.cross_entropy(logits, target)
    if cfg.symmetric:
        loss = 0.5 * (loss + F.cross_entropy(logits.T, target))
    return loss


def rank_loss(model, a: str, b: str, xa: torch.Tensor, xb: torch.Tensor, pos: torch.Tensor, cfg: Config,
              world: int) -> torch.Tensor:
    """Data parallel: this rank's share of `contrastive_loss` on the global batch (xa, xb). The CE is a sum of
    per-row terms, each against every column of the global batch (the in-batch negatives), so the rank computes
    the rows at its positions `pos` (its ctx.shard) against the whole batch's partner outputs, scaled so that the
    mean over the ranks is the global batch's loss and the averaged gradients are its gradient exactly, however
    the batch splits. The partner head runs on the whole batch on every rank (no all_gather in the contract)."""
    n = len(xa)
    ha = model(a, xa[pos]) if not cfg.symmetric else model(a, xa)
    hb = model(b, xb)
    rows = ha if not cfg.symmetric else ha[pos]
    loss = F.cross_entropy(rows @ hb.T / cfg.temperature, pos, reduction="sum")
    if cfg.symmetric:  # the column terms of the rank's positions, against every row of the batch
        loss = 0.5 * (loss + F.cross_entropy(hb[pos] @ ha.T / cfg.temperature, pos, reduction="sum"))
    return loss * (world / n)


def batch_loss(model, a: str, b: str, xa: torch.Tensor, xb: torch.Tensor, idx: torch.Tensor, cfg: Config,
               ctx: RunContext | None) -> torch.Tensor:
    """The training loss of the global mini-batch `idx` on this rank: every rank draws the same batch and takes
    its part with ctx.shard (the whole batch, and the 1-worker expression, at world size 1)."""
    if ctx is None:
        return contrastive_loss(model, a, b, xa[idx], xb[idx], cfg)
    loc, pos = ctx.shard(idx, torch.arange(len(idx), device=idx.device))
    if ctx.world_size == 1:
        return contrastive_loss(model, a, b, xa[loc], xb[loc], cfg)
    return rank_loss(model, a, b, xa[idx], xb[idx], pos, cfg, ctx.world_size)


def average_gradients(ctx: RunContext | None, params: list) -> None:
    """Data parallel: the mean over the ranks of each rank's gradient (the global batch's gradient), before the
    surgery and the optimiser step. No DDP wrapper: the trained heads change with the continual step."""
    if ctx is not None:
        ctx.average_gradients(params)


def global_losses(ctx: RunContext | None, values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-rank loss figures (each rank's share, `rank_loss`) as the global batch's: their mean over the ranks,
    one collective per continual step (float32 on the device; nothing at world size 1)."""
    if ctx is None or ctx.world_size <= 1:
        return values
    flat = ctx.all_reduce(torch.stack([v.reshape(()).to(torch.float32) for v in values]), op="mean")
    return list(flat.double().unbind())


def batches(n: int, bs: int, seed: int, t: int, epoch: int, device=None) -> list[torch.Tensor]:
    """Deterministic per-(step, epoch) shuffles, so a resumed run repeats the same batches; drawn on `device` (the
    heads', None: CPU) by a generator there (the same draws as before on the CPU)."""
    device = torch.device("cpu" if device is None else device)
    g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + t * 1009 + epoch)
    perm = torch.randperm(n, generator=g, device=device)
    return [perm[i:i + bs] for i in range(0, n, bs)]


@torch.no_grad()
def mean_train_loss(heads: Heads, task, cfg: Config) -> float:
    """Loss over fixed contiguous batches of the whole training set (the plasticity measure)."""
    dt, dev = _dtype(cfg), _device(heads)
    xa, xb = _x(task.xa_train, dt, dev), _x(task.xb_train, dt, dev)
    tot = torch.zeros((), dtype=torch.float64, device=dev)  # the Python float sum, kept on the device
    for i in range(0, len(xa), cfg.batch_size):
        loss = contrastive_loss(heads, task.mod_a, task.mod_b, xa[i:i + cfg.batch_size], xb[i:i + cfg.batch_size], cfg)
        tot += loss.double() * len(xa[i:i + cfg.batch_size])
    return float(tot) / len(xa)


def make_optimizer(params_w: list, params_b: list, cfg: Config):
    # Decay on weight matrices only, as the HF Trainer the official schedule comes from (no decay on biases).
    groups = [{"params": params_w, "weight_decay": cfg.weight_decay}]
    if params_b:
        groups.append({"params": params_b, "weight_decay": 0.0})
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr)


def make_schedule(opt, total: int, cfg: Config):
    if cfg.lr_schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, (total - k) / total))


def surgery(heads: Heads, m: str, proj: dict, cfg: Config, shares: dict | None = None) -> None:
    """Modify the raw gradient of head m in place (before the optimizer's own scaling / decay). `shares`
    collects, per update, the share of the raw weight gradient's norm kept by the applied projection and, on
    the same gradient, by the dual-sided (G - P~GP) and one-sided (G - GP) projections (0-dim tensors on the
    device; under fp16 the gradient is the loss-scaled one: projections are linear and the shares ratios)."""
    P, Pt = proj[m]
    if P is None:
        return
    W, b = heads.W[m], heads.b[m]
    if W.grad is not None:
        G0 = W.grad.to(torch.float64)
        Gd, Go = dns_project(G0, P, Pt), one_sided_project(G0, P)
        G = Gd if cfg.method == "dns" else Go
        if shares is not None:
            for k, Gp in (("kept", G), ("kept_dns", Gd), ("kept_one_sided", Go)):
                shares.setdefault(f"{k}_{m}", []).append(kept_share_t(G0, Gp))
        W.grad.copy_(G.to(W.grad.dtype))
    if cfg.project_bias and cfg.method == "dns" and b.grad is not None:  # Delta s = y_old^T Delta b
        g = b.grad.to(torch.float64)
        b.grad.copy_((g - Pt @ g).to(b.grad.dtype))


def train_step(heads: Heads, task, t: int, cfg: Config, state: DNSState, ewc: EWC,
               ctx: RunContext | None = None, model=None) -> dict:
    """One continual step on the heads' device. Returns its losses and projector ranks. With `ctx`, the forward
    runs under its autocast and the update goes through its backward / optimizer_step (GradScaler under fp16);
    `model` is the prepared (possibly compiled) module the training forward goes through (default: `heads`)."""
    model = heads if model is None else model
    a, b = task.mod_a, task.mod_b
    dt, dev = _dtype(cfg), _device(heads)
    xa, xb = _x(task.xa_train, dt, dev), _x(task.xb_train, dt, dev)
    info: dict = {}
    proj = {a: (None, None), b: (None, None)}
    if cfg.method in ("dns", "one_sided"):  # frozen for the whole step, from steps < t only
        for m in (a, b):
            P, Pt, r, rt = state.projectors(m, cfg.lambda_min, cfg.lambda_partner, cfg.rel_tol)
            info[f"dns/rank_in_{m}"], info[f"dns/rank_partner_{m}"] = r, rt
            if state.seen[m] and (r > 0):
                proj[m] = (P, Pt)
    per_epoch = math.ceil(len(xa) / cfg.batch_size)
    total = per_epoch * cfg.epochs
    pw = [heads.W[a], heads.W[b]]
    pb = [heads.b[a], heads.b[b]] if cfg.train_bias else []
    opt = make_optimizer(pw, pb, cfg)
    sched = make_schedule(opt, total, cfg)
    info["train/loss_start"] = mean_train_loss(heads, task, cfg)
    epoch_losses = []  # per epoch, summed on the device (float64, as the Python float sums they replace)
    batch_first = batch_last = None  # the step's first and last mini-batch losses (device tensors)
    shares: dict[str, list[torch.Tensor]] = {}
    for epoch in range(cfg.epochs):
        run = torch.zeros((), dtype=torch.float64, device=dev)
        for idx in batches(len(xa), cfg.batch_size, cfg.seed, t, epoch, dev):
            with _autocast(ctx):
                loss = batch_loss(model, a, b, xa, xb, idx, cfg, ctx)  # float32 (or float64) CE
            pen = ewc.penalty(heads, (a, b), cfg.ewc_lambda) if cfg.method == "ewc" else None
            opt.zero_grad(set_to_none=True)
            _backward(ctx, loss if pen is None else loss + pen)
            average_gradients(ctx, pw + pb)  # the same penalty on every rank: its gradient survives the mean
            for m in (a, b):
                surgery(heads, m, proj, cfg, shares)
            _step(ctx, opt)
            sched.step()
            run += loss.detach().double() * len(idx)
            batch_last = loss.detach()
            batch_first = batch_last if batch_first is None else batch_first
        epoch_losses.append(run)
    # mean over the step's updates of ||projected G|| / ||G|| per head (absent: that head is not projected);
    # the values are read here, once per continual step (numpy's mean over them, as before)
    info.update({f"grad/{k}": float(np.mean(torch.stack(v).cpu().numpy())) for k, v in shares.items()})
    *epoch_losses, batch_first, batch_last = global_losses(ctx, [*epoch_losses, batch_first, batch_last])
    info["train/loss_end"] = mean_train_loss(heads, task, cfg)
    info["train/loss_drop"] = 1.0 - info["train/loss_end"] / max(info["train/loss_start"], 1e-12)
    info["train/epoch_loss_first"] = float(epoch_losses[0]) / len(xa)
    info["train/epoch_loss_last"] = float(epoch_losses[-1]) / len(xa)
    # first vs last mini-batch of the step: NOT a plasticity measure when the last batch is a small remainder
    # (fewer in-batch negatives, lower CE); kept to show why the spec's prototype figure is not used as one.
    info["train/batch_loss_first"], info["train/batch_loss_last"] = float(batch_first), float(batch_last)
    if cfg.method == "ewc":
        ewc.consolidate(heads, (a, b), fisher_diag(heads, task, cfg, xa, xb, t))
    state.update(heads, a, b, xa, xb)
    return info


def fisher_diag(heads: Heads, task, cfg: Config, xa, xb, t: int) -> dict[str, torch.Tensor]:
    a, b = task.mod_a, task.mod_b
    sq = {f"{k}.{m}": torch.zeros_like(p) for m in (a, b) for k, p in (("W", heads.W[m]), ("b", heads.b[m]))}
    bl = batches(len(xa), cfg.batch_size, cfg.seed, t, 10_000, _device(heads))
    for idx in bl:
        heads.zero_grad(set_to_none=True)
        contrastive_loss(heads, a, b, xa[idx], xb[idx], cfg).backward()
        for m in (a, b):
            for k, p in (("W", heads.W[m]), ("b", heads.b[m])):
                if p.grad is not None:
                    sq[f"{k}.{m}"] += p.grad.detach() ** 2 / len(bl)
    heads.zero_grad(set_to_none=True)
    return sq


def class_banks(tasks) -> dict:
    """The served class-text bank: one per distinct dataset bank (names prefixed when there are several)."""
    seen, out_names, out_feats = [], [], []
    for t in tasks:
        if t.class_bank is None or any(t.class_bank is s for s in seen):
            continue
        seen.append(t.class_bank)
        out_names.append((t.name.split(":")[0], list(t.class_names)))
        out_feats.append(np.asarray(t.class_bank))
    if not seen:
        return {"names": [], "features": []}
    if len(seen) == 1:
        return {"names": out_names[0][1], "features": out_feats[0].tolist()}
    names = [f"{ds}/{n}" for ds, ns in out_names for n in ns]
    return {"names": names, "features": np.concatenate(out_feats).tolist()}


def placed(task, dt: torch.dtype, device) -> object:
    """The step's feature matrices as `dt` tensors on `device`, copied once per run (labels, class bank: host)."""
    return replace(task, **{k: _x(getattr(task, k), dt, device) for k in ("xa_train", "xb_train", "xa_test", "xb_test")})


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    if cfg.dtype == "float64" and ctx.precision != "fp32":
        from methodlab.core import ConfigError

        raise ConfigError(f"dtype=float64 (the exactness setting) cannot run under precision {ctx.precision}: "
                          "autocast would compute the heads in half precision", field="config.dtype")
    if cfg.dtype == "float64" and ctx.world_size > 1:
        from methodlab.core import ConfigError

        raise ConfigError("dtype=float64 (the exactness setting) runs on one worker: data-parallel gradients are "
                          "averaged in float32; set scaling.num_workers: 1", field="config.dtype")
    seed_everything(cfg.seed)
    dev = ctx.device
    host_tasks = build_tasks(cfg, log=None if ctx.quiet else print)
    tasks = [placed(t, _dtype(cfg), dev) for t in host_tasks]  # the feature pools on the run's device
    mods = modalities(tasks)
    with ctx.init_module():
        heads = Heads(mods, cfg.dim, _dtype(cfg), device=dev)
    for m in mods:
        heads.b[m].requires_grad_(cfg.train_bias)
    # the training forward (compiled when asked); `heads` for surgery and eval. No DDP wrapper (ddp=False): each
    # continual step trains another pair of heads; train_step averages the gradients with ctx.average_gradients
    model = ctx.prepare_model(heads, ddp=False)
    heads = ctx.unwrap(model)
    state = DNSState(mods, cfg.dim, cfg.per_modality_counts, cfg.center_features, device=dev)
    ewc = EWC()
    T = len(tasks)
    matrix: list[list[dict]] = [evaluate_all(heads, tasks, cfg)]  # row 0: the untrained heads
    losses: list[dict] = []
    done = 0
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG)
        heads.load_state_dict({k[len("head."):]: v for k, v in ck.weights.items() if k.startswith("head.")})
        state.load(ck.weights, ck.extras["dns"])
        ewc.load(ck.weights, dev)
        matrix, losses = ck.extras["matrix"], ck.extras["losses"]
        done = int(ck.state["step"])
        ctx.history[:] = list(ck.extras.get("history", []))
    untrained = _untrained(matrix[0], T)

    def writer(step: int, final: bool):
        def write(d: Path) -> None:
            weights = {f"head.{k}": v for k, v in heads.state_dict().items()}
            weights.update(state.state_tensors())
            weights.update(ewc.state_tensors())
            save_checkpoint(d, method=SLUG, config=cfg, weights=weights,
                            state={"step": step, "final": final, "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"dns": state.state_json(), "matrix": matrix, "losses": losses,
                                    "history": ctx.history, "class_bank": class_banks(host_tasks),
                                    "modalities": mods, "tasks": [[t.name, t.mod_a, t.mod_b] for t in tasks]})
        return write

    if cfg.method == "joint":
        if done < T:
            losses.append(train_joint(heads, tasks, cfg, ctx, model))
            matrix = [matrix[0], evaluate_all(heads, tasks, cfg)]
        metrics = {"step": T, **_summary_all(matrix[1], T), **untrained, **losses[-1]}
        ctx.report(metrics, checkpoint=writer(T, True))
        return ctx.history[-1]

    for t in range(done + 1, T + 1):
        info = train_step(heads, tasks[t - 1], t, cfg, state, ewc, ctx, model)
        matrix.append(evaluate_all(heads, tasks, cfg))
        losses.append({k: v for k, v in info.items() if k.startswith("train/")})
        metrics = {"step": t, **step_metrics(matrix, t), **untrained, **info,
                   "train/min_loss_drop": float(min(l["train/loss_drop"] for l in losses))}
        ctx.report(metrics, checkpoint=writer(t, t == T))
    if done >= T and ctx.history:  # resumed a finished run: report its last metrics once more
        ctx.report(dict(ctx.history[-1]), checkpoint=writer(T, True))
    return ctx.history[-1]


def _summary_all(row: list[dict], T: int) -> dict:
    out = summary(row, T)
    out["eval/pool"] = float(min(r["pool"] for r in row))
    return out


def _untrained(row: list[dict], T: int) -> dict:
    return {k.replace("eval/", "untrained/"): v for k, v in _summary_all(row, T).items() if k != "eval/pool"}


def train_joint(heads: Heads, tasks, cfg: Config, ctx: RunContext | None = None, model=None) -> dict:
    """Upper reference: each batch from one step's pair, pairs drawn in proportion to their size; the same
    total number of updates as the sequential run (epochs x batches per step, summed) and one linear decay."""
    dt, dev = _dtype(cfg), _device(heads)
    model = heads if model is None else model
    data = [(t.mod_a, t.mod_b, _x(t.xa_train, dt, dev), _x(t.xb_train, dt, dev)) for t in tasks]
    sizes = np.array([len(d[2]) for d in data], dtype=float)
    total = int(sum(math.ceil(n / cfg.batch_size) * cfg.epochs for n in sizes))
    pw = [heads.W[m] for m in heads.modalities]
    pb = [heads.b[m] for m in heads.modalities] if cfg.train_bias else []
    opt = make_optimizer(pw, pb, cfg)  # absent heads have grad None in a batch: AdamW skips them (no decay)
    sched = make_schedule(opt, total, cfg)
    rng = np.random.default_rng(cfg.seed * 7 + 3)
    choice = rng.choice(len(data), size=total, p=sizes / sizes.sum())
    queues = [[] for _ in data]
    epochs = [0] * len(data)
    start = float(np.mean([mean_train_loss(heads, t, cfg) for t in tasks]))
    for k in range(total):
        j = int(choice[k])
        if not queues[j]:
            queues[j] = batches(int(sizes[j]), cfg.batch_size, cfg.seed, 10_000 + j, epochs[j], dev)
            epochs[j] += 1
        idx = queues[j].pop(0)
        a, b, xa, xb = data[j]
        opt.zero_grad(set_to_none=True)
        with _autocast(ctx):
            loss = batch_loss(model, a, b, xa, xb, idx, cfg, ctx)
        _backward(ctx, loss)
        average_gradients(ctx, pw + pb)
        _step(ctx, opt)
        sched.step()
    end = float(np.mean([mean_train_loss(heads, t, cfg) for t in tasks]))
    return {"train/loss_start": start, "train/loss_end": end, "train/loss_drop": 1.0 - end / max(start, 1e-12),
            "train/updates": float(total)}
