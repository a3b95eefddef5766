"""Serve the MERGED network (W = W_g + B A folded once; no low-rank module, no second path): an image in, class
probabilities out (multi-label checkpoints: labels above a threshold with their sigmoid scores).

The image is the checkpoint's shape (8x8 digits, 28x28 Fashion-MNIST, 16x16 mosaics, 32x32x3 CIFAR) with values
in [0, 1]: a flat list (row-major; colour: H x W x 3 interleaved), nested rows, or (generic Input only, e.g.
`methodlab predict`) a base64 PNG. Wrong size, values outside [0, 1] or non-finite, undecodable base64 / PNG, or
top_k out of 1..C answer 422 naming the field. The served schema (`input_model()`) admits the float forms of the
checkpoint's exact shape only: a base64 string is a condition a JSON schema cannot bound, so it is left to the
generic Input."""

from __future__ import annotations

import math
from typing import Annotated, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.core.images import decode_b64_image
from methodlab.methods.more_longtail.config import Config
from methodlab.methods.more_longtail.model import lowrank_modules, merge_lowrank

MAX_SIDE = 256
Pixel = Annotated[float, Field(ge=0.0, le=1.0)]
Row = Union[Pixel, Annotated[list[Pixel], Field(min_length=1, max_length=3)]]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: Union[str, list[Pixel], list[list[Row]]] = Field(
        ..., description="Base64 PNG, a flat row-major list of floats in [0, 1], or H rows of W values (colour: "
                         "W lists of 3); the checkpoint's shape (8x8, 28x28, 16x16, 32x32x3).")
    top_k: int = Field(5, ge=1, le=1000, description="Classes returned (1..C; multi-label: ignored).")
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="Multi-label: score threshold of returned labels.")


