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


# Issue 44 (a FAIL needs the official code on the point in question): AGBAL's own code was never found (spec); its
# selection is the framework's LCMD, compared here with the framework's official code. Static: no run changes it.
OFFICIAL_ROWS = (
    ("base kernel", "`algorithms.BatchSelectorImpl.select`: `ll` = gradient features of the last layer, [a, 1] (x "
     "its weight / bias factors in the benchmark nets); the README's recommended LCMD uses sketched full-gradient "
     "features (`lcmd-tp_grad_rp-512`)", "`model.FeatureMap`: `ll` = last hidden activations a, no bias column",
     "ll: a constant column and a global factor apart, which leave plain LCMD's choice unchanged; Claim 2 runs ll"),
    ("distance", "`features.Features.get_sq_dists`: diag + diag - 2K (float32)", "`maths.sq_dists`: the same, "
     "float64, clipped at 0", "matches (precision only)"),
    ("labelled points", "`selection.IterativeSelectionMethod.select`, `sel_with_train=True` (TP mode): every "
     "training point is a centre before the first pick", "`maths.lcmd`: every labelled input is a centre",
     "matches"),
    ("largest cluster", "`LargestClusterMaxDistSelectionMethod.get_scores`: `bincount` of the members' squared "
     "distances (`dist_weight_mode='sq-dist'`)", "`maths.lcmd`: the same bincount, argmax", "matches (ties: "
     "official scans every tied cluster, ours the first)"),
    ("pick and update", "farthest member of that cluster; it becomes a centre (`add`); random fill if selection "
     "fails", "the same; no random fill", "matches"),
    ("network behind the features", "`models.create_tabular_model`: 2 x 512 ReLU, NTK parametrisation, 256 "
     "epochs, best-validation weights", "2 x 128 SiLU (the job files; the spec names 3 x 512), standard "
     "parametrisation, 100 epochs, no validation", "differs, the same for both arms of Claim 2"),
    ("AGBAL's sqrt(u) k sqrt(u')", "no such transform in the framework", "`acquire._select`: features x "
     "sqrt(u / mean u), then the same `maths.lcmd`; constant u gives exactly LCMD", "ours only; without the "
     "[a, 1] bias column the term (sqrt(u) - sqrt(u'))^2 is missing from the scaled distance"),
)


def official_comparison() -> list[str]:
    """Markdown: the official-code comparison of Claim 2's baseline (LCMD) and of AGBAL's kernel scaling."""
    head = ["point", "official (dholzmueller/bmdal_reg at 08c28e1, 2024-10-03, bmdal_reg/bmdal/)", "ours", "verdict"]
    return ["### Official code comparison (issue 44)", "",
            "AGBAL's own code was not found (spec: 'official code: none found'); AGBAL runs the framework's LCMD on "
            "a surrogate-scaled kernel, so Claim 2's point in question, LCMD and what AGBAL changes in it, is "
            "compared with the framework's official code (Holzmueller et al., JMLR 2023).", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(row) + " |" for row in OFFICIAL_ROWS), "",
            "Verdict: Claim 2's baseline is the official LCMD-TP on last-layer features (the same picks up to float "
            "precision and ties), so the small margin is not a weaker baseline than the framework's. What differs "
            "is AGBAL's own part: the gap moves with the propagation that feeds sqrt(u) (krr 0.009, nw 0.028 on "
            "the same LCMD runs, table above); one reading, not tested here, is that krr's zero-mean ridge "
            "regression sends u to 0 away from the auxiliary points and shrinks both centres and candidates there "
            "toward the origin, where LCMD then never looks.", ""]
