"""Weak-shot keypoint estimation via keyness and correspondence transfer (Chen et al., NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.weakshot_keypoint"

SPEC = MethodSpec(
    slug="weakshot_keypoint",
    title="Weak-shot keypoint estimation: keyness and correspondence transfer from base to novel classes",
    paper="Chen, Luo, Liu, Jiang, Niu, Fang. Weak-shot Keypoint Estimation via Keyness and Correspondence Transfer. "
          "NeurIPS 2025 (arXiv id not located)",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    family="vision",
)
