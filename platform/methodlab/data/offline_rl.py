"""Offline RL data: D4RL-keyed HDF5 files (read and write), Minari datasets, the stored Pendulum set,
uniform-random transitions, action scaling and D4RL-style normalised scores.

D4RL cannot be installed or downloaded here, so datasets are generated locally (unirl's make_dataset
setting) in D4RL's on-disk format; a user who has the real D4RL files points a job at them.
Every loader maps to (s, a_n, r, s', done = terminals) with a_n the action in [-1, 1]:
a_n = 2 (a - low) / (high - low) - 1, with low/high taken from the job's env (never from the file alone).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import ConfigError, MissingSourceError

ASSETS = Path(__file__).parent / "assets" / "unirl"
# Datasets committed as package data; each has a .sha256 file beside it, checked on every load.
STORED = {"pendulum-v1-medium-replay": ASSETS / "pendulum-v1-medium-replay.hdf5"}

# D4RL reference returns (random, expert) by env family. Pendulum-v1 is not in D4RL: random is the measured
# mean return of the uniform policy over 100 episodes (seeds 0..99; test_unirl re-measures it), expert = -150.
PENDULUM_RANDOM_RETURN = -1197.1835879206942
REF_SCORES: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
    "pendulum": (PENDULUM_RANDOM_RETURN, -150.0),
}
LOCOMOTION = ("halfcheetah", "hopper", "walker2d")
D4RL_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")


def env_family(env_id: str) -> str:
    return env_id.split("-")[0].split("/")[-1].lower()


def ref_scores(env_id: str) -> tuple[float, float]:
    fam = env_family(env_id)
    if fam not in REF_SCORES:
        raise ConfigError(f"no reference scores for {env_id!r}; known families: {', '.join(REF_SCORES)}", field="env")
    return REF_SCORES[fam]


def normalized_score(env_id: str, ret: float) -> float:
    """100 * (R - R_random) / (R_expert - R_random)."""
    lo, hi = ref_scores(env_id)
    return 100.0 * (ret - lo) / (hi - lo)


def to_normalized(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return 2.0 * (a - low) / (high - low) - 1.0


def to_native(a_n: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return low + (a_n + 1.0) * (high - low) / 2.0


def make_env(env_id: str, **kwargs):
    """A gymnasium env; MuJoCo ids fail with one line naming the wheel."""
    import gymnasium as gym

    try:
        return gym.make(env_id, **kwargs)
    except (ImportError, gym.error.DependencyNotInstalled) as err:
        raise MissingSourceError(f"{env_id} needs the MuJoCo wheel: pip install 'gymnasium[mujoco]' ({err})") from None
    except gym.error.Error as err:
        raise ConfigError(f"unknown or unusable gymnasium env {env_id!r}: {err}", field="env") from None


def env_spaces(env_id: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(obs_dim, action low, action high) of the env."""
    env = make_env(env_id)
    try:
        obs_dim = int(np.prod(env.observation_space.shape))
        return obs_dim, env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    finally:
        env.close()


