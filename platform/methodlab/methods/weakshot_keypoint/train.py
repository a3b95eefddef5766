"""weakshot_keypoint fit, top to bottom.

Stage 1 (base classes, labelled): episodes of (support, query) pairs of one base class; L = L_pose + w_key L_key
+ w_corr L_corr. Stage 2 (from the stage-1 weights): each step = a base batch (same losses) + novel pairs (I, J) of
one novel class with the class's support (labelled 1-shot, or a keyness pseudo-support when support_shots = 0);
pseudo labels p_hat, c from the EMA teacher, refreshed every `pseudo_refresh_every` steps;
transfer: lambda_kt L_kt + lambda_ct (L_ct + L_cs); naive: L_st on the raw gated pseudo labels.
Stage "eval" trains nothing (the base-only baseline is a stage-1 checkpoint evaluated here).
Novel labels are behind the data guard for the whole training loop. With world_size > 1 each rank draws its own
episodes and pseudo-labels its shard of novel images; gradients and the BatchNorm running statistics are averaged
over ranks after every step (ctx.all_reduce, float32 on ctx.device; the role SyncBatchNorm has in the spec: it works
at every device and needs no DDP, which would not see the parts features / match / heads the losses call), so every
rank holds the same weights and EMA teacher.

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

from methodlab.core import CheckpointError, RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.methods.weakshot_keypoint.config import Config
from methodlab.methods.weakshot_keypoint.data import KPData, build_data
from methodlab.methods.weakshot_keypoint.evaluate import evaluate, fit_assignment, predict
from methodlab.methods.weakshot_keypoint.model import (KeypointNet, cells_to_px, corr_infonce, corr_local_target,
                                                       corr_transfer_loss, keyness_peaks, keyness_window_loss,
                                                       local_softargmax, pose_loss, px_to_cells, sample_at)

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
def base_episode(data: KPData, by_class: dict, n: int, gen: torch.Generator):
    """n (support, query) pairs of base classes, drawn on the host by `gen`; images and labels on the pool's device."""
    classes = list(by_class)
    cs = torch.randint(len(classes), (n,), generator=gen, device="cpu")
    s_idx, q_idx = [], []
    for ci in cs.tolist():
        pool = by_class[classes[ci]]
        a, b = torch.randperm(len(pool), generator=gen, device="cpu")[:2].tolist()
        s_idx.append(int(pool[a]))
        q_idx.append(int(pool[b]))
    s_idx, q_idx = torch.tensor(s_idx, device="cpu"), torch.tensor(q_idx, device="cpu")
    s_kps, s_vis, _ = data.labels(s_idx)
    q_kps, q_vis, _ = data.labels(q_idx)
    return data.take(s_idx), s_kps, s_vis, data.take(q_idx), q_kps, q_vis


def base_losses(cfg: Config, net: KeypointNet, ep, gen, amp=contextlib.nullcontext):
    """L_pose + w_key L_key + w_corr L_corr of a base episode; the parts are detached device tensors. The network
    runs under `amp()` (ctx.autocast); decoding and losses in float32."""
    s_img, s_kps, s_vis, q_img, q_kps, q_vis = ep
    n = len(s_img)
    with amp():
        f = net.features(torch.cat([s_img, q_img]))
        logits = net.match(f[:n], s_kps, s_vis, f[n:])
        k, desc = net.heads(f)
    logits, k, desc = logits.float(), k.float(), desc.float()
    h, w = f.shape[-2:]
    pos, _ = net.decode(logits, h, w)
    both = s_vis & q_vis
    q_c, s_c = px_to_cells(q_kps, net.stride), px_to_cells(s_kps, net.stride)
    l_pose = pose_loss(logits, pos, q_c, both.float(), h, w, cfg.heatmap_sigma)
    l_key, _ = keyness_window_loss(k, torch.cat([s_c, q_c]), torch.cat([s_vis, q_vis]), cfg.window, gen)
    l_corr = corr_infonce(desc[:n], desc[n:], s_c, q_c, both, cfg.tau_c)
    loss = l_pose + cfg.w_key * l_key + cfg.w_corr * l_corr
    return loss, {"train/l_pose": l_pose.detach(), "train/l_key": l_key.detach(), "train/l_corr": l_corr.detach()}


@torch.no_grad()
def refresh_pseudo(teacher, data, supports, rank: int, world: int) -> dict:
    """EMA-teacher pseudo labels of this rank's shard of novel_train images: class -> (idx, p_hat cells, conf)."""
    out = {}
    for c in data.novel_classes:
        idx = data.index("novel_train", c)[rank::world]
        pos_px, conf = predict(teacher, data, idx, supports[c])
        out[c] = (idx, px_to_cells(pos_px, teacher.stride), conf)
    return out


