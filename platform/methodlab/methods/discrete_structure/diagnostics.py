"""Bounding experiments for Claim A (why the general model's CPDAG SHD stays above the bar), run through the method's
own problem builder, DAGMA path, threshold and selection objective with the benchmark preset:

- `path`: the preset fit itself; its W is also thresholded at several omega (does any threshold rescue it?);
- `known_order`: node j may only use its predecessors in the TRUE topological order (the order search removed):
  the SHD left is estimation (penalty / threshold / sample), the rest of the path's SHD is the order search;
- `oracle_warm`: the last path stage started from the TRUE DAG's refit coefficients (an oracle warm start): if it
  stays near the truth with a lower penalised objective F than the path's endpoint, the truth is a stable, better
  point of the same objective that the path does not reach (an optimisation failure, not the objective's);
- `oracle_init`: the path started from main effects along the true order (N(0, init_scale^2)) at stage 0 and 1:
  an endpoint equal to the zero start's means the path forgets its initialisation (random-order multi-start
  cannot diversify it).

F = training BCE of the order-<=K refit on the thresholded DAG + lambda * sum quasi-MCP(W) (learner.selection_objective).
`python -m methodlab.methods.discrete_structure.diagnostics 0,1,2` writes reports/discrete_structure_diagnostics.json;
the report renders it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

OMEGAS = (0.1, 0.2, 0.3, 0.5)


def true_order(T: np.ndarray) -> list[int]:
    d, rem, order = len(T), set(range(len(T))), []
    while rem:
        r = min(j for j in rem if not any(T[k, j] for k in rem))
        order.append(r)
        rem.remove(r)
    return order


def _cfg(seed: int, mechanism: str, extra: dict | None = None):
    from methodlab.methods.discrete_structure.config import Config
    from methodlab.methods.discrete_structure.reproduce import job_config

    return Config(**{**job_config("benchmark"), "d": 8, "n": 5000, "mechanism": mechanism, "seed": seed,
                     **(extra or {})})


def _score(data, W, cfg, K):
    from methodlab.methods.discrete_structure import graphs, learner
    from methodlab.methods.discrete_structure import model as M

    T = np.asarray(data.truth)
    dag = M.threshold_to_dag(W, cfg.omega)
    return {"shd": int(graphs.shd_cpdag(graphs.cpdag(dag), graphs.cpdag(T))), "edges": int(dag.sum()),
            "F": float(learner.selection_objective(data.x_train, dag, K, cfg))}


def run_seed(seed: int, mechanism: str = "random_cpt", extra: dict | None = None) -> dict:
    from methodlab.core.device import set_threads
    from methodlab.methods.discrete_structure import graphs, learner, train
    from methodlab.methods.discrete_structure import model as M
    from methodlab.methods.discrete_structure.data import build_data

    set_threads(1)  # the recipe: one thread per process (learner calls, not fit: no ctx.limit_threads here)
    cfg = _cfg(seed, mechanism, extra)
    data = build_data(cfg)
    T = np.asarray(data.truth)
    d = T.shape[0]
    K = cfg.order(d)
    Ct = graphs.cpdag(T)
    out = {"seed": seed, "mechanism": mechanism, "true_edges": int(T.sum()),
           "F_truth": float(learner.selection_objective(data.x_train, T, K, cfg)),
           "near_constant_nodes": [int(j) for j, m in enumerate(data.x_train.mean(0)) if min(m, 1 - m) < 0.02]}
    prob = train._problem(cfg, data.x_train, None)

    t0 = time.perf_counter()
    st = learner.run_dagma(prob, cfg, learner.new_state(prob, cfg.lr))
    W = learner.weights(prob, st)
    out["path"] = {**_score(data, W, cfg, K), "s": time.perf_counter() - t0}
    out["path_omega"] = {str(om): int(graphs.shd_cpdag(graphs.cpdag(M.threshold_to_dag(W, om)), Ct)) for om in OMEGAS}

    # known order: features of node j only from its predecessors in the true order
    pos = {v: i for i, v in enumerate(true_order(T))}
    cands = [[k for k in range(d) if pos[k] < pos[j]] for j in range(d)]
    subs, mask = M.feature_plan(d, K, candidates=cands, K_cand=K)
    pk = learner.Problem.build(data.x_train, subs, mask, cfg.w_scale)
    t0 = time.perf_counter()
    sk = learner.run_dagma(pk, cfg, learner.new_state(pk, cfg.lr))
    out["known_order"] = {**_score(data, learner.weights(pk, sk), cfg, K), "s": time.perf_counter() - t0}

    # oracle warm start: the last stage from the true DAG's refit coefficients
    subs_r, _, B_r, b_r = learner.refit(data.x_train, T, K, cfg.refit_steps)
    idx = {tuple(s): i for i, s in enumerate(prob.subs)}
    sw = learner.new_state(prob, cfg.lr)
    for f, s in enumerate(subs_r):
        sw.B[idx[tuple(s)]] = B_r[f]
    sw.b = b_r.clone()
    sw.B0, sw.b0, sw.stage = sw.B.clone(), sw.b.clone(), len(cfg.mu_schedule) - 1
    start_shd = _score(data, learner.weights(prob, sw), cfg, K)["shd"]
    t0 = time.perf_counter()
    sw = learner.run_dagma(prob, cfg, sw)
    out["oracle_warm"] = {**_score(data, learner.weights(prob, sw), cfg, K), "shd_at_start": start_shd,
                          "s": time.perf_counter() - t0}

    # oracle initialisation (main effects along the true order) at stages 0 and 1
    for stage in (0, 1):
        g = np.random.default_rng(seed)
        si = learner.new_state(prob, cfg.lr)
        for f, s in enumerate(prob.subs):
            if len(s) == 1:
                for j in range(d):
                    if prob.mask[f, j] and pos[s[0]] < pos[j]:
                        si.B[f, j] = cfg.init_scale * g.standard_normal()
        si.B0, si.stage = si.B.clone(), stage
        t0 = time.perf_counter()
        si = learner.run_dagma(prob, cfg, si)
        out[f"oracle_init_stage{stage}"] = {**_score(data, learner.weights(prob, si), cfg, K), "s": time.perf_counter() - t0}
    return out


def main(seeds=(0, 1, 2), out_dir: str = "reports", workers: int = 1) -> Path:
    t0 = time.perf_counter()
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(run_seed, seeds))
    else:
        rows = [run_seed(s) for s in seeds]
    path = Path(out_dir) / "discrete_structure_diagnostics.json"
    path.write_text(json.dumps({"seeds": list(seeds), "wall_s": time.perf_counter() - t0, "rows": rows}, indent=1))
    return path


if __name__ == "__main__":  # pragma: no cover
    print(main(tuple(int(s) for s in sys.argv[1].split(",")) if len(sys.argv) > 1 else (0, 1, 2),
               workers=int(sys.argv[2]) if len(sys.argv) > 2 else 1))
