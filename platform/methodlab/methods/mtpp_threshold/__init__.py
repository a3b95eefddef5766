"""Addressing Mark Imbalance in Integration-free Neural Marked Temporal Point Processes (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.mtpp_threshold"

SPEC = MethodSpec(
    slug="mtpp_threshold",
    title="IFNMTPP: mark-first prediction with prior-normalised learned thresholds for imbalanced MTPPs",
    paper="Liu, Deng, Ren, Wang, Zhang. NeurIPS 2025. arXiv 2510.20414",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:main",
    settings={"calibrate": f"{_PKG}.jobs:calibrate", "evaluate": f"{_PKG}.jobs:evaluate_only",
              "simulate": f"{_PKG}.jobs:simulate"},
)
