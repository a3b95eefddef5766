"""The settings other than `train` (the platform's convention: every other entry point lives in settings.py).

offline / online / offline_to_online: `train.fit` with the regime the setting names (a job's setting picks it).

make_dataset: D4RL-style datasets generated locally [spec: Data].

1. A reference SAC run (this method's `learner=sac`), evaluated every eval_every env steps with
   deterministic episodes; medium = the first evaluation at or above the medium bar; the run continues
   until the expert bar or the budget; expert = the best-evaluated policy.
2. Kinds: random (uniform actions), medium / expert (the snapshot sampling stochastically),
   medium-replay (every transition of the run up to the medium snapshot), medium-expert (both).
3. One D4RL-keyed HDF5 file per kind (native-range actions) with the recipe as root attributes;
   optionally a local Minari dataset with the same episodes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from methodlab.core import ConfigError, RunContext, seed_everything
from methodlab.data.offline_rl import (env_family, env_spaces, normalized_score, random_transitions, ref_scores,
                                       to_native, write_d4rl_hdf5)
from methodlab.methods.unirl.config import Config
from methodlab.methods.unirl.data import Replay
from methodlab.methods.unirl.evaluate import evaluate, make_rescaled_env
from methodlab.methods.unirl.learner import Learner
from methodlab.methods.unirl.train import fit


def _with_regime(cfg: Config, regime: str) -> Config:
    return cfg if cfg.regime == regime else Config.model_validate({**cfg.model_dump(), "regime": regime})


def fit_offline(cfg: Config, ctx: RunContext) -> dict:
    return fit(_with_regime(cfg, "offline"), ctx)


def fit_online(cfg: Config, ctx: RunContext) -> dict:
    return fit(_with_regime(cfg, "online"), ctx)


def fit_offline_to_online(cfg: Config, ctx: RunContext) -> dict:
    return fit(_with_regime(cfg, "offline_to_online"), ctx)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("methodlab")
    except Exception:
        return "unknown"


def policy_sha256(actor: torch.nn.Module) -> str:
    from safetensors.torch import save

    return hashlib.sha256(save({k: v.detach().cpu().contiguous() for k, v in actor.state_dict().items()})).hexdigest()


def recipe(cfg: Config) -> dict:
    """The generation defaults of the spec, resolved per env family."""
    g, pend = cfg.generation, env_family(cfg.env) == "pendulum"
    return {"n": g.n_transitions or (50_000 if pend else 100_000),
            "total": g.total_env_steps or (200_000 if pend else 1_000_000),
            "upe": g.updates_per_env_step or (0.05 if pend else 1.0),
            "medium_bar": g.medium_bar if g.medium_bar is not None else (-400.0 if pend else ref_scores(cfg.env)[1] / 3),
            "expert_bar": g.expert_bar if g.expert_bar is not None else (-200.0 if pend else None),
            "eval_every": g.eval_every or (1000 if pend else 10_000), "pendulum": pend}


@torch.no_grad()
def rollout(actor, env_id: str, n: int, seed: int) -> dict:
    """n transitions of `actor` sampling stochastically; native actions; log-probs in normalised units.
    The actor samples on its own device (with a generator there); each step's action comes back to the env."""
    device = next(actor.parameters()).device
    env = make_rescaled_env(env_id)
    low, high = env.env.action_space.low, env.env.action_space.high  # the wrapped env's native bounds
    gen = torch.Generator(device=device).manual_seed(seed)
    cols: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals",
                                             "timeouts", "infos/action_log_probs", "infos/qpos", "infos/qvel")}
    mujoco = hasattr(env.unwrapped, "data") and hasattr(env.unwrapped.data, "qpos")
    obs, _ = env.reset(seed=seed)
    for _ in range(n):
        o = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
        a, logp = actor.sample(o, gen)
        a, logp = a[0].clamp(-1, 1).cpu().numpy(), logp.cpu()
        if mujoco:
            cols["infos/qpos"].append(env.unwrapped.data.qpos.copy())
            cols["infos/qvel"].append(env.unwrapped.data.qvel.copy())
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in (("observations", obs), ("actions", to_native(a.astype(np.float64), low, high)), ("rewards", r),
                     ("next_observations", nxt), ("terminals", term), ("timeouts", trunc),
                     ("infos/action_log_probs", float(logp[0]))):
            cols[k].append(v)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    out = {k: np.asarray(v) for k, v in cols.items() if v}
    out["timeouts"] = out["timeouts"].astype(bool)
    out["timeouts"][-1] = True
    out["terminals"] = out["terminals"].astype(bool)
    out["observations"] = out["observations"].astype(np.float32)
    out["next_observations"] = out["next_observations"].astype(np.float32)
    out["rewards"] = out["rewards"].astype(np.float32)
    out["actions"] = out["actions"].astype(np.float32)
    return out


