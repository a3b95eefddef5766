"""unirl training loop, top to bottom, for the three regimes on one step axis:
offline (gradient steps on a fixed dataset), online (env steps, one update per env step after
start_steps), offline_to_online (max_steps offline steps, then online_steps env steps with the same
losses, networks and buffer; pi_ref starts as the offline actor). One report per evaluation (ASHA's
training_iteration counts evaluations); checkpoints ride on reports every checkpoint_every steps."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import CheckpointError, RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.core.paths import read_path
from methodlab.data.offline_rl import env_spaces
from methodlab.methods.unirl.config import Config
from methodlab.methods.unirl.data import Replay, offline_data, reward_scale_for, saved_digest
from methodlab.methods.unirl.evaluate import evaluate, make_rescaled_env
from methodlab.methods.unirl.learner import Learner

SLUG = "unirl"


def _broadcast(metrics: dict, ctx: RunContext) -> dict:
    """Rank 0 evaluates; with DDP the other ranks receive its numbers (float32, on ctx.device, through
    ctx.broadcast). Rank 0 keeps its own float64 numbers: the recorded metrics are rank 0's."""
    if ctx.world_size == 1:
        return metrics
    keys = ["eval/return", "eval/return_std", "eval/normalized_score"]
    t = torch.tensor([metrics.get(k, 0.0) for k in keys], dtype=torch.float32, device=ctx.device)
    ctx.broadcast(t, src=0)
    return metrics if ctx.is_main else dict(zip(keys, t.tolist()))


def _train_means(sums: dict, n_updates: int, ctx: RunContext) -> dict:
    """The window's mean of every update statistic; data parallel: their mean over the ranks (the learner weights
    each shard's means by its share of the global batch, so this is the global batch's value), one float32
    all-reduce on ctx.device. Every rank holds the same keys and update count (the same steps update)."""
    if not sums:
        return {}
    n = max(n_updates, 1)
    if ctx.world_size == 1:
        return {f"train/{k}": float(v) / n for k, v in sums.items()}
    keys = list(sums)
    t = ctx.all_reduce(torch.stack([torch.as_tensor(sums[k], device=ctx.device).float().reshape(())
                                    for k in keys]), op="mean")
    return {f"train/{k}": v / n for k, v in zip(keys, t.tolist())}


