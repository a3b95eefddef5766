"""Causal strategic classification: best responses through a contribution matrix, causal-aware designs that
induce desirable effort, and effort under uncertainty (Efthymiou, Podimata, Sen, Ziani; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.strategic_causal"

SPEC = MethodSpec(
    slug="strategic_causal",
    title="Strategic classification with causal features: best responses, causal-aware designs, effort under uncertainty",
    paper="Efthymiou, Podimata, Sen, Ziani. Incentivizing Desirable Effort Profiles in Strategic Classification: "
          "The Role of Causality and Uncertainty. NeurIPS 2025. arXiv 2502.06749",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"best_response": f"{_PKG}.train:fit_best_response",
              "uncertainty_sweep": f"{_PKG}.train:fit_uncertainty_sweep",
              "audit": f"{_PKG}.train:fit_audit"},
    family="causal",
    cpu_only="numpy / scipy by nature: SLSQP designs, closed-form best responses and Monte Carlo on small "
             "d x d matrices, with no torch network to put on a GPU",
    precisions=("fp32",),
    precision_note="no torch network: the maths is numpy float64, so autocast has nothing to act on",
    no_compile="no torch module to compile (numpy / scipy)",
    single_worker="numpy / scipy: SLSQP designs and closed-form best responses, no gradient steps to average",
)
