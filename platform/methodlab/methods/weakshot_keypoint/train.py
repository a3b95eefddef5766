"""weakshot_keypoint fit, top to bottom.

Stage 1 (base classes, labelled): episodes of (support, query) pairs of one base class; L = L_pose + w_key L_key
+ w_corr L_corr. Stage 2 (from the stage-1 weights): each step = a base batch (same losses) + novel pairs (I, J) of
one novel class with the class's support (labelled 1-shot, or a keyness pseudo-support when support_shots = 0);
pseudo labels p_hat, c from the EMA teacher, refreshed every `pseudo_refresh_every` steps;
transfer: lambda_kt L_kt + lambda_ct (L_ct + L_cs); naive: L_st on the raw gated pseudo labels.
Stage "eval" trains nothing (the base-only baseline is a stage-1 checkpoint evaluated here).
Novel labels are behind the data guard for the whole training loop.

Data parallel (world_size > 1): every rank draws the same global step (base pairs, window shifts, novel pairs: one
host sampler seeded as on one worker) and takes its pairs with ctx.shard; each loss term is the rank's part of the
whole step's mean (its keypoints' sum over the step's count, known from the labels and pseudo labels every rank
holds), so the ranks' parts add up to the 1-worker loss. BatchNorm is synchronised (RankSyncedBatchNorm2d: the
whole step's batch statistics through ctx.all_reduce, the role SyncBatchNorm has in the spec, on any device), so
each rank's forward is that of the whole batch. Pseudo labels are predicted by each rank for its shard of the novel
images and summed into the whole set. Gradients are averaged with ctx.average_gradients after every step (no DDP:
it would not see the parts features / match / heads the losses call), so every rank holds the same weights,
BatchNorm statistics and EMA teacher, and the run follows the 1-worker trajectory up to float summation order.

Devices and precision: the network, the EMA teacher, the data pool (images, keypoints), supports and pseudo labels
live on ctx.device. Episodes (classes, image pairs, window shifts) are drawn by a host torch.Generator and copied to
the device, so the draws are the same on every device and CPU results are unchanged. The network's parts run under
ctx.autocast(); their outputs are cast to float32 before the soft-argmax decoding and the losses. Loss parts stay
on the device until a report reads them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from methodlab.core import CheckpointError, ConfigError, RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.methods.weakshot_keypoint.config import Config
from methodlab.methods.weakshot_keypoint.data import KPData, build_data
from methodlab.methods.weakshot_keypoint.evaluate import evaluate, fit_assignment, predict, sanity_metrics
from methodlab.methods.weakshot_keypoint.model import (KeypointNet, cells_to_px, corr_infonce, corr_local_target,
                                                       corr_transfer_loss, keyness_peaks, keyness_window_loss,
                                                       local_softargmax, pose_loss, px_to_cells, sample_at,
                                                       sync_batchnorm, window_shifts)

SLUG = "weakshot_keypoint"


def build_net(cfg: Config) -> KeypointNet:
    """The network on the current default device (build it under ctx.init_module() / torch.device)."""
    return KeypointNet(cfg.channels, cfg.embed, cfg.stride, cfg.match_layers, cfg.conf_radius)


def clone_net(cfg: Config, net: KeypointNet, ctx: RunContext) -> KeypointNet:
    """A copy of `net` on ctx.device (the EMA teacher): a fresh build + load_state_dict rather than deepcopy, so a
    student backbone compiled in place never shares its compiled call with the copy. The build's default init
    draws are taken from a forked RNG: the run's random streams are the same as with a deepcopy."""
    with torch.random.fork_rng(devices=[ctx.device] if ctx.device.type == "cuda" else []), ctx.init_module():
        twin = build_net(cfg)
    twin.load_state_dict(net.state_dict())
    return twin.train(net.training)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run folder (its newest checkpoint)."""
    p = Path(path)
    if (p / "config.json").exists() and (p / "state.json").exists():
        return p
    for root in (p / "checkpoints", p):
        ck = latest_checkpoint(root)
        if ck is not None:
            return ck
    raise CheckpointError(f"init_from {path}: no checkpoint there (run jobs/weakshot_keypoint/pretrain_base.yaml first)")


# ------------------------------------------------------------------------------------------- supports
def real_supports(data: KPData) -> dict:
    out = {}
    for c in data.novel_classes:
        i = data.index("novel_support", c)[:1]
        kps, vis, _ = data.labels(i)
        kc = data.k_of_class[c]
        out[c] = (data.take(i)[0], kps[0, :kc], vis[0, :kc])
    return out


@torch.no_grad()
def pseudo_supports(net: KeypointNet, data: KPData, candidates: int = 20, nms: int = 2) -> dict:
    """support_shots 0: per novel class, the unlabeled image (among the first `candidates`) whose K_c strongest
    distinct keyness peaks score highest; its peaks are the pseudo-support keypoints (no label read)."""
    was = net.training
    net.eval()
    out = {}
    for c in data.novel_classes:
        idx = data.index("novel_train", c)[:candidates]
        kc = data.k_of_class[c]
        k, _ = net.heads(net.features(data.take(idx)))
        best = None
        for b in range(len(idx)):
            peaks = keyness_peaks(k[b], kc, nms)
            score = float(k[b][peaks[:, 1].long(), peaks[:, 0].long()].mean())
            if best is None or score > best[0]:
                best = (score, b, peaks)
        _, b, peaks = best
        out[c] = (data.take(idx[b:b + 1])[0], cells_to_px(peaks, net.stride),
                  torch.ones(kc, dtype=torch.bool, device=k.device))
    net.train(was)
    return out


def make_assignments(net, data, supports) -> dict:
    """support_shots 0: Hungarian pseudo-keypoint -> keypoint-id mapping per class, on novel validation images."""
    out = {}
    for c in data.novel_classes:
        idx = data.index("novel_val", c)
        kc = data.k_of_class[c]
        pred, _ = predict(net, data, idx, supports[c])
        gt, vis, bbox = data.labels(idx)
        out[c] = fit_assignment(pred[:, :kc], gt[:, :kc], vis[:, :kc], bbox)
    return out


def run_eval(cfg: Config, net, data, supports) -> dict:
    assign = make_assignments(net, data, supports) if cfg.support_shots == 0 else None
    polish = {"window": cfg.window, "margin": cfg.polish_margin} if cfg.test_time_polish else None
    m, _ = evaluate(net, data, supports, cfg.eval_pcks, assign, polish=polish)
    return m


# ------------------------------------------------------------------------------------------- episodes
def base_pairs(by_class: dict, n: int, gen: torch.Generator) -> torch.Tensor:
    """n (support, query) image-index pairs of base classes (n, 2), drawn on the host by `gen`."""
    classes = list(by_class)
    cs = torch.randint(len(classes), (n,), generator=gen, device="cpu")
    s_idx, q_idx = [], []
    for ci in cs.tolist():
        pool = by_class[classes[ci]]
        a, b = torch.randperm(len(pool), generator=gen, device="cpu")[:2].tolist()
        s_idx.append(int(pool[a]))
        q_idx.append(int(pool[b]))
    return torch.stack([torch.tensor(s_idx, device="cpu"), torch.tensor(q_idx, device="cpu")], 1)


def base_episode(data: KPData, by_class: dict, n: int, gen: torch.Generator):
    """n (support, query) pairs of base classes, drawn on the host by `gen`; images and labels on the pool's device."""
    pairs = base_pairs(by_class, n, gen)
    s_idx, q_idx = pairs[:, 0], pairs[:, 1]
    s_kps, s_vis, _ = data.labels(s_idx)
    q_kps, q_vis, _ = data.labels(q_idx)
    return data.take(s_idx), s_kps, s_vis, data.take(q_idx), q_kps, q_vis


