"""Graph reprogramming of the target: a learned feature perturbation Delta X (dense n_t x f, init 0) and
continuous flip probabilities p on a candidate set (existing edges + sampled non-edges), A_hat = A + (1-2A) P,
projected after each Adam step onto {0 <= p <= 1, sum p <= B}. Shared by training and serving. Every tensor
lives on the device of the target features x (ctx.device in a run, the predictor's device when serving)."""

from __future__ import annotations

import contextlib

import torch

from methodlab.methods.graphrta import maths
from methodlab.methods.graphrta.data import flip_candidates


class GraphReprogram:
    def __init__(self, x, edge_index, *, budget_frac, nonedge_ratio, lr_feat, lr_adj, gen, enabled=True):
        self.x, self.enabled = x, enabled
        dev = x.device
        n = x.shape[0]
        if enabled:
            self.pairs, self.exists = flip_candidates(edge_index, n, nonedge_ratio, gen)
        else:  # no graph reprogramming: the raw graph, no variables
            und = edge_index[:, edge_index[0] < edge_index[1]]
            self.pairs, self.exists = und, torch.ones(und.shape[1], dtype=torch.bool, device=dev)
        n_edges = int(self.exists.sum())
        self.budget = int(round(budget_frac * n_edges)) if enabled else 0
        self.delta_x = torch.zeros_like(x, requires_grad=True)
        self.p = torch.zeros(self.pairs.shape[1], device=dev, requires_grad=True)
        self.opt = torch.optim.Adam([{"params": [self.delta_x], "lr": lr_feat}, {"params": [self.p], "lr": lr_adj}])

    def soft(self, detach: bool = False):
        """(x_hat, edge_index, edge_weight) with continuous flips: weight 1-p on an edge, p on a non-edge."""
        dx, p = (self.delta_x.detach(), self.p.detach()) if detach else (self.delta_x, self.p)
        w = torch.where(self.exists, 1 - p, p)
        ei = torch.cat([self.pairs, self.pairs.flip(0)], 1)
        return self.x + dx, ei, torch.cat([w, w])

    @torch.no_grad()
    def hard(self, mode="topk", min_prob=0.5, gen=None):
        """The evaluated graph: the top-B flips (p >= min_prob) applied, unit weights; mode 'soft' keeps p."""
        if mode == "soft":
            x_hat, ei, ew = self.soft(detach=True)
            return x_hat, ei, ew
        flips = maths.hard_flips(self.p.detach(), self.budget, mode, min_prob, gen)
        keep = self.exists ^ flips
        pr = self.pairs[:, keep]
        ei = torch.cat([pr, pr.flip(0)], 1)
        return self.x + self.delta_x.detach(), ei, torch.ones(ei.shape[1], device=ei.device)

    def n_flips(self, mode="topk", min_prob=0.5) -> int:
        return int(maths.hard_flips(self.p.detach(), self.budget, mode, min_prob).sum()) if mode != "soft" else -1

    def step(self, net, posterior_fn, *, w_ent, w_adv, w_unk, lambda_x, grl_split, coeff=1.0, unk_mode="binary",
             form="grl2", autocast=contextlib.nullcontext):
        """One reprogramming step with the model fixed: minimise L_ent + target L_adv + unknown supervision +
        lambda_x ||Delta X||_F^2 over (Delta X, p); returns (loss, detached unknown probabilities). The loss is a
        detached 0-d tensor on the device (read it at report time). `autocast`: the run's ctx.autocast for the
        network's forward (the variables, their gradients and their Adam stay float32)."""
        if not self.enabled:
            return 0.0, None
        was = net.training
        net.eval()
        x_hat, ei, ew = self.soft()
        with autocast():
            z, logits = net(x_hat, ei, ew)
            k = logits.shape[1] - 1
            u = logits.softmax(-1)[:, k].detach()
            w = posterior_fn(u)
            loss = (w_ent * maths.entropy_loss(logits) + w_adv * maths.adv_target(net.disc, z, w, grl_split, coeff, form)
                    + w_unk * maths.unknown_loss(logits, w, unk_mode) + lambda_x * self.delta_x.pow(2).sum())
        gx, gp = torch.autograd.grad(loss, [self.delta_x, self.p])
        self.delta_x.grad, self.p.grad = gx, gp
        self.opt.step()
        with torch.no_grad():
            self.p.copy_(maths.project_budget(self.p, self.budget))
        net.train(was)
        return loss.detach(), u

    def tensors(self) -> dict:
        return {"rp.delta_x": self.delta_x.detach(), "rp.p": self.p.detach(), "rp.pairs": self.pairs,
                "rp.exists": self.exists.to(torch.uint8)}

    def load(self, w: dict, opt_state=None):
        dev = self.x.device
        self.pairs, self.exists = w["rp.pairs"].to(dev).long(), w["rp.exists"].to(dev).bool()
        with torch.no_grad():
            self.delta_x.copy_(w["rp.delta_x"])
        self.p = w["rp.p"].to(dev).clone().requires_grad_(True)
        lrs = [g["lr"] for g in self.opt.param_groups]
        self.opt = torch.optim.Adam([{"params": [self.delta_x], "lr": lrs[0]}, {"params": [self.p], "lr": lrs[1]}])
        if opt_state is not None:
            self.opt.load_state_dict(opt_state)
