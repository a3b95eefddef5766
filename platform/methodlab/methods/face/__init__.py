"""FACE: mapping collaborative-filtering embeddings into LLM tokens (NeurIPS 2025, arXiv 2510.15729)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.face"

SPEC = MethodSpec(
    slug="face",
    title="FACE: mapping CF embeddings to LLM tokens (quantised descriptors + contrastive alignment)",
    paper="FACE: A General Framework for Mapping Collaborative Filtering Embeddings into LLM Tokens. NeurIPS 2025. arXiv 2510.15729",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"explain": f"{_PKG}.train:explain"},
    family="rec",
    single_worker_settings={
        "explain": "writes one checkpoint's descriptors: no training to split",
    },
)
