"""Deterministic evaluation: `episodes` copies of the env stepped in lockstep with one batched actor call
per time step. Episode i always starts from reset(seed=base_seed + i), so evaluations along a run (and
across methods with the same seed) share their initial states and differ only through the policy."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from methodlab.data.offline_rl import make_env, normalized_score


def make_rescaled_env(env_id: str):
    """The env with actions in [-1, 1] (gymnasium's RescaleAction), as the actor and buffer see them."""
    from gymnasium.wrappers import RescaleAction

    env = make_env(env_id)
    ones = np.ones(env.action_space.shape, np.float32)
    return RescaleAction(env, -ones, ones)


@torch.no_grad()
def evaluate(actor, env_id: str, episodes: int, base_seed: int = 10_000, progress=lambda items, **_: items) -> dict[str, float]:
    """`progress` (RunContext.progress in a run) shows the lockstep env steps of long rollouts. The actor runs
    on its own device; observations go there and actions come back once per lockstep (the envs are numpy)."""
    device = next(actor.parameters()).device
    envs = [make_rescaled_env(env_id) for _ in range(episodes)]
    obs = np.stack([e.reset(seed=base_seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    returns = np.zeros(episodes)
    alive = np.ones(episodes, bool)
    for _ in progress(itertools.count(), desc=f"evaluating {episodes} {env_id} episodes", unit="env step"):
        if not alive.any():
            break
        idx = np.flatnonzero(alive)
        acts = actor.act(torch.as_tensor(obs[idx], device=device), deterministic=True).cpu().numpy()
        for j, i in enumerate(idx):
            o, r, term, trunc, _ = envs[i].step(acts[j])
            returns[i] += r
            obs[i] = o
            alive[i] = not (term or trunc)
    for e in envs:
        e.close()
    ret = float(returns.mean())
    return {"eval/return": ret, "eval/return_std": float(returns.std()),
            "eval/normalized_score": normalized_score(env_id, ret)}
