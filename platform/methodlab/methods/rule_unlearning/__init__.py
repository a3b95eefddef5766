"""RULE: Reinforcement UnLEarning Achieves Forget-Retain Pareto Optimality (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.rule_unlearning"

SPEC = MethodSpec(
    slug="rule_unlearning",
    title="RULE: refusal-boundary reinforcement unlearning (Rejection Steering + ReBO GRPO)",
    paper="RULE: Reinforcement UnLEarning Achieves Forget-Retain Pareto Optimality. NeurIPS 2025. arXiv 2506.07171",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"rebo_grpo": f"{_PKG}.train:fit", "pretrain_tiny_lm": f"{_PKG}.train:fit_pretrain",
              "rs_sft": f"{_PKG}.train:fit_rs", "eval": f"{_PKG}.train:fit_eval",
              "baseline": f"{_PKG}.train:fit_baseline"},
    family="core",
    single_worker_settings={
        "eval": "evaluates one checkpoint: no training to split",
    },
)
