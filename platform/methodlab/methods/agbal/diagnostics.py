"""Side study of the surrogate check (spec: Acceptance, surrogate check), run by the reproduction as a harness Task.

On hetero_1d after round 0's training on the initial labelled set: how well each density-ratio estimate matches
the analytic ratio, and the Spearman correlation of u(x) with the true squared error on the unlabelled pool for the
estimated ratio (logistic: AGBAL's, and an MLP classifier), the TRUE ratio (the oracle the spec reports beside the
claim) and r = 1, under both propagations (nw, krr). Everything is computed with the method's own functions
(fit_ratio, train_round, surrogate) on the config of the study's hetero_1d arm."""

from __future__ import annotations

import numpy as np

RATIOS = ("logistic", "mlp", "true", "r=1")
PROPAGATIONS = ("nw", "krr")


def surrogate_oracle(cfg) -> dict:
    """{"relerr_<model>": median relative error of the ratio estimate, "<propagation>/<ratio>": Spearman(u, true
    squared error on the pool)} for the round-0 model of `cfg` (an agbal Config on a generator with an analytic
    ratio)."""
    from methodlab.core.device import set_threads

    before = set_threads(1)  # one thread, as the study's runs (the task runs in the harness's own process)
    try:
        return _oracle(cfg)
    finally:
        set_threads(before)


def _oracle(cfg) -> dict:
    from methodlab.methods.agbal import maths
    from methodlab.methods.agbal.acquire import surrogate
    from methodlab.methods.agbal.data import build_task
    from methodlab.methods.agbal.evaluate import spearman
    from methodlab.methods.agbal.train import fit_ratio, train_round

    out: dict = {}
    ratios = {}
    task = None
    for model in ("logistic", "mlp"):
        c = cfg.model_copy(update={"ratio_model": model})
        task = build_task(c)
        _, r, diag = fit_ratio(c, task)
        out[f"relerr_{model}"] = diag["ratio/median_rel_err"]
        ratios[model] = r
    st = train_round(cfg, task, list(task.labeled), 0, ratios["logistic"])
    rest = np.setdiff1d(np.arange(len(task.x_pool)), task.labeled)
    true_sq = (st.predict(task.x_pool[rest]) - task.y_pool[rest]) ** 2
    ratios["true"] = maths.clip_normalise(task.true_ratio(task.x_aux), cfg.ratio_clip)
    ratios["r=1"] = np.ones(len(task.x_aux))
    for prop in PROPAGATIONS:
        c = cfg.model_copy(update={"propagation": prop})
        for name, r in ratios.items():
            st.r_aux = r
            out[f"{prop}/{name}"] = spearman(surrogate(c, st, task.x_pool[rest], weighted=True), true_sq)
    out["h_prop"] = float(st.h_prop)
    return out
