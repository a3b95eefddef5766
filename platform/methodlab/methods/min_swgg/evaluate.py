"""Plan baselines on the same clouds: exact OT (ot.emd), min-SWGG random search (POT's
ot.sliced.min_sliced_transport_plan) at DGSWP's evaluation budget and with 20 directions, and a random
permutation. All costs are mean squared Euclidean costs of matched pairs (the scale of h and W2^2)."""

from __future__ import annotations

import numpy as np
import ot
import torch


def exact_plan_cost(x: np.ndarray, y: np.ndarray) -> float:
    """W2^2 between uniform measures on x (n points) and y (m points)."""
    n, m = len(x), len(y)
    M = ot.dist(x, y)  # squared Euclidean
    return float(ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), M, numItermax=10_000_000))


def random_search_cost(x: np.ndarray, y: np.ndarray, n_projections: int, seed: int) -> float:
    """POT's min-SWGG (min-pivot sliced) with n_projections random directions: cost of the best lifted plan."""
    out = ot.sliced.min_sliced_transport_plan(x, y, n_projections=n_projections, seed=seed, dense=False)
    return float(out[1])


def plan_baselines(x: torch.Tensor, y: torch.Tensor, budget: int, seed: int) -> dict[str, float]:
    """POT's solvers are numpy: the clouds are read back to the host once, before the fit."""
    xs, ys = x.detach().double().cpu().numpy(), y.detach().double().cpu().numpy()
    w2 = exact_plan_cost(xs, ys)
    rng = np.random.default_rng(seed + 5)
    rand = float(((xs - ys[rng.permutation(len(ys))]) ** 2).sum(1).mean())
    rs_budget = random_search_cost(xs, ys, budget, seed)
    rs20 = random_search_cost(xs, ys, 20, seed)
    return {"plan/w2_exact": w2, "plan/rs_budget_h": rs_budget, "plan/rs20_h": rs20, "plan/random_perm_h": rand,
            "plan/rs_budget_over_w2": rs_budget / w2, "plan/rs20_over_w2": rs20 / w2,
            "plan/random_perm_over_w2": rand / w2, "plan/rs_budget": float(budget)}