def base_step(cfg: Config, net: KeypointNet, data: KPData, by_class: dict, gen, ctx: RunContext):
    """The base part of a training step: the global episode (batch_pairs pairs and their keyness window shifts,
    drawn by `gen`: the same on every rank, and the same draws as base_episode + base_losses on one worker), this
    rank's pairs of it (ctx.shard) and their losses: the whole episode's on one worker, this rank's part of its
    means with several (see the module doc)."""
    pairs = base_pairs(by_class, cfg.batch_pairs, gen)
    n = len(pairs)
    s_kps, s_vis, _ = data.labels(pairs[:, 0])
    q_kps, q_vis, _ = data.labels(pairs[:, 1])
    shift = window_shifts((2 * n,) + tuple(s_kps.shape[1:]), cfg.window, gen)  # drawn for the whole episode
    denom = None
    if ctx.world_size > 1:  # the whole episode's counts: this rank's terms are its keypoints' sums over them
        both = (s_vis & q_vis).sum().clamp(min=1)
        denom = {"pose": both.float(), "key": (s_vis.sum() + q_vis.sum()).clamp(min=1), "corr": both}
    pairs, s_kps, s_vis, q_kps, q_vis, sh_s, sh_q = ctx.shard(pairs, s_kps, s_vis, q_kps, q_vis, shift[:n], shift[n:])
    ep = data.take(pairs[:, 0]), s_kps, s_vis, data.take(pairs[:, 1]), q_kps, q_vis
    return base_losses(cfg, net, ep, gen, ctx.autocast, shift=torch.cat([sh_s, sh_q]), denom=denom)


