"""Analytic surfaces with an exact point-to-surface distance (P2S), for unsupervised point-cloud denoising.

Families: sphere, ellipsoid, torus, capsule, rounded box, capped cylinder. Each shape is centred at the origin,
randomly rotated and scaled so that its bounding sphere has radius 1 (the paper's noise convention: noise std is
a fraction of the unit bounding-sphere radius). Distances:
- sphere, torus, capsule, rounded box, capped cylinder: closed-form exact signed distance functions;
- ellipsoid: closest point by bisection + Newton steps on Eberly's closest-point equation (to ~1e-12).
Sampling: area-weighted on a fine marching-cubes triangulation of the surface, then every sample is projected
onto the exact surface (so samples lie on the true surface to ~1e-12, with a density uniform up to the
triangulation's area error). Plain functions, numpy only (skimage for marching cubes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

FAMILIES = ("sphere", "ellipsoid", "torus", "capsule", "rounded_box", "capped_cylinder")
TRAIN_FAMILIES = ("sphere", "ellipsoid", "torus", "capsule", "rounded_box")
HELD_OUT_FAMILY = "capped_cylinder"


@dataclass(frozen=True)
class Shape:
    family: str
    params: tuple[float, ...]  # canonical parameters (see canonical_sdf)
    rot: tuple[tuple[float, float, float], ...] = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    name: str = ""
    scale: float = field(default=0.0)  # world = scale * R @ canonical; 0 -> 1 / bounding radius

    @property
    def s(self) -> float:
        return self.scale if self.scale > 0 else 1.0 / bounding_radius(self.family, self.params)

    @property
    def R(self) -> np.ndarray:
        return np.asarray(self.rot, dtype=np.float64)

    def to_canonical(self, p: np.ndarray) -> np.ndarray:
        return (np.asarray(p, dtype=np.float64) @ self.R) / self.s  # R^T p / s, row vectors

    def to_world(self, q: np.ndarray) -> np.ndarray:
        return self.s * (np.asarray(q, dtype=np.float64) @ self.R.T)


def bounding_radius(family: str, params) -> float:
    if family == "sphere":
        return float(params[0])
    if family == "ellipsoid":
        return float(max(params))
    if family == "torus":
        return float(params[0] + params[1])
    if family == "capsule":  # half length h, radius r
        return float(params[0] + params[1])
    if family == "rounded_box":  # half extents bx, by, bz, rounding r
        return float(np.linalg.norm(params[:3]) + params[3])
    if family == "capped_cylinder":  # radius r, half height h
        return float(np.hypot(params[0], params[1]))
    raise ValueError(f"unknown family {family!r}")


# ------------------------------------------------------------------ canonical distances
def canonical_sdf(family: str, params, q: np.ndarray) -> np.ndarray:
    """Exact signed distance in canonical coordinates (negative inside)."""
    q = np.asarray(q, dtype=np.float64)
    x, y, z = q[:, 0], q[:, 1], q[:, 2]
    if family == "sphere":
        return np.linalg.norm(q, axis=1) - params[0]
    if family == "ellipsoid":
        return ellipsoid_signed_distance(np.asarray(params, dtype=np.float64), q)
    if family == "torus":
        big, small = params
        return np.hypot(np.hypot(x, y) - big, z) - small
    if family == "capsule":
        h, r = params
        zc = np.clip(z, -h, h)
        return np.sqrt(x * x + y * y + (z - zc) ** 2) - r
    if family == "rounded_box":
        b, r = np.asarray(params[:3]), params[3]
        d = np.abs(q) - b
        outside = np.linalg.norm(np.maximum(d, 0.0), axis=1)
        inside = np.minimum(d.max(axis=1), 0.0)
        return outside + inside - r
    if family == "capped_cylinder":
        r, h = params
        dx, dz = np.hypot(x, y) - r, np.abs(z) - h
        return np.minimum(np.maximum(dx, dz), 0.0) + np.hypot(np.maximum(dx, 0.0), np.maximum(dz, 0.0))
    raise ValueError(f"unknown family {family!r}")


def _implicit(family: str, params, q: np.ndarray) -> np.ndarray:
    """A function with the surface as zero set (only used for the marching-cubes triangulation)."""
    if family == "ellipsoid":
        a = np.asarray(params, dtype=np.float64)
        return (np.linalg.norm(q / a, axis=1) - 1.0) * a.min()
    return canonical_sdf(family, params, q)


def ellipsoid_closest_point(a: np.ndarray, q: np.ndarray, iters: int = 200) -> np.ndarray:
    """Closest point on the ellipsoid sum (x_i / a_i)^2 = 1 to each row of q (Eberly's method).

    The closest point is x_i = a_i^2 q_i / (t + a_i^2) where t is the root of
    F(t) = sum_i (a_i q_i / (t + a_i^2))^2 - 1 on t > -min a_i^2 (F decreasing there): bisection brackets the
    root, Newton steps polish it. Works on |q| (octant symmetry) and restores the signs."""
    a = np.asarray(a, dtype=np.float64)
    sign = np.where(q < 0, -1.0, 1.0)
    p = np.abs(np.asarray(q, dtype=np.float64))
    a2 = a * a
    lo = np.full(len(p), -a2.min()) + 1e-15 * a2.min()
    hi = np.maximum(np.linalg.norm(p * a, axis=1), 1e-300)  # F(hi) <= 0: t + a_i^2 >= a_i |q| a_i / ... bound
    hi = np.maximum(hi, np.linalg.norm(p, axis=1) * a.max())

    def F(t):
        return (((a * p) / (t[:, None] + a2)) ** 2).sum(1) - 1.0

    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        f = F(mid)
        pos = f > 0
        lo = np.where(pos, mid, lo)
        hi = np.where(pos, hi, mid)
        if np.all(hi - lo <= 1e-15 * np.maximum(1.0, np.abs(hi))):
            break
    t = 0.5 * (lo + hi)
    for _ in range(3):  # Newton polish (F' = -2 sum (a q)^2 / (t + a^2)^3)
        den = t[:, None] + a2
        f = ((a * p / den) ** 2).sum(1) - 1.0
        fp = -2.0 * ((a * p) ** 2 / den ** 3).sum(1)
        step = np.where(np.abs(fp) > 0, f / np.where(fp == 0, 1.0, fp), 0.0)
        t_new = t - step
        t = np.where((t_new > -a2.min()) & np.isfinite(t_new), t_new, t)
    x = a2 * p / (t[:, None] + a2)
    return sign * x


def ellipsoid_signed_distance(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    x = ellipsoid_closest_point(a, q)
    d = np.linalg.norm(np.asarray(q) - x, axis=1)
    inside = (np.asarray(q) / a) ** 2
    return np.where(inside.sum(1) < 1.0, -d, d)


def canonical_closest_point(family: str, params, q: np.ndarray) -> np.ndarray:
    if family == "ellipsoid":
        return ellipsoid_closest_point(np.asarray(params, dtype=np.float64), q)
    x = np.asarray(q, dtype=np.float64).copy()
    eps = 1e-6
    for _ in range(4):  # x <- x - d(x) grad d(x): exact for a true SDF where the gradient is defined
        d = canonical_sdf(family, params, x)
        g = np.stack([(canonical_sdf(family, params, x + eps * e) - canonical_sdf(family, params, x - eps * e)) / (2 * eps)
                      for e in np.eye(3)], 1)
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
        x = x - d[:, None] * g
        if np.abs(d).max() < 1e-13:
            break
    return x


# ------------------------------------------------------------------ world-space API
def distance(shape: Shape, p: np.ndarray) -> np.ndarray:
    """Exact unsigned distance of each world point to the shape's surface."""
    return shape.s * np.abs(canonical_sdf(shape.family, shape.params, shape.to_canonical(p)))


def closest_point(shape: Shape, p: np.ndarray) -> np.ndarray:
    return shape.to_world(canonical_closest_point(shape.family, shape.params, shape.to_canonical(p)))


@lru_cache(maxsize=256)
def _triangulation(family: str, params: tuple, res: int):
    from skimage.measure import marching_cubes

    b = 1.08 * bounding_radius(family, params)
    g = np.linspace(-b, b, res)
    X, Y, Z = np.meshgrid(g, g, g, indexing="ij")
    vol = _implicit(family, params, np.stack([X.ravel(), Y.ravel(), Z.ravel()], 1)).reshape(res, res, res)
    verts, faces, _, _ = marching_cubes(vol, 0.0, spacing=(g[1] - g[0],) * 3)
    verts = verts - b
    tri = verts[faces]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    return tri, area / area.sum()


def sample_surface(shape: Shape, n: int, rng: np.random.Generator, res: int = 72) -> np.ndarray:
    """n points area-uniform on the exact surface (world coordinates)."""
    tri, prob = _triangulation(shape.family, tuple(float(v) for v in shape.params), res)
    idx = rng.choice(len(tri), size=n, p=prob)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    t = tri[idx]
    q = t[:, 0] + u[:, None] * (t[:, 1] - t[:, 0]) + v[:, None] * (t[:, 2] - t[:, 0])
    q = canonical_closest_point(shape.family, shape.params, q)
    return shape.to_world(q)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    qv = rng.normal(size=4)
    w, x, y, z = qv / np.linalg.norm(qv)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


# Parameter ranges (canonical). Test shapes draw from held-out intervals disjoint from the training ones.
_RANGES = {
    # family: (train sampler, test sampler)
    "sphere": (lambda r: (1.0,), lambda r: (1.0,)),
    "ellipsoid": (lambda r: (1.0, r.uniform(0.35, 0.7), r.uniform(0.35, 0.7)),
                  lambda r: (1.0, r.uniform(0.75, 0.95), r.uniform(0.25, 0.32))),
    "torus": (lambda r: (1.0, r.uniform(0.2, 0.35)), lambda r: (1.0, r.uniform(0.4, 0.5))),
    "capsule": (lambda r: (r.uniform(0.3, 1.0), 0.5), lambda r: (r.uniform(1.2, 1.6), 0.5)),
    "rounded_box": (lambda r: (1.0, r.uniform(0.4, 0.8), r.uniform(0.4, 0.8), r.uniform(0.05, 0.2)),
                    lambda r: (1.0, r.uniform(0.85, 1.0), r.uniform(0.2, 0.35), r.uniform(0.25, 0.3))),
    "capped_cylinder": (lambda r: (1.0, r.uniform(0.5, 1.2)), lambda r: (1.0, r.uniform(0.5, 1.2))),
}


def make_shape(family: str, split: str, rng: np.random.Generator, name: str = "") -> Shape:
    params = _RANGES[family][0 if split in ("train", "val") else 1](rng)
    rot = random_rotation(rng)
    return Shape(family, tuple(float(v) for v in params), tuple(tuple(float(v) for v in row) for row in rot),
                 name or family)


def shape_sets(data_seed: int = 0, n_train_per_family: int = 4) -> dict[str, list[Shape]]:
    """train: n per training family (random parameters); val: 2 per training family (Tune only);
    test: 2 each of ellipsoid, torus, capsule, rounded box with held-out parameters + 2 capped cylinders."""
    rng = np.random.default_rng([data_seed, 7001])
    train = [make_shape(f, "train", rng, f"{f}-{i}") for f in TRAIN_FAMILIES for i in range(n_train_per_family)]
    val = [make_shape(f, "val", rng, f"{f}-val{i}") for f in TRAIN_FAMILIES for i in range(2)]
    test = [make_shape(f, "test", rng, f"{f}-test{i}") for f in ("ellipsoid", "torus", "capsule", "rounded_box",
                                                                  HELD_OUT_FAMILY) for i in range(2)]
    return {"train": train, "val": val, "test": test}


def noisy_observations(shape: Shape, n_points: int, k: int, noise: float, rng: np.random.Generator
                       ) -> tuple[np.ndarray, np.ndarray]:
    """K independent scans: each a fresh area-uniform sample of n points plus isotropic Gaussian noise of std
    `noise` (fraction of the unit bounding-sphere radius). Returns (noisy [K,n,3], clean [K,n,3])."""
    clean = np.stack([sample_surface(shape, n_points, rng) for _ in range(k)])
    return clean + noise * rng.normal(size=clean.shape), clean


def icosphere_check(n: int = 256, subdivisions: int = 6, seed: int = 0) -> float:
    """max |analytic sphere distance - trimesh point-to-mesh distance| for n points near the unit sphere."""
    import trimesh

    rng = np.random.default_rng(seed)
    p = rng.normal(size=(n, 3))
    p = p / np.linalg.norm(p, axis=1, keepdims=True) * (1.0 + 0.03 * rng.normal(size=(n, 1)))
    mesh = trimesh.creation.icosphere(subdivisions=subdivisions, radius=1.0)
    _, dist, _ = trimesh.proximity.closest_point(mesh, p)
    sph = Shape("sphere", (1.0,), scale=1.0)
    return float(np.abs(distance(sph, p) - dist).max())
