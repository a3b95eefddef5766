"""The maths of GraphRTA: losses (L_cls with placeholder + mixup terms, soft unknown supervision, split-GRL
three-group adversarial loss, entropy), the Beta-mixture EM for known/unknown membership, the budget
projection of the flip probabilities, and gradient-times-weight pruning. Everything runs on the device of its
inputs (random draws from a generator on that device); the one host read is L_cls's count of mixup pairs of
different classes, which sizes its random draw (kept so that CPU results stay those of the CPU code before).

Data parallel: every rank does the whole forward and every random draw (the same global batch); a loss term
given a `Part` sums only this rank's samples (ctx.shard) and scales by world / n, so the mean over the ranks of
their losses (and of their gradients, ctx.average_gradients) is the whole batch's. part=None (one worker) is the
plain mean of the code before, bit for bit."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from methodlab.core import RunContext
from methodlab.methods.graphrta.model import grl

EPS_U = 1e-4


class Part:
    """This rank's share of a per-sample loss over a batch of `n` samples: `idx` are its positions in the batch
    (from ctx.shard), `world` the world size. A per-sample mean becomes sum(v[idx]) * world / n: the mean over
    the ranks is the whole batch's mean, also where the shards differ in size by one."""

    def __init__(self, idx: torch.Tensor, n: int, world: int):
        self.idx, self.n, self.world = idx, int(n), int(world)

    def mean(self, v: torch.Tensor) -> torch.Tensor:
        return v[self.idx].sum() * (self.world / self.n)

    def sum(self, v: torch.Tensor) -> torch.Tensor:
        """This rank's share of a plain sum over the batch (world x the sum of its samples)."""
        return v[self.idx].sum() * self.world

    def has(self, pos: torch.Tensor) -> torch.Tensor:
        """Which of the batch positions `pos` are this rank's."""
        mine = torch.zeros(self.n, dtype=torch.bool, device=pos.device)
        mine[self.idx] = True
        return mine[pos]


def _mean(v, part: Part | None):
    return v.mean() if part is None else part.mean(v)


def _sum(v, part: Part | None):
    return v.sum() if part is None else part.sum(v)


def ce(logits, target, part: Part | None = None):
    """Mean cross-entropy over the batch (F.cross_entropy as before), or this rank's share of it."""
    if part is None:
        return F.cross_entropy(logits, target)
    return F.cross_entropy(logits[part.idx], target[part.idx], reduction="sum") * (part.world / part.n)


# ------------------------------------------------------------------------------------------------ losses
def cls_loss(logits, z, y, classifier, beta_ph=1.0, beta_mix=1.0, mix_lambda="beta", gen=None, part=None):
    """Source L_cls over K+1 outputs: CE(y) + beta_ph * CE(logits with y's logit removed, K) [the best
    non-ground-truth class is 'unknown'] + beta_mix * CE(g(lam z_a + (1-lam) z_b), K) for pairs of
    different classes [a mix of two known classes belongs to no known class]. `part`: this rank's share (the
    mixup pairs are drawn over the whole batch as on one worker; a rank takes the pairs anchored at its samples)."""
    k = logits.shape[1] - 1
    loss = ce(logits, y, part)
    if beta_ph > 0:
        masked = logits.masked_fill(F.one_hot(y, k + 1).bool(), float("-inf"))
        loss = loss + beta_ph * ce(masked, torch.full_like(y, k), part)
    if beta_mix > 0 and len(y) > 1:
        dev = y.device
        perm = torch.randperm(len(y), generator=gen, device=dev)
        ok = y != y[perm]
        if ok.any() and part is None:  # a host read (and the masked rows below): only where pairs of classes are mixed
            za, zb = z[ok], z[perm[ok]]
            lam = (torch.rand(len(za), 1, generator=gen, device=dev) if mix_lambda == "beta"
                   else torch.full((len(za), 1), 0.5, device=dev))
            mixed = classifier(lam * za + (1 - lam) * zb)
            loss = loss + beta_mix * F.cross_entropy(mixed, torch.full((len(za),), k, dtype=torch.long, device=dev))
        elif part is not None:  # the same pairs and draws on every rank; this rank's pairs, mean over all of them
            pos = ok.nonzero().squeeze(1)  # the pairs of different classes, in the order of the draws above
            if len(pos):
                lam = (torch.rand(len(pos), 1, generator=gen, device=dev) if mix_lambda == "beta"
                       else torch.full((len(pos), 1), 0.5, device=dev))
                mine = part.has(pos)
                a, lam = pos[mine], lam[mine]
                mixed = classifier(lam * z[a] + (1 - lam) * z[perm[a]])
                target = torch.full((len(a),), k, dtype=torch.long, device=dev)
                loss = loss + beta_mix * F.cross_entropy(mixed, target, reduction="sum") * (part.world / len(pos))
    return loss


