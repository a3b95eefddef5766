"""Procedural articulated part-based object classes with exact keypoints, on real textures from scikit-image
(weakshot_keypoint spec, Data). Each class is a template: an elliptic body plus limbs of one or two segments
(rectangles, triangles, ellipses); its keypoints are limb tips, elbows and body ends (K_c = 6..12, fixed per
class). An instance articulates the template (attachment angles, limb angles, lengths), applies a random
similarity and a mild smooth warp, and is painted with textures cropped from `skimage.data` images over a
background crop. Keypoints are transformed exactly (forward map); the image is rendered by inverting the map
(fixed-point iteration of the warp). Occluded or off-image keypoints get v = 0.

Coordinates are input pixels with pixel (i, j) centred at (j + 0.5, i + 0.5). The set is rendered once per
(parameters, data_seed) and cached as .npz under METHODLAB_DATA_DIR (default ~/.cache/methodlab/data)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

K_MAX = 12
GRAY_TEXTURES = ("brick", "grass", "gravel")
COLOR_IMAGES = ("coffee", "chelsea")


@lru_cache(maxsize=1)
def _sources() -> tuple[list[np.ndarray], list[np.ndarray]]:
    try:
        import skimage.data as sd
    except ImportError as e:  # pragma: no cover
        from methodlab.core.errors import MissingSourceError

        raise MissingSourceError("weakshot_keypoint synthetic data needs scikit-image (pip install scikit-image)") from e
    tex = [getattr(sd, n)().astype(np.float32) / 255.0 for n in GRAY_TEXTURES]
    col = [getattr(sd, n)().astype(np.float32) / 255.0 for n in COLOR_IMAGES]
    return tex, col


@dataclass
class Template:
    body_a: float
    body_b: float
    limbs: list  # dicts: alpha, delta, segs [(length, width, shape)], beta, colour
    body_kps: int  # 0, 1 or 2 body-end keypoints
    body_colour: np.ndarray
    texture: int

    @property
    def n_keypoints(self) -> int:
        return sum(len(l["segs"]) for l in self.limbs) + self.body_kps

    @property
    def n_parts(self) -> int:
        return 1 + sum(len(l["segs"]) for l in self.limbs)


def make_template(class_id: int, data_seed: int = 0) -> Template:
    """Class template; K_c = tips + elbows + body ends, forced into 6..12 and parts into 5..10."""
    rng = np.random.default_rng([data_seed, 7919, class_id])
    while True:
        n_limbs = int(rng.integers(3, 7))
        limbs = []
        base_angles = np.sort(rng.uniform(0, 2 * np.pi, n_limbs))
        for a in base_angles:
            nseg = 2 if rng.random() < 0.45 else 1
            segs = [(float(rng.uniform(0.13, 0.24)), float(rng.uniform(0.045, 0.085)), int(rng.integers(3)))
                    for _ in range(nseg)]
            limbs.append({"alpha": float(a), "delta": float(rng.uniform(-0.5, 0.5)), "segs": segs,
                          "beta": float(rng.uniform(-0.9, 0.9)), "colour": rng.uniform(0.15, 1.0, 3)})
        body_kps = int(rng.integers(0, 3))
        t = Template(float(rng.uniform(0.14, 0.22)), float(rng.uniform(0.08, 0.13)), limbs, body_kps,
                     rng.uniform(0.15, 1.0, 3), int(rng.integers(len(GRAY_TEXTURES))))
        if 6 <= t.n_keypoints <= K_MAX and 5 <= t.n_parts <= 10:
            return t


def _instance_geometry(t: Template, rng) -> tuple[list, np.ndarray, list]:
    """Articulated parts in canonical object coordinates: list of (origin, direction angle, length, width, shape,
    colour); keypoints (K, 2) canonical; per keypoint the part ids it may lie on (for visibility)."""
    a = t.body_a * rng.uniform(0.9, 1.1)
    b = t.body_b * rng.uniform(0.9, 1.1)
    parts = [("body", np.zeros(2), 0.0, a, b, t.body_colour)]
    kps, owners = [], []
    for limb in t.limbs:
        alpha = limb["alpha"] + rng.normal(0, 0.12)
        origin = np.array([a * np.cos(alpha), b * np.sin(alpha)]) * 0.85
        ang = alpha + limb["delta"] + rng.normal(0, 0.35)
        for s, (length, width, shape) in enumerate(limb["segs"]):
            L = length * rng.uniform(0.85, 1.15)
            pid = len(parts)
            parts.append((shape, origin.copy(), ang, L, width, limb["colour"] * (0.8 if s else 1.0)))
            d = np.array([np.cos(ang), np.sin(ang)])
            end = origin + L * d
            if s + 1 < len(limb["segs"]):  # elbow: joint between this segment and the next
                kps.append(end.copy())
                owners.append((pid, pid + 1))
                origin = end
                ang = ang + limb["beta"] + rng.normal(0, 0.4)
            else:  # tip, slightly inside the segment
                kps.append(origin + 0.9 * L * d)
                owners.append((pid,))
    for e in range(t.body_kps):
        kps.append(np.array([(0.8 if e == 0 else -0.8) * a, 0.0]))
        owners.append((0,))
    return parts, np.array(kps), owners


def _inside(part, p: np.ndarray) -> np.ndarray:
    kind = part[0]
    if kind == "body":
        _, c, _, a, b, _ = part
        return ((p[..., 0] - c[0]) / a) ** 2 + ((p[..., 1] - c[1]) / b) ** 2 <= 1.0
    shape, origin, ang, L, w, _ = part
    d = np.array([np.cos(ang), np.sin(ang)])
    n = np.array([-d[1], d[0]])
    rel = p - origin
    u, v = rel @ d, rel @ n
    if shape == 0:  # rectangle
        return (u >= 0) & (u <= L) & (np.abs(v) <= w / 2)
    if shape == 1:  # triangle, tapering to the tip
        return (u >= 0) & (u <= L) & (np.abs(v) <= (w / 2 + 0.01) * (1 - u / L) + 0.006)
    return ((u - L / 2) / (L / 2)) ** 2 + (v / (w / 2)) ** 2 <= 1.0  # ellipse


def _warp_params(rng):
    return {"amp": rng.uniform(0.005, 0.02, 2), "freq": rng.uniform(3, 6, (2, 2)), "phase": rng.uniform(0, 2 * np.pi, 2)}


def _warp(p, w):
    return np.stack([w["amp"][i] * np.sin(p @ w["freq"][i] + w["phase"][i]) for i in range(2)], -1)


def render_instance(t: Template, size: int, rng) -> dict:
    """One 'size x size' RGB instance: image uint8, keypoints (K, 2) pixels, vis (K,), bbox [x, y, w, h]."""
    tex, col = _sources()
    parts, kps_c, owners = _instance_geometry(t, rng)
    scale = rng.uniform(0.85, 1.1)
    rot = rng.uniform(-np.pi / 5, np.pi / 5)
    trans = rng.uniform(-0.08, 0.08, 2)
    R = np.array([[np.cos(rot), -np.sin(rot)], [np.sin(rot), np.cos(rot)]])
    warp = _warp_params(rng)

    def forward(p):  # canonical -> pixels
        q = p + _warp(p, warp)
        return size * (0.5 + trans + scale * q @ R.T)

    ys, xs = np.mgrid[0:size, 0:size]
    pix = np.stack([xs + 0.5, ys + 0.5], -1).astype(np.float64)
    w_pt = ((pix / size - 0.5 - trans) / scale) @ R  # inverse similarity (R orthogonal)
    p = w_pt.copy()
    for _ in range(6):  # invert p + d(p) = w by fixed-point iteration (|dd/dp| < 1 for these amplitudes)
        p = w_pt - _warp(p, warp)
    # background: crop of a colour image, random offset and scale
    bg_src = col[int(rng.integers(len(col)))]
    step = int(rng.integers(1, 4))
    h0 = int(rng.integers(0, bg_src.shape[0] - size * step))
    w0 = int(rng.integers(0, bg_src.shape[1] - size * step))
    img = bg_src[h0:h0 + size * step:step, w0:w0 + size * step:step].copy() * rng.uniform(0.6, 1.0)
    pid = np.full((size, size), -1, int)
    t_src = tex[t.texture]
    to = rng.integers(0, t_src.shape[0] - size, 2)
    texture = t_src[to[0]:to[0] + size, to[1]:to[1] + size]
    order = list(range(1, len(parts))) + [0]  # limbs first, body on top
    for k in order:
        m = _inside(parts[k], p)
        colour = parts[k][5]
        img[m] = (0.45 + 0.55 * texture[m])[:, None] * colour[None, :]
        pid[m] = k
    obj = pid >= 0
    yy, xx = np.nonzero(obj)
    bbox = [float(xx.min()), float(yy.min()), float(xx.max() - xx.min() + 1), float(yy.max() - yy.min() + 1)] \
        if len(xx) else [0.0, 0.0, float(size), float(size)]
    if rng.random() < 0.25:  # occluder: a background-textured rectangle
        oh, ow = (rng.uniform(0.15, 0.25, 2) * size).astype(int)
        oy, ox = int(rng.integers(0, size - oh)), int(rng.integers(0, size - ow))
        other = tex[(t.texture + 1) % len(tex)]
        img[oy:oy + oh, ox:ox + ow] = other[oy:oy + oh, ox:ox + ow, None] * rng.uniform(0.3, 1.0, 3)
        pid[oy:oy + oh, ox:ox + ow] = -2
    img += rng.normal(0, 0.02, img.shape)
    kps = forward(kps_c)
    vis = np.zeros(len(kps), np.int64)
    for j, (x, y) in enumerate(kps):
        xi, yi = int(np.floor(x)), int(np.floor(y))
        if 0 <= xi < size and 0 <= yi < size and pid[yi, xi] in owners[j]:
            vis[j] = 2
    return {"image": (np.clip(img, 0, 1) * 255).astype(np.uint8), "keypoints": kps.astype(np.float32),
            "vis": vis, "bbox": np.array(bbox, np.float32)}


def check_keypoint_counts(cls: np.ndarray, kcount: np.ndarray, k_of_class: dict) -> None:
    """The per-class keypoint-count check: every instance of class c has exactly K_c keypoints."""
    for i, (c, k) in enumerate(zip(cls.tolist(), kcount.tolist())):
        if k != k_of_class[int(c)]:
            raise ValueError(f"instance {i} of class {c} has {k} keypoints, class has K_c = {k_of_class[int(c)]}")


def _cache_dir() -> Path:
    from methodlab.data.cache import data_dir

    return data_dir("weakshot_keypoint")


def generate(*, n_base: int = 12, n_novel: int = 4, base_images: int = 200, novel_unlabeled: int = 300,
             novel_val: int = 50, novel_test: int = 100, size: int = 64, data_seed: int = 0,
             cache: bool = True) -> dict:
    """The whole set as arrays. Splits: 'base' (labelled), 'novel_train' (labels hidden from training),
    'novel_val', 'novel_test', 'novel_support' (one labelled support per novel class, all keypoints visible
    when any candidate has them). Returns dict of numpy arrays plus 'k_of_class' and 'base_classes' /
    'novel_classes'."""
    params = dict(n_base=n_base, n_novel=n_novel, base_images=base_images, novel_unlabeled=novel_unlabeled,
                  novel_val=novel_val, novel_test=novel_test, size=size, data_seed=data_seed, v=3)
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    path = _cache_dir() / f"synth-{key}.npz"
    if cache and path.exists():
        try:
            z = np.load(path, allow_pickle=False)
            out = {k: z[k] for k in z.files}
            out["k_of_class"] = {int(c): int(k) for c, k in out.pop("k_table")}
            return out
        except (OSError, ValueError, KeyError):
            pass
    n_cls = n_base + n_novel
    templates = [make_template(c, data_seed) for c in range(n_cls)]
    k_of_class = {c: templates[c].n_keypoints for c in range(n_cls)}
    rng = np.random.default_rng([data_seed, 1])
    rows = {"image": [], "keypoints": [], "vis": [], "bbox": [], "cls": [], "split": [], "kcount": []}
    splits = {"base": 0, "novel_train": 1, "novel_val": 2, "novel_test": 3, "novel_support": 4}

    def add(c, split, inst):
        k = len(inst["keypoints"])
        kp = np.zeros((K_MAX, 2), np.float32)
        vv = np.zeros(K_MAX, np.int64)
        kp[:k], vv[:k] = inst["keypoints"], inst["vis"]
        for name, val in (("image", inst["image"]), ("keypoints", kp), ("vis", vv), ("bbox", inst["bbox"]),
                          ("cls", c), ("split", splits[split]), ("kcount", k)):
            rows[name].append(val)

    for c in range(n_base):
        for _ in range(base_images):
            add(c, "base", render_instance(templates[c], size, rng))
    for c in range(n_base, n_cls):
        for split, n in (("novel_train", novel_unlabeled), ("novel_val", novel_val), ("novel_test", novel_test)):
            for _ in range(n):
                add(c, split, render_instance(templates[c], size, rng))
        cands = [render_instance(templates[c], size, rng) for _ in range(8)]
        add(c, "novel_support", max(cands, key=lambda d: int((d["vis"] > 0).sum())))
    out = {k: np.stack(v) if k in ("image", "keypoints", "vis", "bbox") else np.array(v) for k, v in rows.items()}
    check_keypoint_counts(out["cls"], out["kcount"], k_of_class)
    out["base_classes"] = np.arange(n_base)
    out["novel_classes"] = np.arange(n_base, n_cls)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
        np.savez_compressed(tmp, **out, k_table=np.array(sorted(k_of_class.items())))
        os.replace(tmp, path)
    out["k_of_class"] = k_of_class
    return out


SPLIT_IDS = {"base": 0, "novel_train": 1, "novel_val": 2, "novel_test": 3, "novel_support": 4}
