"""AGBAL's maths: the classifier-based density ratio (clipped, self-normalised, ESS), the density-ratio-weighted
auxiliary loss propagated to pool points (Nadaraya-Watson or kernel ridge), the kernel posterior variance, and
batch selection (LCMD / MaxDet / MaxDiag on the surrogate-scaled kernel, top-b, random). The ratio classifier is
fitted on a device (the run's) in float32 and read back as numpy; the surrogate and the selection are numpy."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------------------------------------- density ratio
def expand(z: torch.Tensor, kind: str) -> torch.Tensor:
    """linear: z; quadratic: z, z^2 and pairwise products (pairs only up to 50 inputs)."""
    if kind == "linear":
        return z
    parts = [z, z ** 2]
    d = z.shape[1]
    if 1 < d <= 50:
        i, j = torch.triu_indices(d, d, offset=1, device=z.device)
        parts.append(z[:, i] * z[:, j])
    return torch.cat(parts, 1)


class RatioModel(nn.Module):
    """Probabilistic classifier target (1) vs auxiliary (0) on standardised inputs; log r(x) = its logit (classes
    weighted equally, so the logit estimates log p_target / p_aux up to a constant that self-normalisation removes)."""

    def __init__(self, d: int, kind: str = "logistic", features: str = "quadratic", hidden: int = 64):
        super().__init__()  # buffers and layers on the current default device (build it under `with device:`)
        self.kind, self.features = kind, features
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("std", torch.ones(d))
        self.register_buffer("log_norm", torch.zeros(()))  # subtracted so that mean r over the auxiliary set is 1
        d_feat = expand(torch.zeros(1, d, device="cpu"), features).shape[1] if kind == "logistic" else d
        self.register_buffer("feat_mean", torch.zeros(d_feat))
        self.register_buffer("feat_std", torch.ones(d_feat))
        if kind == "logistic":
            self.net = nn.Linear(d_feat, 1)
        else:
            self.net = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                     nn.Linear(hidden, 1))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        if self.kind == "logistic":
            z = (expand(z, self.features) - self.feat_mean) / self.feat_std
        return z

    def logit(self, x) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32, device=self.mean.device)
        return self.net(self._features(x)).squeeze(-1)

    @torch.no_grad()
    def raw_ratio(self, x) -> np.ndarray:
        return torch.exp(self.logit(x).double().clamp(-60, 60) - self.log_norm.double()).cpu().numpy()


def fit_ratio(x_target: np.ndarray, x_aux: np.ndarray, *, kind: str = "logistic", features: str = "quadratic",
              c: float = 1.0, hidden: int = 64, epochs: int = 300, seed: int = 0, device="cpu") -> RatioModel:
    """Fit the classifier on target inputs (labelled + pool; never test) vs auxiliary inputs, on `device`
    (float32 throughout: the logit becomes an importance weight through exp, so it stays out of autocast)."""
    device = torch.device(device)
    torch.manual_seed(seed)
    xt = torch.as_tensor(np.asarray(x_target), dtype=torch.float32, device=device)
    xa = torch.as_tensor(np.asarray(x_aux), dtype=torch.float32, device=device)
    with device:
        model = RatioModel(xt.shape[1], kind, features, hidden)
    allx = torch.cat([xt, xa])
    model.mean.copy_(allx.mean(0))
    model.std.copy_(allx.std(0).clamp_min(1e-8))
    if kind == "logistic":
        f = expand((allx - model.mean) / model.std, features)
        model.feat_mean.copy_(f.mean(0))
        model.feat_std.copy_(f.std(0).clamp_min(1e-8))
    feats = model._features(allx).detach()
    lab = torch.cat([torch.ones(len(xt), device=device), torch.zeros(len(xa), device=device)])
    w = torch.cat([torch.full((len(xt),), 0.5 / len(xt), device=device), torch.full((len(xa),), 0.5 / len(xa), device=device)])
    bce = nn.BCEWithLogitsLoss(reduction="none")
    n = len(allx)
    if kind == "logistic":
        opt = torch.optim.LBFGS(model.net.parameters(), lr=1, max_iter=200, history_size=20,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = (w * bce(model.net(feats).squeeze(-1), lab)).sum() \
                + (model.net.weight ** 2).sum() / (2 * c * n)
            loss.backward()
            return loss

        opt.step(closure)
    else:
        opt = torch.optim.Adam(model.net.parameters(), lr=1e-2, weight_decay=1e-4)
        for _ in range(epochs):
            opt.zero_grad()
            loss = (w * bce(model.net(feats).squeeze(-1), lab)).sum()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():  # self-normalise on the auxiliary set (before clipping; clip_normalise renormalises)
        la = model.logit(xa).double()
        model.log_norm.copy_((torch.logsumexp(la, 0) - math.log(len(la))).float())
    return model


def clip_normalise(r: np.ndarray, clip: tuple[float, float]) -> np.ndarray:
    """Clip to [r_min, r_max] and self-normalise so the mean over the auxiliary set is 1."""
    r = np.clip(np.asarray(r, dtype=float), clip[0], clip[1])
    return r / r.mean()


def ess(r: np.ndarray) -> float:
    """Effective sample size (sum r)^2 / sum r^2."""
    r = np.asarray(r, dtype=float)
    return float(r.sum() ** 2 / max((r ** 2).sum(), 1e-300))


def ess_blend(r: np.ndarray, ess_min: float) -> tuple[np.ndarray, float]:
    """Below ess_min, blend r toward 1 (the unweighted surrogate) by alpha = ESS / ess_min; returns (r, alpha)."""
    e = ess(r)
    if ess_min <= 0 or e >= ess_min:
        return r, 1.0
    alpha = e / ess_min
    return alpha * r + (1 - alpha), alpha


# ----------------------------------------------------------------------------------------------- surrogate
def sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.maximum(d, 0.0)


def median_distance(z: np.ndarray, seed: int = 0, n: int = 1000) -> float:
    rng = np.random.default_rng(seed)
    sub = z[rng.choice(len(z), size=min(n, len(z)), replace=False)]
    d = np.sqrt(sq_dists(sub, sub))
    iu = np.triu_indices(len(sub), 1)
    med = float(np.median(d[iu])) if len(iu[0]) else 1.0
    return med if med > 0 and math.isfinite(med) else 1.0


def rbf(a: np.ndarray, b: np.ndarray, h: float) -> np.ndarray:
    return np.exp(-sq_dists(a, b) / (2 * h * h))


def propagate(z_query: np.ndarray, z_aux: np.ndarray, losses: np.ndarray, r: np.ndarray, h: float, *,
              method: str = "nw", kappa: float = 1e-3, ridge: float = 1.0, chunk: int = 4096) -> np.ndarray:
    """u(x) from the weighted auxiliary losses r_a * l_a.
    nw:  u(x) = sum_a k(x, x_a) r_a l_a / (sum_a k(x, x_a) r_a + kappa)
    krr: u = K_{x,A} (K_{A,A} + ridge I)^{-1} (r * l), clipped at 0."""
    wl = r * losses
    if method == "krr":
        kaa = rbf(z_aux, z_aux, h)
        alpha = np.linalg.solve(kaa + ridge * np.eye(len(kaa)), wl)
        out = np.concatenate([rbf(z_query[i:i + chunk], z_aux, h) @ alpha for i in range(0, len(z_query), chunk)]
                             or [np.zeros(0)])
        return np.maximum(out, 0.0)
    out = []
    for i in range(0, len(z_query), chunk):
        k = rbf(z_query[i:i + chunk], z_aux, h)
        out.append((k @ wl) / (k @ r + kappa))
    return np.concatenate(out) if out else np.zeros(0)


def posterior_variance(f_query: np.ndarray, f_lab: np.ndarray, ridge: float) -> np.ndarray:
    """GP posterior variance of the linear kernel <phi, phi'> given the labelled features (noise `ridge`,
    relative to the mean kernel diagonal): lam * phi^T (Phi_L^T Phi_L + lam I)^{-1} phi."""
    scale = float(np.mean((f_query ** 2).sum(1))) if len(f_query) else 1.0
    lam = ridge * max(scale, 1e-12)
    m = f_query.shape[1]
    a = f_lab.T @ f_lab + lam * np.eye(m)
    sol = np.linalg.solve(a, f_query.T)
    return np.maximum(lam * (f_query * sol.T).sum(1), 0.0)


def combine(u: np.ndarray, var: np.ndarray, how: str) -> np.ndarray:
    if how == "surrogate_only":
        return u
    if how == "product":
        return u * var
    return u / max(u.mean(), 1e-300) + var / max(var.mean(), 1e-300)


# ----------------------------------------------------------------------------------------------- selection
def lcmd(f_pool: np.ndarray, f_lab: np.ndarray, b: int, candidates: np.ndarray) -> list[int]:
    """Largest Cluster Maximum Distance (Holzmueller et al.): every candidate belongs to its nearest centre
    (labelled points and the points selected so far); the cluster with the largest sum of squared distances is
    chosen and its farthest candidate selected, which then becomes a centre. Returns ids into f_pool."""
    cand = np.asarray(candidates)
    f = f_pool[cand]
    n = len(cand)
    if b > n:
        raise ValueError(f"batch size {b} > {n} candidates")
    if len(f_lab):
        d = sq_dists(f, f_lab)
        closest = d.argmin(1)
        min_sq = d[np.arange(n), closest]
        n_centres = len(f_lab)
    else:  # no centres yet: the first pick is the largest-norm point (MaxDiag), as with an empty training set
        closest = np.zeros(n, dtype=int)
        min_sq = np.full(n, np.inf)
        n_centres = 0
    avail = np.ones(n, dtype=bool)
    chosen = []
    for _ in range(b):
        if n_centres == 0:
            i = int(np.argmax(np.where(avail, (f * f).sum(1), -np.inf)))
        else:
            idx = np.flatnonzero(avail)
            w = np.bincount(closest[idx], weights=min_sq[idx], minlength=n_centres)
            present = np.bincount(closest[idx], minlength=n_centres) > 0
            w = np.where(present, w, -1.0)
            c = int(np.argmax(w))
            members = idx[closest[idx] == c]
            i = int(members[np.argmax(min_sq[members])])
        chosen.append(i)
        avail[i] = False
        dn = sq_dists(f, f[i:i + 1])[:, 0]
        better = dn < min_sq
        closest = np.where(better, n_centres, closest)
        min_sq = np.where(better, dn, min_sq)
        n_centres += 1
    return [int(cand[i]) for i in chosen]


def maxdet(f_pool: np.ndarray, f_lab: np.ndarray, b: int, candidates: np.ndarray, ridge: float) -> list[int]:
    """Greedy MaxDet: repeatedly take the candidate with the largest posterior variance given the labelled and
    already selected points, then condition on it (rank-one update in feature space)."""
    cand = np.asarray(candidates)
    f = f_pool[cand]
    scale = float(np.mean((f ** 2).sum(1))) if len(f) else 1.0
    lam = ridge * max(scale, 1e-12)
    m = f.shape[1]
    cov = lam * np.linalg.inv(f_lab.T @ f_lab + lam * np.eye(m))  # posterior covariance of the weights (x lam)
    diag = np.maximum((f @ cov * f).sum(1), 0.0)
    avail = np.ones(len(cand), dtype=bool)
    chosen = []
    for _ in range(b):
        i = int(np.argmax(np.where(avail, diag, -np.inf)))
        chosen.append(i)
        avail[i] = False
        v = cov @ f[i]
        den = f[i] @ v + lam
        cov = cov - np.outer(v, v) / den
        diag = np.maximum(diag - (f @ v) ** 2 / den, 0.0)
    return [int(cand[i]) for i in chosen]


def top_scores(scores: np.ndarray, b: int, candidates: np.ndarray) -> list[int]:
    cand = np.asarray(candidates)
    order = np.argsort(-scores[cand], kind="stable")[:b]
    return [int(cand[i]) for i in order]
