"""Typed config of ugodit. Defaults are the paper's / official code's values; fields left None take the
task's paper value (natural images vs MRI differ). The CPU presets of the spec live in jobs/ugodit/*.yaml.
Baselines (aSeqDIP, vanilla DIP, random-encoder control) are `arm` values of the `reconstruct` setting."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

Task = Literal["super_resolution", "mri_multicoil", "deblur_nonlinear"]
Arm = Literal["ugodit", "aseqdip", "dip", "random_encoder"]

# paper values per task family: natural images (UGoDIT_training/testing.py) vs MRI (notebook)
PAPER = {
    "natural": {"n_train": 4, "lr": 0.01, "test_lr": 0.01, "train_iterations": 20000, "test_iterations": 20000},
    "mri": {"n_train": 5, "lr": 3e-4, "test_lr": 4e-4, "train_iterations": 5000, "test_iterations": 10000},
}


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/psnr"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/psnr", "eval/val_ssim", "train/loss")
    smoke: ClassVar[dict] = {"image_size": 32, "n_train": 2, "train_iterations": 50, "inner_steps": 10,
                             "val_iterations": 30, "test_iterations": 30, "channels": 16, "scales": 4,
                             "unet_widths": [8, 16, 32, 32], "checkpoint_every": 25, "log_every": 10}
    resume_may_change: ClassVar[frozenset[str]] = frozenset({"train_iterations", "torch_threads", "log_every",
                                                             "checkpoint_every"})

    seed: int = Field(0, description="Initialisation of the encoder, the training decoders and the test decoder.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads (the job's "
                                      "cpus_per_worker) for this run (ctx.limit_threads); None: the runner's count.")
    task: Task = Field("super_resolution", description="Forward operator: super_resolution (area down-sampling), "
                       "mri_multicoil (coil maps + Cartesian mask) or deblur_nonlinear (parametric non-linear blur).")

    # --- data ---------------------------------------------------------------------------------------
    data: Literal["skimage", "fashion_mnist", "png_folder", "fastmri"] = Field(
        "skimage", description="skimage: images shipped in scikit-image (fixed roles); fashion_mnist: class-7 test "
        "images 28->32 padded; png_folder: a folder of PNGs (FFHQ); fastmri: a folder of fastMRI multi-coil .h5.")
    data_dir: str | None = Field(None, description="png_folder / fastmri: the folder (sorted files: first n_train "
                                 "train, next one validation, next one test).")
    data_seed: int = Field(0, description="Seed of noise, phases, coil maps, masks and blur kernels (same for every seed).")
    image_size: int = Field(64, ge=16, le=512, description="skimage: side after centre crop + anti-aliased resize (paper FFHQ 256).")
    n_train: int | None = Field(None, ge=1, le=8, description="M training measurements / decoders (None: 4 natural, 5 MRI).")
    test_image: str | None = Field(None, description="skimage: override the test image (default: shepp_logan_phantom for "
                                   "MRI, astronaut otherwise).")
    sr_scale: Literal[2, 4] = Field(4, description="Super-resolution factor (paper x4; CPU claim x2).")
    noise_sigma: float = Field(0.02, ge=0.0, le=1.0, description="Gaussian measurement noise of SR / deblur.")
    blur_length: int = Field(9, ge=1, le=31, description="deblur: motion kernel length (px), random angle from data_seed.")
    blur_sigma: float = Field(0.5, gt=0.0, le=5.0, description="deblur: Gaussian convolved with the motion kernel (px).")
    blur_response: float = Field(3.0, gt=0.0, le=20.0, description="deblur: a of g(u) = (1 - exp(-a u)) / (1 - exp(-a)).")
    n_coils: int = Field(4, ge=1, le=8, description="MRI simulation: coils C.")
    mask_fraction: float = Field(0.25, gt=0.0, le=1.0, description="MRI: sampled fraction of phase-encode lines (4x).")
    center_fraction: float = Field(0.08, gt=0.0, le=1.0, description="MRI: fully sampled centre (fraction of lines).")
    mri_noise: float = Field(0.01, ge=0.0, le=1.0, description="MRI simulation: complex noise sigma / max |k|.")
    sens_maps_path: str | None = Field(None, description="fastmri: precomputed maps (.npy or .h5 key sens_maps); None: estimate.")
    sens_estimator: Literal["lowres", "espirit"] = Field("lowres", description="fastmri without maps: low-res ACS ratio or ESPIRiT (sigpy).")
    mask_path: str | None = Field(None, description="fastmri: mask .npy bool [H,W] or [W]; None: a VD mask from data_seed.")
    fastmri_slice: int | None = Field(None, ge=0, description="fastmri: slice index (None: the middle slice).")

    # --- networks -------------------------------------------------------------------------------------
    channels: int = Field(128, ge=4, le=256, description="Skip net width (paper 128; CPU 32).")
    scales: int = Field(5, ge=1, le=6, description="Skip net scales (paper 5; CPU 4).")
    skip_channels: int = Field(4, ge=0, le=64, description="Skip-branch channels per scale.")
    unet_widths: list[int] = Field([64, 128, 256, 256], min_length=4, max_length=4,
                                   description="MRI U-Net widths (paper 64-128-256-256; CPU 16-32-64-64).")

    # --- training (shared encoder + M decoders) ----------------------------------------------------------
    lam: float = Field(2.0, ge=0.0, le=100.0, description="Autoencoding weight lambda (natural images).")
    lr: float | None = Field(None, gt=0.0, le=1.0, description="Adam lr of training (None: 0.01 natural, 3e-4 MRI; CPU MRI 1e-3).")
    inner_steps: int = Field(10, ge=1, le=1000, description="N: gradient steps between input updates (natural images).")
    train_iterations: int | None = Field(None, ge=1, le=1_000_000, description="Adam steps of training (None: 20k natural, 5k MRI; CPU 800).")
    val_iterations: int = Field(300, ge=0, le=100_000, description="Test-time fit on the VALIDATION image at the end of "
                                "training; its EMA PSNR is eval/val_psnr (the Tune objective). 0: skip.")
    # --- test-time reconstruction -------------------------------------------------------------------------
    arm: Arm = Field("ugodit", description="reconstruct: ugodit (trained encoder + fresh decoder), aseqdip (all random, "
                     "same objective), dip (vanilla: fixed input, lambda 0), random_encoder (frozen untrained encoder).")
    encoder_from: str | None = Field(None, description="reconstruct/ugodit: a train run folder or checkpoint "
                                     "(None: train the encoder first in the same process).")
    freeze_encoder: bool = Field(True, description="Freeze E at test (paper's method; the MRI notebook trains it).")
    test_lr: float | None = Field(None, gt=0.0, le=1.0, description="Adam lr at test (None: 0.01 natural, 4e-4 MRI; CPU MRI 1e-3).")
    test_iterations: int | None = Field(None, ge=1, le=1_000_000, description="Test-time Adam steps (None: 20k natural, 10k MRI; CPU 400).")
    ema_decay: float = Field(0.99, ge=0.0, lt=1.0, description="Exponential moving average of the outputs (reported).")
    mri_test_reg: float = Field(0.001, ge=0.0, le=10.0, description="MRI test: weight of ||s z - x|| and ||x - x_prev||.")
    mri_input_noise: float = Field(1e-5, ge=0.0, le=1.0, description="MRI: uniform noise added to the re-projected input.")
    mri_z_perturbations: int = Field(3, ge=1, le=16, description="MRI test: noisy re-projections averaged into z.")
    log_every: int = Field(10, ge=1, le=100_000, description="PSNR/SSIM curve period (iterations).")
    checkpoint_every: int = Field(200, ge=1, le=1_000_000, description="Training checkpoint period (iterations).")

    # resolved task-dependent values
    def family(self) -> str:
        return "mri" if self.task == "mri_multicoil" else "natural"

    def value(self, name: str):
        v = getattr(self, name)
        return PAPER[self.family()][name] if v is None else v

    @model_validator(mode="after")
    def _check(self):
        if self.data in ("png_folder", "fastmri") and not self.data_dir:
            raise ValueError(f"data={self.data} needs data_dir")
        if self.data == "fastmri" and self.task != "mri_multicoil":
            raise ValueError("data=fastmri needs task=mri_multicoil")
        if self.data == "fashion_mnist" and self.task == "mri_multicoil":
            raise ValueError("fashion_mnist is for super_resolution / deblur_nonlinear")
        if self.data == "skimage" and self.task == "super_resolution" and self.image_size % self.sr_scale:
            raise ValueError(f"image_size {self.image_size} is not a multiple of sr_scale {self.sr_scale}")
        if self.data == "skimage" and self.task == "mri_multicoil" and self.image_size % 8:
            raise ValueError("the MRI U-Net needs image_size divisible by 8")
        if self.test_image is not None:
            from methodlab.data.ugodit_images import SKIMAGE_NAMES

            if self.test_image not in SKIMAGE_NAMES:
                raise ValueError(f"test_image {self.test_image!r} not shipped; allowed: {sorted(SKIMAGE_NAMES)}")
        return self
