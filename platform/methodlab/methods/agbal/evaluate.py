"""Test-set metrics of one round, and AUC_log = mean ln RMSE over rounds 1..R (the spec's acceptance metric)."""

from __future__ import annotations

import math

import numpy as np


def evaluate(y_hat: np.ndarray, y: np.ndarray) -> dict[str, float]:
    err = np.asarray(y_hat, dtype=float) - np.asarray(y, dtype=float)
    rmse = float(np.sqrt(np.mean(err ** 2)))
    return {"eval/rmse": rmse, "eval/mae": float(np.mean(np.abs(err))), "eval/log_rmse": math.log(max(rmse, 1e-300))}


def auc_log(log_rmse_by_round: list[float]) -> float:
    """Mean of ln RMSE over rounds 1..k (round 0 = the initial labelled set alone; used only while k = 0)."""
    vals = log_rmse_by_round[1:] or log_rmse_by_round[:1]
    return float(np.mean(vals))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    v = float(spearmanr(a, b).statistic)
    return v if math.isfinite(v) else 0.0
