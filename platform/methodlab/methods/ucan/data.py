"""Training scans and evaluation sets of ucan, from methodlab.data (analytic shapes, packaged meshes, PUNet files)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from methodlab.data import ucan_meshes as meshes
from methodlab.data import ucan_shapes as shapes


@dataclass
class EvalItem:
    name: str
    family: str
    noisy: np.ndarray  # [n,3] in the unit bounding sphere
    clean: np.ndarray  # [n,3] the noiseless samples behind `noisy`
    shape: shapes.Shape | None = None  # analytic: exact P2S
    mesh: tuple | None = None  # (vertices, faces): P2M


@dataclass
class PCData:
    train: list[np.ndarray]  # per training shape: [K, n, 3] noisy scans (no clean data is used for training)
    names: list[str]
    sets: dict[str, list[EvalItem]] = field(default_factory=dict)


def analytic_eval_set(cfg, split: str) -> list[EvalItem]:
    sets = shapes.shape_sets(cfg.data_seed, cfg.n_train_per_family)
    items = sets[split]
    if split == "val":
        items = [s for s in items if s.family in cfg.families]
    out = []
    for i, sh in enumerate(items):
        rng = np.random.default_rng([cfg.data_seed, 13 if split == "test" else 17, i])
        noisy, clean = shapes.noisy_observations(sh, cfg.n_points, 1, cfg.noise, rng)
        out.append(EvalItem(sh.name, sh.family, noisy[0], clean[0], shape=sh))
    return out


def build_data(cfg) -> PCData:
    if cfg.data == "punet":
        return build_punet(cfg)
    sets = shapes.shape_sets(cfg.data_seed, cfg.n_train_per_family)
    train = [s for s in sets["train"] if s.family in cfg.families]
    scans = []
    for i, sh in enumerate(train):
        rng = np.random.default_rng([cfg.data_seed, 11, i])
        if cfg.scan_sampling == "shared":  # one clean sample, K noise draws: scans differ by their noise only
            clean = shapes.sample_surface(sh, cfg.n_points, rng)
            noisy = clean[None] + cfg.noise * rng.normal(size=(cfg.observations, *clean.shape))
        else:
            noisy, _ = shapes.noisy_observations(sh, cfg.n_points, cfg.observations, cfg.noise, rng)
        scans.append(noisy.astype(np.float32))
    return PCData(scans, [s.name for s in train], {s: analytic_eval_set(cfg, s) for s in cfg.eval_sets})


def _punet_root(cfg):
    """punet_root as an existing folder, or one line naming the field (a read path: may be anywhere)."""
    from methodlab.core.paths import read_path

    return read_path(cfg.punet_root, "punet_root", "a PUNet/ScoreDenoise folder (pointclouds/{train,test}/<res>_poisson/)")


def build_punet(cfg) -> PCData:
    """PUNet train split: K noisy scans per mesh (fresh area-weighted samples when the mesh is there, else random
    subsets of the clean Poisson cloud; scan_sampling=shared: the first sample for all K), normalised to the unit
    bounding sphere; val = the test split's clouds."""
    scans, names = [], []
    for i, (name, cloud, mesh) in enumerate(meshes.punet_files(_punet_root(cfg), "train", cfg.punet_resolution)):
        rng = np.random.default_rng([cfg.data_seed, 11, i])
        pts = meshes.load_points(cloud)
        pts, centre, radius = meshes.normalise(pts)
        obs = []
        for k in range(cfg.observations):
            if k == 0 or cfg.scan_sampling == "fresh":  # shared: the first clean sample, a fresh noise draw each
                if mesh is not None:
                    v, f = meshes.load_mesh_file(mesh)
                    base = meshes.sample_mesh((v - centre) / radius, f, min(cfg.n_points, len(pts)), rng)
                else:
                    base = pts[rng.choice(len(pts), size=min(cfg.n_points, len(pts)), replace=False)]
            obs.append(base + cfg.noise * rng.normal(size=base.shape))
        scans.append(np.stack(obs).astype(np.float32))
        names.append(name)
    return PCData(scans, names, {"val": punet_eval_set(cfg, cfg.noise)})


def punet_eval_set(cfg, noise: float) -> list[EvalItem]:
    out = []
    for i, (name, cloud, mesh) in enumerate(meshes.punet_files(_punet_root(cfg), "test", cfg.punet_resolution)):
        rng = np.random.default_rng([cfg.data_seed, 19, i, int(round(noise * 1e4))])
        pts = meshes.load_points(cloud)
        clean, centre, radius = meshes.normalise(pts)
        m = None
        if mesh is not None:
            v, f = meshes.load_mesh_file(mesh)
            m = ((v - centre) / radius, f)
        out.append(EvalItem(name, "punet", clean + noise * rng.normal(size=clean.shape), clean, mesh=m))
    return out


def mesh_eval_set(cfg, noise: float) -> list[EvalItem]:
    """The packaged real meshes: mesh_points area-weighted samples (kitten: its 5,210-point set, no faces), noise
    std `noise` of the unit bounding radius. A missing source is skipped by the caller."""
    out = []
    for j, name in enumerate(cfg.meshes):
        rng = np.random.default_rng([cfg.data_seed, 23, j, int(round(noise * 1e4))])
        clean, v, f = meshes.real_benchmark(name, cfg.mesh_points, rng)
        out.append(EvalItem(name, "mesh", clean + noise * rng.normal(size=clean.shape), clean,
                            mesh=None if f is None else (v, f)))
    return out
