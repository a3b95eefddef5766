"""Typed config of unirl. Defaults are IVR's MuJoCo values (256x256, lr 3e-4, batch 256, gamma 0.99,
tau 0.005, SQL alpha 1 / EQL alpha 2, weight clip 100) and the spec's [RECON] choices for Uni-RL
(reference policy refreshed every 1,000 steps, closed-form self-normalised extraction weights).
Every [RECON] choice is a flag with the spec's default."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from methodlab.core.method import MethodConfig


class GenerationConfig(BaseModel):
    """Setting make_dataset: a reference SAC run, then D4RL-keyed HDF5 files (one per kind) [spec: Data]."""

    model_config = ConfigDict(extra="forbid")

    kinds: list[Literal["random", "medium", "medium-replay", "expert", "medium-expert"]] = Field(
        ["random", "medium", "medium-replay", "expert", "medium-expert"], min_length=1, description="Files to write.")
    out_dir: str = Field("datasets", max_length=512, description="Where the HDF5 files are written (relative: inside the "
                         "run folder, e.g. results/unirl-make-dataset/datasets/).")
    n_transitions: int | None = Field(None, ge=10, description="Per-kind size; None: 5e4 Pendulum, 1e5 MuJoCo.")
    total_env_steps: int | None = Field(None, ge=100, description="Reference-run budget; None: 2e5 Pendulum, 1e6 MuJoCo.")
    updates_per_env_step: float | None = Field(None, gt=0.0, le=16.0, description="None: 0.05 Pendulum, 1 MuJoCo.")
    medium_bar: float | None = Field(None, description="Medium return bar; None: -400 Pendulum, D4RL expert / 3.")
    expert_bar: float | None = Field(None, description="Expert bar (stops the run); None: -200 Pendulum, none MuJoCo.")
    require_expert: bool = Field(True, description="Fail when the expert policy misses expert_bar (Pendulum).")
    eval_every: int | None = Field(None, ge=100, description="Env steps between evaluations; None: 1e3 Pendulum, 1e4 MuJoCo.")
    start_steps: int = Field(1000, ge=0, description="Uniform-random env steps before the SAC policy acts.")
    export_minari: bool = Field(False, description="Also write each kind as a local Minari dataset (needs minari).")


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/normalized_score_last3"
    mode: ClassVar[Literal["max", "min"]] = "max"
    write_paths: ClassVar[tuple[str, ...]] = ("generation.out_dir",)  # written by a run: relative = inside its run folder
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/normalized_score_last3", "eval/normalized_score", "eval/return", "train/loss_q")
    # Smoke (spec): 300 offline steps on a 2k-transition random Pendulum dataset, small nets (threads: the job's).
    # train longer online (or evaluate more often) when resuming; anything else changes the experiment
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"online_steps", "eval_every",
                                                                                    "eval_episodes"}
    # online_steps / start_steps too: a job's setting (online, offline_to_online) picks the regime, so the
    # smoke preset must make every regime short, not only the offline one.
    smoke: ClassVar[dict] = {"regime": "offline", "dataset": "generate:random:2000", "max_steps": 300,
                             "online_steps": 300, "start_steps": 100,
                             "hidden": [64, 64], "batch_size": 128, "eval_every": 100, "eval_episodes": 2,
                             "checkpoint_every": 300}

    seed: int = Field(0, description="Seed of networks, sampling, environments.")

    # --- what runs ------------------------------------------------------------------------------
    regime: Literal["offline", "online", "offline_to_online"] = Field(
        "offline", description="Training regime (the job settings offline / online / offline_to_online force it).")
    learner: Literal["unirl", "sac", "bc"] = Field(
        "unirl", description="unirl: IVR value learning + policy extraction (also the IVR baseline via extractor); "
                             "sac: SAC baseline (online); bc: behaviour cloning baseline (offline).")
    alg: Literal["SQL", "EQL"] = Field("SQL", description="Value regulariser: SQL (chi^2-like) or EQL (KL-like) [IVR].")
    alpha: float | None = Field(None, gt=0.0, le=1000.0, description="Regularisation strength; None: 1.0 (SQL) / 2.0 (EQL).")
    extractor: Literal["closed_form", "ivr_awr"] = Field(
        "closed_form", description="[RECON] closed_form: Uni-RL weights max(0,1+u/2a) / exp(u/a), self-normalised; "
                                   "ivr_awr: IVR's original extractor (baseline). learned_weights is reserved "
                                   "until the paper/code is readable.")
    normalize_weights: bool = Field(True, description="[RECON] Divide the extraction weights by their batch mean.")
    weight_clip: float = Field(100.0, gt=0.0, le=1e4, description="Upper clip of the extraction weights [IVR].")
    ref_mode: Literal["periodic", "ema", "buffer"] = Field(
        "periodic", description="[RECON] Online reference policy: periodic frozen copy of the actor, EMA copy, or "
                                "buffer = replay actions (over-constrained IVR, Claim C ablation).")
    ref_update_every: int = Field(1000, ge=1, le=10_000_000, description="[RECON] Gradient steps between pi_ref refreshes (periodic).")
    ref_tau: float = Field(0.005, gt=0.0, le=1.0, description="[RECON] Polyak rate of pi_ref toward the actor (ema).")

    # --- environment and data -------------------------------------------------------------------
    env: str = Field("Pendulum-v1", min_length=1, max_length=64, description="Gymnasium env id (MuJoCo v5 needs the mujoco wheel).")
    dataset: str | None = Field(
        "pendulum-v1-medium-replay", max_length=512,
        description="Offline data: a stored name (pendulum-v1-medium-replay), a D4RL-keyed HDF5 path, "
                    "'minari:<dataset id>', or 'generate:random:<N>' (uniform-random transitions made in memory).")
    reward_scale: Literal["auto", "none", "locomotion"] = Field(
        "auto", description="Offline reward scaling [IVR]: locomotion = 1000 / (max - min trajectory return); "
                            "auto = locomotion for halfcheetah/hopper/walker2d, none otherwise.")

    # --- networks and optimisation --------------------------------------------------------------
    hidden: list[int] = Field([256, 256], min_length=1, max_length=6, description="Hidden widths of every MLP.")
    value_layernorm: bool = Field(True, description="LayerNorm on V's hidden layers [IVR].")
    log_std_min: float = Field(-5.0, ge=-20.0, le=0.0, description="Floor of the actor log-std [IVR].")
    log_std_max: float = Field(2.0, ge=-1.0, le=5.0, description="Ceiling of the actor log-std [IVR].")
    lr: float = Field(3e-4, gt=0.0, le=1e-1, description="Adam lr of Q, V and actor.")
    actor_cosine: bool = Field(True, description="Offline regime: actor lr cosine-decays to 0 over max_steps [IVR].")
    gamma: float = Field(0.99, gt=0.0, lt=1.0)
    tau: float = Field(0.005, gt=0.0, le=1.0, description="Polyak rate of the target critics.")
    batch_size: int = Field(256, ge=2, le=65536)

    # --- budget ---------------------------------------------------------------------------------
    max_steps: int = Field(1_000_000, ge=1, description="Offline gradient steps (offline and the offline phase of o2o).")
    online_steps: int = Field(1_000_000, ge=1, description="Environment steps (online and the online phase of o2o).")
    start_steps: int | None = Field(None, ge=0, description="Uniform-random env steps first; None: 5000 online, 0 o2o.")
    updates_per_env_step: float = Field(1.0, gt=0.0, le=16.0, description="Gradient steps per env step online.")
    buffer_capacity: int = Field(1_000_000, ge=1000, description="Replay capacity online (o2o: dataset + online_steps).")
    sac_target_entropy: float | None = Field(None, description="SAC: target entropy; None: -act_dim.")

    # --- evaluation, logging, checkpoints -------------------------------------------------------
    eval_every: int = Field(5000, ge=1, description="Steps (offline: gradient, online: env) between evaluations; one report each.")
    eval_episodes: int = Field(10, ge=1, le=1000, description="Deterministic episodes per evaluation.")
    checkpoint_every: int = Field(50_000, ge=1, description="Steps between checkpoints (a multiple of eval_every).")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this (None: the job's).")
    resume_from: str | None = Field(None, max_length=1024, description="Continue from this checkpoint directory of an "
                                    "earlier run (networks, optimisers, pi_ref, RNG states, replay); the run folder's own "
                                    "checkpoint, when it has one, wins. The run then reports resume/* checks.")
    generation: GenerationConfig = Field(default_factory=GenerationConfig,
                                         description="Setting make_dataset only: the dataset recipe.")

    @model_validator(mode="after")
    def _check(self):
        if self.checkpoint_every % self.eval_every:
            raise ValueError(f"checkpoint_every={self.checkpoint_every} must be a multiple of eval_every={self.eval_every} "
                             "(checkpoints ride on evaluation reports)")
        if self.regime != "online" and self.dataset is None:
            raise ValueError(f"regime={self.regime} needs a dataset (e.g. pendulum-v1-medium-replay)")
        if self.learner == "bc" and self.regime != "offline":
            raise ValueError("learner=bc is the offline baseline: use regime=offline")
        if self.learner == "sac" and self.regime != "online":
            raise ValueError("learner=sac is the online baseline: use regime=online")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("log_std_min must be < log_std_max")
        return self

    @property
    def alpha_value(self) -> float:
        if self.alpha is not None:
            return self.alpha
        return 1.0 if self.alg == "SQL" else 2.0

    @property
    def start_steps_value(self) -> int:
        if self.start_steps is not None:
            return self.start_steps
        return 0 if self.regime == "offline_to_online" else 5000

    @property
    def total_steps(self) -> int:
        """Length of the step axis: offline steps, env steps, or offline + online for o2o."""
        return {"offline": self.max_steps, "online": self.online_steps,
                "offline_to_online": self.max_steps + self.online_steps}[self.regime]
