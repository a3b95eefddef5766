"""graphrta fit, top to bottom (full batch): source pre-training with early stopping -> (threshold baseline:
tau on the target val split) -> pruning masks -> adaptation epochs of (a) one model step on L,
(b) one graph-reprogramming step, (c) BMM refit -> inference on the reprogrammed target graph.
Checkpoints after pre-training and every `checkpoint_every` adaptation epochs; a resume continues there.
Graphs, split indices, the network, the reprogramming variables, the Beta mixture and every generator live on
ctx.device; losses and metrics are read back to the host at reports only (the network's forwards run under
ctx.autocast, the graph variables and their Adam stay float32).

Data parallel (scaling.num_workers > 1): every rank holds both graphs, does the full-graph forward and every
random draw (the same generators as one worker), takes its shard of the loss's nodes (source train nodes,
target nodes: ctx.shard, a maths.Part) and the gradients are averaged by ctx.average_gradients (no DDP wrapper:
the discriminator gets no gradient in pre-training, the graph step differentiates the network with respect to
its input, and the classifier and discriminator are called outside the network's forward). The graph
reprogramming step, the Beta mixture, the pruning importance and the evaluation are replicated: the same full
computation on every rank. Early stopping reads rank 0's validation accuracy and the pruning masks are rank 0's,
so a last-bit difference between the ranks' forwards (GPU scatter-adds) cannot split their control flow."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.graphrta import maths
from methodlab.methods.graphrta.config import Config
from methodlab.methods.graphrta.data import build_pair
from methodlab.methods.graphrta.evaluate import choose_tau, open_set_metrics, threshold_predict
from methodlab.methods.graphrta.maths import global_mean, node_part, rank0_masks
from methodlab.methods.graphrta.model import build_net
from methodlab.methods.graphrta.reprogram import GraphReprogram

SLUG = "graphrta"


def grl_lambda(cfg, epoch: int) -> float:
    if not cfg.grl_ramp or cfg.adapt_epochs == 0:
        return cfg.grl_coeff
    return cfg.grl_coeff * (2.0 / (1.0 + math.exp(-10.0 * epoch / cfg.adapt_epochs)) - 1.0)


def full_loss(cfg, net, pair, rp, w_fn, gen, *, detach_graph=True, coeff=1.0, parts=(None, None)):
    """L = L_cls(source train) + unknown supervision + L_adv + L_ent on the current reprogrammed target.
    parts: this rank's shares of the source train nodes and the target nodes (node_part; None: all of them)."""
    s, tr, k = pair.source, pair.src_train, pair.n_known
    part_s, part_t = parts
    z_s, lo_s = net(s.x, s.edge_index)
    x_hat, ei, ew = rp.soft(detach=detach_graph)
    z_t, lo_t = net(x_hat, ei, ew)
    u = lo_t.softmax(-1)[:, k].detach()
    w = w_fn(u)
    l_cls = maths.cls_loss(lo_s[tr], z_s[tr], s.y[tr], net.classifier, cfg.beta_ph, cfg.beta_mix, cfg.mix_lambda, gen,
                           part_s)
    l_unk = maths.unknown_loss(lo_t, w, cfg.unk_loss, part_t)
    l_adv = maths.adv_loss(net.disc, z_s[tr], z_t, w, cfg.grl_split, coeff, cfg.adv_form, part_s, part_t)
    l_ent = maths.entropy_loss(lo_t, part_t)
    loss = l_cls + cfg.w_unk * l_unk + cfg.w_adv * l_adv + cfg.w_ent * l_ent
    parts = {"train/l_cls": l_cls.detach(), "train/l_unk": l_unk.detach(), "train/l_adv": l_adv.detach(),
             "train/l_ent": l_ent.detach()}  # 0-d tensors on the device: floats at report time
    return loss, parts, u


def compute_prune(cfg, net, pair, rp, gen):
    """Masks from |W * dL/dW| of the full objective at M = 1 (eval mode: a deterministic gradient)."""
    for lin in net.encoder.masked():
        lin.mask.fill_(1.0)
    was = net.training
    net.eval()
    net.zero_grad(set_to_none=True)
    loss, _, _ = full_loss(cfg, net, pair, rp, lambda u: u, gen)
    loss.backward()
    maths.prune_masks(net.encoder.masked(), cfg.effective_prune)
    net.zero_grad(set_to_none=True)
    net.train(was)