def unknown_loss(logits_t, w, mode: str = "binary", part=None):
    """Soft unknown pseudo-labels. mode 'unknown_only': (1/n_t) sum_i w_i CE(g(z_i), K) (spec form). 'binary' [I]:
    + (1 - w_i) * (-log(1 - u_i)) as well, so likely-known nodes are pushed off the unknown logit; without this
    counter-term the one-sided loss feeds back (more unknown -> larger w) and collapses to all-unknown (measured)."""
    k = logits_t.shape[1] - 1
    logp = logits_t.log_softmax(-1)
    loss = -w * logp[:, k]
    if mode == "unknown_only":
        return _mean(loss, part)
    known = -(1 - w) * torch.logsumexp(logp[:, :k], -1)
    if mode == "balanced":  # each side averaged over its own soft mass: the larger group cannot outvote the smaller one
        # (the masses are the whole batch's: w is detached and every rank has all of it)
        return 0.5 * (_sum(loss, part) / w.sum().clamp_min(1e-6) + _sum(known, part) / (1 - w).sum().clamp_min(1e-6))
    return _mean(loss + known, part)


def entropy_loss(logits_t, part=None):
    p = logits_t.softmax(-1)
    return _mean(-(p * logits_t.log_softmax(-1)).sum(-1), part)


def _frozen(disc, z):
    """D(z) with D's parameters detached: gradients reach z only (the encoder's side of the game)."""
    from torch.func import functional_call

    return functional_call(disc, {n: p.detach() for n, p in disc.named_parameters()}, (z,))


def adv_target(disc, z_t, w, split=True, coeff=1.0, form="grl2", part=None):
    """Target part of L_adv. The discriminator always learns the 3-way CE
    mean_i [(1-w_i) CE(D(z_i), 1) + w_i CE(D(z_i), 2)].
    form 'grl3' (spec): the same 3-way CE reaches the encoder (and the reprogrammed graph) through a GRL for the
    known term (align with the source) and without one for the unknown term (keep unknown nodes separable).
    form 'grl2' [I]: the reversed known term is the 2-way CE over {source, target-known} only, so the encoder
    cannot 'confuse' D by moving known nodes into D's unknown region (grl3 measurably drifts to all-unknown).
    split=False puts the unknown term behind the GRL too (the variant the spec warns of)."""
    n = len(w)
    one = torch.ones(n, dtype=torch.long, device=z_t.device)
    two = torch.full((n,), 2, dtype=torch.long, device=z_t.device)
    if form == "grl3":
        lk = F.cross_entropy(disc(grl(z_t, coeff)), one, reduction="none")
        zu = z_t if split else grl(z_t, coeff)
        lu = F.cross_entropy(disc(zu), two, reduction="none")
        return _mean((1 - w) * lk + w * lu, part)
    d_only = F.cross_entropy(disc(z_t.detach()), one, reduction="none") * (1 - w) \
        + F.cross_entropy(disc(z_t.detach()), two, reduction="none") * w
    logits = _frozen(disc, z_t)
    enc_k = -coeff * F.cross_entropy(logits[:, :2], one, reduction="none")
    lu = F.cross_entropy(logits, two, reduction="none")
    enc_u = lu if split else -coeff * lu
    return _mean(d_only + (1 - w) * enc_k + w * enc_u, part)


