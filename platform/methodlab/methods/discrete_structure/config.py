"""Typed config of discrete_structure. Defaults are the spec's (paper values for lambda, delta, omega were not
recovered: DAGMA / NOTEARS logistic conventions). Reconstructed choices ([RECON]) are flags with the spec's default."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/shd_cpdag"
    mode: ClassVar[Literal["max", "min"]] = "min"
    write_paths: ClassVar[tuple[str, ...]] = ("export_dir",)  # written by a run: relative = inside its run folder
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/shd_cpdag", "eval/skeleton_precision", "eval/skeleton_recall", "train/loss")
    smoke: ClassVar[dict] = {"d": 4, "min_multi_parent": 0, "n": 2000, "n_heldout": 1000, "K": 3, "mu_schedule": [1.0, 0.1],
                             "inner_steps": 500, "last_stage_steps": 500, "lr": 3e-2, "check_every": 100,
                             "checkpoint_every": 500, "log_every": 250}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"inner_steps", "last_stage_steps"}

    seed: int = Field(0, description="Seed of the data (graph, CPTs, samples); the fit itself is deterministic.")
    model: Literal["mvb", "pc", "ges"] = Field(
        "mvb", description="mvb: the differentiable multivariate-Bernoulli learner (K=1 is the logistic baseline); "
                           "pc: causal-learn PC with chi-square tests; ges: causal-learn GES with the BDeu score.")

    # --- data ------------------------------------------------------------------------------------
    data: Literal["simulate", "xor_triple", "bif", "file"] = Field(
        "simulate", description="simulate: random ER DAG + mechanism; xor_triple: a, b ~ B(0.5), c = a xor b (flip); "
                                "bif: a bnlearn network packaged in pgmpy; file: a user's CSV/Parquet of 0/1 columns.")
    d: int = Field(8, ge=2, le=40, description="Number of nodes (simulate).")
    exp_degree: float = Field(2.0, gt=0.0, le=10.0, description="Expected degree of the ER DAG (simulate).")
    mechanism: Literal["random_cpt", "logistic", "noisy_or", "xor"] = Field(
        "random_cpt", description="Conditional mechanism (simulate): Beta(0.5,0.5) CPTs, logistic-linear, noisy-OR, parity.")
    min_multi_parent: int = Field(0, ge=0, description="Redraw the graph until this many nodes have 2+ parents (acceptance: 3).")
    influence_min: float = Field(0.05, ge=0.0, le=1.0, description="Conditional-influence check (all mechanisms but xor).")
    xor_flip: float = Field(0.1, ge=0.0, le=0.5, description="Flip probability of xor nodes.")
    n: int = Field(5000, ge=20, le=1_000_000, description="Training rows (simulate, xor_triple, bif).")
    n_heldout: int = Field(5000, ge=0, le=1_000_000, description="Held-out rows drawn from the same network.")
    network: str = Field("asia", pattern=r"^[A-Za-z0-9_\-]+$", description="bnlearn network in pgmpy's example_models (bif).")
    binarize: Literal["none", "first_state_vs_rest"] = Field(
        "none", description="Non-binary columns / nodes: rejected (none) or state 0 vs the rest.")
    data_path: str | None = Field(None, description="file: CSV or Parquet, header = variable names, 0/1 columns.")
    truth_path: str | None = Field(None, description="file: optional ground truth, adjacency CSV (row cause, col effect) or .bif.")
    heldout_frac: float = Field(0.2, ge=0.0, lt=1.0, description="file: fraction of rows held out (seeded split).")

    # --- model and objective ---------------------------------------------------------------------
    K: int | None = Field(None, ge=1, le=39, description="Interaction order; None: min(d-1, 3). K=1 = logistic SEM.")
    lam: float = Field(0.02, ge=0.0, le=10.0, description="Sparsity weight lambda.")
    delta: float = Field(0.5, gt=0.0, le=10.0, description="Quasi-MCP delta on the W scale.")
    penalty: Literal["qmcp", "l1", "group_l1"] = Field("qmcp", description="Sparsity penalty on the group norms W.")
    l2: float = Field(1e-4, ge=0.0, le=1.0, description="Small l2 on beta (keeps deterministic CPT logits finite).")
    omega: float = Field(0.3, ge=0.0, le=10.0, description="Threshold on W.")
    acyclicity: Literal["dagma", "notears"] = Field("dagma", description="DAGMA log-det central path or NOTEARS augmented Lagrangian.")
    dagma_domain: Literal["restart", "dagma_linear"] = Field(
        "restart", description="What the DAGMA path does when W leaves the M-matrix domain of sI - W o W. restart: "
                               "test det(sI - W o W) > 0 and h >= 0 before each step; on a failure restart the stage "
                               "from its start with lr / 2 (s kept). dagma_linear (official kevinsbello/dagma "
                               "linear.py, DagmaLinear.minimize / fit): exact M-matrix test (inverse of sI - W o W "
                               "entrywise >= 0) after each step; while s > 0.9 undo half the step and halve lr for the "
                               "rest of the stage (Adam moments kept); when s <= 0.9, or the stage's start is outside, "
                               "restart the stage from its start with lr / 2 and s + 0.1.")
    w_scale: Literal["none", "sqrt_group"] = Field(
        "none", description="[RECON] Divide W by sqrt(group size) (the spec's NOTEARS conditioning remedy).")

    # --- optimisation -----------------------------------------------------------------------------
    mu_schedule: list[float] = Field([1.0, 0.1, 0.01, 0.001], min_length=1, max_length=10,
                                     description="DAGMA central path mu values.")
    s_schedule: list[float] = Field([1.0], min_length=1, max_length=10,
                                    description="DAGMA s per stage (last value repeats).")
    inner_steps: int = Field(5000, ge=1, le=1_000_000, description="Adam steps per path stage / NOTEARS inner solve.")
    last_stage_steps: int = Field(20000, ge=1, le=1_000_000, description="Adam steps of the last DAGMA stage.")
    lr: float = Field(3e-4, gt=0.0, le=1.0, description="Adam learning rate.")
    tol: float = Field(1e-6, ge=0.0, description="A stage stops when the objective changes by less than tol (relative) between checks.")
    check_every: int = Field(500, ge=1, description="Steps between convergence checks.")
    rho_max: float = Field(1e16, gt=0.0, description="NOTEARS: largest rho.")
    h_tol: float = Field(1e-8, gt=0.0, description="NOTEARS: stop when h <= h_tol.")
    max_outer: int = Field(20, ge=1, le=100, description="NOTEARS: outer (dual) iterations.")

    restarts: int = Field(1, ge=1, le=50, description="[RECON] Multi-start: restart the path from random-order "
                          "initialisations and keep the lowest penalised objective (refit BCE + lambda*pen); 1 = single run.")
    init_scale: float = Field(0.5, ge=0.0, le=10.0, description="[RECON] Std of the main-effect initialisation of restarts.")

    # --- two-stage (BiNOTEARS) ----------------------------------------------------------------------
    two_stage: Literal["auto", "on", "off"] = Field("auto", description="auto: on when d > 12.")
    stage1: Literal["mvb_lowK", "dagma_interactions", "notears_mlp_bce"] = Field(
        "mvb_lowK", description="[RECON] Stage-1 learner: mvb_lowK = K=1 MVB; dagma_interactions = K=2 features. "
                                "notears_mlp_bce is not implemented (rejected).")
    stage1_threshold: float = Field(0.1, ge=0.0, description="Stage-1 W above this becomes a candidate edge.")
    max_candidates: int = Field(8, ge=1, le=16, description="At most this many candidate parents per node (largest W).")

    # --- refit / output -----------------------------------------------------------------------------
    refit_steps: int = Field(200, ge=0, le=10_000, description="L-BFGS iterations of the unpenalised refit on the learned DAG.")
    report_objective: bool = Field(True, description="With ground truth: also report F at the learned and the true DAG.")
    pc_alpha: float = Field(0.01, gt=0.0, lt=1.0, description="PC significance level.")
    export_dir: str | None = Field(None, description="simulate setting: also write train.csv, heldout.csv, truth.csv here "
                                   "(relative: inside the run folder).")
    max_mec_dags: int = Field(1000, ge=1, le=100_000, description="equivalence_class setting: list at most this many DAGs.")

    # --- benchmark setting -----------------------------------------------------------------------
    bench_mechanisms: list[Literal["random_cpt", "logistic", "noisy_or", "xor"]] = Field(
        ["random_cpt", "logistic"], min_length=1, description="benchmark setting: mechanisms of the grid.")
    bench_d: list[int] = Field([8], min_length=1, description="benchmark setting: numbers of nodes.")
    bench_n: list[int] = Field([5000], min_length=1, description="benchmark setting: sample sizes.")
    bench_seeds: list[int] = Field([0, 1, 2], min_length=1, description="benchmark setting: seeds.")
    bench_models: list[Literal["mvb", "logistic", "pc", "ges"]] = Field(
        ["mvb", "logistic", "pc", "ges"], min_length=1,
        description="benchmark setting: mvb (the job's K), logistic (K=1, same path), pc, ges.")

    # --- logging ------------------------------------------------------------------------------------
    log_every: int = Field(1000, ge=1, description="Steps between reports.")
    checkpoint_every: int = Field(5000, ge=1, description="Steps between checkpoints (and at every stage end).")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the run's torch threads to this many "
                                      "(never widens); None: the job's cpus_per_worker, set by the runner.")

    @model_validator(mode="after")
    def _check(self):
        if self.stage1 == "notears_mlp_bce":
            raise ValueError("stage1=notears_mlp_bce is not implemented; use mvb_lowK or dagma_interactions")
        if self.data == "file" and not self.data_path:
            raise ValueError("data: file needs data_path (CSV or Parquet of 0/1 columns)")
        if self.data == "simulate" and self.min_multi_parent > max(0, self.d - 2):
            raise ValueError(f"min_multi_parent={self.min_multi_parent}: a DAG on d={self.d} nodes has at most "
                             f"{max(0, self.d - 2)} nodes with 2+ parents")
        if self.data == "simulate" and self.K is not None and self.K > self.d - 1:
            raise ValueError(f"K={self.K} exceeds d-1={self.d - 1}")
        return self

    def order(self, d: int) -> int:
        return min(d - 1, 3) if self.K is None else min(self.K, d - 1)

    def use_two_stage(self, d: int) -> bool:
        return self.two_stage == "on" or (self.two_stage == "auto" and d > 12)
