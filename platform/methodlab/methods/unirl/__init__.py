"""Uni-RL: Unifying Online and Offline RL via Implicit Value Regularization (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.unirl"

SPEC = MethodSpec(
    slug="unirl",
    title="Uni-RL: online, offline and offline-to-online RL on one IVR objective",
    paper="Xu, Mao, Jin, Zhang, Zhan, Zhang. NeurIPS 2025. openreview mjZi8cV18P",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={
        "offline": f"{_PKG}.settings:fit_offline",
        "online": f"{_PKG}.settings:fit_online",
        "offline_to_online": f"{_PKG}.settings:fit_offline_to_online",
        "make_dataset": f"{_PKG}.settings:fit_make_dataset",
    },
    family="rl",
    single_worker_settings={
        "make_dataset": "the dataset generator is one reference SAC run whose replay and snapshot policies become the "
                        "files: the unit of work is the whole run (every rank would repeat it with the same seed and "
                        "write the same files); run it on one worker, and seeds or envs side by side as separate jobs",
    },
    precisions=("fp32",),
    precision_note="Q and V regress discounted returns of order 1e2-1e3 (Pendulum, MuJoCo): a bf16 forward rounds "
                   "their outputs to steps of 1-4 (fp16: 0.25-0.5), the size of the TD errors being learned; "
                   "not shown harmless, so float32 only",
)
