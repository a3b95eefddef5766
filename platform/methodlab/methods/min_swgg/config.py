"""Typed config of min_swgg (DGSWP). Defaults are the paper's / official code's values; one config
serves the three applications, selected by `task` (or by the job setting plan | flow | cfm)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

Task = Literal["plan", "flow", "cfm"]
SliceModel = Literal["linear", "mlp64", "mlp256"]
FlowMethod = Literal["dgswp_linear", "dgswp_mlp", "sw", "maxsw", "minswgg_rs", "exact_ot", "hhsw", "swp"]
Coupling = Literal["independent", "exact_ot", "dgswp_linear", "dgswp_mlp", "fixed_slice"]


class Config(MethodConfig):
    # "eval/objective" is task-specific (all minimised): h/W2^2 (plan), final W2^2 (flow), sample W2 (cfm).
    primary_metric: ClassVar[str] = "eval/objective"
    mode: ClassVar[Literal["max", "min"]] = "min"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/objective", "plan/h", "plan/w2_exact", "plan/evaluations")
    smoke: ClassVar[dict] = {
        "plan_n": 16, "plan_d": 5, "n_iter": 50, "plan_data": "gaussians",
        "flow_n": 16, "flow_d": 5, "flow_iters": 20, "n_iter_inner": 5, "log_every": 10,
        "cfm_steps": 40, "cfm_batch": 32, "cfm_ratio": 2, "cfm_init_iters": 50, "cfm_eval_n": 128,
        "checkpoint_every": 25,
    }

    def single_worker_reason(self, setting: str = "train") -> str | None:
        """The default setting `train` runs `task` (plan | flow | cfm); the named settings run themselves."""
        from methodlab.methods.min_swgg import SPEC

        return SPEC.single_worker_settings.get(self.task if setting == "train" else setting)

    seed: int = Field(0, description="Seed of data, initial slice, Gaussian perturbations and training.")
    task: Task = Field("plan", description="plan: two clouds -> plan; flow: gradient flow; cfm: sliced-OT flow matching.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this (None: the job's).")

    # --- DGSWP solver (smoothed min-SWGG) ---------------------------------------------------------
    eps: float = Field(0.05, gt=0.0, le=100.0, description="Gaussian smoothing epsilon (0.05 Euclidean; Busemann uses eps_busemann).")
    n_samples: int = Field(10, ge=1, le=512, description="N: Monte Carlo perturbations per gradient estimate (cost N+1 evaluations of h).")
    variance_reduction: bool = Field(True, description="Control variate h(theta) in the Stein estimator.")
    rollback: bool = Field(True, description="Restore the iterate with the smallest smoothed loss (deep copy) at the end of a fit.")
    rollback_on: Literal["smoothed", "h"] = Field(
        "smoothed", description="[I] Roll-back criterion: smoothed loss (paper) or unperturbed h(theta_t) (free; plan preset).")
    lr_inner: float = Field(0.01, gt=0.0, le=10.0, description="Adam learning rate on the slice parameters.")
    n_iter: int = Field(300, ge=1, le=100_000, description="Standalone DGSWP iterations (plan task; 1000 in the paper, 300 in the acceptance).")
    slice_model: SliceModel = Field("linear", description="Slice g_theta: linear (nn.Linear(d,1)) or an MLP with 64/256 hidden units.")
    mlp_activation: Literal["relu", "selu"] = Field("relu", description="MLP slice activation (flows: ReLU, CFM official: SELU).")

    # --- plan task -----------------------------------------------------------------------------------
    plan_data: Literal["moons100", "gaussians", "file"] = Field(
        "moons100", description="moons100: N(0,I2) vs standardised moons embedded in d dims; gaussians: two random Gaussians; file: plan_file.")
    plan_file: str | None = Field(None, description=".npy/.npz with arrays source [n,d], target [n,d] (plan_data=file).")
    plan_n: int = Field(64, ge=2, le=1_000_000, description="Points per cloud.")
    plan_d: int = Field(100, ge=1, le=100_000, description="Ambient dimension (moons100 embeds 2-D data into it).")
    plan_noise: float = Field(0.1, ge=0.0, le=10.0, description="Isotropic noise in the embedding's extra dimensions.")
    plan_baselines: bool = Field(True, description="Also run ot.emd, min-SWGG random search (equal budget and 20 directions) and a random permutation.")

    # --- gradient flows ------------------------------------------------------------------------------
    flow_space: Literal["euclidean", "poincare"] = Field("euclidean", description="Euclidean particles or the Poincare ball.")
    flow_method: FlowMethod = Field("dgswp_linear", description="Flow loss: DGSWP (linear/MLP slice) or a baseline.")
    flow_data: Literal["gaussian", "two_moons", "swiss_roll", "circle"] = Field("gaussian", description="Official generator (Euclidean).")
    hyp_target: Literal["border", "center"] = Field("border", description="Wrapped-normal target of the Poincare flow.")
    flow_n: int = Field(50, ge=2, le=100_000, description="Particles (= target points).")
    flow_d: int = Field(500, ge=1, le=100_000, description="Dimension of the Euclidean flow (2 for the 2-D shapes).")
    flow_iters: int = Field(1000, ge=1, le=1_000_000, description="Outer flow iterations (Poincare: 300).")
    lr_flow: float | None = Field(None, gt=0.0, description="SGD step on particles; None: 0.01 Euclidean, 2.5/3 Poincare DGSWP, 2.5 HHSW/SWP.")
    n_iter_inner: int = Field(20, ge=0, le=10_000, description="Slice updates per flow step (Poincare DGSWP: 100), warm-started.")
    n_proj: int = Field(20, ge=1, le=10_000, description="Random directions per step for sw / minswgg_rs (Poincare hhsw/swp: 100).")
    eps_busemann: float = Field(5.0, gt=0.0, le=100.0, description="Smoothing epsilon of the Busemann slice (official: 5).")
    lr_busemann: float = Field(0.01, gt=0.0, le=10.0, description="Riemannian SGD rate of the Busemann direction on the sphere.")

    # --- sliced-OT conditional flow matching ---------------------------------------------------------
    cfm_data: Literal["gaussians_moons", "digits"] = Field("gaussians_moons", description="8-Gaussians -> moons (2-D) or N(0,I) -> sklearn digits (64-D).")
    coupling: Coupling = Field("dgswp_linear", description="Minibatch coupling: independent (I-CFM), exact_ot (OT-CFM), DGSWP, or a fixed random slice.")
    cfm_steps: int = Field(2000, ge=1, le=10_000_000, description="Vector-field optimisation steps.")
    cfm_batch: int = Field(256, ge=2, le=65_536, description="Minibatch size B.")
    cfm_ratio: int = Field(10, ge=1, le=1000, description="R: super-batch = R x B points coupled at once (dgswp_ratio).")
    cfm_init_iters: int = Field(1000, ge=0, le=100_000, description="DGSWP iterations on the first super-batch.")
    cfm_finetune_iters: int = Field(1, ge=0, le=10_000, description="DGSWP iterations on each later super-batch (warm start).")
    shuffle_pairs: bool = Field(True, description="[I] Shuffle matched pairs before cutting minibatches (official: contiguous ranks).")
    cfm_sigma: float = Field(0.05, ge=0.0, le=10.0, description="sigma of the probability path x_t = t x1 + (1-t) x0 + sigma eps.")
    cfm_lr: float = Field(1e-3, gt=0.0, le=1.0, description="Adam rate of the vector field (torchcfm 2-D example: 1e-3; CIFAR: 2e-4).")
    cfm_hidden: int | None = Field(None, ge=8, le=4096, description="Vector-field MLP width; None: 64 (2-D) or 256 (digits).")
    cfm_euler_steps: int = Field(5, ge=1, le=1000, description="Euler steps for the evaluation samples.")
    cfm_eval_n: int = Field(1000, ge=16, le=20_000, description="Generated / held-out samples for the W2 metric.")
    cfm_fixed_dirs: int = Field(10, ge=1, le=1000, description="Seeded random directions whose sort costs are averaged (fixed_slice reference).")
    ema_decay: float = Field(0.0, ge=0.0, lt=1.0, description="EMA of the vector field for sampling (0: off; CIFAR recipe 0.9999).")

    # --- logging / checkpoints -------------------------------------------------------------------
    log_every: int = Field(50, ge=1, description="Outer iterations / steps between reports.")
    checkpoint_every: int = Field(500, ge=1, description="Outer iterations / steps between checkpoints.")

    @model_validator(mode="after")
    def _check(self):
        if self.task == "plan" and self.plan_data == "file" and not self.plan_file:
            raise ValueError("plan_data=file needs plan_file (an .npy/.npz with arrays source, target)")
        if self.task == "plan" and self.plan_data == "moons100" and self.plan_d < 2:
            raise ValueError("plan_data=moons100 needs plan_d >= 2")
        if self.task == "flow" and self.flow_space == "euclidean" and self.flow_method in ("hhsw", "swp"):
            raise ValueError(f"flow_method={self.flow_method} is a Poincare-ball baseline; set flow_space=poincare")
        if self.task == "flow" and self.flow_space == "poincare" and self.flow_method not in ("dgswp_linear", "hhsw", "swp", "exact_ot"):
            raise ValueError("Poincare flows support flow_method in {dgswp_linear (Busemann slice), hhsw, swp, exact_ot}")
        if self.task == "flow" and self.flow_space == "euclidean" and self.flow_data != "gaussian" and self.flow_d != 2:
            raise ValueError(f"flow_data={self.flow_data} is 2-D: set flow_d=2")
        return self

    @property
    def flow_lr(self) -> float:
        if self.lr_flow is not None:
            return self.lr_flow
        if self.flow_space == "poincare":
            return 2.5 / 3 if self.flow_method.startswith("dgswp") else 2.5
        return 0.01
