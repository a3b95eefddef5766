"""Serve a ctsketch perception net: a list of N images (8x8 or 28x28, floats in [0, 1], flat or nested rows) ->
per-digit probabilities, argmax digits, the program output on them, and the sketched tree's expected output.
N need not be a power of two: the tree input is padded with one-hot zero digits (they change neither a sum
nor a max). A wrong image size or a ragged image answers 422 naming the field."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.ctsketch.config import Config
from methodlab.methods.ctsketch.data import normalise
from methodlab.methods.ctsketch.model import build_net
from methodlab.methods.ctsketch.tree import expected_output, make_tree

Pixel = Annotated[float, Field(ge=0.0, le=1.0)]
Image = Union[Annotated[list[Pixel], Field(min_length=1, max_length=784)],
              Annotated[list[Annotated[list[Pixel], Field(min_length=1, max_length=28)]], Field(min_length=1, max_length=28)]]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    images: list[Image] = Field(..., min_length=1, max_length=1024,
                                description="N images (1 <= N <= 1024), each side x side floats in [0, 1] (flat or rows); "
                                            "side = the checkpoint's (8 or 28).")
    program: Literal["sum", "max"] | None = Field(None, description="Program applied to the digits; None: the checkpoint's task.")


class Output(BaseModel):
    digit_probs: list[list[float]]
    digits: list[int]
    program_output: int = Field(..., description="Sum or max of the argmax digits.")
    expected_output_sketch: float = Field(..., description="Expected sum from the tree, or expected max under the root distribution.")
    output_probs: list[float] | None = Field(None, description="max: distribution of the max over 0..9; sum: null.")
    sketch_rel_error: float
    model_version: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, net, side: int, version: str, device=None):
        self.device = torch.device("cpu" if device is None else device)
        self.cfg, self.net, self.side, self.version = cfg, net.to(self.device).eval(), side, version
        self._trees: dict = {}

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """Weights loaded onto `device` (None: CPU; a str or torch.device); the sketches live there too."""
        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="ctsketch")
        cfg = Config.model_validate(ck.config)
        side = int(ck.state.get("side", 8 if cfg.dataset == "digits8x8" else 28))
        with device:
            net = build_net(cfg.net_kind, side)
        pre = "best." if any(k.startswith("best.") for k in ck.weights) else "net."  # best-validation weights
        net.load_state_dict({k[len(pre):]: v for k, v in ck.weights.items() if k.startswith(pre)})
        return cls(cfg, net, side, f"ctsketch-{cfg.task}-N{cfg.N}-step{ck.state.get('step', 0)}", device)

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: 1..N images of side x side pixels (flat), the program optional."""
        s, n = self.side, max(1, int(self.cfg.N))
        flat = Annotated[list[Pixel], Field(min_length=s * s, max_length=s * s)]
        return create_model("Input", __config__=ConfigDict(extra="forbid"),
                            __doc__=f"{s}x{s} images in [0, 1], flattened row-major; at most N = {n} per request "
                                    "(the program's arity this checkpoint was trained for).",
                            images=(list[flat], Field(..., min_length=1, max_length=n)),
                            program=(Literal["sum", "max"] | None, Field(None, description="None: the checkpoint's task.")))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        side = 8 if cfg.dataset == "digits8x8" else 28
        g = torch.Generator(device="cpu").manual_seed(0)
        imgs = torch.rand(3, side, side, generator=g, device="cpu")  # host data: request payloads
        return [Input(images=[im.reshape(-1).tolist() for im in imgs]),
                Input(images=[im.tolist() for im in imgs[:2]], program="max")]

    def _pixels(self, i: int, x: Input) -> torch.Tensor:
        s = self.side
        out = []
        for j, im in enumerate(x.images):
            where = f"[{i}].images[{j}]"
            if im and isinstance(im[0], list):
                if len(im) != s or any(len(r) != s for r in im):
                    raise FieldError(where, f"expected {s} rows of {s} pixels (this checkpoint is {s}x{s})")
                flat = [v for r in im for v in r]
            else:
                if len(im) != s * s:
                    raise FieldError(where, f"expected {s * s} pixels ({s}x{s}, this checkpoint's size), got {len(im)}")
                flat = im
            out.append(flat)
        t = torch.tensor(out, dtype=torch.float32, device="cpu").reshape(-1, s, s)  # validated on the host
        if not torch.isfinite(t).all():
            raise FieldError(f"[{i}].images", "pixels must be finite")
        return normalise(t, self.cfg.dataset)

    def _tree(self, task: str, n: int):
        key = (task, n)
        if key not in self._trees:
            c = self.cfg
            rank = c.rank if (c.rank is not None and task == c.task) else (2 if task == "sum_N" else 10)
            self._trees[key] = make_tree(task, n, c.method, rank, c.sketch_seed, c.sigma_floor, device=self.device)
        return self._trees[key]

    @torch.no_grad()
    def _one(self, x: torch.Tensor, program: str | None) -> Output:
        task = {"sum": "sum_N", "max": "max_N", None: self.cfg.task}[program]
        p = torch.softmax(self.net(x), -1)
        digits = p.argmax(-1)
        n = len(digits)
        n2 = max(2, 1 << (n - 1).bit_length())
        pad = torch.zeros(n2 - n, 10, device=self.device)
        pad[:, 0] = 1.0  # one-hot zero digits: neutral for sum and max
        tree = self._tree(task, n2)
        out = tree(torch.cat([p, pad])[None])
        exp = float(expected_output(task, out)[0])
        return Output(digit_probs=p.tolist(), digits=digits.tolist(),
                      program_output=int(digits.sum() if task == "sum_N" else digits.max()),
                      expected_output_sketch=exp if math.isfinite(exp) else 0.0,
                      output_probs=out[0].tolist() if task == "max_N" else None,
                      sketch_rel_error=float(max(tree.rel_errors)), model_version=self.version)

    def __call__(self, inputs: list[Input]) -> list[Output]:
        xs = [self._pixels(i, x) for i, x in enumerate(inputs)]  # host tensors, checked per request
        if xs:  # one copy of the batch's pixels to the device, split back per request
            sizes = [len(x) for x in xs]
            xs = list(torch.cat(xs).to(self.device).split(sizes))
        return [self._one(x, inp.program) for x, inp in zip(xs, inputs)]