def novel_losses(cfg: Config, net: KeypointNet, data, supports, pseudo, n_pairs: int, gen, amp=contextlib.nullcontext):
    """Stage-2 loss on n_pairs novel (I, J) pairs drawn on the host by `gen`; parts are detached device tensors.
    The network runs under `amp()` (ctx.autocast); decoding and losses in float32."""
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
    n = len(cs)
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
    gi = (ci >= cfg.conf_threshold) & kmask & sup_val
    gj = (cj >= cfg.conf_threshold) & kmask & sup_val
    parts = {"train/gate_frac": (torch.cat([gi, gj]).float().sum() / kmask.float().sum().clamp(min=1) / 2).detach()}
    zero = f.float().sum() * 0
    if naive:
        l_st = ((ci * (p_i - phi).abs().sum(-1) * gi).sum() + (cj * (p_j - phj).abs().sum(-1) * gj).sum()) \
            / (gi.sum() + gj.sum()).clamp(min=1)
        parts["train/l_st"] = l_st.detach()
        return l_st, parts
    loss = zero
    k, desc = k.detach().float(), desc.detach().float()
    if cfg.lambda_kt > 0:
        q_i = local_softargmax(k[:n], phi, cfg.window, cfg.keyness_temp)
        q_j = local_softargmax(k[n:], phj, cfg.window, cfg.keyness_temp)
        l_kt = ((ci * (p_i - q_i).abs().sum(-1) * gi).sum() + (cj * (p_j - q_j).abs().sum(-1) * gj).sum()) \
            / (gi.sum() + gj.sum()).clamp(min=1)
        loss = loss + cfg.lambda_kt * l_kt
        parts["train/l_kt"] = l_kt.detach()
    if cfg.lambda_ct > 0:
        d_i, d_j = desc[:n], desc[n:]
        v_j = corr_local_target(d_i, d_j, phi, phj, cfg.corr_window, cfg.tau_c)
        u_i = corr_local_target(d_j, d_i, phj, phi, cfg.corr_window, cfg.tau_c)
        s_hat = (F.normalize(sample_at(d_i, phi), dim=-1) * F.normalize(sample_at(d_j, phj), dim=-1)).sum(-1).clamp(min=0)
        wgt = ci * cj * s_hat
        both = gi & gj
        l_ct = corr_transfer_loss(p_i, p_j, v_j, u_i, wgt, both.float())
        l_corr = l_ct
        if cfg.cs_term:
            s = 0.5 * (1 + (F.normalize(sample_at(d_i, p_i), dim=-1) * F.normalize(sample_at(d_j, p_j), dim=-1)).sum(-1))
            l_cs = -(wgt * s.clamp(min=1e-6).log() * both).sum() / both.sum().clamp(min=1)
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


def _allreduce_grads(net, ctx: RunContext):
    """Average gradients over ranks (and, without SyncBatchNorm, the BatchNorm running statistics) so every rank
    takes the same step and the EMA teachers stay identical (float32 tensors on ctx.device)."""
    for p in net.parameters():
        if p.grad is not None:
            ctx.all_reduce(p.grad, op="mean")
    for name, b in net.named_buffers():
        if b.is_floating_point() and ("running_mean" in name or "running_var" in name):
            ctx.all_reduce(b, op="mean")


def _broadcast_params(net, ctx: RunContext):
    """Rank 0's parameters and floating-point buffers on every rank."""
    for t in list(net.parameters()) + [b for b in net.buffers() if b.is_floating_point()]:
        ctx.broadcast(t.data, 0)


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
    seed_everything(cfg.seed)  # the same initial weights on every rank; episodes differ through `gen`
    t0 = time.perf_counter()
    data = build_data(cfg).to(ctx.device)  # the data pool on the device (bookkeeping on the host)
    t_data = time.perf_counter() - t0
    with ctx.init_module():
        net = build_net(cfg)
    world, rank = max(1, ctx.world_size), ctx.rank
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed * 7919 + rank)  # host episode sampler (module doc)
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
    if world > 1:
        _broadcast_params(net, ctx)
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
            loss, parts = base_losses(cfg, net, base_episode(data, by_class, cfg.batch_pairs, gen), gen, ctx.autocast)
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            if world > 1:
                _allreduce_grads(net, ctx)
            ctx.optimizer_step(opt)
            step += 1
            if step % cfg.log_every == 0 or step == s1_total:
                info["t_stage1"] = info.get("t_stage1", 0.0) + time.perf_counter() - t1
                with _released(data):
                    report({"stage": 1, "train/loss": loss.detach(), **parts}, step == total,
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
                pseudo = refresh_pseudo(teacher, data, supports, rank, world)
            net.train()
            l_base, parts = base_losses(cfg, net, base_episode(data, by_class, cfg.batch_pairs, gen), gen, ctx.autocast)
            l_nov, p2 = novel_losses(cfg, net, data, supports, pseudo, cfg.novel_pairs, gen, ctx.autocast)
            loss = l_base + l_nov
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            if world > 1:
                _allreduce_grads(net, ctx)
            ctx.optimizer_step(opt)
            ema_update(teacher, net, cfg.ema_decay)
            step += 1
            if (step - s1_total) % cfg.log_every == 0 or step == total:
                info["t_stage2"] = info.get("t_stage2", 0.0) + time.perf_counter() - t2
                with _released(data):
                    report({"stage": 2, "train/loss": loss.detach(), **parts, **p2}, step == total,
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
