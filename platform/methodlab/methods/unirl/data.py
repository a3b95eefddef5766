"""The replay buffer (offline dataset, online replay, or both for offline-to-online) and the offline data.

Arrays are preallocated torch tensors on the run's device (the offline dataset is copied there once), so a
batch is one index_select per field drawn by a generator on that device. Actions are stored normalised to
[-1, 1]; `dones` holds terminals only (time-outs never cut the bootstrap)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from methodlab.core.errors import CheckpointError
from methodlab.data.offline_rl import LOCOMOTION, OfflineData, env_family, load_dataset
from methodlab.methods.unirl.config import Config

FIELDS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")


class Replay:
    def __init__(self, obs_dim: int, act_dim: int, capacity: int, device="cpu"):
        self.capacity, self.pos, self.size = capacity, 0, 0
        self.n_fixed = 0  # leading rows that came from an offline dataset (never overwritten, never saved)
        self.device = torch.device(device)
        self.obs = torch.zeros(capacity, obs_dim, device=self.device)
        self.act = torch.zeros(capacity, act_dim, device=self.device)
        self.rew = torch.zeros(capacity, device=self.device)
        self.next_obs = torch.zeros(capacity, obs_dim, device=self.device)
        self.term = torch.zeros(capacity, device=self.device)
        self.tout = torch.zeros(capacity, dtype=torch.bool, device=self.device)

    def _cols(self):
        return self.obs, self.act, self.rew, self.next_obs, self.term, self.tout

    def add_dataset(self, data: OfflineData, reward_scale: float = 1.0) -> None:
        n = len(data)
        if n > self.capacity:
            raise ValueError(f"dataset of {n} transitions exceeds the buffer capacity {self.capacity}")
        arrays = (data.observations, data.actions, data.rewards * reward_scale, data.next_observations,
                  data.terminals.astype(np.float32), data.timeouts)
        for col, arr in zip(self._cols(), arrays):  # one host-to-device copy per field, at set-up
            col[:n] = torch.as_tensor(np.asarray(arr), device=self.device).to(col.dtype).reshape(col[:n].shape)
        self.pos = self.size = self.n_fixed = n

    def add(self, obs, act, rew: float, next_obs, terminal: bool, timeout: bool) -> None:
        """One env transition (the env lives on the host): packed into one row, copied to the device once."""
        i, o, a = self.pos, self.obs.shape[1], self.act.shape[1]
        row = torch.as_tensor(np.concatenate([np.ravel(obs), np.ravel(act), [rew], np.ravel(next_obs), [terminal]],
                                             dtype=np.float32), device=self.device)
        self.obs[i], self.act[i], self.rew[i] = row[:o], row[o:o + a], row[o + a]
        self.next_obs[i], self.term[i] = row[o + a + 1:2 * o + a + 1], row[-1]
        self.tout[i] = bool(timeout)
        self.pos = self.n_fixed + (self.pos + 1 - self.n_fixed) % (self.capacity - self.n_fixed)
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, generator: torch.Generator, shard=None):
        """`batch` rows drawn by `generator`; `shard` (ctx.shard in a run): this rank's part of them (all of them
        on one worker)."""
        idx = torch.randint(self.size, (batch,), generator=generator, device=self.device)
        if shard is not None:
            idx = shard(idx)
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.term[idx]

    # --- checkpoint: the online part only, as .npz (read back with allow_pickle=False) -------------
    def save(self, path: Path) -> None:
        lo, hi = self.n_fixed, self.size
        arrays = {name: col[lo:hi].cpu().numpy() for name, col in zip(FIELDS, self._cols())}
        np.savez(path, **arrays, pos=np.int64(self.pos), size=np.int64(self.size), n_fixed=np.int64(self.n_fixed))

    def load(self, path: Path) -> None:
        if not Path(path).is_file():
            raise CheckpointError(f"{path}: replay buffer missing from the checkpoint")
        with np.load(path, allow_pickle=False) as z:
            if int(z["n_fixed"]) != self.n_fixed:
                raise CheckpointError(f"{path}: saved with {int(z['n_fixed'])} offline rows, this run has {self.n_fixed}")
            lo, hi = self.n_fixed, int(z["size"])
            for name, col in zip(FIELDS, self._cols()):
                col[lo:hi] = torch.as_tensor(z[name], device=self.device).to(col.dtype)
            # a buffer saved full by a shorter run (its ring pointer back at the start) appends at its end here
            # when this run's buffer is larger (online_steps raised on resume), never over its first rows
            self.pos, self.size = (int(z["pos"]) if hi >= self.capacity else hi), hi

    def digest(self, lo: int, hi: int) -> str:
        """sha256 of rows [lo, hi) of every field, as saved (the resume check compares it with `saved_digest`)."""
        h = hashlib.sha256()
        for col in self._cols():
            h.update(col[lo:hi].cpu().numpy().tobytes())
        return h.hexdigest()


def saved_digest(path: Path) -> tuple[str, int]:
    """(sha256 of a saved replay's arrays in Replay.digest's order, its number of rows), read without pickle."""
    h = hashlib.sha256()
    with np.load(path, allow_pickle=False) as z:
        for name in FIELDS:
            h.update(np.ascontiguousarray(z[name]).tobytes())
        return h.hexdigest(), len(z[FIELDS[0]])


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
