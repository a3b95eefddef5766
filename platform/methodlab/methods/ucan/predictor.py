"""Serve ucan. Two apps, two Predictor classes; `Predictor.from_checkpoint` returns the one matching the
checkpoint's task:
- point cloud (serve/ucan.yaml, checkpoint of jobs/ucan/train_analytic.yaml): a noisy cloud of 16..16,384 points
  in, the denoised cloud out (same order and scale) + the mean displacement;
- image (serve/ucan_image.yaml, config-only checkpoint of jobs/ucan/image_denoise.yaml): a base64 PNG (sides
  16..128 px, even) in, the zero-shot denoised PNG out (ZS-N2N, with L_DC unless consistency is false).
`Input` / `Output` are the generic supersets; `input_model()` is the served checkpoint's own request schema."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.core.images import decode_b64_image
from methodlab.methods.ucan.config import Config

MAX_POINTS = 16_384
MIN_POINTS = 16
COORD = 1e6  # |coordinate| bound: keeps every norm and mean finite in float64
Coord = Annotated[float, Field(ge=-COORD, le=COORD, allow_inf_nan=False)]
Point = Annotated[list[Coord], Field(min_length=3, max_length=3)]
MAX_SIDE, MIN_SIDE, MAX_ITERS = 128, 16, 200
MAX_B64 = 1_000_000  # characters of base64 PNG (the app's payload limit is 1 MiB)


class Input(BaseModel):
    """Generic superset: `points` (+ steps, patch_size) for the point-cloud app, `image` (+ iterations,
    consistency) for the image app. Each served checkpoint's own schema is `Predictor.input_model()`."""

    model_config = ConfigDict(extra="forbid")
    points: list[Point] | None = Field(None, min_length=MIN_POINTS, max_length=MAX_POINTS,
                                       description="Noisy cloud: [[x, y, z], ...], 16..16,384 finite points.")
    steps: int = Field(3, ge=1, le=5, description="Denoising steps (at most the checkpoint's S).")
    patch_size: int = Field(1000, ge=256, le=2048, description="Points per inference patch.")
    image: str | None = Field(None, min_length=1, max_length=MAX_B64,
                              description="Base64 PNG, grayscale or RGB, sides 16..128 px and even.")
    iterations: int = Field(100, ge=1, le=MAX_ITERS, description="Zero-shot fitting iterations.")
    consistency: bool = Field(True, description="Add the U-CAN consistency loss L_DC to ZS-N2N.")


class Output(BaseModel):
    """Point app: points + displacement_norm_mean; image app: image + iterations + final_loss."""

    points: list[list[float]] | None = Field(None, description="Denoised cloud, same order and scale as the input.")
    displacement_norm_mean: float | None = Field(None, description="Mean |output - input| in input units.")
    image: str | None = Field(None, description="Denoised image, base64 PNG.")
    iterations: int | None = None
    final_loss: float | None = None


class Predictor:
    """The class the registry names; `from_checkpoint` dispatches on the checkpoint's task."""

    Input = Input
    Output = Output

    @classmethod
    def from_checkpoint(cls, directory, device=None):
        """The checkpoint's predictor on `device` (a str or torch.device; None: CPU)."""
        ck = load_checkpoint(directory, method="ucan")
        cfg = Config.model_validate(ck.config)
        device = torch.device(device if device is not None else "cpu")
        if ck.state.get("task") == "image":
            return ImagePredictor(cfg, device)
        return PointPredictor.from_loaded(ck, cfg, device)

    def input_model(self) -> type[BaseModel]:
        """The served checkpoint's request schema (the subclass of the checkpoint's task specialises it)."""
        return Input

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        rng = np.random.default_rng(0)
        p = rng.normal(size=(300, 3))
        p = p / np.linalg.norm(p, axis=1, keepdims=True) + 0.02 * rng.normal(size=(300, 3))
        return [Input(points=p.round(6).tolist(), steps=min(3, cfg.steps)),
                Input(points=(5.0 * p[:40] + 10.0).round(6).tolist(), steps=1, patch_size=256)]


