"""The replay buffer (offline dataset, online replay, or both for offline-to-online) and the offline data.

Arrays are preallocated torch tensors so a batch is one index_select per field. Actions are stored
normalised to [-1, 1]; `dones` holds terminals only (time-outs never cut the bootstrap)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from methodlab.core.errors import CheckpointError
from methodlab.data.offline_rl import LOCOMOTION, OfflineData, env_family, load_dataset
from methodlab.methods.unirl.config import Config

FIELDS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")


class Replay:
    def __init__(self, obs_dim: int, act_dim: int, capacity: int):
        self.capacity, self.pos, self.size = capacity, 0, 0
        self.n_fixed = 0  # leading rows that came from an offline dataset (never overwritten, never saved)
        self.obs = torch.zeros(capacity, obs_dim)
        self.act = torch.zeros(capacity, act_dim)
        self.rew = torch.zeros(capacity)
        self.next_obs = torch.zeros(capacity, obs_dim)
        self.term = torch.zeros(capacity)
        self.tout = torch.zeros(capacity, dtype=torch.bool)

    def _cols(self):
        return self.obs, self.act, self.rew, self.next_obs, self.term, self.tout

    def add_dataset(self, data: OfflineData, reward_scale: float = 1.0) -> None:
        n = len(data)
        if n > self.capacity:
            raise ValueError(f"dataset of {n} transitions exceeds the buffer capacity {self.capacity}")
        arrays = (data.observations, data.actions, data.rewards * reward_scale, data.next_observations,
                  data.terminals.astype(np.float32), data.timeouts)
        for col, arr in zip(self._cols(), arrays):
            col[:n] = torch.as_tensor(np.asarray(arr)).to(col.dtype).reshape(col[:n].shape)
        self.pos = self.size = self.n_fixed = n

    def add(self, obs, act, rew: float, next_obs, terminal: bool, timeout: bool) -> None:
        i = self.pos
        self.obs[i] = torch.as_tensor(obs, dtype=torch.float32)
        self.act[i] = torch.as_tensor(act, dtype=torch.float32)
        self.rew[i] = float(rew)
        self.next_obs[i] = torch.as_tensor(next_obs, dtype=torch.float32)
        self.term[i] = float(terminal)
        self.tout[i] = bool(timeout)
        self.pos = self.n_fixed + (self.pos + 1 - self.n_fixed) % (self.capacity - self.n_fixed)
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, generator: torch.Generator):
        idx = torch.randint(self.size, (batch,), generator=generator)
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.term[idx]

    # --- checkpoint: the online part only, as .npz (read back with allow_pickle=False) -------------
    def save(self, path: Path) -> None:
        lo, hi = self.n_fixed, self.size
        arrays = {name: col[lo:hi].numpy() for name, col in zip(FIELDS, self._cols())}
        np.savez(path, **arrays, pos=np.int64(self.pos), size=np.int64(self.size), n_fixed=np.int64(self.n_fixed))

    def load(self, path: Path) -> None:
        if not Path(path).is_file():
            raise CheckpointError(f"{path}: replay buffer missing from the checkpoint")
        with np.load(path, allow_pickle=False) as z:
            if int(z["n_fixed"]) != self.n_fixed:
                raise CheckpointError(f"{path}: saved with {int(z['n_fixed'])} offline rows, this run has {self.n_fixed}")
            lo, hi = self.n_fixed, int(z["size"])
            for name, col in zip(FIELDS, self._cols()):
                col[lo:hi] = torch.as_tensor(z[name]).to(col.dtype)
            self.pos, self.size = int(z["pos"]), hi


def reward_scale_for(cfg: Config, data: OfflineData) -> float:
    """IVR's locomotion scaling: rewards * 1000 / (max - min trajectory return); 1 otherwise."""
    mode = cfg.reward_scale
    if mode == "auto":
        mode = "locomotion" if env_family(cfg.env) in LOCOMOTION else "none"
    if mode == "none":
        return 1.0
    rets = data.episode_returns()
    return 1000.0 / max(float(rets.max() - rets.min()), 1e-6)


def offline_data(cfg: Config, rank: int = 0, progress=lambda items, **_: items) -> OfflineData:
    # generate:random:N uses the run seed; every rank sees the same data (it shards by sampling)
    return load_dataset(cfg.dataset, cfg.env, seed=cfg.seed, progress=progress)
