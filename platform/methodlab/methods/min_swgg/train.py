"""min_swgg fits, top to bottom, one per application (`task`): plan (two clouds -> DGSWP plan, with the
baselines on the same clouds), flow (particles driven by DGSWP or a baseline), cfm (sliced-OT flow matching).
Each reports "eval/objective" (minimised), checkpoints through core.save_checkpoint and resumes at the saved step.

Devices: clouds, particles, slices, the vector field and every generator live on ctx.device; the DGSWP solver
is torch, so it runs there too. Only POT's exact baselines and W2 evaluations (numpy) read data back to the
host, at set-up or report time. Scalars (h, losses, coupling costs) are read when a report is written."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.min_swgg.config import Config
from methodlab.methods.min_swgg.evaluate import plan_baselines
from methodlab.methods.min_swgg.swgg import assignment, build_slice, dgswp

SLUG = "min_swgg"


def _setup(cfg: Config, ctx: RunContext) -> None:
    ctx.limit_threads(cfg.torch_threads)  # a config may narrow the job's threads, never widen them
    seed_everything(cfg.seed)


def _as(cfg: Config, task: str) -> Config:
    """Job settings plan | flow | cfm pin the task (the checkpoint's config.json then names it for serving)."""
    return cfg if cfg.task == task else Config.model_validate({**cfg.model_dump(), "task": task})


def fit(cfg: Config, ctx: RunContext) -> dict:
    return {"plan": fit_plan, "flow": fit_flow, "cfm": fit_cfm}[cfg.task](cfg, ctx)


def _one_worker(task: str, ctx: RunContext) -> None:
    """plan and flow are one whole computation (no network, no minibatch): the job settings plan | flow are
    refused at num_workers > 1 before Ray starts (SPEC.single_worker_settings); this catches the same tasks run
    through the default setting `train` (config.task), where validation cannot see the task."""
    if ctx.world_size > 1:
        from methodlab.core import ConfigError
        from methodlab.methods.min_swgg import SPEC

        raise ConfigError(f"min_swgg task {task!r} does not run data-parallel ({SPEC.single_worker_settings[task]}); "
                          "set num_workers: 1", field="scaling.num_workers")


def _resume(ctx: RunContext):
    if ctx.checkpoint is None:
        return None
    ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
    ctx.history[:] = list(ck.extras.get("history", []))
    return ck


def _writer(cfg, ctx, weights_fn, torch_state_fn, step, final, extras=None, state_extra=None):
    """Checkpoint writer; `state_extra` keys go into state.json inside the same atomic write."""
    def write(d: Path) -> None:
        state = {"step": step, "final": final, "metrics": ctx.history[-1] if ctx.history else {}, **(state_extra or {})}
        save_checkpoint(d, method=SLUG, config=cfg, weights=weights_fn(), torch_state=torch_state_fn(), state=state,
                        extras={"history": ctx.history, **(extras or {})})
    return write


# ------------------------------------------------------------------------------------------------ plan
def fit_plan(cfg: Config, ctx: RunContext) -> dict:
    """DGSWP on two clouds; steps are solver iterations, reported in chunks of log_every."""
    cfg = _as(cfg, "plan")
    _one_worker("plan", ctx)
    _setup(cfg, ctx)
    from methodlab.methods.min_swgg.data import plan_clouds

    x, y = plan_clouds(cfg, ctx.device)
    gen = ctx.generator(cfg.seed)  # initial slice and Gaussian perturbations, drawn on ctx.device
    with ctx.init_module():
        g = build_slice(cfg.slice_model, x.shape[1], activation=cfg.mlp_activation, generator=gen)
    opt = torch.optim.Adam(g.parameters(), lr=cfg.lr_inner)  # built over the slice on its device: state follows
    step, best = 0, None  # best = (h, state) across chunks: the roll-back spans the whole fit
    ck = _resume(ctx)
    if ck is not None:
        g.load_state_dict({k[6:]: v for k, v in ck.weights.items() if k.startswith("slice.")})
        opt.load_state_dict(ck.torch_state["optimizer"])
        gen.set_state(ck.torch_state["gen"])
        step = int(ck.state["step"])
        if "best.weight" in ck.weights or any(k.startswith("best.") for k in ck.weights):
            best = (float(ck.state["best_h"]), {k[5:]: v for k, v in ck.weights.items() if k.startswith("best.")})
    h_init = ctx.history[0]["plan/h_init"] if ctx.history else None
    t_fit = sum(h.get("time/chunk_s", 0.0) for h in ctx.history)

    base = None
    if cfg.plan_baselines:
        base = plan_baselines(x, y, cfg.n_iter * (cfg.n_samples + 1), cfg.seed)
    w2 = base["plan/w2_exact"] if base else None
    while step < cfg.n_iter:
        chunk = min(cfg.log_every, cfg.n_iter - step)
        t0 = time.perf_counter()
        res = dgswp(x, y, g, opt, n_iter=chunk, eps=cfg.eps, n_samples=cfg.n_samples,
                    variance_reduction=cfg.variance_reduction, rollback=cfg.rollback, generator=gen,
                    rollback_on=cfg.rollback_on)
        h_chunk = res.h  # read from the device once per chunk: the chunk's time then includes its device work
        t_fit += (dt := time.perf_counter() - t0)
        step += chunk
        h_init = res.h_init if h_init is None else h_init
        if cfg.rollback and (best is None or h_chunk < best[0]):
            best = (h_chunk, {k: v.clone() for k, v in g.state_dict().items()})
        elif cfg.rollback:  # a later chunk did worse: go back to the best slice seen so far
            g.load_state_dict(best[1])
        h = best[0] if cfg.rollback else h_chunk
        done = step >= cfg.n_iter
        metrics = {"step": step, "plan/h": h, "plan/h_init": h_init, "plan/h_chunk": h_chunk,
                   "plan/evaluations": step * (cfg.n_samples + 1), "time/chunk_s": dt, "time/fit_s": t_fit}
        if base:
            metrics.update(base)
            metrics["plan/h_over_w2"] = h / w2
        metrics["eval/objective"] = metrics.get("plan/h_over_w2", h)
        save = done or step % cfg.checkpoint_every == 0

        def weights():
            w = {f"slice.{k}": v for k, v in g.state_dict().items()}
            if best is not None:
                w.update({f"best.{k}": v for k, v in best[1].items()})
            return w
        writer = None
        if save:
            sigma, tau = res.sigma, res.tau
            extras = {"assignment": assignment(sigma, tau).tolist()} if len(x) <= 4096 else {}
            writer = _writer(cfg, ctx, weights, lambda: {"optimizer": opt.state_dict(), "gen": gen.get_state()},
                             step, done, extras, state_extra={"best_h": best[0] if best else None})
        ctx.report(metrics, checkpoint=writer)
    return ctx.history[-1] if ctx.history else {}


# ------------------------------------------------------------------------------------------------ flow
def fit_flow(cfg: Config, ctx: RunContext) -> dict:
    cfg = _as(cfg, "flow")
    _one_worker("flow", ctx)
    _setup(cfg, ctx)
    from methodlab.methods.min_swgg.data import flow_clouds, hyperbolic_clouds
    from methodlab.methods.min_swgg.flows import Flow

    if cfg.flow_space == "poincare":
        x0, y = hyperbolic_clouds(cfg.hyp_target, cfg.flow_n, cfg.seed, ctx.device)
    else:
        s, t = flow_clouds(cfg.flow_data, cfg.flow_n, cfg.flow_d, cfg.seed)
        x0, y = (torch.tensor(a, dtype=torch.float32, device=ctx.device) for a in (s, t))
    flow = Flow(cfg, x0, y, cfg.seed)  # particles, slice and generator on ctx.device (x0's)
    ck = _resume(ctx)
    if ck is not None:
        flow.load(ck.weights, ck.torch_state)
    if not ctx.history:
        w = flow.w2()
        ctx.report({"step": 0, "flow/w2": w, "eval/objective": w, "flow/loss": float("nan")})
    t_run = 0.0
    while flow.it < cfg.flow_iters:
        t0 = time.perf_counter()
        loss = flow.step()  # stays on the device
        done = flow.it >= cfg.flow_iters
        log = flow.it % cfg.log_every == 0 or done
        if log:  # the only host reads; before the clock stops, so the run time includes the queued device work
            loss_v, inner_h = float(loss), float(flow.last_inner_h)
        t_run += time.perf_counter() - t0
        if log:
            w = flow.w2()
            metrics = {"step": flow.it, "flow/w2": w, "eval/objective": w, "flow/loss": loss_v,
                       "flow/inner_h": inner_h, "time/run_s": t_run,
                       "flow/finite": float(torch.isfinite(flow.x).all())}
            save = done or flow.it % cfg.checkpoint_every == 0
            writer = _writer(cfg, ctx, lambda: flow.state()[0], lambda: flow.state()[1], flow.it, done) if save else None
            ctx.report(metrics, checkpoint=writer)
    return ctx.history[-1]


# ------------------------------------------------------------------------------------------------- cfm
def fit_cfm(cfg: Config, ctx: RunContext) -> dict:
    cfg = _as(cfg, "cfm")
    _setup(cfg, ctx)
    from methodlab.methods.min_swgg.cfm import Coupler, VectorField, cfm_loss, euler_sample, fixed_directions, pair_cost, w2_distance
    from methodlab.methods.min_swgg.data import CFMData

    data = CFMData(cfg.cfm_data, cfg.seed, cfg.cfm_eval_n, ctx.device)
    hidden = cfg.cfm_hidden or (64 if data.dim == 2 else 256)
    with ctx.init_module():
        v = VectorField(data.dim, hidden)
        ema = VectorField(data.dim, hidden)
    ema.load_state_dict(v.state_dict())
    opt = torch.optim.Adam(v.parameters(), lr=cfg.cfm_lr)
    gen = ctx.generator(cfg.seed + 1)  # slice init, perturbations, shuffles, t and path noise: on ctx.device
    coupler = Coupler(cfg, data.dim, gen)
    fixed = fixed_directions(cfg.cfm_fixed_dirs, data.dim, cfg.seed, ctx.device)
    R, B = cfg.cfm_ratio, cfg.cfm_batch
    zero = lambda: torch.zeros((), dtype=torch.float64, device=ctx.device)  # noqa: E731
    step, sums = 0, {"used": zero(), "independent": zero(), "fixed": zero(), "n": 0}  # costs summed on the device
    pairs = None  # current super-batch pairing (x0p, x1p), saved so a resume mid-super-batch continues it

    ck = _resume(ctx)
    if ck is not None:
        v.load_state_dict({k[3:]: t for k, t in ck.weights.items() if k.startswith("vf.")})
        ema.load_state_dict({k[4:]: t for k, t in ck.weights.items() if k.startswith("ema.")})
        if coupler.g is not None:
            coupler.g.load_state_dict({k[6:]: t for k, t in ck.weights.items() if k.startswith("slice.")})
            coupler.opt.load_state_dict(ck.torch_state["slice_opt"])
        opt.load_state_dict(ck.torch_state["optimizer"])
        gen.set_state(ck.torch_state["gen"])
        data.gen.set_state(ck.torch_state["data_gen"])
        step, saved = int(ck.state["step"]), ck.state["coupling_sums"]
        sums = {k: saved[k] if k == "n" else zero() + saved[k] for k in sums}
        coupler.calls = int(ck.state["coupler_calls"])
        if "pair.x0" in ck.weights:
            pairs = (ck.weights["pair.x0"].to(ctx.device), ck.weights["pair.x1"].to(ctx.device))
    model = ctx.prepare_model(v)  # the vector field's training forward (DDP / torch.compile when asked)

    eval_x0 = data.x0(len(data.held) if cfg.cfm_data == "digits" else cfg.cfm_eval_n, ctx.generator(cfg.seed + 20_011))
    t_run = 0.0
    while step < cfg.cfm_steps:
        t0 = time.perf_counter()
        k = step % R
        if k == 0 or pairs is None:
            x0, x1 = data.x0(R * B), data.x1(R * B)
            p0, p1 = coupler(x0, x1)
            if cfg.shuffle_pairs:  # [I] decorrelate minibatches (the official code cuts contiguous ranks)
                perm = torch.randperm(len(p0), generator=gen, device=ctx.device)
                p0, p1 = p0[perm], p1[perm]
            pairs = (p0, p1)
            # coupling costs on the same super-batch: the pairs used, independent pairs, fixed random slices
            sums["used"] += pair_cost(p0, p1).double()
            sums["independent"] += pair_cost(x0, x1).double()
            sums["fixed"] += torch.stack([pair_cost(x0[torch.argsort(x0 @ th, stable=True)],
                                                    x1[torch.argsort(x1 @ th, stable=True)]) for th in fixed]).double().mean()
            sums["n"] += 1
        a, b = pairs[0][k * B:(k + 1) * B], pairs[1][k * B:(k + 1) * B]
        # data parallel: every rank builds the same super-batch and coupling (same generators) and trains on its
        # shard of each minibatch (cfm_loss shards after drawing t and the path noise); DDP averages the gradients
        loss = cfm_loss(model, a, b, cfg.cfm_sigma, gen, ctx)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.clip_grad_norm_(v.parameters(), 1.0, opt)
        ctx.optimizer_step(opt)
        with torch.no_grad():  # EMA copy built explicitly (the official script references an undefined one)
            dec = cfg.ema_decay
            for pe, pv in zip(ema.parameters(), v.parameters()):
                pe.mul_(dec).add_(pv, alpha=1 - dec)
        step += 1
        done = step >= cfg.cfm_steps
        log = step % cfg.log_every == 0 or done
        if log:  # the only host read of the loss; before the clock stops (the run time includes device work)
            # the whole minibatch's loss: the mean of the ranks' shares (the loss itself on one worker)
            loss_v = float(ctx.all_reduce(loss.detach().reshape(1).clone()))
        t_run += time.perf_counter() - t0
        if log:
            n = max(1, sums["n"])
            samples = euler_sample(ema, eval_x0, cfg.cfm_euler_steps)
            ok = bool(torch.isfinite(samples).all())
            w2 = w2_distance(samples, data.held) if ok else float("inf")
            used, indep, fixed_sum = (float(sums[k]) for k in ("used", "independent", "fixed"))  # read once, here
            metrics = {"step": step, "train/cfm_loss": loss_v, "cfm/w2": w2, "eval/objective": w2,
                       "coupling/cost": used / n, "coupling/independent": indep / n,
                       "coupling/fixed_mean": fixed_sum / n,
                       "coupling/ratio_independent": used / max(indep, 1e-12),
                       "coupling/ratio_fixed": used / max(fixed_sum, 1e-12),
                       "coupling/slice_h": float(coupler.last_h), "cfm/nfe": cfg.cfm_euler_steps, "time/run_s": t_run}
            save = done or step % cfg.checkpoint_every == 0

            def weights():
                w = {f"vf.{k}": t for k, t in v.state_dict().items()}
                w.update({f"ema.{k}": t for k, t in ema.state_dict().items()})
                if coupler.g is not None:
                    w.update({f"slice.{k}": t for k, t in coupler.g.state_dict().items()})
                if pairs is not None:
                    w.update({"pair.x0": pairs[0], "pair.x1": pairs[1]})
                return w

            def tstate():
                ts = {"optimizer": opt.state_dict(), "gen": gen.get_state(), "data_gen": data.gen.get_state()}
                if coupler.opt is not None:
                    ts["slice_opt"] = coupler.opt.state_dict()
                return ts
            writer = None
            if save:
                writer = _writer(cfg, ctx, weights, tstate, step, done,
                                 state_extra={"coupling_sums": {"used": used, "independent": indep, "fixed": fixed_sum,
                                                                "n": sums["n"]}, "coupler_calls": coupler.calls,
                                              "dim": data.dim, "hidden": hidden})
            ctx.report(metrics, checkpoint=writer)
    return ctx.history[-1]
