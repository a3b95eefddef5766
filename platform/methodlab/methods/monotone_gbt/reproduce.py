"""`methodlab reproduce monotone_gbt`: the spec's acceptance experiment, every number from the method's own code
(jobs.sweep_instance / fit_model / monotonicity_test / fd_check / cv_real):

1. synthetic A = 20, D = 10, seeds 0..99 at N = 71 and 291 (and 141): LGBT-D vs GBT vs embedding only vs the
   binary root law; the N curve 1..301 step 10 for the plot; A = 25, N = 500, D in {2, 8, 20} (reported);
   the official Python script's data path (keep_all_draws = False) as a reported ablation;
2. monotonicity: identity + one-hot (A = 15, 3 groups, 50 instances), Gaussian D = 3 at alpha 0 and 0.5 (50 each),
   both random-Laplacian models; the finite-difference check against the M matrix (uncalibrated: development seeds
   10, 11, 12 first, then the reported seeds 0, 1, 2); a small A x D density map for the plot;
3. MovieLens user 547: 10-fold CV squared error of E[r|s] and the monotonicity of identity + genres on 20 random
   subsets of 50 (and 15) of the user's movies.
Writes reports/monotone_gbt.md and reports/monotone_gbt.png."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

SEEDS = list(range(100))
ACCEPT_N = [71, 141, 291]
CURVE_N = list(range(1, 302, 10))
MODELS = ["gbt_embedding", "gbt", "embedding", "binary_law"]


def _cfg(**kw):
    from methodlab.methods.monotone_gbt.config import Config

    return Config(**{"n_test": 0, "blas_threads": 1, **kw})  # the recipe: parallel processes, BLAS 1 thread each


def _sweep_chunk(args) -> list[dict]:
    seeds, n, models, cfg_kw = args
    from methodlab.methods.monotone_gbt.jobs import sweep_instance
    from methodlab.methods.monotone_gbt.train import blas_limit

    cfg = _cfg(**cfg_kw)
    with blas_limit(cfg):
        return [sweep_instance(cfg, s, n, models) for s in seeds]


def run_grid(pool, ns, models, seeds, cfg_kw, chunks: int = 4) -> dict[int, list[dict]]:
    parts = [list(c) for c in np.array_split(seeds, chunks) if len(c)]
    futs = {(n, i): pool.submit(_sweep_chunk, (p, n, models, cfg_kw)) for n in ns for i, p in enumerate(parts)}
    return {n: [r for i in range(len(parts)) for r in futs[(n, i)].result()] for n in ns}


# ------------------------------------------------------------------------------------------- monotonicity
def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return {"result": out, "time_s": time.perf_counter() - t0}


def _mono_part(kind: str) -> dict:
    from methodlab.data.monotone_gbt_synthetic import onehot_groups
    from methodlab.methods.monotone_gbt.model import gram_with_alpha, monotonicity_test

    out = {}
    for lap in ("binary", "gaussian"):
        rng = np.random.default_rng({"onehot": 100, "alpha0": 200, "alpha05": 300}[kind] + (lap == "gaussian"))
        res = []
        for _ in range(50):
            if kind == "onehot":
                g = onehot_groups(rng, 15, 3)
                gram = np.eye(15) + g.T @ g
            else:
                gram = gram_with_alpha(rng.standard_normal((3, 15)), 0.0 if kind == "alpha0" else 0.5)
            res.append(monotonicity_test(gram, rng, 100, lap, 1e-4))
        out[lap] = {"good": int(sum(r["good"] for r in res)), "n": len(res),
                    "worst": float(max(r["worst"] for r in res))}
    return out


def _fd_seed(seed: int) -> dict:
    """FD vs M on one seed's instances: LGBT-D and embedding only on the synthetic A = 20, D = 10, N = 71 instance
    (all 380 ordered pairs), and embedding only on Gaussian x (D = 3, A = 15, N = 60: violations expected)."""
    from methodlab.methods.monotone_gbt.data import synthetic
    from methodlab.methods.monotone_gbt.model import Comparisons, embeddings, fd_check
    from methodlab.methods.monotone_gbt.rootlaw import Uniform

    law, rows = Uniform(), []
    rd = synthetic(_cfg(n_items=20, n_features=10), seed, 71, n_test=0)
    for kind in ("gbt_embedding", "embedding"):
        r = fd_check(embeddings(kind, 20, rd.x_feat), rd.train, law)
        rows.append({"seed": seed, "instance": f"synthetic A=20 D=10 N=71, {kind}", **{k: r[k] for k in
                     ("pairs", "agree", "max_rel_err", "median_rel_err", "fd_violations", "m_violations")}})
    rd = synthetic(_cfg(n_items=15, n_features=3), seed, 60, n_test=0)
    r = fd_check(embeddings("embedding", 15, rd.x_feat), rd.train, law)
    rows.append({"seed": seed, "instance": "synthetic A=15 D=3 N=60, embedding", **{k: r[k] for k in
                 ("pairs", "agree", "max_rel_err", "median_rel_err", "fd_violations", "m_violations")}})
    return {"seed": seed, "rows": rows}


def _density_map() -> dict:
    from methodlab.methods.monotone_gbt.jobs import density_grid
    from methodlab.methods.monotone_gbt.train import blas_limit

    cfg = _cfg(map_items=[5, 10, 15, 20, 25, 30], map_features=[1, 2, 3, 5, 8, 12, 20], map_instances=20, nb_iter=100)
    with blas_limit(cfg):
        return {alpha: density_grid(cfg, alpha) for alpha in (0.0, 0.5)}


# ---------------------------------------------------------------------------------------------- MovieLens
def _movielens() -> dict:
    from methodlab.core import RunContext
    from methodlab.data.monotone_gbt_real import movielens_user_movies
    from methodlab.methods.monotone_gbt.jobs import cv_real
    from methodlab.methods.monotone_gbt.model import gram_with_alpha, monotonicity_test
    from methodlab.methods.monotone_gbt.train import blas_limit

    t0 = time.perf_counter()
    cfg = _cfg(data="movielens", movielens_user=547, n_pairs=1000, data_seed=0, folds=10, seed=0,
               cv_models=["gbt_embedding", "gbt", "embedding", "binary_law", "constant"])
    ctx = RunContext(quiet=True)
    cv = cv_real(cfg, ctx)
    t_cv = time.perf_counter() - t0
    ids, x = movielens_user_movies(547)
    mono = {}
    with blas_limit(cfg):
        for a_n in (15, 50):
            rng = np.random.default_rng(a_n)
            ok_id, ok_gen = 0, 0
            for _ in range(20):
                sub = rng.choice(len(ids), size=a_n, replace=False)
                xs = x[:, sub]
                ok_id += monotonicity_test(gram_with_alpha(xs, 1.0), rng, 100, "binary", 1e-4)["good"]
                ok_gen += monotonicity_test(gram_with_alpha(xs, 0.0), rng, 100, "binary", 1e-4)["good"]
            mono[a_n] = (ok_id, ok_gen)
    return {"cv": cv, "folds": ctx.history, "mono": mono, "t_cv": t_cv, "t_all": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------- main
def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> str:
    from methodlab.methods.monotone_gbt.report import DEV_SEEDS, REPORT_SEEDS, write_report

    t_start = time.perf_counter()
    times = {}
    seeds = SEEDS[:20] if quick else SEEDS
    curve_seeds = SEEDS[:10] if quick else SEEDS[:50]
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        t0 = time.perf_counter()
        grid = run_grid(pool, ACCEPT_N, MODELS, seeds, {"n_items": 20, "n_features": 10})
        times["synthetic grid A=20, D=10, N in {71,141,291}, 4 models (wall)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        fut_mono = {k: pool.submit(_timed, _mono_part, k) for k in ("onehot", "alpha0", "alpha05")}
        fut_fd = {s: pool.submit(_timed, _fd_seed, s) for s in (*DEV_SEEDS, *REPORT_SEEDS)}
        fut_map = pool.submit(_timed, _density_map)
        fut_ml = pool.submit(_timed, _movielens)
        official = run_grid(pool, [71, 291], ["gbt_embedding", "gbt"], seeds,
                            {"n_items": 20, "n_features": 10, "keep_all_draws": False})
        times["official-Python data path ablation (wall; shares the pool with the monotonicity / FD / MovieLens tasks)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        curve = run_grid(pool, CURVE_N, ["gbt_embedding", "gbt", "embedding"], curve_seeds, {"n_items": 20, "n_features": 10})
        times[f"N curve 1..301 step 10, {len(curve_seeds)} seeds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        dgrid = {d: run_grid(pool, [500], ["gbt_embedding", "gbt", "embedding"], seeds,
                             {"n_items": 25, "n_features": d})[500] for d in (2, 8, 20)}
        times["A=25, N=500, D in {2,8,20}"] = time.perf_counter() - t0
        mono = {k: f.result()["result"] for k, f in fut_mono.items()}
        fd = {s: f.result()["result"] for s, f in fut_fd.items()}
        dmap, ml = fut_map.result()["result"], fut_ml.result()["result"]
        task = {"monotonicity instances (3 x 2 x 50 tests, each task)": [f.result()["time_s"] for f in fut_mono.values()],
                "FD check per seed (3 instances, 970 refits)": [f.result()["time_s"] for f in fut_fd.values()],
                "density map (2 x 42 cells x 20 draws)": [fut_map.result()["time_s"]],
                "MovieLens (data, 10-fold CV, 40 monotonicity subsets)": [fut_ml.result()["time_s"]]}
    wall = time.perf_counter() - t_start
    return write_report(Path(out_dir), grid=grid, official=official, curve=curve, dgrid=dgrid, mono=mono, fd=fd,
                        dmap=dmap, ml=ml, times=times, task=task, wall=wall, seeds=seeds, curve_seeds=curve_seeds, quick=quick,
                        workers=workers)


if __name__ == "__main__":  # pragma: no cover
    print(main())