def adv_loss(disc, z_s, z_t, w, split=True, coeff=1.0, form="grl2", part_s=None, part_t=None):
    """L_adv = CE(D(z_s), 0) (reversed for the encoder; 2-way under grl2) + the target part. `coeff` scales the
    reversed gradient only (the discriminator itself always gets the plain gradient). part_s / part_t: this
    rank's shares of the source and target nodes."""
    zero = torch.zeros(len(z_s), dtype=torch.long, device=z_s.device)
    if form == "grl3":
        ls = ce(disc(grl(z_s, coeff)), zero, part_s)
    else:
        ls = ce(disc(z_s.detach()), zero, part_s) - coeff * ce(_frozen(disc, z_s)[:, :2], zero, part_s)
    return ls + adv_target(disc, z_t, w, split, coeff, form, part_t)


# ------------------------------------------------------------------------------------------- Beta mixture
class BetaMixture:
    """2-component Beta mixture fitted by EM with weighted method-of-moments M-steps. The component with the
    larger mean is 'unknown'; posterior(u) is its responsibility. alpha / beta / pi are float64 tensors on the
    device of the probabilities the mixture was fitted to: fit and posterior read nothing back to the host
    (means() and state() do, at report / checkpoint time)."""

    def __init__(self, device=None):
        dev = torch.device("cpu" if device is None else device)
        self.alpha = torch.tensor([2.0, 8.0], dtype=torch.float64, device=dev)
        self.beta = torch.tensor([8.0, 2.0], dtype=torch.float64, device=dev)
        self.pi = torch.tensor([0.5, 0.5], dtype=torch.float64, device=dev)

    def _params(self, device):
        """(alpha, beta, pi) as float64 tensors on `device` (also when set as lists)."""
        return tuple(torch.as_tensor(v, dtype=torch.float64, device=device) for v in (self.alpha, self.beta, self.pi))

    @staticmethod
    def _logpdf(u, a, b):
        return (a - 1) * torch.log(u) + (b - 1) * torch.log1p(-u) - (torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b))

    def _resp(self, u, pi=None):
        alpha, beta, fitted = self._params(u.device)
        pi = fitted if pi is None else pi
        lp = torch.stack([torch.log(pi[c].clamp_min(1e-12)) + self._logpdf(u, alpha[c], beta[c]) for c in (0, 1)], 1)
        return lp.softmax(1)

    def fit(self, u, iters=20):
        u = u.detach().double().clamp(EPS_U, 1 - EPS_U)
        self.alpha, self.beta, self.pi = self._params(u.device)
        r = torch.stack([1 - u, u], 1)  # start from the unknown probability itself (no arbitrary split)
        for it in range(iters):
            if it > 0:
                r = self._resp(u)
            alpha, beta, pi = self.alpha.clone(), self.beta.clone(), self.pi.clone()
            for c in (0, 1):
                wc = r[:, c]
                s = wc.sum()
                keep = s >= 1e-8  # a component without mass keeps its parameters
                m = (wc * u).sum() / s
                v = (wc * (u - m) ** 2).sum() / s
                v = torch.minimum(v.clamp_min(1e-8), m * (1 - m) * 0.999)
                common = m * (1 - m) / v - 1
                alpha[c] = torch.where(keep, (m * common).clamp_min(1e-2), alpha[c])
                beta[c] = torch.where(keep, ((1 - m) * common).clamp_min(1e-2), beta[c])
                pi[c] = torch.where(keep, s / len(u), pi[c])
            self.alpha, self.beta, self.pi = alpha, beta, pi
        return self

    def means(self):
        """[known-side mean, unknown-side mean] as floats (a host read: report time only)."""
        alpha, beta, _ = self._params("cpu")
        return (alpha / (alpha + beta)).tolist()

    def posterior(self, u, equal_prior: bool = False):
        """Responsibility of the unknown component. equal_prior [I]: with mixing weights 0.5/0.5 (the likelihood
        ratio only), so a growing unknown share does not by itself raise every node's w."""
        u = u.detach().double().clamp(EPS_U, 1 - EPS_U)
        alpha, beta, pi = self._params(u.device)
        mean = alpha / (alpha + beta)
        r = self._resp(u, torch.full_like(pi, 0.5) if equal_prior else None)
        return torch.where(mean[1] >= mean[0], r[:, 1], r[:, 0]).float()

    def state(self):
        return {k: [float(x) for x in v] for k, v in zip(("alpha", "beta", "pi"), self._params("cpu"))}

    @classmethod
    def from_state(cls, s, device=None):
        b = cls(device)
        dev = b.alpha.device
        b.alpha, b.beta, b.pi = (torch.tensor([float(x) for x in s[k]], dtype=torch.float64, device=dev)
                                 for k in ("alpha", "beta", "pi"))
        return b


