"""The monotonicity side of the monotone_gbt reproduction, run as harness Tasks (no fit of a setting; seconds of
numpy each): the spec's monotonicity instances, the finite-difference check against the M matrix, the A x D
density map for the plot, and the monotonicity of the identity + genre embedding on MovieLens subsets. Every
number comes from the method's own `model.monotonicity_test`, `model.fd_check` and `settings.density_grid`."""

from __future__ import annotations

import time

import numpy as np

INSTANCES = {"onehot": 100, "alpha0": 200, "alpha05": 300}  # rng seeds of the three instance families (+1: gaussian)


def _cfg(**kw):
    from methodlab.methods.monotone_gbt.config import Config

    return Config(**{"n_test": 0, "blas_threads": 1, **kw})


def monotonicity(seed: int, inputs: dict, mode: str) -> dict:
    """50 instances each: identity + one-hot categories (A = 15, 3 groups), Gaussian x (A = 15, D = 3) at alpha 0 and
    0.5; each through the 100-random-Laplacian test (tol 1e-4), binary and gaussian test Laplacians."""
    from methodlab.data.monotone_gbt_synthetic import onehot_groups
    from methodlab.methods.monotone_gbt.model import gram_with_alpha, monotonicity_test
    from methodlab.methods.monotone_gbt.train import blas_limit

    t0, out = time.perf_counter(), {}
    with blas_limit(_cfg()):
        for kind, base in INSTANCES.items():
            for lap in ("binary", "gaussian"):
                rng = np.random.default_rng(base + (lap == "gaussian"))
                res = []
                for _ in range(50):
                    if kind == "onehot":
                        g = onehot_groups(rng, 15, 3)
                        gram = np.eye(15) + g.T @ g
                    else:
                        gram = gram_with_alpha(rng.standard_normal((3, 15)), 0.0 if kind == "alpha0" else 0.5)
                    res.append(monotonicity_test(gram, rng, 100, lap, 1e-4))
                out[f"{kind}/{lap}"] = {"good": int(sum(r["good"] for r in res)), "n": len(res),
                                        "worst": float(max(r["worst"] for r in res))}
    return {**out, "time_s": time.perf_counter() - t0}


def fd(seed: int, inputs: dict, mode: str) -> dict:
    """Finite differences vs the M-matrix prediction on this seed's instances: LGBT-D and embedding only on the
    synthetic A = 20, D = 10, N = 71 instance (all 380 ordered pairs), embedding only on A = 15, D = 3, N = 60."""
    from methodlab.methods.monotone_gbt.data import synthetic
    from methodlab.methods.monotone_gbt.model import embeddings, fd_check
    from methodlab.methods.monotone_gbt.rootlaw import Uniform
    from methodlab.methods.monotone_gbt.train import blas_limit

    keys = ("pairs", "agree", "max_rel_err", "median_rel_err", "fd_violations", "m_violations")
    t0, law, rows = time.perf_counter(), Uniform(), []
    with blas_limit(_cfg()):
        rd = synthetic(_cfg(n_items=20, n_features=10), seed, 71, n_test=0)
        for kind in ("gbt_embedding", "embedding"):
            r = fd_check(embeddings(kind, 20, rd.x_feat), rd.train, law)
            rows.append({"instance": f"synthetic A=20 D=10 N=71, {kind}", **{k: r[k] for k in keys}})
        rd = synthetic(_cfg(n_items=15, n_features=3), seed, 60, n_test=0)
        r = fd_check(embeddings("embedding", 15, rd.x_feat), rd.train, law)
        rows.append({"instance": "synthetic A=15 D=3 N=60, embedding", **{k: r[k] for k in keys}})
    agree = sum(x["agree"] * x["pairs"] for x in rows) / sum(x["pairs"] for x in rows)
    return {"rows": rows, "agree_share": float(agree), "time_s": time.perf_counter() - t0}


def density_map(seed: int, inputs: dict, mode: str) -> dict:
    """Share of Gaussian embeddings passing the test per (A, D) cell, Gram x^T x + alpha I, alpha 0 and 0.5 (20
    draws per cell; 4 under --quick)."""
    from methodlab.methods.monotone_gbt.settings import density_grid
    from methodlab.methods.monotone_gbt.train import blas_limit

    t0 = time.perf_counter()
    cfg = _cfg(map_items=[5, 10, 15, 20, 25, 30], map_features=[1, 2, 3, 5, 8, 12, 20],
               map_instances=4 if mode == "quick" else 20, nb_iter=100)
    with blas_limit(cfg):
        grids = {f"{alpha:g}": density_grid(cfg, alpha) for alpha in (0.0, 0.5)}
    return {"grids": grids, "instances": cfg.map_instances, "time_s": time.perf_counter() - t0}


def movielens_mono(seed: int, inputs: dict, mode: str) -> dict:
    """The identity + genre embedding (Gram I + G^T G) and genres only (alpha 0) on 20 random subsets of A = 15 and
    A = 50 of user 547's movies (5 under --quick), binary test Laplacians, 100 each."""
    from methodlab.data.monotone_gbt_real import movielens_user_movies
    from methodlab.methods.monotone_gbt.model import gram_with_alpha, monotonicity_test
    from methodlab.methods.monotone_gbt.train import blas_limit

    t0, out = time.perf_counter(), {}
    subsets = 5 if mode == "quick" else 20
    ids, x = movielens_user_movies(547)
    with blas_limit(_cfg()):
        for a_n in (15, 50):
            rng = np.random.default_rng(a_n)
            ok_id = ok_gen = 0
            for _ in range(subsets):
                xs = x[:, rng.choice(len(ids), size=a_n, replace=False)]
                ok_id += monotonicity_test(gram_with_alpha(xs, 1.0), rng, 100, "binary", 1e-4)["good"]
                ok_gen += monotonicity_test(gram_with_alpha(xs, 0.0), rng, 100, "binary", 1e-4)["good"]
            out[str(a_n)] = {"identity_genres": int(ok_id), "genres_only": int(ok_gen), "subsets": subsets}
    return {**out, "time_s": time.perf_counter() - t0}
