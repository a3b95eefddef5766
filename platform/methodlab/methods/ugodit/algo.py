"""UGoDIT's two loops as plain functions (used by fit, the predictor and diagnostics.py).

train_shared: shared encoder E + M decoders D_i on M measurements only.
  natural: sum_i mse(A x_i, y_i) + lam mse(x_i, z_i); z_i <- D_i(E(z_i)) every N steps.
  MRI: || M k~ - M F(S x) ||_F over the stacked images, k~ = s k (s = ||net(z0)|| / ||z0||); the input is
       re-projected every step: z = sum_c conj(S_c) IFFT((1-M) F(S x)/s + M k) + 1e-5 U.
fit_measurement: one measurement, fresh decoder; arm ugodit (trained E, frozen unless freeze_encoder=false),
  aseqdip (random E and D, same objective), dip (random, z fixed, lambda 0), random_encoder (frozen random E).

Devices and precision: both take an optional RunContext (`ctx`; None: a plain fp32 one on the CPU). The networks,
the inputs z, the input noise and the k-space operators live on ctx.device, problems are moved there once
(Problem.to), and every generator (weight init, input noise) is a torch.Generator on that device (so a GPU run
draws other numbers than a CPU run of the same seed; CPU results are unchanged). Only the networks' forward runs
under ctx.autocast(); their output is cast to float32 before the operators (complex FFTs have no bf16 kernels)
and the losses. Losses are read on the host only at report / log time."""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.core import RunContext
from methodlab.methods.ugodit.evaluate import measurement_psnr, psnr, ssim
from methodlab.methods.ugodit.model import freeze, make_decoder, make_encoder, multiple_of, run_net
from methodlab.methods.ugodit.operators import Problem


def _gen(seed: int, stream: int, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed) * 1_000_003 + stream)


def _runner(ctx: RunContext | None, device=None) -> RunContext:
    """The run's context, or a plain fp32 one on `device` (None: CPU) for direct callers (diagnostics,
    the predictor)."""
    return ctx if ctx is not None else RunContext(device=device, quiet=True)


def _forward(ctx: RunContext, encoder, decoders, z: torch.Tensor, multiple: int) -> torch.Tensor:
    """The networks under the run's autocast; the output in float32 for the operators and losses."""
    with ctx.autocast():
        x = run_net(encoder, decoders, z, multiple)
    return x.float()


