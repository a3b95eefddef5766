"""Serving ugodit: a degraded measurement in, the test-time reconstruction out (fresh decoder, the checkpoint's
frozen encoder, at most 200 Adam steps), with the final loss and the data-consistency PSNR between A(x) and y.

Arrays travel as JSON lists: an image measurement [h][w] in [0, 1]; MRI k-space and coil maps as
[C][H][W][2] (real, imag) and the mask as [W] lines or [H][W] booleans. The served schema (`input_model()`)
is the checkpoint's: its task, image size (measurement h x w = H/scale x W/scale for SR), coil count.
The per-request fit runs on the predictor's device (from_checkpoint(..., device)); threads are the runner's."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.ugodit.config import Config, Task

Pixel = Annotated[float, Field(ge=0.0, le=1.0)]
KVal = Annotated[float, Field(ge=-1e4, le=1e4)]
SVal = Annotated[float, Field(ge=-10.0, le=10.0)]
Row = Annotated[list[Pixel], Field(min_length=1, max_length=128)]
Image2D = Annotated[list[Row], Field(min_length=1, max_length=128)]
Complex4D = list[list[list[Annotated[list[float], Field(min_length=2, max_length=2)]]]]
MIN_SIDE, MAX_SIDE = 16, 128


class Input(BaseModel):
    """Generic request (the superset). The reconstruction's sides must lie in 16..128 and be multiples of 16 (SR:
    measurement side x scale); MRI needs kspace, mask and sens_maps of matching shapes and >= 1 sampled line."""

    model_config = ConfigDict(extra="forbid")
    task: Task = Field(..., description="Selects the operator; must be the served checkpoint's task.")
    measurement: Union[Image2D, Complex4D] = Field(..., description="SR / deblur: image [h][w] in [0,1]; MRI: "
                                                   "k-space [C][H][W][2] (real, imag), C in 1..8.")
    mask: Union[list[bool], list[list[bool]], None] = Field(None, description="MRI only: sampled lines [W] or [H][W].")
    sens_maps: Complex4D | None = Field(None, description="MRI only: coil maps [C][H][W][2].")
    scale: Literal[2, 4] | None = Field(None, description="SR only: factor (default: the checkpoint's).")
    blur_angle_deg: float | None = Field(None, ge=0.0, le=180.0, description="deblur only: angle (deg) of the known motion kernel (default 0).")
    iterations: int = Field(100, ge=1, le=200, description="Test-time Adam steps.")


class Output(BaseModel):
    image: list[list[float]] = Field(..., description="Reconstruction [H][W] (EMA of the outputs; magnitude for MRI).")
    iterations: int
    final_loss: float
    measurement_psnr_db: float = Field(..., description="PSNR between A(x) and y (data consistency, no ground truth).")


def _fixed(item, n: int):
    return Annotated[list[item], Field(min_length=n, max_length=n)]


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, weights: dict, shape: tuple[int, int], device=None):
        self.cfg, self.shape = cfg, shape
        self.device = torch.device(device if device is not None else "cpu")
        self.encoder_state = {k[len("encoder."):]: v.to(self.device) for k, v in weights.items()
                              if k.startswith("encoder.")}
        self.arm = cfg.arm if cfg.arm in ("aseqdip", "dip", "random_encoder") else "ugodit"

    @classmethod
    def from_checkpoint(cls, directory: str | Path, device=None) -> "Predictor":
        """The checkpoint's encoder on `device` (a str or torch.device; None: CPU); requests are fitted there."""
        ck = load_checkpoint(directory, method="ugodit")
        cfg = Config.model_validate(ck.config)
        prob = ck.extras.get("problem") or {}
        shape = tuple(prob.get("shape") or (cfg.image_size, cfg.image_size))
        return cls(cfg, ck.weights, shape, device)

    def input_model(self) -> type[BaseModel]:
        cfg = self.cfg
        H, W = self.shape
        H, W = min(max(H, MIN_SIDE), MAX_SIDE) // 16 * 16, min(max(W, MIN_SIDE), MAX_SIDE) // 16 * 16
        task_t = Literal[cfg.task]  # type: ignore[valid-type]
        if cfg.task == "mri_multicoil":
            C = cfg.n_coils
            cpx = Annotated[list[KVal], Field(min_length=2, max_length=2)]
            kspace = _fixed(_fixed(_fixed(cpx, W), H), C)
            scpx = Annotated[list[SVal], Field(min_length=2, max_length=2)]
            sens = _fixed(_fixed(_fixed(scpx, W), H), C)
            doc = (f"MRI reconstruction for this checkpoint: k-space and coil maps [{C}][{H}][{W}][2] (real, imag), "
                   f"mask of {W} phase-encode lines (true = sampled; at least one line must be sampled).")
            return create_model("Input", __config__=ConfigDict(extra="forbid"), __doc__=doc,
                                task=(task_t, Field(...)),
                                measurement=(kspace, Field(..., description="k-space [C][H][W][2]")),
                                mask=(_fixed(bool, W), Field(..., description="sampled lines [W]")),
                                sens_maps=(sens, Field(..., description="coil maps [C][H][W][2]")),
                                iterations=(int, Field(100, ge=1, le=200)))
        s = cfg.sr_scale if cfg.task == "super_resolution" else 1
        img = _fixed(_fixed(Pixel, W // s), H // s)
        doc = (f"{cfg.task} for this checkpoint: a degraded image [{H // s}][{W // s}] with values in [0, 1]; "
               f"the reconstruction is {H} x {W}.")
        fields = {"task": (task_t, Field(...)),
                  "measurement": (img, Field(..., description="degraded image [h][w] in [0, 1]")),
                  "iterations": (int, Field(100, ge=1, le=200))}
        if cfg.task == "super_resolution":
            fields["scale"] = (Literal[cfg.sr_scale] | None, Field(None, description="SR factor (the checkpoint's)."))  # type: ignore[valid-type]
        else:
            fields["blur_angle_deg"] = (float, Field(0.0, ge=0.0, le=180.0, description=(
                f"angle of the known motion kernel (length {cfg.blur_length} px, Gaussian sigma {cfg.blur_sigma} px)")))
        return create_model("Input", __config__=ConfigDict(extra="forbid"), __doc__=doc, **fields)

    @staticmethod
    def example_inputs(cfg: Config) -> list:
        H = W = max(MIN_SIDE, min(MAX_SIDE, cfg.image_size // 16 * 16))
        yy, xx = np.meshgrid(np.linspace(0, 1, H), np.linspace(0, 1, W), indexing="ij")
        img = (0.5 + 0.4 * np.sin(6 * xx) * np.cos(4 * yy)).astype(np.float32)
        if cfg.task == "mri_multicoil":
            from methodlab.data.ugodit_mri import simulate_multicoil

            sim = simulate_multicoil(img, np.random.default_rng(0), cfg.n_coils)
            cp = lambda a: np.stack([a.real, a.imag], -1).astype(float).tolist()  # noqa: E731
            return [Input(task=cfg.task, measurement=cp(sim["kspace"]), mask=sim["mask"][0].tolist(),
                          sens_maps=cp(sim["sens_maps"]), iterations=5)]
        x = torch.as_tensor(img, device="cpu")[None, None]
        if cfg.task == "super_resolution":
            y = torch.nn.functional.avg_pool2d(x, cfg.sr_scale)
        else:
            y = x
        return [Input(task=cfg.task, measurement=y[0, 0].numpy().astype(float).tolist(), iterations=5)]

    # ------------------------------------------------------------------------------------------------
    def _problem(self, item, i: int):
        """The request's problem, built on the host (validated there); __call__ moves it to the device once."""
        from methodlab.methods.ugodit.data import mri_problem
        from methodlab.methods.ugodit.operators import Problem, motion_kernel, natural_input

        cfg = self.cfg
        if item.task != cfg.task:
            raise FieldError(f"[{i}].task", f"this deployment serves {cfg.task!r} (its checkpoint), not {item.task!r}")
        if cfg.task == "mri_multicoil":
            try:
                k = np.asarray(item.measurement, dtype=np.float64)
            except ValueError:
                raise FieldError(f"[{i}].measurement", "k-space must be a rectangular [C][H][W][2] array") from None
            if k.ndim != 4 or k.shape[-1] != 2 or not 1 <= k.shape[0] <= 8:
                raise FieldError(f"[{i}].measurement", "k-space must be [C][H][W][2] with C in 1..8")
            C, H, W = k.shape[:3]
            self._check_side(H, W, i, "measurement")
            if item.sens_maps is None or item.mask is None:
                raise FieldError(f"[{i}].{'sens_maps' if item.sens_maps is None else 'mask'}", "required for MRI")
            try:
                s = np.asarray(item.sens_maps, dtype=np.float64)
                m = np.asarray(item.mask, dtype=bool)
            except ValueError:
                raise FieldError(f"[{i}].sens_maps", "coil maps must be a rectangular array") from None
            if s.shape != k.shape:
                raise FieldError(f"[{i}].sens_maps", f"shape {list(s.shape)} != k-space shape {list(k.shape)}")
            if m.ndim == 1 and m.shape[0] == W:
                m = np.broadcast_to(m[None], (H, W)).copy()
            if m.shape != (H, W):
                raise FieldError(f"[{i}].mask", f"mask must be [{W}] or [{H}][{W}], got {list(m.shape)}")
            if not m.any():
                raise FieldError(f"[{i}].mask", "no k-space line is sampled")
            if not (np.isfinite(k).all() and np.isfinite(s).all()):
                raise FieldError(f"[{i}].measurement", "non-finite values")
            kc, sc = (k[..., 0] + 1j * k[..., 1]), (s[..., 0] + 1j * s[..., 1])
            if not np.abs(sc).any():
                raise FieldError(f"[{i}].sens_maps", "all coil maps are zero")
            p = mri_problem(kc.astype(np.complex128), m, sc.astype(np.complex128), None, "request")
            p.y, p.sens, p.z0 = p.y.to(torch.complex64), p.sens.to(torch.complex64), p.z0.float()
            return p
        try:
            y = np.asarray(item.measurement, dtype=np.float64)
        except ValueError:
            raise FieldError(f"[{i}].measurement", "the image must be a rectangular [h][w] array") from None
        if y.ndim != 2:
            raise FieldError(f"[{i}].measurement", "an image measurement is [h][w]")
        if not np.isfinite(y).all() or y.min() < 0 or y.max() > 1:
            raise FieldError(f"[{i}].measurement", "values must be finite and in [0, 1]")
        s = 1
        if cfg.task == "super_resolution":
            s = item.scale or cfg.sr_scale
        H, W = y.shape[0] * s, y.shape[1] * s
        self._check_side(H, W, i, "measurement")
        yt = torch.as_tensor(y, dtype=torch.float32, device="cpu")[None, None]
        if cfg.task == "super_resolution":
            p = Problem(cfg.task, yt, natural_input(yt, (H, W)), (H, W), scale=s, name="request")
        else:
            angle = math.radians(float(getattr(item, "blur_angle_deg", 0.0) or 0.0))
            k = torch.as_tensor(motion_kernel(cfg.blur_length, angle, cfg.blur_sigma), device="cpu")[None, None]
            p = Problem(cfg.task, yt, yt.clone(), (H, W), kernel=k, response_a=cfg.blur_response, name="request")
        return p

    @staticmethod
    def _check_side(H: int, W: int, i: int, field: str) -> None:
        for side in (H, W):
            if not (MIN_SIDE <= side <= MAX_SIDE and side % 16 == 0):
                raise FieldError(f"[{i}].{field}", f"reconstruction sides must lie in {MIN_SIDE}..{MAX_SIDE} and be "
                                 f"multiples of 16; got {H} x {W}")

    def __call__(self, inputs: list) -> list[Output]:
        from methodlab.methods.ugodit.algo import fit_measurement

        outs = []
        for i, item in enumerate(inputs):
            p = self._problem(item, i).to(self.device)
            r = fit_measurement(self.cfg, p, self.arm, self.encoder_state if self.arm == "ugodit" else None,
                                seed=self.cfg.seed, iterations=int(item.iterations), log_every=10 ** 9,
                                device=self.device)
            img = np.asarray(r["x_ema"], np.float64)
            if self.cfg.task == "mri_multicoil":
                img = img * p.extra.get("c", 1.0)
            if not (np.isfinite(img).all() and math.isfinite(r["final_loss"]) and math.isfinite(r["measurement_psnr_db"])):
                raise FieldError(f"[{i}].measurement", "the fit diverged to non-finite values for this input")
            img = np.clip(img, -1e30, 1e30)
            outs.append(Output(image=img.astype(np.float32).astype(float).tolist(), iterations=int(item.iterations),
                               final_loss=float(r["final_loss"]), measurement_psnr_db=float(r["measurement_psnr_db"])))
        return outs
