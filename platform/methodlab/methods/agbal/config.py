"""Typed config of agbal. Defaults follow the spec (methods/agbal.md). Fields marked [RECON] are the platform's
reading of what the paper's abstract and review record leave open (propagation formula, combination, scaled-kernel
selection): flags with the spec's default. `strategy` selects AGBAL or one of the baselines in the same code path."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

Strategy = Literal["agbal", "random", "lcmd", "agbal_unweighted"]
DataName = Literal["friedman_shift", "hetero_1d", "hetero_2d", "diabetes_shift", "boston_shift", "concrete_shift",
                   "files"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/auc_log"
    mode: ClassVar[Literal["max", "min"]] = "min"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/auc_log", "eval/log_rmse", "eval/rmse", "surrogate/spearman")
    smoke: ClassVar[dict] = {"data": "diabetes_shift", "n0": 32, "batch_size": 16, "rounds": 2, "hidden": [64, 64],
                             "epochs": 100, "kernel": "ll"}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"rounds"}

    seed: int = Field(0, description="Seed of the model initialisation, the initial labelled set and selection.")
    data_seed: int | None = Field(None, description="Seed of the generated / split data; None: seed.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this many "
                                      "(never widen them); None: the job's (scaling.cpus_per_worker).")
    strategy: Strategy = Field("agbal", description="agbal | random | lcmd (LCMD on the same kernel, no auxiliary "
                               "data) | agbal_unweighted (AGBAL with r = 1, the weighting ablation).")

    # --- data ------------------------------------------------------------------------------------------------
    data: DataName = Field("friedman_shift", description="Generator / real set with a shifted auxiliary source, or "
                           "'files' (a user's labeled / pool / auxiliary / test tables).")
    n_pool: int = Field(10_000, ge=10, le=1_000_000, description="Generated pool size (friedman 10000; hetero 5000).")
    n_test: int = Field(5000, ge=10, le=1_000_000, description="Generated target test size.")
    n_aux: int = Field(2000, ge=10, le=20_000, description="Generated auxiliary size (checkpoints hold at most 20,000).")
    n_features: int = Field(10, ge=5, le=1000, description="friedman_shift input dimension (the first 5 feed Friedman-1).")
    aux_shift: float = Field(0.7, ge=0, le=10, description="friedman_shift: auxiliary mean shift along a random direction.")
    aux_scale: float = Field(1.3, gt=0, le=10, description="friedman_shift: auxiliary input scale.")
    noise: float | None = Field(None, ge=0, le=100, description="Target label noise sd; None: generator default "
                                "(friedman 1.0, hetero 0.1).")
    aux_label_noise: float = Field(0.0, ge=0, le=100, description="Extra label noise sd on auxiliary labels.")
    aux_bias: float = Field(0.0, ge=-1e6, le=1e6, description="Systematic offset of auxiliary labels (imperfect source).")
    aux_quantile: float = Field(0.6, gt=0, lt=1, description="Real sets: auxiliary = rows above this quantile of the shift feature.")
    data_files: dict[str, str] = Field({}, description="data=files: paths of 'labeled', 'pool', 'auxiliary' and "
                                       "optional 'test' tables (.csv / .parquet / .npz with arrays X, y).")
    feature_columns: list[str] | None = Field(None, description="data=files: feature columns (None: all but the target).")
    target_column: str = Field("y", description="data=files: target column of CSV / Parquet tables.")

    # --- active learning loop -----------------------------------------------------------------------------
    n0: int = Field(128, ge=2, le=100_000, description="Initial labelled target points (bmdal_reg: 256).")
    batch_size: int = Field(128, ge=1, le=100_000, description="b: points acquired per round.")
    rounds: int = Field(10, ge=0, le=1000, description="R: acquisition rounds.")
    warm_start: bool = Field(False, description="Warm-start each round's network from the previous round (default: "
                             "retrain from scratch).")

    # --- regressor ----------------------------------------------------------------------------------------
    hidden: list[int] = Field([512, 512, 512], min_length=1, max_length=8, description="MLP hidden widths (paper 3x512; "
                              "the CPU acceptance uses 2x128).")
    activation: Literal["silu", "relu"] = Field("silu", description="Hidden activation.")
    epochs: int = Field(256, ge=1, le=100_000, description="Epochs per round.")
    train_batch: int = Field(64, ge=1, le=100_000, description="Adam mini-batch size.")
    lr: float = Field(1e-3, gt=0, le=1, description="Adam learning rate (cosine-decayed to 0 over each round's training).")
    weight_decay: float = Field(0.0, ge=0, le=1, description="Adam weight decay.")
    train_on_aux: bool = Field(False, description="Also train on auxiliary data with importance weights r (default "
                               "off: the surrogate stays an out-of-sample error estimate).")

    # --- density ratio --------------------------------------------------------------------------------------
    ratio_model: Literal["logistic", "mlp"] = Field("logistic", description="Probabilistic classifier target vs auxiliary.")
    ratio_features: Literal["linear", "quadratic"] = Field("quadratic", description="logistic: inputs or inputs + "
                                                            "squares and pairwise products (Gaussian log-ratios are quadratic).")
    ratio_c: float = Field(1.0, gt=0, le=1e6, description="logistic: inverse L2 strength C.")
    ratio_hidden: int = Field(64, ge=2, le=4096, description="mlp ratio model: hidden width (2 layers).")
    ratio_epochs: int = Field(300, ge=1, le=100_000, description="mlp ratio model: full-batch Adam steps.")
    ratio_clip: tuple[float, float] = Field((0.01, 100.0), description="[r_min, r_max] before self-normalisation.")
    ess_min: float = Field(50.0, ge=0, description="Below this effective sample size (sum r)^2 / sum r^2 the surrogate "
                           "is blended toward its unweighted version (pitfall: exploding ratios).")

    # --- surrogate ------------------------------------------------------------------------------------------
    propagation: Literal["nw", "krr"] = Field("krr", description="[RECON] Kernel-ridge mean or Nadaraya-Watson smoother "
                                               "of the weighted auxiliary losses (spec default krr, revised 2026-12-05: "
                                               "under nw the ratio cancels inside each kernel neighbourhood).")
    prop_space: Literal["features", "inputs"] = Field("features", description="[RECON] RBF propagation kernel on the "
                                                       "selection kernel's features (the network's NTK / last-layer "
                                                       "geometry) or on standardised inputs.")
    bandwidth: float = Field(0.2, gt=0, le=100, description="[RECON] RBF width of the propagation kernel as a "
                             "multiple of the median pairwise distance in prop_space.")
    kappa: float = Field(1e-3, ge=0, le=1e6, description="NW regulariser kappa (in effective auxiliary points).")
    krr_ridge: float = Field(1.0, gt=0, le=1e6, description="krr: sigma^2 on the kernel diagonal.")
    combine: Literal["surrogate_only", "product", "sum"] = Field("product", description="[RECON] Combine u with the "
                                                                 "kernel posterior variance sigma^2 (MaxDiag quantity) of the "
                                                                 "labelled set: u, u * sigma^2 or u/mean(u) + sigma^2/mean(sigma^2). "
                                                                 "Ranks top_b; lcmd / maxdet / maxdiag run on the u-scaled kernel, "
                                                                 "where sigma^2 enters through the selection (maxdiag on it is u * sigma^2).")
    debias_aux: bool = Field(False, description="Subtract a constant auxiliary label offset fitted on the labelled "
                             "target set (nearest-auxiliary residuals) before the losses.")

    # --- selection -----------------------------------------------------------------------------------------
    selection: Literal["lcmd", "maxdet", "top_b", "maxdiag"] = Field("lcmd", description="[RECON] Batch selection on "
                                                                      "the surrogate-scaled kernel sqrt(u) k sqrt(u').")
    kernel: Literal["ll", "ntk", "rbf"] = Field("ntk", description="Base kernel: last-layer features, sketched NTK "
                                               "(per-sample gradients, random projection) or RFF of an input RBF.")
    sketch_dim: int = Field(512, ge=8, le=8192, description="Sketch dimension of ntk / rbf features.")
    post_ridge: float = Field(1e-3, gt=0, le=1e6, description="Ridge of the kernel posterior variance (relative to "
                               "the mean kernel diagonal).")

    # --- logging ---------------------------------------------------------------------------------------------
    checkpoint_every: int = Field(1, ge=1, le=1000, description="Rounds between checkpoints (the last always).")

    @model_validator(mode="after")
    def _check(self):
        lo, hi = self.ratio_clip
        if not (0 < lo < hi):
            raise ValueError("ratio_clip must satisfy 0 < r_min < r_max")
        if self.data == "files":
            missing = [k for k in ("labeled", "pool", "auxiliary") if k not in self.data_files]
            if missing:
                raise ValueError(f"data=files needs data_files entries {missing}")
            unknown = set(self.data_files) - {"labeled", "pool", "auxiliary", "test"}
            if unknown:
                raise ValueError(f"unknown data_files keys {sorted(unknown)}")
        return self

    @property
    def max_steps(self) -> int:
        """Reported steps are AL rounds 0..R (what the local runner's progress bar counts)."""
        return self.rounds

    @property
    def uses_aux(self) -> bool:
        return self.strategy in ("agbal", "agbal_unweighted")

    @property
    def weighted(self) -> bool:
        return self.strategy == "agbal"
