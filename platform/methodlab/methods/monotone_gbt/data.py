"""Comparison data of a run, built from methodlab.data sources (no network): a synthetic instance (with its truth and
a fresh held-out set), MovieLens per-user pairs, Tournesol files or generic CSV triples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from methodlab.methods.monotone_gbt.model import Comparisons, group_laplacian, knn_laplacian
from methodlab.methods.monotone_gbt.rootlaw import RootLaw, make_law


@dataclass
class RunData:
    item_ids: list[str]
    x_feat: np.ndarray | None  # [D, A]
    train: Comparisons
    test: Comparisons | None
    theta_true: np.ndarray | None
    feature_names: list[str]
    source: str


def law_of(cfg, name: str | None = None) -> RootLaw:
    return make_law(name or cfg.root_law, cfg.kary_k, cfg.gaussian_var)


def true_laplacian(cfg, x_feat):
    if cfg.true_laplacian_weight == 0 or x_feat is None or x_feat.shape[0] == 0:
        return None
    return cfg.true_laplacian_weight * knn_laplacian(x_feat, cfg.knn_k)


def synthetic(cfg, seed: int, n: int, law: RootLaw | None = None, n_test: int | None = None) -> RunData:
    """One instance of the spec's protocol (x_feat, then beta_true, then the N pairs and responses), plus n_test fresh
    comparisons from the same truth for held-out squared error (drawn after, from seed + 10^6)."""
    from methodlab.data.monotone_gbt_synthetic import generate, sample_pairs

    law = law or make_law("uniform")  # the true model's root law is the paper's uniform law
    lap = None
    if cfg.true_laplacian_weight > 0:  # the true prior's graph needs x_feat first: same stream as generate()
        x_feat = np.random.default_rng(seed).standard_normal((cfg.n_features, cfg.n_items))
        lap = true_laplacian(cfg, x_feat)
    inst = generate(seed, cfg.n_items, cfg.n_features, n, law, sigma=cfg.true_sigma, lap=lap, sampler=cfg.pair_sampler,
                    p_edge=cfg.p_edge, keep_all_draws=cfg.keep_all_draws)
    a_n = cfg.n_items
    test = None
    nt = cfg.n_test if n_test is None else n_test
    if nt > 0:
        rng = np.random.default_rng(seed + 1_000_000)
        ta, tb = sample_pairs(rng, a_n, nt, "simple")
        test = Comparisons(ta, tb, law.sample(inst.theta_true[ta] - inst.theta_true[tb], rng), a_n)
    return RunData([str(k) for k in range(a_n)], inst.x_feat, Comparisons(inst.a, inst.b, inst.r, a_n), test,
                   inst.theta_true, [f"f{j}" for j in range(cfg.n_features)], f"synthetic seed {seed}")


def real(cfg):
    from methodlab.data import monotone_gbt_real as src

    if cfg.data == "movielens":
        return src.movielens_user(cfg.movielens_user, cfg.n_pairs, cfg.data_seed)
    if cfg.data == "tournesol":
        return src.tournesol(cfg.comparisons_path, cfg.metadata_path, cfg.tournesol_user, cfg.criterion, cfg.limit,
                             cfg.data_seed)
    return src.triples(cfg.comparisons_path, cfg.metadata_path)


def build(cfg) -> RunData:
    if cfg.data == "synthetic":
        return synthetic(cfg, cfg.seed, cfg.n_comparisons)
    d = real(cfg)
    allc = Comparisons(d.a, d.b, d.r, len(d.item_ids))
    test = None
    train = allc
    if cfg.test_frac > 0:
        perm = np.random.default_rng(cfg.seed).permutation(len(allc))
        k = int(round(cfg.test_frac * len(allc)))
        test, train = allc.subset(np.sort(perm[:k])), allc.subset(np.sort(perm[k:]))
    return RunData(d.item_ids, d.x_feat, train, test, None, d.feature_names, d.source)


def prior_laplacian(cfg, x_feat):
    """The weighted diffusion Laplacian of the fitted model's prior (None: L = 0)."""
    if cfg.prior_laplacian == "none" or cfg.laplacian_weight == 0 or x_feat is None or x_feat.shape[0] == 0:
        return None
    lap = knn_laplacian(x_feat, cfg.knn_k) if cfg.prior_laplacian == "knn" else group_laplacian(x_feat)
    return cfg.laplacian_weight * lap