# ---------------------------------------------------------------------------------------- budget projection
@torch.no_grad()
def project_budget(p: torch.Tensor, budget: float, iters: int = 60) -> torch.Tensor:
    """Euclidean projection onto {0 <= p <= 1, sum p <= B}: clip(p - mu, 0, 1) with the shift mu >= 0 found
    by bisection; the upper end of the bracket is returned, so the sum never exceeds B. The bracket is kept in
    float64 0-d tensors on p's device (the values the host floats had): no host round trip per step."""
    q = p.clamp(0, 1)
    if p.numel() == 0:
        return q
    lo, hi = p.min().double() - 1.0, p.max().double()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        over = (p - mid).clamp(0, 1).sum() > budget
        lo, hi = torch.where(over, mid, lo), torch.where(over, hi, mid)
    return torch.where(q.sum() <= budget, q, (p - hi).clamp(0, 1))


def hard_flips(p: torch.Tensor, budget: int, mode="topk", min_prob=0.5, gen=None) -> torch.Tensor:
    """Boolean flips of the candidate set: top-B entries (with p >= min_prob) or a Bernoulli draw."""
    if budget <= 0 or p.numel() == 0:
        return torch.zeros_like(p, dtype=torch.bool)
    if mode == "bernoulli":
        return torch.bernoulli(p.clamp(0, 1), generator=gen).bool()
    flips = torch.zeros_like(p, dtype=torch.bool)
    top = torch.topk(p, min(budget, p.numel())).indices
    flips[top[p[top] >= min_prob]] = True
    return flips


# -------------------------------------------------------------------------------------------------- pruning
@torch.no_grad()
def prune_masks(layers, ratio: float):
    """Per layer: M = 0 for the round(ratio * numel) entries with the smallest |W * dL/dW| (the gradient
    must already be in W.grad, computed with M = 1), M = 1 otherwise."""
    for lin in layers:
        imp = (lin.weight * lin.weight.grad).abs().flatten() if lin.weight.grad is not None else lin.weight.abs().flatten()
        k = int(round(ratio * imp.numel()))
        mask = torch.ones_like(imp)
        if k > 0:
            mask[torch.argsort(imp, stable=True)[:k]] = 0.0
        lin.mask.copy_(mask.view_as(lin.mask))
        lin.apply_mask()


def node_part(ctx: RunContext, nodes: torch.Tensor) -> Part | None:
    """This rank's share of a loss over `nodes` (node ids: ctx.shard takes them, one worker all of them): a
    maths.Part over their positions, or None on one worker (the losses' plain means, the code before)."""
    _, pos = ctx.shard(nodes, torch.arange(len(nodes), device=nodes.device))
    return None if ctx.world_size == 1 else Part(pos, len(nodes), ctx.world_size)


def global_mean(ctx: RunContext, values: list) -> list[float]:
    """Reported losses of the whole batch: each rank's loss is its share (maths.Part), their mean over the
    ranks the whole batch's (one float32 all-reduce at report time); the values themselves on one worker."""
    if ctx.world_size == 1:
        return [float(v.detach()) if torch.is_tensor(v) else float(v) for v in values]
    t = torch.stack([torch.as_tensor(v, device=ctx.device).detach().float().reshape(()) for v in values])
    return ctx.all_reduce(t).tolist()


def rank0_masks(ctx: RunContext, model) -> None:
    """Rank 0's pruning masks and masked weights on every rank (identical on the CPU already; a guard against
    a near-tie in |W dL/dW| ranked differently by a rank whose forward differs in the last bits)."""
    ctx.broadcast_([t for lin in model.encoder.masked() for t in (lin.mask, lin.weight)])
