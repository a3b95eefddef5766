"""UGoDIT: unsupervised group deep image prior with transferable weights (Liang*, Alkhouri*, Gautam, Qu,
Ravishankar; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.ugodit"

SPEC = MethodSpec(
    slug="ugodit",
    title="UGoDIT: shared DIP encoder + M private decoders fitted on degraded measurements, encoder transferred to new ones",
    paper="Liang, Alkhouri, Gautam, Qu, Ravishankar. UGoDIT: Unsupervised Group Deep Image Prior Via Transferable "
          "Weights. NeurIPS 2025. arXiv 2505.11720",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"reconstruct": f"{_PKG}.train:fit_reconstruct"},
    family="imaging",
    single_worker="a deep image prior fits one reconstruction: the unit of work is a whole run (M <= 8 "
                  "measurements, each with its own decoder, one image per reconstruction), so there is no batch to "
                  "shard",
)