def base_losses(cfg: Config, net: KeypointNet, ep, gen, amp=contextlib.nullcontext, shift=None, denom=None):
    """L_pose + w_key L_key + w_corr L_corr of a base episode; the parts are detached device tensors. The network
    runs under `amp()` (ctx.autocast); decoding and losses in float32. shift: the keyness window shifts (drawn
    from `gen` here when None); denom: {"pose", "key", "corr"} counts of a larger batch this episode is a rank's
    part of (each term is then its sum over them), None: the episode's own means."""
    s_img, s_kps, s_vis, q_img, q_kps, q_vis = ep
    n = len(s_img)
    denom = denom or {}
    with amp():
        f = net.features(torch.cat([s_img, q_img]))
        logits = net.match(f[:n], s_kps, s_vis, f[n:])
        k, desc = net.heads(f)
    logits, k, desc = logits.float(), k.float(), desc.float()
    h, w = f.shape[-2:]
    pos, _ = net.decode(logits, h, w)
    both = s_vis & q_vis
    q_c, s_c = px_to_cells(q_kps, net.stride), px_to_cells(s_kps, net.stride)
    l_pose = pose_loss(logits, pos, q_c, both.float(), h, w, cfg.heatmap_sigma, denom=denom.get("pose"))
    l_key, _ = keyness_window_loss(k, torch.cat([s_c, q_c]), torch.cat([s_vis, q_vis]), cfg.window, gen,
                                   shift=shift, denom=denom.get("key"))
    l_corr = corr_infonce(desc[:n], desc[n:], s_c, q_c, both, cfg.tau_c, denom=denom.get("corr"))
    loss = l_pose + cfg.w_key * l_key + cfg.w_corr * l_corr
    return loss, {"train/l_pose": l_pose.detach(), "train/l_key": l_key.detach(), "train/l_corr": l_corr.detach()}


@torch.no_grad()
def refresh_pseudo(teacher, data, supports, ctx: RunContext | None = None) -> dict:
    """EMA-teacher pseudo labels of the novel_train images: class -> (idx, p_hat cells, conf). With several ranks
    each predicts its shard of the images (ctx.shard; the teacher is the same on every rank and predicts each image
    on its own, in eval mode) and the shards are summed into the whole set (one collective per class)."""
    out = {}
    for c in data.novel_classes:
        idx = data.index("novel_train", c)
        mine, at = ctx.shard(idx, torch.arange(len(idx), device=idx.device)) if ctx is not None else (idx, None)
        pos_px, conf = predict(teacher, data, mine, supports[c])
        if ctx is not None and ctx.world_size > 1:
            k = conf.shape[1]
            full = conf.new_zeros(len(idx), 3 * k)  # [x, y] per keypoint, then the confidences; zeros elsewhere
            full[at.to(full.device)] = torch.cat([pos_px.reshape(len(mine), 2 * k), conf], 1).float()
            full = ctx.all_reduce(full, op="sum")  # every rank's rows: the whole set
            pos_px, conf = full[:, :2 * k].reshape(len(idx), k, 2), full[:, 2 * k:]
        out[c] = (idx, px_to_cells(pos_px, teacher.stride), conf)
    return out


