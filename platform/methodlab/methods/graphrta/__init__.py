"""GraphRTA: open-set graph domain adaptation by dual (graph + model) reprogramming (Zhang, He; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.graphrta"

SPEC = MethodSpec(
    slug="graphrta",
    title="GraphRTA: unsupervised open-set graph domain adaptation via graph and model reprogramming",
    paper="Zhang, He. Towards Unsupervised Open-Set Graph Domain Adaptation via Dual Reprogramming. NeurIPS 2025. "
          "arXiv 2510.18363",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:main",
    family="graph",
)