@torch.no_grad()
def predict(cfg, net, rp, pair, tau=None):
    """Predictions on every target node: argmax over K+1 on the evaluated graph (raw for the baselines)."""
    net.eval()
    t = pair.target
    if rp is not None and rp.enabled:
        x, ei, ew = rp.hard(cfg.edge_eval, cfg.flip_min_prob)
    elif rp is not None:
        x, ei, ew = t.x + rp.delta_x.detach(), t.edge_index, None
    else:
        x, ei, ew = t.x, t.edge_index, None
    _, logits = net(x, ei, ew)
    probs = logits.softmax(-1)
    net.train()
    pred = threshold_predict(probs, tau) if tau is not None else probs.argmax(-1)
    return pred, probs


def _eval(cfg, net, rp, pair, tau=None) -> dict:
    pred, _ = predict(cfg, net, rp, pair, tau)
    idx = pair.tgt_test
    return open_set_metrics(pred[idx].cpu().numpy(), pair.target.y[idx].cpu().numpy(), pair.n_known)


def _rng_state(gen, device) -> tuple:
    """The random state an epoch consumes: the method's generator and the global one dropout draws from."""
    dev_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return gen.get_state(), torch.get_rng_state(), dev_state


def _set_rng_state(gen, device, state: tuple) -> None:
    gen.set_state(state[0])
    torch.set_rng_state(state[1])
    if state[2] is not None:
        torch.cuda.set_rng_state(state[2], device)


def _deep_clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _deep_clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_clone(v) for v in obj]
    return obj