def novel_losses(cfg: Config, net: KeypointNet, data, supports, pseudo, n_pairs: int, gen, amp=contextlib.nullcontext,
                 ctx: RunContext | None = None):
    """Stage-2 loss on n_pairs novel (I, J) pairs drawn on the host by `gen`; parts are detached device tensors.
    The network runs under `amp()` (ctx.autocast); decoding and losses in float32. With a ctx the pairs are the
    global step's and this rank takes its share (ctx.shard): every term is its gated keypoints' sum over the whole
    step's count (the gates come from the pseudo labels every rank holds), so the ranks' parts add up to the
    1-worker loss; train/gate_frac is the whole step's on every rank."""
    classes = list(pseudo)
    cs = [classes[i] for i in torch.randint(len(classes), (n_pairs,), generator=gen, device="cpu").tolist()]
    k_max = max(data.k_of_class[c] for c in classes)
    ii, jj, phi, phj, ci, cj, sup_img, sup_kps, sup_val, kmask = [], [], [], [], [], [], [], [], [], []
    for c in cs:
        idx, ph, conf = pseudo[c]
        a, b = torch.randperm(len(idx), generator=gen, device="cpu")[:2].tolist()
        kc = data.k_of_class[c]
        pad = k_max - kc

        def padk(t, v=0.0):
            return F.pad(t, (0, 0, 0, pad), value=v) if t.dim() == 2 else F.pad(t, (0, pad), value=v)
        ii.append(idx[a])
        jj.append(idx[b])
        phi.append(padk(ph[a, :kc]))
        phj.append(padk(ph[b, :kc]))
        ci.append(padk(conf[a, :kc]))
        cj.append(padk(conf[b, :kc]))
        s_img, s_kps, s_val = supports[c]
        sup_img.append(s_img)
        sup_kps.append(padk(s_kps))
        sup_val.append(padk(s_val, False) if pad else s_val)
        kmask.append(torch.arange(k_max, device=ph.device) < kc)
    ii, jj = torch.stack(ii), torch.stack(jj)
    phi, phj, ci, cj = torch.stack(phi), torch.stack(phj), torch.stack(ci), torch.stack(cj)
    sup_img, sup_kps, sup_val, kmask = torch.stack(sup_img), torch.stack(sup_kps), torch.stack(sup_val), torch.stack(kmask)
    # the whole step's gates and counts (the denominators of every term), before this rank takes its pairs
    gi = (ci >= cfg.conf_threshold) & kmask & sup_val
    gj = (cj >= cfg.conf_threshold) & kmask & sup_val
    gate_frac = (torch.cat([gi, gj]).float().sum() / kmask.float().sum().clamp(min=1) / 2).detach()
    n_gated = (gi.sum() + gj.sum()).clamp(min=1)
    both_all = gi & gj
    n_both, n_both_f = both_all.sum().clamp(min=1), both_all.float().sum().clamp(min=1)
    if ctx is not None:
        ij, phi, phj, ci, cj, sup_img, sup_kps, sup_val, kmask = ctx.shard(
            torch.stack([ii, jj], 1), phi, phj, ci, cj, sup_img, sup_kps, sup_val, kmask)
        ii, jj = ij[:, 0], ij[:, 1]
    n = len(ii)
    naive = cfg.stage2_mode == "naive"
    with amp():
        f = net.features(torch.cat([data.take(ii), data.take(jj), sup_img]))
        f_i, f_j, f_s = f[:n], f[n:2 * n], f[2 * n:]
        logits_i = net.match(f_s, sup_kps, sup_val, f_i)
        logits_j = net.match(f_s, sup_kps, sup_val, f_j)
        if not naive:
            with torch.no_grad():  # K and R are transferred, not trained on novel images
                k, desc = net.heads(f[:2 * n])
    h, w = f.shape[-2:]
    p_i, _ = net.decode(logits_i.float(), h, w)
    p_j, _ = net.decode(logits_j.float(), h, w)
    gi = (ci >= cfg.conf_threshold) & kmask & sup_val  # this rank's pairs' gates
    gj = (cj >= cfg.conf_threshold) & kmask & sup_val
    parts = {"train/gate_frac": gate_frac}
    zero = f.float().sum() * 0
    if naive:
        l_st = ((ci * (p_i - phi).abs().sum(-1) * gi).sum() + (cj * (p_j - phj).abs().sum(-1) * gj).sum()) \
            / n_gated
        parts["train/l_st"] = l_st.detach()
        return l_st, parts
    loss = zero
    k, desc = k.detach().float(), desc.detach().float()
    if cfg.lambda_kt > 0:
        q_i = local_softargmax(k[:n], phi, cfg.window, cfg.keyness_temp)
        q_j = local_softargmax(k[n:], phj, cfg.window, cfg.keyness_temp)
        l_kt = ((ci * (p_i - q_i).abs().sum(-1) * gi).sum() + (cj * (p_j - q_j).abs().sum(-1) * gj).sum()) \
            / n_gated
        loss = loss + cfg.lambda_kt * l_kt
        parts["train/l_kt"] = l_kt.detach()
    if cfg.lambda_ct > 0:
        d_i, d_j = desc[:n], desc[n:]
        v_j = corr_local_target(d_i, d_j, phi, phj, cfg.corr_window, cfg.tau_c)
        u_i = corr_local_target(d_j, d_i, phj, phi, cfg.corr_window, cfg.tau_c)
        s_hat = (F.normalize(sample_at(d_i, phi), dim=-1) * F.normalize(sample_at(d_j, phj), dim=-1)).sum(-1).clamp(min=0)
        wgt = ci * cj * s_hat
        both = gi & gj
        l_ct = corr_transfer_loss(p_i, p_j, v_j, u_i, wgt, both.float(), n=n_both_f)
        l_corr = l_ct
        if cfg.cs_term:
            s = 0.5 * (1 + (F.normalize(sample_at(d_i, p_i), dim=-1) * F.normalize(sample_at(d_j, p_j), dim=-1)).sum(-1))
            l_cs = -(wgt * s.clamp(min=1e-6).log() * both).sum() / n_both
            l_corr = l_corr + l_cs
            parts["train/l_cs"] = l_cs.detach()
        loss = loss + cfg.lambda_ct * l_corr
        parts["train/l_ct"] = l_ct.detach()
    return loss, parts


