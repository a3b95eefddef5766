"""Typed config of ucan (U-CAN: unsupervised point-cloud denoising with consistency-aware Noise2Noise matching).

Defaults are the spec's platform defaults (the paper's exact layers, loss weights and step count were not
recovered: those fields say "[RECON]"). The CPU acceptance preset lives in jobs/ucan/train_analytic.yaml
(k 16, halved widths, 512-point patches, 2 patch pairs per step, 400 steps)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

Family = Literal["sphere", "ellipsoid", "torus", "capsule", "rounded_box", "capped_cylinder"]
MeshName = Literal["bunny", "fandisk", "kitten"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/p2s"
    mode: ClassVar[Literal["max", "min"]] = "min"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/p2s", "val/cd", "train/loss")
    # spec smoke: one sphere, 256 points, 20 steps (CPU widths, k 16)
    smoke: ClassVar[dict] = {"families": ["sphere"], "n_train_per_family": 1, "n_points": 256, "observations": 2,
                             "max_steps": 20, "k": 16, "enc_widths": [32, 64, 128], "head_widths": [64, 32],
                             "patch_points": 128, "patch_pairs": 1, "eval_every": 20, "checkpoint_every": 20,
                             "eval_sets": ["val"], "eval_patch_size": 256}
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"eval_every"}
    write_paths: ClassVar[tuple[str, ...]] = ("output_path",)  # written by a run: relative = inside its run folder

    seed: int = Field(0, description="Seed of the network initialisation and the patch sampler (data use data_seed).")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrows the runner's torch threads (the job's "
                                      "cpus_per_worker) for this run (ctx.limit_threads); None: the runner's count.")

    # --- data ------------------------------------------------------------------------------------
    data: Literal["analytic", "punet"] = Field("analytic", description="analytic: procedural shapes with exact P2S; punet: a user's PUNet/ScoreDenoise files under punet_root.")
    data_seed: int = Field(0, description="Seed of shapes, surface samples and noise (shared by the training seeds).")
    families: list[Family] = Field(["sphere", "ellipsoid", "torus", "capsule", "rounded_box"], min_length=1,
                                   description="Training families (analytic). capped_cylinder is the held-out test family.")
    n_train_per_family: int = Field(4, ge=1, le=1000, description="Training shapes per family (random parameters).")
    n_points: int = Field(2000, ge=32, le=200_000, description="Points per scan (analytic train/val/test shapes).")
    observations: int = Field(4, ge=2, le=16, description="K: independent noisy scans per training shape (fresh surface sample + noise each).")
    scan_sampling: Literal["fresh", "shared"] = Field(
        "fresh", description="How the K training scans of a shape differ: fresh (a new surface sample + noise each, the "
        "spec's reading) | shared (one clean sample, K noise draws: Noise2NoiseMapping's construction; issue 44 item 10).")
    noise: float = Field(0.02, ge=0.0, le=0.2, description="Gaussian noise std as a fraction of the unit bounding-sphere radius.")
    punet_root: str | None = Field(None, description="data=punet: folder with pointclouds/{train,test}/<res>_poisson/*.xyz and meshes/{train,test}/*.off.")
    punet_resolution: Literal[10000, 50000] = Field(10000, description="data=punet: which Poisson-disk resolution to read.")

    # --- network (the spec's platform default, [RECON]) ----------------------------------------------
    steps: int = Field(3, ge=1, le=5, description="S: denoising steps of the path P_{s+1} = P_s + g(P_s, s) [RECON: 3].")
    k: int = Field(32, ge=2, le=128, description="kNN patch size of the per-point encoder (CPU presets 16).")
    enc_widths: list[int] = Field([64, 128, 256], min_length=1, max_length=6, description="Shared point MLP widths 3 -> ... (CPU presets 32, 64, 128).")
    head_widths: list[int] = Field([128, 64], min_length=1, max_length=6, description="Regression head hidden widths -> 3 (CPU presets 64, 32).")
    step_embed: int = Field(16, ge=1, le=256, description="Width of the step-index embedding.")
    local_scale: bool = Field(True, description="[RECON] divide neighbour offsets by the point's mean kNN distance and scale the displacement back (density invariance).")

    # --- losses ----------------------------------------------------------------------------------
    lambda_dc: float = Field(1.0, ge=0.0, le=100.0, description="Weight of the denoised-geometry consistency loss L_DC [RECON: 1]; 0 = the no-L_DC ablation.")
    dc_distance: Literal["emd", "cd"] = Field("emd", description="Distance inside L_DC (paper ablation: EMD or Chamfer).")
    emd: Literal["exact"] = Field("exact", description="EMD solver: exact bijective assignment (scipy linear_sum_assignment, no gradient through the matching).")
    intermediate_n2n: bool = Field(False, description="[RECON] also apply L_N2N to every intermediate step with weights (s+1)/S.")

    # --- optimisation ----------------------------------------------------------------------------
    lr: float = Field(1e-4, gt=0.0, le=1.0, description="Adam learning rate [RECON: 1e-4].")
    lr_schedule: Literal["constant", "cosine"] = Field("constant", description="constant (spec) or cosine decay to 0 over max_steps (a recipe candidate of the development-seed grid).")
    max_steps: int = Field(400, ge=1, le=10_000_000, description="Optimiser steps (the acceptance budget: 400 for every arm).")
    patch_points: int = Field(1024, ge=16, le=1024, description="Points per training patch (kNN ball around a shared seed); exact EMD is O(N^3): <= 1024.")
    patch_pairs: int = Field(4, ge=1, le=64, description="Patch pairs (two observations of one region) per optimiser step (CPU presets 2).")
    eval_every: int = Field(100, ge=1, description="Evaluate (val/test P2S, CD) every this many steps.")
    eval_at_start: bool = Field(True, description="Also evaluate the untrained network at step 0 (the curve's origin).")
    eval_sets: list[Literal["val", "test"]] = Field(["val", "test"], min_length=1, description="Analytic sets evaluated during training (val is the Tune objective).")
    checkpoint_every: int = Field(100, ge=1, description="Checkpoint every this many steps (and at the end).")
    eval_patch_size: int = Field(1000, ge=16, le=100_000, description="Points per inference patch (FPS seeds, nearest-seed merge).")

    # --- inference jobs (denoise / upsample / eval) ------------------------------------------------
    checkpoint_path: str | None = Field(None, description="denoise/upsample/eval: a trained ucan checkpoint directory, or a run folder (its newest checkpoint).")
    input_path: str | None = Field(None, description="denoise/upsample: point cloud file (.xyz/.txt/.off/.ply/.npy).")
    output_path: str | None = Field(None, description="denoise/upsample/image_denoise: where to write the result (.xyz/.ply/.npy, "
                                    ".png); relative: inside the run folder; default <run folder>/<input stem>_ucan.xyz.")
    infer_steps: int | None = Field(None, ge=1, le=5, description="Steps at inference (default: the checkpoint's S).")
    upsample_ratio: int = Field(4, ge=2, le=32, description="upsample: copies per input point before denoising.")
    upsample_jitter: float = Field(0.01, ge=0.0, le=0.2, description="upsample: Gaussian jitter of the copies (fraction of the unit bounding radius).")
    eval_set: Literal["analytic", "meshes", "punet"] = Field("analytic", description="eval: analytic test shapes (P2S, CD), real meshes (CD, P2M) or a user's PUNet test split.")
    eval_method: Literal["ucan", "knn_mean", "identity"] = Field("ucan", description="eval: the trained model, k-NN mean smoothing, or the noisy input.")
    smoothing_iters: int = Field(1, ge=1, le=20, description="k-NN mean smoothing iterations (baseline).")
    eval_noise_levels: list[float] = Field([0.01, 0.02, 0.03], min_length=1, description="eval meshes/punet: noise std levels (fraction of the radius).")
    meshes: list[MeshName] = Field(["bunny", "fandisk", "kitten"], min_length=1, description="eval meshes: which packaged real meshes.")
    mesh_points: int = Field(10_000, ge=100, le=200_000, description="eval meshes: points sampled area-weighted per mesh.")
    render_family: Family | None = Field(None, description="eval analytic: also return the first test shape of this "
                                         "family before and after denoising (points and exact distances as base64 "
                                         "float16 in render/*), for a report figure; None: no render.")

    # --- 2-D image variant (ZS-N2N + L_DC) ---------------------------------------------------------------
    image_path: str | None = Field(None, description="image_denoise: a noisy image file (PNG/JPEG); None = skimage camera + synthetic noise.")
    image_crop: int | None = Field(None, ge=16, le=4096, description="Centre crop side (camera: rows/cols 192-319 for 128); None = full image (paper).")
    image_sigma: float = Field(25.0, ge=0.0, le=255.0, description="Synthetic Gaussian noise std on the 0-255 scale (25 pass/fail, 50 option).")
    image_iters: int = Field(2000, ge=1, le=100_000, description="ZS-N2N iterations (paper 2000; CPU preset 600).")
    image_lr: float = Field(1e-3, gt=0.0, le=1.0, description="Adam learning rate (ZS-N2N).")
    image_decay_every: int = Field(1000, ge=1, description="Halve the learning rate every this many iterations (CPU preset 300).")
    image_channels: int = Field(48, ge=1, le=512, description="Width of the 2-layer ZS-N2N CNN.")
    consistency: bool = Field(True, description="Add L_DC = ||f(D1 y) - f(D2 y)||^2 (U-CAN); false = plain ZS-N2N.")
    image_lambda_dc: float = Field(1.0, ge=0.0, le=100.0, description="Weight of the image L_DC [RECON: 1].")

    @model_validator(mode="after")
    def _check(self):
        if self.data == "punet" and not self.punet_root:
            raise ValueError("data=punet needs punet_root (PUNet/ScoreDenoise folder layout)")
        if self.k >= self.patch_points:
            raise ValueError(f"k ({self.k}) must be < patch_points ({self.patch_points})")
        if self.patch_points > self.n_points and self.data == "analytic":
            raise ValueError(f"patch_points ({self.patch_points}) must be <= n_points ({self.n_points})")
        if self.infer_steps is not None and self.infer_steps > self.steps and self.checkpoint_path is None:
            pass  # checked against the checkpoint's S when it is loaded
        return self
