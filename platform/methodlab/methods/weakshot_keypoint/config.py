"""Typed config of weakshot_keypoint. The paper's method section was not recovered: every loss, window, weight
and threshold is a platform design choice (P) of the spec (methods/weakshot_keypoint.md), each a field.
Windows and offsets are in feature-map CELLS (stride `stride`); distances in evaluation are input pixels."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/val_pck@0.2"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/val_pck@0.2", "eval/val_pck@0.1", "eval/pck@0.2", "train/loss")
    smoke: ClassVar[dict] = {
        "n_base": 4, "n_novel": 1, "base_images": 40, "novel_unlabeled": 40, "novel_val": 12, "novel_test": 20,
        "image_size": 32, "window": 5, "stage1_steps": 20, "stage2_steps": 20, "batch_pairs": 6, "novel_pairs": 3,
        "pseudo_refresh_every": 10, "log_every": 10, "checkpoint_every": 10, "channels": 16,
    }
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {
        "stage2_steps", "log_every", "checkpoint_every"}

    seed: int = Field(0, description="Training seed (model init, episodes). The data set uses data_seed.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads (the job's "
                                      "cpus_per_worker) for this run (ctx.limit_threads); None: the runner's count.")

    # --- schedule / protocol ----------------------------------------------------------------------------
    stage: Literal["both", "pretrain", "transfer", "eval"] = Field(
        "both", description="both: stage 1 then stage 2 in one run; pretrain: stage 1 (base classes) only; "
        "transfer: stage 2 from init_from; eval: no training, evaluate init_from (base-only baseline / any checkpoint).")
    init_from: str | None = Field(None, description="Checkpoint (or run folder) that stage 2 / eval starts from.")
    stage2_mode: Literal["transfer", "naive"] = Field(
        "transfer", description="transfer: keyness + correspondence transfer; naive: self-training on raw pseudo labels.")
    support_shots: Literal[0, 1] = Field(
        1, description="(P) 1: each novel class has one labelled support at test; 0: keyness pseudo-support, "
        "assignment-matched evaluation (mapping fitted on the labelled novel validation images).")
    novel_unlabeled_source: Literal["train_split", "test_half"] = Field(
        "train_split", description="(P) Unlabeled novel images: the synthetic novel_train split, or MP-100 test-category half.")

    # --- data -----------------------------------------------------------------------------------------------
    data: Literal["synthetic", "mp100"] = Field("synthetic", description="Procedural classes or MP-100 files.")
    data_seed: int = Field(0, description="Seed of the rendered synthetic set (shared by all training seeds).")
    n_base: int = Field(12, ge=1, le=100, description="Synthetic base classes (labelled).")
    n_novel: int = Field(4, ge=1, le=50, description="Synthetic novel classes (unlabeled).")
    base_images: int = Field(200, ge=4, le=10_000, description="Images per base class.")
    novel_unlabeled: int = Field(300, ge=4, le=10_000, description="Unlabeled training images per novel class.")
    novel_val: int = Field(50, ge=2, le=10_000, description="Labelled validation images per novel class (Tune, assignment).")
    novel_test: int = Field(100, ge=2, le=10_000, description="Labelled test images per novel class.")
    image_size: int = Field(64, ge=16, le=512, description="Input side in pixels (64 CPU, 256 GPU).")
    data_root: str | None = Field(None, description="MP-100 folder (annotations + images).")
    split: int = Field(1, ge=1, le=5, description="MP-100 split.")
    max_per_category: int | None = Field(None, ge=2, description="MP-100: cap annotations per category.")

    # --- model ----------------------------------------------------------------------------------------------
    stride: Literal[2, 4, 8] = Field(2, description="Feature-map stride s (2 CPU, 8 GPU); windows are in cells of it.")
    channels: int = Field(32, ge=4, le=512, description="Backbone width.")
    embed: int = Field(32, ge=4, le=512, description="Matching / descriptor width.")
    match_layers: int = Field(1, ge=0, le=6, description="CapeFormer-style refinement layers (self + cross attention).")
    conf_radius: int = Field(1, ge=0, le=5, description="Confidence c_j = heatmap mass within this many cells of the argmax (P).")

    # --- losses ---------------------------------------------------------------------------------------------
    window: int = Field(7, ge=3, le=31, description="Keyness window r in cells (odd).")
    keyness_temp: float = Field(0.1, gt=0, le=10, description="Temperature of softmax(k / T) in the keyness soft-argmax.")
    tau_c: float = Field(0.07, gt=0, le=5, description="Correspondence temperature.")
    corr_window: int = Field(9, ge=3, le=63, description="(P) Local correspondence search window in cells around the pseudo label.")
    heatmap_sigma: float = Field(1.0, gt=0, le=10, description="Gaussian target (cells) of the pose heatmap CE.")
    w_key: float = Field(1.0, ge=0, le=100, description="Weight of L_key (stage 1 and base batches of stage 2).")
    w_corr: float = Field(1.0, ge=0, le=100, description="Weight of L_corr.")
    lambda_kt: float = Field(1.0, ge=0, le=100, description="Weight of the keyness transfer L_kt.")
    lambda_ct: float = Field(1.0, ge=0, le=100, description="Weight of the correspondence transfer L_ct + L_cs.")
    cs_term: bool = Field(True, description="(P) Include L_cs = -w log s(p^I, p^J) (descriptors detached).")
    conf_threshold: float = Field(0.3, ge=0, le=1, description="Pseudo-label confidence gate on c_j.")
    ema_decay: float = Field(0.999, ge=0, le=1, description="EMA teacher decay.")
    test_time_polish: bool = Field(False, description="Move p_j to the keyness max inside W(p_j) if the gain > polish_margin.")
    polish_margin: float = Field(0.5, ge=0, le=100, description="Keyness gain needed by the polish.")

    # --- optimisation ---------------------------------------------------------------------------------------
    lr: float = Field(1e-3, gt=0, le=1, description="Adam lr (1e-3 CPU, 1e-4 GPU).")
    lr_stage2: float | None = Field(None, gt=0, le=1, description="Stage-2 lr; None: lr.")
    stage1_steps: int = Field(250, ge=0, le=10_000_000, description="Stage-1 steps of batch_pairs (support, query) pairs.")
    stage2_steps: int = Field(120, ge=0, le=10_000_000, description="Stage-2 steps per arm.")
    batch_pairs: int = Field(16, ge=1, le=4096, description="Base (support, query) pairs per step.")
    novel_pairs: int = Field(8, ge=1, le=4096, description="Novel (I, J) pairs per stage-2 step.")
    pseudo_refresh_every: int = Field(40, ge=1, description="Stage-2 steps between pseudo-label refreshes (EMA teacher).")

    # --- logging --------------------------------------------------------------------------------------------
    log_every: int = Field(40, ge=1, description="Steps between reports (each evaluates on novel val + test).")
    checkpoint_every: int = Field(120, ge=1, description="Steps between checkpoints.")
    eval_pcks: tuple[float, ...] = Field((0.05, 0.1, 0.2), description="PCK thresholds (x max(bbox w, h)).")
    sanity_checks: bool = Field(False, description="At the final report, also the spec's sanity checks of the heads "
                                "on novel test images (sanity/*: keyness top-3 in r x r windows with Harris beside, "
                                "correspondence top-1 on 200 pairs per class with the identity copy; eval seed 0).")

    @model_validator(mode="after")
    def _check(self):
        if self.window % 2 == 0:
            raise ValueError("window must be odd (centred windows)")
        if self.corr_window % 2 == 0:
            raise ValueError("corr_window must be odd")
        if self.image_size % self.stride:
            raise ValueError("image_size must be a multiple of stride")
        if self.stage in ("transfer", "eval") and not self.init_from:
            raise ValueError(f"stage={self.stage} needs init_from (a stage-1 checkpoint or run folder)")
        if self.data == "mp100" and not self.data_root:
            raise ValueError("data=mp100 needs data_root")
        return self