def pretrain(cfg, net, opt, pair, gen, ctx, t0, model=None):
    """Source-only training on L_cls (K+1 head with placeholder + mixup terms; plain CE for the K-way
    threshold baseline), early stopping on source val accuracy, best weights restored. `net` is the prepared
    module (its forward runs), `model` the raw one (state dict).

    Early stopping without a host read per epoch: the best accuracy, the patience counter and the stopping epoch
    are device tensors, read every `log_every` epochs (where a report is written anyway) and at the end. Epochs
    run past the stopping point in between are undone: the random state (the method's generator and the global
    one) and the optimiser state return to the end of the stopping epoch, and the best weights are restored as
    before, so the result is that of stopping at once."""
    model = net if model is None else model
    s, tr, va = pair.source, pair.src_train, pair.src_val
    dev = s.x.device
    best = torch.full((), -1.0, device=dev)
    bad = torch.zeros((), dtype=torch.long, device=dev)
    stop_at = torch.zeros((), dtype=torch.long, device=dev)  # the epoch at which patience ran out (0: not yet)
    best_state = {k: v.clone() for k, v in model.state_dict().items()}
    seen = torch.zeros((), dtype=torch.bool, device=dev)  # any improvement yet (as `best_state is not None` was)
    after = {}  # epoch -> (random state, optimiser state) at its end, since the last read of stop_at
    epoch = 0
    for epoch in range(1, cfg.pretrain_epochs + 1):
        net.train()
        part = node_part(ctx, tr)  # this rank's source train nodes (all of them on one worker)
        with ctx.autocast():
            z, lo = net(s.x, s.edge_index)
            if cfg.method == "source_threshold":
                loss = maths.ce(lo[tr], s.y[tr], part)
            else:
                loss = maths.cls_loss(lo[tr], z[tr], s.y[tr], net.classifier, cfg.beta_ph, cfg.beta_mix,
                                      cfg.mix_lambda, gen, part)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.average_gradients(model.parameters())  # the whole batch's gradient (a no-op on one worker)
        ctx.optimizer_step(opt)
        with torch.no_grad():
            net.eval()
            acc = (net(s.x, s.edge_index)[1][va].argmax(-1) == s.y[va]).float().mean()
            acc = ctx.broadcast(acc.reshape(1)).reshape(())  # rank 0's: one early-stopping path on every rank
            live = stop_at == 0
            improved = acc > best
            keep = improved & live
            best = torch.where(keep, acc, best)
            seen = seen | keep
            for k, v in model.state_dict().items():
                best_state[k].copy_(torch.where(keep, v, best_state[k]))
            bad = torch.where(live, torch.where(improved, torch.zeros_like(bad), bad + 1), bad)
            stop_at = torch.where(live & (bad >= cfg.patience), torch.full_like(stop_at, epoch), stop_at)
        report = epoch % cfg.log_every == 0
        if not (report or epoch == cfg.pretrain_epochs):
            after[epoch] = (_rng_state(gen, dev), _deep_clone(opt.state_dict()))
            continue
        stopped = int(stop_at)  # the one host read of the early-stopping state, every log_every epochs
        if stopped and stopped < epoch:  # patience ran out in between: undo the epochs after it, no report
            rng, opt_state = after[stopped]
            _set_rng_state(gen, dev, rng)
            opt.load_state_dict(opt_state)
            epoch = stopped
            break
        after.clear()
        if report:
            m = {"epoch": epoch, "phase": 0, "train/loss": global_mean(ctx, [loss])[0], "src/val_acc": float(acc),
                 "time/s": time.perf_counter() - t0}
            m.update(_eval(cfg, model, None, pair) if cfg.method != "source_threshold" else
                     {"eval/h_score": float("nan")})
            ctx.report(m)
        if stopped:
            break
    if bool(seen):
        model.load_state_dict(best_state)
    return epoch, float(best)


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    if cfg.batching == "neighbor":
        from methodlab.methods.graphrta.minibatch import fit_neighbor

        return fit_neighbor(cfg, ctx)
    t0 = time.perf_counter()
    dev = ctx.device
    pair = build_pair(cfg, ctx.progress, device=dev)
    k = pair.n_known
    with ctx.init_module():
        model = build_net(cfg, pair.source.x.shape[1], k)
    # forwards run through `net`; state dicts and pruning masks are `model`'s. No DDP wrapper: gradients are
    # averaged over the ranks by ctx.average_gradients (see the module docstring)
    net = ctx.prepare_model(model, ddp=False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator(device=dev).manual_seed(cfg.seed + 1)
    rp = None
    if cfg.adapts:
        rp = GraphReprogram(pair.target.x, pair.target.edge_index, budget_frac=cfg.edge_budget,
                            nonedge_ratio=cfg.candidate_nonedge_ratio, lr_feat=cfg.lr_feat, lr_adj=cfg.lr_adj,
                            gen=torch.Generator(device=dev).manual_seed(cfg.seed + 2), enabled=cfg.graph_reprogramming)
    bmm, info = maths.BetaMixture(dev), {"tau": None, "pre_epochs": 0, "src_val": 0.0, "val_h": None}
    adapt_epoch = 0

    if ctx.checkpoint is not None:  # resume at the saved adaptation epoch (on the device that wrote it: RNG states)
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        model.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        opt.load_state_dict(ck.torch_state["opt"])  # the model is on its device: the state follows it
        gen.set_state(ck.torch_state["gen"])
        torch.set_rng_state(ck.torch_state["rng"])
        if ck.torch_state.get("rng_device") is not None and dev.type == "cuda":
            torch.cuda.set_rng_state(ck.torch_state["rng_device"], dev)
        if rp is not None:
            rp.load(ck.weights, ck.torch_state.get("opt_g"))
        bmm = maths.BetaMixture.from_state(ck.state["bmm"], dev)
        info = dict(ck.state["info"])
        adapt_epoch = int(ck.state["adapt_epoch"])
        ctx.history[:] = list(ck.extras.get("history", []))
    else:
        info["pre_epochs"], info["src_val"] = pretrain(cfg, net, opt, pair, gen, ctx, t0, model)
        if cfg.method == "source_threshold":
            _, probs = predict(cfg, model, None, pair)
            info["tau"], info["val_h"] = choose_tau(probs, pair.target.y, pair.tgt_val)
        if cfg.adapts:
            if cfg.effective_prune > 0:
                compute_prune(cfg, model, pair, rp, gen)
                rank0_masks(ctx, model)
            opt = torch.optim.Adam(model.parameters(), lr=cfg.adapt_lr or cfg.lr, weight_decay=cfg.weight_decay)
            _, probs = predict(cfg, model, rp, pair)
            bmm.fit(probs[:, k], cfg.bmm_iters)  # schedule step 2: BMM fitted before the first adaptation epoch

    def writer(step, final):
        def write(d: Path):
            w = {f"net.{n}": v for n, v in model.state_dict().items()}
            ts = {"opt": opt.state_dict(), "gen": gen.get_state(), "rng": torch.get_rng_state()}
            if dev.type == "cuda":
                ts["rng_device"] = torch.cuda.get_rng_state(dev)  # dropout's generator on the GPU
            if rp is not None:
                w.update(rp.tensors())
                ts["opt_g"] = rp.opt.state_dict()
            save_checkpoint(d, method=SLUG, config=cfg, weights=w, torch_state=ts,
                            state={"step": step, "adapt_epoch": adapt_epoch, "final": final, "bmm": bmm.state(),
                                   "info": info, "n_features": int(pair.source.x.shape[1]), "n_known": k},
                            extras={"history": ctx.history})
        return write

    base = info["pre_epochs"]
    n_adapt = cfg.adapt_epochs if cfg.adapts else 0
    if adapt_epoch == 0 and ctx.checkpoint is None:
        m = {"epoch": base, "phase": 1, "time/s": time.perf_counter() - t0, "src/val_acc": info["src_val"]}
        m.update(_eval(cfg, model, rp, pair, info["tau"]))
        ctx.report(m, checkpoint=writer(base, n_adapt == 0))
    while adapt_epoch < n_adapt:
        adapt_epoch += 1
        warm = adapt_epoch <= cfg.bmm_warmup
        equal = cfg.bmm_prior == "equal"
        w_fn = (lambda u: u.clamp(maths.EPS_U, 1 - maths.EPS_U)) if warm else (lambda u: bmm.posterior(u, equal))
        if cfg.mask_refresh and adapt_epoch % cfg.mask_refresh == 0 and cfg.effective_prune > 0:
            compute_prune(cfg, model, pair, rp, gen)
            rank0_masks(ctx, model)
        net.train()
        coeff = grl_lambda(cfg, adapt_epoch)
        shares = (node_part(ctx, pair.src_train),  # this rank's source train nodes and target nodes
                  node_part(ctx, torch.arange(pair.target.num_nodes, device=dev)))
        with ctx.autocast():  # (a) model step, graph fixed
            loss, parts, u = full_loss(cfg, net, pair, rp, w_fn, gen, coeff=coeff, parts=shares)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.average_gradients(model.parameters())  # the whole batch's gradient (a no-op on one worker)
        ctx.optimizer_step(opt)
        model.encoder.apply_masks()
        loss_g, u_g = rp.step(net, w_fn, w_ent=cfg.w_ent, w_adv=cfg.w_adv, w_unk=cfg.w_unk,  # (b) graph step
                              lambda_x=cfg.lambda_x, grl_split=cfg.grl_split, coeff=coeff, form=cfg.adv_form,
                              unk_mode=cfg.unk_loss, autocast=ctx.autocast)
        bmm.fit(u_g if u_g is not None else u, cfg.bmm_iters)  # (c) refit on detached unknown probabilities
        done = adapt_epoch == n_adapt
        if adapt_epoch % cfg.log_every == 0 or done:
            means = bmm.means()
            losses = dict(zip(["train/loss", *parts], global_mean(ctx, [loss, *parts.values()])))
            m = {"epoch": base + adapt_epoch, "phase": 1, "train/loss": losses.pop("train/loss"),
                 "train/loss_graph": float(loss_g), **losses,
                 "bmm/mean_known": means[0], "bmm/mean_unknown": means[1],
                 "rp/flips": rp.n_flips(cfg.edge_eval, cfg.flip_min_prob), "rp/p_sum": float(rp.p.detach().sum()),
                 "rp/dx_norm": float(rp.delta_x.detach().norm()), "time/s": time.perf_counter() - t0}
            m.update(_eval(cfg, model, rp, pair))
            save = done or adapt_epoch % cfg.checkpoint_every == 0
            ctx.report(m, checkpoint=writer(base + adapt_epoch, done) if save else None)
    return ctx.history[-1]
