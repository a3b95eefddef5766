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
    reproduce=f"{_PKG}.reproduce:study",
    family="graph",
    precisions=("fp32", "bf16"),
    precision_note="fp16 is left out: the graph-reprogramming step differentiates the loss with torch.autograd.grad "
                   "with respect to Delta X and the flip probabilities and steps their own Adam (row-sparse in "
                   "neighbour mode), outside the GradScaler, so its fp16 gradients would be unscaled and underflow; "
                   "bf16 needs no scaling",
)
