"""Serve a trained model: `a op b` -> predicted c with the top-5 probabilities (or digits pixels -> class)."""

from __future__ import annotations

import torch
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.data.modular import Vocab, apply_op
from methodlab.methods.grokking_flatness.config import Config
from methodlab.methods.grokking_flatness.model import build_model

import numpy as np


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int | None = Field(None, ge=0, le=210, description="Left operand, 0 <= a < p (modular task).")
    b: int | None = Field(None, ge=0, le=210, description="Right operand, 0 <= b < p (modular task).")
    op: str = Field("+", max_length=16, description="Must be the operation the model was trained on.")
    pixels: list[float] | None = Field(None, min_length=64, max_length=64,
                                       description="Digits task: 64 grey levels in [0, 16].")


class Output(BaseModel):
    c: int = Field(description="Predicted result (modular) or digit class.")
    probs_top5: list[tuple[int, float]] = Field(description="[token, probability] pairs, most likely first.")
    correct: bool | None = Field(None, description="Whether c is the true result (modular task).")
    model_step: int


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, model, cfg: Config, step: int, history: list[dict], device="cpu"):
        self.model, self.cfg, self.step, self.history = model.eval(), cfg, step, history
        self.device = torch.device(device)

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The checkpoint's model on `device` (None: the CPU; a str or torch.device)."""
        device = torch.device(device if device is not None else "cpu")
        ck = load_checkpoint(directory, method="grokking_flatness")
        cfg = Config.model_validate(ck.config)
        with device:
            model = build_model(cfg, Vocab(cfg.p).size if cfg.task == "modular" else None)
        model.load_state_dict(ck.weights)
        return cls(model, cfg, int(ck.state.get("step", 0)), ck.extras.get("history", []), device)

    def input_model(self) -> type[BaseModel]:
        """The request schema of this checkpoint: its task's fields required, its modulus and operation."""
        strict = ConfigDict(extra="forbid")
        if self.cfg.task == "digits":
            return create_model("Input", __config__=strict, __doc__="An 8x8 digit: 64 grey levels in [0, 16].",
                                pixels=(list[Annotated[float, Field(ge=0, le=16)]], Field(..., min_length=64, max_length=64)))
        p, op = self.cfg.p, self.cfg.op
        low_b = 1 if op == "/" else 0  # division by 0 is undefined
        return create_model("Input", __config__=strict,
                            __doc__=f"a {op} b (mod {p}): operands are residues mod {p}; the model was trained on {op!r} only.",
                            a=(int, Field(..., ge=0, le=p - 1, description=f"Left operand, 0 <= a < {p}.")),
                            b=(int, Field(..., ge=low_b, le=p - 1, description=f"Right operand, {low_b} <= b < {p}.")),
                            op=(Literal[op], Field(op, description="The operation the model was trained on.")))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        if cfg.task == "digits":
            return [Input(pixels=[0.0] * 28 + [16.0] * 8 + [0.0] * 28)]
        return [Input(a=3, b=5, op=cfg.op), Input(a=cfg.p - 1, b=1, op=cfg.op)]

    def _check(self, i: int, x: Input) -> None:
        where = f"[{i}]"
        if self.cfg.task == "digits":
            if x.pixels is None:
                raise FieldError(f"{where}.pixels", "required: this model classifies 8x8 digits")
            if not all(np.isfinite(v) and 0 <= v <= 16 for v in x.pixels):
                raise FieldError(f"{where}.pixels", "values must be finite grey levels in [0, 16]")
            return
        p = self.cfg.p
        for name in ("a", "b"):
            v = getattr(x, name)
            if v is None:
                raise FieldError(f"{where}.{name}", "required for the modular task")
            if v >= p:
                raise FieldError(f"{where}.{name}", f"must be < p = {p}")
        if x.op != self.cfg.op:
            raise FieldError(f"{where}.op", f"this model was trained on {self.cfg.op!r} only")
        if x.op == "/" and x.b == 0:
            raise FieldError(f"{where}.b", "division by 0 is undefined")

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        for i, x in enumerate(inputs):
            self._check(i, x)
        if self.cfg.task == "digits":
            xs = torch.tensor([x.pixels for x in inputs], dtype=torch.float32, device=self.device) / 16.0
            probs = torch.softmax(self.model(xs)[0], -1)
            truth = [None] * len(inputs)
        else:
            v = Vocab(self.cfg.p)
            a = np.array([x.a for x in inputs])
            b = np.array([x.b for x in inputs])
            rows = torch.tensor(np.stack([np.full(len(a), v.eos), a, np.full(len(a), v.op_token), b,
                                          np.full(len(a), v.eq)], 1), dtype=torch.long, device=self.device)
            logits, _ = self.model(rows)
            probs = torch.softmax(logits[:, 0], -1)  # position predicting c
            truth = apply_op(self.cfg.op, a, b, self.cfg.p).tolist()
        top_p, top_i = (t.cpu() for t in probs.topk(5, dim=-1))  # one copy back per batch
        out = []
        for k in range(len(inputs)):
            c = int(top_i[k, 0])
            out.append(Output(c=c, probs_top5=[(int(i), float(q)) for i, q in zip(top_i[k], top_p[k])],
                              correct=None if truth[k] is None else c == truth[k], model_step=self.step))
        return out

    def metrics(self) -> dict:
        """The logged trajectories of the run that produced this checkpoint."""
        keys = {"steps": "step", "train_acc": "train/accuracy", "val_acc": "val/accuracy", "rf": "rf", "cdnv": "cdnv"}
        return {name: [h.get(k) for h in self.history] for name, k in keys.items()}
