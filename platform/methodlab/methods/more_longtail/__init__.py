"""MORE: long-tailed recognition with model rebalancing via a low-rank parameter component (Luo, Hong, Hu, Cao,
Liu, Yao; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.more_longtail"

SPEC = MethodSpec(
    slug="more_longtail",
    title="MORE: model rebalancing with a low-rank parameter component for long-tailed classification",
    paper="Luo, Hong, Hu, Cao, Liu, Yao. Long-tailed Recognition with Model Rebalancing. NeurIPS 2025. arXiv 2510.08177",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:main",
    settings={"merge_export": f"{_PKG}.train:fit_merge_export"},
    family="core",
)
