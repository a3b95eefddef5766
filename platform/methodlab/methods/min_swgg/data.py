"""Point clouds for the three applications, all generated offline (scikit-learn, numpy) or read from the
real on-disk formats (.npy/.npz point clouds). No network.

Devices: fixed clouds (plans, flows, the Poincare wrapped normals, the digits pool, held-out sets) are drawn
on the host, the same numbers on every device, and handed to the run's device once. The CFM samplers draw
each super-batch on the device of their generator (sklearn's moons come from the host)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from methodlab.core import MissingSourceError


# ------------------------------------------------------------------------------------------- plans
def random_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))  # Haar-distributed


def standardise(a: np.ndarray) -> np.ndarray:
    return (a - a.mean(0, keepdims=True)) / a.std(0, keepdims=True)


def moons_embedded(n: int, d: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Source N(0, I2) vs standardised two moons, both padded with N(0, noise^2) in the other d-2 dims
    and rotated by one random rotation of R^d (the plan-quality acceptance data)."""
    from sklearn.datasets import make_moons

    rng = np.random.default_rng(seed)
    src = rng.standard_normal((n, 2))
    tgt = standardise(make_moons(n_samples=n, random_state=int(rng.integers(2**31)))[0])
    if d == 2:
        return src, tgt
    pad = lambda: noise * rng.standard_normal((n, d - 2))  # noqa: E731
    Q = random_rotation(d, rng)
    return np.hstack([src, pad()]) @ Q.T, np.hstack([tgt, pad()]) @ Q.T


def gaussians(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d)) / np.sqrt(d)
    return rng.standard_normal((n, d)), rng.standard_normal((n, d)) @ A.T + rng.standard_normal(d)


def load_pair(path: str) -> tuple[np.ndarray, np.ndarray]:
    """A real point-cloud pair: .npz with `source` [n,d], `target` [n,d] (optional uniform `a`, `b`)."""
    p = Path(path)
    if not p.is_file():
        raise MissingSourceError(f"plan_file {path!r} not found (an .npz with arrays source [n,d] and target [n,d])")
    with np.load(p, allow_pickle=False) as z:
        if "source" not in z or "target" not in z:
            raise ValueError(f"{path}: needs arrays 'source' and 'target'")
        src, tgt = np.asarray(z["source"], float), np.asarray(z["target"], float)
        for w in ("a", "b"):
            if w in z and not np.allclose(z[w], np.full(len(z[w]), 1 / len(z[w]))):
                raise ValueError(f"{path}: weights {w!r} must be uniform (sorting plans need equal masses)")
    if src.ndim != 2 or src.shape != tgt.shape:
        raise ValueError(f"{path}: source {src.shape} and target {tgt.shape} must both be [n, d] with equal n and d")
    return src, tgt


