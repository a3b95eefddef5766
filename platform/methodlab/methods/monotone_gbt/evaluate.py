"""Metrics of a fitted LGBT-D model: nMSE against the truth (synthetic), squared error of E[r|s] = Phi'(s) on
held-out comparisons, and the same for the constant-0 predictor."""

from __future__ import annotations

import numpy as np

from methodlab.methods.monotone_gbt.model import Comparisons, nmse, predict_r
from methodlab.methods.monotone_gbt.rootlaw import RootLaw


def sq_err(theta: np.ndarray, data: Comparisons, law: RootLaw) -> float:
    if len(data) == 0:
        return float("nan")
    return float(np.mean((predict_r(theta, data.a, data.b, law) - data.r) ** 2))


def evaluate(theta: np.ndarray, law: RootLaw, train: Comparisons, test: Comparisons | None = None,
             theta_true: np.ndarray | None = None) -> dict[str, float]:
    out = {"eval/train_sq_err": sq_err(theta, train, law)}
    held = test if test is not None and len(test) else None
    out["eval/sq_err"] = sq_err(theta, held, law) if held is not None else out["eval/train_sq_err"]
    out["eval/in_sample"] = float(held is None)
    out["eval/const0_sq_err"] = float(np.mean(held.r ** 2)) if held is not None else float(np.mean(train.r ** 2))
    if theta_true is not None:
        out["eval/nmse"] = nmse(theta, theta_true)
    seen = np.zeros(train.n_items, bool)
    seen[train.a] = True
    seen[train.b] = True
    out["data/items_compared"] = float(seen.sum())
    return out
