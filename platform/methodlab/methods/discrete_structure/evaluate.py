"""Scores of a learned structure: CPDAG SHD and skeleton precision / recall against the true DAG's CPDAG (never the
DAG itself: orientation inside the class is arbitrary), held-out log-likelihood and BIC of the refitted model."""

from __future__ import annotations

import math

import numpy as np

from methodlab.methods.discrete_structure import graphs
from methodlab.methods.discrete_structure.learner import loglik_rows


def evaluate(data, dag: np.ndarray, C: np.ndarray, subs, B, b, n_coef: int) -> dict[str, float]:
    out: dict[str, float] = {"eval/n_edges": float(np.asarray(dag).sum()),
                             "eval/n_undirected": float(sum(1 for i in range(len(C)) for j in range(i + 1, len(C))
                                                            if C[i, j] and C[j, i]))}
    ll_tr = loglik_rows(data.x_train, subs, B, b)
    out["train/nll"] = float(-ll_tr.mean())
    if len(data.x_heldout):
        ll = loglik_rows(data.x_heldout, subs, B, b)
        out["eval/heldout_nll"] = float(-ll.mean())
        out["eval/heldout_bic"] = float(-2 * ll.sum() + n_coef * math.log(len(ll)))
        if data.net is not None:
            from methodlab.data.discrete_structure_sim import exact_loglik

            out["eval/true_model_nll"] = float(-exact_loglik(data.net, data.x_heldout).mean())
    if data.truth is not None:
        Ct = graphs.cpdag(data.truth)
        out["eval/shd_cpdag"] = float(graphs.shd_cpdag(C, Ct))
        prec, rec = graphs.skeleton_scores(C, Ct)
        out["eval/skeleton_precision"], out["eval/skeleton_recall"] = prec, rec
        out["eval/true_edges"] = float(np.asarray(data.truth).sum())
    return out