def plan_clouds(cfg, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    if cfg.plan_data == "file":
        s, t = load_pair(cfg.plan_file)
    elif cfg.plan_data == "moons100":
        s, t = moons_embedded(cfg.plan_n, cfg.plan_d, cfg.plan_noise, cfg.seed)
    else:
        s, t = gaussians(cfg.plan_n, cfg.plan_d, cfg.seed)
    return torch.tensor(s, dtype=torch.float32, device=device), torch.tensor(t, dtype=torch.float32, device=device)


# ------------------------------------------------------------------------------ Euclidean flows
def flow_clouds(name: str, n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The official `data_gen`: target shape (standardised 2-D shapes, or N(mu, SPD) in d dims),
    source uniform 2.5 (U - 0.5) + 1."""
    from sklearn.datasets import make_circles, make_moons, make_spd_matrix, make_swiss_roll
    from sklearn.utils import check_random_state

    rng = check_random_state(seed)
    if name == "gaussian":
        mu = rng.randn(d)
        cov = make_spd_matrix(d, random_state=rng)
        target = rng.multivariate_normal(mu, cov, n)
    elif name == "swiss_roll":
        target = standardise(make_swiss_roll(n_samples=n, random_state=rng)[0][:, (0, 2)])
    elif name == "two_moons":
        target = standardise(make_moons(n_samples=n, random_state=rng)[0])
    else:
        circles, lab = make_circles(n_samples=2 * n, factor=0.5, noise=0.075, random_state=rng)
        target = standardise(circles[lab == 0])
    source = 2.5 * (rng.rand(n, d) - 0.5) + 1.0
    return source, target


# ------------------------------------------------------------------------ hyperbolic (Lorentz / ball)
def minkowski_ip(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return -a[..., 0] * b[..., 0] + (a[..., 1:] * b[..., 1:]).sum(-1)


def lorentz_to_poincare(x: torch.Tensor) -> torch.Tensor:
    return x[..., 1:] / (1 + x[..., :1])


def poincare_to_lorentz(x: torch.Tensor) -> torch.Tensor:
    sq = x.pow(2).sum(-1, keepdim=True)
    return torch.cat([1 + sq, 2 * x], -1) / (1 - sq).clamp_min(1e-15)


def wrapped_normal(mu: torch.Tensor, sigma: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Wrapped normal on the hyperboloid: v ~ N(0, Sigma) in the tangent space at the origin, parallel
    transport to mu, exponential map. Returns Lorentz coordinates [n, d+1] (float64), on mu's device."""
    d, dev = sigma.shape[0], mu.device
    L = torch.linalg.cholesky(sigma.double())
    v = torch.randn(n, d, dtype=torch.float64, generator=generator, device=dev) @ L.T
    o = torch.zeros(d + 1, dtype=torch.float64, device=dev)
    o[0] = 1.0
    u = torch.cat([torch.zeros(n, 1, dtype=torch.float64, device=dev), v], -1)  # tangent at o
    alpha = -minkowski_ip(o, mu)
    u = u + (minkowski_ip(mu - alpha * o, u) / (alpha + 1))[:, None] * (o + mu)  # parallel transport o -> mu
    norm = minkowski_ip(u, u).clamp_min(1e-15).sqrt()[:, None]
    return torch.cosh(norm) * mu + torch.sinh(norm) * u / norm


def hyperbolic_clouds(target: str, n: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Source: wrapped normal at the origin (Sigma = I); target: at (1.5, sqrt(1.25), 0) (center) or
    (8, sqrt(63), 0) (border), Sigma = 0.1 I. Both returned on the Poincare ball, float64, drawn on the host
    (the same clouds on every device) and then moved to `device`."""
    gen = torch.Generator().manual_seed(seed)
    host = dict(dtype=torch.float64, device="cpu")
    mu = torch.tensor([1.5, np.sqrt(1.25), 0.0] if target == "center" else [8.0, np.sqrt(63.0), 0.0], **host)
    eye = torch.eye(2, device="cpu")  # float32, as the recipe has always drawn it (0.1 I rounded to float32)
    y = wrapped_normal(mu, 0.1 * eye, n, gen)
    o = torch.tensor([1.0, 0.0, 0.0], **host)
    x = wrapped_normal(o, eye, n, gen)
    return lorentz_to_poincare(x).to(device), lorentz_to_poincare(y).to(device)


# ------------------------------------------------------------------------------------------- CFM
def eight_gaussians(n: int, generator: torch.Generator, scale: float = 5.0, var: float = 0.1) -> torch.Tensor:
    """torchcfm's sample_8gaussians: centres on the circle of radius 5, covariance sqrt(var) I (drawn on the
    generator's device)."""
    dev = generator.device
    ang = torch.arange(8, dtype=torch.float32, device=dev) * (2 * np.pi / 8)
    centres = scale * torch.stack([torch.cos(ang), torch.sin(ang)], -1)
    idx = torch.randint(0, 8, (n,), generator=generator, device=dev)
    return centres[idx] + var ** 0.25 * torch.randn(n, 2, generator=generator, device=dev)


def moons(n: int, generator: torch.Generator, device=None) -> torch.Tensor:
    """Offline equivalent of torchcfm's sample_moons: make_moons(noise=0.2) * 3 - 1 (not standardised).
    sklearn draws on the host (its seed comes from `generator`); the points go to `device` (None: the
    generator's)."""
    from sklearn.datasets import make_moons

    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
    return torch.tensor(make_moons(n_samples=n, noise=0.2, random_state=seed)[0] * 3 - 1, dtype=torch.float32,
                        device=generator.device if device is None else device)


def digits_pool(seed: int, held_out: int = 297) -> tuple[torch.Tensor, torch.Tensor]:
    """sklearn's 1,797 real 8x8 digits as 64-d vectors in [-1, 1]; a seeded held-out split for W2."""
    from sklearn.datasets import load_digits

    x = torch.tensor(load_digits().data / 8.0 - 1.0, dtype=torch.float32, device="cpu")
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed), device="cpu")
    return x[perm[held_out:]], x[perm[:held_out]]


class CFMData:
    """Samplers x0 ~ source, x1 ~ target for the CFM task, plus a held-out target set, on `device`: the pool
    and the held-out set are made on the host and moved once; each super-batch is drawn on the device by a
    generator there (on the CPU the same draws as ever; a GPU's generator gives other, equally seeded ones)."""

    def __init__(self, name: str, seed: int, eval_n: int, device="cpu"):
        self.device = torch.device(device)
        self.name, self.gen = name, torch.Generator(device=self.device).manual_seed(seed)
        eval_gen = torch.Generator().manual_seed(seed + 10_007)  # the held-out moons: the same on every device
        if name == "digits":
            self.train, self.held = (t.to(self.device) for t in digits_pool(seed))
            self.dim = 64
        else:
            self.train, self.held, self.dim = None, moons(eval_n, eval_gen, self.device), 2

    def x0(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        g = generator or self.gen
        if self.name == "digits":
            return torch.randn(n, self.dim, generator=g, device=g.device)
        return eight_gaussians(n, g)

    def x1(self, n: int) -> torch.Tensor:
        if self.name == "digits":
            return self.train[torch.randint(0, len(self.train), (n,), generator=self.gen, device=self.device)]
        return moons(n, self.gen)