def _episode_return(returns: list[float], ctx: RunContext) -> float | None:
    """Mean return of the episodes finished in the window; data parallel: over every rank's episodes (one
    float32 all-reduce of the sum and count, on every rank at every report of an online run)."""
    if ctx.world_size == 1:
        return float(np.mean(returns)) if returns else None
    t = ctx.all_reduce(torch.tensor([float(np.sum(returns)) if returns else 0.0, float(len(returns))],
                                    dtype=torch.float32, device=ctx.device), op="sum").tolist()
    return t[0] / t[1] if t[1] else None


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)  # a config may narrow the job's threads, never widen them
    seed_everything(cfg.seed)  # identical initial networks (and target / reference copies) on every rank
    obs_dim, low, high = env_spaces(cfg.env)
    act_dim = len(low)
    learner = Learner(cfg, obs_dim, act_dim, ctx)  # networks, log_alpha and the sampling generator on ctx.device
    # Data parallel. Offline steps: every rank draws the same global batch from the same dataset with a common,
    # rank-independent generator (the 1-worker seed) and trains on its shard (ctx.shard), so the offline phase
    # follows the 1-worker trajectory. Online steps: each rank runs its own env episodes, exploration and replay
    # with rank-dependent seeds (independent experience, as more actors collecting it: legitimate for RL) and
    # trains on its shard of a batch_size draw from its own replay, so the samples per gradient step add up to
    # batch_size. On one worker both streams are the one generator seeded seed * 1000, as before.
    torch.manual_seed(cfg.seed * 1000 + ctx.rank)
    learner.generator.manual_seed(cfg.seed * 1000 + ctx.rank)
    if ctx.world_size > 1:
        learner.batch_generator = ctx.generator(cfg.seed * 1000)

    # --- data on ctx.device: dataset rows first (offline, o2o), then online transitions --------------
    data = offline_data(cfg, progress=ctx.progress) if cfg.regime != "online" else None
    scale = reward_scale_for(cfg, data) if data is not None else 1.0
    if cfg.regime == "offline":
        buf = Replay(obs_dim, act_dim, len(data), ctx.device)
    elif cfg.regime == "online":
        buf = Replay(obs_dim, act_dim, min(cfg.buffer_capacity, cfg.online_steps), ctx.device)
    else:  # o2o keeps the whole dataset and every online transition
        buf = Replay(obs_dim, act_dim, len(data) + cfg.online_steps, ctx.device)
    if data is not None:
        buf.add_dataset(data, scale)
    online_from = {"offline": None, "online": 0, "offline_to_online": cfg.max_steps}[cfg.regime]
    use_pi_ref = cfg.learner == "unirl" and cfg.ref_mode != "buffer"
    rng = np.random.default_rng(cfg.seed * 1000 + ctx.rank)  # exploration (start_steps)
    step, history, update_credit = 0, [], 0.0

    resume = ctx.checkpoint
    if resume is None and cfg.resume_from:
        resume = read_path(cfg.resume_from, "resume_from", "a checkpoint directory of an earlier unirl run")
    resumed: dict[str, float] = {}  # resume/* checks, reported with every row after a resume
    saved: tuple[str, int] | None = None
    if resume is not None:
        ck = load_checkpoint(resume, method=SLUG, load_torch_state=True)
        if data is not None and ck.state.get("dataset_sha256") not in (None, data.meta.get("sha256")):
            raise CheckpointError(f"{resume}: trained on dataset sha256 {ck.state['dataset_sha256']}, "
                                  f"the job's dataset has {data.meta.get('sha256')}")
        learner.load_weights(ck.weights)
        learner.load_torch_state(ck.torch_state)
        step, history = int(ck.state["step"]), list(ck.extras.get("history", []))
        learner.grad_steps, learner.ref_refreshed_at = int(ck.state["grad_steps"]), int(ck.state["ref_refreshed_at"])
        update_credit = float(ck.state.get("update_credit", 0.0))
        rng.bit_generator.state = ck.state["numpy_rng"]
        if online_from is not None and step > online_from:
            buf.load(Path(resume) / "replay.npz")
            saved = saved_digest(Path(resume) / "replay.npz")  # read back with allow_pickle=False
        mine = learner.weights()
        refs = [k for k in ck.weights if k.startswith("pi_ref.")]
        resumed = {"resume/step": float(step), "resume/replay_size": float(buf.size - buf.n_fixed),
                   "resume/pi_ref_restored": float(bool(refs) and all(
                       torch.equal(mine[k].cpu(), ck.weights[k].cpu()) for k in refs))}
        if ctx.world_size > 1:  # the checkpoint holds rank 0's streams (and its replay): the other ranks' online
            # streams go on independent of rank 0's, reseeded by rank and step (the offline batch stream is common)
            learner.generator.manual_seed(cfg.seed * 1000 + ctx.rank + 104_729 * step)
            torch.manual_seed(cfg.seed * 1000 + ctx.rank + 104_729 * step)
            rng = np.random.default_rng([cfg.seed * 1000 + ctx.rank, step])
    ctx.history[:] = history

    def writer(final: bool):
        def write(d: Path) -> None:
            save_checkpoint(d, method=SLUG, config=cfg, weights=learner.weights(), torch_state=learner.torch_state(),
                            state={"step": step, "final": final, "grad_steps": learner.grad_steps,
                                   "ref_refreshed_at": learner.ref_refreshed_at, "update_credit": update_credit,
                                   "numpy_rng": rng.bit_generator.state, "reward_scale": scale,
                                   "dataset": data.meta.get("name") if data is not None else None,
                                   "dataset_sha256": data.meta.get("sha256") if data is not None else None,
                                   "metrics": ctx.history[-1] if ctx.history else {}},
                            extras={"history": ctx.history,
                                    "env": {"id": cfg.env, "obs_dim": obs_dim, "action_low": low.tolist(),
                                            "action_high": high.tolist()}})
            if online_from is not None:  # the online transitions: networks alone cannot resume a replay run
                buf.save(d / "replay.npz")
        return write

    env, obs = None, None
    sums: dict[str, torch.Tensor] = {}
    n_updates, t0, step0 = 0, time.time(), step
    episode_return, episode_returns = 0.0, []
    while step < cfg.total_steps:
        online = online_from is not None and step >= online_from
        if online:
            if env is None:  # a resumed run starts a new episode (the one in progress is not saved)
                env = make_rescaled_env(cfg.env)
                obs = env.reset(seed=cfg.seed * 1000 + ctx.rank + step)[0].astype(np.float32)
                if step == cfg.max_steps and cfg.regime == "offline_to_online" and use_pi_ref:
                    learner.refresh_reference(force=True)  # mu switches from the data to the offline actor
            env_step = step - online_from
            if env_step < cfg.start_steps_value:
                act = rng.uniform(-1.0, 1.0, act_dim).astype(np.float32)
            else:  # the env is numpy: one observation to the device and one action back per env step
                obs_t = torch.as_tensor(obs, device=ctx.device)[None]
                act = learner.actor.act(obs_t, False, learner.generator)[0].cpu().numpy()
            nxt, r, term, trunc, _ = env.step(act)
            nxt = nxt.astype(np.float32)
            buf.add(obs, act, r, nxt, term, trunc)
            episode_return += float(r)
            obs = nxt
            if term or trunc:
                episode_returns.append(episode_return)
                episode_return, obs = 0.0, env.reset()[0].astype(np.float32)
            step += 1
            if env_step + 1 >= cfg.start_steps_value and buf.size >= cfg.batch_size:
                update_credit += cfg.updates_per_env_step
                while update_credit >= 1.0:
                    update_credit -= 1.0
                    out = learner.update(buf.sample(cfg.batch_size, learner.generator, ctx.shard), use_pi_ref)
                    if use_pi_ref:
                        learner.refresh_reference()
                    n_updates += 1
                    for k, v in out.items():  # device tensors: summed there, read at the next report
                        sums[k] = sums.get(k, 0.0) + v
        else:
            if cfg.regime == "offline" and cfg.actor_cosine:  # IVR: cosine decay of the actor lr to 0
                learner.set_actor_lr(cfg.lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.max_steps)))
            out = learner.update(buf.sample(cfg.batch_size, learner.batch_generator, ctx.shard), use_pi_ref=False)
            n_updates += 1
            for k, v in out.items():
                sums[k] = sums.get(k, 0.0) + v
            step += 1

        if step % cfg.eval_every == 0 or step == cfg.total_steps:
            ev = evaluate(learner.actor, cfg.env, cfg.eval_episodes, base_seed=10_000, progress=ctx.progress) if ctx.is_main else {}
            ev = _broadcast(ev, ctx)
            scores = [h["eval/normalized_score"] for h in ctx.history] + [ev["eval/normalized_score"]]
            metrics = {"step": step, "online": float(online), "grad_steps": learner.grad_steps,
                       "env_steps": max(0, step - online_from) if online_from is not None else 0, **ev,
                       "eval/normalized_score_last3": float(np.mean(scores[-3:])),
                       "actor/log_std_mean": learner.actor_log_std_mean(),
                       "time/steps_per_s": (step - step0) / max(time.time() - t0, 1e-9)}
            metrics.update(_train_means(sums, n_updates, ctx))
            ep = _episode_return(episode_returns, ctx) if online_from is not None else None
            if ep is not None:
                metrics["train/episode_return"] = ep
            done = step >= cfg.total_steps
            metrics.update(resumed)
            if done and saved is not None:  # the saved transitions are still the buffer's first online rows
                metrics["resume/replay_kept"] = float(buf.digest(buf.n_fixed, buf.n_fixed + saved[1]) == saved[0])
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(metrics, checkpoint=writer(done) if save else None)
            sums, n_updates, t0, step0, episode_returns = {}, 0, time.time(), step, []
    if env is not None:
        env.close()
    if not ctx.history or ctx.history[-1]["step"] != step:  # resumed at the very end: report once
        ev = _broadcast(evaluate(learner.actor, cfg.env, cfg.eval_episodes, progress=ctx.progress) if ctx.is_main else {}, ctx)
        scores = [h["eval/normalized_score"] for h in ctx.history] + [ev["eval/normalized_score"]]
        ctx.report({"step": step, **ev, "eval/normalized_score_last3": float(np.mean(scores[-3:]))},
                   checkpoint=writer(True))
    return ctx.history[-1]
