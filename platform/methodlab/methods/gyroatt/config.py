"""Typed config of gyroatt. Defaults are the paper's / MAtt's motor-imagery values (F1 22, F2 20,
k 12, lr 5e-4, batch 128, weight decay 0.1, 350 epochs); the calibrated 2-core CPU acceptance
setting is jobs/gyroatt/acceptance.yaml (spec: Acceptance)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

Geometry = Literal["spd-aim", "spd-lem", "spd-lcm", "spsd-aim", "spsd-lem", "spsd-lcm", "grassmann"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/accuracy"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/accuracy", "val/balanced_accuracy", "test/accuracy", "train/loss")
    smoke: ClassVar[dict] = {"n_train_per_class": 16, "n_val_per_class": 4, "n_test_per_class": 8, "f1": 8, "f2": 8,
                             "d_out": 6, "epochs": 2, "batch_size": 32, "lr": 5e-3, "weight_decay": 1e-3,
                             "checkpoint_every": 1}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"eval_test"}

    seed: int = Field(0, description="Seed of init and batch order (the data have their own data_seed).")
    arch: Literal["gyroatt", "matt", "spdnet"] = Field(
        "gyroatt", description="gyroatt; baselines: matt (Stiefel BiMap Q/K/V, LEM) and spdnet (BiMap-ReEig-LogEig, "
                               "no attention). The pyriemann baselines are the setting 'riemann'.")
    geometry: Geometry = Field("spd-lem", description="Manifold and metric of the attention block.")

    # --- data --------------------------------------------------------------------------------------
    dataset: Literal["synthetic_mi", "npz", "fif"] = Field("synthetic_mi", description="Generator or real-format loader.")
    data_path: str | None = Field(None, description="npz / -epo.fif file (datasets npz, fif).")
    data_seed: int = Field(0, ge=0, description="Seed of the synthetic trials (fixed across model seeds).")
    n_train_per_class: int = Field(200, ge=2, le=5000, description="Synthetic: training trials per class.")
    n_val_per_class: int = Field(20, ge=1, le=5000, description="Synthetic: validation trials per class.")
    n_test_per_class: int = Field(80, ge=1, le=5000, description="Synthetic: test trials per class.")
    paradigm: Literal["mi", "ssvep"] = Field("mi", description="Synthetic: motor imagery (16 ch) or SSVEP (8 occipital ch).")
    sfreq: float = Field(128.0, gt=0, le=4096, description="Synthetic sampling rate (Hz).")
    n_samples: int = Field(256, ge=16, le=8192, description="Synthetic trial length (samples).")
    rho: float = Field(0.5, ge=0.0, lt=1.0, description="ERD/ERS depth: power x(1 - rho) / x(1 + rho).")
    snr: float = Field(0.2, gt=0.0, le=100.0, description="Task / background variance ratio.")
    sensor_noise: float = Field(0.1, ge=0.0, le=10.0, description="White sensor noise, x channel std.")
    sigma_m: float = Field(0.03, gt=0.0, le=1.0, description="Gaussian mixing kernel width (m).")
    evidence_profile: Literal["ramp", "one_segment"] = Field("ramp", description="Within-trial evidence envelope.")
    subject_shift: float = Field(0.0, ge=0.0, le=10.0, description="Per-subject shift delta (0: identical subjects).")
    subject: int = Field(0, ge=0, le=1000, description="Synthetic subject id.")
    val_fraction: float = Field(0.125, gt=0.0, lt=0.5, description="Real data: stratified share of the training "
                                                                   "recording held out for validation (MAtt: 1/8).")
    bandpass: tuple[float, float] | None = Field(None, description="Real data: [lo, hi] Hz zero-phase band-pass.")
    resample: float | None = Field(None, gt=0, le=4096, description="Real data: resample to this rate (Hz).")

    # --- network -----------------------------------------------------------------------------------
    segments: int = Field(3, ge=1, le=16, description="m tokens per trial (MAtt: 3 MI/ERN, 7 SSVEP).")
    f1: int = Field(22, ge=1, le=512, description="Spatial conv filters F1.")
    f2: int = Field(20, ge=2, le=64, description="Temporal conv filters F2 = covariance size d_in.")
    kernel: int = Field(12, ge=1, le=512, description="Temporal conv kernel length k.")
    d_out: int | None = Field(18, ge=2, le=64, description="Pre-attention BiMap d_in -> d_out (None: none; matt: "
                                                           "the size its Q/K/V BiMaps map to).")
    rank: int | None = Field(None, ge=1, le=63, description="Grassmann / SPSD rank p (None: d_out // 2) [platform].")
    qkv_maps: Literal["separate", "shared"] = Field("separate", description="Three orthogonal maps, or one for Q, K, V.")
    attention: Literal["gyro", "uniform"] = Field("gyro", description="uniform: every weight 1/m (Claim 3 ablation).")
    score: Literal["matt", "neg_sq_dist"] = Field("matt", description="1/(1+log(1+d)) (MAtt), or -d^2.")
    dist_squared: bool = Field(True, description="MAtt score on the squared distance (MAtt's effective choice).")
    score_scale: bool = Field(False, description="Learnable scale on the scores (untested option).")
    karcher_iters: int = Field(1, ge=0, le=20, description="Karcher iterations for AIM / Grassmann means.")
    activation: Literal["power", "reeig", "none"] = Field("power", description="Post-attention activation after the gyro bias.")
    power_p: float = Field(0.5, gt=0.0, le=2.0, description="Exponent of the matrix-power activation [platform default].")

    # --- optimisation ------------------------------------------------------------------------------
    lr: float = Field(5e-4, gt=0.0, le=1.0, description="Adam learning rate (MI 5e-4, SSVEP 5e-3, ERN 1e-2).")
    weight_decay: float = Field(0.1, ge=0.0, le=1.0, description="Adam weight decay, Euclidean parameters only.")
    batch_size: int = Field(128, ge=1, le=4096, description="Mini-batch size.")
    epochs: int = Field(350, ge=1, le=10_000, description="Training epochs (MI 350).")
    log_every: int = Field(1, ge=1, description="Epochs between evaluations/reports.")
    checkpoint_every: int = Field(10, ge=1, description="Epochs between checkpoints (the last is always written).")
    eval_test: bool = Field(True, description="Evaluate the test split at each report (best-val-loss model selection).")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this many "
                                      "(never widen them); None: the job's (scaling.cpus_per_worker).")

    # --- serving / riemann setting ----------------------------------------------------------------
    serve_length_policy: Literal["strict", "crop_pad"] = Field(
        "strict", description="Serving: strict answers 422 on a trial-length mismatch; crop_pad crops/zero-pads.")
    riemann_classifier: Literal["ts_lr", "mdm"] = Field("ts_lr", description="Setting 'riemann': TS+LR or MDM.")
    eval_checkpoint: str | None = Field(None, description="Setting 'evaluate': checkpoint directory (or a run folder: its "
                                                          "newest checkpoint) to score on this config's data.")

    @model_validator(mode="after")
    def _check(self):
        if self.dataset != "synthetic_mi" and not self.data_path:
            raise ValueError(f"data_path: required for dataset={self.dataset}")
        if self.d_out is not None and self.d_out > self.f2:
            raise ValueError(f"d_out={self.d_out} must be <= f2={self.f2} (the BiMap reduces)")
        if self.arch != "gyroatt" and self.d_out is None:
            raise ValueError(f"d_out: required for arch={self.arch} (its BiMap output size)")
        n = self.size
        if self.geometry in ("grassmann", "spsd-aim", "spsd-lem", "spsd-lcm") and not 0 < self.p_rank < n:
            raise ValueError(f"rank={self.p_rank} must satisfy 0 < rank < {n} (the token size)")
        if self.evidence_profile == "one_segment" and self.segments < 1:
            raise ValueError("segments must be >= 1")
        return self

    @property
    def size(self) -> int:
        """Token size n inside the attention block."""
        return self.d_out if self.d_out is not None else self.f2

    @property
    def p_rank(self) -> int:
        return self.rank if self.rank is not None else self.size // 2
