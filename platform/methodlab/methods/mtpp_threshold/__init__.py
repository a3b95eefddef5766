"""Addressing Mark Imbalance in Integration-free Neural Marked Temporal Point Processes (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.mtpp_threshold"

SPEC = MethodSpec(
    slug="mtpp_threshold",
    title="IFNMTPP: mark-first prediction with prior-normalised learned thresholds for imbalanced MTPPs",
    paper="Liu, Deng, Ren, Wang, Zhang. NeurIPS 2025. arXiv 2510.20414",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"calibrate": f"{_PKG}.settings:calibrate", "evaluate": f"{_PKG}.settings:evaluate_only",
              "simulate": f"{_PKG}.settings:simulate"},
    precisions=("fp32", "bf16"),
    precision_note="no fp16: the density -dGamma*/dtau is an inner autograd.grad that the GradScaler does not "
                   "scale (small densities and the tail difference G(tau) - G(inf) underflow fp16's range), and "
                   "the LSTM has no fp16 CPU kernel (oneDNN refuses it); bf16 keeps fp32's range (smoke: test NLL "
                   "within 0.001 of fp32)",
    no_compile="the model has no single forward: the loss calls its parts and takes the density -dGamma*/dtau "
               "by torch.autograd.grad(create_graph=True) inside the loss (a double backward), which torch.compile "
               "does not support",
    single_worker_settings={
        "calibrate": "calibrates thresholds of one trained model on held-out sequences: no training to split",
        "evaluate": "scores one checkpoint: no training to split",
        "simulate": "writes one generated dataset: every rank would repeat it",
    },
)
