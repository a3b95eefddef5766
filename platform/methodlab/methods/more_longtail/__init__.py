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
    reproduce=f"{_PKG}.reproduce:study",
    settings={"merge_export": f"{_PKG}.train:fit_merge_export"},
    family="core",
    precisions=("fp32", "fp16"),
    precision_note="MORE's loss is the squared difference of two paths' logits, W_g + B A against W_g, with B A about "
                   "1 % of W_g late in training; bf16 (8-bit mantissa, 0.4 % of W_g) rounds that tail away: on "
                   "digits-LT the measured MORE loss settles at 5e-4 instead of 1e-4 (noise, not the "
                   "discrepancy); fp16 (11 bits) tracks fp32",
    single_worker_settings={
        "merge_export": "folds one checkpoint's low-rank part into W and exports it: no training",
    },
)