class Output(BaseModel):
    classes: list[str] | None = Field(None, description="Multi-class: top_k class names, most likely first.")
    class_ids: list[int] | None = Field(None, description="Multi-class: their ids.")
    probs: list[float] | None = Field(None, description="Multi-class: softmax probabilities of those classes.")
    multilabel: bool
    labels: list[str] | None = Field(None, description="Multi-label: labels with score >= threshold.")
    scores: list[float] | None = Field(None, description="Multi-label: every class's sigmoid score.")
    threshold: float | None = None
    arm: str = Field(description="plain | control | more (the trained arm; the served network is merged).")


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, net, state: dict, device=None):
        self.device = torch.device("cpu" if device is None else device)
        self.cfg, self.net, self.state = cfg, net.to(self.device).eval(), state
        self.c = int(state["n_classes"])
        self.shape = tuple(int(s) for s in state["image_shape"])  # (H, W) or (3, H, W)
        self.names = list(state.get("class_names") or [str(i) for i in range(self.c)])
        self.multilabel = bool(state.get("multilabel", False))

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The merged network on `device` (None: CPU; a str or torch.device)."""
        from methodlab.methods.more_longtail.train import build_net

        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="more_longtail")
        cfg = Config.model_validate(ck.config)
        st = ck.state
        with device:
            net = build_net(cfg, tuple(st["image_shape"]), int(st["n_classes"]), merged=bool(st.get("merged")))
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        merge_lowrank(net.net)  # no-op for plain / already merged checkpoints
        assert not lowrank_modules(net), "the served network must be merged"
        return cls(cfg, net, st, device)

    # --- schema --------------------------------------------------------------------------------------------
    @property
    def hw(self) -> tuple[int, int, int]:
        """(H, W, channels)."""
        return (self.shape[1], self.shape[2], 3) if len(self.shape) == 3 else (self.shape[0], self.shape[1], 1)

    def input_model(self) -> type[BaseModel]:
        h, w, ch = self.hw
        n = h * w * ch
        flat = Annotated[list[Pixel], Field(min_length=n, max_length=n)]
        cell = Pixel if ch == 1 else Annotated[list[Pixel], Field(min_length=3, max_length=3)]
        rows = Annotated[list[Annotated[list[cell], Field(min_length=w, max_length=w)]], Field(min_length=h, max_length=h)]
        kind = "multi-label" if self.multilabel else "multi-class"
        doc = (f"A {h}x{w}{'x3' if ch == 3 else ''} image with values in [0, 1] for this {kind} checkpoint "
               f"({self.c} classes): {n} floats row-major{' (R, G, B interleaved)' if ch == 3 else ''}, or {h} rows "
               f"of {w} {'[R, G, B] triples' if ch == 3 else 'values'}. top_k in 1..{self.c}.")
        return create_model("Input", __config__=ConfigDict(extra="forbid"), __doc__=doc,
                            image=(Union[flat, rows], Field(..., description=f"{h}x{w}{'x3' if ch == 3 else ''} "
                                                                            "image, values in [0, 1].")),
                            top_k=(int, Field(min(5, self.c), ge=1, le=self.c, description=f"Classes returned, 1..{self.c}.")),
                            threshold=(float, Field(0.5, ge=0.0, le=1.0, description="Multi-label score threshold.")))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        shape = {"digits_lt": (8, 8), "fmnist_lt": (28, 28), "digits_mosaic": (16, 16)}.get(cfg.dataset, (32, 32, 3))
        rng = np.random.default_rng(0)
        a = rng.random(shape)
        return [Input(image=a.reshape(-1).round(4).tolist(), top_k=3), Input(image=a.round(4).tolist(), top_k=1)]

    # --- decoding ------------------------------------------------------------------------------------------
    def _png(self, where: str, s: str) -> np.ndarray:
        a = decode_b64_image(s, where, formats=("PNG",), mode="RGB" if self.hw[2] == 3 else "L", max_side=MAX_SIDE)
        return a.astype(np.float32) / 255.0

    def _array(self, i: int, item) -> np.ndarray:
        where = f"[{i}].image"
        h, w, ch = self.hw
        img = item.image
        if isinstance(img, str):
            a = self._png(where, img)
            if a.shape[:2] != (h, w):
                raise FieldError(where, f"PNG is {a.shape[1]}x{a.shape[0]}; this checkpoint takes {w}x{h}")
        else:
            try:
                a = np.asarray(img, dtype=np.float64)
            except (ValueError, TypeError):
                raise FieldError(where, "ragged image: every row must have the same length") from None
            if a.ndim == 1:
                if a.size != h * w * ch:
                    raise FieldError(where, f"{a.size} values; this checkpoint takes {h}x{w}{'x3' if ch == 3 else ''} "
                                            f"= {h * w * ch}")
                a = a.reshape(h, w, ch) if ch == 3 else a.reshape(h, w)
            elif a.shape != ((h, w, 3) if ch == 3 else (h, w)):
                raise FieldError(where, f"shape {list(a.shape)}; this checkpoint takes {[h, w] + ([3] if ch == 3 else [])}")
        if not np.isfinite(a).all():
            raise FieldError(where, "values must be finite")
        if a.min() < 0 or a.max() > 1:
            raise FieldError(where, "values must lie in [0, 1]")
        a = a.astype(np.float32)
        return a.transpose(2, 0, 1) if ch == 3 else a

    @torch.no_grad()
    def __call__(self, inputs: list) -> list[Output]:
        xs = []
        for i, item in enumerate(inputs):
            if not self.multilabel and not 1 <= int(item.top_k) <= self.c:
                raise FieldError(f"[{i}].top_k", f"must lie in 1..{self.c}")
            xs.append(self._array(i, item))
        x = torch.as_tensor(np.stack(xs), device="cpu").to(self.device)  # the batch's pixels: one copy to the device
        z = self.net(x, paths="full").cpu()  # the answers are read on the host
        out = []
        for k, item in enumerate(inputs):
            if self.multilabel:
                s = torch.sigmoid(z[k])
                s = torch.nan_to_num(s, nan=0.0)
                thr = float(item.threshold)
                out.append(Output(multilabel=True, labels=[self.names[j] for j in range(self.c) if float(s[j]) >= thr],
                                  scores=[float(v) for v in s], threshold=thr, arm=self.cfg.arm))
            else:
                p = torch.nan_to_num(torch.softmax(z[k], -1), nan=0.0)
                top_p, top_i = p.topk(int(item.top_k))
                out.append(Output(multilabel=False, classes=[self.names[int(j)] for j in top_i], class_ids=top_i.tolist(),
                                  probs=[float(v) if math.isfinite(float(v)) else 0.0 for v in top_p], arm=self.cfg.arm))
        return out
