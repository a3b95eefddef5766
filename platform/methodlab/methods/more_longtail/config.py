"""Typed config of more_longtail (MORE: model rebalancing with a low-rank parameter component). Defaults are the
spec's acceptance setting (digits-LT IF 100, MLP 64-256-256-10, r = 8, SGD 0.05 / 0.9 / 5e-4, batch 64, 150
epochs) and the paper's MORE constants as the spec reconstructs them; (verify) / [RECON] items are fields.
Arms: `more.enabled` false = plain network (no split); true + `more.alpha_zero_control` = the matched control
(same low-rank split, loss weight 0); true alone = MORE. `base_loss` picks CE / LA / BS / BCE / ASL."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from methodlab.core.method import MethodConfig

Dataset = Literal["digits_lt", "fmnist_lt", "digits_mosaic", "cifar10_lt", "cifar100_lt", "list_file"]


class MoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(True, description="Split every wrapped layer into W_g + B A (false: the plain network).")
    alpha_zero_control: bool = Field(False, description="Matched control: keep the split, force alpha = 0.")
    rank: int = Field(8, ge=1, le=4096, description="Low-rank r per layer (spec acceptance: 8).")
    rank_ratio: float | None = Field(None, gt=0, le=1, description="(verify) r = ratio * min(out, fan_in) per layer "
                                     "instead of `rank` (a third-party replication used 0.1); None: use `rank`.")
    amplitude: float = Field(2.0, ge=0, le=1000, description="(verify) normalised amplitude a; alpha peak A = a * C.")
    schedule: Literal["sin", "const", "linear", "cos"] = Field(
        "sin", description="alpha(t): A sin(pi t/T) (paper) | const A | linear-up A t/T | cos-decay A (1+cos(pi t/T))/2.")
    schedule_unit: Literal["epoch", "step"] = Field(
        "epoch", description="t counts epochs (pseudocode: integer epoch, t = 0..T-1) or optimiser steps (t/T continuous).")
    layers: Literal["all", "last_stage", "classifier"] = Field("all", description="Which Conv2d / Linear layers are wrapped.")
    discrepancy: Literal["sq_l2", "l1", "kl"] = Field("sq_l2", description="Per-sample logit discrepancy (paper: squared L2).")
    weighting: Literal["prior", "uniform"] = Field("prior", description="w(y) = pi_y (paper) or 1/C (ablation).")
    a_init: Literal["kaiming", "kaiming_sqrt5"] = Field(
        "kaiming", description="A's init. Spec: Kaiming-uniform = torch's kaiming_uniform_ default (a = 0, He et al.: "
        "bound sqrt(6/fan_in)); kaiming_sqrt5: the LoRA / nn.Linear convention a = sqrt(5) (bound 1/sqrt(fan_in), "
        "0.41x; the first implementation's reading).")
    # Issue 44 item 4: hypotheses the paper's construction rules out, as switches (defaults = the paper's reading).
    b_init_std: float = Field(0.0, ge=0, le=1, description="B ~ N(0, b_init_std^2) at init (paper: 0, so the full "
                              "model equals the general one at step 0; > 0 breaks mechanism check 1 on purpose).")
    lowrank_lr_mult: float = Field(1.0, gt=0, le=1000, description="Learning rate of A and B as a multiple of lr "
                                   "(paper: one optimiser, 1).")
    lowrank_weight_decay: float | None = Field(None, ge=0, le=1, description="Weight decay on A and B (None: the "
                                               "run's weight_decay, as one optimiser over all parameters).")
    tail_start: float = Field(0.0, ge=0, lt=1, description="Fraction of the epochs before A and B start training "
                              "(paper: 0; until then B stays at its init, so with B = 0 the tail is off).")


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/balanced_acc"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/balanced_acc", "eval/acc_many", "eval/acc_few", "train/loss_task")
    smoke: ClassVar[dict] = {"dataset": "digits_lt", "imbalance": 10.0, "epochs": 10, "log_every": 5, "checkpoint_every": 5}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"log_every", "checkpoint_every"}

    seed: int = Field(0, description="Seed of the initialisation, batch order and (unless data_seed) the LT split.")
    data_seed: int | None = Field(None, description="Seed of the LT subsample and class-order shuffle; None: seed.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads "
                                      "(scaling.cpus_per_worker) for this run; None: the runner's count.")

    # --- data -----------------------------------------------------------------------------------------------
    dataset: Dataset = Field("digits_lt", description="digits_lt (acceptance) | fmnist_lt (Debian IDX) | digits_mosaic "
                             "(multi-label) | cifar10_lt / cifar100_lt (binary version, data_root) | list_file.")
    imbalance: float = Field(100.0, ge=1, le=1000, description="Imbalance factor IF: n_k = int(n_max IF^(-k/(C-1))).")
    n_max: int | None = Field(None, ge=1, le=1_000_000, description="Head-class count; None: 120 digits, 6000 "
                              "Fashion-MNIST, (per-class train count - val) CIFAR.")
    test_per_class: int = Field(50, ge=1, le=100, description="digits-LT: balanced test images per class.")
    val_per_class: int = Field(10, ge=0, le=1000, description="Balanced validation images per class from images outside "
                               "train and test (capped by the smallest leftover; sweeps select on it, never on test).")
    shuffle_classes: bool = Field(True, description="Shuffle which class gets which LT rank (by data seed).")
    groups: Literal["auto", "relative", "fixed"] = Field(
        "auto", description="Many/Medium/Few: relative (top / bottom 30 % of classes by training count), fixed (paper: "
        ">100 / 20-100 / <20), auto: fixed when n_max > 1000.")
    data_root: str | None = Field(None, description="cifar*: folder of the binary version; list_file: image root; "
                                  "fmnist_lt: IDX folder (None: /usr/share/datasets/fashion-mnist).")
    train_list: str | None = Field(None, description="list_file: 'relative/path.jpg label' lines (train).")
    test_list: str | None = Field(None, description="list_file: test list.")
    val_list: str | None = Field(None, description="list_file: validation list (optional).")
    image_size: int = Field(32, ge=8, le=256, description="list_file: images are resized to image_size^2 RGB.")
    max_images: int | None = Field(None, ge=1, description="list_file: random subset of each list (None: all).")
    mosaic_train: int = Field(1000, ge=10, le=1_000_000, description="digits_mosaic: training mosaics.")
    mosaic_test: int = Field(500, ge=10, le=1_000_000, description="digits_mosaic: test mosaics (uniform classes).")

    # --- model ----------------------------------------------------------------------------------------------
    backbone: Literal["mlp", "resnet_cifar"] = Field("mlp", description="MLP (digits / Fashion-MNIST) or ResNet-(6n+2) "
                                                     "for 32x32 (CIFAR-LT: ResNet-32).")
    hidden: list[int] = Field([256, 256], min_length=0, max_length=8, description="MLP hidden widths.")
    depth: int = Field(32, ge=8, le=110, description="resnet_cifar depth 6n+2.")
    width: int = Field(16, ge=4, le=256, description="resnet_cifar first-stage width.")
    dropout: float = Field(0.0, ge=0, lt=1, description="MLP dropout (the two paths share the mask).")
    augment: Literal["none", "shift"] = Field("none", description="Training-batch augmentation (every arm alike, both "
                                              "paths see the same batch): none | shift (random translation by up to "
                                              "augment_shift pixels, zero fill).")
    augment_shift: int = Field(1, ge=1, le=8, description="augment=shift: the largest translation in pixels.")
    more: MoreConfig = Field(default_factory=MoreConfig, description="MORE's low-rank split and rebalancing loss.")

    # --- loss -----------------------------------------------------------------------------------------------
    base_loss: Literal["ce", "la", "bs", "bce", "asl"] = Field("ce", description="Task loss on z_full: CE, logit "
                                                               "adjustment, balanced softmax; multi-label BCE / ASL.")
    la_tau: float = Field(1.0, ge=0, le=10, description="Logit-adjustment tau (CE on z + tau log pi).")

    # --- optimisation ---------------------------------------------------------------------------------------
    lr: float = Field(0.05, gt=0, le=10, description="SGD learning rate (CIFAR-LT protocol: 0.1).")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum.")
    weight_decay: float = Field(5e-4, ge=0, le=1, description="SGD weight decay (CIFAR-LT protocol: 2e-4).")
    batch_size: int = Field(64, ge=1, le=65_536, description="Mini-batch size per worker.")
    epochs: int = Field(150, ge=1, le=10_000, description="Training epochs T (the schedule's horizon).")
    lr_schedule: Literal["constant", "step", "cosine"] = Field("constant", description="constant (acceptance) | step "
                                                               "(x0.01 over lr_milestones, CIFAR-LT) | cosine.")
    warmup_epochs: int = Field(0, ge=0, le=1000, description="Linear lr warm-up epochs (CIFAR-LT: 5).")
    lr_milestones: list[int] = Field([160, 180], description="step schedule: epochs where lr is multiplied by 0.1.")

    # --- logging --------------------------------------------------------------------------------------------
    log_every: int = Field(25, ge=1, description="Epochs between reports (every report evaluates).")
    checkpoint_every: int = Field(50, ge=1, description="Epochs between checkpoints (the last epoch always writes).")

    # --- merge_export setting -------------------------------------------------------------------------------
    source_checkpoint: str | None = Field(None, description="merge_export: the checkpoint folder to fold (A, B into W).")

    @model_validator(mode="after")
    def _check(self):
        ml = self.dataset == "digits_mosaic"
        if ml and self.base_loss not in ("bce", "asl"):
            raise ValueError("dataset=digits_mosaic is multi-label: base_loss must be bce or asl")
        if not ml and self.base_loss in ("bce", "asl"):
            raise ValueError(f"base_loss={self.base_loss} is multi-label: use dataset=digits_mosaic")
        if self.dataset.startswith("cifar") and not self.data_root:
            raise ValueError(f"dataset={self.dataset} needs data_root (the CIFAR binary version folder)")
        if self.dataset == "list_file" and not (self.data_root and self.train_list and self.test_list):
            raise ValueError("dataset=list_file needs data_root, train_list and test_list")
        if self.backbone == "mlp" and any(h < 1 for h in self.hidden):
            raise ValueError("hidden widths must be >= 1")
        if self.backbone == "resnet_cifar" and (self.depth - 2) % 6:
            raise ValueError("resnet_cifar depth must be 6n+2 (ResNet-32: 32)")
        return self

    @property
    def multilabel(self) -> bool:
        return self.dataset == "digits_mosaic"

    @property
    def arm(self) -> str:
        if not self.more.enabled:
            return "plain"
        return "control" if self.more.alpha_zero_control else "more"
