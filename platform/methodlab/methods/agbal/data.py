"""Builds the method's ShiftTask from methodlab.data.agbal_shift (generators, real sets, a user's tables)."""

from __future__ import annotations

from methodlab.data import agbal_shift as src
from methodlab.methods.agbal.config import Config


def build_task(cfg: Config) -> src.ShiftTask:
    seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    extra = {"aux_label_noise": cfg.aux_label_noise, "aux_bias": cfg.aux_bias}
    if cfg.noise is not None:
        extra["noise"] = cfg.noise
    if cfg.data == "friedman_shift":
        return src.friedman_shift(seed, cfg.n_pool, cfg.n_test, cfg.n_aux, cfg.n0, d=cfg.n_features,
                                  shift=cfg.aux_shift, scale=cfg.aux_scale, **extra)
    if cfg.data in ("hetero_1d", "hetero_2d"):
        return src.GENERATORS[cfg.data](seed, cfg.n_pool, cfg.n_test, cfg.n_aux, cfg.n0, **extra)
    if cfg.data == "files":
        f = cfg.data_files
        return src.load_tables(f["labeled"], f["pool"], f["auxiliary"], f.get("test"), cfg.feature_columns,
                               cfg.target_column)
    return src.GENERATORS[cfg.data](seed, n0=cfg.n0, aux_quantile=cfg.aux_quantile, aux_bias=cfg.aux_bias)
