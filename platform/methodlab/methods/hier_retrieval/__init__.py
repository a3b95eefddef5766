"""Hierarchical Retrieval: The Geometry and a Pretrain-Finetune Recipe (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.hier_retrieval"

SPEC = MethodSpec(
    slug="hier_retrieval",
    title="Dual encoders for hierarchical retrieval, with the pretrain-finetune recipe",
    paper="You, Jayaram, Suresh, Nittka, Yu, Kumar. NeurIPS 2025. arXiv 2509.16411",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"constructive": f"{_PKG}.settings:fit_constructive", "eval": f"{_PKG}.settings:fit_eval"},
    # train shards each step's pairs over the ranks (DDP); the other two settings train nothing
    single_worker_settings={"constructive": "a closed-form embedding construction and its dimension search, no "
                                            "gradient steps: every rank would repeat it",
                            "eval": "evaluates one checkpoint, no training: every rank would repeat it"},
)
