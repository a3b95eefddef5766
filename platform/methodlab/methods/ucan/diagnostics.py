"""Side studies of ucan's reproduction (harness tasks of `reproduce.study()`; nothing here is a claim).

emd_floor: why the Noise2Noise signal is weak at 2K points. EMD between 512-point patches (the same ball) of two
scans of the even-numbered training shapes, for a perfect denoiser (clean a vs noisy b) against the identity
(noisy a vs noisy b), with the sampling floor (clean a vs clean b, independent surface samples) and pure noise
(clean a vs the same samples + noise) beside them."""

from __future__ import annotations

import numpy as np

FLOOR_ROWS = ("clean a vs clean b (independent samplings)", "noisy a vs noisy b (identity denoiser)",
              "clean a vs noisy b (perfect denoiser)", "clean a vs noisy a (same samples + noise)")


def emd_floor(n_points: int = 2000, noise: float = 0.02, patch: int = 512, rng_seed: int = 123) -> dict[str, float]:
    """Mean exact EMD (unit radius) per pair kind over the even-numbered training shapes (data seed 0)."""
    import torch

    from methodlab.data import ucan_shapes as U
    from methodlab.methods.ucan.model import emd

    rng = np.random.default_rng(rng_seed)
    rows: dict[str, list[float]] = {k: [] for k in FLOOR_ROWS}
    for sh in U.shape_sets(0, 4)["train"][::2]:
        ca, cb = U.sample_surface(sh, n_points, rng), U.sample_surface(sh, n_points, rng)
        na, nb = ca + noise * rng.normal(size=ca.shape), cb + noise * rng.normal(size=cb.shape)
        seed = na[rng.integers(n_points)]

        def crop(p):
            return torch.as_tensor(p[np.argsort(np.linalg.norm(p - seed, axis=1))[:patch]])
        x = crop(ca)
        rows[FLOOR_ROWS[0]].append(float(emd(x, crop(cb))))
        rows[FLOOR_ROWS[1]].append(float(emd(crop(na), crop(nb))))
        rows[FLOOR_ROWS[2]].append(float(emd(x, crop(nb))))
        rows[FLOOR_ROWS[3]].append(float(emd(x, x + noise * torch.as_tensor(rng.normal(size=(patch, 3))))))
    return {k: float(np.mean(v)) for k, v in rows.items()}
