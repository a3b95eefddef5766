"""One acquisition step, shared by the round loop (train.py) and the served Predictor: features of the current
network, auxiliary losses, weighted surrogate u(x), kernel posterior variance, and the batch of the strategy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from methodlab.methods.agbal import maths
from methodlab.methods.agbal.config import Config
from methodlab.methods.agbal.model import MLP, FeatureMap, predict


@dataclass
class State:
    """What a trained round holds, in standardised units (inputs by x_mean/x_std, targets by y_mean/y_std)."""

    net: MLP
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    x_aux: np.ndarray  # raw units
    y_aux: np.ndarray
    r_aux: np.ndarray  # clipped, self-normalised (and ESS-blended) density ratio at the auxiliary inputs
    h_prop: float | None = None  # RBF width of the propagation kernel (fixed when the round was trained)
    offset: float = 0.0  # auxiliary label offset removed before the losses (debias_aux)

    def zx(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=float) - self.x_mean) / self.x_std

    def predict(self, x: np.ndarray) -> np.ndarray:
        return predict(self.net, self.zx(x)) * self.y_std + self.y_mean


def feature_map(cfg: Config, st: State) -> FeatureMap:
    return FeatureMap(st.net, cfg.kernel, cfg.sketch_dim, cfg.seed, len(st.x_mean),
                      rbf_lengthscale=float(np.sqrt(len(st.x_mean))))


def prop_space(cfg: Config, fmap: FeatureMap, st: State, x: np.ndarray) -> np.ndarray:
    return fmap(st.zx(x)) if cfg.prop_space == "features" else st.zx(x)


def aux_losses(st: State) -> np.ndarray:
    """l_a = (f(x_a) - y_a)^2 in standardised target units."""
    return ((st.predict(st.x_aux) - (st.y_aux - st.offset)) / st.y_std) ** 2


def bandwidth(cfg: Config, z_query: np.ndarray, z_aux: np.ndarray) -> float:
    both = np.concatenate([z_query, z_aux])
    return cfg.bandwidth * maths.median_distance(both, seed=cfg.seed)


def surrogate(cfg: Config, st: State, x_query: np.ndarray, *, weighted: bool = True, fmap: FeatureMap | None = None,
              z_aux: np.ndarray | None = None) -> np.ndarray:
    """u(x) at query inputs: the (density-ratio-weighted) auxiliary losses propagated by the kernel."""
    fmap = fmap or feature_map(cfg, st)
    zq = prop_space(cfg, fmap, st, x_query)
    za = prop_space(cfg, fmap, st, st.x_aux) if z_aux is None else z_aux
    if st.h_prop is None:
        st.h_prop = bandwidth(cfg, zq, za)
    r = st.r_aux if weighted else np.ones(len(st.x_aux))
    return maths.propagate(zq, za, aux_losses(st), r, st.h_prop, method=cfg.propagation, kappa=cfg.kappa,
                           ridge=cfg.krr_ridge)


@dataclass
class Acquisition:
    selected: list[int]  # ids into x_pool
    u: np.ndarray | None  # surrogate at every pool row (None for strategies that do not use it)


def acquire(cfg: Config, st: State, x_pool: np.ndarray, x_lab: np.ndarray, candidates: np.ndarray, b: int,
            strategy: str, rng: np.random.Generator) -> Acquisition:
    """Select b distinct ids among `candidates` (pool rows without labels). x_lab: every labelled input."""
    candidates = np.asarray(candidates, dtype=int)
    if b > len(candidates):
        raise ValueError(f"batch size {b} > {len(candidates)} unlabelled pool rows")
    if strategy == "random":
        return Acquisition([int(i) for i in rng.choice(candidates, size=b, replace=False)], None)
    fmap = feature_map(cfg, st)
    f_pool = fmap(st.zx(x_pool))
    f_lab = fmap(st.zx(x_lab))
    if strategy == "lcmd":  # the same pipeline without auxiliary data (u = 1)
        sel = _select(cfg, f_pool, f_lab, np.ones(len(x_pool)), np.ones(len(x_lab)), b, candidates)
        return Acquisition(sel, None)
    weighted = strategy == "agbal"
    za = prop_space(cfg, fmap, st, st.x_aux)
    both = np.concatenate([x_pool, x_lab])
    u_all = surrogate(cfg, st, both, weighted=weighted, fmap=fmap, z_aux=za)
    u_pool, u_lab = u_all[:len(x_pool)], u_all[len(x_pool):]
    if cfg.selection in ("top_b",):
        var = maths.posterior_variance(f_pool, f_lab, cfg.post_ridge)
        sel = maths.top_scores(maths.combine(u_pool, var, cfg.combine), b, candidates)
    else:
        sel = _select(cfg, f_pool, f_lab, u_pool, u_lab, b, candidates)
    return Acquisition(sel, u_pool)


def _select(cfg: Config, f_pool, f_lab, u_pool, u_lab, b, candidates) -> list[int]:
    """Selection on the surrogate-scaled kernel k~(x, x') = sqrt(u(x)) k(x, x') sqrt(u(x')) (features scaled by
    sqrt(u)); u is divided by its mean, so a constant u gives exactly the unscaled selection."""
    scale = max(float(np.mean(u_pool)), 1e-300)
    sp = np.sqrt(np.maximum(u_pool, 0) / scale)[:, None]
    sl = np.sqrt(np.maximum(u_lab, 0) / scale)[:, None]
    fp, fl = f_pool * sp, f_lab * sl
    if cfg.selection == "lcmd":
        return maths.lcmd(fp, fl, b, candidates)
    if cfg.selection == "maxdet":
        return maths.maxdet(fp, fl, b, candidates, cfg.post_ridge)
    var = maths.posterior_variance(fp, fl, cfg.post_ridge)  # maxdiag on k~: u(x) * sigma^2 (the product)
    return maths.top_scores(var, b, candidates)
