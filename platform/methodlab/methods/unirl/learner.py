"""One gradient step of each learner, on a batch of (s, a_n, r, s', done) tensors.

unirl (also the IVR baseline through `extractor=ivr_awr`): V, then actor (new V, target critic), then Q
(new V), then targets [IVR learner.py]; a_ref = batch actions offline / with ref_mode=buffer, else a
sample of the frozen reference policy pi_ref. sac: the online baseline. bc: the offline baseline.

Device: every network, its target / reference copy, SAC's log_alpha and the sampling generator live on
ctx.device (the networks are built under ctx.init_module()); a batch arrives there from the replay buffer.
DDP: the optimised networks are wrapped by ctx.prepare_model (DDP when world_size > 1, torch.compile when
the job asks); every loss runs its network through the wrapper's forward so gradients are all-reduced.
Passes that only read a network (target critic, pi_ref, V after its step) use the unwrapped module.
Data parallel: a batch is this rank's shard of a batch_size draw; every per-sample mean is weighted by the shard's
share of the global batch (1 for equal shards), so DDP's gradient mean is the global batch's gradient, and the
batch-wide statistics (EQL's shift m, the self-normalised weights' mean, w_max) are taken over every rank's shard
through ctx.all_reduce. SAC's log_alpha (no module) averages its gradient with ctx.average_gradients.
"""

from __future__ import annotations

import copy
import math

import torch

from methodlab.core import RunContext
from methodlab.methods.unirl.config import Config
from methodlab.methods.unirl.model import (GaussianActor, SquashedGaussianActor, TwinQ, ValueNet, eql_shift,
                                           extraction_weights, gaussian_log_prob, polyak, value_loss)


