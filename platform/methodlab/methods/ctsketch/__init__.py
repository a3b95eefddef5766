"""CTSketch: compositional tensor sketching for scalable neurosymbolic learning (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.ctsketch"

SPEC = MethodSpec(
    slug="ctsketch",
    title="CTSketch: sum / max of N digits through a tree of low-rank program-tensor sketches",
    paper="Choi, Solko-Breslin, Alur, Wong. CTSketch: Compositional Tensor Sketching for Scalable Neurosymbolic "
          "Learning. NeurIPS 2025. arXiv 2503.24123",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"sketch_only": f"{_PKG}.train:fit_sketch_only", "baseline.exact": f"{_PKG}.train:fit_exact",
              "baseline.exact_conv": f"{_PKG}.train:fit_exact_conv", "baseline.indecater": f"{_PKG}.train:fit_indecater"},
    single_worker_settings={
        "sketch_only": "builds and scores the tensor sketches of each level once: no training to split",
    },
)