class PointPredictor(Predictor):
    def __init__(self, net, cfg: Config, step: int):
        self.net, self.cfg, self.step = net.eval(), cfg, step
        self.device = next(net.parameters()).device

    @classmethod
    def from_loaded(cls, ck, cfg: Config, device=None) -> "PointPredictor":
        from methodlab.methods.ucan.model import build_net

        with torch.device(device if device is not None else "cpu"):
            net = build_net(cfg)
        net.load_state_dict(ck.weights)
        return cls(net, cfg, int(ck.state.get("step", 0)))

    def input_model(self) -> type[BaseModel]:
        s = self.cfg.steps
        return create_model(
            "Input", __config__=ConfigDict(extra="forbid"),
            __doc__=(f"A noisy point cloud for a U-CAN model trained with S = {s} steps. Points are finite [x, y, z] "
                     f"triples with |coordinate| <= {COORD:g}; any scale and position (the cloud is normalised to "
                     "its unit bounding sphere and mapped back). Larger clouds: jobs/ucan/denoise.yaml."),
            points=(list[Point], Field(..., min_length=MIN_POINTS, max_length=MAX_POINTS,
                                       description=f"Noisy cloud, {MIN_POINTS}..{MAX_POINTS} points.")),
            steps=(int, Field(min(3, s), ge=1, le=s, description=f"Denoising steps, 1..{s} (the model's S).")),
            patch_size=(int, Field(1000, ge=256, le=2048, description="Points per inference patch.")),
        )

    @torch.no_grad()
    def __call__(self, inputs: list) -> list[Output]:
        from methodlab.methods.ucan.model import denoise_cloud

        out = []
        for i, x in enumerate(inputs):
            pts = getattr(x, "points", None)
            if pts is None:
                raise FieldError(f"[{i}].points", "required: this endpoint denoises point clouds")
            arr = np.asarray(pts, dtype=np.float64)
            if arr.ndim != 2 or arr.shape[1] != 3:
                raise FieldError(f"[{i}].points", "every point must be 3 numbers [x, y, z]")
            if not (MIN_POINTS <= len(arr) <= MAX_POINTS):
                raise FieldError(f"[{i}].points", f"{len(arr)} points; {MIN_POINTS}..{MAX_POINTS} allowed")
            if not np.isfinite(arr).all() or np.abs(arr).max() > COORD:
                raise FieldError(f"[{i}].points", f"coordinates must be finite with |x| <= {COORD:g}")
            steps = int(getattr(x, "steps", 3))
            if steps > self.cfg.steps:
                raise FieldError(f"[{i}].steps", f"this model was trained with S = {self.cfg.steps} steps")
            res = denoise_cloud(self.net, arr, steps, int(getattr(x, "patch_size", 1000)))  # patches on self.device
            if not np.isfinite(res).all():
                res = arr  # never answer non-finite numbers
            out.append(Output(points=res.tolist(), displacement_norm_mean=float(np.linalg.norm(res - arr, axis=1).mean())))
        return out


def decode_png(data: str, field: str) -> np.ndarray:
    """base64 PNG -> float64 array in [0, 1] (grayscale or RGB); sides even and MIN_SIDE..MAX_SIDE."""
    arr = decode_b64_image(data, field, formats=("PNG",), mode="auto", min_side=MIN_SIDE, max_side=MAX_SIDE)
    h, w = arr.shape[:2]
    if w % 2 or h % 2:  # ZS-N2N's 2x2 pair downsampler needs even sides
        raise FieldError(field, f"sides must be even and {MIN_SIDE}..{MAX_SIDE} px, got {w} x {h}")
    return arr.astype(np.float64) / 255.0


class ImagePredictor(Predictor):
    """Zero-shot: every request fits the tiny ZS-N2N CNN on its own image (no learned weights are served)."""

    def __init__(self, cfg: Config, device=None):
        self.cfg = cfg
        self.device = torch.device(device if device is not None else "cpu")

    def input_model(self) -> type[BaseModel]:
        return create_model(
            "Input", __config__=ConfigDict(extra="forbid"),
            __doc__=(f"A noisy image as base64 PNG (grayscale or RGB), sides even and {MIN_SIDE}..{MAX_SIDE} px; "
                     "the schema cannot state the PNG conditions: other bytes answer 422 naming `image`."),
            image=(str, Field(..., min_length=1, max_length=MAX_B64, description="Base64 PNG.")),
            iterations=(int, Field(100, ge=1, le=MAX_ITERS, description="Zero-shot fitting iterations.")),
            consistency=(bool, Field(self.cfg.consistency, description="Add L_DC (U-CAN) to ZS-N2N.")),
        )

    def __call__(self, inputs: list) -> list[Output]:
        from methodlab.methods.ucan.settings import png_b64
        from methodlab.methods.ucan.model import fit_zsn2n

        out = []
        for i, x in enumerate(inputs):
            data = getattr(x, "image", None)
            if data is None:
                raise FieldError(f"[{i}].image", "required: this endpoint denoises images")
            img = decode_png(data, f"[{i}].image")
            iters = int(getattr(x, "iterations", 100))
            den, info = fit_zsn2n(img, iters, bool(getattr(x, "consistency", True)), self.cfg.image_lr,
                                  self.cfg.image_decay_every, self.cfg.image_channels, self.cfg.image_lambda_dc,
                                  self.cfg.seed, device=self.device)
            loss = info["loss"] if math.isfinite(info["loss"]) else None
            out.append(Output(image=png_b64(den), iterations=iters, final_loss=loss))
        return out
