"""Typed config of grokking_flatness. Defaults are the paper's values (2 layers, lr 1e-4, 1e5 steps);
the calibrated 2-core CPU setting is the preset jobs/grokking_flatness/cpu.yaml."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig
from methodlab.data.modular import OPS, is_prime

Regularizer = Literal["none", "collapse_prevent", "collapse_encourage", "anti_flat"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/accuracy"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/accuracy", "rf", "cdnv", "train/accuracy", "val/loss")
    smoke: ClassVar[dict] = {"p": 23, "n_layers": 1, "d_model": 64, "train_frac": 0.5, "lr": 3e-3,
                             "max_steps": 300, "log_every": 50, "checkpoint_every": 150}

    seed: int = Field(42, description="Seed of init, batch order and (unless split_seed) the split.")
    task: Literal["modular", "digits"] = Field("modular", description="Modular arithmetic transformer, or the MLP on sklearn digits.")

    # --- modular arithmetic data -----------------------------------------------------------------
    p: int = Field(97, ge=3, le=211, description="Prime modulus.")
    op: Literal[OPS] = Field("+", description="Binary operation a op b mod p.")  # type: ignore[valid-type]
    train_frac: float = Field(0.2, gt=0.0, lt=1.0, description="Fraction of all p^2 equations used for training.")
    split_seed: int | None = Field(None, description="Seed of the train/val split (None: the run seed).")

    # --- transformer -------------------------------------------------------------------------------
    n_layers: int = Field(2, ge=1, le=8)
    n_heads: int = Field(4, ge=1, le=16)
    d_model: int = Field(128, ge=8, le=1024)
    ffn_mult: int = Field(4, ge=1, le=8)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    norm_first: bool = Field(False, description="[RECON] False: post-LayerNorm blocks as in grok; True: pre-LN.")

    # --- digits variant ----------------------------------------------------------------------------
    digits_hidden: int = Field(256, ge=8, le=4096, description="Width of the 64-h-h-10 MLP.")
    digits_train_subset: int | None = Field(None, ge=20, description="Train on a stratified subset of this size.")

    # --- optimisation ------------------------------------------------------------------------------
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(1e-4, gt=0.0, le=1.0)
    weight_decay: float = Field(1.0, ge=0.0, le=10.0, description="Decoupled (AdamW, to zero) weight decay.")
    wd_params: Literal["all", "weights"] = Field(
        "all", description="[RECON] all: decay every parameter (grok); weights: only weight matrices, not LayerNorm, "
                           "biases or embeddings (minGPT convention; keeps lr 3e-3 stable on the CPU preset).")
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = Field(1e-8, gt=0.0)
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="SGD momentum (digits variant).")
    warmup_steps: int = Field(10, ge=0)
    batch_size: int = Field(512, ge=1, le=65536, description="Capped at ceil(n_train / 2) as in grok.")
    grad_clip: float | None = Field(None, gt=0.0, description="Clip the global gradient norm (None: no clipping, as in grok).")
    lr_decay_start: int | None = Field(
        None, ge=0, description="[calibrated] From this step cosine-anneal the LR to lr_min over lr_decay_steps "
                                "(None: constant LR after warm-up, as in grok). Absolute steps, so every arm shares it.")
    lr_decay_steps: int = Field(2000, ge=1, description="Length of the cosine anneal (then lr_min).")
    lr_min: float = Field(1e-4, ge=0.0, description="LR at the end of the anneal.")
    max_steps: int = Field(100_000, ge=1)

    # --- regularizers ------------------------------------------------------------------------------
    reg: Regularizer = Field("none", description="none | collapse_prevent | collapse_encourage | anti_flat")
    lam: float | None = Field(None, gt=0.0, le=10.0, description="Strength; None: 1e-3 (collapse) or 1e-2 (anti_flat).")
    tau: float = Field(2.0, gt=0.0, description="Softmax temperature of the anti-flat term.")
    w_cap: float = Field(150.0, gt=0.0, description="Frobenius cap on the readout after every step (anti_flat).")
    cancel_step: int | None = Field(None, ge=0, description="Anti-flat switched off here (None: max_steps // 2).")
    lr_bump: float = Field(10.0, gt=0.0, description="LR multiplier at cancellation (ResNet recipe: 10).")
    cancel_weight_decay: float | None = Field(2e-4, ge=0.0, description="Weight decay after cancellation (None: keep).")
    cancel_cosine: bool = Field(True, description="Cosine-anneal to 1e-4 after cancellation.")

    # --- measurement / logging ---------------------------------------------------------------------
    rf_position: Literal["answer", "official_pair"] = Field(
        "answer", description="[RECON] answer: measures at the c position; official_pair: grok's product of both RHS logits.")
    log_every: int = Field(50, ge=1, description="Steps between measurements (dense phase).")
    log_dense_until: int = Field(2000, ge=0, description="After this step logs may thin out by log_growth.")
    log_growth: float = Field(1.0, ge=1.0, le=2.0, description="Official code: 1.01 (log-spaced logs).")
    checkpoint_every: int = Field(1000, ge=1)
    stop_at_val_acc: float | None = Field(None, gt=0.0, le=1.0, description="Stop stop_after_steps after val acc reaches this.")
    stop_after_steps: int = Field(100, ge=0)
    stop_not_before: int = Field(0, ge=0, description="stop_at_val_acc never stops the run before this step (the "
                                 "reproduction's collapse arms: the baseline's horizon, so both runs end at one step).")
    measure_from: str | None = Field(None, description="Setting 'measure': checkpoint directory to re-measure.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this (None: the job's).")

    @model_validator(mode="after")
    def _check(self):
        if self.task == "modular" and not is_prime(self.p):
            raise ValueError(f"p={self.p} must be prime (the '/' table and the paper's setting need a field)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        return self

    @property
    def lam_value(self) -> float:
        if self.lam is not None:
            return self.lam
        return 1e-2 if self.reg == "anti_flat" else 1e-3

    @property
    def cancel_at(self) -> int:
        return self.max_steps // 2 if self.cancel_step is None else self.cancel_step