class Learner:
    """`ctx`: the run's context (device, prepare_model); None builds a plain fp32 learner on `device`
    (None: the CPU), as the predictor does."""

    def __init__(self, cfg: Config, obs_dim: int, act_dim: int, ctx: RunContext | None = None, *, device=None):
        ctx = ctx if ctx is not None else RunContext(device=device)
        self.cfg, self.act_dim, self.device, self.ctx = cfg, act_dim, ctx.device, ctx
        h = list(cfg.hidden)
        actor_cls = SquashedGaussianActor if cfg.learner == "sac" else GaussianActor
        with ctx.init_module():  # parameters created on ctx.device (same init draws, same order as on the CPU)
            self.actor = actor_cls(obs_dim, act_dim, h, cfg.log_std_min, cfg.log_std_max)
            self.q = TwinQ(obs_dim, act_dim, h)
            self.v = ValueNet(obs_dim, h, cfg.value_layernorm)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.pi_ref = copy.deepcopy(self.actor).requires_grad_(False)  # online reference (unirl, periodic/ema)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)  # SAC temperature
        self.target_entropy = cfg.sac_target_entropy if cfg.sac_target_entropy is not None else -float(act_dim)
        self.opt_actor = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.opt_q = torch.optim.Adam(self.q.parameters(), lr=cfg.lr)
        self.opt_v = torch.optim.Adam(self.v.parameters(), lr=cfg.lr)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.actor_w, self.q_w, self.v_w = (ctx.prepare_model(m) for m in (self.actor, self.q, self.v))
        self.grad_steps = 0
        self.ref_refreshed_at = 0  # gradient step of pi_ref's last refresh (periodic)
        self.generator = ctx.generator(cfg.seed)  # batches, pi_ref's actions and SAC's noise, on ctx.device
        # the offline batches' generator: the same object on one worker; fit gives it a separate, rank-independent
        # seed when data parallel (every rank draws the same global batch and takes its shard)
        self.batch_generator = self.generator

    # --- data parallel ------------------------------------------------------------------------------
    def _share(self, n_local: int) -> float:
        """The shard's share of the global batch times the world size (1 for equal shards): a per-sample mean
        times this, averaged over the ranks by DDP, is the global batch's mean."""
        return n_local * self.ctx.world_size / self.cfg.batch_size

    def _sum_and_max(self, total: torch.Tensor, peak: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum over the ranks of `total`, max over the ranks of `peak`) in one float32 all-reduce: each rank
        writes its peak into its own slot of a zero vector, so the summed vector holds every rank's peak."""
        ws = self.ctx.world_size
        slots = torch.zeros(ws, dtype=torch.float32, device=self.device)
        slots[self.ctx.rank] = peak.float()
        out = self.ctx.all_reduce(torch.cat([total.float().reshape(1), slots]), op="sum")
        return out[0], out[1:].max()

    # --- the three learners ---------------------------------------------------------------------
    def update(self, batch, use_pi_ref: bool) -> dict:
        self.grad_steps += 1
        if self.cfg.learner == "bc":
            return self._bc(batch)
        if self.cfg.learner == "sac":
            return self._sac(batch)
        return self._unirl(batch, use_pi_ref)

    def _unirl(self, batch, use_pi_ref: bool) -> dict:
        cfg, alpha = self.cfg, self.cfg.alpha_value
        s, a, r, s2, d = batch
        if use_pi_ref:  # online: actions of the frozen reference policy at the buffer states
            a_ref = self.pi_ref.act(s, deterministic=False, generator=self.generator)
        else:  # offline (and ref_mode=buffer): the behaviour policy's actions in the batch
            a_ref = a
        dp = self.ctx.world_size > 1
        share = self._share(len(s)) if dp else 1.0
        with torch.no_grad():
            qbar = self.q_target(s, a_ref).min(0).values
        # 1. value: SQL / EQL against the target critic at reference actions; grad into V only
        v = self.v_w(s)
        m = None
        if dp and cfg.alg == "EQL":  # the whole batch's shift: the max over the ranks' shards
            m = self._sum_and_max(torch.zeros((), device=self.device), eql_shift(qbar - v, alpha))[1]
        loss_v = value_loss(qbar - v, v, alpha, cfg.alg, m)
        if dp:
            loss_v = loss_v * share
        self.opt_v.zero_grad(set_to_none=True)
        loss_v.backward()
        self.opt_v.step()
        with torch.no_grad():
            v_new, v_next = self.v(torch.cat([s, s2])).split(len(s))
            if dp:  # self-normalised over the global batch; w_max over every rank's shard
                w = extraction_weights(qbar - v_new, alpha, cfg.alg, cfg.extractor, cfg.weight_clip, False)
                w_sum, w_max = self._sum_and_max(w.sum(), w.max())
                if cfg.normalize_weights and cfg.extractor == "closed_form":
                    norm = (w_sum / cfg.batch_size).clamp_min(1e-8)
                    w, w_max = w / norm, w_max / norm
            else:
                w = extraction_weights(qbar - v_new, alpha, cfg.alg, cfg.extractor, cfg.weight_clip,
                                       cfg.normalize_weights)
                w_max = w.max()
        # 2. actor: weighted log-likelihood of the reference actions
        mean, log_std = self.actor_w(s)
        logp = gaussian_log_prob(a_ref, mean, log_std)
        loss_pi = -(w * logp).mean() * share if dp else -(w * logp).mean()
        self.opt_actor.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.opt_actor.step()
        # 3. Q: y = r + gamma (1 - done) V_new(s'); real transitions only, no policy actions
        y = r + cfg.gamma * (1.0 - d) * v_next
        q = self.q_w(s, a)
        loss_q = (q - y).pow(2).mean(1).sum() * share if dp else (q - y).pow(2).mean(1).sum()
        self.opt_q.zero_grad(set_to_none=True)
        loss_q.backward()
        self.opt_q.step()
        polyak(self.q_target, self.q, cfg.tau)
        # weighted means (data parallel): their mean over the ranks is the global batch's
        return {"loss_v": loss_v.detach(), "loss_pi": loss_pi.detach(), "loss_q": loss_q.detach(),
                "v_mean": v_new.mean() * share, "q_mean": q.detach().mean() * share, "w_max": w_max,
                "u_mean": (qbar - v_new).mean() * share}

    def _bc(self, batch) -> dict:
        s, a = batch[0], batch[1]
        mean, log_std = self.actor_w(s)
        loss_pi = -gaussian_log_prob(a, mean, log_std).mean()
        if self.ctx.world_size > 1:
            loss_pi = loss_pi * self._share(len(s))
        self.opt_actor.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.opt_actor.step()
        return {"loss_pi": loss_pi.detach()}

    def _sac(self, batch) -> dict:
        cfg = self.cfg
        s, a, r, s2, d = batch
        dp = self.ctx.world_size > 1
        share = self._share(len(s)) if dp else 1.0
        ent = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self.actor.sample(s2, self.generator)
            y = r + cfg.gamma * (1.0 - d) * (self.q_target(s2, a2).min(0).values - ent * logp2)
        q = self.q_w(s, a)
        loss_q = (q - y).pow(2).mean(1).sum() * share if dp else (q - y).pow(2).mean(1).sum()
        self.opt_q.zero_grad(set_to_none=True)
        loss_q.backward()
        self.opt_q.step()
        mean, log_std = self.actor_w(s)
        u = mean + torch.randn(mean.shape, generator=self.generator, device=mean.device, dtype=mean.dtype) * log_std.exp()
        a_pi = torch.tanh(u)
        logp = gaussian_log_prob(u, mean, log_std) - (2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))).sum(-1)
        self.q.requires_grad_(False)  # the actor loss reads Q; its gradient must not touch Q's parameters
        loss_pi = (ent * logp - self.q(s, a_pi).min(0).values).mean()
        if dp:
            loss_pi = loss_pi * share
        self.q.requires_grad_(True)
        self.opt_actor.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.opt_actor.step()
        loss_alpha = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.opt_alpha.zero_grad(set_to_none=True)
        if dp:
            loss_alpha = loss_alpha * share
        loss_alpha.backward()
        if dp:  # log_alpha is no module (no DDP): its gradient mean over the ranks, as DDP's
            self.ctx.average_gradients([self.log_alpha])
        self.opt_alpha.step()
        polyak(self.q_target, self.q, cfg.tau)
        return {"loss_q": loss_q.detach(), "loss_pi": loss_pi.detach(), "sac_alpha": ent,
                "q_mean": q.detach().mean() * share}

    # --- reference policy and learning rate -------------------------------------------------------
    def refresh_reference(self, force: bool = False) -> None:
        """periodic: copy the actor every ref_update_every steps; ema: Polyak toward the actor every step."""
        if self.cfg.ref_mode == "ema" and not force:
            polyak(self.pi_ref, self.actor, self.cfg.ref_tau)
        elif force or self.grad_steps - self.ref_refreshed_at >= self.cfg.ref_update_every:
            self.pi_ref.load_state_dict(self.actor.state_dict())
            self.ref_refreshed_at = self.grad_steps

    def set_actor_lr(self, lr: float) -> None:
        for g in self.opt_actor.param_groups:
            g["lr"] = lr

    def actor_log_std_mean(self) -> float:
        with torch.no_grad():
            if isinstance(self.actor, GaussianActor):
                return float(self.actor.log_std.clamp(self.cfg.log_std_min, self.cfg.log_std_max).mean())
            return float("nan")

    # --- checkpoint state ---------------------------------------------------------------------------
    def weights(self) -> dict:
        out = {}
        for name in ("actor", "q", "q_target", "v", "pi_ref"):
            out.update({f"{name}.{k}": t for k, t in getattr(self, name).state_dict().items()})
        out["log_alpha"] = self.log_alpha.detach()
        return out

    def load_weights(self, w: dict) -> None:
        for name in ("actor", "q", "q_target", "v", "pi_ref"):
            p = name + "."
            getattr(self, name).load_state_dict({k[len(p):]: t for k, t in w.items() if k.startswith(p)})
        with torch.no_grad():
            self.log_alpha.copy_(w["log_alpha"])

    def torch_state(self) -> dict:
        st = {"opt_actor": self.opt_actor.state_dict(), "opt_q": self.opt_q.state_dict(),
              "opt_v": self.opt_v.state_dict(), "opt_alpha": self.opt_alpha.state_dict(),
              "generator": self.generator.get_state(), "torch_rng": torch.get_rng_state()}
        if self.batch_generator is not self.generator:  # data parallel: the common offline batch stream too
            st["batch_generator"] = self.batch_generator.get_state()
        return st

    def load_torch_state(self, st: dict) -> None:
        for name in ("opt_actor", "opt_q", "opt_v", "opt_alpha"):
            getattr(self, name).load_state_dict(st[name])
        self.generator.set_state(st["generator"])
        if self.batch_generator is not self.generator:
            self.batch_generator.set_state(st.get("batch_generator", st["generator"]))
        torch.set_rng_state(st["torch_rng"])