@dataclass
class OfflineData:
    """Transitions with actions normalised to [-1, 1]; done = terminals (time-outs never end a bootstrap)."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rewards)

    def episode_ends(self) -> np.ndarray:
        """Indices that end an episode: terminals, timeouts, or a break in s' -> s continuity."""
        ends = self.terminals | self.timeouts
        brk = np.zeros(len(self), bool)
        if len(self) > 1:
            brk[:-1] = np.abs(self.next_observations[:-1] - self.observations[1:]).max(-1) > 1e-6
        ends = ends | brk
        ends[-1] = True
        return np.flatnonzero(ends)

    def episode_returns(self) -> np.ndarray:
        ends = self.episode_ends()
        csum = np.concatenate([[0.0], np.cumsum(self.rewards, dtype=np.float64)])
        starts = np.concatenate([[0], ends[:-1] + 1])
        return csum[ends + 1] - csum[starts]


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def from_d4rl_arrays(d: dict, low, high, *, where: str = "<dict>", attrs: dict | None = None) -> OfflineData:
    """A D4RL-keyed mapping (native-range actions) -> OfflineData, with the bound and range checks of the spec."""
    missing = [k for k in ("observations", "actions", "rewards", "terminals") if k not in d]
    if missing:
        raise ConfigError(f"{where}: missing D4RL keys {missing} (have {sorted(d)})", field="dataset")
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    attrs = attrs or {}
    if "action_low" in attrs or "action_high" in attrs:
        f_low = np.asarray(attrs.get("action_low"), np.float64).reshape(-1)
        f_high = np.asarray(attrs.get("action_high"), np.float64).reshape(-1)
        if f_low.shape != low.shape or f_high.shape != high.shape or not (np.allclose(f_low, low) and np.allclose(f_high, high)):
            raise ConfigError(f"{where}: file action bounds low={f_low.tolist()} high={f_high.tolist()} differ from the "
                              f"env's low={low.tolist()} high={high.tolist()}", field="dataset")
    obs = np.asarray(d["observations"], np.float32)
    act = np.asarray(d["actions"], np.float64).reshape(len(obs), -1)
    if act.shape[1] != low.shape[0]:
        raise ConfigError(f"{where}: actions have {act.shape[1]} dims, the env has {low.shape[0]}", field="dataset")
    n = len(obs)
    rew = np.asarray(d["rewards"], np.float32).reshape(n)
    term = np.asarray(d["terminals"]).astype(bool).reshape(n)
    tout = np.asarray(d["timeouts"]).astype(bool).reshape(n) if "timeouts" in d else np.zeros(n, bool)
    if "next_observations" in d:
        nxt = np.asarray(d["next_observations"], np.float32)
    else:  # old D4RL files: s' = next row; the last transition of each episode is dropped
        nxt = np.concatenate([obs[1:], obs[-1:]], 0)
        keep = ~(tout | np.r_[np.zeros(n - 1, bool), True])
        obs, act, rew, term, tout, nxt = obs[keep], act[keep], rew[keep], term[keep], tout[keep], nxt[keep]
    span = high - low
    outside = ((act < low - 0.01 * span) | (act > high + 0.01 * span)).any(-1)
    if outside.any():
        raise ConfigError(f"{where}: {int(outside.sum())} of {len(act)} actions lie outside the env's bounds "
                          f"[{low.tolist()}, {high.tolist()}] by more than 1% of the range: dataset and env do not match",
                          field="dataset")
    a_n = np.clip(to_normalized(np.clip(act, low, high), low, high), -1.0, 1.0).astype(np.float32)
    return OfflineData(obs, a_n, rew, nxt, term, tout, meta=dict(attrs))


def load_d4rl_hdf5(path: str | Path, low, high, *, expected_sha256: str | None = None) -> OfflineData:
    try:
        import h5py
    except ImportError:
        raise MissingSourceError("reading D4RL HDF5 files needs h5py: pip install h5py") from None
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"dataset file not found: {path}", field="dataset")
    if expected_sha256 is not None:
        actual = sha256_file(path)
        if actual != expected_sha256:
            raise ConfigError(f"{path}: sha256 {actual} differs from the expected {expected_sha256}", field="dataset")
    try:
        with h5py.File(path, "r") as f:
            d = {k: f[k][()] for k in D4RL_KEYS if k in f}
            attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
    except (OSError, KeyError, ValueError, TypeError) as err:  # h5py: not HDF5, truncated, damaged chunk, odd types
        reason = " ".join(str(err).split())[:160]
        raise ConfigError(f"cannot be read as an HDF5 dataset ({type(err).__name__}: {reason}); the file is damaged "
                          "or not HDF5: re-create it (setting make_dataset) or point dataset at another file",
                          where=str(path), field="dataset") from None
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    return from_d4rl_arrays(d, low, high, where=str(path), attrs=attrs)


def load_minari(dataset_id: str, low, high) -> OfflineData:
    """A locally installed Minari dataset (never downloaded): episodes -> flat D4RL-style arrays."""
    try:
        import minari
    except ImportError:
        raise MissingSourceError("Minari datasets need minari: pip install minari (not minari[integrations])") from None
    try:
        ds = minari.load_dataset(dataset_id, download=False)
    except Exception as err:  # minari raises plain errors for unknown local ids
        raise ConfigError(f"Minari dataset {dataset_id!r} is not available locally ({err})", field="dataset") from None
    cols: dict[str, list] = {k: [] for k in D4RL_KEYS}
    for ep in ds.iterate_episodes():
        o = np.asarray(ep.observations, np.float32)
        cols["observations"].append(o[:-1])
        cols["next_observations"].append(o[1:])
        cols["actions"].append(np.asarray(ep.actions, np.float64).reshape(len(o) - 1, -1))
        cols["rewards"].append(np.asarray(ep.rewards, np.float32))
        cols["terminals"].append(np.asarray(ep.terminations, bool))
        cols["timeouts"].append(np.asarray(ep.truncations, bool))
    return from_d4rl_arrays({k: np.concatenate(v) for k, v in cols.items()}, low, high, where=f"minari:{dataset_id}")