def _concat(a: dict, b: dict) -> dict:
    return {k: np.concatenate([a[k], b[k]]) for k in a if k in b}


def export_minari(arrays: dict, env_id: str, dataset_id: str) -> str:
    try:
        import minari
        from minari.data_collector import EpisodeBuffer
    except ImportError:
        raise ConfigError("export_minari needs minari: pip install minari", field="generation.export_minari") from None
    ends = np.flatnonzero(arrays["terminals"] | arrays["timeouts"])
    episodes, start = [], 0
    for e in ends:
        sl = slice(start, e + 1)
        obs = np.concatenate([arrays["observations"][sl], arrays["next_observations"][e:e + 1]])
        episodes.append(EpisodeBuffer(observations=obs, actions=arrays["actions"][sl], rewards=arrays["rewards"][sl],
                                      terminations=arrays["terminals"][sl], truncations=arrays["timeouts"][sl]))
        start = e + 1
    import gymnasium as gym

    try:
        minari.delete_dataset(dataset_id)
    except Exception:
        pass
    minari.create_dataset_from_buffers(dataset_id=dataset_id, buffer=episodes, env=gym.make(env_id),
                                       algorithm_name="methodlab unirl make_dataset")
    return dataset_id


def fit_make_dataset(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    g, rc = cfg.generation, recipe(cfg)
    obs_dim, low, high = env_spaces(cfg.env)
    act_dim = len(low)
    out_dir = ctx.write_path(g.out_dir).resolve()  # relative: inside the run folder
    stem = cfg.env.lower()
    needs_run = any(k != "random" for k in g.kinds)
    meta = {"env_id": cfg.env, "seed": cfg.seed, "action_low": low, "action_high": high,
            "updates_per_env_step": rc["upe"], "medium_return": np.nan, "expert_return": np.nan,
            "policy_sha256": "uniform", "methodlab_version": _version(), "recipe": json.dumps(
                {**g.model_dump(mode="json"), "resolved": {k: v for k, v in rc.items()}, "hidden": cfg.hidden,
                 "lr": cfg.lr, "batch_size": cfg.batch_size, "eval_episodes": cfg.eval_episodes})}
    medium = expert = None
    metrics: dict = {"step": 0}
    if needs_run:
        sac = Config.model_validate({**cfg.model_dump(), "regime": "online", "learner": "sac"})
        learner = Learner(sac, obs_dim, act_dim, ctx)  # the reference SAC run trains on ctx.device
        buf = Replay(obs_dim, act_dim, rc["total"], ctx.device)
        env = make_rescaled_env(cfg.env)
        rng = np.random.default_rng(cfg.seed)
        obs = env.reset(seed=cfg.seed)[0].astype(np.float32)
        credit, best, medium_size = 0.0, -np.inf, None
        for t in range(1, rc["total"] + 1):
            if t <= g.start_steps:
                a = rng.uniform(-1, 1, act_dim).astype(np.float32)
            else:
                obs_t = torch.as_tensor(obs, device=ctx.device)[None]  # the env is numpy: one round trip a step
                a = learner.actor.act(obs_t, False, learner.generator)[0].cpu().numpy()
            nxt, r, term, trunc, _ = env.step(a)
            buf.add(obs, a, r, nxt, term, trunc)
            obs = env.reset()[0] if (term or trunc) else nxt
            obs = np.asarray(obs, np.float32)
            if t > g.start_steps and buf.size >= cfg.batch_size:
                credit += rc["upe"]
                while credit >= 1.0:
                    credit -= 1.0
                    learner.update(buf.sample(cfg.batch_size, learner.generator), use_pi_ref=False)
            if t % rc["eval_every"] == 0:
                ret = evaluate(learner.actor, cfg.env, cfg.eval_episodes)["eval/return"]
                if medium is None and ret >= rc["medium_bar"]:
                    medium, medium_size, meta["medium_return"] = copy.deepcopy(learner.actor), buf.size, ret
                if ret > best:
                    best, expert, meta["expert_return"] = ret, copy.deepcopy(learner.actor), ret
                metrics = {"step": t, "dataset/return": ret, "dataset/expert_return": best,
                           "eval/normalized_score_last3": normalized_score(cfg.env, ret),
                           "dataset/medium_found": float(medium is not None)}
                ctx.report(metrics)
                if medium is not None and rc["expert_bar"] is not None and best >= rc["expert_bar"]:
                    break
        env.close()
        if medium is None:
            raise RuntimeError(f"{cfg.env}: the reference run never reached the medium bar {rc['medium_bar']} "
                               f"in {rc['total']} env steps (best {best:.1f})")
        if rc["pendulum"] and g.require_expert and rc["expert_bar"] is not None and best < rc["expert_bar"]:
            raise RuntimeError(f"{cfg.env}: expert return {best:.1f} is below the expert bar {rc['expert_bar']}")
    written = {}
    cache: dict = {}

    def kind_arrays(kind: str) -> tuple[dict, str]:
        if kind == "random":
            return random_transitions(cfg.env, rc["n"], cfg.seed, with_infos=True), "uniform"
        if kind in ("medium", "expert"):
            if kind not in cache:
                pol = medium if kind == "medium" else expert
                cache[kind] = (rollout(pol, cfg.env, rc["n"], cfg.seed + (1 if kind == "medium" else 2)), policy_sha256(pol))
            return cache[kind]
        if kind == "medium-replay":
            sl = slice(0, medium_size)
            col = lambda t: t[sl].cpu().numpy()  # noqa: E731  (the run's buffer, back on the host once)
            arr = {"observations": col(buf.obs), "actions": to_native(col(buf.act).astype(np.float64), low, high).astype(np.float32),
                   "rewards": col(buf.rew), "next_observations": col(buf.next_obs),
                   "terminals": col(buf.term).astype(bool), "timeouts": col(buf.tout).copy()}
            arr["timeouts"][-1] = True  # the episode in progress at the medium snapshot is cut here
            return arr, policy_sha256(medium)
        (m, hm), (e, he) = kind_arrays("medium"), kind_arrays("expert")
        return _concat(m, e), f"{hm},{he}"

    for kind in g.kinds:
        arrays, sha = kind_arrays(kind)
        path = write_d4rl_hdf5(out_dir / f"{stem}-{kind}.hdf5", arrays, {**meta, "kind": kind, "policy_sha256": sha,
                                                                          "n_transitions": len(arrays["rewards"])})
        written[kind] = str(path)
        if g.export_minari:
            export_minari(arrays, cfg.env, f"methodlab/{cfg.env.split('-')[0].lower()}/{kind}-v0")
    final = {**metrics, "step": metrics.get("step", 0), "dataset/files": len(written),
             "dataset/medium_return": float(meta["medium_return"]), "dataset/expert_return": float(meta["expert_return"]),
             "eval/normalized_score_last3": metrics.get("eval/normalized_score_last3", 0.0)}
    ctx.report(final)
    (out_dir / f"{stem}-manifest.json").write_text(json.dumps({"files": written, **{k: v for k, v in final.items()}}, indent=1))
    return final