@torch.no_grad()
def ema_update(teacher, student, decay: float):
    for pt, ps in zip(teacher.parameters(), student.parameters()):
        pt.mul_(decay).add_(ps.detach(), alpha=1 - decay)
    for bt, bs in zip(teacher.buffers(), student.buffers()):
        bt.copy_(bs)


def _average(net, ctx: RunContext):
    """Average gradients over ranks (one float32 bucket on ctx.device) so every rank takes the same step and the
    EMA teachers stay identical (the BatchNorm running statistics are the same on every rank already: synchronised
    BatchNorm). A parameter without a gradient on a rank takes part with zeros, so every rank reduces the same set."""
    for p in net.parameters():
        if p.grad is None and p.requires_grad:
            p.grad = torch.zeros_like(p)
    ctx.average_gradients([p for p in net.parameters() if p.requires_grad])


# the parts that are the whole step's on every rank already (not a rank's share to be summed)
_WHOLE_STEP = frozenset({"train/gate_frac"})


def _global(values: dict, ctx: RunContext) -> dict:
    """The whole global step's values from the ranks' shares (their sum, one collective); as given on one worker."""
    if ctx.world_size <= 1:
        return values
    keys = [k for k in values if k not in _WHOLE_STEP and isinstance(values[k], torch.Tensor)]
    if not keys:
        return values
    total = ctx.all_reduce(torch.stack([values[k].detach().float().reshape(()).to(ctx.device) for k in keys]), op="sum")
    return {**values, **dict(zip(keys, total.unbind()))}


# ------------------------------------------------------------------------------------------- fit
def _supports_to_weights(supports: dict) -> dict:
    w = {}
    for c, (img, kps, val) in supports.items():
        w[f"support.{c}.image"] = img.contiguous()
        w[f"support.{c}.kps"] = kps.float().contiguous()
        w[f"support.{c}.valid"] = val.to(torch.uint8).contiguous()
    return w


