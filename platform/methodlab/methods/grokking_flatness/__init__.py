"""Flatness is Necessary, Neural Collapse is Not: Rethinking Generalization via Grokking (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.grokking_flatness"

SPEC = MethodSpec(
    slug="grokking_flatness",
    title="Grokking probe: neural collapse vs relative flatness",
    paper="Han, Adilova, Petzka, Kleesiek, Kamp. NeurIPS 2025. arXiv 2509.17738",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"measure": f"{_PKG}.settings:fit_measure"},
    single_worker_settings={
        "measure": "measures a trained checkpoint's flatness once: no training to split",
    },
)
