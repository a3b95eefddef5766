"""DNS: dual-sided null-space projection for continual multimodal contrastive learning (Liu, Xia, Ng, Chua; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.cmcl"

SPEC = MethodSpec(
    slug="cmcl",
    title="CMCL / DNS: continual multimodal contrastive learning with dual-sided null-space gradient projection",
    paper="Liu, Xia, Ng, Chua. Continual Multimodal Contrastive Learning. NeurIPS 2025. arXiv 2503.14963",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    family="core",
)
