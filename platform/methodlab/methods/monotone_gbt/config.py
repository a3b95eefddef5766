"""Typed config of monotone_gbt. Defaults are the paper's / official code's values (methods/monotone_gbt.md);
reconstructed choices [RECON] are flags with the spec's default. One config serves every setting: gbt.fit (train),
gbt.sweep_synthetic, gbt.monotonicity_map, gbt.monotonicity_check and gbt.cv_real."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

ModelKind = Literal["gbt_embedding", "gbt", "embedding"]
LawName = Literal["uniform", "binary", "kary", "gaussian"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/sq_err"
    mode: ClassVar[Literal["max", "min"]] = "min"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/sq_err", "eval/const0_sq_err", "eval/train_sq_err", "eval/nmse")
    smoke: ClassVar[dict] = {"n_items": 10, "n_comparisons": 50, "n_test": 500, "sweep_seeds": 5, "sweep_n": [50]}

    seed: int = Field(0, description="Seed of the synthetic instance (numpy default_rng(seed)) and of the CV folds.")

    # --- model ----------------------------------------------------------------------------------------------
    model: ModelKind = Field("gbt_embedding", description="gbt_embedding = LGBT-D [lambda I_A ; x_feat] (the method); "
                             "gbt = identity embeddings (no generalisation); embedding = x_feat only (not monotone).")
    root_law: LawName = Field("uniform", description="Root law f of the GBT likelihood; binary = classic Bradley-Terry.")
    kary_k: int = Field(11, ge=2, le=1001, description="K of the K-ary root law (K equispaced points of [-1, 1]).")
    gaussian_var: float = Field(1.0, gt=0, le=100, description="[RECON] Variance v of the Gaussian root law (r ~ N(v s, v)).")
    sigma: float = Field(1.0, gt=0, le=1e4, description="Prior scale: precision sigma^-2 I + w x L x^T.")
    identity_weight: float = Field(1.0, gt=0, le=1e3, description="lambda: weight of the identity rows of gbt_embedding.")
    prior_laplacian: Literal["none", "knn", "groups"] = Field(
        "none", description="Graph L of the diffusion prior over alternatives: none (L = 0, the paper's experiments), "
        "knn over the feature columns [RECON], or groups (items sharing a feature/category linked).")
    laplacian_weight: float = Field(1.0, ge=0, le=1e3, description="w: diffusion strength (multiplies L; unused with none).")
    knn_k: int = Field(5, ge=1, le=100, description="Neighbours of the kNN Laplacian.")
    solver: Literal["lbfgs", "newton"] = Field("lbfgs", description="MAP solver: L-BFGS from beta = 0 (official) or Newton.")
    tol: float = Field(1e-8, gt=0, le=1e-2, description="Gradient max-norm at which the solver stops.")
    max_iter: int = Field(15000, ge=10, le=1_000_000, description="Solver iteration cap.")
    blas_threads: int | None = Field(None, ge=1, le=256, description="Narrow the BLAS threads of this run (threadpoolctl); "
                                     "None: the runner's count (the job's cpus_per_worker). Never widens.")

    # --- data -----------------------------------------------------------------------------------------------
    data: Literal["synthetic", "movielens", "tournesol", "csv"] = Field("synthetic", description="Comparison source.")
    n_items: int = Field(20, ge=2, le=5000, description="synthetic: alternatives A.")
    n_features: int = Field(10, ge=0, le=1000, description="synthetic: feature dimension D of x_feat ~ N(0, 1).")
    n_comparisons: int = Field(500, ge=1, le=1_000_000, description="synthetic: comparisons N, drawn with replacement.")
    pair_sampler: Literal["simple", "erdos_renyi", "bipartite"] = Field("simple", description="synthetic: pair distribution.")
    p_edge: float = Field(0.2, gt=0, le=1, description="synthetic erdos_renyi: edge probability p_c.")
    keep_all_draws: bool = Field(True, description="synthetic: every drawn comparison enters the loss (the spec and the "
                                 "official Julia code). False: the official Python script's path (an A x A response "
                                 "matrix, a < b entries only: about half the draws dropped).")
    true_sigma: float = Field(1.0, gt=0, le=1e4, description="synthetic: prior scale of the true beta.")
    true_laplacian_weight: float = Field(0.0, ge=0, le=1e3, description="synthetic: w of a kNN Laplacian in the TRUE "
                                         "prior (beta_true ~ N(0, P^-1), P the precision); 0: beta_true ~ N(0, I).")
    n_test: int = Field(1000, ge=0, le=1_000_000, description="synthetic: fresh held-out comparisons for eval/sq_err.")
    movielens_user: int = Field(547, ge=1, description="movielens: user id (547 is the most active, 2,391 movies).")
    n_pairs: int = Field(1000, ge=1, le=1_000_000, description="movielens: distinct unordered movie pairs compared.")
    data_seed: int = Field(0, description="movielens: seed of the pair draw; tournesol: seed of the `limit` subsample.")
    comparisons_path: str | None = Field(None, description="tournesol / csv: the comparisons CSV.")
    metadata_path: str | None = Field(None, description="tournesol: metadata CSV/JSON (channel one-hot); csv: item features CSV.")
    tournesol_user: str | None = Field(None, description="tournesol: public_username to keep.")
    criterion: str = Field("largely_recommended", description="tournesol: criterion to keep.")
    limit: int | None = Field(1000, ge=1, description="tournesol: comparisons subsampled (the paper: 1,000).")
    test_frac: float = Field(0.0, ge=0, lt=1, description="real data fit: held-out share of comparisons for eval/sq_err "
                             "(0: all comparisons train and eval/sq_err is in-sample).")

    # --- gbt.cv_real ------------------------------------------------------------------------------------------
    folds: int = Field(10, ge=2, le=1000, description="cv_real: folds over comparisons.")
    cv_models: list[Literal["gbt_embedding", "gbt", "embedding", "constant", "binary_law"]] = Field(
        ["gbt_embedding", "gbt", "embedding", "constant"], min_length=1,
        description="cv_real: models compared (constant = predict 0; binary_law = gbt_embedding with the binary root law).")

    # --- gbt.sweep_synthetic ------------------------------------------------------------------------------------
    sweep_seeds: int = Field(100, ge=1, le=100_000, description="sweep: seeds seed .. seed + sweep_seeds - 1.")
    sweep_n: list[int] = Field([71, 291], min_length=1, description="sweep: comparison counts N.")
    sweep_models: list[Literal["gbt_embedding", "gbt", "embedding", "binary_law"]] = Field(
        ["gbt_embedding", "gbt", "embedding", "binary_law"], min_length=1, description="sweep: models fitted per instance.")

    # --- monotonicity -------------------------------------------------------------------------------------------
    nb_iter: int = Field(100, ge=1, le=100_000, description="Random Laplacians per monotonicity test.")
    laplacian: Literal["binary", "gaussian"] = Field("binary", description="Random test Laplacians: binary edges "
                                                     "(official density script) or |N(0,1)| weights.")
    mono_tol: float = Field(1e-4, ge=0, le=1, description="Tolerance of the diagonal-dominance test.")
    alpha: float = Field(0.0, ge=0, le=100, description="monotonicity_check: tested Gram = x^T x + alpha I.")
    map_items: list[int] = Field([5, 10, 15, 20, 25, 30], min_length=1, description="monotonicity_map: A values.")
    map_features: list[int] = Field([1, 2, 3, 5, 8, 12, 20], min_length=1, description="monotonicity_map: D values.")
    map_alphas: list[float] = Field([0.0, 0.5], min_length=1, description="monotonicity_map: alpha values.")
    map_instances: int = Field(50, ge=1, le=100_000, description="monotonicity_map: Gaussian draws per grid cell.")
    embedding_path: str | None = Field(None, description="monotonicity_check: x as CSV (D rows x A columns) or .npy.")
    embedding: list[list[float]] | None = Field(None, description="monotonicity_check: x inline (D rows of A floats).")
    fd_check: bool = Field(True, description="monotonicity_check: also refit with r_ab + eps on a random comparison set "
                           "(n_comparisons pairs, uniform law, beta ~ N(0, I)) and compare with the M-matrix prediction.")
    fd_max_pairs: int = Field(500, ge=1, le=1_000_000, description="monotonicity_check: ordered pairs checked by finite differences.")

    @model_validator(mode="after")
    def _check(self):
        if self.data in ("tournesol", "csv") and not self.comparisons_path:
            raise ValueError(f"data={self.data} needs comparisons_path")
        if self.data == "tournesol" and not self.tournesol_user:
            raise ValueError("data=tournesol needs tournesol_user")
        if self.data == "synthetic" and self.model == "embedding" and self.n_features == 0:
            raise ValueError("model=embedding needs n_features >= 1")
        if any(n < 1 for n in self.sweep_n):
            raise ValueError("sweep_n: every N must be >= 1")
        if any(a < 2 for a in self.map_items) or any(d < 1 for d in self.map_features):
            raise ValueError("map_items >= 2 and map_features >= 1")
        if self.embedding is not None and len({len(r) for r in self.embedding}) > 1:
            raise ValueError("embedding: every row needs the same length A")
        return self
