"""Offline multimodal "binding" data for cmcl (spec methods/cmcl.md, Data):

* `latent_binding`: the synthetic latent-factor generator. Every modality sees the same latent
  z = u_k + 0.3 eps through its own fixed rotation R_m = expm(alpha S_m) of a shared r-dim subspace,
  plus noise; identity heads therefore start partially aligned, and a shared modality pulled toward a new
  partner forgets its old one.
* `digits_views`: sklearn's bundled 8x8 digits as several views (pixels, row/column profiles, a noisy 2x
  downsampled image, a tie-free class "text"), each through a fixed random linear encoder to D, L2-normalised.

Both return plain numpy arrays; nothing here touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYNTH_MODALITIES = ("vision", "text", "audio", "depth", "thermal")
SYNTH_STEPS = (("vision", "text"), ("audio", "text"), ("depth", "vision"), ("audio", "vision"),
               ("thermal", "vision"), ("depth", "text"))
DIGITS_STEPS = (("pixels", "text"), ("profiles", "text"), ("lowres", "pixels"))


@dataclass
class PairSet:
    """Aligned pairs of two modalities for one continual step (rows i of xa and xb are one pair)."""

    name: str
    mod_a: str
    mod_b: str
    xa_train: np.ndarray
    xb_train: np.ndarray
    xa_test: np.ndarray
    xb_test: np.ndarray
    y_train: np.ndarray | None = None
    y_test: np.ndarray | None = None
    class_bank: np.ndarray | None = None  # [K, D] class-name "text" features (before the text head)
    class_names: list[str] | None = None


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def rotation(rng: np.random.Generator, d: int, alpha: float) -> np.ndarray:
    """R = expm(alpha S), S skew-symmetric with N(0, 1/D) entries (spec: N(0, 1) entries leave nothing to learn)."""
    from scipy.linalg import expm

    g = rng.standard_normal((d, d))
    return expm(alpha * (g - g.T) / np.sqrt(2 * d))


def latent_binding(seed: int, *, dim: int = 64, latent: int = 16, n_classes: int = 20, classes_per_step: int = 10,
                   n_train: int = 2000, n_test: int = 500, alpha: float = 0.5, noise: float = 0.05,
                   z_noise: float = 0.3, steps=SYNTH_STEPS) -> list[PairSet]:
    if latent > dim:
        raise ValueError(f"latent ({latent}) must be <= dim ({dim})")
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((dim, latent)))[0]  # shared orthonormal B in R^{D x r}
    means = rng.standard_normal((n_classes, latent))
    mods = sorted({m for pair in steps for m in pair} | {"text"}, key=lambda m: (m not in SYNTH_MODALITIES, m))
    rot = {m: rotation(rng, dim, alpha) for m in mods}
    bank = _normalise(means @ basis.T @ rot["text"].T)  # class-name anchors normalise(R_text B u_k)
    names = [f"class_{k}" for k in range(n_classes)]
    out = []
    for s, (a, b) in enumerate(steps):
        classes = np.sort(rng.choice(n_classes, size=min(classes_per_step, n_classes), replace=False))

        def split(n):
            y = classes[rng.integers(0, len(classes), size=n)]
            z = means[y] + z_noise * rng.standard_normal((n, latent))
            lat = z @ basis.T
            view = lambda m: _normalise(lat @ rot[m].T + noise * rng.standard_normal((n, dim)))  # noqa: E731
            return view(a), view(b), y

        xa_tr, xb_tr, y_tr = split(n_train)
        xa_te, xb_te, y_te = split(n_test)
        out.append(PairSet(f"synthetic{s + 1}", a, b, xa_tr, xb_tr, xa_te, xb_te, y_tr, y_te, bank, names))
    return out


def _views(images: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    img = images.reshape(-1, 8, 8) / 16.0
    low = img.reshape(-1, 4, 2, 4, 2).mean((2, 4)).reshape(-1, 16)
    return {"pixels": img.reshape(-1, 64), "profiles": np.concatenate([img.sum(2), img.sum(1)], 1) / 8.0,
            "lowres": low + 0.05 * rng.standard_normal(low.shape)}


def digits_views(seed: int, *, dim: int = 64, n_test: int = 400, steps=DIGITS_STEPS) -> list[PairSet]:
    """All steps share one train/test split of the 1,797 images; each step pairs two views of the same image."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(d.target))
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    views = _views(d.data, rng)
    t_class = rng.standard_normal((10, 64)) / 8.0  # t_k ~ N(0, I/64), shared by all splits
    views["text"] = t_class[d.target] + 0.3 * rng.standard_normal((len(d.target), 64)) / 8.0  # tie-free per sample
    enc = {m: rng.standard_normal((v.shape[1], dim)) / np.sqrt(v.shape[1]) for m, v in sorted(views.items())}
    feats = {m: _normalise(v @ enc[m]) for m, v in views.items()}
    bank = _normalise(t_class @ enc["text"])
    names = [str(k) for k in range(10)]
    out = []
    for s, (a, b) in enumerate(steps):
        for m in (a, b):
            if m not in feats:
                raise ValueError(f"digits has no modality {m!r}; available: {sorted(feats)}")
        out.append(PairSet(f"digits{s + 1}", a, b, feats[a][train_idx], feats[b][train_idx], feats[a][test_idx],
                           feats[b][test_idx], d.target[train_idx], d.target[test_idx], bank, names))
    return out