def _mri_scale(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """s_i = ||net(z0)_i|| / ||z0_i|| per image."""
    return (x.flatten(1).norm(dim=1) / z.flatten(1).norm(dim=1).clamp_min(1e-12)).detach()


def _mri_reproject(ps: list[Problem], x: torch.Tensor, s: torch.Tensor, noise: float, gen: torch.Generator,
                   n_avg: int = 1) -> torch.Tensor:
    out = []
    for i, p in enumerate(ps):
        k_new = (1 - p.mask) * p.A_full(x[i:i + 1].detach()) / s[i] + p.mask * p.y
        base = p.combine(k_new).float()
        zs = [base + noise * torch.rand(base.shape, generator=gen, device=base.device) for _ in range(n_avg)]
        out.append(torch.stack(zs).mean(0))
    return torch.cat(out, 0)


class TrainState:
    """Everything a resumed training run needs. Lives on ctx.device (None: CPU); the problems are moved there."""

    def __init__(self, cfg, problems: list[Problem], seed: int, ctx: RunContext | None = None):
        self.ctx = ctx = _runner(ctx)
        self.device = ctx.device
        self.cfg, self.problems = cfg, [p.to(self.device) for p in problems]
        g = _gen(seed, 1, self.device)
        self.encoder = make_encoder(cfg, g)
        self.decoders = [make_decoder(cfg, g) for _ in problems]
        # the forward goes through ctx.prepare_model (torch.compile when asked; world size is 1 here); the raw
        # modules above keep the state_dict names
        self._encoder = ctx.prepare_model(self.encoder)
        self._decoders = [ctx.prepare_model(d) for d in self.decoders]
        shapes = {p.shape for p in problems}
        if len(shapes) != 1:
            raise ValueError(f"training measurements differ in size: {sorted(shapes)}")
        self.z = torch.cat([p.z0 for p in self.problems], 0).float()
        params = list(self.encoder.parameters()) + [q for d in self.decoders for q in d.parameters()]
        self.opt = torch.optim.Adam(params, lr=cfg.value("lr"))
        self.step = 0
        self.noise_gen = _gen(seed, 2, self.device)
        self.s = None
        if cfg.task == "mri_multicoil":
            with torch.no_grad():
                self.s = _mri_scale(run_net(self.encoder, self.decoders, self.z, multiple_of(cfg)), self.z)
        self._losses: list[float] = []
        self._pending: list[torch.Tensor] = []  # this run's step losses on the device, not yet read

    @property
    def losses(self) -> list[float]:
        """Every step's loss (read from the device here, not in the step)."""
        if self._pending:
            self._losses.extend(torch.stack(self._pending).tolist())
            self._pending.clear()
        return self._losses

    def state_tensors(self) -> dict[str, torch.Tensor]:
        w = {f"encoder.{k}": v for k, v in self.encoder.state_dict().items()}
        for i, d in enumerate(self.decoders):
            w.update({f"decoder{i}.{k}": v for k, v in d.state_dict().items()})
        w["z"] = self.z
        if self.s is not None:
            w["mri_scale"] = self.s
        return w

    def load(self, weights: dict, opt_state: dict | None, step: int, losses: list[float]) -> None:
        self.encoder.load_state_dict({k[8:]: v for k, v in weights.items() if k.startswith("encoder.")})
        for i, d in enumerate(self.decoders):
            pre = f"decoder{i}."
            d.load_state_dict({k[len(pre):]: v for k, v in weights.items() if k.startswith(pre)})
        self.z = weights["z"].to(self.device, copy=True)
        if "mri_scale" in weights:
            self.s = weights["mri_scale"].to(self.device, copy=True)
        if opt_state is not None:
            self.opt.load_state_dict(opt_state)  # the modules are on their device: the state follows them
        self.step, self._losses, self._pending = int(step), list(losses), []

    def train_step(self) -> torch.Tensor:
        """One Adam step; returns the step's loss as a detached 0-d tensor on the device (no host sync)."""
        cfg, ps, ctx = self.cfg, self.problems, self.ctx
        x = _forward(ctx, self._encoder, self._decoders, self.z, multiple_of(cfg))
        if cfg.task == "mri_multicoil":
            res = [p.mask * (self.s[i] * p.y - p.A_full(x[i:i + 1])) for i, p in enumerate(ps)]
            loss = torch.sqrt(sum((r.abs() ** 2).sum() for r in res))
        else:
            loss = sum(F.mse_loss(p.A(x[i:i + 1]), p.y) + cfg.lam * F.mse_loss(x[i:i + 1], self.z[i:i + 1])
                       for i, p in enumerate(ps))
        self.opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.optimizer_step(self.opt)
        self.step += 1
        if cfg.task == "mri_multicoil":
            self.z = _mri_reproject(ps, x.detach(), self.s, cfg.mri_input_noise, self.noise_gen)
        elif self.step % cfg.inner_steps == 0:
            with torch.no_grad():
                self.z = _forward(ctx, self._encoder, self._decoders, self.z, multiple_of(cfg)).detach()
        val = loss.detach()
        self._pending.append(val)
        return val


def fit_measurement(cfg, p: Problem, arm: str = "ugodit", encoder_state: dict | None = None, seed: int = 0,
             iterations: int | None = None, log_every: int | None = None,
             on_log: Callable[[dict], None] | None = None, keep_encoder: list | None = None,
             decoder_state: dict | None = None, ctx: RunContext | None = None, device=None) -> dict:
    """Fit one measurement. Returns {"curve": [{iteration, psnr, psnr_ema, ssim_ema, loss}], "x", "x_ema",
    "final_loss", "measurement_psnr_db", "seconds", "encoder_frozen"}; metrics need p.gt (else omitted).
    decoder_state (diagnostics.py only, NOT the method, which starts a fresh decoder): start the test decoder from
    these weights, e.g. a training decoder D_i's. Runs on ctx.device with the run's precision, or plainly on
    `device` (None: CPU) without a context."""
    t0 = time.time()
    ctx = _runner(ctx, device)
    dev = ctx.device
    p = p.to(dev)
    T = int(iterations or cfg.value("test_iterations"))
    every = int(log_every or cfg.log_every)
    mult = multiple_of(cfg)
    enc = make_encoder(cfg, _gen(seed, 3, dev))
    if arm == "ugodit":
        if encoder_state is None:
            raise ValueError("arm ugodit needs a trained encoder")
        enc.load_state_dict(encoder_state)
    frozen = arm == "random_encoder" or (arm == "ugodit" and cfg.freeze_encoder)
    freeze(enc, frozen)
    if keep_encoder is not None:
        keep_encoder.append(enc)
    dec = make_decoder(cfg, _gen(seed, 4, dev))
    if decoder_state is not None:
        dec.load_state_dict(decoder_state)
    params = list(dec.parameters()) + ([] if frozen else list(enc.parameters()))
    opt = torch.optim.Adam(params, lr=cfg.value("test_lr"))
    f_enc, f_dec = ctx.prepare_model(enc), ctx.prepare_model(dec)  # the forward (compiled when asked)
    mri = cfg.task == "mri_multicoil"
    z = p.z0.clone().float()
    noise_gen = _gen(seed, 5, dev)
    lam = 0.0 if arm == "dip" else (cfg.mri_test_reg if mri else cfg.lam)
    s = None
    if mri:
        with torch.no_grad():
            s = _mri_scale(run_net(enc, [dec], z, mult), z)
    x_prev, ema, curve, last = None, None, [], None
    ax = None
    for it in range(1, T + 1):
        x = _forward(ctx, f_enc, [f_dec], z, mult)
        if mri:
            ax = p.A_full(x)
            loss = torch.sqrt(((p.mask * (s[0] * p.y - ax)).abs() ** 2).sum())
            if lam > 0:
                loss = loss + lam * (s[0] * z - x).norm()
                if x_prev is not None:
                    loss = loss + lam * (x - x_prev).norm()
        else:
            ax = p.A(x)
            loss = F.mse_loss(ax, p.y) + (lam * F.mse_loss(x, z) if lam > 0 else 0.0)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.optimizer_step(opt)
        last = loss.detach()
        xd = x.detach()
        ema = xd.clone() if ema is None else cfg.ema_decay * ema + (1 - cfg.ema_decay) * xd
        x_prev = xd
        if arm != "dip":
            if mri:
                z = _mri_reproject([p], xd, s, cfg.mri_input_noise, noise_gen, cfg.mri_z_perturbations)
            elif it % cfg.inner_steps == 0:
                with torch.no_grad():
                    z = _forward(ctx, f_enc, [f_dec], z, mult).detach()
        if p.gt is not None and (it % every == 0 or it == T):  # log time: the one host read of this iteration
            img, img_ema = p.image(xd, 1.0 if s is None else float(s[0])), p.image(ema, 1.0 if s is None else float(s[0]))
            row = {"iteration": it, "psnr": psnr(img, p.gt), "psnr_ema": psnr(img_ema, p.gt),
                   "ssim_ema": ssim(img_ema, p.gt), "loss": float(last), "seconds": time.time() - t0}
            curve.append(row)
            if on_log is not None:
                on_log(row)
    loss_v = float(last) if last is not None else float("nan")
    sc = 1.0 if s is None else float(s[0])
    with torch.no_grad():
        final_ax = p.A_full(ema) if mri else p.A(ema)
        y_cmp = p.mask * s[0] * p.y if mri else p.y
        mpsnr = measurement_psnr(p.mask * final_ax if mri else final_ax, y_cmp)
    return {"curve": curve, "x": p.image(x_prev, sc), "x_ema": p.image(ema, sc), "final_loss": loss_v,
            "measurement_psnr_db": mpsnr, "seconds": time.time() - t0, "encoder_frozen": frozen,
            "decoder": dec}


def train_shared(cfg, problems: list[Problem], seed: int, iterations: int | None = None,
                 state: TrainState | None = None, on_step: Callable[[TrainState], None] | None = None,
                 ctx: RunContext | None = None) -> TrainState:
    st = state or TrainState(cfg, problems, seed, ctx)
    T = int(iterations or cfg.value("train_iterations"))
    while st.step < T:
        st.train_step()
        if on_step is not None:
            on_step(st)
    return st


def curve_at(curve: list[dict], it: int, key: str = "psnr_ema") -> float:
    for r in curve:
        if r["iteration"] == it:
            return float(r[key])
    return math.nan