def _no_progress(items, **_):
    return items


def random_transitions(env_id: str, n: int, seed: int, with_infos: bool = False, progress=_no_progress) -> dict:
    """n transitions of the uniform policy (native actions), D4RL-keyed, episodes cut by the env's time limit.
    `progress(iterable, total=, desc=, unit=)` wraps the loop (RunContext.progress in a run)."""
    env = make_env(env_id)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    cols: dict[str, list] = {k: [] for k in D4RL_KEYS}
    obs, _ = env.reset(seed=seed)
    for _ in progress(range(n), total=n, desc=f"generating {env_id} random transitions", unit="transition"):
        a = rng.uniform(low, high).astype(np.float32)
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(D4RL_KEYS, (obs, a, r, nxt, term, trunc)):
            cols[k].append(v)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    out = {k: np.asarray(v) for k, v in cols.items()}
    out["terminals"], out["timeouts"] = out["terminals"].astype(bool), out["timeouts"].astype(bool)
    out["timeouts"][-1] = True  # the last (cut) episode ends here
    if with_infos:  # uniform density on the box: log prob = -sum log(high - low)
        out["infos/action_log_probs"] = np.full(n, -float(np.log(high - low).sum()), np.float32)
    return out


def write_d4rl_hdf5(path: str | Path, arrays: dict, attrs: dict) -> Path:
    """Write D4RL keys (plus 'infos/...' entries) and root attributes; atomic via a temp file."""
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.hdf5")
    with h5py.File(tmp, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=np.asarray(v), compression="gzip", compression_opts=4)
        for k, v in attrs.items():
            f.attrs[k] = v if v is not None else "none"
    tmp.replace(path)
    return path


def load_dataset(spec: str, env_id: str, seed: int = 0, progress=_no_progress) -> OfflineData:
    """Resolve a job's `dataset` string: stored name | HDF5 path | minari:<id> | generate:random:<N>."""
    _, low, high = env_spaces(env_id)
    if spec in STORED:
        path = STORED[spec]
        digest_file = path.with_name(path.name + ".sha256")
        if not path.is_file() or not digest_file.is_file():
            raise MissingSourceError(f"stored dataset {spec} missing at {path} (it ships with the methodlab package)")
        data = load_d4rl_hdf5(path, low, high, expected_sha256=digest_file.read_text().split()[0])
        data.meta.update(name=spec, sha256=digest_file.read_text().split()[0])
        return data
    if spec.startswith("minari:"):
        return load_minari(spec.split(":", 1)[1], low, high)
    if spec.startswith("generate:"):
        parts = spec.split(":")
        if len(parts) != 3 or parts[1] != "random" or not parts[2].isdigit():
            raise ConfigError(f"{spec!r}: use generate:random:<N>", field="dataset")
        data = from_d4rl_arrays(random_transitions(env_id, int(parts[2]), seed, progress=progress), low, high, where=spec)
        data.meta.update(name=spec)
        return data
    path = Path(spec).expanduser()
    if path.suffix not in (".hdf5", ".h5"):
        raise ConfigError(f"dataset {spec!r}: not a stored name ({', '.join(STORED)}), an .hdf5 path, "
                          "minari:<id> or generate:random:<N>", field="dataset")
    data = load_d4rl_hdf5(path.resolve(), low, high)
    data.meta.update(name=str(path.resolve()), sha256=sha256_file(path))
    return data


def measure_random_return(env_id: str, episodes: int = 100, seed: int = 0) -> float:
    """Mean return of the uniform policy; episode i is reset with seed + i and draws actions from rng(seed + i)."""
    env = make_env(env_id)
    low, high = env.action_space.low, env.action_space.high
    total = 0.0
    for i in range(episodes):
        rng = np.random.default_rng(seed + i)
        env.reset(seed=seed + i)
        done = False
        while not done:
            _, r, term, trunc, _ = env.step(rng.uniform(low, high).astype(np.float32))
            total += float(r)
            done = term or trunc
    env.close()
    return total / episodes
