"""Neighbour-sampled GraphRTA (`batching: neighbor`, for graphs that do not fit one batch; spec schedule 5):
each step pairs a source batch and a target batch (2-hop sampled subgraphs), does the model step and the
graph-reprogramming step on them; only the sampled rows of Delta X and the sampled candidate edges of p get
updated (row-sparse Adam). BMM refit every `bmm_refit_every` steps on the last batches' seed nodes; pruning
importance summed over 10 source + target batches; final inference layer-wise over the full target graph.
The graphs, the samplers' CSR, Delta X, p, their row-sparse Adam state, the Beta mixture and the generator all
live on ctx.device (the sampler's frontier sizes are the only per-step host reads: they size the next hop).

Data parallel (scaling.num_workers > 1): every rank draws the same global seed batches and samples the same
subgraphs (the one generator, as on one worker), does the forward on them and takes its shard of the seed nodes
for the loss (ctx.shard, a maths.Part); gradients are averaged by ctx.average_gradients (see train.py). The
graph step, the Beta mixture, the pruning importance and the final inference are replicated on every rank."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from methodlab.core import RunContext, save_checkpoint
from methodlab.methods.graphrta import maths
from methodlab.methods.graphrta.data import build_pair, flip_candidates
from methodlab.methods.graphrta.evaluate import open_set_metrics
from methodlab.methods.graphrta.maths import global_mean, node_part, rank0_masks
from methodlab.methods.graphrta.model import build_net, gcn_propagate
from methodlab.methods.graphrta.sampler import NeighborSampler


class RowAdam:
    """Adam whose state is dense but whose update touches only the given rows (lazy, like SparseAdam)."""

    def __init__(self, param: torch.Tensor, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.p, self.lr, self.b1, self.b2, self.eps = param, lr, betas[0], betas[1], eps
        self.m, self.v = torch.zeros_like(param), torch.zeros_like(param)
        self.t = torch.zeros(param.shape[0], dtype=torch.int32, device=param.device)

    @torch.no_grad()
    def step(self, rows: torch.Tensor, grad: torch.Tensor):
        rows, inv = torch.unique(rows, return_inverse=True)
        g = torch.zeros((len(rows),) + tuple(grad.shape[1:]), dtype=grad.dtype, device=grad.device).index_add_(0, inv, grad)
        self.t[rows] += 1
        t = self.t[rows].to(g.dtype).view(-1, *([1] * (g.dim() - 1)))
        m = self.m[rows].mul_(self.b1).add_(g, alpha=1 - self.b1)
        v = self.v[rows].mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        self.m[rows], self.v[rows] = m, v
        upd = (m / (1 - self.b1 ** t)) / ((v / (1 - self.b2 ** t)).sqrt() + self.eps)
        self.p[rows] -= self.lr * upd


@torch.no_grad()
def full_inference(net, x, edge_index, edge_weight, chunk: int):
    """Layer-wise over the whole graph: features in row chunks, messages in edge chunks (bounded memory)."""
    net.eval()
    h = x
    n = x.shape[0]
    for conv in net.encoder.convs:
        lin = torch.cat([conv.lin(h[s:s + chunk]) for s in range(0, n, chunk)])
        out = torch.zeros_like(lin)
        deg = torch.ones(n, device=x.device).index_add_(0, edge_index[1], edge_weight)
        dinv = deg.rsqrt()
        out += lin * (dinv * dinv)[:, None]
        for s in range(0, edge_index.shape[1], chunk * 4):
            e = edge_index[:, s:s + chunk * 4]
            w = dinv[e[0]] * edge_weight[s:s + chunk * 4] * dinv[e[1]]
            out.index_add_(0, e[1], lin[e[0]] * w[:, None])
        h = torch.relu(out + conv.bias)
        del lin
    logits = torch.cat([net.classifier(h[s:s + chunk]) for s in range(0, n, chunk)])
    return logits


def _forward(net, b, x_rows, ew):
    z, lo = net(x_rows, b.edge_index, ew)
    return z[:b.batch_size], lo[:b.batch_size]


def fit_neighbor(cfg, ctx: RunContext) -> dict:
    t0 = time.perf_counter()
    dev = ctx.device
    pair = build_pair(cfg, ctx.progress, device=dev)
    s, t, k = pair.source, pair.target, pair.n_known
    gen = torch.Generator(device=dev).manual_seed(cfg.seed + 1)
    with ctx.init_module():
        model = build_net(cfg, s.x.shape[1], k)
    # forwards through `net`; masks, state dict and full-graph inference on `model`. No DDP wrapper: gradients
    # are averaged over the ranks by ctx.average_gradients
    net = ctx.prepare_model(model, ddp=False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    s_sampler = NeighborSampler(s.edge_index, s.num_nodes, cfg.fanouts, gen)
    graph_rp = cfg.graph_reprogramming
    if graph_rp:
        pairs, exists = flip_candidates(t.edge_index, t.num_nodes, cfg.candidate_nonedge_ratio, gen)
    else:
        pairs = t.edge_index[:, t.edge_index[0] < t.edge_index[1]]
        exists = torch.ones(pairs.shape[1], dtype=torch.bool, device=dev)
    m = pairs.shape[1]
    t_edges = torch.cat([pairs, pairs.flip(0)], 1)  # edge e and e + m are the two directions of candidate e
    t_sampler = NeighborSampler(t_edges, t.num_nodes, cfg.fanouts, gen)
    budget = int(round(cfg.edge_budget * int(exists.sum()))) if graph_rp else 0
    delta_x = torch.zeros_like(t.x)
    p = torch.zeros(m, device=dev)
    adam_x, adam_p = RowAdam(delta_x, cfg.lr_feat), RowAdam(p, cfg.lr_adj)
    tr = pair.src_train
    bs = cfg.batch_size

    def src_batch():
        seeds = tr[torch.randint(0, len(tr), (min(bs, len(tr)),), generator=gen, device=dev)]
        return s_sampler.sample(seeds, s.x, s.y)

    pre = ctx.progress(range(1, cfg.pretrain_steps + 1), total=cfg.pretrain_steps, desc="source pre-training", unit="batch")
    for step in pre:  # source pre-training, no early stopping (spec preset)
        net.train()
        b = src_batch()
        part = node_part(ctx, b.n_id[:b.batch_size])  # this rank's seed nodes (all of them on one worker)
        with ctx.autocast():
            z, lo = _forward(net, b, b.x, None)
            loss = maths.cls_loss(lo, z, b.y[:b.batch_size], net.classifier, cfg.beta_ph, cfg.beta_mix,
                                  cfg.mix_lambda, gen, part)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.average_gradients(model.parameters())  # the whole batch's gradient (a no-op on one worker)
        ctx.optimizer_step(opt)
        if step % max(1, cfg.pretrain_steps // 5) == 0:
            ctx.report({"epoch": 0, "step": step, "phase": 0, "train/loss": global_mean(ctx, [loss])[0],
                        "eval/h_score": float("nan"), "time/s": time.perf_counter() - t0})

    def evaluate(x, ei) -> dict:  # full-graph layer-wise inference, metrics on the target test nodes
        pred = full_inference(model, x, ei, torch.ones(ei.shape[1], device=dev), cfg.infer_chunk).argmax(-1)
        return open_set_metrics(pred[pair.tgt_test].cpu().numpy(), t.y[pair.tgt_test].cpu().numpy(), k)

    raw_ei = torch.cat([pairs[:, exists], pairs[:, exists].flip(0)], 1)
    # the unadapted model on the raw target graph: the source-only reference of this very run
    ctx.report({"epoch": 0, "step": cfg.pretrain_steps, "phase": 0, **evaluate(t.x, raw_ei),
                "time/s": time.perf_counter() - t0})

    def tgt_batch(seeds):
        b = t_sampler.sample(seeds)
        c = b.e_id % m
        return b, c

    def t_weights(c, pv):
        return torch.where(exists[c], 1 - pv, pv)

    bmm, u_buf = maths.BetaMixture(dev), []
    if cfg.adapts and cfg.effective_prune > 0:  # importance summed over 10 source + target batches at M = 1
        for lin in model.encoder.masked():
            lin.mask.fill_(1.0)
        net.eval()
        model.zero_grad(set_to_none=True)
        for _ in range(10):  # float32 gradients (no autocast, no loss scaling): they rank the weights
            bsrc = src_batch()
            bt, c = tgt_batch(torch.randint(0, t.num_nodes, (bs,), generator=gen, device=dev))
            zs, los = _forward(net, bsrc, bsrc.x, None)
            zt, lot = _forward(net, bt, t.x[bt.n_id], t_weights(c, p[c]))
            u = lot.softmax(-1)[:, k].detach()
            loss = (maths.cls_loss(los, zs, bsrc.y[:bsrc.batch_size], net.classifier, cfg.beta_ph, cfg.beta_mix,
                                   cfg.mix_lambda, gen) + maths.unknown_loss(lot, u) + maths.entropy_loss(lot)
                    + maths.adv_loss(net.disc, zs, zt, u, cfg.grl_split, 1.0, cfg.adv_form))
            loss.backward()
            u_buf.append(u)
        maths.prune_masks(model.encoder.masked(), cfg.effective_prune)
        model.zero_grad(set_to_none=True)
        rank0_masks(ctx, model)
    if u_buf:
        bmm.fit(torch.cat(u_buf), cfg.bmm_iters)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.adapt_lr or cfg.lr, weight_decay=cfg.weight_decay)
    steps = cfg.steps_per_epoch or math.ceil(t.num_nodes / bs)
    total = steps * cfg.adapt_epochs if cfg.adapts else 0
    u_buf = []
    for step in ctx.progress(range(1, total + 1), total=total, desc="adaptation + graph reprogramming", unit="batch"):
        net.train()
        coeff = cfg.grl_coeff * ((2 / (1 + math.exp(-10 * step / total)) - 1) if cfg.grl_ramp else 1.0)
        bsrc = src_batch()
        bt, c = tgt_batch(torch.randint(0, t.num_nodes, (bs,), generator=gen, device=dev))
        part_s = node_part(ctx, bsrc.n_id[:bsrc.batch_size])  # this rank's source and target seed nodes
        part_t = node_part(ctx, bt.n_id[:bt.batch_size])
        with ctx.autocast():
            zs, los = _forward(net, bsrc, bsrc.x, None)
            zt, lot = _forward(net, bt, t.x[bt.n_id] + delta_x[bt.n_id], t_weights(c, p[c]))
            u = lot.softmax(-1)[:, k].detach()
            w = bmm.posterior(u, cfg.bmm_prior == "equal")
            loss = (maths.cls_loss(los, zs, bsrc.y[:bsrc.batch_size], net.classifier, cfg.beta_ph, cfg.beta_mix,
                                   cfg.mix_lambda, gen, part_s)
                    + cfg.w_unk * maths.unknown_loss(lot, w, cfg.unk_loss, part_t)
                    + cfg.w_adv * maths.adv_loss(net.disc, zs, zt, w, cfg.grl_split, coeff, cfg.adv_form, part_s,
                                                 part_t)
                    + cfg.w_ent * maths.entropy_loss(lot, part_t))
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.average_gradients(model.parameters())  # the whole batch's gradient (a no-op on one worker)
        ctx.optimizer_step(opt)
        model.encoder.apply_masks()
        u_buf.append(u)
        if graph_rp:  # (b) graph step on the same target subgraph, model fixed, row-sparse updates
            net.eval()
            dx = delta_x[bt.n_id].clone().requires_grad_(True)
            pv = p[c].clone().requires_grad_(True)
            with ctx.autocast():
                zt, lot = _forward(net, bt, t.x[bt.n_id] + dx, t_weights(c, pv))
                lg = (cfg.w_ent * maths.entropy_loss(lot)
                      + cfg.w_adv * maths.adv_target(net.disc, zt, w, cfg.grl_split, coeff, cfg.adv_form)
                      + cfg.w_unk * maths.unknown_loss(lot, w, cfg.unk_loss) + cfg.lambda_x * dx.pow(2).sum())
            gx, gp = torch.autograd.grad(lg, [dx, pv])
            adam_x.step(bt.n_id, gx)
            adam_p.step(c, gp)
            p.clamp_(0, 1)
            if step % 10 == 0 or step == total:  # the global sum constraint: full projection every 10 steps
                p.copy_(maths.project_budget(p, budget))
        if step % cfg.bmm_refit_every == 0:
            bmm.fit(torch.cat(u_buf[-100:]), cfg.bmm_iters)
            u_buf = u_buf[-100:]
            ctx.report({"epoch": step / steps, "step": cfg.pretrain_steps + step, "phase": 1,
                        "train/loss": global_mean(ctx, [loss])[0], "train/u_mean": float(torch.cat(u_buf).mean()),
                        "bmm/mean_unknown": bmm.means()[1], "eval/h_score": float("nan"), "time/s": time.perf_counter() - t0})
    flips = maths.hard_flips(p, budget, "topk", cfg.flip_min_prob) if graph_rp else torch.zeros(m, dtype=torch.bool, device=dev)
    keep = exists ^ flips
    metrics = evaluate(t.x + delta_x, torch.cat([pairs[:, keep], pairs[:, keep].flip(0)], 1))
    metrics.update({"epoch": cfg.adapt_epochs, "step": cfg.pretrain_steps + total, "phase": 1,
                    "rp/flips": int(flips.sum()), "time/s": time.perf_counter() - t0})

    def write(d: Path):
        w = {f"net.{n}": v for n, v in model.state_dict().items()}
        save_checkpoint(d, method="graphrta", config=cfg, weights=w,
                        state={"step": metrics["step"], "adapt_epoch": cfg.adapt_epochs, "final": True,
                               "bmm": bmm.state(), "info": {"tau": None}, "n_features": int(s.x.shape[1]), "n_known": k})
    ctx.report(metrics, checkpoint=write)
    return ctx.history[-1]


__all__ = ["fit_neighbor", "full_inference", "RowAdam", "gcn_propagate"]
