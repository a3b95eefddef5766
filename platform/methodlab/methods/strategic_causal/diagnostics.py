"""strategic_causal side studies, run as harness Tasks by reproduce.py (each `fn(seed, inputs, mode)` -> a JSON
dict): claim A's closed forms against the generic convex solver (with the cvd_scm_v2 noise scales), the
accuracy-q Pareto front over beta of the causal and C = I l2 designs, and the WHAS500 sign check of two SCM
edges. Every design goes through the method's own fit_design / evaluate (the code of `fit`)."""

from __future__ import annotations

import numpy as np

from methodlab.methods.strategic_causal import model as M
from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.data import build_problem
from methodlab.methods.strategic_causal.evaluate import evaluate
from methodlab.methods.strategic_causal.train import fit_design

BETAS = tuple(round(0.1 * k, 1) for k in range(11))
COSTS = (("l2", 2.0), ("l1 (budget)", 1.0), ("l1.5", 1.5))


def closed_forms(n: int, seed: int) -> dict[str, float]:
    """max |e_closed - e_solver| per cost over n random (C, w, a) (d in 3..8, random DAGs in a shuffled order)."""
    rng = np.random.default_rng(seed)
    worst = {name: 0.0 for name, _ in COSTS}
    for _ in range(n):
        d = int(rng.integers(3, 9))
        B = np.triu(rng.normal(0, 0.6, (d, d)) * (rng.random((d, d)) < 0.5), 1)
        perm = rng.permutation(d)
        C = M.contribution_matrix(B[np.ix_(perm, perm)])
        w, a = rng.normal(size=d), rng.uniform(0.2, 2.0, d)
        g = M.gains(C, w)
        for name, p in COSTS:
            diff = np.max(np.abs(M.best_response(g, a, p, 1.0) - M.best_response_numeric(g, a, p, 1.0)))
            worst[name] = max(worst[name], float(diff))
    return worst


def maths(seed: int, inputs: dict, mode: str) -> dict:
    """Claim A on 100 random problems (20 under --quick), and the cvd_scm_v2 unit-variance noise scales."""
    from methodlab.data.strategic_causal_scm import CVD_NAMES, cvd_graph, unit_variance_scales

    n = 20 if mode == "quick" else 100
    worst = closed_forms(n, seed)
    scales = unit_variance_scales(cvd_graph("cvd_scm_v2"))
    return {"n_problems": n, "worst": worst, "max_abs_diff": max(worst.values()),
            "noise_scales": {name: float(v) for name, v in zip(CVD_NAMES, scales)}}


def pareto(seed: int, inputs: dict, mode: str) -> dict:
    """Test accuracy, true q (and the C = I design's believed q) of the l2 designs over beta in {0, .1, ..., 1}."""
    prob = build_problem(Config(seed=seed, n=5000))
    out: dict = {"causal": [], "unaware": []}
    for kind in ("causal", "unaware"):
        for beta in BETAS:
            cfg = Config(seed=seed, n=5000, beta=beta, design=kind)
            m = evaluate(fit_design(cfg, prob, kind, 2.0), prob, cfg, p=2.0, prefix="m")
            out[kind].append({"beta": beta, "accuracy": m["m/accuracy"], "q": m["m/q"],
                              "believed_q": m.get("m/believed_q")})
    lr = evaluate(M.accuracy_only(prob.X_train, prob.y_train), prob, Config(seed=seed), p=2.0, prefix="m")
    out["lr"] = {"accuracy": lr["m/accuracy"], "q": lr["m/q"]}
    return out


def whas500(seed: int, inputs: dict, mode: str) -> dict:
    """OLS of standardised sysbp on standardised age and bmi (WHAS500) with 95 % bootstrap intervals (1,000
    resamples; 200 under --quick): a sign check of the SCM's A -> SBP and BMI -> SBP edges, no pass / fail."""
    try:
        from methodlab.data.strategic_causal_scm import load_whas500

        d = load_whas500()
    except Exception as err:  # noqa: BLE001 - a missing optional source is said in the report
        return {"error": f"not run: {err}"}
    z = {k: (v - v.mean()) / v.std() for k, v in d.items()}
    X = np.column_stack([np.ones(len(z["age"])), z["age"], z["bmi"]])
    y = z["sysbp"]
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    rng = np.random.default_rng(seed)
    resamples = 200 if mode == "quick" else 1000
    boots = []
    for _ in range(resamples):
        i = rng.integers(0, len(y), len(y))
        boots.append(np.linalg.lstsq(X[i], y[i], rcond=None)[0])
    lo, hi = np.percentile(np.array(boots), [2.5, 97.5], axis=0)
    return {"n": int(len(y)), "resamples": resamples,
            **{k: [float(coef[i]), float(lo[i]), float(hi[i])] for i, k in ((1, "age"), (2, "bmi"))}}