def supports_from_weights(weights: dict, device=None) -> dict:
    """class -> (image, keypoints px, valid) from checkpoint weights, on `device` (None: where they are)."""
    out = {}
    for k in weights:
        if k.startswith("support.") and k.endswith(".image"):
            c = int(k.split(".")[1])
            sup = (weights[k], weights[f"support.{c}.kps"], weights[f"support.{c}.valid"].bool())
            out[c] = tuple(t.to(device) for t in sup) if device is not None else sup
    return out


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)  # the same initial weights on every rank (and rank 0's broadcast below)
    t0 = time.perf_counter()
    data = build_data(cfg).to(ctx.device)  # the data pool on the device (bookkeeping on the host)
    t_data = time.perf_counter() - t0
    with ctx.init_module():
        net = build_net(cfg)
    if ctx.world_size > 1:  # the whole step's BatchNorm statistics on every rank (before any optimiser exists)
        sync_batchnorm(net, ctx)
    world = max(1, ctx.world_size)
    if world > 1 and min(cfg.batch_pairs, cfg.novel_pairs if cfg.stage in ("both", "transfer") else world) < world:
        raise ConfigError(f"batch_pairs ({cfg.batch_pairs}) and novel_pairs ({cfg.novel_pairs}) must be at least "
                          f"num_workers ({world}): each rank trains on its share of every step's pairs",
                          field="batch_pairs")
    # host episode sampler (module doc): the same global steps on every rank (a 1-worker run's draws)
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed * 7919)
    by_class = {c: data.index("base", c) for c in data.base_classes}
    s1_total = cfg.stage1_steps if cfg.stage in ("both", "pretrain") else 0
    s2_total = cfg.stage2_steps if cfg.stage in ("both", "transfer") else 0
    step, supports, teacher, opt, info = 0, None, None, None, {"t_data": t_data, "t_stage1": 0.0, "t_stage2": 0.0}

    if ctx.checkpoint is not None:  # resume at the saved step
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        step = int(ck.state["step"])
        info.update(ck.state.get("info", {}))
        if any(n.startswith("ema.") for n in ck.weights):
            teacher = clone_net(cfg, net, ctx)
            teacher.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("ema.")})
        if ck.state.get("supports_fixed"):
            supports = supports_from_weights(ck.weights, ctx.device)
        lr = cfg.lr if step < s1_total else (cfg.lr_stage2 or cfg.lr)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        if ck.torch_state and "opt" in ck.torch_state:
            opt.load_state_dict(ck.torch_state["opt"])
            gen.set_state(ck.torch_state["gen"])
        ctx.history[:] = list(ck.extras.get("history", []))
    elif cfg.stage in ("transfer", "eval"):
        ck = load_checkpoint(resolve_checkpoint(cfg.init_from), method=SLUG)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        info["init_from"] = str(ck.path)
        if cfg.stage == "eval" and cfg.support_shots == 0 and ck.state.get("supports_fixed") \
                and ck.state.get("support_shots") == 0:
            supports = supports_from_weights(ck.weights, ctx.device)  # a stage-2 no-support checkpoint's own
    # rank 0's parameters and floating-point buffers on every rank (a no-op on one worker)
    ctx.broadcast_(list(net.parameters()) + [b for b in net.buffers() if b.is_floating_point()])
    if ctx.compile:  # training calls the network's parts (features / match / heads), not forward: compile the
        net.backbone.compile()  # backbone (the bulk of the compute) in place, so state_dict names stay as they are
    if opt is None:
        opt = torch.optim.Adam(net.parameters(), lr=cfg.lr if s1_total else (cfg.lr_stage2 or cfg.lr))

    def cur_supports():
        if supports is not None:
            return supports
        return real_supports(data) if cfg.support_shots == 1 else pseudo_supports(net, data)

    def writer(final: bool):
        def write(d: Path):
            w = {f"net.{n}": v for n, v in net.state_dict().items()}
            if teacher is not None:
                w.update({f"ema.{n}": v for n, v in teacher.state_dict().items()})
            w.update(_supports_to_weights(cur_supports()))
            save_checkpoint(d, method=SLUG, config=cfg, weights=w,
                            torch_state={"opt": opt.state_dict(), "gen": gen.get_state()},
                            state={"step": step, "final": final, "supports_fixed": supports is not None,
                                   "image_size": data.size, "stride": cfg.stride, "support_shots": cfg.support_shots,
                                   "k_of_class": {str(c): data.k_of_class[c] for c in data.novel_classes},
                                   "info": info},
                            extras={"history": ctx.history})
        return write

    def report(extra: dict, final: bool, save: bool):
        extra = {k: float(v) if isinstance(v, torch.Tensor) else v for k, v in extra.items()}  # read here
        m = {"step": step, "stage2_step": max(0, step - s1_total), **extra, "time/s": time.perf_counter() - t0}
        m.update(run_eval(cfg, net, data, cur_supports()))
        if final and cfg.sanity_checks:  # the spec's checks of the keyness / correspondence heads
            m.update(sanity_metrics(net, data, cfg.window))
        ctx.report(m, checkpoint=writer(final) if (save and ctx.is_main) or final else None)

    total = s1_total + s2_total
    if cfg.stage == "eval" or total == 0:
        report({"stage": 0}, True, True)
        return ctx.history[-1]

    with data.training(cfg.support_shots):
        # ---- stage 1: base classes only
        t1 = time.perf_counter()
        while step < s1_total:
            net.train()
            loss, parts = base_step(cfg, net, data, by_class, gen, ctx)
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss * world if world > 1 else loss)  # x world: undone by the mean over the ranks
            if world > 1:
                _average(net, ctx)
            ctx.optimizer_step(opt)
            step += 1
            if step % cfg.log_every == 0 or step == s1_total:
                info["t_stage1"] = info.get("t_stage1", 0.0) + time.perf_counter() - t1
                with _released(data):
                    report({"stage": 1, **_global({"train/loss": loss.detach(), **parts}, ctx)}, step == total,
                           step % cfg.checkpoint_every == 0 or step == s1_total)
                t1 = time.perf_counter()
        if s2_total == 0:
            return ctx.history[-1]
        # ---- stage 2: transfer to novel classes
        t2 = time.perf_counter()
        if supports is None:
            supports = cur_supports()  # fixed for stage 2 (pseudo-supports from the stage-1 model)
        if teacher is None:
            teacher = clone_net(cfg, net, ctx)
            opt = torch.optim.Adam(net.parameters(), lr=cfg.lr_stage2 or cfg.lr)
        for p in teacher.parameters():
            p.requires_grad_(False)
        pseudo = None
        if step == s1_total and ctx.checkpoint is None:
            info["t_stage2"] = 0.0
            with _released(data):
                report({"stage": 2}, False, False)
            t2 = time.perf_counter()
        while step < total:
            s2 = step - s1_total
            if pseudo is None or s2 % cfg.pseudo_refresh_every == 0:
                pseudo = refresh_pseudo(teacher, data, supports, ctx)
            net.train()
            l_base, parts = base_step(cfg, net, data, by_class, gen, ctx)
            l_nov, p2 = novel_losses(cfg, net, data, supports, pseudo, cfg.novel_pairs, gen, ctx.autocast, ctx=ctx)
            loss = l_base + l_nov
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss * world if world > 1 else loss)  # x world: undone by the mean over the ranks
            if world > 1:
                _average(net, ctx)
            ctx.optimizer_step(opt)
            ema_update(teacher, net, cfg.ema_decay)
            step += 1
            if (step - s1_total) % cfg.log_every == 0 or step == total:
                info["t_stage2"] = info.get("t_stage2", 0.0) + time.perf_counter() - t2
                with _released(data):
                    report({"stage": 2, **_global({"train/loss": loss.detach(), **parts, **p2}, ctx)}, step == total,
                           step % cfg.checkpoint_every == 0 or step == total)
                t2 = time.perf_counter()
    return ctx.history[-1]


class _released:
    """Evaluation inside the training loop reads novel val/test labels: lift the guard for the report only."""

    def __init__(self, data):
        self.data = data

    def __enter__(self):
        self.saved = self.data._training
        self.data._training = 0

    def __exit__(self, *a):
        self.data._training = self.saved
