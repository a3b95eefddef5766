"""Typed config of cmcl (DNS, dual-sided null-space projection for continual multimodal contrastive
learning). Defaults are the official code's / spec's values; baselines are `method` settings."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, model_validator

from methodlab.core.method import MethodConfig

Method = Literal["dns", "vanilla", "ewc", "one_sided", "joint"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/r10"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/r10", "eval/r1", "eval/r5", "eval/bwt_r10", "train/loss_end")
    smoke: ClassVar[dict] = {"data": "digits", "steps": None, "n_steps": 3, "epochs": 1, "lr": 1e-3,
                             "eval_subsets": 1}

    def single_worker_reason(self, setting: str = "train") -> str | None:
        if self.dtype == "float64":
            return "dtype float64 is the exactness setting: data-parallel gradients are averaged in float32"
        return None

    seed: int = Field(0, description="Seed of the data generator, batch order and evaluation subsets.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads "
                                      "(scaling.cpus_per_worker) for this run; None: the runner's count.")
    method: Method = Field("dns", description="dns (the paper) | vanilla | ewc | one_sided (G - G P) | joint (upper reference).")

    # --- data -------------------------------------------------------------------------------------
    data: Literal["synthetic", "digits", "features"] = Field("synthetic", description="Latent binding generator, sklearn digits views, or pre-extracted feature files.")
    steps: list[str] | None = Field(None, description="Step sequence. synthetic/digits: 'a,b' pairs (None: the generator's default); features: '<dataset>:<a>,<b>'.")
    n_steps: int | None = Field(None, ge=1, le=64, description="Use only the first n steps of the sequence.")
    feature_root: str | None = Field(None, description="data=features: folder holding <dataset>/<split>/<modality>.npz|.parquet.")
    feature_format: Literal["auto", "hdf5"] = Field("auto", description="data=features: auto (.npz/.parquet per modality) or hdf5 (official layout, needs h5py).")
    encoder: str = Field("imagebind", min_length=1, max_length=64, description="hdf5: encoder tag in <dataset>_<split>_<encoder>.h5.")
    dataset_modalities: dict[str, list[str]] = Field(default_factory=dict, description="hdf5: each dataset's modality order (rows of a sample); steps may also use indices.")
    dim: int = Field(64, ge=2, le=8192, description="Feature width D (1024 ImageBind/UniBind, 768 LanguageBind; 64 synthetic/digits).")
    data_seed: int | None = Field(None, description="Seed of the generated data (None: seed).")
    latent: int = Field(16, ge=1, le=1024, description="synthetic: latent rank r.")
    n_classes: int = Field(20, ge=2, le=10_000, description="synthetic: classes K.")
    classes_per_step: int = Field(10, ge=1, le=10_000, description="synthetic: classes per step (subsets overlap).")
    n_train: int = Field(2000, ge=8, le=1_000_000, description="synthetic: training pairs per step.")
    n_test: int = Field(500, ge=8, le=1_000_000, description="synthetic: test pairs per step.")
    rot_alpha: float = Field(0.5, ge=0.0, le=10.0, description="synthetic: modality rotation strength alpha of expm(alpha S).")
    feature_noise: float = Field(0.05, ge=0.0, le=10.0, description="synthetic: feature noise sigma.")
    latent_noise: float = Field(0.3, ge=0.0, le=10.0, description="synthetic: within-class latent noise.")

    # --- optimisation (official: AdamW 1e-4, wd 1e-3, batch 64, 5 epochs, linear decay per step) -----
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="adamw (official) or sgd (exact stability with wd 0).")
    lr: float = Field(1e-4, gt=0.0, le=10.0, description="Peak learning rate (1e-3 for LanguageBind).")
    weight_decay: float = Field(1e-3, ge=0.0, le=1.0, description="Decoupled weight decay (AdamW) / L2 (SGD).")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="SGD momentum.")
    batch_size: int = Field(64, ge=2, le=65_536, description="Pairs per mini-batch (also the number of in-batch negatives).")
    epochs: int = Field(5, ge=1, le=1000, description="Epochs per continual step.")
    lr_schedule: Literal["linear", "constant"] = Field("linear", description="linear: decay to 0 within each step (HF Trainer default).")
    temperature: float = Field(1.0, gt=0.0, le=100.0, description="Logit temperature tau (official: 1).")
    symmetric: bool = Field(False, description="Add the column-wise CE (official: one direction, rows = first modality in canonical order).")
    train_bias: bool = Field(True, description="Train the head biases (official: yes).")
    dtype: Literal["float32", "float64"] = Field("float32", description="Head / feature precision (float64 for the exactness test).")

    # --- DNS ------------------------------------------------------------------------------------
    lambda_min: float = Field(0.01, ge=0.0, le=10.0, description="Input-side eigenvalue threshold (paper 0.01 IB/UB, 1e-4 LB; code 0.1).")
    lambda_partner: float = Field(0.0, ge=0.0, le=10.0, description="Partner-side threshold lambda' (code: 0, i.e. any positive eigenvalue).")
    rel_tol: float = Field(1e-7, ge=0.0, le=1e-2, description="Eigenvalues <= rel_tol * max are numerical zeros on both sides.")
    center_features: bool = Field(False, description="Centred covariances (paper text) instead of the code's uncentred second moments.")
    per_modality_counts: bool = Field(False, description="Per-modality sample counters (the code shares ONE global counter).")
    project_bias: bool = Field(False, description="Project bias gradients with (I - P~) (official: biases unprojected).")
    ewc_lambda: float = Field(1e4, ge=0.0, le=1e9, description="EWC penalty weight (diagonal Fisher on head weights and biases); not given by the spec, set by one probe on the synthetic preset (1e2: = Vanilla, 1e6: frozen).")

    # --- evaluation -----------------------------------------------------------------------------
    eval_pool: int = Field(1000, ge=2, le=1_000_000, description="Candidate pool per recall subset: min(eval_pool, n_test).")
    eval_subsets: int = Field(5, ge=1, le=100, description="Random subsets averaged when n_test > eval_pool (one pass otherwise).")

    @property
    def max_steps(self) -> int | None:
        """Continual steps of the run (the progress bar's total; None when the step list comes from files)."""
        from methodlab.methods.cmcl.data import step_pairs

        try:
            return len(step_pairs(self))
        except ValueError:
            return None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        from methodlab.methods.cmcl.data import step_pairs

        if self.data == "features":
            if not self.feature_root:
                raise ValueError("data=features needs feature_root (folder of <dataset>/<split>/<modality>.npz|.parquet)")
            if not self.steps:
                raise ValueError("data=features needs steps, e.g. ['vggsound_s:audio,text']")
        step_pairs(self)  # syntax and modalities of the step list
        if self.data == "synthetic" and self.latent > self.dim:
            raise ValueError(f"latent ({self.latent}) must be <= dim ({self.dim})")
        # Feature files are read here so a bad width / non-finite value / missing column fails before Ray
        # starts; a served checkpoint validates its config with context {"check_files": False}.
        if self.data == "features" and (info.context or {}).get("check_files", True):
            from methodlab.methods.cmcl.data import load_feature_step

            for s in self.steps[: self.n_steps] if self.n_steps else self.steps:
                load_feature_step(self, s, log=None)
        return self
